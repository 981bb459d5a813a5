"""Direct convolution for CONV layers with few weights per filter, on blocks in (feature, case)
order: the forward pass and the weight gradient without unrolled windows.

Why: a CONV layer whose filters have few weights (a first layer over one image plane: 25 for a
5 x 5 filter) makes :mod:`~convnet.host.local_conv`'s unrolled windows K times as large as its
input, and its matrix products are too thin for BLAS to hide the traffic: on mnist-small the
windows of one block of 64 cases are 7.4 MB, written once and read twice per gradient, far more
than the level-2 cache. Here no windows are made.

With strides of 1, the window element (slice sl, filter row fr, filter column fc) of the positions
of one row r of the layer whose windows do not reach into the horizontal padding lies in one
contiguous run of the prior block: row r + fr - pad_v of prior slice sl, from column
c + fc - pad_h on, every case, n values per column. (The few columns whose windows do reach into
the padding are done a column and a tap at a time.) So one row of one output slice is a sum over
the taps of weight x run, and the weight gradient of a tap is the dot product of a run with the
same row of the delta. The runs are cut into pieces of :data:`PIECE` values that stay in the
level-1 cache while every tap and output slice uses them; each pass takes two output slices (every
load of a run serves two filters) and up to five taps of a filter row (their weights in
registers, one load and one store of the output per five multiply-adds).

Summation order (fixed, whatever the block size or thread count): an output value starts from its
bias and adds the taps' products in weight order (slice, filter row, filter column) as fused
multiply-adds. A weight's gradient is the sum over the layer's rows and pieces of each piece's
dot product, taken in LLVM's vector order.
"""

import numpy as np
from numba import njit

PIECE = 512     # values of one run handled at a time (4 KB; five runs and the output row in L1)
# Filters with at most this many weights (prior depth x filter area) go direct: with more, the
# unrolled windows' products were as fast or faster in a sweep (benchmarks/NOTES.md).
MAX_WEIGHTS = 25


def fits(layer):
    """Whether a CONV layer (convnet.architecture) can take the direct path, and profits from it."""
    s = layer.spec
    return (layer.kind.shares_weights and s.stride_v == 1 and s.stride_h == 1
            and layer.prior_depth * s.filter_v * s.filter_h <= MAX_WEIGHTS)


@njit(nogil=True, fastmath={"contract"})
def _forward_taps(o, q, x, xb, n, m, W, d, e, k, taps, first):
    """o, q (m,) += the next 5, 3 or 1 taps (weights k.. of filters d and e) times their runs;
    when first, o and q start from the filters' biases instead."""
    K = W.shape[1] - 1
    bo, bq = W[d, K], W[e, K]
    if taps == 5:
        w0, w1, w2, w3, w4 = W[d, k], W[d, k + 1], W[d, k + 2], W[d, k + 3], W[d, k + 4]
        v0, v1, v2, v3, v4 = W[e, k], W[e, k + 1], W[e, k + 2], W[e, k + 3], W[e, k + 4]
        x0 = x[xb:xb + m]
        x1 = x[xb + n:xb + n + m]
        x2 = x[xb + 2 * n:xb + 2 * n + m]
        x3 = x[xb + 3 * n:xb + 3 * n + m]
        x4 = x[xb + 4 * n:xb + 4 * n + m]
        if first:
            for j in range(m):
                a0, a1, a2, a3, a4 = x0[j], x1[j], x2[j], x3[j], x4[j]
                o[j] = bo + w0 * a0 + w1 * a1 + w2 * a2 + w3 * a3 + w4 * a4
                q[j] = bq + v0 * a0 + v1 * a1 + v2 * a2 + v3 * a3 + v4 * a4
        else:
            for j in range(m):
                a0, a1, a2, a3, a4 = x0[j], x1[j], x2[j], x3[j], x4[j]
                o[j] = o[j] + w0 * a0 + w1 * a1 + w2 * a2 + w3 * a3 + w4 * a4
                q[j] = q[j] + v0 * a0 + v1 * a1 + v2 * a2 + v3 * a3 + v4 * a4
    elif taps == 3:
        w0, w1, w2 = W[d, k], W[d, k + 1], W[d, k + 2]
        v0, v1, v2 = W[e, k], W[e, k + 1], W[e, k + 2]
        x0 = x[xb:xb + m]
        x1 = x[xb + n:xb + n + m]
        x2 = x[xb + 2 * n:xb + 2 * n + m]
        if first:
            for j in range(m):
                a0, a1, a2 = x0[j], x1[j], x2[j]
                o[j] = bo + w0 * a0 + w1 * a1 + w2 * a2
                q[j] = bq + v0 * a0 + v1 * a1 + v2 * a2
        else:
            for j in range(m):
                a0, a1, a2 = x0[j], x1[j], x2[j]
                o[j] = o[j] + w0 * a0 + w1 * a1 + w2 * a2
                q[j] = q[j] + v0 * a0 + v1 * a1 + v2 * a2
    else:
        _forward_tap(o, q, x, xb, m, W, d, e, k, first)


@njit(nogil=True, fastmath={"contract"})
def _forward_tap(o, q, x, xb, m, W, d, e, k, first):
    """:func:`_forward_taps` for one tap (the columns next to the horizontal padding)."""
    K = W.shape[1] - 1
    w0, v0 = W[d, k], W[e, k]
    x0 = x[xb:xb + m]
    if first:
        for j in range(m):
            o[j] = W[d, K] + w0 * x0[j]
            q[j] = W[e, K] + v0 * x0[j]
    else:
        for j in range(m):
            o[j] = o[j] + w0 * x0[j]
            q[j] = q[j] + v0 * x0[j]


@njit(nogil=True, fastmath={"contract", "reassoc"})
def _gradient_taps(acc, g, h, x, xb, n, m, d, e, k, taps):
    """acc[d, k..], acc[e, k..] += the dot products of the deltas g, h (m,) of filters d and e with
    the runs of the next 5, 3 or 1 taps (e == d: filter d alone)."""
    if taps == 5:
        x0 = x[xb:xb + m]
        x1 = x[xb + n:xb + n + m]
        x2 = x[xb + 2 * n:xb + 2 * n + m]
        x3 = x[xb + 3 * n:xb + 3 * n + m]
        x4 = x[xb + 4 * n:xb + 4 * n + m]
        s0 = s1 = s2 = s3 = s4 = t0 = t1 = t2 = t3 = t4 = 0.0
        for j in range(m):
            u, v = g[j], h[j]
            a0, a1, a2, a3, a4 = x0[j], x1[j], x2[j], x3[j], x4[j]
            s0 += u * a0
            s1 += u * a1
            s2 += u * a2
            s3 += u * a3
            s4 += u * a4
            t0 += v * a0
            t1 += v * a1
            t2 += v * a2
            t3 += v * a3
            t4 += v * a4
        acc[d, k] += s0
        acc[d, k + 1] += s1
        acc[d, k + 2] += s2
        acc[d, k + 3] += s3
        acc[d, k + 4] += s4
        if e != d:
            acc[e, k] += t0
            acc[e, k + 1] += t1
            acc[e, k + 2] += t2
            acc[e, k + 3] += t3
            acc[e, k + 4] += t4
    elif taps == 3:
        x0 = x[xb:xb + m]
        x1 = x[xb + n:xb + n + m]
        x2 = x[xb + 2 * n:xb + 2 * n + m]
        s0 = s1 = s2 = t0 = t1 = t2 = 0.0
        for j in range(m):
            u, v = g[j], h[j]
            a0, a1, a2 = x0[j], x1[j], x2[j]
            s0 += u * a0
            s1 += u * a1
            s2 += u * a2
            t0 += v * a0
            t1 += v * a1
            t2 += v * a2
        acc[d, k] += s0
        acc[d, k + 1] += s1
        acc[d, k + 2] += s2
        if e != d:
            acc[e, k] += t0
            acc[e, k + 1] += t1
            acc[e, k + 2] += t2
    else:
        _gradient_tap(acc, g, h, x, xb, m, d, e, k)


@njit(nogil=True, fastmath={"contract", "reassoc"})
def _gradient_tap(acc, g, h, x, xb, m, d, e, k):
    """:func:`_gradient_taps` for one tap (the columns next to the horizontal padding)."""
    x0 = x[xb:xb + m]
    s0 = t0 = 0.0
    for j in range(m):
        a0 = x0[j]
        s0 += g[j] * a0
        t0 += h[j] * a0
    acc[d, k] += s0
    if e != d:
        acc[e, k] += t0


@njit(nogil=True)
def _taps_next(nfh, fc):
    """How many taps of a filter row the next pass takes: 5, 3 or 1."""
    left = nfh - fc
    return 5 if left >= 5 else (3 if left >= 3 else 1)


@njit(nogil=True)
def _interior(C, IC, nfh, ph):
    """The columns c0 <= c < c1 of the layer whose windows lie wholly inside the prior row."""
    c0 = min(C, ph)
    c1 = min(C, IC - nfh + 1 + ph)
    return c0, max(c0, c1)


@njit(nogil=True)
def _partner(d, D):
    """The filter done in one pass with filter d: d + 1, or d itself when d is the last one."""
    return d + 1 if d + 1 < D else d


@njit(nogil=True)
def _pair(out, spare, d, j0, m):
    """Filter d's partner e and the two output pieces out[d, j0:j0+m], out[e, j0:j0+m] (spare
    stands in for the second when d has no partner, so that the pass's results are dropped)."""
    e = _partner(d, out.shape[0])
    return e, out[d, j0:j0 + m], (out[e, j0:j0 + m] if e != d else spare[:m])


@njit(cache=True, nogil=True, fastmath={"contract"})
def conv_forward(priorT, W, S, IR, IC, R, C, nfv, nfh, pv, ph, out):
    """priorT (S*IR*IC, n) -> out (D, R*C*n) net inputs, bias included; W (D, npw): each filter's
    weights in (slice, row, column) order, then its bias."""
    n = priorT.shape[1]
    D = out.shape[0]
    L = C * n
    x = priorT.ravel()
    spare = np.empty(max(PIECE, n))     # the second row of the last pair when D is odd
    c0, c1 = _interior(C, IC, nfh, ph)
    for r in range(R):
        ob = r * L
        # the columns whose windows are inside the prior rows: runs cut into pieces
        for j0 in range(c0 * n, c1 * n, PIECE):
            m = min(PIECE, c1 * n - j0)
            for d in range(0, D, 2):
                e, o, q = _pair(out, spare, d, ob + j0, m)
                first = True
                for sl in range(S):
                    for fr in range(nfv):
                        ir = r + fr - pv
                        if ir < 0 or ir >= IR:
                            continue
                        base = ((sl * IR + ir) * IC - ph) * n + j0
                        k = (sl * nfv + fr) * nfh
                        fc = 0
                        while fc < nfh:
                            taps = _taps_next(nfh, fc)
                            _forward_taps(o, q, x, base + fc * n, n, m, W, d, e, k + fc, taps,
                                          first)
                            first = False
                            fc += taps
                if first:                   # every window row in the padding: the bias alone
                    _fill_bias(o, q, W, d, e)
        # the columns whose windows reach into the horizontal padding: one tap at a time
        for c in range(C):
            if c0 <= c < c1:
                continue
            j0 = c * n
            for d in range(0, D, 2):
                e, o, q = _pair(out, spare, d, ob + j0, n)
                first = True
                for sl in range(S):
                    for fr in range(nfv):
                        ir = r + fr - pv
                        if ir < 0 or ir >= IR:
                            continue
                        k = (sl * nfv + fr) * nfh
                        for fc in range(nfh):
                            ic = c + fc - ph
                            if ic < 0 or ic >= IC:
                                continue
                            _forward_tap(o, q, x, ((sl * IR + ir) * IC + ic) * n, n, W, d, e,
                                         k + fc, first)
                            first = False
                if first:
                    _fill_bias(o, q, W, d, e)


@njit(nogil=True)
def _fill_bias(o, q, W, d, e):
    K = W.shape[1] - 1
    for j in range(o.shape[0]):
        o[j] = W[d, K]
        q[j] = W[e, K]


@njit(cache=True, nogil=True, fastmath={"contract", "reassoc"})
def conv_weight_gradient(priorT, dnet, S, IR, IC, R, C, nfv, nfh, pv, ph, G):
    """G (D, npw) += the gradient of each filter's weights (not the bias) from dnet (D, R*C*n),
    d criterion / d net inputs, and the prior block priorT (S*IR*IC, n)."""
    n = priorT.shape[1]
    D = dnet.shape[0]
    L = C * n
    K = S * nfv * nfh
    x = priorT.ravel()
    acc = np.zeros((D, K))
    c0, c1 = _interior(C, IC, nfh, ph)
    for r in range(R):
        ob = r * L
        for j0 in range(c0 * n, c1 * n, PIECE):
            m = min(PIECE, c1 * n - j0)
            for sl in range(S):
                for fr in range(nfv):
                    ir = r + fr - pv
                    if ir < 0 or ir >= IR:
                        continue
                    base = ((sl * IR + ir) * IC - ph) * n + j0
                    k = (sl * nfv + fr) * nfh
                    for d in range(0, D, 2):
                        e = _partner(d, D)
                        g = dnet[d, ob + j0:ob + j0 + m]
                        h = dnet[e, ob + j0:ob + j0 + m]
                        fc = 0
                        while fc < nfh:
                            taps = _taps_next(nfh, fc)
                            _gradient_taps(acc, g, h, x, base + fc * n, n, m, d, e, k + fc, taps)
                            fc += taps
        for c in range(C):
            if c0 <= c < c1:
                continue
            j0 = c * n
            for sl in range(S):
                for fr in range(nfv):
                    ir = r + fr - pv
                    if ir < 0 or ir >= IR:
                        continue
                    k = (sl * nfv + fr) * nfh
                    for fc in range(nfh):
                        ic = c + fc - ph
                        if ic < 0 or ic >= IC:
                            continue
                        for d in range(0, D, 2):
                            e = _partner(d, D)
                            _gradient_tap(acc, dnet[d, ob + j0:ob + j0 + n],
                                          dnet[e, ob + j0:ob + j0 + n], x,
                                          ((sl * IR + ir) * IC + ic) * n, n, d, e, k + fc)
    for d in range(D):
        for k in range(K):
            G[d, k] += acc[d, k]
