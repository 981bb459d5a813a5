"""The numpy reference of output.cu: softmax and log likelihood, their sum, and the gradient's
scale and penalty."""

import numpy as np

from .host_memory import ReferenceBase


class OutputReference(ReferenceBase):
    """The numpy reference of output_reference.py (see the package docstring)."""

    def softmax_ll(self, grid, block, logits, ncls, nb, classes, probs, ll, delta):
        assert grid[0] * block[0] >= nb
        z = self.f32(logits, nb * ncls).reshape(nb, ncls).astype(np.float64)
        cls = self.mem.view(classes, np.int32, nb).astype(np.int64)
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        self.mem.view(probs, np.float64, nb * ncls)[:] = p.ravel()
        self.mem.view(ll, np.float64, nb)[:] = -np.log(p[np.arange(nb), cls] + 1e-30)
        if int(delta):
            t = p.copy()
            t[np.arange(nb), cls] -= 1.0
            self.f32(delta, nb * ncls)[:] = t.ravel()

    def ll_sum(self, grid, block, ll, n, out):
        self.mem.view(out, np.float64, 1)[0] = self.mem.view(ll, np.float64, n).sum()

    def grad_finish(self, grid, block, acc, w, mask, n, scale, pen2, grad):
        assert grid[0] * block[0] >= n
        a = self.mem.view(acc, np.float64, n)
        wv = self.mem.view(w, np.float32, n).astype(np.float64)
        m = self.mem.view(mask, np.uint8, n)
        self.mem.view(grad, np.float64, n)[:] = a * scale + np.where(m != 0, pen2 * wv, 0.0)

