"""Locally connected and convolutional layers on a block of cases: forward and backward.

Both layer kinds see the same windows of the prior layer (Equations 1-5 to 1-8); they differ only in
whether a slice shares one weight set over the visual field (CONV) or every neuron has its own
(LOCAL). Indices: b is a case of the block of n cases, p a position (row*width+col) in this layer's
visual field, k = (prior slice, filter row, filter col), the order of the weights, d a slice of this
layer.

Both start by unrolling the windows into a matrix of "columns" cols[k, p, b]: the prior value under
element k of the window of position p, or 0 where the window hangs over the padding. The prior
block is first transposed to priorT[i, b] (prior activation i of case b), so that every (k, p) of
the unrolled matrix is one contiguous copy of n values (or n zeros). Then

    CONV   net (D, P*n) = W[:, :K] (D, K) @ cols (K, P*n)         one matrix product for the block
           dW (D, K)   += dnet (D, P*n) @ cols.T                  weight gradient
           dcols (K, P*n) = W[:, :K].T @ dnet                     deltas of the window elements
    LOCAL  net[p] (D, n) = W[:, p, :K] (D, K) @ cols[:, p] (K, n) one product per position
           dW[:, p]    += dnet[p] (D, n) @ cols[:, p].T
           dcols[p] (K, n) = W[:, p, :K].T @ dnet[p]

Folding dcols back onto the prior layer, adding where windows overlap, gives d criterion / d prior
activations: the book's loop reversal, done on blocks. The products are numpy matrix products
(BLAS); unrolling, folding and reordering are compiled loops that release the GIL, so that several
workers run at once.
"""

import numpy as np
from numba import njit


TILE = 8
# Forward-only passes unroll the windows of a block in one piece when they take at most WHOLE_BYTES,
# otherwise a run of positions of at most CHUNK_BYTES at a time, so that they are still in cache
# for their product (both sizes from a sweep on the benchmark nets; see benchmarks/NOTES.md).
WHOLE_BYTES = 1 << 20
CHUNK_BYTES = 256 << 10


@njit(cache=True, nogil=True)
def transpose_into(src, dst):
    """dst (m, n) = src (n, m).T, in tiles of rows so that both sides stream through cache."""
    n, m = src.shape
    for i0 in range(0, n, TILE):
        i1 = min(n, i0 + TILE)
        for j in range(m):
            for i in range(i0, i1):
                dst[j, i] = src[i, j]


@njit(cache=True, nogil=True)
def unroll_windows(priorT, S, IR, IC, R, C, nfv, nfh, pv, ph, sv, sh, cols):
    """priorT (S*IR*IC, n) -> cols (K, R*C, n)."""
    n = priorT.shape[1]
    for sl in range(S):
        for fr in range(nfv):
            for fc in range(nfh):
                k = (sl * nfv + fr) * nfh + fc
                for r in range(R):
                    ir = r * sv + fr - pv
                    for c in range(C):
                        ic = c * sh + fc - ph
                        p = r * C + c
                        if 0 <= ir < IR and 0 <= ic < IC:
                            src = (sl * IR + ir) * IC + ic
                            for b in range(n):
                                cols[k, p, b] = priorT[src, b]
                        else:
                            for b in range(n):
                                cols[k, p, b] = 0.0


@njit(cache=True, nogil=True)
def unroll_range(priorT, S, IR, IC, R, C, nfv, nfh, pv, ph, sv, sh, p0, p1, cols):
    """:func:`unroll_windows` for the positions p0 <= p < p1 only: cols (K, p1-p0, n)."""
    n = priorT.shape[1]
    for sl in range(S):
        for fr in range(nfv):
            for fc in range(nfh):
                k = (sl * nfv + fr) * nfh + fc
                for p in range(p0, p1):
                    r = p // C
                    c = p - r * C
                    ir = r * sv + fr - pv
                    ic = c * sh + fc - ph
                    if 0 <= ir < IR and 0 <= ic < IC:
                        src = (sl * IR + ir) * IC + ic
                        for b in range(n):
                            cols[k, p - p0, b] = priorT[src, b]
                    else:
                        for b in range(n):
                            cols[k, p - p0, b] = 0.0


@njit(cache=True, nogil=True)
def fold_windows(dcols, by_position, S, IR, IC, R, C, nfv, nfh, pv, ph, sv, sh, dpriorT):
    """The adjoint of :func:`unroll_windows`: dpriorT (S*IR*IC, n) = sum of the window pieces.
    dcols is (K, R*C, n), or (R*C, K, n) when by_position."""
    n = dpriorT.shape[1]
    for i in range(dpriorT.shape[0]):
        for b in range(n):
            dpriorT[i, b] = 0.0
    for sl in range(S):
        for fr in range(nfv):
            for fc in range(nfh):
                k = (sl * nfv + fr) * nfh + fc
                for r in range(R):
                    ir = r * sv + fr - pv
                    if ir < 0 or ir >= IR:
                        continue
                    for c in range(C):
                        ic = c * sh + fc - ph
                        if ic < 0 or ic >= IC:
                            continue
                        p = r * C + c
                        dst = (sl * IR + ir) * IC + ic
                        if by_position:
                            for b in range(n):
                                dpriorT[dst, b] += dcols[p, k, b]
                        else:
                            for b in range(n):
                                dpriorT[dst, b] += dcols[k, p, b]


@njit(cache=True, nogil=True)
def scatter_net(net, by_position, w, npw, out):
    """net (D, P, n), or (P, D, n) when by_position (LOCAL), plus the biases -> out (n, D*P) in
    (depth, height, width) order. The bias of slice d is w[d*npw + npw-1] (CONV); that of
    neuron (d, p) is w[(d*P + p)*npw + npw-1] (LOCAL)."""
    n = out.shape[0]
    if by_position:
        P, D = net.shape[0], net.shape[1]
    else:
        D, P = net.shape[0], net.shape[1]
    kb = npw - 1
    for d in range(D):
        for p0 in range(0, P, TILE):
            p1 = min(P, p0 + TILE)
            for b in range(n):
                for p in range(p0, p1):
                    if by_position:
                        out[b, d * P + p] = net[p, d, b] + w[(d * P + p) * npw + kb]
                    else:
                        out[b, d * P + p] = net[d, p, b] + w[d * npw + kb]


@njit(cache=True, nogil=True)
def gather_delta(dnet, by_position, npw, dnet_t, grad):
    """dnet (n, D*P) -> dnet_t (D, P, n), or (P, D, n) when by_position; adds the bias gradients
    into grad (this layer's part of the gradient vector)."""
    n = dnet.shape[0]
    if by_position:
        P, D = dnet_t.shape[0], dnet_t.shape[1]
    else:
        D, P = dnet_t.shape[0], dnet_t.shape[1]
    kb = npw - 1
    for d in range(D):
        s = 0.0
        for p0 in range(0, P, TILE):
            p1 = min(P, p0 + TILE)
            for b in range(n):
                for p in range(p0, p1):
                    x = dnet[b, d * P + p]
                    if by_position:
                        dnet_t[p, d, b] = x
                        grad[(d * P + p) * npw + kb] += x
                    else:
                        dnet_t[d, p, b] = x
                        s += x
        if not by_position:
            grad[d * npw + kb] += s


@njit(cache=True, nogil=True)
def add_bias(out, by_position, w, npw):
    """out (D, P, n) net inputs in (slice, position, case) order, in place: plus the biases
    (that of slice d for CONV, of neuron (d, p) when by_position, as in :func:`scatter_net`)."""
    D, P, n = out.shape
    kb = npw - 1
    for d in range(D):
        for p in range(P):
            bias = w[(d * P + p) * npw + kb] if by_position else w[d * npw + kb]
            for b in range(n):
                out[d, p, b] += bias


def _view(flat, *shape):
    size = 1
    for s in shape:
        size *= s
    return flat[:size].reshape(shape)


class LocalConvLayer:
    """A LOCAL or CONV hidden layer bound to its shapes.

    Work areas are flat float64 arrays handed in by the caller, sized from :meth:`kept_per_case`,
    :meth:`net_per_case`, :meth:`prior_per_case` (times the block size) and :meth:`grad_scratch`."""

    def __init__(self, layer):
        s = layer.spec
        self.layer = layer
        self.shared = layer.kind.shares_weights
        self.S, self.IR, self.IC = layer.prior_depth, layer.prior_height, layer.prior_width
        self.R, self.C, self.D = layer.height, layer.width, layer.depth
        self.geometry = (self.S, self.IR, self.IC, self.R, self.C, s.filter_v, s.filter_h,
                         s.pad_v, s.pad_h, s.stride_v, s.stride_h)
        self.P = self.R * self.C
        self.K = self.S * s.filter_v * s.filter_h
        self.npw = layer.n_prior_weights
        self.n_in = layer.n_prior
        self.n_out = layer.n_neurons

    def kept_per_case(self):
        """Kept from forward to backward: the unrolled windows (later their deltas)."""
        return self.P * self.K

    def net_per_case(self):
        """Scratch: the net inputs, later the reordered deltas."""
        return self.P * self.D

    def prior_per_case(self):
        """Scratch: the prior activations (later their deltas) transposed."""
        return self.n_in

    def grad_scratch(self):
        """Scratch for one block's weight gradient before it is added in (LOCAL only)."""
        return 0 if self.shared else self.P * self.D * self.K

    def _local_weights(self, w):
        return w.reshape(self.D, self.P, self.npw)[:, :, :self.K].transpose(1, 0, 2)  # (P, D, K)

    def forward(self, w, prior, out, cols_area, net_area, t_area):
        """prior (n, n_in) -> out (n, n_out), the net inputs (the caller applies tanh)."""
        n = prior.shape[0]
        P, K, D = self.P, self.K, self.D
        priorT = _view(t_area, self.n_in, n)
        transpose_into(prior, priorT)
        cols = _view(cols_area, K, P, n)
        unroll_windows(priorT, *self.geometry, cols)
        if self.shared:
            net = _view(net_area, D, P, n)
            W = w.reshape(D, self.npw)[:, :K]
            np.matmul(W, cols.reshape(K, P * n), out=net.reshape(D, P * n))
        else:
            net = _view(net_area, P, D, n)
            np.matmul(self._local_weights(w), cols.transpose(1, 0, 2), out=net)
        scatter_net(net, not self.shared, w, self.npw, out)

    def forward_t(self, w, priorT, outT, cols_area):
        """Forward only, in (feature, case) order: priorT (n_in, n) -> outT (n_out, n), the net
        inputs. The same windows and products as :meth:`forward`, without its transpose and
        reorder; nothing is kept for a backward pass, so the windows are unrolled a run of
        positions at a time (cols_area is only scratch) and stay in cache for their product."""
        n = priorT.shape[1]
        P, K, D = self.P, self.K, self.D
        out = outT.reshape(D, P, n)
        step = P if 8 * K * P * n <= WHOLE_BYTES else max(1, min(P, CHUNK_BYTES // (8 * K * n)))
        if self.shared:
            W = w.reshape(D, self.npw)[:, :K]
        else:
            LW = self._local_weights(w)
        for p0 in range(0, P, step):
            p1 = min(P, p0 + step)
            cols = _view(cols_area, K, p1 - p0, n)
            unroll_range(priorT, *self.geometry, p0, p1, cols)
            if self.shared:
                np.matmul(W, cols.reshape(K, (p1 - p0) * n),
                          out=out[:, p0:p1].reshape(D, (p1 - p0) * n))
            else:
                np.matmul(LW[p0:p1], cols.transpose(1, 0, 2), out=out[:, p0:p1].transpose(1, 0, 2))
        add_bias(out, not self.shared, w, self.npw)

    def gradient(self, w, g, dnet, cols_area, net_area, gtmp):
        """dnet (n, n_out): d criterion / d net inputs. Adds the weight gradient into g (this
        layer's part of the gradient vector) and leaves dnet reordered in net_area for
        :meth:`delta`. cols_area as left by forward; gtmp: LOCAL scratch."""
        n = dnet.shape[0]
        P, K, D = self.P, self.K, self.D
        cols = _view(cols_area, K, P, n)
        if self.shared:
            dnet_t = _view(net_area, D, P, n)
            gather_delta(dnet, False, self.npw, dnet_t, g)
            G = g.reshape(D, self.npw)[:, :K]
            G += dnet_t.reshape(D, P * n) @ cols.reshape(K, P * n).T
        else:
            dnet_p = _view(net_area, P, D, n)
            gather_delta(dnet, True, self.npw, dnet_p, g)
            t = _view(gtmp, P, D, K)
            np.matmul(dnet_p, cols.transpose(1, 2, 0), out=t)
            G = g.reshape(D, P, self.npw)[:, :, :K]
            G += t.transpose(1, 0, 2)

    def delta(self, w, cols_area, net_area, t_area, dprior):
        """d criterion / d prior activations into dprior (n, n_in), from the reordered deltas
        :meth:`gradient` left in net_area. The unrolled windows are used up by then: cols_area
        takes the window deltas."""
        n = dprior.shape[0]
        P, K, D = self.P, self.K, self.D
        dpriorT = _view(t_area, self.n_in, n)
        if self.shared:
            W = w.reshape(D, self.npw)[:, :K]
            dcols = _view(cols_area, K, P, n)
            np.matmul(W.T, _view(net_area, D, P * n), out=dcols.reshape(K, P * n))
        else:
            dcols = _view(cols_area, P, K, n)
            np.matmul(self._local_weights(w).transpose(0, 2, 1), _view(net_area, P, D, n),
                      out=dcols)
        fold_windows(dcols, not self.shared, *self.geometry, dpriorT)
        transpose_into(dpriorT, dprior)

    # the steps the host backend takes for every layer kind (see convnet.host.backend)
    def step_forward(self, w, prior, out, work, i, n):
        self.forward(w, prior, out, work.cols[i], work.net, work.tprior)

    def step_forward_t(self, w, priorT, outT, work, i):
        self.forward_t(w, priorT, outT, work.cols[i])

    def step_gradient(self, w, g, dnet, prior, work, i):
        self.gradient(w, g, dnet, work.cols[i], work.net, work.gtmp)

    def step_delta(self, w, dnet, dprior, work, i, n):
        self.delta(w, work.cols[i], work.net, work.tprior, dprior)
