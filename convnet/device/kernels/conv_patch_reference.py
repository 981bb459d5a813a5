"""The numpy reference of conv_patch.cu: a convolutional layer's weights split into the B
fragments of the tensor cores, and its activation formed from them (float64 sums: the split
products keep float32 accuracy; the one-TF32-product variants multiply the rounded inputs)."""

import numpy as np

from .. import launches
from ..conv_patch import PatchVariant, fragment_columns
from ..conv_tiled import ConvShape
from .gemm_reference import round_tf32
from .host_memory import ReferenceBase


def _shape(d):
    return ConvShape(*(d[k] for k in ("PH", "PW", "PD", "H", "W", "D", "FV", "FH", "PV", "PZ",
                                      "SV", "SH", "LDW")))


def _split(x):
    """(hi, lo) of float32 values as tensor_cores.cuh's split_tf32."""
    hi = round_tf32(x)
    return hi, (x - hi).astype(np.float32)


class ConvPatchReference(ReferenceBase):
    """The numpy reference of conv_patch.cu (see the module docstring)."""

    def _sizes(self, d):
        kw = d["FV"] * d["FH"] * d["PD"]
        return kw, -(-(kw + 1) // 16), fragment_columns(_shape(d)) // 8

    # conv_patch_weights(weights, frag): frag[(2 stage + half) NT8 + j][lane], 4 floats each
    def conv_patch_weights(self, d, variant, grid, block, shared, weights, frag):
        kw, stages, nt8 = self._sizes(d)
        total = stages * 2 * nt8 * 32
        assert variant == () and grid[0] * block[0] >= total
        W = np.zeros((16 * stages + 8, 8 * nt8), np.float32)
        flat = self.f32(weights, kw * d["LDW"] + d["D"])
        W[:kw + 1, :d["D"]] = flat[np.arange(kw + 1)[:, None] * d["LDW"] + np.arange(d["D"])]
        idx = np.arange(total)
        lane, j, half = idx % 32, idx // 32 % nt8, idx // (32 * nt8)
        k, n = 8 * half + lane % 4, 8 * j + lane // 4
        h0, l0 = _split(W[k, n])
        h1, l1 = _split(W[k + 4, n])
        self.f32(frag, 4 * total)[:] = np.stack([h0, h1, l0, l1], axis=1).ravel()

    def _weights(self, d, frag, passes):
        """The weights (window rows and the bias x D) as the fragments hold them."""
        kw, stages, nt8 = self._sizes(d)
        total = stages * 2 * nt8 * 32
        f = self.f32(frag, 4 * total).reshape(total, 4).astype(np.float64)
        idx = np.arange(total)
        lane, j, half = idx % 32, idx // 32 % nt8, idx // (32 * nt8)
        k, n = 8 * half + lane % 4, 8 * j + lane // 4
        W = np.zeros((16 * stages + 8, 8 * nt8))
        W[k, n] = f[:, 0] + (f[:, 2] if passes == 3 else 0)
        W[k + 4, n] = f[:, 1] + (f[:, 3] if passes == 3 else 0)
        return W[:kw + 1, :d["D"]]

    # conv_patch(src, lda, frag, M, out, ldo, epi) with variant (rows, cases, wm, bn, stages,
    # passes)
    def conv_patch(self, d, variant, grid, block, shared, src, lda, frag, M, out, ldo, epi):
        rows, cases, wm, bn, _, passes = variant
        shape, v = _shape(d), PatchVariant(rows, cases, wm, bn)
        assert grid == v.grid(shape, M) and block[0] == v.threads(shape) <= 1024
        assert shared == v.smem(shape) and passes in (1, 3) and (cases == 1 or rows == d["H"])
        kw = d["FV"] * d["FH"] * d["PD"]
        Bm = self._weights(d, frag, passes)
        prior = d["PH"] * d["PW"] * d["PD"]
        x = self.f32(src, (M - 1) * lda + prior)
        x = np.stack([x[m * lda:m * lda + prior] for m in range(M)])
        x = (round_tf32(x) if passes == 1 else x).astype(np.float64)
        x = x.reshape(M, d["PH"], d["PW"], d["PD"])
        rin, cin = (d["H"] - 1) * d["SV"] + d["FV"], (d["W"] - 1) * d["SH"] + d["FH"]
        pad = np.zeros((M, rin + d["PH"], cin + d["PW"], d["PD"]))
        pad[:, d["PV"]:d["PV"] + d["PH"], d["PZ"]:d["PZ"] + d["PW"]] = x
        acc = np.broadcast_to(Bm[kw], (M, d["H"], d["W"], d["D"])).copy()
        for fr in range(d["FV"]):
            for fc in range(d["FH"]):
                win = pad[:, fr:fr + (d["H"] - 1) * d["SV"] + 1:d["SV"],
                          fc:fc + (d["W"] - 1) * d["SH"] + 1:d["SH"]]
                k0 = (fr * d["FH"] + fc) * d["PD"]
                acc += win @ Bm[k0:k0 + d["PD"]]
        hw = d["H"] * d["W"] * d["D"]
        res = (np.tanh(acc) if epi == launches.EPI_TANH else acc).reshape(M, -1)
        o = self.f32(out, (M - 1) * ldo + hw)
        for m in range(M):
            o[m * ldo:m * ldo + hw] = res[m].astype(np.float32)
