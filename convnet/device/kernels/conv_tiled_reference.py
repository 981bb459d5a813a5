"""The numpy reference of conv_tiled.cu: a convolutional layer's activation (with the pooling
after it in its epilogue), delta backpropagation and weight-gradient partial sums, for every
tile variant."""

import numpy as np

from .. import launches
from .pool_reference import PoolReference


class ConvTiledReference(PoolReference):
    """The numpy reference of conv_tiled_reference.py (see the package docstring)."""

    # conv_fwd (conv_tiled.cu) for the layer shape `d` (its CT_* constants without the prefix)
    # and tile variant (cases, tm, tn): conv_fwd(src, lda, weights, M, out, ldo)
    def conv_fwd(self, d, variant, grid, block, shared, src, lda, Wf, M, out, ldo):
        cases, tm, tn, _, tps, spread = variant
        hw = d["H"] * d["W"]
        assert block[0] == -(-cases * hw // tm) * -(-d["D"] // tn) <= 1024
        assert grid[0] == -(-M // cases)
        pd4 = -(-d["PD"] // 4) * 4
        cs = pd4 + 4 if spread and pd4 // 4 % 2 == 0 else pd4   # positions apart along a row
        rin, cin = (d["H"] - 1) * d["SV"] + d["FV"], (d["W"] - 1) * d["SH"] + d["FH"]
        row = cin * cs + (4 if (cin * cs // 4) % 2 == 0 else 0)
        nc = -(-d["D"] // tn) * tn
        assert nc <= d["LDW"] and tps in (1, d["FH"]) and spread in (0, 1)
        staged = hw * (d["D"] + 1 - d["D"] % 2) if spread else hw * d["D"]
        xs = -(-cases * max(rin * row, staged) // 4) * 4    # the weights 16-byte aligned
        assert shared == 4 * (xs + 2 * tps * pd4 * nc)
        K = d["FV"] * d["FH"] * d["PD"]
        Bm = self.f32(Wf, K * d["LDW"] + d["D"]).astype(np.float64)
        Bm = np.stack([Bm[k * d["LDW"]:k * d["LDW"] + d["D"]] for k in range(K + 1)])
        prior = d["PH"] * d["PW"] * d["PD"]
        x = self.f32(src, (M - 1) * lda + prior).astype(np.float64)
        x = np.stack([x[m * lda:m * lda + prior] for m in range(M)]).reshape(M, d["PH"], d["PW"], d["PD"])
        pad = np.zeros((M, rin + d["PH"], cin + d["PW"], d["PD"]))
        pad[:, d["PV"]:d["PV"] + d["PH"], d["PZ"]:d["PZ"] + d["PW"]] = x
        acc = np.broadcast_to(Bm[K], (M, d["H"], d["W"], d["D"])).copy()
        for fr in range(d["FV"]):
            for fc in range(d["FH"]):
                win = pad[:, fr:fr + (d["H"] - 1) * d["SV"] + 1:d["SV"],
                          fc:fc + (d["W"] - 1) * d["SH"] + 1:d["SH"]]
                k0 = (fr * d["FH"] + fc) * d["PD"]
                acc += win @ Bm[k0:k0 + d["PD"]]
        o = self.f32(out, (M - 1) * ldo + hw * d["D"])
        res = np.tanh(acc).reshape(M, -1).astype(np.float32)
        for m in range(M):
            o[m * ldo:m * ldo + hw * d["D"]] = res[m]

    # conv_bwd (conv_tiled.cu): the prior layer's delta, for strides of 1;
    # conv_bwd(delta, ldd, weights, M, out, ldo, prior, epi), weights in [tap][slice][prior slice]
    # conv_fwd_pool: conv_fwd, then the max pooling (wv x wh windows that tile the layer, the
    # last two constants of the variant) of pool_forward, only the pooled values and winners
    # written
    def conv_fwd_pool(self, d, variant, grid, block, shared, src, lda, Wf, M, pout, ldp, pids):
        *variant, wv, wh = variant
        self.pooled_activation(d, wv, wh, M, pout, ldp, pids, lambda out, ldo: self.conv_fwd(
            d, variant, grid, block, shared, src, lda, Wf, M, out, ldo))

    def conv_bwd(self, d, variant, grid, block, shared, delta, ldd, Wb, M, out, ldo, prior, epi):
        cases, pad, tps, minb, parts, ahead = variant
        PH, PW, PD, H, W, D = (d[k] for k in ("PH", "PW", "PD", "H", "W", "D"))
        assert d["SV"] == d["SH"] == 1 and PD % 4 == 0 and tps in (1, d["FH"]) and minb >= 1
        lanes = PD // 4 * cases
        if pad:         # a prior row's threads: a power of two up to 16, then whole warps
            lanes = -(-lanes // 32) * 32 if lanes > 16 else 1 << (lanes - 1).bit_length()
        assert 1 <= parts <= PW     # each run of a row's columns its own threads
        groups = -(-M // cases)     # ahead: a block takes every grid[0]-th group of cases
        assert block[0] == lanes * parts * PH <= 512 and ahead in (0, 1)
        assert grid[0] == groups or ahead and 1 <= grid[0] < groups
        jd4 = -(-D // 4) * 4
        u = W * jd4 // 4
        u = H * (u + (9 - u % 8) % 8)
        dcase = 4 * (u + (((1 if pad else cases % 8)) - u % 8 + 8) % 8)
        assert shared == 4 * ((1 + ahead) * cases * dcase + 2 * tps * jd4 * PD)
        taps = d["FV"] * d["FH"]
        Wt = self.f32(Wb, taps * D * PD).reshape(taps, D, PD).astype(np.float64)
        dl = self.f32(delta, (M - 1) * ldd + H * W * D).astype(np.float64)
        dl = np.stack([dl[m * ldd:m * ldd + H * W * D] for m in range(M)]).reshape(M, H, W, D)
        res = np.zeros((M, PH, PW, PD))
        for oh in range(H):
            for ow in range(W):
                for fr in range(d["FV"]):
                    for fc in range(d["FH"]):
                        r, c = oh - d["PV"] + fr, ow - d["PZ"] + fc
                        if 0 <= r < PH and 0 <= c < PW:
                            res[:, r, c, :] += dl[:, oh, ow, :] @ Wt[fr * d["FH"] + fc]
        res = res.reshape(M, -1)
        n = PH * PW * PD
        if epi == launches.EPI_DERIV:
            a = self.f32(prior, (M - 1) * ldo + n).astype(np.float64)
            res = res * (1 - np.stack([a[m * ldo:m * ldo + n] for m in range(M)]) ** 2)
        o = self.f32(out, (M - 1) * ldo + n)
        for m in range(M):
            o[m * ldo:m * ldo + n] = res[m].astype(np.float32)

    # conv_grad (conv_tiled.cu): partial z of the weight gradient covers the sub-chunk z % subs of
    # chunk z // subs (chunk / subs cases) over every position; rows in the forward order
    # ((fr * FH + fc) * PD + prior slice), then the bias row
    def conv_grad(self, d, variant, grid, block, shared, src, lda, delta, ldd, n_lo, n_hi,
                  n_cases, chunk, subs, part):
        tn, taprow, rows, stages = variant
        PH, PW, PD, H, W, D, fv, fh = (d[k] for k in ("PH", "PW", "PD", "H", "W", "D", "FV", "FH"))
        ncolg = -(-D // tn)
        assert PD % 4 == 0 and chunk % subs == 0 and (not taprow or fh * 4 * tn <= 80)
        assert taprow or rows == 1
        groups = PD // 4 * rows if taprow else PD // 4 * fh + 1
        assert grid[:2] == (-(-fv // rows), -(-n_cases // chunk) * subs) and block[0] == groups * ncolg
        rin, cin = (H - 1) * d["SV"] + fv, (W - 1) * d["SH"] + fh
        row = cin * PD + (4 if (cin * PD // 4) % 2 == 0 else 0)
        assert stages in (1, 2)     # cases in shared memory at once: the sums are the same
        assert shared == 4 * stages * (-(-(rin * row + H * W * ncolg * tn) // 4) * 4)
        self._grad_partials(d, grid[1], src, lda, delta, ldd, n_lo, n_hi, n_cases, chunk, subs,
                            part)

    # conv_grad_warp (conv_tiled.cu): conv_grad's partial sums, a warp each (rows output rows of
    # a case at a time, warps a block), for windows of fewer than 32 groups of 4 prior slices
    def conv_grad_warp(self, d, variant, grid, block, shared, src, lda, delta, ldd, n_lo, n_hi,
                       n_cases, chunk, subs, part):
        rows, warps = variant
        PD, H, W, D, fv, fh = (d[k] for k in ("PD", "H", "W", "D", "FV", "FH"))
        jd4 = -(-D // 4) * 4
        assert PD % 4 == 0 and chunk % subs == 0 and fv * fh * PD // 4 < 32 and jd4 <= 24
        nz = -(-n_cases // chunk) * subs
        assert grid == (-(-nz // warps), 1, 1) and block[0] == 32 * warps and rows <= H
        cin = (W - 1) * d["SH"] + fh
        row = cin * PD + (4 if (cin * PD // 4) % 2 == 0 else 0)
        stage = -(-(((rows - 1) * d["SV"] + fv) * row + rows * W * jd4) // 4) * 4
        assert shared == 4 * warps * 2 * stage
        self._grad_partials(d, nz, src, lda, delta, ldd, n_lo, n_hi, n_cases, chunk, subs, part)

    def _grad_partials(self, d, nz, src, lda, delta, ldd, n_lo, n_hi, n_cases, chunk, subs, part):
        """The nz partial sums of conv_grad and conv_grad_warp (see conv_grad)."""
        PH, PW, PD, H, W, D, fv, fh = (d[k] for k in ("PH", "PW", "PD", "H", "W", "D", "FV", "FH"))
        rin, cin = (H - 1) * d["SV"] + fv, (W - 1) * d["SH"] + fh
        prior = PH * PW * PD
        x = self.f32(src, (n_cases - 1) * lda + prior).astype(np.float64)
        x = np.stack([x[m * lda:m * lda + prior] for m in range(n_cases)]).reshape(n_cases, PH, PW, PD)
        pad = np.zeros((n_cases, rin + PH, cin + PW, PD))
        pad[:, d["PV"]:d["PV"] + PH, d["PZ"]:d["PZ"] + PW] = x
        dl = self.f32(delta, (n_cases - 1) * ldd + H * W * D).astype(np.float64)
        dl = np.stack([dl[m * ldd:m * ldd + H * W * D] for m in range(n_cases)]).reshape(n_cases, H * W, D)
        dl = dl[:, :, n_lo:n_hi]
        K = fv * fh * PD
        NL = n_hi - n_lo
        o = self.f32(part, nz * (K + 1) * NL).reshape(nz, K + 1, NL)
        per = chunk // subs
        for z in range(nz):
            lo = (z // subs) * chunk + (z % subs) * per
            hi = min(n_cases, lo + per)
            g = np.zeros((K + 1, NL))
            for fr in range(fv):
                for fc in range(fh):
                    win = pad[lo:hi, fr:fr + (H - 1) * d["SV"] + 1:d["SV"],
                              fc:fc + (W - 1) * d["SH"] + 1:d["SH"]].reshape(hi - lo, H * W, PD)
                    k0 = (fr * fh + fc) * PD
                    g[k0:k0 + PD] = np.einsum("mpk,mpn->kn", win, dl[lo:hi])
            g[K] = dl[lo:hi].sum(axis=(0, 1))
            o[z] = g.astype(np.float32)
