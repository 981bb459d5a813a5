"""Single passes over a weight vector: the optimizer's updates and the weight penalty's sum.

On a large net (LeNet: 431,080 weights) every numpy expression such as ``x + t * d`` is two
passes over memory and a new array; at about a third of a millisecond a pass they added up to a
quarter of a GPU training run's time. Each function here makes one pass and allocates nothing.
The element operations are those of the numpy expressions they replace (no fused multiply-add),
so the values are the same to the last bit; the sums keep four partial sums, which rounds
differently from the BLAS dot product but the same way on every run.
"""

import functools

import numpy as np


def njit(f):
    """f compiled by Numba (cached on disk, no GIL) at its first call. Numba is imported then,
    not with this module: a GPU run keeps its vectors on the device and never loads it."""
    compiled = None

    @functools.wraps(f)
    def call(*args):
        nonlocal compiled
        if compiled is None:
            from numba import njit as numba_njit
            compiled = numba_njit(cache=True, nogil=True)(f)
        return compiled(*args)
    return call


@njit
def step_into(out, x, t, d):
    """out = x + t * d (out may be x itself: the step taken in place)."""
    for i in range(x.shape[0]):
        out[i] = x[i] + t * d[i]


@njit
def new_direction(d, beta, g):
    """d = -g + beta * d, in place (the conjugate direction)."""
    for i in range(d.shape[0]):
        d[i] = beta * d[i] - g[i]


@njit
def dot_and_change(g_new, g):
    """(g_new . g_new, g_new . (g_new - g)): the two sums of the Polak-Ribiere beta in one pass."""
    n = g_new.shape[0]
    a0 = a1 = a2 = a3 = 0.0
    b0 = b1 = b2 = b3 = 0.0
    m = n - n % 4
    for i in range(0, m, 4):
        a0 += g_new[i] * g_new[i]
        a1 += g_new[i + 1] * g_new[i + 1]
        a2 += g_new[i + 2] * g_new[i + 2]
        a3 += g_new[i + 3] * g_new[i + 3]
        b0 += g_new[i] * (g_new[i] - g[i])
        b1 += g_new[i + 1] * (g_new[i + 1] - g[i + 1])
        b2 += g_new[i + 2] * (g_new[i + 2] - g[i + 2])
        b3 += g_new[i + 3] * (g_new[i + 3] - g[i + 3])
    for i in range(m, n):
        a0 += g_new[i] * g_new[i]
        b0 += g_new[i] * (g_new[i] - g[i])
    return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)


@njit
def selected_sum_of_squares(w, selected):
    """The sum of w[i]^2 over the i where selected[i] (the weight penalty's sum)."""
    n = w.shape[0]
    a0 = a1 = a2 = a3 = 0.0
    m = n - n % 4
    for i in range(0, m, 4):
        if selected[i]:
            a0 += w[i] * w[i]
        if selected[i + 1]:
            a1 += w[i + 1] * w[i + 1]
        if selected[i + 2]:
            a2 += w[i + 2] * w[i + 2]
        if selected[i + 3]:
            a3 += w[i + 3] * w[i + 3]
    for i in range(m, n):
        if selected[i]:
            a0 += w[i] * w[i]
    return (a0 + a1) + (a2 + a3)


class HostVectors:
    """The optimizer's vectors (weights, directions, gradients) as float64 numpy arrays: the
    default home of conjugate_gradients' vectors. An evaluator that keeps them elsewhere offers an
    object with the same methods (the device path: convnet/device/line.py, DeviceVectors)."""

    def array(self, a):
        """a as one of these vectors (no copy when it already is one)."""
        return np.ascontiguousarray(a, dtype=np.float64)

    def copy(self, a):
        """A new vector with a's values."""
        return np.array(a, dtype=np.float64, copy=True)

    def host(self, v):
        """v's values as a numpy array, to read until v changes or the next call (here v itself:
        do not modify it)."""
        return v

    def result(self, v):
        """v's values as a numpy array the caller keeps (here v itself, no longer used)."""
        return v

    def neg(self, v):
        return -v

    def dot(self, a, b):
        return float(a @ b)

    def norm(self, v):
        return float(np.linalg.norm(v))

    step_into = staticmethod(step_into)
    new_direction = staticmethod(new_direction)
    dot_and_change = staticmethod(dot_and_change)


HOST_VECTORS = HostVectors()
