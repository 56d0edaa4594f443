"""Numba kernels of :mod:`skprivfact.logistic`: the E-step on sparse rows."""

import math

import numpy as np
from numba import njit

__all__ = [
    "count_nonzero_and_squared_norms",
    "dense_to_csr",
    "root_omega_rows",
    "root_omega_scale",
    "sparse_polya_gamma_gram",
]

# Kept equal to skprivfact.logistic's constants (the tests compare the two).
_MAX_EXPECTED_OMEGA = 0.25
_SMALL_LOGIT_SCALE = 1e-4


@njit(cache=True, nogil=True)
def _expected_polya_gamma(c):
    """``tanh(c / 2) / (2 c)``, in [0, 1/4] (see logistic._expected_polya_gamma).

    1/4 for a NaN ``c``: each record's contribution bound rests on the 1/4.
    """
    c = abs(c)
    if c < _SMALL_LOGIT_SCALE:
        mean = 0.25 - c * c / 48.0
    else:
        mean = math.tanh(c / 2.0) / (2.0 * c)
    if not mean <= _MAX_EXPECTED_OMEGA:
        return _MAX_EXPECTED_OMEGA
    return max(mean, 0.0)


@njit(cache=True, nogil=True, fastmath=True)
def _row_dot(product, rows32, out):
    """``out[n] = sum_k product[n, k] rows32[n, k]``, reassociated to vectorise.

    Only the weights ``E[omega_n]`` come from these sums, and
    :func:`root_omega_rows` bounds them whatever the sums hold: the fast (and
    reassociated) arithmetic never reaches a record's contribution bound.
    """
    n_rows, n_cols = product.shape
    for i in range(n_rows):
        total = np.float32(0.0)
        for k in range(n_cols):
            total += product[i, k] * rows32[i, k]
        out[i] = total


@njit(cache=True, nogil=True)
def root_omega_rows(product, rows32, rows, second_moment, out):
    """``out[n] = sqrt(E[omega_n]) * rows[n]``, ``E[omega_n]`` from ``product``.

    ``product`` is ``rows32 @ second_moment`` (float32), so that
    ``c_n^2 = sum_k product[n, k] rows32[n, k]``. Only the weight
    ``E[omega_n]``, in [0, 1/4] whatever ``c_n``, comes from the float32
    values: ``out`` scales the float64 ``rows``. A row whose float32
    ``c_n^2`` is not finite (overflow) gets ``c_n^2`` from the float64
    ``rows`` and ``second_moment`` instead, on its own: no row's weight
    depends on the other rows.
    """
    n_rows, n_cols = rows.shape
    squared = np.empty(n_rows, dtype=np.float32)
    _row_dot(product, rows32, squared)
    for i in range(n_rows):
        c_squared = np.float64(squared[i])
        if not math.isfinite(c_squared):
            c_squared = 0.0
            for j in range(n_cols):
                partial = 0.0
                for k in range(n_cols):
                    partial += second_moment[j, k] * rows[i, k]
                c_squared += rows[i, j] * partial
        c = math.sqrt(max(c_squared, 0.0))
        root = math.sqrt(_expected_polya_gamma(c))
        for k in range(n_cols):
            out[i, k] = rows[i, k] * root


@njit(cache=True, nogil=True)
def root_omega_scale(squared, rows, out):
    """``out[n] = sqrt(E[omega_n]) * rows[n]``, ``E[omega_n]`` at ``c_n^2 = squared[n]``.

    ``E[omega_n]`` is in [0, 1/4] whatever ``squared`` holds (NaN aside), so
    row ``n`` of ``out`` has squared norm at most ``||rows[n]||^2 / 4``.
    """
    n_rows, n_cols = rows.shape
    for i in range(n_rows):
        c = math.sqrt(max(np.float64(squared[i]), 0.0))
        root = math.sqrt(_expected_polya_gamma(c))
        for k in range(n_cols):
            out[i, k] = rows[i, k] * root


@njit(cache=True, nogil=True)
def count_nonzero_and_squared_norms(rows):
    """The number of non-zero entries and each row's squared norm, in one pass."""
    n_rows, n_cols = rows.shape
    squared_norms = np.empty(n_rows)
    count = 0
    for i in range(n_rows):
        total = 0.0
        for j in range(n_cols):
            value = rows[i, j]
            count += value != 0.0
            total += value * value
        squared_norms[i] = total
    return count, squared_norms


@njit(cache=True, nogil=True)
def dense_to_csr(rows):
    """The non-zero entries of ``rows`` in CSR form, columns sorted in each row.

    Returns
    -------
    indptr : ndarray of shape (n_rows + 1,)
    indices : ndarray of shape (nnz,)
    values : ndarray of shape (nnz,)
    """
    n_rows, n_cols = rows.shape
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    for i in range(n_rows):
        count = 0
        for j in range(n_cols):
            if rows[i, j] != 0.0:
                count += 1
        indptr[i + 1] = indptr[i] + count
    indices = np.empty(indptr[n_rows], dtype=np.int64)
    values = np.empty(indptr[n_rows])
    for i in range(n_rows):
        position = indptr[i]
        for j in range(n_cols):
            if rows[i, j] != 0.0:
                indices[position] = j
                values[position] = rows[i, j]
                position += 1
    return indptr, indices, values


@njit(cache=True, nogil=True)
def sparse_polya_gamma_gram(indptr, indices, values, second_moment, out):
    """``sum_n E[omega_n] x_n x_n'`` over rows stored in CSR form, into ``out``.

    Row ``n`` holds ``values[indptr[n]:indptr[n + 1]]`` at the sorted columns
    ``indices[...]``; ``second_moment`` is symmetric (only its upper
    triangle is read). ``E[omega_n]`` is the Polya-Gamma mean at
    ``c_n = sqrt(x_n' second_moment x_n)``, at most 1/4, so each row adds a
    matrix of Frobenius norm at most ``||x_n||^2 / 4``, as in the dense
    E-step. Costs ``nnz_n^2`` per row instead of ``n_weights^2``. ``out`` is
    overwritten with the full (exactly symmetric) matrix.
    """
    n_weights = out.shape[0]
    for i in range(n_weights):
        for j in range(n_weights):
            out[i, j] = 0.0
    for row in range(indptr.shape[0] - 1):
        start = indptr[row]
        stop = indptr[row + 1]
        # x' S x from the upper triangle (S is symmetric): half the reads.
        squared = 0.0
        for a in range(start, stop):
            column = indices[a]
            partial = 0.5 * second_moment[column, column] * values[a]
            for b in range(a + 1, stop):
                partial += second_moment[column, indices[b]] * values[b]
            squared += values[a] * partial
        squared *= 2.0
        omega = _expected_polya_gamma(math.sqrt(max(squared, 0.0)))
        # Upper triangle only (columns are sorted, so indices[a] <= indices[b]).
        for a in range(start, stop):
            weighted = omega * values[a]
            column = indices[a]
            for b in range(a, stop):
                out[column, indices[b]] += weighted * values[b]
    for i in range(n_weights):
        for j in range(i + 1, n_weights):
            out[j, i] = out[i, j]
