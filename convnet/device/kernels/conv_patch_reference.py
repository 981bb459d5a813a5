"""The numpy reference of conv_patch.cu: a convolutional layer's weights split into the B
fragments of the tensor cores, and its activation, or the delta into the prior layer, formed
from them (float64 sums: the split products keep float32 accuracy; the one-TF32-product
variants multiply the rounded inputs)."""

import numpy as np

from ..conv_patch import Geometry, PatchVariant
from ..conv_tiled import ConvShape
from .. import launches
from .gemm_reference import GemmReference, round_tf32


def _geometry(d, delta):
    shape = ConvShape(*(d[k] for k in ("PH", "PW", "PD", "H", "W", "D", "FV", "FH", "PV", "PZ",
                                       "SV", "SH", "LDW")))
    return Geometry.delta(shape) if delta else Geometry.forward(shape)


def _split(x):
    """(hi, lo) of float32 values as tensor_cores.cuh's split_tf32."""
    hi = round_tf32(x)
    return hi, (x - hi).astype(np.float32)


def _lanes(geo):
    """(total, k, n) of every fragment entry: its first k (the second is k + 4) and column."""
    nt8 = geo.fragment_columns // 8
    total = geo.stages * 2 * nt8 * 32
    idx = np.arange(total)
    lane, j, half = idx % 32, idx // 32 % nt8, idx // (32 * nt8)
    return total, 8 * half + lane % 4, 8 * j + lane // 4


class ConvPatchReference(GemmReference):
    """The numpy reference of conv_patch.cu (see the module docstring)."""

    def _b_matrix(self, d, geo, weights):
        """B (k x columns, zero past the weights) from the forward layout, or from the backward
        one ([tap][slice][prior slice]) with the taps turned around."""
        taps = geo.fv * geo.fh
        kw = taps * geo.ic
        B = np.zeros((16 * geo.stages + 8, geo.fragment_columns), np.float32)
        if geo.bias:
            flat = self.f32(weights, kw * d["LDW"] + d["D"])
            B[:kw + 1, :geo.on] = flat[np.arange(kw + 1)[:, None] * d["LDW"]
                                       + np.arange(geo.on)[None, :]]
        else:
            wb = self.f32(weights, kw * geo.on).reshape(taps, geo.ic, geo.on)
            B[:kw, :geo.on] = wb[::-1].reshape(kw, geo.on)
        return B

    def _weights(self, delta, d, grid, block, weights, frag):
        geo = _geometry(d, delta)
        total, k, n = _lanes(geo)
        assert grid[0] * block[0] >= total
        B = self._b_matrix(d, geo, weights)
        h0, l0 = _split(B[k, n])
        h1, l1 = _split(B[k + 4, n])
        self.f32(frag, 4 * total)[:] = np.stack([h0, h1, l0, l1], axis=1).ravel()

    # conv_patch_weights(weights, frag): frag[(2 stage + half) NT8 + j][lane], 4 floats each
    def conv_patch_weights(self, d, variant, grid, block, shared, weights, frag):
        assert variant == ()
        self._weights(False, d, grid, block, weights, frag)

    def conv_patch_delta_weights(self, d, variant, grid, block, shared, weights, frag):
        assert variant == ()
        self._weights(True, d, grid, block, weights, frag)

    def _fragment_b(self, geo, frag, passes):
        """B as the fragments hold it (hi + lo, or hi alone for one TF32 product)."""
        total, k, n = _lanes(geo)
        f = self.f32(frag, 4 * total).reshape(total, 4).astype(np.float64)
        B = np.zeros((16 * geo.stages + 8, geo.fragment_columns))
        B[k, n] = f[:, 0] + (f[:, 2] if passes == 3 else 0)
        B[k + 4, n] = f[:, 1] + (f[:, 3] if passes == 3 else 0)
        return B[:, :geo.on]

    def _product(self, delta, d, variant, grid, block, shared, src, lda, frag, M, out, ldo,
                 prior, epi, pooled=False):
        rows, cases, wm, wn, bn, _, passes = variant
        geo, v = _geometry(d, delta), PatchVariant(rows, cases, wm, wn, bn)
        assert grid == v.grid(geo, M) and block[0] == v.threads(geo) <= 1024
        assert shared == v.smem(geo, pooled) and passes in (1, 3)
        assert cases == 1 or rows == geo.oh
        B = self._fragment_b(geo, frag, passes)
        size = geo.ih * geo.iw * geo.ic
        x = self.f32(src, (M - 1) * lda + size)
        x = np.stack([x[m * lda:m * lda + size] for m in range(M)])
        x = (round_tf32(x) if passes == 1 else x).astype(np.float64)
        pad = np.zeros((M, geo.ih + 2 * geo.fv + geo.oh * geo.sv,
                        geo.iw + 2 * geo.fh + geo.ow * geo.sh, geo.ic))
        pad[:, geo.qv:geo.qv + geo.ih, geo.qz:geo.qz + geo.iw] = x.reshape(M, geo.ih, geo.iw, -1)
        kw = geo.fv * geo.fh * geo.ic
        acc = np.broadcast_to(B[kw] if geo.bias else 0.0, (M, geo.oh, geo.ow, geo.on)).copy()
        for a in range(geo.fv):
            for b in range(geo.fh):
                win = pad[:, a:a + (geo.oh - 1) * geo.sv + 1:geo.sv,
                          b:b + (geo.ow - 1) * geo.sh + 1:geo.sh]
                k0 = (a * geo.fh + b) * geo.ic
                acc += win @ B[k0:k0 + geo.ic]
        oidx = np.arange(M)[:, None] * ldo + np.arange(acc[0].size)[None, :]
        self.store_epilogue(acc.reshape(M, -1), oidx, out, prior, epi)

    # conv_patch(src, lda, frag, M, out, ldo, prior, epi) with variant (rows, cases, wm, wn, bn,
    # stages, passes); conv_patch_delta the same for the delta into the prior layer
    def conv_patch(self, d, variant, grid, block, shared, *args):
        self._product(False, d, variant, grid, block, shared, *args)

    def conv_patch_delta(self, d, variant, grid, block, shared, *args):
        self._product(True, d, variant, grid, block, shared, *args)

    # conv_patch_pool(src, lda, frag, M, pout, ldp, pids), variant (rows, cases, wm, wn, bn,
    # stages, passes, wv, wh): conv_patch's activation, then pool_forward's max pooling of wv x wh
    # windows that tile the layer; only the pooled values and winners are written
    def conv_patch_pool(self, d, variant, grid, block, shared, src, lda, frag, M, pout, ldp,
                        pids):
        *variant, wv, wh = variant
        assert variant[0] % wv == 0                     # bands of whole windows
        self.pooled_activation(d, wv, wh, M, pout, ldp, pids, lambda out, ldo: self._product(
            False, d, tuple(variant), grid, block, shared, src, lda, frag, M, out, ldo, 0,
            launches.EPI_TANH, pooled=True))
