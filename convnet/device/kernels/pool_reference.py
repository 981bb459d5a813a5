"""The numpy reference of pool.cu: pooling forward and the backpropagation of its delta."""

import numpy as np

from .host_memory import ReferenceBase


class PoolReference(ReferenceBase):
    """The numpy reference of pool_reference.py (see the package docstring)."""

    @staticmethod
    def _lanes_cover(grid, block, n, PD, vec, nb):
        """The launch gives every neuron of a case a thread (vec = 4, the _x4 kernels: four
        slices a thread, the depth a multiple of 4) and loops over the cases."""
        assert vec == 1 or vec == 4 and PD % 4 == 0
        assert grid[0] * block[0] * vec >= n and 1 <= grid[1] <= nb

    def pooled_activation(self, d, wv, wh, M, pout, ldp, pids, product):
        """A convolutional layer's activation (product(out, ldo) writes it for the layer shape
        `d`), then pool_forward's max pooling of wv x wh windows that tile it: only the pooled
        values and winners written, as the kernels that pool in their epilogue do."""
        H, W, D = d["H"], d["W"], d["D"]
        assert H % wv == 0 and W % wh == 0 and ldp == (H // wv) * (W // wh) * D
        conv = self.mem.alloc(4 * M * H * W * D)
        product(int(conv), H * W * D)
        self.pool_forward((1, M, 1), (ldp, 1, 1), int(conv), H, W, D, H // wv, W // wh, wv, wh,
                          wv, wh, 1, pout, pids, M)

    def pool_forward_x4(self, *args):
        self.pool_forward(*args, vec=4)

    def pool_backward_x4(self, *args):
        self.pool_backward(*args, vec=4)

    def pool_backward_tiles_x4(self, *args):
        self.pool_backward_tiles(*args, vec=4)

    def pool_forward(self, grid, block, src, PH, PW, PD, H, W, wv, wh, sv, sh, is_max, out, ids, nb,
                     vec=1):
        self._lanes_cover(grid, block, H * W * PD, PD, vec, nb)
        total = nb * H * W * PD
        x = self.f32(src, nb * PH * PW * PD).reshape(nb, PH, PW, PD).astype(np.float64)
        o = self.f32(out, total).reshape(nb, H, W, PD)
        # conv_small_pool without winners (forward-only evaluations) passes no ids
        idv = self.mem.view(ids, np.int32, total).reshape(nb, H, W, PD) if is_max and ids else None
        for oh in range(H):
            for ow in range(W):
                r0, c0 = oh * sv, ow * sh
                win = x[:, r0:r0 + wv, c0:c0 + wh, :].reshape(nb, -1, PD)
                if is_max:
                    j = np.argmax(win, axis=1)
                    o[:, oh, ow, :] = np.take_along_axis(win, j[:, None, :], 1)[:, 0, :]
                    if idv is not None:
                        idv[:, oh, ow, :] = (r0 + j // wh) * PW + c0 + j % wh
                else:
                    o[:, oh, ow, :] = win.mean(axis=1)

    def pool_backward(self, grid, block, delta, ids, PH, PW, PD, H, W, wv, wh, sv, sh, is_max,
                      prior, out, nb, vec=1):
        self._lanes_cover(grid, block, PH * PW * PD, PD, vec, nb)
        total = nb * PH * PW * PD
        dl = self.f32(delta, nb * H * W * PD).reshape(nb, H, W, PD).astype(np.float64)
        res = np.zeros((nb, PH, PW, PD))
        if is_max:
            idv = self.mem.view(ids, np.int32, nb * H * W * PD).reshape(nb, H, W, PD)
            flat = res.reshape(nb, PH * PW, PD)
            for oh in range(H):
                for ow in range(W):
                    for s in range(PD):
                        np.add.at(flat[:, :, s], (np.arange(nb), idv[:, oh, ow, s]), dl[:, oh, ow, s])
        else:
            for oh in range(H):
                for ow in range(W):
                    res[:, oh * sv:oh * sv + wv, ow * sh:ow * sh + wh, :] += dl[:, oh, ow, None, None, :] / (wv * wh)
        res = res.reshape(nb, -1)
        if int(prior):
            a = self.f32(prior, total).reshape(nb, -1).astype(np.float64)
            res = res * (1 - a * a)
        self.f32(out, total)[:] = res.ravel()

    def pool_backward_tiles(self, grid, block, delta, ids, pooled, PW, PD, H, W, wv, wh, out, nb,
                            vec=1):
        self._lanes_cover(grid, block, H * W * PD, PD, vec, nb)
        assert PW == W * wh
        PH = H * wv
        dl = self.f32(delta, nb * H * W * PD).reshape(nb, H, W, PD).astype(np.float64)
        if int(pooled):
            a = self.f32(pooled, nb * H * W * PD).reshape(nb, H, W, PD).astype(np.float64)
            dl = dl * (1 - a * a)
        idv = self.mem.view(ids, np.int32, nb * H * W * PD).reshape(nb, H, W, PD)
        res = np.full((nb, PH, PW, PD), np.nan)
        for i in range(wv):
            for j in range(wh):
                me = (np.arange(H) * wv + i)[:, None] * PW + np.arange(W) * wh + j
                res[:, i::wv, j::wh, :] = np.where(idv == me[None, :, :, None], dl, 0.0)
        assert not np.isnan(res).any(), "a prior neuron outside every window"
        self.f32(out, nb * PH * PW * PD)[:] = res.ravel()
