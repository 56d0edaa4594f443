"""Log-likelihood of counts under Poisson factorization, clean or noisy (numba).

A noisy count is y + tau with y ~ Poisson(mu) and tau ~ 2Geo(alpha); its pmf
is the convolution

    P(k) = (1-alpha)/(1+alpha) * [ alpha**k e**(mu/alpha - mu) F(k; mu/alpha)
                                   + alpha**(-k) e**(mu alpha - mu) (1 - F(k; mu alpha)) ]

with F(k; r) the Poisson(r) CDF at k (zero for k < 0). Everything is computed
in log space; the Poisson tails are summed from k outward, so neither term
underflows before the logarithm is taken. The sum over a matrix takes the
common entries (small |k|, moderate mu) a row at a time in SIMD code and
leaves the others to the scalar function.
"""

import math

import numpy as np
from numba import njit, prange

from ._parallel import parallel_kernel
from ._simd import simd_exp, simd_log

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
    log_cdf_high = _log_poisson_cdf(k, mu / alpha)
    log_sf_low = _log_poisson_sf(k, mu * alpha)
    first = k * log_alpha + mu / alpha - mu + log_cdf_high
    second = -k * log_alpha + mu * alpha - mu + log_sf_low
    if first == -np.inf and second == -np.inf:
        return -np.inf
    high = max(first, second)
    return log_const + high + math.log(math.exp(first - high) + math.exp(second - high))


# The row pass below takes the entries with |k| up to this and mu / alpha up
# to _ROW_MAX_RATE (so that its partial sums of e^r stay finite) in SIMD code;
# the rest, and entries whose upper-tail series has not converged after
# _ROW_MAX_TAIL_TERMS terms, go to the scalar _noisy_count_logpmf.
_ROW_MAX_COUNT = 12.0
_ROW_MAX_RATE = 300.0
_ROW_MAX_TAIL_TERMS = 60
_ROW_BUFFERS = 7


@njit(cache=True, error_model="numpy")
def _noisy_logpmf_row(counts, rates, alpha, log_alpha, log_const, out, buffers):
    """``out[v]`` = log P(counts[v]) at mu = rates[v], as _noisy_count_logpmf,
    in passes over the row that compile to SIMD code.

    With r = mu / alpha and s = mu alpha, the two terms of the pmf are
    k log(alpha) - mu + log(sum_{j<=k} r^j / j!) (the e^-r of the CDF cancels
    the e^r of the term), and -k log(alpha) + s - mu + log P(Y > k) for
    Y ~ Poisson(s); P(Y > k) is 1 - e^-s sum_{j<=k} s^j / j! when that CDF is
    at most 1/2 (no cancellation), otherwise its upper-tail series
    e^-s sum_{j>k} s^j / j!, whose terms fall faster than geometrically.
    ``buffers`` is (_ROW_BUFFERS, n) of scratch."""
    n = counts.shape[0]
    sum_r = buffers[0]
    sum_s = buffers[1]
    term_r = buffers[2]
    term_s = buffers[3]
    last_s = buffers[4]
    tail = buffers[5]
    # 1 marks the entries left to the scalar function
    scalar = buffers[6]
    for v in range(n):
        k = counts[v]
        mu = rates[v]
        # & rather than and: no branches, which would keep the loop scalar
        fast = (mu > 0.0) & (abs(k) <= _ROW_MAX_COUNT) & (mu <= _ROW_MAX_RATE * alpha)
        scalar[v] = 0.0 if fast else 1.0
        sum_r[v] = 1.0
        sum_s[v] = 1.0
        term_r[v] = 1.0
        term_s[v] = 1.0
        last_s[v] = 1.0
    # the partial sums of r^j / j! and s^j / j! up to j = k, and s^k / k!:
    # the terms j = 1 and 2 in one pass over the row, the rest entry by entry
    # for the few larger counts
    for v in range(n):
        k = counts[v]
        r = rates[v] / alpha
        s = rates[v] * alpha
        next_r = term_r[v] * r
        next_s = term_s[v] * s
        partial_r = sum_r[v] + (next_r if 1.0 <= k else 0.0)
        partial_s = sum_s[v] + (next_s if 1.0 <= k else 0.0)
        last = next_s if k == 1.0 else last_s[v]
        next_r = next_r * r * 0.5
        next_s = next_s * s * 0.5
        term_r[v] = next_r
        term_s[v] = next_s
        sum_r[v] = partial_r + (next_r if 2.0 <= k else 0.0)
        sum_s[v] = partial_s + (next_s if 2.0 <= k else 0.0)
        last_s[v] = next_s if k == 2.0 else last
    for v in range(n):
        k = counts[v]
        if scalar[v] == 0.0 and k > 2.0:
            r = rates[v] / alpha
            s = rates[v] * alpha
            next_r = term_r[v]
            next_s = term_s[v]
            partial_r = sum_r[v]
            partial_s = sum_s[v]
            for j in range(3, int(k) + 1):
                next_r *= r / j
                next_s *= s / j
                partial_r += next_r
                partial_s += next_s
            sum_r[v] = partial_r
            sum_s[v] = partial_s
            last_s[v] = next_s
    # the upper tail sum_{j>k} s^j / j! for the entries whose CDF at s is
    # above 1/2: s^k / k! times sum_{i>=1} s^i / prod_{l<=i} (k + l), summed
    # over the common denominator prod (k + l) (no division per term), two
    # terms per pass
    for v in range(n):
        k = counts[v]
        s = rates[v] * alpha
        cdf = simd_exp(-s) * sum_s[v]
        needs_tail = (k >= 0.0) & (cdf > 0.5) & (scalar[v] == 0.0)
        # numerator, denominator and s^i
        term_r[v] = 0.0
        tail[v] = 1.0
        term_s[v] = 1.0 if needs_tail else 0.0
    converged = False
    for i in range(1, _ROW_MAX_TAIL_TERMS + 1, 2):
        n_pending = 0
        for v in range(n):
            k = counts[v]
            s = rates[v] * alpha
            power = term_s[v] * s
            numerator = term_r[v] * (k + i) + power
            denominator = tail[v] * (k + i)
            power = power * s
            numerator = numerator * (k + i + 1.0) + power
            term_r[v] = numerator
            tail[v] = denominator * (k + i + 1.0)
            term_s[v] = power
            n_pending += power > 1e-17 * numerator
        if n_pending == 0:
            converged = True
            break
    unfinished = 0.0 if converged else 1.0
    for v in range(n):
        # the tail in units of s^k / k!, times s^k / k!; 0 where not needed
        scalar[v] = max(scalar[v], unfinished if term_s[v] > 1e-17 * term_r[v] else 0.0)
        tail[v] = last_s[v] * term_r[v] / tail[v]
    for v in range(n):
        k = counts[v]
        mu = rates[v]
        s = mu * alpha
        first = k * log_alpha - mu + simd_log(sum_r[v])
        from_tail = simd_log(tail[v]) - s
        from_cdf = simd_log(1.0 - simd_exp(-s) * sum_s[v])
        log_sf = 0.0 if k < 0.0 else (from_tail if tail[v] > 0.0 else from_cdf)
        second = -k * log_alpha + s - mu + log_sf
        sum_r[v] = first if k >= 0.0 else -math.inf
        sum_s[v] = second
    # log(e^first + e^second), in a loop of its own (smaller loops vectorise)
    for v in range(n):
        first = sum_r[v]
        second = sum_s[v]
        high = max(first, second)
        low = min(first, second)
        out[v] = log_const + high + simd_log(1.0 + simd_exp(low - high))
    for v in range(n):
        if scalar[v] != 0.0:
            out[v] = _noisy_count_logpmf(counts[v], rates[v], alpha, log_alpha, log_const)


# Rows whose rates noisy_loglik_sum takes in one matrix product.
_ROWS_PER_BLOCK = 32


def noisy_loglik_sum(noisy, row_factors, components, alpha):
    """Sum over a dense noisy matrix of log P(noisy[d, v]) at mu = theta @ phi."""
    # summed outside the parallel region: the same sum for any number of threads
    return float(_noisy_loglik_rows(noisy, row_factors, components, alpha).sum())


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
        buffers = np.empty((_ROW_BUFFERS + 2, n_cols))
        logpmf_row = buffers[_ROW_BUFFERS]
        # the counts in double whatever their stored (compact) type: one
        # compiled row pass for all
        counts_row = buffers[_ROW_BUFFERS + 1]
        for d in range(start, stop):
            for v in range(n_cols):
                counts_row[v] = noisy[d, v]
            _noisy_logpmf_row(counts_row, rates[d - start], alpha, log_alpha, log_const,
                              logpmf_row, buffers[:_ROW_BUFFERS])
            acc = 0.0
            for v in range(n_cols):
                acc += logpmf_row[v]
            row_totals[d] = acc
    return row_totals


def clipped_loglik_sum(counts, row_factors, components):
    """Sum over a dense count matrix, clipped at 0, of the Poisson log-pmfs
    at mu = theta @ phi (the naive model's objective on noisy counts)."""
    return float(_clipped_loglik_rows(counts, row_factors, components).sum())


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
