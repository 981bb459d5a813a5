"""Average and max pooling layers on a block of cases: forward and backward.

Each slice is pooled on its own, with no padding; windows are width_v x width_h and move by the
strides. Max pooling keeps the first maximum in row-then-column order of its window and records
its position (row*prior_cols+col within the prior slice, as the book's poolmax_id) so that the
backward pass hands the whole delta to that one element. Blocks are in (feature, case) order, so
every loop runs over the cases innermost.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def pool_forward_ids(priorT, depth, in_rows, in_cols, rows, cols, pw_v, pw_h, stride_v, stride_h,
                     is_max, outT, ids):
    """In (feature, case) order: priorT (depth*in_rows*in_cols, n) -> outT (depth*rows*cols, n)
    and, for max pooling, ids (same shape) int32 winners. The cases are the inner loop."""
    n = priorT.shape[1]
    share = 1.0 / (pw_v * pw_h)
    k = 0
    for d in range(depth):
        sbase = d * in_rows * in_cols
        for r in range(rows):
            r0 = stride_v * r
            for c in range(cols):
                c0 = stride_h * c
                if is_max:
                    # branchless (selects, so that the case loop vectorises); a later element
                    # wins only when strictly larger, so the first maximum is kept
                    first = r0 * in_cols + c0
                    o = outT[k]
                    won = ids[k]
                    src = priorT[sbase + first]
                    for b in range(n):
                        o[b] = src[b]
                        won[b] = first
                    for ir in range(r0, r0 + pw_v):
                        for ic in range(c0, c0 + pw_h):
                            at = ir * in_cols + ic
                            if at == first:
                                continue
                            src = priorT[sbase + at]
                            for b in range(n):
                                x = src[b]
                                best = o[b]
                                larger = x > best
                                o[b] = x if larger else best
                                won[b] = np.int32(at) if larger else won[b]
                else:
                    for b in range(n):
                        outT[k, b] = 0.0
                    for ir in range(r0, r0 + pw_v):
                        for ic in range(c0, c0 + pw_h):
                            src = sbase + ir * in_cols + ic
                            for b in range(n):
                                outT[k, b] += priorT[src, b]
                    for b in range(n):
                        outT[k, b] *= share
                k += 1


@njit(cache=True, nogil=True)
def pool_forward_t(priorT, depth, in_rows, in_cols, rows, cols, pw_v, pw_h, stride_v, stride_h,
                   is_max, outT):
    """Forward only, in (feature, case) order: priorT (depth*in_rows*in_cols, n) ->
    outT (depth*rows*cols, n), no winner ids. The same values as :func:`pool_forward_ids` (the same
    comparisons and sums in the same order), with the cases as the inner loop."""
    n = priorT.shape[1]
    share = 1.0 / (pw_v * pw_h)
    k = 0
    for d in range(depth):
        sbase = d * in_rows * in_cols
        for r in range(rows):
            r0 = stride_v * r
            for c in range(cols):
                c0 = stride_h * c
                if is_max:
                    first = sbase + r0 * in_cols + c0
                    for b in range(n):
                        outT[k, b] = priorT[first, b]
                    for ir in range(r0, r0 + pw_v):
                        for ic in range(c0, c0 + pw_h):
                            src = sbase + ir * in_cols + ic
                            for b in range(n):
                                x = priorT[src, b]
                                best = outT[k, b]
                                outT[k, b] = x if x > best else best
                else:
                    for b in range(n):
                        outT[k, b] = 0.0
                    for ir in range(r0, r0 + pw_v):
                        for ic in range(c0, c0 + pw_h):
                            src = sbase + ir * in_cols + ic
                            for b in range(n):
                                outT[k, b] += priorT[src, b]
                    for b in range(n):
                        outT[k, b] *= share
                k += 1


@njit(cache=True, nogil=True, fastmath={"contract"})
def pool_backward_t(doutT, ids, outT, prior_act, tanh_prior, depth, in_rows, in_cols, rows, cols,
                    pw_v, pw_h, stride_v, stride_h, is_max, dpriorT):
    """doutT (depth*rows*cols, n) -> dpriorT (depth*in_rows*in_cols, n), in (feature, case) order.
    When tanh_prior, the prior layer's activations are tanh values and dpriorT gets d criterion /
    d its net inputs instead, times tanh' = 1 - a^2 (Equation 1-15): for max pooling a is the
    pooled value outT (the winner's own activation), for average pooling prior_act."""
    n = doutT.shape[1]
    share = 1.0 / (pw_v * pw_h)
    for i in range(dpriorT.shape[0]):
        for b in range(n):
            dpriorT[i, b] = 0.0
    k = 0
    for d in range(depth):
        sbase = d * in_rows * in_cols
        for r in range(rows):
            r0 = stride_v * r
            for c in range(cols):
                if is_max:
                    for b in range(n):
                        g = doutT[k, b]
                        if tanh_prior:
                            a = outT[k, b]
                            g *= 1.0 - a * a
                        dpriorT[sbase + ids[k, b], b] += g
                else:
                    c0 = stride_h * c
                    for ir in range(r0, r0 + pw_v):
                        for ic in range(c0, c0 + pw_h):
                            src = sbase + ir * in_cols + ic
                            for b in range(n):
                                dpriorT[src, b] += doutT[k, b] * share
                k += 1
    if tanh_prior and not is_max:
        for i in range(dpriorT.shape[0]):
            for b in range(n):
                a = prior_act[i, b]
                dpriorT[i, b] *= 1.0 - a * a


class PoolLayer:
    """A POOLAVG or POOLMAX hidden layer bound to its shapes."""

    def __init__(self, layer):
        s = layer.spec
        self.layer = layer
        self.is_max = layer.kind.keeps_winners
        self.args = (layer.depth, layer.prior_height, layer.prior_width, layer.height, layer.width,
                     s.width_v, s.width_h, s.stride_v, s.stride_h, self.is_max)
        self.n_in = layer.n_prior
        self.n_out = layer.n_neurons

    # work areas (see convnet.host.backend): none beyond the winners' ids
    def kept_per_case(self):
        return 0

    def grad_scratch(self):
        return 0

    def forward(self, priorT, outT, ids):
        """priorT (n_in, n) -> outT (n_out, n); ids (n_out, n) int32 winners for max pooling."""
        pool_forward_ids(priorT, *self.args, outT, ids)

    def forward_t(self, priorT, outT):
        """Forward only: priorT (n_in, n) -> outT (n_out, n), no winner ids."""
        pool_forward_t(priorT, *self.args, outT)

    def backward(self, doutT, ids, outT, prior_act, dpriorT):
        """doutT (n_out, n): d criterion / d this layer's activations -> dpriorT (n_in, n); times
        the prior layer's tanh' when its activations prior_act (n_in, n) are given, not None
        (see :func:`pool_backward_t`)."""
        tanh_prior = prior_act is not None
        pool_backward_t(doutT, ids, outT, outT if prior_act is None else prior_act, tanh_prior,
                        *self.args, dpriorT)

    # the steps the host backend takes for every layer kind (see convnet.host.backend); the
    # weights are this layer's part of the vector, which is empty
    def step_forward(self, w, priorT, outT, work, i, n, tanh=True):
        self.forward(priorT, outT, work.ids_view(i, n))

    def step_forward_t(self, w, priorT, outT, work, i):
        self.forward_t(priorT, outT)

    def step_gradient(self, w, g, dnetT, priorT, work, i):
        raise AssertionError("a pooling layer has no weights")

    def step_delta(self, w, dnetT, dpriorT, work, i, n, act, prior_act):
        self.backward(dnetT, work.ids_view(i, n), act, prior_act, dpriorT)
