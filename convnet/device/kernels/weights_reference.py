"""The numpy reference of weights.cu: the weights scattered into their layouts, the line search's
trial points with their penalty sums, and the refinement's vector operations."""

import numpy as np

from .. import kernel_args
from .host_memory import ReferenceBase


class WeightsReference(ReferenceBase):
    """The numpy reference of weights_reference.py (see the package docstring)."""

    def weights_scatter(self, grid, block, w, n, fwd_index, bwd_index, fwd, bwd):
        assert grid[0] * block[0] >= n
        wv = self.mem.view(w, np.float32, n)
        fi = self.mem.view(fwd_index, np.int32, n).astype(np.int64)
        bi = self.mem.view(bwd_index, np.int32, n).astype(np.int64)
        self.mem.view(fwd, np.float32, int(fi.max()) + 1)[fi] = wv
        keep = bi >= 0
        if keep.any():
            self.mem.view(bwd, np.float32, int(bi.max()) + 1)[bi[keep]] = wv[keep]

    # the line search's kernels (weights.cu): a block of LINE_THREADS threads covers LINE_BLOCK
    # weights, each thread LINE_PER_THREAD of them LINE_THREADS apart, then a halving tree
    @staticmethod
    def _line_block_sums(terms, n, grid, block):
        T, per = kernel_args.LINE_THREADS, kernel_args.LINE_BLOCK // kernel_args.LINE_THREADS
        assert block[0] == T and grid[0] * kernel_args.LINE_BLOCK >= n
        padded = np.zeros(grid[0] * kernel_args.LINE_BLOCK)
        padded[:n] = terms
        acc = np.zeros((grid[0], T))
        lanes = padded.reshape(grid[0], per, T)
        for j in range(per):                              # each thread's own sum, in order
            acc = acc + lanes[:, j, :]
        half = T // 2
        while half:
            acc = acc[:, :half] + acc[:, half:2 * half]
            half //= 2
        return acc[:, 0]

    def line_point(self, grid, block, x, d, t, n, mask, w32, pen_part):
        if t == 0:                                        # NULL: the weights the host sent
            v = self.mem.view(x, np.float64, n).copy()
        else:
            tt = self.mem.view(t, np.float64, 1)[0]
            v = self.mem.view(x, np.float64, n) + tt * self.mem.view(d, np.float64, n)
        self.mem.view(w32, np.float32, n)[:] = v.astype(np.float32)
        m = self.mem.view(mask, np.uint8, n) != 0
        self.mem.view(pen_part, np.float64, grid[0])[:] = self._line_block_sums(
            np.where(m, v * v, 0.0), n, grid, block)

    # the refinement's vector operations (weights.cu, DeviceVectors)
    def vec_step(self, grid, block, out, x, t, d, n):
        assert grid[0] * block[0] >= n
        v = self.mem.view(x, np.float64, n) + t * self.mem.view(d, np.float64, n)
        self.mem.view(out, np.float64, n)[:] = v

    def vec_direction(self, grid, block, d, beta, g, n):
        assert grid[0] * block[0] >= n
        dv = self.mem.view(d, np.float64, n)
        dv[:] = beta * dv - self.mem.view(g, np.float64, n)

    def vec_neg(self, grid, block, out, v, n):
        assert grid[0] * block[0] >= n
        self.mem.view(out, np.float64, n)[:] = -self.mem.view(v, np.float64, n)

    def vec_sums(self, grid, block, a, b, n, mode, part):
        av, bv = self.mem.view(a, np.float64, n), self.mem.view(b, np.float64, n)
        if mode == 0:
            self.mem.view(part, np.float64, grid[0])[:] = self._line_block_sums(av * bv, n, grid, block)
        else:
            out = self.mem.view(part, np.float64, 2 * grid[0])
            out[:grid[0]] = self._line_block_sums(av * av, n, grid, block)
            out[grid[0]:] = self._line_block_sums(av * (av - bv), n, grid, block)

    def vec_finish(self, grid, block, part, n_parts, k, out):
        assert block[0] >= k
        p = self.mem.view(part, np.float64, k * n_parts).reshape(k, n_parts)
        res = self.mem.view(out, np.float64, k)
        for j in range(k):
            s = 0.0
            for v in p[j]:
                s += v
            res[j] = s
