"""Clipping inside numba kernels, with the guarantee of :mod:`skprivfact.mechanisms`.

Kernels that compute a per-record statistic in a fused loop (and never hold
all of them at once) clip it here, in place, before adding it to the batch's
sum: the same bound, in exact arithmetic for the returned floats, as
:func:`skprivfact.mechanisms.clip_frobenius`, which the tests check them
against. :func:`clip_rows_inplace` is the loop of
:func:`skprivfact.mechanisms.clip_rows` itself, one pass per row instead of
numpy's temporaries of the whole array; its row, :func:`clip_row_inplace`,
clips the rows that
:func:`skprivfact._pbp_kernels.mlp_clipped_mean_site_sum` computes one at a
time, to the same bits as ``clip_rows``.
"""

import math

import numpy as np
from numba import njit

__all__ = [
    "clip_frobenius_inplace",
    "clip_row_inplace",
    "clip_rows_inplace",
    "scaled_row_norms",
]

_UNIT_ROUNDOFF = 2.0**-53


_LARGEST_FLOAT = np.finfo(np.float64).max
_SMALLEST_NORMAL = np.finfo(np.float64).tiny


@njit(cache=True, nogil=True)
def _row_max_and_scaled_norm(rows, i):
    """Largest absolute entry ``m`` of row ``i``, ``r`` with ``||row|| = m * r``,
    and whether every entry of the row is finite (see :func:`scaled_row_norms`)."""
    n_cols = rows.shape[1]
    n_blocked = n_cols - n_cols % 4
    m0 = m1 = m2 = m3 = 0.0
    # x * 0 is 0 for every finite x and NaN for NaN or infinity: one product
    # per entry tells a non-finite row, whatever max() does with NaN.
    finite_check = 0.0
    for j in range(0, n_blocked, 4):
        m0 = max(m0, abs(rows[i, j]))
        m1 = max(m1, abs(rows[i, j + 1]))
        m2 = max(m2, abs(rows[i, j + 2]))
        m3 = max(m3, abs(rows[i, j + 3]))
        finite_check += (
            rows[i, j] * 0.0
            + rows[i, j + 1] * 0.0
            + rows[i, j + 2] * 0.0
            + rows[i, j + 3] * 0.0
        )
    for j in range(n_blocked, n_cols):
        m0 = max(m0, abs(rows[i, j]))
        finite_check += rows[i, j] * 0.0
    largest = max(max(m0, m1), max(m2, m3))
    if largest == 0.0:
        return 0.0, 0.0, finite_check == 0.0
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
    return largest, math.sqrt((s0 + s1) + (s2 + s3)), finite_check == 0.0


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
    n_rows = rows.shape[0]
    row_max = np.empty(n_rows)
    scaled_norm = np.empty(n_rows)
    for i in range(n_rows):
        row_max[i], scaled_norm[i], _ = _row_max_and_scaled_norm(rows, i)
    return row_max, scaled_norm


@njit(cache=True, nogil=True)
def clip_row_inplace(rows, i, max_norm, error_bound, factor_low, factor_high):
    """Clip row ``i`` of ``rows`` in place to Euclidean norm ``max_norm``.

    The arithmetic of :func:`skprivfact.mechanisms._clip_rows_inplace` for one
    row (the same float operations on every entry, so the same result to the
    bit, which the tests check): a row whose computed norm times ``1 +
    error_bound`` is within ``max_norm`` is left as it is; any other is scaled
    to ``max_norm`` times ``1 - 4 * error_bound``, in one product per entry
    where the factor lies strictly between ``factor_low`` and ``factor_high``,
    otherwise divided by its largest entry first. Valid for norm bounds above
    ``2**-960``, where the clipped entries stay normal floats and the margin
    certifies the result; callers handle smaller bounds.

    Returns
    -------
    finite : bool
        False if the row holds NaN or infinity; it is then left unchanged
        and must not be used.
    """
    largest, scaled_norm, finite = _row_max_and_scaled_norm(rows, i)
    if not finite:
        return False
    if largest == 0.0:
        return True
    if scaled_norm * (1.0 + error_bound) <= max_norm / largest:
        return True
    target = (max_norm / scaled_norm) * (1.0 - 4.0 * error_bound)
    factor = target / largest
    if factor_low < factor < factor_high:
        for j in range(rows.shape[1]):
            rows[i, j] *= factor
    else:
        for j in range(rows.shape[1]):
            rows[i, j] = (rows[i, j] / largest) * target
    return True


@njit(cache=True, nogil=True)
def clip_rows_inplace(rows, max_norm, error_bound, factor_low, factor_high):
    """Clip every row of ``rows`` in place to Euclidean norm ``max_norm``
    (:func:`clip_row_inplace` on each row).

    Returns
    -------
    all_finite : bool
        False as soon as a row holds NaN or infinity (the rows are then left
        part-way and must not be used).
    """
    for i in range(rows.shape[0]):
        if not clip_row_inplace(rows, i, max_norm, error_bound, factor_low, factor_high):
            return False
    return True


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
