"""Gibbs sampler for (locally private) Poisson factorization (Schein et al. 2019).

One sweep: per entry, a draw of the true count from its law given the noisy
count and the rate mu with the noise integrated out (``_noisy_count``; the
Bessel step, binomial split and noise-rate draws of Schein et al. collapsed
into one exact draw), and a multinomial split of the true count over the K
components; then the conjugate gamma draws of phi and theta from the
sub-count totals. Collapsing the noise rates removes a slow mode of the
augmented chain: where mu exceeds the noisy count, min(y+, g-) and the
negative noise rate feed each other, and on large counts the Bessel draws
then walk for minutes.

Speed: the per-entry draws are exact samplers chosen for the counts that
occur (mostly 0, 1 or 2): Bessel draws by inversion from the mode decided by
bounds on the tail instead of the normaliser, Bernoulli trials, products of
uniforms whose logarithms are taken a row at a time in SIMD code, and
categorical draws by a vectorised count over the cumulative weights; the
multinomial split runs over the row's positive true counts only.

Reproducibility: the per-entry kernel runs in parallel over rows, and every
row draws from its own splitmix64 stream seeded from (chain seed, sweep,
row), so a row's draws do not depend on which thread runs it. The sub-count
totals are integer-valued float sums (exact in any order), and the gamma
draws of theta and phi use one numpy Generator per chain, so a fixed seed
gives identical chains for any number of threads.
"""

import math
import time

import numba
import numpy as np
import scipy.sparse as sp
from joblib import Parallel, delayed
from numba import njit, prange, uint64
from scipy.special import gammaln

from ._cavi import blas_single_threaded
from ._evaluation import (
    SIMILARITY_WARNING,
    _unit_rows,
    match_components,
    same_top_columns,
)
from ._noisy_count import draw_true_count, noise_std
from ._parallel import parallel_kernel

_GOLDEN_GAMMA = 0x9E3779B97F4A7C15
# Counts up to this are drawn from the row's own stream (Bernoulli trials,
# products of uniforms, one categorical draw per unit); larger ones, rare,
# with numba's generators.
_SMALL_COUNT = 16
# Support of the log-uniform hyperprior of the prior shapes when they are
# sampled: from very sparse factors (0.02) to nearly exponential ones (5).
_SHAPE_GRID = np.exp(np.linspace(math.log(0.02), math.log(5.0), 96))


@njit(cache=True)
def _splitmix64(state):
    z = state + uint64(_GOLDEN_GAMMA)
    z = (z ^ (z >> uint64(30))) * uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> uint64(27))) * uint64(0x94D049BB133111EB)
    return z ^ (z >> uint64(31))


@njit(cache=True)
def _row_seed(chain_seed, sweep, row):
    mixed = _splitmix64(uint64(chain_seed) ^ _splitmix64(uint64(sweep)))
    return _splitmix64(mixed ^ uint64(row))


@njit(cache=True)
def _start_row(numba_seed, row_seed):
    """Per-row state of numba's generator for the rare large draws:
    ``numba_seed`` (2 uint64) holds its seed, derived from the row's, and
    whether it has been seeded in this row yet."""
    numba_seed[0] = _splitmix64(row_seed ^ uint64(0xD1B54A32D192ED03))
    numba_seed[1] = 0


@njit(cache=True)
def _seed_numba_generator(numba_seed):
    # numba's (thread-local) generator serves the rare large draws; seeded
    # at its first use in a row from the row's seed, its draws depend on the
    # row alone, whichever thread runs it.
    if numba_seed[1] == 0:
        np.random.seed(np.uint32(numba_seed[0] >> uint64(32)))
        numba_seed[1] = 1


@njit(cache=True, inline="always")
def _uniform(state):
    """(uniform on [0, 1) with 53 bits, next state) of a splitmix64 stream;
    the state is passed by value so that it stays in a register."""
    bits = _splitmix64(state)
    return (float(bits >> uint64(11)) * (1.0 / 9007199254740992.0),
            state + uint64(_GOLDEN_GAMMA))


# The per-entry draws below take their common small cases without branches on
# the drawn values (a few uniforms more than needed are cheaper than the
# mispredicted branches on counts that are 0, 1 or 2 at random), and keep
# loops for the rare larger counts. Each returns the stream's next state.

@njit(cache=True)
def _binomial_large(n, p, state, numba_seed, drawn):
    # the trials after the first three
    if n > _SMALL_COUNT:
        _seed_numba_generator(numba_seed)
        return drawn + np.random.binomial(n - 3, p), state
    for _ in range(n - 3):
        uniform, state = _uniform(state)
        if uniform < p:
            drawn += 1
    return drawn, state


@njit(cache=True, inline="always")
def _binomial(n, p, state, numba_seed):
    """Binomial(n, p) as Bernoulli trials (numba's sampler for n > 16)."""
    first, state = _uniform(state)
    second, state = _uniform(state)
    third, state = _uniform(state)
    drawn = (int(first < p and n >= 1) + int(second < p and n >= 2)
             + int(third < p and n >= 3))
    if n > 3:
        drawn, state = _binomial_large(n, p, state, numba_seed, drawn)
    return drawn, state


@njit(cache=True)
def _split_over_components(count, theta_row, phi_column, row_totals, col_totals,
                           cumulative, state, numba_seed):
    """Multinomial(count, theta_k phi_kv / sum) added to the row's and the
    column's totals (``phi_column``, ``col_totals``: contiguous over k): for
    small counts one categorical draw per unit by inversion of the cumulative
    weights, otherwise conditional binomials. Returns the stream's state."""
    n_components = theta_row.shape[0]
    remaining_weight = 0.0
    for k in range(n_components):
        remaining_weight += theta_row[k] * phi_column[k]
        cumulative[k] = remaining_weight
    if count <= _SMALL_COUNT:
        for _ in range(count):
            uniform, state = _uniform(state)
            target = uniform * remaining_weight
            # the first k with cumulative[k] > target is the number of
            # cumulative weights at or below it: a count the compiler does in
            # vector registers, without the mispredicted branches of a
            # binary search (the last component takes a target that rounding
            # put at the total)
            chosen = 0
            for k in range(n_components - 1):
                chosen += 1 if cumulative[k] <= target else 0
            row_totals[chosen] += 1.0
            col_totals[chosen] += 1.0
        return state
    remaining = count
    for k in range(n_components):
        if remaining == 0:
            break
        weight = theta_row[k] * phi_column[k]
        if k == n_components - 1 or weight >= remaining_weight:
            drawn = remaining
        else:
            drawn, state = _binomial(remaining, weight / remaining_weight, state, numba_seed)
        remaining -= drawn
        remaining_weight -= weight
        row_totals[k] += drawn
        col_totals[k] += drawn
    return state


@parallel_kernel
def _private_sweep(noisy, theta, phi_t, rates, alpha, chain_seed, sweep, row_totals,
                   col_totals_chunks, with_loglik):
    """The true counts and their split over the components, every entry;
    returns the complete-data log-likelihood of the drawn true counts (0
    unless ``with_loglik``). ``phi_t`` is phi transposed (n_cols, K) and the
    column totals are kept per chunk of rows as (n_cols, K)."""
    n_rows, n_cols = noisy.shape
    n_components = theta.shape[1]
    n_chunks = col_totals_chunks.shape[0]
    loglik_rows = np.zeros(n_rows)
    row_totals[:] = 0.0
    col_totals_chunks[:] = 0.0
    for chunk in prange(n_chunks):
        col_totals = col_totals_chunks[chunk]
        cumulative = np.empty(n_components)
        # the row's entries with a positive true count, split in a second pass
        positive_cols = np.empty(n_cols, dtype=np.int64)
        positive_counts = np.empty(n_cols, dtype=np.int64)
        numba_seed = np.empty(2, dtype=np.uint64)
        for d in range(chunk, n_rows, n_chunks):
            state = _row_seed(chain_seed, sweep, d)
            _start_row(numba_seed, state)
            n_positive = 0
            for v in range(n_cols):
                uniform, state = _uniform(state)
                second, state = _uniform(state)
                # y | y~, mu with the noise integrated out (collapsed Gibbs)
                true_count = int(draw_true_count(noisy[d, v], rates[d, v], alpha,
                                                 uniform, second))
                positive_cols[n_positive] = v
                positive_counts[n_positive] = true_count
                n_positive += true_count > 0
            acc = 0.0
            for j in range(n_positive):
                v = positive_cols[j]
                true_count = positive_counts[j]
                state = _split_over_components(
                    true_count, theta[d], phi_t[v], row_totals[d], col_totals[v],
                    cumulative, state, numba_seed,
                )
                if with_loglik:
                    acc += true_count * math.log(rates[d, v]) - math.lgamma(true_count + 1.0)
            if with_loglik:
                for v in range(n_cols):
                    acc -= rates[d, v]
            loglik_rows[d] = acc
    return loglik_rows.sum()


@parallel_kernel
def _clean_sweep(indptr, indices, data, theta, phi_t, chain_seed, sweep,
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
        cumulative = np.empty(n_components)
        numba_seed = np.empty(2, dtype=np.uint64)
        for d in range(chunk, n_rows, n_chunks):
            state = _row_seed(chain_seed, sweep, d)
            _start_row(numba_seed, state)
            acc = 0.0
            for idx in range(indptr[d], indptr[d + 1]):
                v = indices[idx]
                count = int(data[idx])
                state = _split_over_components(count, theta[d], phi_t[v], row_totals[d],
                                               col_totals[v], cumulative, state, numba_seed)
                # the last cumulative weight is mu = sum_k theta_dk phi_kv
                acc += count * math.log(cumulative[n_components - 1]) - math.lgamma(count + 1.0)
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


# Rows of one block of infer_rows and restart_coinciding (their count and rate
# buffers are rows x columns): about 32 MB of each whatever the number of rows.
_BLOCK_ENTRIES = 2**22


def restart_coinciding(X, alpha, theta, phi):
    """Restart, in place, the components that coincide with another.

    Two components coincide when their profiles (rows of ``phi``) have
    cosine similarity above ``SIMILARITY_WARNING`` or the same
    ``_N_TOP_COLUMNS`` largest columns. The smaller of the pair (by expected
    count) is merged into the larger: its factors move onto the larger one's
    profile, scaled so that the pair's rates stay about the same. It then
    restarts from the rows the other components fit worst (the largest
    Pearson statistic of their counts above the rates): its profile is those
    rows' counts above the rates, its factors their totals above the rates.
    Each component is restarted at most once.

    ``X`` is what the chain reads: CSR clean counts (``alpha`` None) or
    dense noisy counts. Nothing is drawn: where no pair coincides the chain
    goes on exactly as without this step. Returns the restarted pairs as
    ``(kept, restarted, cosine similarity)``.
    """
    n_rows, n_components = theta.shape
    # a noisy count's variance around its rate adds the noise's
    noise_var = 0.0 if alpha is None else noise_std(alpha) ** 2
    n_seed_rows = min(n_rows, max(2, n_rows // (2 * n_components)))
    block_rows = max(1, _BLOCK_ENTRIES // max(phi.shape[1], 1))
    restarted = []
    while len(restarted) < n_components // 2:
        unit = _unit_rows(phi)
        similarity = unit @ unit.T
        coinciding = (similarity > SIMILARITY_WARNING) | same_top_columns(phi)
        np.fill_diagonal(coinciding, False)
        for _, done, _ in restarted:
            coinciding[done, :] = coinciding[:, done] = False
        if not coinciding.any():
            break
        first, second = np.unravel_index(
            np.argmax(np.where(coinciding, similarity, -np.inf)), similarity.shape)
        mass = theta.sum(axis=0) * phi.sum(axis=1)
        kept, gone = (first, second) if mass[first] >= mass[second] else (second, first)
        theta[:, kept] += theta[:, gone] * (phi[gone].sum() / phi[kept].sum())
        theta[:, gone] = 0.0
        scores = np.empty(n_rows)
        for start in range(0, n_rows, block_rows):
            rows = slice(start, min(start + block_rows, n_rows))
            counts = X[rows].toarray() if sp.issparse(X) else X[rows]
            rates = theta[rows] @ phi
            above = np.maximum(counts - rates, 0.0)
            # 1e-3 keeps a count where the rate is 0 from an infinite score
            scores[rows] = (above**2 / (rates + noise_var + 1e-3)).sum(axis=1)
        seed_rows = np.sort(np.argsort(-scores, kind="stable")[:n_seed_rows])
        counts = X[seed_rows].toarray() if sp.issparse(X) else X[seed_rows]
        above = np.maximum(counts - theta[seed_rows] @ phi, 0.0)
        total = above.sum()
        if total > 0.0:
            scale = phi[gone].sum()
            # a small floor keeps every column reachable for the sweeps
            profile = above.sum(axis=0) + 1e-3 * total / above.shape[1]
            phi[gone] = scale * profile / profile.sum()
            theta[seed_rows, gone] = above.sum(axis=1) / scale
            # every other row keeps a little of it, so the sweeps can move it there
            theta[:, gone] += 1e-3 * theta[seed_rows, gone].mean()
        else:
            theta[:, gone] = 1e-3 * theta[:, kept]
        restarted.append((int(kept), int(gone), float(similarity[first, second])))
    np.maximum(theta, _FACTOR_FLOOR, out=theta)
    np.maximum(phi, _FACTOR_FLOOR, out=phi)
    return restarted


def draw_prior_shape(factors, prior_mean, rng, per_column=False):
    """Draw the shape ``a`` of the Gamma(a, a / prior_mean[k]) priors of the
    columns of ``factors`` (n, K) under a log-uniform hyperprior on
    ``_SHAPE_GRID`` (an exact draw from the discretised conditional): one
    shape shared by all the columns, or with ``per_column`` one per column,
    each from its own column's conditional. Returns the K shapes. The prior
    means stay fixed: the shape sets how sparse the factors are around them."""
    n_values = factors.shape[0]
    log_sum = np.log(factors).sum(axis=0)
    factor_sum = factors.sum(axis=0)
    shapes = _SHAPE_GRID[:, None]
    rates = shapes / prior_mean[None, :]
    log_density = (
        n_values * (shapes * np.log(rates) - gammaln(shapes))
        + (shapes - 1.0) * log_sum[None, :]
        - rates * factor_sum[None, :]
    )
    if not per_column:
        log_density = log_density.sum(axis=1, keepdims=True)
    cumulative = np.cumsum(np.exp(log_density - log_density.max(axis=0)), axis=0)
    # inverse CDF, one uniform per conditional
    picks = (cumulative < rng.random(cumulative.shape[1]) * cumulative[-1]).sum(axis=0)
    drawn = _SHAPE_GRID[np.minimum(picks, _SHAPE_GRID.size - 1)]
    return np.broadcast_to(drawn, factors.shape[1]).copy()


@blas_single_threaded
def run_chain(X, alpha, n_components, theta_prior, phi_prior, n_burn_in, n_kept,
              seed, verbose=0, chain_index=0, sample_shapes=False, start=None):
    """One Gibbs chain from the factors ``start`` ((theta, phi), or None for
    a random start); returns posterior sums over the kept samples (and the
    mean of the prior shapes drawn while kept, ``sample_shapes``)."""
    rng = np.random.default_rng(seed)
    kernel_seed = int(rng.integers(0, 2**63))
    n_rows, n_cols = X.shape
    theta_prior_shape, theta_prior_rate = theta_prior
    phi_prior_shape, phi_prior_rate = phi_prior
    theta_prior_mean = theta_prior_shape / theta_prior_rate
    phi_prior_mean = phi_prior_shape / phi_prior_rate
    shape_sums = np.zeros((2, n_components))
    clean = alpha is None
    mean_count = max(float(X.sum() if clean else np.maximum(X, 0).sum()) / (n_rows * n_cols), 1e-3)
    scale = math.sqrt(mean_count / n_components)
    if start is None:
        theta = scale * rng.gamma(1.0, 1.0, size=(n_rows, n_components))
        phi = scale * rng.gamma(1.0, 1.0, size=(n_components, n_cols))
    else:
        theta = np.maximum(np.array(start[0], dtype=np.float64), _FACTOR_FLOOR)
        phi = np.maximum(np.array(start[1], dtype=np.float64), _FACTOR_FLOOR)
    # the kernels read phi a column at a time: they get phi transposed
    phi_t = np.ascontiguousarray(phi.T)
    if not clean:
        rates = np.empty(X.shape)
    row_totals = np.zeros((n_rows, n_components))
    # one buffer of column totals per thread (integer-valued float sums, exact
    # in any order: the number of buffers does not change the result)
    n_chunks = max(1, min(numba.get_num_threads(), n_rows))
    col_totals_chunks = np.zeros((n_chunks, n_cols, n_components))
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
            loglik = _clean_sweep(X.indptr, X.indices, X.data, theta, phi_t,
                                  kernel_seed, sweep, row_totals, col_totals_chunks)
            loglik -= float(theta.sum(axis=0) @ phi_t.sum(axis=0))
        else:
            np.matmul(theta, phi_t.T, out=rates)
            loglik = _private_sweep(X, theta, phi_t, rates, alpha, kernel_seed, sweep,
                                    row_totals, col_totals_chunks, with_loglik)
        col_totals_t = col_totals_chunks[0] if n_chunks == 1 else col_totals_chunks.sum(axis=0)
        phi_t = rng.gamma(phi_prior_shape + col_totals_t) / (
            phi_prior_rate + theta.sum(axis=0))
        np.maximum(phi_t, _FACTOR_FLOOR, out=phi_t)
        phi = phi_t.T
        theta = rng.gamma(theta_prior_shape + row_totals) / (
            theta_prior_rate + phi_t.sum(axis=0))
        np.maximum(theta, _FACTOR_FLOOR, out=theta)
        if sample_shapes:
            # Hierarchical shapes: under heavy noise a fixed sparse shape pulls
            # the latent counts, and so the total rate, towards zero.
            # One factor shape per component: a pattern most rows share and
            # one few rows use need different sparsity. The components' shape
            # stays shared: drawn per component, sparse text under heavy
            # noise grew near-copies of a component.
            theta_prior_shape = draw_prior_shape(theta, theta_prior_mean, rng,
                                                 per_column=True)
            theta_prior_rate = theta_prior_shape / theta_prior_mean
            phi_prior_shape = draw_prior_shape(phi_t, phi_prior_mean, rng)
            phi_prior_rate = phi_prior_shape / phi_prior_mean
        if sweep + 1 == n_burn_in // 2 and n_components > 1:
            # Halfway through the burn-in: the sweeps rarely pull a pair of
            # coinciding components apart, so one of them starts over where
            # the fit is worst. The kept sweeps are still a Markov chain of
            # the posterior, from a different start.
            phi = np.ascontiguousarray(phi_t.T)
            for kept, gone, cosine in restart_coinciding(X, alpha, theta, phi):
                if verbose:
                    print(f"chain {chain_index}: sweep {sweep + 1}: components {kept} and "
                          f"{gone} coincide (cosine similarity {cosine:.4f}); {gone} "
                          "restarted from the rows the others fit worst")
            phi_t = np.ascontiguousarray(phi.T)
        if sweep >= n_burn_in:
            shape_sums += (theta_prior_shape, phi_prior_shape)
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
    return (theta_sum / n_kept, phi_sum / n_kept, phi_sq_sum / n_kept, loglik_kept,
            shape_sums / n_kept)


@blas_single_threaded
def infer_rows(X, alpha, component_shape, component_rate, theta_prior, theta_start,
               n_burn_in, n_kept, seed):
    """Posterior mean of the factors of the rows ``X`` given the fitted
    components, by Gibbs sampling: the sweeps of the sampler with the rows'
    factors drawn from their conditional and phi drawn in every sweep from
    its fitted posterior (the gamma ``(component_shape, component_rate)``
    matching the mean and variance of the chain's samples), so the rows'
    factors average over the components' uncertainty as the fit's did. The
    mean is Rao-Blackwellized: each kept sweep adds the conditional mean of
    the factors given its sub-counts and phi.

    ``X`` is CSR float64 clean counts (``alpha`` None) or dense noisy
    counts; ``theta_start`` (n_rows, K) the start (CAVI's row inference).
    The rows are taken in blocks, each with its own streams from ``seed``.
    """
    n_rows, n_cols = X.shape
    n_components = component_shape.shape[0]
    theta_prior_shape, theta_prior_rate = theta_prior
    rng = np.random.default_rng(seed)
    block_rows = max(1, _BLOCK_ENTRIES // max(n_cols, 1))
    n_chunks = max(1, min(numba.get_num_threads(), n_rows, block_rows))
    col_totals_chunks = np.zeros((n_chunks, n_cols, n_components))
    component_scale = 1.0 / component_rate
    out = np.empty((n_rows, n_components))
    for first in range(0, n_rows, block_rows):
        rows = slice(first, min(first + block_rows, n_rows))
        kernel_seed = int(rng.integers(0, 2**63))
        theta = np.maximum(np.array(theta_start[rows], dtype=np.float64), _FACTOR_FLOOR)
        row_totals = np.zeros_like(theta)
        theta_sum = np.zeros_like(theta)
        if alpha is None:
            block = X[rows]
        else:
            block = np.ascontiguousarray(X[rows], dtype=np.float64)
            rates = np.empty(block.shape)
        for sweep in range(n_burn_in + n_kept):
            phi = np.maximum(rng.gamma(component_shape, component_scale), _FACTOR_FLOOR)
            phi_t = np.ascontiguousarray(phi.T)
            if alpha is None:
                _clean_sweep(block.indptr, block.indices, block.data, theta, phi_t,
                             kernel_seed, sweep, row_totals, col_totals_chunks)
            else:
                np.matmul(theta, phi, out=rates)
                _private_sweep(block, theta, phi_t, rates, alpha, kernel_seed, sweep,
                               row_totals, col_totals_chunks, False)
            shape = theta_prior_shape + row_totals
            rate = theta_prior_rate + phi.sum(axis=1)
            if sweep >= n_burn_in:
                # Rao-Blackwellized: the conditional mean given the sweep's
                # sub-counts and phi, not the draw; the Monte Carlo noise of
                # the average costs held-out likelihood
                theta_sum += shape / rate
            theta = rng.gamma(shape) / rate
            np.maximum(theta, _FACTOR_FLOOR, out=theta)
        out[rows] = theta_sum / n_kept
    return out


def fit_mcmc_chains(X, alpha, n_components, *, theta_prior, phi_prior, n_burn_in,
                    n_kept, n_chains, n_jobs, rng, verbose=0, sample_shapes=False,
                    start=None):
    """Run ``n_chains`` Gibbs chains (in parallel with joblib), each from the
    factors ``start`` (or a random start when None), and pool them."""
    if alpha is None:
        X = sp.csr_matrix(X)
        X.sum_duplicates()
    seeds = rng.randint(0, 2**31 - 1, size=n_chains)
    outputs = Parallel(n_jobs=n_jobs)(
        delayed(run_chain)(X, alpha, n_components, theta_prior, phi_prior,
                           n_burn_in, n_kept, int(seed), verbose, index, sample_shapes,
                           start=start)
        for index, seed in enumerate(seeds)
    )
    # Each chain labels its components in its own order: put every chain's in
    # the order of the first chain's before pooling them.
    orders = [np.arange(n_components)] + [
        match_components(outputs[0][1], out[1]) for out in outputs[1:]]
    theta_mean = np.mean([out[0][:, order] for out, order in zip(outputs, orders)], axis=0)
    phi_mean = np.mean([out[1][order] for out, order in zip(outputs, orders)], axis=0)
    phi_sq_mean = np.mean([out[2][order] for out, order in zip(outputs, orders)], axis=0)
    loglik_samples = np.array([out[3] for out in outputs])
    theta_shape, phi_shape = np.mean(
        [out[4][:, order] for out, order in zip(outputs, orders)], axis=0)
    if sample_shapes:
        theta_prior = (theta_shape, theta_shape * theta_prior[1] / theta_prior[0])
        phi_prior = (phi_shape, phi_shape * phi_prior[1] / phi_prior[0])
    return {
        "theta_prior": theta_prior,
        "phi_prior": phi_prior,
        "theta_mean": theta_mean,
        "phi_mean": phi_mean,
        "phi_var": phi_sq_mean - phi_mean**2,
        "loglik_samples": loglik_samples,
        "rhat": split_rhat(loglik_samples),
    }
