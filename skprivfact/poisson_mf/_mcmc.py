"""Gibbs sampler for (locally private) Poisson factorization (Schein et al. 2019).

One sweep: per entry, the Bessel step for min(y+, g-), a binomial
split of y+ into the true count and g+, gamma draws of the two noise rates,
and a multinomial split of the true count over the K components; then the
conjugate gamma draws of phi and theta from the sub-count totals.

Reproducibility: the per-entry kernel runs in parallel over rows, and every
row reseeds the thread's numba generator from (chain seed, sweep, row) with
splitmix64 before drawing, so a row's draws do not depend on which thread runs
it. The sub-count totals are integer-valued float sums (exact in any order),
and the gamma draws of theta and phi use one numpy Generator per chain, so a
fixed seed gives identical chains for any number of threads.
"""

import math
import time

import numpy as np
import scipy.sparse as sp
from joblib import Parallel, delayed
from numba import njit, prange, uint64

from ._bessel import bessel_sample
from ._cavi import blas_single_threaded

# Rows are dealt to this many chunks, each with its own column-total buffer;
# the totals are integer-valued float sums, exact in any order, so the result
# does not depend on the chunking or on the number of threads.
_N_CHUNKS = 8
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15


@njit(cache=True)
def _splitmix64(state):
    z = state + uint64(_GOLDEN_GAMMA)
    z = (z ^ (z >> uint64(30))) * uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> uint64(27))) * uint64(0x94D049BB133111EB)
    return z ^ (z >> uint64(31))


@njit(cache=True)
def _row_seed(chain_seed, sweep, row):
    mixed = _splitmix64(uint64(chain_seed) ^ _splitmix64(uint64(sweep)))
    mixed = _splitmix64(mixed ^ uint64(row))
    return np.uint32(mixed >> uint64(32))


@njit(cache=True)
def _erlang(shape, scale):
    """Gamma(shape, scale) for a positive integer shape; small shapes (the
    usual case for noise rates) as -scale log(product of uniforms)."""
    if shape > 8:
        return np.random.gamma(shape, scale)
    product = 1.0
    for _ in range(int(shape)):
        product *= 1.0 - np.random.random()
    return -scale * math.log(product)


@njit(cache=True)
def _split_over_components(count, theta_row, phi, v, row_totals, col_totals,
                           cumulative):
    """Multinomial(count, theta_k phi_kv / sum): for small counts one
    categorical draw per unit by inversion (binary search of the cumulative
    weights), otherwise conditional binomials."""
    n_components = theta_row.shape[0]
    remaining_weight = 0.0
    for k in range(n_components):
        remaining_weight += theta_row[k] * phi[k, v]
        cumulative[k] = remaining_weight
    if count <= 16:
        for _ in range(count):
            target = np.random.random() * remaining_weight
            lo = 0
            hi = n_components - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if cumulative[mid] > target:
                    hi = mid
                else:
                    lo = mid + 1
            row_totals[lo] += 1.0
            col_totals[lo, v] += 1.0
        return
    remaining = count
    for k in range(n_components):
        if remaining == 0:
            break
        weight = theta_row[k] * phi[k, v]
        if k == n_components - 1 or weight >= remaining_weight:
            drawn = remaining
        else:
            drawn = np.random.binomial(remaining, weight / remaining_weight)
        remaining -= drawn
        remaining_weight -= weight
        row_totals[k] += drawn
        col_totals[k, v] += drawn


@njit(cache=True, parallel=True)
def _private_sweep(noisy, theta, phi, rates, noise_pos, noise_neg, alpha,
                   chain_seed, sweep, row_totals, col_totals_chunks, with_loglik):
    """Steps 1-4 over every entry; returns the complete-data log-likelihood
    of the drawn true counts (0 unless ``with_loglik``)."""
    n_rows, n_cols = noisy.shape
    n_chunks = col_totals_chunks.shape[0]
    loglik_rows = np.zeros(n_rows)
    row_totals[:] = 0.0
    col_totals_chunks[:] = 0.0
    for chunk in prange(n_chunks):
        col_totals = col_totals_chunks[chunk]
        for d in range(chunk, n_rows, n_chunks):
            np.random.seed(_row_seed(chain_seed, sweep, d))
            cumulative = np.empty(theta.shape[1])
            acc = 0.0
            for v in range(n_cols):
                count = noisy[d, v]
                mu = rates[d, v]
                lam_pos = noise_pos[d, v]
                lam_neg = noise_neg[d, v]
                a = 2.0 * math.sqrt((lam_pos + mu) * lam_neg)
                m = bessel_sample(abs(count), a)
                if count <= 0.0:
                    total_pos = m
                    g_neg = m - count
                else:
                    g_neg = m
                    total_pos = m + count
                true_count = 0
                if total_pos > 0.0 and mu > 0.0:
                    true_count = np.random.binomial(int(total_pos), mu / (mu + lam_pos))
                g_pos = total_pos - true_count
                noise_pos[d, v] = _erlang(1.0 + g_pos, alpha)
                noise_neg[d, v] = _erlang(1.0 + g_neg, alpha)
                if true_count > 0:
                    _split_over_components(
                        true_count, theta[d], phi, v, row_totals[d], col_totals,
                        cumulative,
                    )
                    if with_loglik:
                        acc += true_count * math.log(mu) - math.lgamma(true_count + 1.0)
                if with_loglik:
                    acc -= mu
            loglik_rows[d] = acc
    return loglik_rows.sum()


@njit(cache=True, parallel=True)
def _clean_sweep(indptr, indices, data, theta, phi, chain_seed, sweep,
                 row_totals, col_totals_chunks):
    """Step 4 at the non-zeros of a CSR count matrix; returns the part of the
    log-likelihood from the non-zeros (the caller subtracts sum(mu))."""
    n_rows = indptr.shape[0] - 1
    n_components = theta.shape[1]
    n_chunks = col_totals_chunks.shape[0]
    loglik_rows = np.zeros(n_rows)
    row_totals[:] = 0.0
    col_totals_chunks[:] = 0.0
    for chunk in prange(n_chunks):
        col_totals = col_totals_chunks[chunk]
        for d in range(chunk, n_rows, n_chunks):
            np.random.seed(_row_seed(chain_seed, sweep, d))
            cumulative = np.empty(n_components)
            acc = 0.0
            for idx in range(indptr[d], indptr[d + 1]):
                v = indices[idx]
                count = int(data[idx])
                mu = 0.0
                for k in range(n_components):
                    mu += theta[d, k] * phi[k, v]
                _split_over_components(count, theta[d], phi, v, row_totals[d],
                                       col_totals, cumulative)
                acc += count * math.log(mu) - math.lgamma(count + 1.0)
            loglik_rows[d] = acc
    return loglik_rows.sum()


def split_rhat(traces):
    """Split R-hat (Gelman et al., BDA3) of traces of shape (n_chains, n_draws)."""
    traces = np.asarray(traces, dtype=float)
    n_draws = traces.shape[1]
    half = n_draws // 2
    if half < 2:
        return float("nan")
    splits = np.vstack([traces[:, :half], traces[:, n_draws - half:]])
    within = splits.var(axis=1, ddof=1).mean()
    between = half * splits.mean(axis=1).var(ddof=1)
    if within == 0.0:
        return 1.0 if between == 0.0 else float("inf")
    var_plus = (half - 1) / half * within + between / half
    return float(math.sqrt(var_plus / within))


# Gamma draws of shape 0.1 can underflow to 0; a zero factor would make a
# positive count impossible and its log-likelihood -inf.
_FACTOR_FLOOR = 1e-300


@blas_single_threaded
def run_chain(X, alpha, n_components, theta_prior, phi_prior, n_burn_in, n_kept,
              seed, verbose=0, chain_index=0):
    """One Gibbs chain; returns posterior sums over the kept samples."""
    rng = np.random.default_rng(seed)
    kernel_seed = int(rng.integers(0, 2**63))
    n_rows, n_cols = X.shape
    theta_prior_shape, theta_prior_rate = theta_prior
    phi_prior_shape, phi_prior_rate = phi_prior
    clean = alpha is None
    mean_count = max(float(X.sum() if clean else np.maximum(X, 0).sum()) / (n_rows * n_cols), 1e-3)
    scale = math.sqrt(mean_count / n_components)
    theta = scale * rng.gamma(1.0, 1.0, size=(n_rows, n_components))
    phi = scale * rng.gamma(1.0, 1.0, size=(n_components, n_cols))
    if not clean:
        prior_mean_noise = alpha / (1.0 - alpha)
        noise_pos = np.full(X.shape, prior_mean_noise)
        noise_neg = np.full(X.shape, prior_mean_noise)
    row_totals = np.zeros((n_rows, n_components))
    col_totals_chunks = np.zeros((min(_N_CHUNKS, n_rows), n_components, n_cols))
    theta_sum = np.zeros_like(theta)
    phi_sum = np.zeros_like(phi)
    phi_sq_sum = np.zeros_like(phi)
    loglik_kept = np.empty(n_kept)
    n_sweeps = n_burn_in + n_kept
    report_every = max(1, n_sweeps // 10)
    start = time.perf_counter()
    for sweep in range(n_sweeps):
        with_loglik = sweep >= n_burn_in or verbose > 0
        if clean:
            loglik = _clean_sweep(X.indptr, X.indices, X.data, theta, phi,
                                  kernel_seed, sweep, row_totals, col_totals_chunks)
            loglik -= float(theta.sum(axis=0) @ phi.sum(axis=1))
        else:
            rates = theta @ phi
            loglik = _private_sweep(X, theta, phi, rates, noise_pos, noise_neg, alpha,
                                    kernel_seed, sweep, row_totals, col_totals_chunks,
                                    with_loglik)
        col_totals = col_totals_chunks.sum(axis=0)
        phi = rng.gamma(phi_prior_shape[:, None] + col_totals) / (
            phi_prior_rate + theta.sum(axis=0))[:, None]
        np.maximum(phi, _FACTOR_FLOOR, out=phi)
        theta = rng.gamma(theta_prior_shape + row_totals) / (
            theta_prior_rate + phi.sum(axis=1))
        np.maximum(theta, _FACTOR_FLOOR, out=theta)
        if sweep >= n_burn_in:
            theta_sum += theta
            phi_sum += phi
            phi_sq_sum += phi**2
            loglik_kept[sweep - n_burn_in] = loglik / (n_rows * n_cols)
        if verbose and ((sweep + 1) % report_every == 0 or sweep + 1 == n_sweeps):
            elapsed = time.perf_counter() - start
            phase = "burn-in" if sweep < n_burn_in else "sampling"
            print(
                f"chain {chain_index}: sweep {sweep + 1}/{n_sweeps} ({phase}), "
                f"complete-data log-likelihood per entry {loglik / (n_rows * n_cols):.6f}, "
                f"{elapsed / (sweep + 1):.3f} s/iteration"
            )
    return theta_sum / n_kept, phi_sum / n_kept, phi_sq_sum / n_kept, loglik_kept


def fit_mcmc_chains(X, alpha, n_components, *, theta_prior, phi_prior, n_burn_in,
                    n_kept, n_chains, n_jobs, rng, verbose=0):
    """Run ``n_chains`` Gibbs chains (in parallel with joblib) and pool them."""
    if alpha is None:
        X = sp.csr_matrix(X)
        X.sum_duplicates()
    seeds = rng.randint(0, 2**31 - 1, size=n_chains)
    outputs = Parallel(n_jobs=n_jobs)(
        delayed(run_chain)(X, alpha, n_components, theta_prior, phi_prior,
                           n_burn_in, n_kept, int(seed), verbose, index)
        for index, seed in enumerate(seeds)
    )
    theta_mean = np.mean([out[0] for out in outputs], axis=0)
    phi_mean = np.mean([out[1] for out in outputs], axis=0)
    phi_sq_mean = np.mean([out[2] for out in outputs], axis=0)
    loglik_samples = np.array([out[3] for out in outputs])
    return {
        "theta_mean": theta_mean,
        "phi_mean": phi_mean,
        "phi_var": phi_sq_mean - phi_mean**2,
        "loglik_samples": loglik_samples,
        "rhat": split_rhat(loglik_samples),
    }
