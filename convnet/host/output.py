"""The SoftMax output layer's last step on a block of cases, and the tanh derivative.

The output layer's logits come from :class:`convnet.host.fc.FCLayer`. Here they become SoftMax
probabilities (Equation 1-10, with the largest logit subtracted first so that exp never
overflows), the block's share of the negative log likelihood (Equation 1-11, -log(p_true + 1e-30))
and, for the gradient, the output deltas p - t (Equation 1-12, the true derivative's sign).
"""

import math

from numba import njit

LOG_GUARD = 1e-30


@njit(cache=True, nogil=True)
def softmax_t(zT, classes, want_delta):
    """zT (C, n) logits in (class, case) order -> zT holds the probabilities, or p - t when
    want_delta. classes: (n,) int64 true classes, or an empty array when there are none (returns
    0). Returns the sum over the block of -log(p_true + 1e-30)."""
    C = zT.shape[0]
    n = zT.shape[1]
    total = 0.0
    have = classes.shape[0] > 0
    for b in range(n):
        top = zT[0, b]
        for i in range(1, C):
            if zT[i, b] > top:
                top = zT[i, b]
        s = 0.0
        for i in range(C):
            e = math.exp(zT[i, b] - top)
            zT[i, b] = e
            s += e
        inv = 1.0 / s
        for i in range(C):
            zT[i, b] *= inv
        if have:
            t = classes[b]
            total -= math.log(zT[t, b] + LOG_GUARD)
            if want_delta:
                zT[t, b] -= 1.0
    return total


@njit(cache=True, nogil=True)
def softmax_criterion_t(zT, classes):
    """Forward only: zT (C, n) logits -> the sum over the block of -log(p_true + 1e-30),
    computed as :func:`softmax_t` computes it; the probabilities are not stored."""
    C = zT.shape[0]
    total = 0.0
    for b in range(zT.shape[1]):
        top = zT[0, b]
        for i in range(1, C):
            if zT[i, b] > top:
                top = zT[i, b]
        s = 0.0
        for i in range(C):
            s += math.exp(zT[i, b] - top)
        inv = 1.0 / s
        total -= math.log(math.exp(zT[classes[b], b] - top) * inv + LOG_GUARD)
    return total


@njit(cache=True, nogil=True, fastmath={"contract"})
def tanh_backward(dact, act):
    """dact (m, n) d criterion / d activations -> d criterion / d net inputs, in place:
    times tanh' = 1 - a^2 (Equation 1-15); act (m, n) the activations."""
    for b in range(dact.shape[0]):
        for i in range(dact.shape[1]):
            a = act[b, i]
            dact[b, i] *= 1.0 - a * a
