"""The hidden layers' activation function, tanh, as compiled loops that vectorise.

numpy's float64 tanh (and Numba's ``math.tanh``) call the C library once per value; on the AVX2
machines we run on that costs several times an exponential, and tanh is applied to every hidden
activation of every case. :func:`tanh_value` is built from arithmetic only, so that LLVM turns
the loops below into 4-wide vector code:

* |x| < 0.625: an odd rational function of x (3/3 in x^2), with the well-known coefficients of
  the Cephes library's tanh for this interval;
* 0.625 <= |x| <= 20: tanh|x| = (1 - e) / (1 + e) with e = exp(-2|x|) = exp(-j/4) exp(-r),
  j the nearest integer to 8|x| (exp(-j/4) from a table filled by numpy's exp), |r| <= 1/8 and
  exp(-r) from its Taylor series to r^11 (truncation below 3e-18); no cancellation there because
  e <= 0.29;
* |x| > 20: tanh rounds to +-1 in float64, which the formula gives with |x| held at 20 (NaN
  takes that route too, without harm, and is returned as it came).

The result is within 2 units in the last place of the exact tanh (tested on millions of values
against extended precision, near every joint of the pieces, and for monotonicity, on which the
criterion-only pass relies). It is used for every hidden layer on the host's fast path; the
per-case reference path keeps the C library's tanh, and the two agree to rounding.
"""

import math

import numpy as np
from numba import njit

# exp(-j/4), j = 0..169: enough for 2|x| <= 40 plus the rounding of j
_EXP_QUARTERS = np.exp(-0.25 * np.arange(170))


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", inline="always")
def tanh_value(x):
    """tanh(x) from arithmetic only (see the module's notes)."""
    ax = abs(x)
    ax = ax if ax < 20.0 else 20.0
    y = ax + ax
    jf = math.floor(y * 4.0 + 0.5)
    r = y - jf * 0.25
    p = -2.505210838544172e-08                  # (-1)^k / k!, k = 11 .. 0
    p = p * r + 2.755731922398589e-07
    p = p * r - 2.7557319223985893e-06
    p = p * r + 2.48015873015873e-05
    p = p * r - 0.0001984126984126984
    p = p * r + 0.001388888888888889
    p = p * r - 0.008333333333333333
    p = p * r + 0.041666666666666664
    p = p * r - 0.16666666666666666
    p = p * r + 0.5
    p = p * r - 1.0
    p = p * r + 1.0
    e = _EXP_QUARTERS[np.int64(jf)] * p
    large = (1.0 - e) / (1.0 + e)
    z = ax * ax
    small = ax + ax * z * ((-1.61468768441708447952e3 + z * (-9.92877231001918586564e1
                                                             + z * -9.64399179425052238628e-1))
                           / (4.84406305325125486048e3 + z * (2.23548839060100448583e3
                                                              + z * (1.12811678491632931402e2
                                                                     + z))))
    t = math.copysign(small if ax < 0.625 else large, x)
    return t if x == x else x                   # NaN stays NaN (it took the |x| = 20 route)


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def tanh_inplace(a):
    """a (m, n), rows contiguous, <- tanh(a)."""
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] = tanh_value(a[i, j])


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def bias_tanh(out, bias):
    """out (D, P, n) net inputs without bias, in place -> tanh(out + bias). bias is (D, P), or
    (D, 1) when a slice shares one bias over its positions (CONV, and FC with P = 1)."""
    D, P, n = out.shape
    shared = bias.shape[1] == 1
    for d in range(D):
        for p in range(P):
            b = bias[d, 0] if shared else bias[d, p]
            for c in range(n):
                out[d, p, c] = tanh_value(out[d, p, c] + b)
