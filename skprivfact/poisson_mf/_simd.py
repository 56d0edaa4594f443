"""exp and log without libm calls, for loops that must compile to SIMD code.

numba turns a loop over an array into vector instructions only if its body
calls no library function; these two are polynomial approximations within an
ulp or two of math.exp and math.log (callers whose loops divide also need
numba's ``error_model="numpy"``: the Python model's ZeroDivisionError check
is a branch that stops the vectoriser).
"""

import math

import numpy as np
from numba import njit

_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10


@njit(cache=True, inline="always")
def _pow2(n):
    # 2.0**n for an integer-valued float n in [-1022, 1023]
    return np.int64((int(n) + 1023) << 52).view(np.float64)


@njit(cache=True, inline="always")
def simd_exp(x):
    """exp(x): x = n log 2 + r with |r| <= log(2) / 2, 2^n from its bits and
    e^r from its Taylor polynomial to degree 13 (remainder below 5e-18); for
    x in [-745, 709] (0 below, inf above, NaN for NaN)."""
    # comparisons false for NaN: the exponent stays in range
    clamped = x if x > -745.5 else -745.5  # noqa: FURB136 (max keeps NaN)
    clamped = clamped if clamped < 709.8 else 709.8  # noqa: FURB136
    n = math.floor(clamped * (1.0 / math.log(2.0)) + 0.5)
    r = (clamped - n * _LN2_HI) - n * _LN2_LO
    poly = 1.0 + r * (1.0 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (
        1.0 / 120 + r * (1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320 + r * (
            1.0 / 362880 + r * (1.0 / 3628800 + r * (1.0 / 39916800 + r * (
                1.0 / 479001600 + r / 6227020800.0))))))))))))
    # 2^n as two normal factors (n in [-1076, 1024]), each built from its
    # exponent bits: no table lookups, which would be gathers in SIMD code
    half = n // 2
    result = poly * _pow2(half) * _pow2(n - half)
    return result if x <= 709.8 else (math.inf if x > 709.8 else x)


@njit(cache=True, inline="always")
def simd_log(x):
    """log(x) for a positive normal x: x = 2^e m with m in [sqrt(1/2),
    sqrt(2)), log m = 2 atanh(s) for s = (m - 1) / (m + 1), |s| < 0.172,
    from its series to s^23 (truncation below 1e-18 relative)."""
    bits = np.float64(x).view(np.int64)
    exponent = (bits >> 52) - 1023
    mantissa = np.int64((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000).view(np.float64)
    above = mantissa > 1.4142135623730951
    mantissa = mantissa * 0.5 if above else mantissa
    e = float(exponent + 1 if above else exponent)
    s = (mantissa - 1.0) / (mantissa + 1.0)
    s2 = s * s
    tail = s2 * (2.0 / 3 + s2 * (2.0 / 5 + s2 * (2.0 / 7 + s2 * (2.0 / 9 + s2 * (
        2.0 / 11 + s2 * (2.0 / 13 + s2 * (2.0 / 15 + s2 * (2.0 / 17 + s2 * (
            2.0 / 19 + s2 * (2.0 / 21 + s2 * (2.0 / 23)))))))))))
    return e * _LN2_HI + (2.0 * s + (s * tail + e * _LN2_LO))
