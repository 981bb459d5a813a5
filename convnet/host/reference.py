"""The plain per-case host algorithms of chapter 2, kept as the tested reference.

Every routine here works on one case at a time with flat arrays, in the loop order of the book's
non-threaded routines: activations of each layer family, the criterion (Equation 1-13 plus the
weight penalty), and the gradient by backpropagation (steps 1-9 of the summary in chapter 1).
Nothing here is tuned for speed; the fast path in :mod:`convnet.host.backend` is held to these
results by the tests.

Conventions (shared with the rest of the package):

* a layer's activations are a flat vector in (depth, height, width) order;
* the input image of a case is the "activity" of the layer before the first hidden layer, with
  depth = bands, height = rows, width = cols;
* weights are in the book's host order (see :mod:`convnet.architecture`);
* the gradient returned is the TRUE gradient d criterion / d weights (the book's routines return
  its negative, because they work with the negative log likelihood's ascent direction).

Max pooling keeps the first maximum found in row-then-column order of its window; only that
element receives the backpropagated delta.
"""

import math

import numpy as np
from numba import njit

# Added to the probability of the true class before taking its log (Equation 1-11 guard).
LOG_GUARD = 1e-30


# ------------------------------------------------------------------------------ forward, one case
@njit(cache=True)
def activity_fc(prior, w, n_out, nonlinear, out):
    """Fully connected layer (Equation 1-1): every neuron sees the whole prior layer, bias last."""
    n_in = prior.shape[0]
    npw = n_in + 1
    for i in range(n_out):
        s = 0.0
        base = i * npw
        for j in range(n_in):
            s += prior[j] * w[base + j]
        s += w[base + n_in]
        out[i] = math.tanh(s) if nonlinear else s


@njit(cache=True)
def activity_local_conv(prior, in_rows, in_cols, in_slices, w, height, width, depth,
                        hw_v, hw_h, pad_v, pad_h, stride_v, stride_h, shared, out):
    """Locally connected (shared=False) or convolutional (shared=True) layer, Equations 1-5 / 1-6.

    The window of the neuron at (row, col) begins at (stride*row - pad, stride*col - pad) in the
    prior layer and spans 2*half-width+1 rows and columns; positions outside the prior layer are
    the zero padding and contribute nothing.
    """
    nfv = 2 * hw_v + 1
    nfh = 2 * hw_h + 1
    npw = in_slices * nfv * nfh + 1
    k = 0
    for d in range(depth):
        for r in range(height):
            for c in range(width):
                base = (d if shared else k) * npw
                r0 = stride_v * r - pad_v
                c0 = stride_h * c - pad_h
                s = 0.0
                m = base
                for sl in range(in_slices):
                    for fr in range(nfv):
                        ir = r0 + fr
                        for fc in range(nfh):
                            ic = c0 + fc
                            if 0 <= ir < in_rows and 0 <= ic < in_cols:
                                s += prior[(sl * in_rows + ir) * in_cols + ic] * w[m]
                            m += 1
                s += w[m]                       # bias
                out[k] = math.tanh(s)
                k += 1


@njit(cache=True)
def activity_pool(prior, in_rows, in_cols, height, width, depth, pw_v, pw_h,
                  stride_v, stride_h, is_max, out, ids):
    """Average or max pooling, slice by slice, no padding. For max pooling ``ids`` receives
    row*in_cols+col of the winner within its prior slice (the first maximum in scan order)."""
    k = 0
    for d in range(depth):
        for r in range(height):
            for c in range(width):
                r0 = stride_v * r
                c0 = stride_h * c
                if is_max:
                    best = -np.inf
                    best_id = -1
                    for ir in range(r0, r0 + pw_v):
                        for ic in range(c0, c0 + pw_h):
                            x = prior[(d * in_rows + ir) * in_cols + ic]
                            if best_id < 0 or x > best:
                                best = x
                                best_id = ir * in_cols + ic
                    out[k] = best
                    ids[k] = best_id
                else:
                    s = 0.0
                    for ir in range(r0, r0 + pw_v):
                        for ic in range(c0, c0 + pw_h):
                            s += prior[(d * in_rows + ir) * in_cols + ic]
                    out[k] = s / (pw_v * pw_h)
                k += 1


@njit(cache=True)
def softmax(logits, out):
    """Equation 1-10 with the largest logit subtracted first (the same value, no overflow)."""
    n = logits.shape[0]
    top = logits[0]
    for i in range(1, n):
        if logits[i] > top:
            top = logits[i]
    s = 0.0
    for i in range(n):
        out[i] = math.exp(logits[i] - top)
        s += out[i]
    for i in range(n):
        out[i] /= s


# ------------------------------------------------------------------------------ backward, one case
@njit(cache=True)
def delta_from_fc(next_delta, next_w, n_this, out):
    """d criterion / d activation of this layer when the next layer is fully connected
    (the sum in Equation 1-19): weight j*(n_this+1)+i links this neuron i to next neuron j."""
    npw = n_this + 1
    for i in range(n_this):
        s = 0.0
        for j in range(next_delta.shape[0]):
            s += next_delta[j] * next_w[j * npw + i]
        out[i] = s


@njit(cache=True)
def delta_from_local_conv(next_delta, next_w, this_rows, this_cols, this_slices,
                          next_rows, next_cols, next_slices, hw_v, hw_h, pad_v, pad_h,
                          stride_v, stride_h, shared, out):
    """The same sum when the next layer is locally connected or convolutional: the loops run over
    the next layer's neurons and their windows, each connection adding its share (the book's loop
    reversal)."""
    nfv = 2 * hw_v + 1
    nfh = 2 * hw_h + 1
    npw = this_slices * nfv * nfh + 1
    for i in range(this_rows * this_cols * this_slices):
        out[i] = 0.0
    kn = 0
    for nd in range(next_slices):
        for nr in range(next_rows):
            for nc in range(next_cols):
                m = (nd if shared else kn) * npw
                r0 = stride_v * nr - pad_v
                c0 = stride_h * nc - pad_h
                dn = next_delta[kn]
                for sl in range(this_slices):
                    for fr in range(nfv):
                        ir = r0 + fr
                        for fc in range(nfh):
                            ic = c0 + fc
                            if 0 <= ir < this_rows and 0 <= ic < this_cols:
                                out[(sl * this_rows + ir) * this_cols + ic] += dn * next_w[m]
                            m += 1
                kn += 1


@njit(cache=True)
def delta_from_pool(next_delta, next_ids, this_rows, this_cols, next_rows, next_cols,
                    next_slices, pw_v, pw_h, stride_v, stride_h, is_max, out):
    """The same sum when the next layer is a pooling layer: an average spreads each next delta
    evenly over its window; a maximum hands it whole to the winner."""
    for i in range(this_rows * this_cols * next_slices):
        out[i] = 0.0
    share = 1.0 / (pw_v * pw_h)
    kn = 0
    for nd in range(next_slices):
        for nr in range(next_rows):
            for nc in range(next_cols):
                if is_max:
                    out[nd * this_rows * this_cols + next_ids[kn]] += next_delta[kn]
                else:
                    r0 = stride_v * nr
                    c0 = stride_h * nc
                    for ir in range(r0, r0 + pw_v):
                        for ic in range(c0, c0 + pw_h):
                            out[(nd * this_rows + ir) * this_cols + ic] += next_delta[kn] * share
                kn += 1


@njit(cache=True)
def grad_fc(delta, prior, grad):
    """Equations 1-14 / 1-20 for a fully connected layer: each neuron's delta times each input."""
    n_in = prior.shape[0]
    npw = n_in + 1
    for i in range(delta.shape[0]):
        base = i * npw
        for j in range(n_in):
            grad[base + j] += delta[i] * prior[j]
        grad[base + n_in] += delta[i]


@njit(cache=True)
def grad_local_conv(delta, prior, in_rows, in_cols, in_slices, height, width, depth,
                    hw_v, hw_h, pad_v, pad_h, stride_v, stride_h, shared, grad):
    """Equation 1-20 for a locally connected or convolutional layer (padding inputs are zero)."""
    nfv = 2 * hw_v + 1
    nfh = 2 * hw_h + 1
    npw = in_slices * nfv * nfh + 1
    k = 0
    for d in range(depth):
        for r in range(height):
            for c in range(width):
                m = (d if shared else k) * npw
                r0 = stride_v * r - pad_v
                c0 = stride_h * c - pad_h
                dk = delta[k]
                for sl in range(in_slices):
                    for fr in range(nfv):
                        ir = r0 + fr
                        for fc in range(nfh):
                            ic = c0 + fc
                            if 0 <= ir < in_rows and 0 <= ic < in_cols:
                                grad[m] += dk * prior[(sl * in_rows + ir) * in_cols + ic]
                            m += 1
                grad[m] += dk
                k += 1


# ------------------------------------------------------------------------------ the layer kinds
# Each layer kind names its class here in convnet.architecture.kinds; the model below calls them
# without knowing which kind it has.
class FCReference:
    """A fully connected layer (and the output layer): Equations 1-1, 1-14, 1-19."""

    def __init__(self, layer):
        self.layer = layer

    def forward(self, w, prior, out, ids, nonlinear=True):
        activity_fc(prior, w, self.layer.depth, nonlinear, out)

    def delta_to_prior(self, delta, w, ids, prior_delta):
        """d criterion / d prior activations from this layer's d criterion / d net input."""
        delta_from_fc(delta, w, self.layer.n_prior, prior_delta)

    def gradient(self, delta, prior, g):
        grad_fc(delta, prior, g)


class LocalConvReference:
    """A locally connected or convolutional layer (the kind says whether weights are shared)."""

    def __init__(self, layer):
        self.layer = layer
        s, L = layer.spec, layer
        self.window = (s.hw_v, s.hw_h, s.pad_v, s.pad_h, s.stride_v, s.stride_h,
                       layer.kind.shares_weights)
        self.prior_shape = (L.prior_height, L.prior_width, L.prior_depth)
        self.shape = (L.height, L.width, L.depth)

    def forward(self, w, prior, out, ids):
        activity_local_conv(prior, *self.prior_shape, w, *self.shape, *self.window, out)

    def delta_to_prior(self, delta, w, ids, prior_delta):
        delta_from_local_conv(delta, w, *self.prior_shape, *self.shape, *self.window, prior_delta)

    def gradient(self, delta, prior, g):
        grad_local_conv(delta, prior, *self.prior_shape, *self.shape, *self.window, g)


class PoolReference:
    """An average or max pooling layer (the kind says which, and whether winners are kept)."""

    _NO_IDS = np.zeros(1, dtype=np.int64)

    def __init__(self, layer):
        self.layer = layer
        s = layer.spec
        self.is_max = layer.kind.keeps_winners
        self.window = (s.width_v, s.width_h, s.stride_v, s.stride_h, self.is_max)

    def forward(self, w, prior, out, ids):
        L = self.layer
        activity_pool(prior, L.prior_height, L.prior_width, L.height, L.width, L.depth,
                      *self.window, out, ids)

    def delta_to_prior(self, delta, w, ids, prior_delta):
        L = self.layer
        delta_from_pool(delta, self._NO_IDS if ids is None else ids, L.prior_height,
                        L.prior_width, L.height, L.width, L.depth, *self.window, prior_delta)

    def gradient(self, delta, prior, g):
        raise AssertionError("a pooling layer has no weights")


# ------------------------------------------------------------------------------ the model
class ReferenceModel:
    """Per-case activations, criterion and gradient of an Architecture."""

    def __init__(self, arch):
        self.arch = arch
        self.refs = [layer.kind.reference_layer(layer) for layer in arch.layers]
        self.out_ref = arch.output.kind.reference_layer(arch.output)

    def trial(self, weights, image):
        """One case forward: (list of hidden activations, list of max-pool winner ids or None,
        SoftMax outputs)."""
        weights = np.ascontiguousarray(weights, dtype=np.float64)
        prior = np.ascontiguousarray(image, dtype=np.float64).reshape(-1)
        acts, ids = [], []
        for layer, ref in zip(self.arch.layers, self.refs):
            out = np.empty(layer.n_neurons)
            keep = layer.kind.keeps_winners
            idv = np.zeros(layer.n_neurons if keep else 1, dtype=np.int64)
            ref.forward(weights[layer.weight_slice], prior, out, idv)
            acts.append(out)
            ids.append(idv if keep else None)
            prior = out
        o = self.arch.output
        logits = np.empty(o.depth)
        self.out_ref.forward(weights[o.weight_slice], prior, logits, None, nonlinear=False)
        probs = np.empty(o.depth)
        softmax(logits, probs)
        return acts, ids, probs

    def penalty(self, weights, wpen):
        mask = self.arch.penalty_mask()
        return wpen / self.arch.n_weights * float(np.sum(mask * weights * weights))

    def criterion(self, weights, inputs, classes, wpen=0.0):
        """Equation 1-13 (negative, so smaller is better) plus the weight penalty."""
        total = 0.0
        for c in range(inputs.shape[0]):
            p = self.trial(weights, inputs[c])[2]
            total -= math.log(p[classes[c]] + LOG_GUARD)
        return total / (inputs.shape[0] * self.arch.n_classes) + self.penalty(weights, wpen)

    def outputs(self, weights, inputs):
        return np.array([self.trial(weights, inputs[c])[2] for c in range(inputs.shape[0])])

    def activations(self, weights, inputs):
        per_case = [self.trial(weights, inputs[c])[0] for c in range(inputs.shape[0])]
        return [np.array([acts[i] for acts in per_case]) for i in range(len(self.arch.layers))]

    # -- backward
    def gradient(self, weights, inputs, classes, wpen=0.0):
        """(criterion, d criterion / d weights), case by case as in the book's grad routine."""
        arch = self.arch
        weights = np.ascontiguousarray(weights, dtype=np.float64)
        grad = np.zeros(arch.n_weights)
        layers = arch.layers
        out_layer = arch.output
        total = 0.0
        for c in range(inputs.shape[0]):
            image = np.ascontiguousarray(inputs[c], dtype=np.float64).reshape(-1)
            acts, ids, p = self.trial(weights, image)
            total -= math.log(p[classes[c]] + LOG_GUARD)
            # Step 3: output delta, Equation 1-12 (here p - t, the true derivative's sign).
            this_delta = p.copy()
            this_delta[classes[c]] -= 1.0
            # Step 4: output layer gradient, Equation 1-14.
            prior = acts[-1] if layers else image
            self.out_ref.gradient(this_delta, prior, grad[out_layer.weight_slice])
            # Steps 5-9, last hidden layer back to the first.
            refs = self.refs + [self.out_ref]
            for i in range(len(layers) - 1, -1, -1):
                layer = layers[i]
                nxt = layers[i + 1] if i + 1 < len(layers) else out_layer
                prior_delta = np.empty(layer.n_neurons)
                nxt_ids = ids[i + 1] if i + 1 < len(layers) else None
                refs[i + 1].delta_to_prior(this_delta, weights[nxt.weight_slice], nxt_ids,
                                           prior_delta)
                if layer.kind.applies_tanh:
                    # Equation 1-15 completes Equation 1-19: tanh' = 1 - a^2.
                    prior_delta *= 1.0 - acts[i] * acts[i]
                if layer.kind.has_weights:
                    prior = acts[i - 1] if i > 0 else image
                    refs[i].gradient(prior_delta, prior, grad[layer.weight_slice])
                this_delta = prior_delta                    # step 8
        scale = 1.0 / (inputs.shape[0] * arch.n_classes)
        grad *= scale
        mask = arch.penalty_mask()
        grad += 2.0 * wpen / arch.n_weights * mask * weights
        return total * scale + self.penalty(weights, wpen), grad
