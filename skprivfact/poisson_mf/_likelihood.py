"""Log-likelihood of counts under Poisson factorization, clean or noisy (numba).

A noisy count is y + tau with y ~ Poisson(mu) and tau ~ 2Geo(alpha); its pmf
is the convolution

    P(k) = (1-alpha)/(1+alpha) * [ alpha**k e**(mu/alpha - mu) F(k; mu/alpha)
                                   + alpha**(-k) e**(mu alpha - mu) (1 - F(k; mu alpha)) ]

with F(k; r) the Poisson(r) CDF at k (zero for k < 0). Everything is computed
in log space; the Poisson tails are summed from k outward, so neither term
underflows before the logarithm is taken. The sum over a matrix takes the
common entries (k <= 0, or k > 0 with a moderate mu) a row at a time in SIMD
code and leaves the others to the scalar function.
"""

import math

import numpy as np
from numba import njit, prange

from ._noisy_count import N_LANE_BUFFERS, positive_count_sums
from ._parallel import parallel_kernel
from ._simd import simd_log

_TAIL_CUTOFF = 1e-18

# log(k!) for the small counts that make up nearly every entry: a lookup
# instead of an lgamma call, twice per entry of the objective.
_LOG_FACTORIAL = np.array([math.lgamma(k + 1.0) for k in range(1024)])


@njit(cache=True)
def _log_factorial(k):
    if 0.0 <= k < _LOG_FACTORIAL.shape[0] and k == math.floor(k):
        return _LOG_FACTORIAL[int(k)]
    return math.lgamma(k + 1.0)


@njit(cache=True)
def _log_poisson_pmf(k, rate):
    if rate <= 0.0:
        return 0.0 if k == 0.0 else -np.inf
    return k * math.log(rate) - rate - _log_factorial(k)


@njit(cache=True)
def _log1mexp(x):
    # log(1 - exp(x)) for x <= 0, accurate on both sides of log(1/2)
    if x > -0.6931471805599453:
        return math.log(-math.expm1(x))
    return math.log1p(-math.exp(x))


@njit(cache=True)
def _log_tail_sum(log_first, start, rate, upward):
    """log of sum of Poisson(rate) pmf from ``start`` going up (or down to 0).

    The terms fall monotonically in the direction of the sum (the caller
    starts on the far side of the mode), so it stops once a term is below
    ``_TAIL_CUTOFF`` of the running total.
    """
    total = 1.0
    weight = 1.0
    k = start
    if upward:
        while True:
            weight *= rate / (k + 1.0)
            k += 1.0
            total += weight
            if weight < _TAIL_CUTOFF * total:
                break
    else:
        while k > 0.0:
            weight *= k / rate
            k -= 1.0
            total += weight
            if weight < _TAIL_CUTOFF * total:
                break
    return log_first + math.log(total)


@njit(cache=True)
def log_poisson_cdf_sf(k, rate):
    """(log P(Y <= k), log P(Y > k)) for Y ~ Poisson(rate), k an integer."""
    if k < 0.0:
        return -np.inf, 0.0
    if rate <= 0.0:
        return 0.0, -np.inf
    if k < rate:
        # lower tail is the small one; its terms fall from k down to 0
        log_cdf = _log_tail_sum(_log_poisson_pmf(k, rate), k, rate, False)
        return log_cdf, _log1mexp(min(log_cdf, 0.0))
    # upper tail is the small one; its terms fall from k + 1 upward
    log_sf = _log_tail_sum(_log_poisson_pmf(k + 1.0, rate), k + 1.0, rate, True)
    return _log1mexp(min(log_sf, 0.0)), log_sf


@njit(cache=True)
def _log_poisson_cdf(k, rate):
    """log P(Y <= k), as in log_poisson_cdf_sf without the unused tail."""
    if k < 0.0:
        return -np.inf
    if rate <= 0.0:
        return 0.0
    if k < rate:
        return _log_tail_sum(_log_poisson_pmf(k, rate), k, rate, False)
    log_sf = _log_tail_sum(_log_poisson_pmf(k + 1.0, rate), k + 1.0, rate, True)
    return _log1mexp(min(log_sf, 0.0))


@njit(cache=True)
def _log_poisson_sf(k, rate):
    """log P(Y > k), as in log_poisson_cdf_sf without the unused tail."""
    if k < 0.0:
        return 0.0
    if rate <= 0.0:
        return -np.inf
    if k < rate:
        log_cdf = _log_tail_sum(_log_poisson_pmf(k, rate), k, rate, False)
        return _log1mexp(min(log_cdf, 0.0))
    return _log_tail_sum(_log_poisson_pmf(k + 1.0, rate), k + 1.0, rate, True)


@njit(cache=True)
def noisy_count_logpmf(k, mu, alpha):
    """log P(y + tau = k) for y ~ Poisson(mu), tau ~ 2Geo(alpha)."""
    return _noisy_count_logpmf(
        k, mu, alpha, math.log(alpha), math.log1p(-alpha) - math.log1p(alpha)
    )


@njit(cache=True)
def _noisy_count_logpmf(k, mu, alpha, log_alpha, log_const):
    # the constants of alpha come from the caller, once per matrix
    if math.isnan(mu):
        # a broken fit's rate: NaN, not a tail sum whose stopping test never holds
        return math.nan
    log_cdf_high = _log_poisson_cdf(k, mu / alpha)
    log_sf_low = _log_poisson_sf(k, mu * alpha)
    first = k * log_alpha + mu / alpha - mu + log_cdf_high
    second = -k * log_alpha + mu * alpha - mu + log_sf_low
    if first == -np.inf and second == -np.inf:
        return -np.inf
    high = max(first, second)
    return log_const + high + math.log(math.exp(first - high) + math.exp(second - high))


@njit(cache=True, error_model="numpy")
def _noisy_logpmf_row(counts, rates, alpha, log_alpha, log_const, out, lanes, columns):
    """``out[v]`` = log P(counts[v]) at mu = rates[v], as _noisy_count_logpmf,
    in passes over the row that compile to SIMD code.

    For k <= 0 the pmf is closed: every true count is at least k, so
    P(k) = (1 - alpha) / (1 + alpha) alpha**-k e**(mu alpha - mu). For
    k > 0 it is (1 - alpha) / (1 + alpha) alpha**k e**-mu times the sum of
    ``positive_count_sums``; the entries that function leaves go to the
    scalar _noisy_count_logpmf. ``lanes`` and ``columns`` are its scratch,
    (N_LANE_BUFFERS, n) and (3, n).
    """
    n_ended, n_scalar = positive_count_sums(counts, rates, alpha, lanes, columns)
    for v in range(counts.shape[0]):
        # the positive entries are set below
        out[v] = log_const - counts[v] * log_alpha - rates[v] * (1.0 - alpha)
    log_total = lanes[6]
    for j in range(n_ended):
        log_total[j] = simd_log(lanes[7, j])
    for j in range(n_ended):
        v = columns[1, j]
        out[v] = log_const + counts[v] * log_alpha - rates[v] + log_total[j]
    for j in range(n_scalar):
        v = columns[2, j]
        out[v] = _noisy_count_logpmf(counts[v], rates[v], alpha, log_alpha, log_const)


# Rows whose rates noisy_loglik_sum takes in one matrix product.
_ROWS_PER_BLOCK = 32


def noisy_loglik_sum(noisy, row_factors, components, alpha):
    """Sum over a dense noisy matrix of log P(noisy[d, v]) at mu = theta @ phi."""
    # summed outside the parallel region: the same sum for any number of
    # threads; the factors C-ordered, as the kernel reads them, so that a
    # transposed one does not compile a second version of it
    return float(_noisy_loglik_rows(noisy, np.ascontiguousarray(row_factors),
                                    np.ascontiguousarray(components), alpha).sum())


@parallel_kernel
def _noisy_loglik_rows(noisy, row_factors, components, alpha):
    """The per-row sums of noisy_loglik_sum."""
    n_rows, n_cols = noisy.shape
    log_alpha = math.log(alpha)
    log_const = math.log1p(-alpha) - math.log1p(alpha)
    row_factors = np.ascontiguousarray(row_factors)
    components = np.ascontiguousarray(components)
    row_totals = np.zeros(n_rows)
    n_blocks = (n_rows + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK
    for block in prange(n_blocks):
        start = block * _ROWS_PER_BLOCK
        stop = min(start + _ROWS_PER_BLOCK, n_rows)
        # a block of rows at a time: one matrix product instead of a
        # matrix-vector product per row
        rates = row_factors[start:stop] @ components
        lanes = np.empty((N_LANE_BUFFERS, n_cols))
        columns = np.empty((3, n_cols), dtype=np.int64)
        logpmf_row = np.empty(n_cols)
        # the counts in double whatever their stored (compact) type: one
        # compiled row pass for all
        counts_row = np.empty(n_cols)
        for d in range(start, stop):
            for v in range(n_cols):
                counts_row[v] = noisy[d, v]
            _noisy_logpmf_row(counts_row, rates[d - start], alpha, log_alpha, log_const,
                              logpmf_row, lanes, columns)
            acc = 0.0
            for v in range(n_cols):
                acc += logpmf_row[v]
            row_totals[d] = acc
    return row_totals


def clipped_loglik_sum(counts, row_factors, components):
    """Sum over a dense count matrix, clipped at 0, of the Poisson log-pmfs
    at mu = theta @ phi (the naive model's objective on noisy counts)."""
    return float(_clipped_loglik_rows(counts, np.ascontiguousarray(row_factors),
                                      np.ascontiguousarray(components)).sum())


@parallel_kernel
def _clipped_loglik_rows(counts, row_factors, components):
    """The per-row sums of clipped_loglik_sum."""
    n_rows, n_cols = counts.shape
    row_factors = np.ascontiguousarray(row_factors)
    components = np.ascontiguousarray(components)
    row_totals = np.zeros(n_rows)
    n_blocks = (n_rows + _ROWS_PER_BLOCK - 1) // _ROWS_PER_BLOCK
    for block in prange(n_blocks):
        start = block * _ROWS_PER_BLOCK
        stop = min(start + _ROWS_PER_BLOCK, n_rows)
        rates = row_factors[start:stop] @ components
        for d in range(start, stop):
            acc = 0.0
            for v in range(n_cols):
                mu = rates[d - start, v]
                count = float(counts[d, v])
                if count > 0.0:
                    if mu > 0.0:
                        acc += count * math.log(mu) - _log_factorial(count)
                    else:
                        acc += -np.inf
                acc -= mu
            row_totals[d] = acc
    return row_totals


@parallel_kernel
def _clean_nonzero_terms(indptr, indices, data, row_factors, components):
    n_rows = indptr.shape[0] - 1
    n_components = components.shape[0]
    row_totals = np.zeros(n_rows)
    for d in prange(n_rows):
        acc = 0.0
        for idx in range(indptr[d], indptr[d + 1]):
            v = indices[idx]
            mu = 0.0
            for k in range(n_components):
                mu += row_factors[d, k] * components[k, v]
            count = data[idx]
            if mu > 0.0:
                acc += count * math.log(mu) - math.lgamma(count + 1.0)
            elif count > 0.0:
                acc += -np.inf
        row_totals[d] = acc
    return row_totals.sum()


def clean_loglik_sum(X_csr, row_factors, components):
    """Sum of Poisson log-pmfs of a CSR count matrix at mu = theta @ phi.

    Work is proportional to the non-zeros: the zeros contribute -mu each, and
    the sum of all mu is (row sums of theta) . (column sums of phi).
    """
    nonzero_part = _clean_nonzero_terms(
        X_csr.indptr, X_csr.indices, X_csr.data.astype(np.float64),
        row_factors, components,
    )
    return nonzero_part - float(row_factors.sum(axis=0) @ components.sum(axis=1))
