"""Average and max pooling layers on a block of cases: forward and backward.

Each slice is pooled on its own, with no padding; windows are width_v x width_h and move by the
strides. Max pooling keeps the first maximum in row-then-column order of its window and records
its position (row*prior_cols+col within the prior slice, as the book's poolmax_id) so that the
backward pass hands the whole delta to that one element.
"""

from numba import njit


@njit(cache=True, nogil=True)
def pool_forward(prior, depth, in_rows, in_cols, rows, cols, pw_v, pw_h, stride_v, stride_h,
                 is_max, out, ids):
    """prior (n, depth*in_rows*in_cols) -> out (n, depth*rows*cols); ids (n, same) for max."""
    share = 1.0 / (pw_v * pw_h)
    for b in range(prior.shape[0]):
        k = 0
        for d in range(depth):
            sbase = d * in_rows * in_cols
            for r in range(rows):
                r0 = stride_v * r
                for c in range(cols):
                    c0 = stride_h * c
                    if is_max:
                        best_id = r0 * in_cols + c0
                        best = prior[b, sbase + best_id]
                        for ir in range(r0, r0 + pw_v):
                            for ic in range(c0, c0 + pw_h):
                                x = prior[b, sbase + ir * in_cols + ic]
                                if x > best:
                                    best = x
                                    best_id = ir * in_cols + ic
                        out[b, k] = best
                        ids[b, k] = best_id
                    else:
                        s = 0.0
                        for ir in range(r0, r0 + pw_v):
                            for ic in range(c0, c0 + pw_h):
                                s += prior[b, sbase + ir * in_cols + ic]
                        out[b, k] = s * share
                    k += 1


@njit(cache=True, nogil=True)
def pool_forward_t(priorT, depth, in_rows, in_cols, rows, cols, pw_v, pw_h, stride_v, stride_h,
                   is_max, outT):
    """Forward only, in (feature, case) order: priorT (depth*in_rows*in_cols, n) ->
    outT (depth*rows*cols, n), no winner ids. The same values as :func:`pool_forward` (the same
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


@njit(cache=True, nogil=True)
def pool_backward(dout, ids, depth, in_rows, in_cols, rows, cols, pw_v, pw_h, stride_v, stride_h,
                  is_max, dprior):
    """dout (n, depth*rows*cols) -> dprior (n, depth*in_rows*in_cols)."""
    share = 1.0 / (pw_v * pw_h)
    n_in = depth * in_rows * in_cols
    for b in range(dout.shape[0]):
        for i in range(n_in):
            dprior[b, i] = 0.0
        k = 0
        for d in range(depth):
            sbase = d * in_rows * in_cols
            for r in range(rows):
                r0 = stride_v * r
                for c in range(cols):
                    if is_max:
                        dprior[b, sbase + ids[b, k]] += dout[b, k]
                    else:
                        x = dout[b, k] * share
                        c0 = stride_h * c
                        for ir in range(r0, r0 + pw_v):
                            for ic in range(c0, c0 + pw_h):
                                dprior[b, sbase + ir * in_cols + ic] += x
                    k += 1


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

    def net_per_case(self):
        return 0

    def prior_per_case(self):
        return 0

    def grad_scratch(self):
        return 0

    def forward(self, prior, out, ids):
        """prior (n, n_in) -> out (n, n_out); ids (n, n_out) int32 winners for max pooling."""
        pool_forward(prior, *self.args, out, ids)

    def forward_t(self, priorT, outT):
        """Forward only, in (feature, case) order: priorT (n_in, n) -> outT (n_out, n)."""
        pool_forward_t(priorT, *self.args, outT)

    def backward(self, dout, ids, dprior):
        """dout (n, n_out): d criterion / d this layer's activations -> dprior (n, n_in)."""
        pool_backward(dout, ids, *self.args, dprior)

    # the steps the host backend takes for every layer kind (see convnet.host.backend); the
    # weights are this layer's part of the vector, which is empty
    def step_forward(self, w, prior, out, work, i, n):
        self.forward(prior, out, work.ids_view(i, n))

    def step_forward_t(self, w, priorT, outT, work, i):
        self.forward_t(priorT, outT)

    def step_gradient(self, w, g, dnet, prior, work, i):
        raise AssertionError("a pooling layer has no weights")

    def step_delta(self, w, dnet, dprior, work, i, n):
        self.backward(dnet, work.ids_view(i, n), dprior)
