"""Locally connected and convolutional layers on a block of cases: forward and backward.

Both layer kinds see the same windows of the prior layer (Equations 1-5 to 1-8); they differ only in
whether a slice shares one weight set over the visual field (CONV) or every neuron has its own
(LOCAL). Indices: b is a case of the block of n cases, p a position (row*width+col) in this layer's
visual field, k = (prior slice, filter row, filter col), the order of the weights, d a slice of this
layer.

Blocks are kept in (feature, case) order: a layer's activations are a (n_out, n) matrix, here
(D, P, n). Both kinds start by unrolling the windows of the prior block priorT (n_in, n) into a
matrix of "columns" cols[k, p, b]: the prior value under element k of the window of position p,
or 0 where the window hangs over the padding, each (k, p) one contiguous copy of n values. Then

    CONV   net (D, P*n) = W[:, :K] (D, K) @ cols (K, P*n)         one matrix product for the block
           dW (D, K)   += dnet (D, P*n) @ cols.T                  weight gradient
           dcols (K, P*n) = W[:, :K].T @ dnet                     deltas of the window elements
    LOCAL  net[:, p] (D, n) = W[:, p, :K] (D, K) @ cols[:, p] (K, n) one product per position
           dW[:, p]    += dnet[:, p] (D, n) @ cols[:, p].T
           dcols[p] (K, n) = W[:, p, :K].T @ dnet[:, p]

The products write straight into the (D, P, n) block (LOCAL through a strided view), the bias and
tanh are one fused pass (:mod:`~convnet.host.activation`), and the bias gradient is a row sum of
dnet. Folding dcols back onto the prior layer, adding where windows overlap, gives d criterion /
d prior activations: the book's loop reversal, done on blocks. The products are numpy matrix
products (BLAS); unrolling and folding are compiled loops that release the GIL, so that several
workers run at once. A CONV layer with strides of 1 and few weights per filter computes its net
inputs and weight gradient without the windows (:mod:`~convnet.host.conv_direct`), where they
would cost more than the products.
"""

import numpy as np
from numba import njit

from . import conv_direct
from .activation import bias_tanh, tanh_inplace
from .output import tanh_backward

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
def add_bias(out, by_position, w, npw):
    """out (D, P, n) net inputs in (slice, position, case) order, in place: plus the biases
    (that of slice d for CONV, of neuron (d, p) when by_position; the bias is the last weight of
    each neuron)."""
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

    Work areas are flat float64 arrays handed in by the caller, sized from :meth:`kept_per_case`
    (times the block size) and :meth:`grad_scratch`."""

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
        # CONV layers with small filters skip the unrolled windows (see convnet.host.conv_direct)
        self.direct = conv_direct.fits(layer)
        self.direct_geometry = (self.S, self.IR, self.IC, self.R, self.C, s.filter_v, s.filter_h,
                                s.pad_v, s.pad_h)

    def kept_per_case(self):
        """Kept from forward to backward: the unrolled windows (later their deltas)."""
        return self.P * self.K

    def grad_scratch(self):
        """Scratch for one block's weight gradient before it is added in (LOCAL only)."""
        return 0 if self.shared else self.P * self.D * self.K

    def _local_weights(self, w):
        return w.reshape(self.D, self.P, self.npw)[:, :, :self.K].transpose(1, 0, 2)  # (P, D, K)

    def _bias(self, w):
        """The biases as (D, 1) for CONV (one per slice), (D, P) for LOCAL (one per neuron)."""
        if self.shared:
            return w.reshape(self.D, self.npw)[:, self.K:]
        return w.reshape(self.D, self.P, self.npw)[:, :, self.K]

    def _products(self, w, cols, out, p0, p1):
        """out[:, p0:p1] (D, p1-p0, n) = the products of the weights and the windows
        cols (K, p1-p0, n) of positions p0..p1-1 (no bias)."""
        K, D = self.K, self.D
        n = cols.shape[2]
        if self.shared:
            W = w.reshape(D, self.npw)[:, :K]
            np.matmul(W, cols.reshape(K, (p1 - p0) * n), out=out[:, p0:p1].reshape(D, (p1 - p0) * n))
        else:
            np.matmul(self._local_weights(w)[p0:p1], cols.transpose(1, 0, 2),
                      out=out[:, p0:p1].transpose(1, 0, 2))

    def _direct_forward(self, w, priorT, outT):
        """outT (n_out, n) = the net inputs, bias included, without unrolled windows."""
        conv_direct.conv_forward(priorT, w.reshape(self.D, self.npw), *self.direct_geometry,
                                 outT.reshape(self.D, self.P * priorT.shape[1]))

    def forward(self, w, priorT, outT, cols_area, tanh=True):
        """priorT (n_in, n) -> outT (n_out, n), the activations tanh(net input) (the net inputs
        when tanh is False: a max pooling layer applies it to the pooled values); the unrolled
        windows stay in cols_area for :meth:`gradient`."""
        n = priorT.shape[1]
        P, K, D = self.P, self.K, self.D
        out = outT.reshape(D, P, n)
        if self.direct:         # the bias is in the net inputs already
            self._direct_forward(w, priorT, outT)
            if tanh:
                tanh_inplace(outT)
            return
        cols = _view(cols_area, K, P, n)
        unroll_windows(priorT, *self.geometry, cols)
        self._products(w, cols, out, 0, P)
        if tanh:
            bias_tanh(out, self._bias(w))
        else:
            add_bias(out, not self.shared, w, self.npw)

    def forward_t(self, w, priorT, outT, cols_area):
        """Forward only: priorT (n_in, n) -> outT (n_out, n), the net inputs (no tanh). The same
        windows and products as :meth:`forward`; nothing is kept for a backward pass, so the
        windows are unrolled a run of positions at a time (cols_area is only scratch) and stay in
        cache for their product."""
        n = priorT.shape[1]
        P, K, D = self.P, self.K, self.D
        if self.direct:
            self._direct_forward(w, priorT, outT)
            return
        out = outT.reshape(D, P, n)
        step = P if 8 * K * P * n <= WHOLE_BYTES else max(1, min(P, CHUNK_BYTES // (8 * K * n)))
        for p0 in range(0, P, step):
            p1 = min(P, p0 + step)
            cols = _view(cols_area, K, p1 - p0, n)
            unroll_range(priorT, *self.geometry, p0, p1, cols)
            self._products(w, cols, out, p0, p1)
        add_bias(out, not self.shared, w, self.npw)

    def gradient(self, w, g, dnetT, cols_area, gtmp, priorT):
        """dnetT (n_out, n): d criterion / d net inputs. Adds the weight gradient into g (this
        layer's part of the gradient vector). cols_area as left by :meth:`forward` (the direct
        path reads priorT (n_in, n) instead); gtmp: LOCAL scratch."""
        n = dnetT.shape[1]
        P, K, D = self.P, self.K, self.D
        cols = _view(cols_area, K, P, n)
        dnet = dnetT.reshape(D, P, n)
        if self.shared:
            G = g.reshape(D, self.npw)
            if self.direct:
                conv_direct.conv_weight_gradient(priorT, dnetT.reshape(D, P * n),
                                                 *self.direct_geometry, G)
            else:
                G[:, :K] += dnet.reshape(D, P * n) @ cols.reshape(K, P * n).T
            G[:, K] += dnet.reshape(D, P * n).sum(axis=1)
        else:
            t = _view(gtmp, P, D, K)
            np.matmul(dnet.transpose(1, 0, 2), cols.transpose(1, 2, 0), out=t)
            G = g.reshape(D, P, self.npw)
            G[:, :, :K] += t.transpose(1, 0, 2)
            G[:, :, K] += dnet.sum(axis=2)

    def delta(self, w, dnetT, cols_area, dpriorT):
        """d criterion / d prior activations into dpriorT (n_in, n), from dnetT (n_out, n). The
        unrolled windows are used up by then: cols_area takes the window deltas."""
        n = dnetT.shape[1]
        P, K, D = self.P, self.K, self.D
        dnet = dnetT.reshape(D, P, n)
        if self.shared:
            W = w.reshape(D, self.npw)[:, :K]
            dcols = _view(cols_area, K, P, n)
            np.matmul(W.T, dnet.reshape(D, P * n), out=dcols.reshape(K, P * n))
        else:
            dcols = _view(cols_area, P, K, n)
            np.matmul(self._local_weights(w).transpose(0, 2, 1), dnet.transpose(1, 0, 2),
                      out=dcols)
        fold_windows(dcols, not self.shared, *self.geometry, dpriorT)

    # the steps the host backend takes for every layer kind (see convnet.host.backend)
    def step_forward(self, w, priorT, outT, work, i, n, tanh=True):
        self.forward(w, priorT, outT, work.cols[i], tanh)

    def step_forward_t(self, w, priorT, outT, work, i):
        self.forward_t(w, priorT, outT, work.cols[i])

    def step_gradient(self, w, g, dnetT, priorT, work, i):
        self.gradient(w, g, dnetT, work.cols[i], work.gtmp, priorT)

    def step_delta(self, w, dnetT, dpriorT, work, i, n, act, prior_act):
        self.delta(w, dnetT, work.cols[i], dpriorT)
        if prior_act is not None:
            tanh_backward(dpriorT, prior_act)
