"""Clipping inside numba kernels, with the guarantee of :mod:`skprivfact.mechanisms`.

Kernels that compute a per-record statistic in a fused loop (and never hold
all of them at once) clip it here, in place, before adding it to the batch's
sum: the same bound, in exact arithmetic for the returned floats, as
:func:`skprivfact.mechanisms.clip_frobenius`, which the tests check them
against.
"""

import math

import numpy as np
from numba import njit

__all__ = ["clip_frobenius_inplace", "scaled_row_norms"]

_UNIT_ROUNDOFF = 2.0**-53


_LARGEST_FLOAT = np.finfo(np.float64).max
_SMALLEST_NORMAL = np.finfo(np.float64).tiny


@njit(cache=True, nogil=True)
def scaled_row_norms(rows):
    """Row maxima ``m`` and ``r`` with ``||row|| = m * r`` up to rounding.

    The operations of :func:`skprivfact.mechanisms._scaled_row_norms`, whose
    error bound they share, in one pass per row without temporaries: each
    entry is multiplied by the reciprocal of the row's largest absolute entry
    (divided by that entry where the reciprocal is not a normal float),
    squared and summed, and the sum's square root taken. The sum runs in four
    interleaved partial sums (independent chains the processor overlaps),
    still ``n_features - 1`` additions of non-negative terms.
    """
    n_rows, n_cols = rows.shape
    row_max = np.empty(n_rows)
    scaled_norm = np.empty(n_rows)
    n_blocked = n_cols - n_cols % 4
    for i in range(n_rows):
        m0 = m1 = m2 = m3 = 0.0
        for j in range(0, n_blocked, 4):
            m0 = max(m0, abs(rows[i, j]))
            m1 = max(m1, abs(rows[i, j + 1]))
            m2 = max(m2, abs(rows[i, j + 2]))
            m3 = max(m3, abs(rows[i, j + 3]))
        for j in range(n_blocked, n_cols):
            m0 = max(m0, abs(rows[i, j]))
        largest = max(max(m0, m1), max(m2, m3))
        row_max[i] = largest
        if largest == 0.0:
            scaled_norm[i] = 0.0
            continue
        reciprocal = 1.0 / largest
        s0 = s1 = s2 = s3 = 0.0
        if _SMALLEST_NORMAL <= reciprocal <= _LARGEST_FLOAT:
            for j in range(0, n_blocked, 4):
                a0 = rows[i, j] * reciprocal
                a1 = rows[i, j + 1] * reciprocal
                a2 = rows[i, j + 2] * reciprocal
                a3 = rows[i, j + 3] * reciprocal
                s0 += a0 * a0
                s1 += a1 * a1
                s2 += a2 * a2
                s3 += a3 * a3
            for j in range(n_blocked, n_cols):
                a0 = rows[i, j] * reciprocal
                s0 += a0 * a0
        else:
            for j in range(n_cols):
                a0 = rows[i, j] / largest
                s0 += a0 * a0
        scaled_norm[i] = math.sqrt((s0 + s1) + (s2 + s3))
    return row_max, scaled_norm


@njit(cache=True, nogil=True)
def _frobenius_norm(stats, n_rows):
    """Norm of stats[:n_rows], scaled by its largest entry against over/underflow.

    Returns 0 for an all-zero block. The relative error is below
    ``(n_entries + 6) / 2`` unit roundoffs (see :func:`clip_frobenius_inplace`).
    """
    n_cols = stats.shape[1]
    largest = 0.0
    for i in range(n_rows):
        for k in range(n_cols):
            value = abs(stats[i, k])
            largest = max(largest, value)
    if largest == 0.0:
        return 0.0
    sum_sq = 0.0
    for i in range(n_rows):
        for k in range(n_cols):
            scaled = stats[i, k] / largest
            sum_sq += scaled * scaled
    return largest * math.sqrt(sum_sq)


@njit(cache=True, nogil=True)
def clip_frobenius_inplace(stats, n_rows, max_norm):
    """Scale stats[:n_rows] in place so that its Frobenius norm is at most max_norm.

    The bound holds in exact arithmetic for the returned floats, as for
    :func:`skprivfact.mechanisms.clip_frobenius`: the computed norm has a
    relative error below ``err = 2 (n_entries + 8)`` unit roundoffs (the
    division by the largest entry, the square, the sum of ``n_entries``
    non-negative terms, the square root and the final product), so a block
    whose computed norm times ``1 + err`` is at most ``max_norm`` is inside the
    ball. Blocks outside it are scaled to a few error bounds inside the ball
    and checked again, shrinking further until the check certifies them.

    Returns
    -------
    scale : float
        The factor applied (1.0 when the block was already inside).
    """
    if n_rows == 0 or max_norm == np.inf:
        return 1.0
    err = 2.0 * (n_rows * stats.shape[1] + 8) * _UNIT_ROUNDOFF
    norm = _frobenius_norm(stats, n_rows)
    if norm * (1.0 + err) <= max_norm:
        return 1.0
    scale = (max_norm / norm) * (1.0 - 4.0 * err)
    while True:
        for i in range(n_rows):
            for k in range(stats.shape[1]):
                stats[i, k] *= scale
        if _frobenius_norm(stats, n_rows) * (1.0 + err) <= max_norm:
            return scale
        # Only reached through rounding far beyond the error analysis (for
        # example subnormal entries); every pass shrinks the block further.
        scale = 1.0 - 4.0 * err
