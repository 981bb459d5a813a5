"""Locally connected and convolutional layers on a block of cases: forward and backward.

Both layer kinds see the same windows of the prior layer (Equations 1-5 to 1-8); they differ only in
whether a slice shares one weight set over the visual field (CONV) or every neuron has its own
(LOCAL). So both start by unrolling the windows of a block of B cases into a matrix of "columns":

    cols[p, b, k]   p: position (row*width+col) in this layer's visual field
                    b: case in the block
                    k: (prior slice, filter row, filter col), the order of the weights

with zeros where a window hangs over the padding. Then

* CONV:  net (P*B, D) = cols (P*B, K) @ W[:, :K].T        one matrix product for the block;
* LOCAL: net[p] (B, D) = cols[p] (B, K) @ W[:, p, :K].T   one product per position.

Backward, with dnet the derivative of the criterion with respect to the net inputs:

* weight gradient:  CONV  dW (D, K) += dnet.T @ cols;  LOCAL  dW[:, p] += dnet[p].T @ cols[p];
* prior delta:      dcols = dnet @ W[:, :K] (per position for LOCAL), then the windows are folded
  back onto the prior layer, adding where they overlap (the book's loop reversal, done on blocks).

The products are numpy matrix products (BLAS); the unrolling, folding and reordering are compiled
loops that release the GIL so that several workers can run at once.
"""

import numpy as np
from numba import njit

from ..architecture import CONV


@njit(cache=True, nogil=True)
def unroll_windows(prior, in_slices, in_rows, in_cols, rows, cols_, nfv, nfh,
                   pad_v, pad_h, stride_v, stride_h, out):
    """prior (n, in_slices*in_rows*in_cols) -> out (rows*cols_, n, in_slices*nfv*nfh)."""
    for b in range(prior.shape[0]):
        for r in range(rows):
            r0 = stride_v * r - pad_v
            for c in range(cols_):
                c0 = stride_h * c - pad_h
                p = r * cols_ + c
                m = 0
                for sl in range(in_slices):
                    for fr in range(nfv):
                        ir = r0 + fr
                        if ir < 0 or ir >= in_rows:
                            for fc in range(nfh):
                                out[p, b, m + fc] = 0.0
                        else:
                            base = (sl * in_rows + ir) * in_cols
                            for fc in range(nfh):
                                ic = c0 + fc
                                if 0 <= ic < in_cols:
                                    out[p, b, m + fc] = prior[b, base + ic]
                                else:
                                    out[p, b, m + fc] = 0.0
                        m += nfh


@njit(cache=True, nogil=True)
def fold_windows(dcols, in_slices, in_rows, in_cols, rows, cols_, nfv, nfh,
                 pad_v, pad_h, stride_v, stride_h, dprior):
    """The adjoint of :func:`unroll_windows`: dprior (n, in_size) = sum of the window pieces."""
    size = in_slices * in_rows * in_cols
    for b in range(dprior.shape[0]):
        for i in range(size):
            dprior[b, i] = 0.0
        for r in range(rows):
            r0 = stride_v * r - pad_v
            for c in range(cols_):
                c0 = stride_h * c - pad_h
                p = r * cols_ + c
                m = 0
                for sl in range(in_slices):
                    for fr in range(nfv):
                        ir = r0 + fr
                        if 0 <= ir < in_rows:
                            base = (sl * in_rows + ir) * in_cols
                            for fc in range(nfh):
                                ic = c0 + fc
                                if 0 <= ic < in_cols:
                                    dprior[b, base + ic] += dcols[p, b, m + fc]
                        m += nfh


@njit(cache=True, nogil=True)
def scatter_net(net, w, npw, shared, out):
    """net (P, n, D) plus bias -> out (n, D*P) in (depth, height, width) order.

    The bias of slice d is w[d*npw + npw-1] (CONV) or that of neuron (d, p) is
    w[(d*P + p)*npw + npw-1] (LOCAL)."""
    P = net.shape[0]
    D = net.shape[2]
    kb = npw - 1
    for b in range(net.shape[1]):
        for p in range(P):
            for d in range(D):
                if shared:
                    bias = w[d * npw + kb]
                else:
                    bias = w[(d * P + p) * npw + kb]
                out[b, d * P + p] = net[p, b, d] + bias


@njit(cache=True, nogil=True)
def gather_delta(dnet, npw, shared, dnet_p, grad):
    """dnet (n, D*P) -> dnet_p (P, n, D); adds the bias gradient into grad (layer's part)."""
    P = dnet_p.shape[0]
    D = dnet_p.shape[2]
    kb = npw - 1
    for b in range(dnet.shape[0]):
        for d in range(D):
            for p in range(P):
                x = dnet[b, d * P + p]
                dnet_p[p, b, d] = x
                if shared:
                    grad[d * npw + kb] += x
                else:
                    grad[(d * P + p) * npw + kb] += x


class LocalConvLayer:
    """A LOCAL or CONV hidden layer bound to its shapes."""

    def __init__(self, layer):
        s = layer.spec
        self.layer = layer
        self.shared = layer.kind == CONV
        self.in_slices = layer.prior_depth
        self.in_rows, self.in_cols = layer.prior_height, layer.prior_width
        self.rows, self.cols, self.depth = layer.height, layer.width, layer.depth
        self.nfv, self.nfh = s.filter_v, s.filter_h
        self.pad_v, self.pad_h = s.pad_v, s.pad_h
        self.stride_v, self.stride_h = s.stride_v, s.stride_h
        self.P = self.rows * self.cols
        self.K = self.in_slices * self.nfv * self.nfh
        self.npw = layer.n_prior_weights
        self.n_in = layer.n_prior
        self.n_out = layer.n_neurons

    # -- sizes of the work areas this layer needs, in float64 elements per case
    def kept_per_case(self):
        """Kept from forward to backward: the unrolled windows."""
        return self.P * self.K

    def scratch_per_case(self):
        """Scratch, shared with other layers: net inputs or dnet reordered, and dcols."""
        return {"net": self.P * self.depth, "dcols": self.P * self.K}

    def grad_scratch(self):
        """Scratch for one block's weight gradient before it is added in (LOCAL only)."""
        return 0 if self.shared else self.P * self.depth * self.K

    def _weights(self, w):
        if self.shared:
            return w.reshape(self.depth, self.npw)[:, :self.K]                 # (D, K)
        return w.reshape(self.depth, self.P, self.npw)[:, :, :self.K]          # (D, P, K)

    def forward(self, w, prior, cols, net, out):
        """prior (n, n_in) -> out (n, n_out), the net inputs (the caller applies tanh).
        Work areas sized for this block: cols (P, n, K), kept for backward; net (P, n, D)."""
        n = prior.shape[0]
        unroll_windows(prior, self.in_slices, self.in_rows, self.in_cols, self.rows, self.cols,
                       self.nfv, self.nfh, self.pad_v, self.pad_h, self.stride_v, self.stride_h,
                       cols)
        W = self._weights(w)
        if self.shared:
            np.matmul(cols.reshape(self.P * n, self.K), W.T,
                      out=net.reshape(self.P * n, self.depth))
        else:
            np.matmul(cols, W.transpose(1, 2, 0), out=net)
        scatter_net(net, w, self.npw, self.shared, out)

    def gradient(self, w, g, dnet, cols, dnet_p, gtmp):
        """dnet (n, n_out): d criterion / d net inputs. Reorders it into dnet_p (P, n, D) for
        :meth:`delta` and adds the weight gradient into g (this layer's part of the gradient
        vector). cols as left by forward; gtmp (P, D, K) scratch for LOCAL (None for CONV)."""
        n = dnet.shape[0]
        gather_delta(dnet, self.npw, self.shared, dnet_p, g)
        if self.shared:
            G = g.reshape(self.depth, self.npw)[:, :self.K]
            G += dnet_p.reshape(self.P * n, self.depth).T @ cols.reshape(self.P * n, self.K)
        else:
            np.matmul(dnet_p.transpose(0, 2, 1), cols, out=gtmp)
            G = g.reshape(self.depth, self.P, self.npw)[:, :, :self.K]
            G += gtmp.transpose(1, 0, 2)

    def delta(self, w, dnet_p, dcols, dprior):
        """d criterion / d prior activations into dprior (n, n_in), from dnet_p (P, n, D) as left
        by :meth:`gradient`; dcols (P, n, K) scratch."""
        n = dnet_p.shape[1]
        W = self._weights(w)
        if self.shared:
            np.matmul(dnet_p.reshape(self.P * n, self.depth), W,
                      out=dcols.reshape(self.P * n, self.K))
        else:
            np.matmul(dnet_p, W.transpose(1, 0, 2), out=dcols)
        fold_windows(dcols, self.in_slices, self.in_rows, self.in_cols, self.rows, self.cols,
                     self.nfv, self.nfh, self.pad_v, self.pad_h, self.stride_v, self.stride_h,
                     dprior)
