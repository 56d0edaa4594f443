"""Coordinate-ascent variational inference for (locally private) Poisson
factorization.

q(theta_dk) = Gamma(theta_shape, theta_rate), q(phi_kv) = Gamma(phi_shape,
phi_rate). With noise, the default sweep ("marginal") integrates the
two-sided geometric noise out of each entry exactly: E[y | y~] at the rate
E[mu], the expected true counts scaled so that their total is the noisy total
(unbiased), then the multinomial split of the clean sweep. The alternative is
the Bessel-mode algorithm of Schofield et al. ("bessel-mean", "bessel-mode":
q(lambda+-_dv) = Gamma(shape, rate 1/alpha) per entry), with three
corrections to their reference code: the unsigned nu = |y~| in the Bessel
step, one consistent variance formula for the delta method, and a stopping
rule on the absolute relative change of the objective. On sparse real counts
under heavy noise its per-entry noise rates absorb the counts, the total rate
shrinks (4 to 30 times at epsilon/N = 1) and the components collapse onto one.

The per-entry work is one fused numba kernel; everything that is a matrix
product goes to BLAS, in single precision for the noisy sweep
(``PRODUCT_DTYPE``). Dense counts are swept a block of rows at a time
(``sweep_block`` is the map, the sum of its column parts the reduce), so
that the memory of a fit beyond its compact input is that of the factors
and of one block.
"""

import functools
import math
import time

import numpy as np
import scipy.sparse as sp
from numba import njit, prange
from scipy.special import gammaln
from threadpoolctl import threadpool_limits

from ._bessel import bessel_mean, bessel_mode
from ._blocks import InMemoryRowBlocks
from ._likelihood import clean_loglik_sum, clipped_loglik_sum, noisy_loglik_sum
from ._noisy_count import N_LANE_BUFFERS, positive_count_sums, posterior_count_mean
from ._parallel import parallel_kernel
from ._simd import simd_exp


def blas_single_threaded(solver):
    """Run ``solver`` with one BLAS thread.

    A sweep alternates parallel numba kernels with dense products; the idle
    threads of each pool spin for a while after their parallel region and
    take the cores from the other pool (the reason scikit-learn's KMeans
    limits BLAS around its OpenMP loops). The products are small next to the
    per-entry kernels, so one BLAS thread costs less than the contention.
    """

    @functools.wraps(solver)
    def wrapper(*args, **kwargs):
        with threadpool_limits(limits=1, user_api="blas"):
            return solver(*args, **kwargs)

    return wrapper


# Sweeps with the fixed priors before empirical Bayes starts: from a random
# start the sub-count totals are nearly uniform over rows, their best gamma
# prior is a point mass, and the point mass then holds every row in place.
EB_WARM_UP_SWEEPS = 20

# The dense products of the noisy sweep (the mean, variance and geometric
# mean of mu, and the two sums of the sub-count ratios) run in single
# precision: half the time and memory traffic of double, and their rounding
# (relative 1e-7 per term, all terms positive) is far below the variational
# approximation's error. Everything else, and the clean sparse sweep, stays
# in double.
PRODUCT_DTYPE = np.float32

# Floor for geometric expectations: exp(psi(shape)) underflows for shapes far
# below 1e-2, and a zero would divide the sub-count ratios.
_TINY = 1e-300


def gamma_moments(shape, rate):
    """(E[x], Var[x], G[x] = exp(E[log x])) of Gamma(shape, rate), elementwise.

    ``rate`` broadcasts against ``shape`` (2-d)."""
    # contiguous: one compiled specialisation of the kernel for every caller
    rate = np.ascontiguousarray(np.broadcast_to(rate, shape.shape))
    shape = np.ascontiguousarray(shape)
    mean, var, geo = (np.empty(shape.shape) for _ in range(3))
    _gamma_moments(shape, rate, mean, var, geo)
    return mean, var, geo


# The noisy sweep below works on one row at a time in passes over the row,
# each a loop without branches over the columns that the compiler turns into
# SIMD code; the per-entry alternative (one entry through all the steps, with
# the data-dependent loops of digamma and the Bessel series) runs scalar.

# The Bessel series is summed in SIMD for nu up to this and for mode 0; the
# rest (rare) goes to the scalar bessel_mean. Below these bounds and
# _SERIES_MAX_TERMS terms its unscaled sums stay below 1e210.
_SERIES_MAX_NU = 1e4
_SERIES_MAX_TERMS = 40
# Terms below this fraction of the sum are dropped (as in _bessel).
_TAIL_CUTOFF = 1e-20


@njit(cache=True, inline="always")
def _log_exp_digamma(x):
    """(y, s) with exp(psi(x)) = y exp(s), for x > 0, without branches.

    psi(x) = psi(x + 6) - sum_{i<6} 1/(x + i) for x < 8, the six reciprocals
    taken as one fraction and the asymptotic series at y = x + 6 sharing its
    division; s excludes log y so that no logarithm is needed.
    """
    small = x < 8.0
    x1 = x + 1.0
    x2 = x + 2.0
    x3 = x + 3.0
    x4 = x + 4.0
    x5 = x + 5.0
    p01 = x * x1
    p23 = x2 * x3
    p45 = x4 * x5
    numerator = (x + x1) * p23 * p45 + (x2 + x3) * p01 * p45 + (x4 + x5) * p01 * p23
    denominator = p01 * p23 * p45
    y = x + 6.0 if small else x
    inv_both = 1.0 / (denominator * y if small else y)
    recurrence = numerator * y * inv_both if small else 0.0
    inv = denominator * inv_both if small else inv_both
    inv2 = inv * inv
    # asymptotic series to y^-14: truncation below 2e-15 for y >= 8 (2e-13 at
    # y = 6, reached only for x < 1)
    series = -recurrence - 0.5 * inv - inv2 * (
        1.0 / 12
        - inv2 * (1.0 / 120 - inv2 * (1.0 / 252 - inv2 * (1.0 / 240 - inv2 * (
            1.0 / 132 - inv2 * (691.0 / 32760 - inv2 / 12)))))
    )
    return y, series


# serial: too little work for a parallel region's start and barrier; numpy's
# error model: without the branch of Python's ZeroDivisionError the flat loop
# compiles to SIMD code
@njit(cache=True, error_model="numpy")
def _gamma_moments(shape, rate, mean, var, geo):
    shape = shape.ravel()
    rate = rate.ravel()
    mean = mean.ravel()
    var = var.ravel()
    geo = geo.ravel()
    for i in range(shape.shape[0]):
        inv_rate = 1.0 / rate[i]
        y, series = _log_exp_digamma(shape[i])
        mean_i = shape[i] * inv_rate
        mean[i] = mean_i
        var[i] = mean_i * inv_rate
        geo[i] = max(y * simd_exp(series) * inv_rate, _TINY)


@parallel_kernel
def _private_entry_update(noisy, mean_mu, var_mu, geo_mu, pos_shape, neg_shape, alpha,
                          use_mean):
    """The per-entry CAVI updates, fused and in place.

    Noise rates, G[lambda+ + mu] by the delta method, the Bessel step with
    the unsigned nu = |y~|, and the split of y+ between g+ and the K
    sub-counts. ``use_mean`` takes E[m] under q(m) = Bessel(|y~|, a) for the
    smaller m of y+ and g-, the exact CAVI expectation; otherwise its mode,
    the cheaper approximation of Schofield et al. On return ``mean_mu`` holds
    the sub-count ratio R = E[y+] / (G[lambda+] + sum_k G[theta] G[phi]) and
    the two noise shapes hold 1 + E[g+-]. Returns nothing else: the row and
    column sums of the sub-counts are matrix products of R, done by the
    caller. Each row gets its own scratch rows (a per-thread buffer indexed
    by ``numba.get_thread_id`` crashes the serial twin when it is loaded
    from numba's cache); every row's arithmetic is fixed, whichever thread
    does it.
    """
    n_rows, n_cols = noisy.shape
    for d in prange(n_rows):
        buffers = np.empty((6, n_cols))
        geo_pos_row = buffers[0]
        half_a_sq_row = buffers[1]
        nu_row = buffers[2]
        smaller_row = buffers[3]
        first_row = buffers[4]
        term_row = buffers[5]
        for v in range(n_cols):
            shape_pos = pos_shape[d, v]
            y_pos, series_pos = _log_exp_digamma(shape_pos)
            geo_pos_row[v] = alpha * y_pos * simd_exp(series_pos)
            y_neg, series_neg = _log_exp_digamma(neg_shape[d, v])
            # delta method for G[lambda+ + mu]
            mean_x = alpha * shape_pos + mean_mu[d, v]
            var_x = alpha * alpha * shape_pos + var_mu[d, v]
            # (a/2)^2 = G[lambda-] G[lambda+ + mu]: one exp for both factors
            half_a_sq_row[v] = alpha * y_neg * mean_x * simd_exp(
                series_neg - 0.5 * var_x / (mean_x * mean_x)
            )
            nu_row[v] = abs(float(noisy[d, v]))
        if use_mean:
            for v in range(n_cols):
                smaller_row[v] = 1.0
                first_row[v] = 0.0
                in_range = (half_a_sq_row[v] < nu_row[v] + 1.0
                            and nu_row[v] <= _SERIES_MAX_NU)
                # entries left to the scalar path start (and stay) converged
                term_row[v] = 1.0 if in_range else 0.0
            # two terms per pass over the row: half the loads, stores and
            # convergence counts (a row may take one term more than it needs)
            for m in range(0, _SERIES_MAX_TERMS, 2):
                n_pending = 0
                for v in range(n_cols):
                    # the sums of the terms h^j / prod_{i<j} (i + 1)(i + nu + 1),
                    # h = (a/2)^2, over their common denominator: no division
                    # per term, one at the end
                    nu = nu_row[v]
                    half_a_sq = half_a_sq_row[v]
                    step = m + 1.0
                    common = step * (step + nu)
                    term = term_row[v] * half_a_sq
                    smaller = smaller_row[v] * common + term
                    first = first_row[v] * common + step * term
                    step = m + 2.0
                    common = step * (step + nu)
                    term = term * half_a_sq
                    smaller = smaller * common + term
                    smaller_row[v] = smaller
                    first_row[v] = first * common + step * term
                    term_row[v] = term
                    n_pending += term >= _TAIL_CUTOFF * smaller
                if n_pending == 0:
                    break
            for v in range(n_cols):
                half_a_sq = half_a_sq_row[v]
                nu = nu_row[v]
                if (half_a_sq < nu + 1.0 and nu <= _SERIES_MAX_NU
                        and term_row[v] < _TAIL_CUTOFF * smaller_row[v]):
                    smaller_row[v] = first_row[v] / smaller_row[v]
                else:
                    smaller_row[v] = bessel_mean(nu, 2.0 * math.sqrt(half_a_sq))
        else:
            for v in range(n_cols):
                half_a_sq = half_a_sq_row[v]
                nu = nu_row[v]
                # mode 0 exactly when (a/2)^2 < nu + 1
                smaller_row[v] = (
                    0.0 if half_a_sq < nu + 1.0
                    else bessel_mode(nu, 2.0 * math.sqrt(half_a_sq))
                )
        for v in range(n_cols):
            count = float(noisy[d, v])
            smaller = smaller_row[v]
            geo_pos = geo_pos_row[v]
            ratio = (smaller + max(count, 0.0)) / (geo_pos + geo_mu[d, v])
            mean_mu[d, v] = ratio
            pos_shape[d, v] = 1.0 + ratio * geo_pos
            neg_shape[d, v] = 1.0 + smaller + max(-count, 0.0)


@parallel_kernel
def _marginal_entry_update(noisy, rate, geo_mu, alpha):
    """R = E[y | y~, rate] / sum_k G[theta] G[phi], in place in ``rate``;
    returns sum E[y] per row (summed by the caller: a reduction inside the
    parallel region would depend on the number of threads).

    The two-sided geometric noise is integrated out exactly (the law of the
    true count given the noisy one and a Poisson rate is in
    ``_noisy_count``): no noise-rate factors and no Bessel step, whose
    per-entry noise rates can take up all of a sparse row's counts. For
    y~ <= 0, E[y] = rate alpha; the positive entries of a row are summed
    side by side (``positive_count_sums``).
    """
    n_rows, n_cols = noisy.shape
    row_sums = np.zeros(n_rows)
    for d in prange(n_rows):
        lanes = np.empty((N_LANE_BUFFERS, n_cols))
        columns = np.empty((3, n_cols), dtype=np.int64)
        # the row in double whatever the stored types: one compiled row pass
        # for every caller
        rows = np.empty((2, n_cols))
        for v in range(n_cols):
            rows[0, v] = noisy[d, v]
            rows[1, v] = rate[d, v]
        n_ended, n_scalar = positive_count_sums(rows[0], rows[1], alpha, lanes, columns)
        acc = 0.0
        for v in range(n_cols):
            # the positive entries' E[y] are set below (a select, not a
            # product with 0: an infinite rate stays infinite, NaN gives 0,
            # as in posterior_count_mean)
            entry_rate = rows[1, v]
            expected = entry_rate * alpha if (rows[0, v] <= 0.0) & (entry_rate > 0.0) else 0.0
            acc += expected
            rate[d, v] = expected / max(float(geo_mu[d, v]), _TINY)
        for j in range(n_ended):
            expected = lanes[6, j] / lanes[7, j]
            acc += expected
            v = columns[1, j]
            rate[d, v] = expected / max(float(geo_mu[d, v]), _TINY)
        for j in range(n_scalar):
            v = columns[2, j]
            expected = posterior_count_mean(rows[0, v], lanes[8, j], alpha)
            acc += expected
            rate[d, v] = expected / max(float(geo_mu[d, v]), _TINY)
        row_sums[d] = acc
    return row_sums


@parallel_kernel
def _sparse_ratio(indptr, indices, data, geo_theta, geo_phi_t, out):
    """R = y / (G[theta] G[phi]) at the non-zeros of a CSR matrix."""
    n_rows = indptr.shape[0] - 1
    n_components = geo_theta.shape[1]
    for d in prange(n_rows):
        for idx in range(indptr[d], indptr[d + 1]):
            v = indices[idx]
            acc = 0.0
            for k in range(n_components):
                acc += geo_theta[d, k] * geo_phi_t[v, k]
            out[idx] = data[idx] / acc


@parallel_kernel
def _clipped_ratio(counts, rate):
    """R = max(y, 0) / (G[theta] G[phi]), in place in ``rate``: the clean
    sweep on counts clipped at 0 (the naive model of noisy counts)."""
    n_rows, n_cols = counts.shape
    for d in prange(n_rows):
        for v in range(n_cols):
            count = float(counts[d, v])
            rate[d, v] = count / rate[d, v] if count > 0.0 else 0.0


def product_dtype(need_columns):
    """The precision of a sweep's products: ``PRODUCT_DTYPE`` for the joint
    sweeps, double for rows with q(phi) fixed (transform), whose single
    precision products would round differently with the number of rows in
    the product, so that a row's factors would depend, at 1e-7, on the rows
    given with it."""
    return PRODUCT_DTYPE if need_columns else np.float64


def _buffer(workspace, name, n_rows, n_cols, dtype):
    """A (n_rows, n_cols) view of a buffer kept in ``workspace``, grown on demand."""
    buffer = workspace.get(name)
    if (buffer is None or buffer.shape[0] < n_rows or buffer.shape[1] != n_cols
            or buffer.dtype != dtype):
        buffer = workspace[name] = np.empty((n_rows, n_cols), dtype=dtype)
    return buffer[:n_rows]


def sweep_shared(alpha, noise_update, phi_mean, phi_var, phi_geo, need_columns=True):
    """What every row block of a sweep needs of q(phi), in the precision of
    the block's products (``product_dtype``): (G[phi],) for the clean
    (clipped) sweep, (E[phi], G[phi]) for the marginal one, with the stacked
    second moments for the Bessel updates."""
    if alpha is None:
        return (np.ascontiguousarray(phi_geo),)
    dtype = product_dtype(need_columns)

    def single(values):
        return values.astype(dtype, copy=False)

    if noise_update == "marginal":
        return single(phi_mean), single(phi_geo)
    # Var[sum_k theta phi] = Var_t @ (Var_p + E_p^2) + E_t^2 @ Var_p: one
    # product with the blocks stacked along K; every term is positive, so
    # single precision loses nothing to cancellation.
    return (single(phi_mean), single(np.vstack([phi_var + phi_mean**2, phi_var])),
            single(phi_geo))


def sweep_block(X, theta_mean, theta_var, theta_geo, pos_shape, neg_shape, alpha,
                noise_update, need_columns, shared, workspace=None):
    """One sweep's sub-count sums over a block of rows (the map of a sweep).

    Returns ``(row_part, col_part, expected_total)``: the row and column sums
    of the sub-count ratios R, so that the expected sub-count totals are
    ``G[theta] * row_part`` (rows of this block, K) and, summed over the
    blocks, ``G[phi] * col_part`` (K, columns); ``col_part`` is None unless
    ``need_columns``. For ``noise_update="marginal"`` both still miss the
    count scale (it needs every block's ``expected_total``, the sum of
    E[y | y~]). ``alpha`` None is the clean sweep on the counts clipped at 0.
    The Bessel updates advance their noise shapes ``pos_shape`` and
    ``neg_shape`` (this block's rows) in place.
    """
    n_rows, n_cols = X.shape
    if workspace is None:
        workspace = {}
    if alpha is None:
        (phi_geo,) = shared
        ratio = np.matmul(theta_geo, phi_geo,
                          out=_buffer(workspace, "ratio", n_rows, n_cols, np.float64))
        _clipped_ratio(X, ratio)
        row_part = ratio @ phi_geo.T
        col_part = theta_geo.T @ ratio if need_columns else None
        return row_part, col_part, 0.0
    # the precision sweep_shared gave the shared moments
    dtype = shared[0].dtype

    def single(values):
        return values.astype(dtype, copy=False)

    theta_geo_single = single(theta_geo)
    phi_geo_single = shared[-1]
    mean_mu = np.matmul(single(theta_mean), shared[0],
                        out=_buffer(workspace, "mean_mu", n_rows, n_cols, dtype))
    geo_mu = np.matmul(theta_geo_single, phi_geo_single,
                       out=_buffer(workspace, "geo_mu", n_rows, n_cols, dtype))
    if noise_update == "marginal":
        # E[y | y~] at the rate E[mu]; the rates G[mu] of the mean-field
        # update fall far below E[mu] where the factors' shapes are small
        # (sparse rows and words) and let a fit collapse onto the prior
        expected_total = float(_marginal_entry_update(X, mean_mu, geo_mu, alpha).sum())
    else:
        var_mu = np.matmul(
            single(np.hstack([theta_var, theta_mean**2])), shared[1],
            out=_buffer(workspace, "var_mu", n_rows, n_cols, dtype))
        _private_entry_update(
            X, mean_mu, var_mu, geo_mu, pos_shape, neg_shape, alpha,
            noise_update == "bessel-mean")
        expected_total = 0.0
    ratio = mean_mu
    row_part = ratio @ phi_geo_single.T
    col_part = theta_geo_single.T @ ratio if need_columns else None
    return row_part, col_part, expected_total


def loglik_block(X, row_factors, alpha, components, workspace=None):
    """Log-likelihood of a block of rows at mu = row_factors @ components:
    of the noisy counts, or (``alpha`` None) of the counts clipped at 0."""
    if alpha is None:
        return clipped_loglik_sum(X, row_factors, components)
    return noisy_loglik_sum(X, row_factors, components, alpha)


def block_sum(X, clip, workspace=None):
    """Sum of a block's counts (clipped at 0 when ``clip``), exact."""
    if X.dtype.kind == "f":
        return float(np.maximum(X, 0.0).sum() if clip else X.sum())
    return int(np.maximum(X, 0).sum(dtype=np.int64) if clip else X.sum(dtype=np.int64))


def block_row_sums(X, clip, workspace=None):
    """Row sums of a block's counts (clipped at 0 when ``clip``), float64."""
    return (np.maximum(X, 0) if clip else X).sum(axis=1, dtype=np.float64)


def _sweep_totals(source, alpha, theta_shape, theta_rate, phi_shape, phi_rate,
                  pos_shape, neg_shape, need_columns, noise_update, count_scale,
                  noisy_total):
    """Expected sub-count totals per row and component (n_rows, K) and, when
    ``need_columns``, per component and column (K, n_cols), and the count
    scale (``noise_update="marginal"``: the given ``count_scale``, or the one
    fitted now when it is None; 1 otherwise): the row-block map of
    ``sweep_block`` and the sum of its column parts."""
    theta_mean, theta_var, theta_geo = gamma_moments(theta_shape, theta_rate)
    phi_mean, phi_var, phi_geo = gamma_moments(phi_shape, phi_rate)
    shared = sweep_shared(alpha, noise_update, phi_mean, phi_var, phi_geo, need_columns)
    bessel = alpha is not None and noise_update != "marginal"
    row_parts = []
    col_part = np.zeros(phi_shape.shape) if need_columns else None
    expected_total = 0.0
    # reduced as the blocks come, in block order and in double: the same
    # sums for any placement of the blocks
    for block_rows, block_cols, block_expected in source.map(
        sweep_block,
        (theta_mean, theta_var if bessel else None, theta_geo, pos_shape, neg_shape),
        alpha, noise_update, need_columns, shared,
    ):
        row_parts.append(block_rows)
        if need_columns:
            col_part += block_cols
        expected_total += block_expected
    row_part = np.vstack(row_parts)
    scale = 1.0
    if alpha is not None and noise_update == "marginal":
        scale = count_scale
        if scale is None:
            scale = scale_to_noisy_total(noisy_total, expected_total, source.shape)
    row_totals = theta_geo * row_part * scale
    col_totals = phi_geo * col_part * scale if need_columns else None
    return row_totals, col_totals, scale


def column_statistics(X, alpha, theta_shape, theta_rate, phi_shape, phi_rate,
                      noise_update="marginal", count_scale=1.0):
    """What rows X contribute to q(phi) at the given q(theta) and q(phi).

    Returns the expected sub-count totals per component and column (K,
    n_cols), added to the prior shape of phi, and the sum of E[theta] per
    component (K,), added to its prior rate: the sufficient statistics of
    the rows, which an online fit accumulates block by block. ``X`` as in
    ``fit_cavi`` (the Bessel updates excepted); ``count_scale`` is the scale
    of the expected true counts (``noise_update="marginal"``).
    """
    if sp.issparse(X):
        col_totals = _sparse_sub_count_totals(
            X, theta_shape, theta_rate, phi_shape, phi_rate, True)[1]
    else:
        if isinstance(X, np.ndarray):
            X = InMemoryRowBlocks(X)
        col_totals = _sweep_totals(
            X, alpha, theta_shape, theta_rate, phi_shape, phi_rate, None, None, True,
            noise_update, count_scale, None)[1]
    return col_totals, (theta_shape / theta_rate).sum(axis=0)


def _sparse_sub_count_totals(X, theta_shape, theta_rate, phi_shape, phi_rate,
                             need_columns):
    """Expected sub-count totals of clean CSR counts (work per non-zero)."""
    theta_geo = gamma_moments(theta_shape, theta_rate)[2]
    phi_geo = gamma_moments(phi_shape, phi_rate)[2]
    ratio_data = np.empty(X.nnz)
    _sparse_ratio(X.indptr, X.indices, X.data, theta_geo,
                  np.ascontiguousarray(phi_geo.T), ratio_data)
    ratio = sp.csr_matrix((ratio_data, X.indices, X.indptr), shape=X.shape)
    row_totals = theta_geo * np.asarray(ratio @ phi_geo.T)
    col_totals = (
        phi_geo * np.asarray(ratio.T @ theta_geo).T if need_columns else None
    )
    return row_totals, col_totals, 1.0


def scale_to_noisy_total(noisy_total, expected_total, shape):
    """The factor that brings the expected true counts to the noisy total
    ``noisy_total`` of a matrix of ``shape``.

    The noise is symmetric, so the noisy total is an unbiased estimate of
    the true one, with a standard deviation of sqrt(2 alpha) / (1 - alpha)
    per entry, small next to the total of a matrix. Without it the
    plug-in update above over-explains positive noise: every entry whose
    fitted rate is up draws a larger expected count, which raises the rate
    further (at epsilon/N = 1 on sparse text the total rate settles at 2
    to 4 times the true one)."""
    size = shape[0] * shape[1]
    return max(float(noisy_total), 1e-3 * size) / max(expected_total, 1e-300)


def fit_gamma_prior(totals, scale):
    """Empirical-Bayes gamma prior per component (Wang's EBPMF reduction).

    Column k of ``totals`` holds x_i = E[sum of sub-counts] of each unit i for
    component k and ``scale[k]`` the common exposure s; x_i ~ Poisson(s t_i),
    t_i ~ Gamma(a_k, b_k) marginally is negative binomial. The rate is
    profiled out in closed form (b = n a s / sum_i x_i) and log a is found by
    golden-section search on [1e-3, 1e3], for all components at once.

    Returns
    -------
    shape, rate : ndarray of shape (K,)
        NaN for a component whose totals are all zero (no information).
    """
    n_units = totals.shape[0]
    sum_x = totals.sum(axis=0)
    valid = sum_x > 0

    def profile_loglik(log_a):
        a = np.exp(log_a)
        b = n_units * a * scale / np.where(valid, sum_x, 1.0)
        return (
            (gammaln(totals + a) - gammaln(a)).sum(axis=0)
            + n_units * a * np.log(b / (b + scale))
            + sum_x * np.log(scale / (b + scale))
        )

    lo = np.full(totals.shape[1], math.log(1e-3))
    hi = np.full(totals.shape[1], math.log(1e3))
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    left = hi - golden * (hi - lo)
    right = lo + golden * (hi - lo)
    f_left, f_right = profile_loglik(left), profile_loglik(right)
    for _ in range(60):
        move_right = f_left < f_right
        lo = np.where(move_right, left, lo)
        hi = np.where(move_right, hi, right)
        new_left = np.where(move_right, right, hi - golden * (hi - lo))
        new_right = np.where(move_right, lo + golden * (hi - lo), left)
        left, right = new_left, new_right
        f_new = profile_loglik(np.where(move_right, right, left))
        f_left, f_right = (
            np.where(move_right, f_right, f_new),
            np.where(move_right, f_new, f_left),
        )
    shape = np.exp(0.5 * (lo + hi))
    rate = n_units * shape * scale / np.where(valid, sum_x, 1.0)
    shape[~valid] = np.nan
    rate[~valid] = np.nan
    return shape, rate


def log_likelihood_sum(X, alpha, row_factors, components):
    """Total log-likelihood of X at mu = row_factors @ components: of CSR
    clean counts, or of a dense array or source of row blocks, noisy when
    ``alpha`` is set and clipped at 0 otherwise (summed in block order)."""
    if sp.issparse(X):
        return clean_loglik_sum(X, row_factors, components)
    if isinstance(X, np.ndarray):
        X = InMemoryRowBlocks(X)
    components = np.ascontiguousarray(components, dtype=np.float64)
    total = 0.0
    for part in X.map(loglik_block, (row_factors,), alpha, components):
        total += part
    return total


@blas_single_threaded
def fit_cavi(
    X,
    alpha,
    theta_shape,
    theta_rate,
    phi_shape,
    phi_rate,
    *,
    theta_prior,
    phi_prior,
    update_components=True,
    empirical_bayes=False,
    max_iter=200,
    min_iter=10,
    tol=1e-4,
    evaluate_every=5,
    noise_update="marginal",
    count_scale=None,
    verbose=0,
    print_prefix="",
):
    """Run CAVI sweeps until the relative change of the objective is below ``tol``.

    Parameters
    ----------
    X : CSR matrix, ndarray or source of row blocks
        Clean counts (CSR, ``alpha`` None; work per non-zero), or dense
        counts of any integer or float dtype, as an array or a source of row
        blocks (``_blocks``): noisy with ``alpha`` set, otherwise clipped at
        0 (the naive model of noisy counts). Dense counts are swept a block
        of rows at a time; nothing of the size of X is allocated except, for
        the Bessel updates, their two per-entry noise shapes.
    alpha : float or None
        The noise ratio exp(-epsilon / sensitivity).
    theta_shape, theta_rate, phi_shape, phi_rate : ndarray
        Initial variational parameters, shapes (n, K), (n, K), (K, V), (K, V);
        the rates broadcast: theta_rate may be (1, K), phi_rate (K, 1).
        Updated in place and returned.
    theta_prior, phi_prior : tuple of (shape, rate) arrays of shape (K,)
        Gamma prior parameters per component; with ``empirical_bayes``, the
        starting values, replaced by the fitted ones every sweep after the
        first ``EB_WARM_UP_SWEEPS``.
    update_components : bool
        False holds q(phi) fixed (transform).
    noise_update : {"marginal", "bessel-mean", "bessel-mode"}
        How the noisy sweep infers the true counts: with the noise
        integrated out, at the rate E[mu] and scaled to the noisy total; or
        Schofield et al.'s noise-rate factors with the mean or the mode of
        q(min(y+, g-)).
    count_scale : float or None
        ``noise_update="marginal"``: the scale of the expected true counts;
        None fits it every sweep (the noisy total), a number holds it (the
        one fitted on the training rows, for new rows).

    Returns
    -------
    result : dict
        theta_shape, theta_rate, phi_shape, phi_rate, theta_prior, phi_prior,
        n_iter, count_scale, objective_trace (list of (iteration, mean log-likelihood per
        entry at the posterior means)).
    """
    sparse = sp.issparse(X)
    if not sparse and isinstance(X, np.ndarray):
        X = InMemoryRowBlocks(X)
    n_rows, n_cols = X.shape
    theta_prior_shape, theta_prior_rate = (np.array(p, dtype=float) for p in theta_prior)
    phi_prior_shape, phi_prior_rate = (np.array(p, dtype=float) for p in phi_prior)
    if alpha is not None and noise_update != "marginal":
        prior_noise_shape = 1.0 / (1.0 - alpha)
        pos_shape = np.full(X.shape, prior_noise_shape)
        neg_shape = np.full(X.shape, prior_noise_shape)
    else:
        pos_shape = neg_shape = None
    noisy_total = None
    if alpha is not None and noise_update == "marginal" and count_scale is None:
        noisy_total = sum(X.map(block_sum, (), False))
    if empirical_bayes:
        min_iter = max(min_iter, EB_WARM_UP_SWEEPS + 2 * evaluate_every)
    objective_trace = []
    previous = None
    n_iter = 0
    start = time.perf_counter()
    for iteration in range(1, max_iter + 1):
        n_iter = iteration
        if sparse:
            row_totals, col_totals, fitted_scale = _sparse_sub_count_totals(
                X, theta_shape, theta_rate, phi_shape, phi_rate, update_components)
        else:
            row_totals, col_totals, fitted_scale = _sweep_totals(
                X, alpha, theta_shape, theta_rate, phi_shape, phi_rate,
                pos_shape, neg_shape, update_components, noise_update, count_scale,
                noisy_total,
            )
        phi_mean = phi_shape / phi_rate
        exposure_theta = phi_mean.sum(axis=1)
        fit_priors = empirical_bayes and iteration > EB_WARM_UP_SWEEPS
        if fit_priors:
            shape_k, rate_k = fit_gamma_prior(row_totals, exposure_theta)
            keep = np.isnan(shape_k)
            theta_prior_shape = np.where(keep, theta_prior_shape, shape_k)
            theta_prior_rate = np.where(keep, theta_prior_rate, rate_k)
        theta_shape = theta_prior_shape + row_totals
        theta_rate = np.broadcast_to(
            theta_prior_rate + exposure_theta, theta_shape.shape
        ).copy()
        if update_components:
            exposure_phi = (theta_shape / theta_rate).sum(axis=0)
            if fit_priors:
                shape_k, rate_k = fit_gamma_prior(col_totals.T, exposure_phi)
                keep = np.isnan(shape_k)
                phi_prior_shape = np.where(keep, phi_prior_shape, shape_k)
                phi_prior_rate = np.where(keep, phi_prior_rate, rate_k)
            phi_shape = phi_prior_shape[:, None] + col_totals
            phi_rate = np.broadcast_to(
                (phi_prior_rate + exposure_phi)[:, None], phi_shape.shape
            ).copy()
        if iteration % evaluate_every == 0 or iteration == max_iter:
            objective = log_likelihood_sum(
                X, alpha, theta_shape / theta_rate, phi_shape / phi_rate
            ) / (n_rows * n_cols)
            objective_trace.append((iteration, objective))
            if verbose:
                elapsed = time.perf_counter() - start
                print(
                    f"{print_prefix}iteration {iteration}: log-likelihood per entry "
                    f"{objective:.6f}, {elapsed / iteration:.3f} s/iteration"
                )
            if previous is not None and iteration >= min_iter:
                change = abs(objective - previous) / max(abs(previous), 1e-300)
                if change < tol:
                    break
            previous = objective
    return {
        "theta_shape": theta_shape,
        "theta_rate": theta_rate,
        "phi_shape": phi_shape,
        "phi_rate": phi_rate,
        "theta_prior": (theta_prior_shape, theta_prior_rate),
        "phi_prior": (phi_prior_shape, phi_prior_rate),
        "n_iter": n_iter,
        "objective_trace": objective_trace,
        "count_scale": fitted_scale,
    }
