"""The numpy reference of conv_small.cu: small convolutional layers computed directly, a first
layer with its max or average pooling (generic, fixed and values-only variants), and the first
layer's weight gradient from the pooled deltas."""

import numpy as np

from .. import first_layer, launches
from .pool_reference import PoolReference


class ConvSmallReference(PoolReference):
    """The numpy reference of conv_small_reference.py (see the package docstring)."""

    def conv_small(self, width, grid, block, shared, src, lda, PH, PW, PD, H, W, fv, fh, pv, ph, sv,
                   sh, Wf, ldw, N, out, total):
        assert grid[0] * block[0] >= total and width >= N and width % 4 == 0
        K = fv * fh * PD + 1
        assert shared == 4 * (K * width + block[0] * launches.conv_small_stage_row(N)) <= 48 * 1024
        Bm = self.f32(Wf, (K - 1) * ldw + N).astype(np.float64)
        Bm = np.stack([Bm[k * ldw:k * ldw + N] for k in range(K)])
        nb = total // (H * W)
        x = self.f32(src, (nb - 1) * lda + PH * PW * PD).astype(np.float64)
        images = np.stack([x[cs * lda:cs * lda + PH * PW * PD] for cs in range(nb)])
        win = _all_windows(images, (PH, PW, PD, H, W, fv, fh, pv, ph, sv, sh))
        self.f32(out, total * N)[:] = np.tanh(Bm[K - 1] + win @ Bm[:K - 1]).ravel()

    def conv_small_pool(self, width, grid, block, shared, src, lda, PH, PW, PD, H, W, fv, fh, pv,
                        ph, sv, sh, Wf, ldw, N, H2, W2, wv2, wh2, pout, pids, total, is_max=1):
        assert grid[0] * block[0] >= total and width >= N
        nb = total // (H2 * W2)
        conv = self.mem.alloc(4 * nb * H * W * N)
        staged = block[0] * launches.conv_small_stage_row(N)
        self.conv_small(width, (-(-nb * H * W // block[0]), 1, 1), block,
                        4 * ((fv * fh * PD + 1) * width + staged), src, lda, PH, PW, PD, H, W,
                        fv, fh, pv, ph, sv, sh, Wf, ldw, N, int(conv), nb * H * W)
        self.pool_forward((1, 1, 1), (H2 * W2 * N, 1, 1), int(conv), H, W, N, H2, W2, wv2, wh2,
                          wv2, wh2, is_max, pout, pids, nb)

    # conv_small_pool_fixed (conv_small.cu, one layer shape): conv_small_pool's results; the
    # instantiation's constants must be the shape the launch describes
    def conv_small_pool_fixed(self, d, variant, grid, block, shared, src, lda, PH, PW, PD, H, W,
                              fv, fh, pv, ph, sv, sh, Wf, ldw, N, H2, W2, wv2, wh2, pout, pids,
                              total, is_max=1):
        assert not d
        FV, FH, PDc, SV, SH, PV, PZ, PHc, PWc, WV, WH, NP, padded, minb, rolled = variant
        assert (FV, FH, PDc, SV, SH, PV, PZ, PHc, PWc, WV, WH) == (fv, fh, PD, sv, sh, pv, ph, PH,
                                                                 PW, wv2, wh2)
        assert padded == int(pv > 0 or ph > 0 or (H - 1) * sv + fv > PH or (W - 1) * sh + fh > PW)
        assert WV * WH * NP <= first_layer.FirstLayerPool.MAX_ACCUMULATORS and minb in (3, 4)
        assert rolled in (0, 1)
        self.conv_small_pool(NP, grid, block, shared, src, lda, PH, PW, PD, H, W, fv, fh, pv, ph,
                             sv, sh, Wf, ldw, N, H2, W2, wv2, wh2, pout, pids, total, is_max)

    # conv_small_avg: the first layer and its average pooling (pids is not read)
    def conv_small_avg(self, width, grid, block, shared, *args):
        *args, pout, pids, total = args
        self.conv_small_pool(width, grid, block, shared, *args, pout, 0, total, is_max=0)

    def conv_small_avg_fixed(self, d, variant, grid, block, shared, *args):
        *args, pout, pids, total = args
        self.conv_small_pool_fixed(d, variant, grid, block, shared, *args, pout, 0, total,
                                   is_max=0)

    # conv_small_pool_values: the same pooled values, no winners written
    def conv_small_pool_values(self, d, variant, grid, block, shared, *args):
        *args, pout, pids, total = args
        self.conv_small_pool_fixed(d, variant, grid, block, shared, *args, pout, 0, total)

    # conv_grad_pooled (conv_small.cu): the first layer's weight-gradient partials from the
    # pooling layer's deltas, winners and pooled values (the layout of conv_grad's partials)
    def conv_grad_pooled(self, grid, block, shared, src, lda, PH, PW, PD, H, W, fv, fh, pv, ph,
                         sv, sh, RS, delta, ids, pooled, H2, W2, N, n_lo, n_hi, n_cases, chunk,
                         subs, part):
        NL = n_hi - n_lo
        K = fv * fh * PD
        assert 0 < NL and n_hi <= N and chunk % subs == 0
        items = launches.pooled_grad_items(fv, fh * PD) * NL
        per_block = -(-items // grid[0])
        assert grid[1] == -(-n_cases // chunk) * subs and block[0] >= per_block
        assert block[0] % 32 == 0 and block[0] <= launches.POOLED_GRAD_THREADS
        assert (grid[0] - 1) * per_block < items
        rin, cin = (H - 1) * sv + fv, (W - 1) * sh + fh
        Q = H2 * W2
        # each thread copies at most this many pooled neurons and prior activations
        assert Q * NL <= launches.POOLED_GRAD_PER_Q * block[0]
        assert rin * cin * PD <= launches.POOLED_GRAD_PER_X * block[0]
        assert RS >= cin * PD
        assert shared == 4 * (-(-rin * RS // 2) * 2 + 2 * Q * NL + H * W) <= 48 * 1024
        x = self.f32(src, (n_cases - 1) * lda + PH * PW * PD).astype(np.float64)
        nhid = Q * N
        dl = self.f32(delta, n_cases * nhid).reshape(n_cases, Q, N)[:, :, n_lo:n_hi]
        dl = dl.astype(np.float64)
        if int(pooled):
            a = self.f32(pooled, n_cases * nhid).reshape(n_cases, Q, N)[:, :, n_lo:n_hi]
            dl = dl * (1 - a.astype(np.float64) ** 2)
        idv = self.mem.view(ids, np.int32, n_cases * nhid).reshape(n_cases, Q, N)[:, :, n_lo:n_hi]
        assert idv.min() >= 0 and idv.max() < H * W
        shape = (PH, PW, PD, H, W, fv, fh, pv, ph, sv, sh)

        def one_case(m):
            win = _windows(x[m * lda:m * lda + PH * PW * PD], shape)         # (positions, K)
            return np.vstack([np.einsum("qck,qc->kc", win[idv[m]], dl[m]), dl[m].sum(axis=0)])
        o = self.f32(part, grid[1] * (K + 1) * NL).reshape(grid[1], K + 1, NL)
        _partials(o, chunk, subs, n_cases, one_case)

    # conv_grad_avg (conv_small.cu, one layer shape): the first layer's weight-gradient partials
    # from its average pooling's deltas, the layer's activations computed again
    def conv_grad_avg(self, d, variant, grid, block, shared, *args):
        self._conv_grad_first(variant[:11], variant[11:13], variant[13:], grid, block, shared,
                              *args)

    # conv_grad_first (conv_small.cu, one layer shape): ... from the layer's own deltas
    def conv_grad_first(self, d, variant, grid, block, shared, *args):
        self._conv_grad_first(variant[:11], None, variant[11:], grid, block, shared, *args)

    def _conv_grad_first(self, shape, window, build, grid, block, shared, src, lda, Wf, ldw, delta,
                         N, n_lo, n_hi, n_cases, chunk, subs, part):
        fv, fh, PD, sv, sh, pv, ph, PH, PW, H, W = shape
        wv, wh = window or (1, 1)
        gs, padded = build
        NL, K = n_hi - n_lo, fv * fh * PD
        groups = -(-NL // gs)
        per_block = min(groups, first_layer.AVG_GRAD_THREADS // first_layer.AVG_GRAD_LANES)
        assert block[0] == per_block * first_layer.AVG_GRAD_LANES
        assert (K + 1) * gs <= first_layer.FirstGradient.MAX_SUMS
        assert grid[0] == -(-groups // per_block) and grid[1] == -(-n_cases // chunk) * subs
        weights = per_block if window else 0
        assert shared == 4 * (K + 1) * gs * (weights + block[0] // 32) <= 48 * 1024
        assert H % wv == 0 and W % wh == 0
        x = self.f32(src, (n_cases - 1) * lda + PH * PW * PD).astype(np.float64)
        H2, W2 = H // wv, W // wh
        dl = self.f32(delta, n_cases * H2 * W2 * N).reshape(n_cases, H2, W2, N)
        dl = dl[:, :, :, n_lo:n_hi].astype(np.float64) / (wv * wh)
        if window:
            Bm = self.f32(Wf, K * ldw + N).astype(np.float64)
            Bm = np.stack([Bm[k * ldw + n_lo:k * ldw + n_hi] for k in range(K + 1)])
        shape = (PH, PW, PD, H, W, fv, fh, pv, ph, sv, sh)

        def one_case(m):
            win = _windows(x[m * lda:m * lda + PH * PW * PD], shape)
            win = np.hstack([win, np.ones((H * W, 1))])                 # the bias row's input
            up = np.repeat(np.repeat(dl[m], wv, axis=0), wh, axis=1).reshape(H * W, NL)
            if window:
                up = up * (1 - np.tanh(win @ Bm) ** 2)
            return win.T @ up
        o = self.f32(part, grid[1] * (K + 1) * NL).reshape(grid[1], K + 1, NL)
        _partials(o, chunk, subs, n_cases, one_case)


def _windows(image, shape):
    """(positions, taps x prior slices): every window of one case's prior activations (float64,
    row-major), zero where it reaches into the padding."""
    return _all_windows(image[None], shape)[0]


def _all_windows(images, shape):
    """(cases, positions, taps x prior slices): _windows of every case at once."""
    PH, PW, PD, H, W, fv, fh, pv, ph, sv, sh = shape
    rin, cin = (H - 1) * sv + fv, (W - 1) * sh + fh
    pad = np.zeros((len(images), max(rin, PH + pv), max(cin, PW + ph), PD))
    pad[:, pv:pv + PH, ph:ph + PW] = images.reshape(-1, PH, PW, PD)
    view = np.lib.stride_tricks.sliding_window_view(pad, (fv, fh), axis=(1, 2))
    view = view[:, :rin - fv + 1:sv, :cin - fh + 1:sh]          # (cases, H, W, PD, fv, fh)
    return view.transpose(0, 1, 2, 4, 5, 3).reshape(len(images), H * W, fv * fh * PD)


def _partials(out, chunk, subs, n_cases, one_case):
    """out[z] (float32) = the sum of one_case(m) (float64) over partial z's cases: chunk z // subs,
    its sub-chunk z % subs."""
    per = chunk // subs
    for z in range(out.shape[0]):
        lo = (z // subs) * chunk + (z % subs) * per
        cases = range(lo, min(n_cases, lo + per))
        out[z] = sum((one_case(m) for m in cases), np.zeros(out.shape[1:])).astype(np.float32)
