"""PrivatePoissonMF: recovery, likelihoods, reproducibility and errors."""

import itertools
import math
import pickle
import re
import warnings

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from numba import njit
from scipy import special, stats
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import check_estimator

from skprivfact.datasets import make_poisson_factorization
from skprivfact.mechanisms import two_sided_geometric
from skprivfact.poisson_mf import PrivatePoissonMF, _estimator
from skprivfact.poisson_mf import _cavi as cavi
from skprivfact.poisson_mf._cavi import fit_gamma_prior
from skprivfact.poisson_mf._evaluation import match_components
from skprivfact.poisson_mf._mcmc import (
    _binomial,
    _row_seed,
    _split_over_components,
    _start_row,
    _uniform,
    draw_prior_shape,
    infer_rows,
    restart_coinciding,
    run_chain,
    split_rhat,
)
from skprivfact.poisson_mf._noisy_count import draw_true_count
from skprivfact.poisson_mf._simd import simd_exp, simd_log
from skprivfact.preprocessing import GeometricPrivatizer

EPSILON = 1.0


@pytest.fixture(scope="module")
def synthetic():
    X, X_noisy, theta, phi = make_poisson_factorization(
        200, 150, 5, factor_shape=0.3, epsilon=EPSILON, random_state=0
    )
    return X, X_noisy, theta @ phi


def _mae(model, factors, rates):
    return np.abs(factors @ model.components_ - rates).mean()


def test_private_cavi_beats_naive_and_approaches_clean(synthetic):
    X, X_noisy, rates = synthetic
    private = PrivatePoissonMF(5, epsilon=EPSILON, random_state=0)
    naive = PrivatePoissonMF(5, random_state=0)
    clean = PrivatePoissonMF(5, random_state=0)
    mae_private = _mae(private, private.fit_transform(X_noisy), rates)
    mae_naive = _mae(naive, naive.fit_transform(np.maximum(X_noisy, 0)), rates)
    mae_clean = _mae(clean, clean.fit_transform(X), rates)
    # (the papers' gap at epsilon/N = 1: CAVI 0.40 against naive 0.47)
    assert mae_private < 0.85 * mae_naive
    assert mae_clean < mae_private < 2 * mae_clean


def test_noise_marginal_posterior_moments_match_direct_sums():
    from scipy.special import gammaln

    from skprivfact.poisson_mf._noisy_count import posterior_count_moments

    # small counts, a mode at the kink y = count, and the strided sums of a
    # large mode, against the normalised pmf r^y / y! alpha^|k - y|
    for count, rate, alpha in [(3, 0.5, 0.37), (0, 2.0, 0.5), (-4, 0.3, 0.37),
                               (100, 3.0, 0.0067), (20000, 19000.0, 0.37),
                               (9000, 9000.0, 0.5), (50000, 1.0, 1 - 1e-6)]:
        y = np.arange(int(max(count, rate / alpha) * 2 + 400))
        log_w = y * np.log(rate) - gammaln(y + 1) + np.abs(count - y) * np.log(alpha)
        w = np.exp(log_w - log_w.max())
        w /= w.sum()
        mean = (w * y).sum()
        var = (w * (y - mean) ** 2).sum()
        got_mean, got_var = posterior_count_moments(float(count), rate, alpha)
        assert got_mean == pytest.approx(mean, rel=1e-6, abs=1e-12)
        assert got_var == pytest.approx(var, rel=1e-3, abs=1e-9)


@pytest.mark.parametrize("alpha", [np.exp(-1e-6), 0.37, np.exp(-20.0)])
@pytest.mark.parametrize("kernel", ["serial", "parallel"])
def test_marginal_sweep_matches_the_scalar_posterior_mean_entry_by_entry(alpha, kernel):
    # The sweep sums the positive entries of a row side by side and retires
    # each sum when its tail bound is small; every entry must still get the
    # scalar E[y | y~, rate], whatever mix of counts and rates a row holds:
    # zero, tiny, infinite and NaN rates, rates past the lanes' range (scalar
    # path), counts from -30 to 10**6 (integers, as validated), and sums that
    # outlast the lanes.
    from skprivfact.poisson_mf._cavi import _marginal_entry_update
    from skprivfact.poisson_mf._noisy_count import posterior_count_mean

    rng = np.random.default_rng(0)
    n_rows, n_cols = 40, 300
    counts = rng.choice([-30.0, -1.0, 0.0, 1.0, 2.0, 3.0, 7.0, 40.0, 90.0, 1e6],
                        size=(n_rows, n_cols))
    scale = alpha * np.exp(rng.uniform(np.log(1e-12), np.log(500.0), size=(n_rows, n_cols)))
    rates = np.where(rng.random((n_rows, n_cols)) < 0.05, 0.0, scale).astype(np.float32)
    rates[0, :5] = [0.0, 1e-30, 63.9 * alpha, 64.1 * alpha, 1e6]
    # a broken fit's rates: the sweep does as the scalar function does
    rates[1, :4] = [np.inf, np.inf, np.nan, np.nan]
    counts[1, :4] = [3.0, -1.0, 3.0, -1.0]
    geo = rng.uniform(0.5, 2.0, size=(n_rows, n_cols)).astype(np.float32)
    ratio = rates.copy()
    row_sums = getattr(_marginal_entry_update, kernel)(counts, ratio, geo, alpha)
    expected = np.array([[posterior_count_mean(c, float(r), alpha) for c, r in zip(*row)]
                         for row in zip(counts, rates)])
    np.testing.assert_allclose(row_sums, expected.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(ratio, (expected / geo).astype(np.float32), rtol=1e-6,
                               atol=1e-37)


def test_single_precision_products_give_the_double_precision_fit(synthetic, monkeypatch):
    # The noisy sweep's dense products run in float32; a fit must not move
    # from the all-double one by more than rounding carried through the sweeps.
    X_noisy = synthetic[1]
    kwargs = dict(epsilon=EPSILON, max_iter=60, tol=0, random_state=0)
    single = PrivatePoissonMF(5, **kwargs)
    single_theta = single.fit_transform(X_noisy)
    monkeypatch.setattr(cavi, "PRODUCT_DTYPE", np.float64)
    double = PrivatePoissonMF(5, **kwargs)
    double_theta = double.fit_transform(X_noisy)
    single_rates = single_theta @ single.components_
    double_rates = double_theta @ double.components_
    assert single.n_iter_ == double.n_iter_ == 60
    assert not np.array_equal(single_rates, double_rates)
    relative = np.abs(single_rates - double_rates) / double_rates
    # measured: median 7e-7, mean absolute 1.2e-6 of the mean rate
    assert np.median(relative) < 1e-5
    assert np.abs(single_rates - double_rates).mean() < 1e-5 * double_rates.mean()


def test_private_mcmc_beats_naive(synthetic):
    X, X_noisy, rates = synthetic
    kwargs = dict(solver="mcmc", n_burn_in=150, n_kept_samples=100, random_state=0)
    private = PrivatePoissonMF(5, epsilon=EPSILON, **kwargs)
    naive = PrivatePoissonMF(5, **kwargs)
    mae_private = _mae(private, private.fit_transform(X_noisy), rates)
    mae_naive = _mae(naive, naive.fit_transform(np.maximum(X_noisy, 0)), rates)
    assert mae_private < 0.6 * mae_naive
    assert private.loglik_samples_.shape == (1, 100)
    assert np.all(np.isfinite(private.components_))


def _exact_row_posterior_mean(row, phi, shape, rate, alpha=None, max_count=40):
    """E[theta | row] with phi (K, V) held fixed, by enumerating the true
    counts and their split over the components: given them, theta_k is
    Gamma(shape_k + s_k, rate_k + sum_v phi_kv) (s_k the component's total),
    and a split's weight is theta integrated out, times the noise's
    probability of the row given the true counts (two-sided geometric)."""
    n_components, n_cols = phi.shape
    options = []
    for v in range(n_cols):
        totals = range(max_count + 1) if alpha is not None else [int(row[v])]
        options.append([split for total in totals
                        for split in itertools.product(range(total + 1), repeat=n_components)
                        if sum(split) == total])
    exposure = rate + phi.sum(axis=1)
    log_weights, means = [], []
    for splits in itertools.product(*options):
        counts = np.array(splits).T  # (K, V)
        totals = counts.sum(axis=1)
        log_weight = (special.gammaln(shape + totals) - (shape + totals) * np.log(exposure)).sum()
        log_weight += (counts * np.log(phi) - special.gammaln(counts + 1)).sum()
        if alpha is not None:
            log_weight += (np.abs(row - counts.sum(axis=0)) * math.log(alpha)).sum()
        log_weights.append(log_weight)
        means.append((shape + totals) / exposure)
    weights = np.exp(np.array(log_weights) - max(log_weights))
    return weights @ np.array(means) / weights.sum()


def test_row_sampler_matches_the_exact_posterior_mean_of_a_noisy_row():
    # one component, phi held fixed (a posterior of negligible variance)
    alpha = math.exp(-1.0)
    phi = np.array([[0.5, 1.5, 1.0]])
    row = np.array([3.0, -1.0, 2.0])
    shape, rate = np.array([0.7]), np.array([0.5])
    exact = _exact_row_posterior_mean(row, phi, shape, rate, alpha)[0]
    n_rows = 4000
    rows = np.tile(row, (n_rows, 1))
    sharp = np.full(phi.shape, 1e10)
    draws = infer_rows(rows, alpha, sharp, sharp / phi, (shape, rate),
                       np.ones((n_rows, 1)), n_burn_in=30, n_kept=60, seed=0)[:, 0]
    # each row runs its own chain: the rows' means are independent
    standard_error = draws.std() / math.sqrt(n_rows)
    assert standard_error < 0.01 * exact
    assert abs(draws.mean() - exact) < 4 * standard_error
    # the sampler tells the noise apart: the row read as clean counts
    # (negatives at zero) has a posterior mean far from this one
    as_clean = _exact_row_posterior_mean(np.maximum(row, 0), phi, shape, rate)[0]
    assert abs(as_clean - exact) > 20 * standard_error
    # the same seed gives the same draws
    again = infer_rows(rows, alpha, sharp, sharp / phi, (shape, rate),
                       np.ones((n_rows, 1)), n_burn_in=30, n_kept=60, seed=0)[:, 0]
    np.testing.assert_array_equal(again, draws)


def test_row_sampler_matches_the_exact_posterior_mean_of_a_clean_row():
    # two components, phi held fixed: the split of each count is sampled
    phi = np.array([[1.0, 0.2, 0.1], [0.1, 0.3, 1.2]])
    row = np.array([2.0, 0.0, 3.0])
    shape, rate = np.array([0.5, 0.9]), np.array([0.4, 0.6])
    exact = _exact_row_posterior_mean(row, phi, shape, rate)
    n_rows = 4000
    rows = sp.csr_matrix(np.tile(row, (n_rows, 1)))
    sharp = np.full(phi.shape, 1e10)
    draws = infer_rows(rows, None, sharp, sharp / phi, (shape, rate), np.ones((n_rows, 2)),
                       n_burn_in=30, n_kept=60, seed=1)
    standard_error = draws.std(axis=0) / math.sqrt(n_rows)
    assert np.all(standard_error < 0.02 * exact)
    assert np.all(np.abs(draws.mean(axis=0) - exact) < 4 * standard_error)
    # a sampler that split each count evenly would be caught: the exact
    # means are far from the prior's share of the row
    assert np.all(np.abs(exact - (shape + row.sum() / 2) / (rate + phi.sum(axis=1)))
                  > 20 * standard_error)


def test_sampler_fit_transforms_rows_by_gibbs_sweeps_and_a_cavi_refit_does_not(synthetic):
    _, X_noisy, _ = synthetic
    model = PrivatePoissonMF(5, epsilon=EPSILON, solver="mcmc", n_burn_in=20,
                             n_kept_samples=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X_noisy)
    first = model.transform(X_noisy[:30])
    # fixed streams: the same rows, the same factors
    np.testing.assert_array_equal(model.transform(X_noisy[:30]), first)
    # the sweeps move the rows from CAVI's factors
    cavi_rows = model._infer_rows(model._check_input(X_noisy[:30], reset=False)[0],
                                  fit_scale=True)[0]
    assert np.abs(first - cavi_rows).max() > 1e-3 * cavi_rows.max()
    # refitted by CAVI, transform is CAVI's again: fit_transform agrees with it
    model.set_params(solver="cavi", max_iter=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        factors = model.fit_transform(X_noisy)
    np.testing.assert_allclose(model.transform(X_noisy), factors, rtol=1e-10)


def test_sampler_chains_start_from_a_cavi_fit_of_the_same_counts(synthetic, monkeypatch):
    from skprivfact.poisson_mf import _mcmc

    X, _, _ = synthetic
    starts = []
    run_chain = _mcmc.run_chain

    def recording_run_chain(*args, start=None, **kwargs):
        starts.append(start)
        return run_chain(*args, start=start, **kwargs)

    monkeypatch.setattr(_mcmc, "run_chain", recording_run_chain)
    kwargs = {"solver": "mcmc", "n_burn_in": 0, "n_kept_samples": 1, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_cavi = PrivatePoissonMF(5, n_chains=2, **kwargs).fit(X)
        cavi = PrivatePoissonMF(5, random_state=1).fit(X)
        from_random = PrivatePoissonMF(5, chain_start="random", **kwargs).fit(X)
    assert len(starts) == 3 and starts[2] is None
    # both chains start from the same factors: a CAVI fit's (another seed's
    # CAVI fit finds the same five components on these clean counts)
    np.testing.assert_array_equal(starts[0][1], starts[1][1])
    assert starts[0][0].shape == (X.shape[0], 5)

    def matched_cosines(components):
        unit = components / np.linalg.norm(components, axis=1, keepdims=True)
        reference = cavi.components_ / np.linalg.norm(cavi.components_, axis=1, keepdims=True)
        return np.sum(unit[match_components(reference, components)] * reference, axis=1)

    assert matched_cosines(starts[0][1]).min() > 0.99
    # one sweep from there is close to CAVI's fit; one from a random start is not
    assert matched_cosines(from_cavi.components_).min() > 0.9
    assert matched_cosines(from_random.components_).min() < 0.9


@pytest.mark.parametrize("shape", [0.1, 0.7, 3.0])
def test_drawn_prior_shape_concentrates_on_the_true_shape(shape):
    # 3 columns of 5000 Gamma(shape, shape / mean_k) values, each column its
    # own prior mean: the conditional of the shared shape is narrow around it
    rng = np.random.default_rng(0)
    prior_mean = np.array([0.05, 1.0, 20.0])
    factors = rng.gamma(shape, prior_mean / shape, size=(5000, 3))
    draws = np.array([draw_prior_shape(factors, prior_mean, rng) for _ in range(20)])
    assert draws.shape == (20, 3)
    assert np.all(draws == draws[:, :1])
    assert np.all(np.abs(draws / shape - 1) < 0.1)
    # prior means ten times too large: the factors then look sparser
    assert np.mean([draw_prior_shape(factors, 10 * prior_mean, rng) for _ in range(5)]) < shape


def test_drawn_prior_shapes_per_column_follow_each_columns_shape():
    # columns of 5000 Gamma values with shapes 0.1, 0.7 and 3: per column
    # each draw is near its own column's shape; one shared shape fits none
    rng = np.random.default_rng(0)
    true_shapes = np.array([0.1, 0.7, 3.0])
    prior_mean = np.array([0.05, 1.0, 20.0])
    factors = rng.gamma(true_shapes, prior_mean / true_shapes, size=(5000, 3))
    draws = np.array([draw_prior_shape(factors, prior_mean, rng, per_column=True)
                      for _ in range(20)])
    assert np.all(np.abs(draws / true_shapes - 1) < 0.1)
    shared = draw_prior_shape(factors, prior_mean, rng)
    assert np.all(np.abs(shared / true_shapes - 1) > 0.3)


def test_pooled_chains_keep_each_components_shape_with_its_component(monkeypatch):
    # two chains that found the same components in different orders, each
    # with its own factor shape per component: pooled, every shape stays with
    # its component (chain 1 is relabelled to chain 0's order)
    from skprivfact.poisson_mf import _mcmc

    rng = np.random.default_rng(0)
    phi = rng.gamma(0.3, 1.0, size=(3, 40))
    theta = rng.gamma(1.0, 1.0, size=(10, 3))
    factor_shapes = np.array([0.1, 0.7, 3.0])
    swap = np.array([2, 0, 1])

    def fake_chain(X, alpha, n_components, theta_prior, phi_prior, n_burn_in, n_kept,
                   seed, verbose, index, sample_shapes, start=None):
        order = swap if index == 1 else np.arange(3)
        shapes = np.vstack([factor_shapes[order], np.full(3, 0.5)])
        return theta[:, order], phi[order], phi[order] ** 2, np.zeros(n_kept), shapes

    monkeypatch.setattr(_mcmc, "run_chain", fake_chain)
    result = _mcmc.fit_mcmc_chains(
        np.ones((10, 40)), 0.5, 3, theta_prior=(np.ones(3), np.ones(3)),
        phi_prior=(np.ones(3), np.ones(3)), n_burn_in=1, n_kept=4, n_chains=2,
        n_jobs=1, rng=np.random.RandomState(0), sample_shapes=True)
    np.testing.assert_allclose(result["phi_mean"], phi)
    np.testing.assert_allclose(result["theta_prior"][0], factor_shapes)
    # pooled without relabelling, the shapes would be averaged across components
    assert not np.allclose((factor_shapes + factor_shapes[swap]) / 2, factor_shapes)


@pytest.mark.parametrize("shape, rate", [(0.5, 2.0), (1.0, 3.0)])
def test_sampled_prior_shapes_keep_the_total_under_heavy_noise(shape, rate):
    # Counts drawn with prior shape 0.5 or 1, released at epsilon = 1: with the
    # default starting shape 0.1 held fixed, the sampled true counts, and so
    # the total rate, shrink; drawn, the shapes find the truth and the total
    # stays.
    X, X_noisy, _, _ = make_poisson_factorization(
        400, 200, 4, factor_shape=shape, factor_rate=rate, epsilon=1.0, random_state=0
    )
    # the sampler's shapes start at 0.1 ("auto")
    prior_shape, prior_rate = PrivatePoissonMF(4, epsilon=1.0)._priors(X_noisy, (0.1, 0.1))[0]
    totals = {}
    for sample in (False, True):
        model = PrivatePoissonMF(
            4, epsilon=1.0, solver="mcmc", n_burn_in=200, n_kept_samples=100,
            sample_prior_shapes=sample, random_state=0,
        )
        factors = model.fit_transform(X_noisy)
        # the posterior mean's total (before the scale to the released total)
        posterior_components = model.components_ / model.total_scale_
        totals[sample] = (factors @ posterior_components).mean() / X.mean()
        if sample:
            # the components' shared shape, and the factors' shapes, one per
            # component, each from 400 noisy rows: their median near the
            # truth, none as far off as the 0.1 they start from
            np.testing.assert_allclose(model.component_prior_shape_, shape, rtol=0.15)
            np.testing.assert_allclose(np.median(model.factor_prior_shape_), shape, rtol=0.15)
            assert np.all(np.abs(np.log(model.factor_prior_shape_ / shape)) < np.log(2.5))
            # the rates follow the shapes, the prior means stay
            np.testing.assert_allclose(
                model.factor_prior_shape_ / model.factor_prior_rate_,
                prior_shape / prior_rate,
                rtol=1e-12,
            )
        else:
            np.testing.assert_array_equal(model.factor_prior_shape_, 0.1)
    assert abs(totals[True] - 1) < 0.05
    assert abs(totals[False] - 1) > 2 * abs(totals[True] - 1)


def test_sparse_and_dense_clean_input_agree(synthetic):
    X = synthetic[0]
    dense = PrivatePoissonMF(5, max_iter=20, random_state=0).fit(X)
    sparse = PrivatePoissonMF(5, max_iter=20, random_state=0).fit(sp.csr_matrix(X))
    np.testing.assert_allclose(dense.components_, sparse.components_, rtol=1e-10)
    mcmc = dict(solver="mcmc", n_burn_in=5, n_kept_samples=5, random_state=1)
    dense = PrivatePoissonMF(5, **mcmc).fit(X)
    sparse = PrivatePoissonMF(5, **mcmc).fit(sp.csc_matrix(X))
    np.testing.assert_array_equal(dense.components_, sparse.components_)


def test_score_is_exact_mean_loglik(synthetic):
    X, X_noisy, _ = synthetic
    clean = PrivatePoissonMF(5, max_iter=20, random_state=0).fit(X)
    rows = X[:7]
    mu = clean.transform(rows) @ clean.components_
    expected = stats.poisson.logpmf(rows, mu).mean()
    assert clean.score(rows) == pytest.approx(expected, rel=1e-10)

    private = PrivatePoissonMF(5, epsilon=EPSILON, max_iter=20, random_state=0)
    private.fit(X_noisy)
    rows = X_noisy[:4, :30]
    private_small = clone(private).fit(X_noisy[:, :30])
    mu = private_small.transform(rows) @ private_small.components_
    alpha = math.exp(-EPSILON)
    y = np.arange(0, 200)
    expected = np.mean([
        np.log(np.sum(stats.poisson.pmf(y, m) * (1 - alpha) / (1 + alpha)
                      * alpha ** np.abs(k - y)))
        for k, m in zip(rows.ravel(), mu.ravel())
    ])
    assert private_small.score(rows) == pytest.approx(expected, rel=1e-9)


def test_transform_deterministic_and_consistent(synthetic):
    X, X_noisy, rates = synthetic
    model = PrivatePoissonMF(5, epsilon=EPSILON, random_state=0)
    train_factors = model.fit_transform(X_noisy)
    again = model.transform(X_noisy)
    np.testing.assert_array_equal(again, model.transform(X_noisy))
    # held-fixed components: re-inferred rows fit the rates about as well
    assert _mae(model, again, rates) < 1.3 * _mae(model, train_factors, rates)
    assert model.get_feature_names_out().tolist() == [
        f"privatepoissonmf{i}" for i in range(5)
    ]


def test_fitted_attributes_hold_no_training_rows(synthetic):
    X_noisy = synthetic[1]
    model = PrivatePoissonMF(5, epsilon=EPSILON, max_iter=10, random_state=0).fit(X_noisy)
    for name, value in vars(model).items():
        if name.endswith("_") and isinstance(value, np.ndarray):
            assert X_noisy.shape[0] not in value.shape, name


@pytest.mark.parametrize("solver", ["cavi", "mcmc"])
def test_same_result_for_one_and_two_threads(synthetic, solver, monkeypatch):
    X, X_noisy, _ = synthetic
    # the parallel kernels, not their serial twins that small calls take
    monkeypatch.setattr("skprivfact.poisson_mf._parallel.MIN_PARALLEL_WORK", 0)
    kwargs = dict(solver=solver, max_iter=15, n_burn_in=10, n_kept_samples=5,
                  random_state=3)
    results = []
    previous = numba.get_num_threads()
    try:
        for n_threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(n_threads)
            results.append((
                PrivatePoissonMF(5, epsilon=EPSILON, **kwargs).fit(X_noisy).components_,
                PrivatePoissonMF(5, **kwargs).fit(X).components_,
            ))
    finally:
        numba.set_num_threads(previous)
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_chains_in_parallel_and_rhat(synthetic):
    X_noisy = synthetic[1]
    kwargs = dict(epsilon=EPSILON, solver="mcmc", n_burn_in=20, n_kept_samples=20,
                  n_chains=2, random_state=0)
    serial = PrivatePoissonMF(5, n_jobs=1, **kwargs).fit(X_noisy)
    parallel = PrivatePoissonMF(5, n_jobs=2, **kwargs).fit(X_noisy)
    np.testing.assert_array_equal(serial.components_, parallel.components_)
    assert serial.loglik_samples_.shape == (2, 20)
    assert np.isfinite(serial.rhat_) and serial.rhat_ > 0.9


def _three_blocks(seed=0):
    """Counts of three components, each on its own 20 of 60 columns, and the
    sampler's state with the third missing and the second doubled."""
    rng = np.random.default_rng(seed)
    phi = rng.gamma(1.0, 0.02, size=(3, 60))
    for k in range(3):
        phi[k, 20 * k:20 * k + 20] = rng.gamma(2.0, 0.5, size=20)
    theta = rng.gamma(0.5, 2.0, size=(300, 3))
    X = rng.poisson(theta @ phi)
    doubled_theta = np.column_stack([theta[:, 0], theta[:, 1] / 2, theta[:, 1] / 2])
    doubled_phi = phi[[0, 1, 1]] * rng.uniform(0.95, 1.05, size=(3, 60))
    return X, theta, phi, doubled_theta, doubled_phi


def _unit(rows):
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


@pytest.mark.parametrize("epsilon", [None, 2.0])
def test_restart_coinciding_moves_a_copy_to_the_rows_fitted_worst(epsilon):
    # The second component doubled, the third missing: the copy is merged
    # back and restarted from the rows that use the missing one, whose
    # profile it takes; the pair's rates stay.
    X, theta, phi, state_theta, state_phi = _three_blocks()
    if epsilon is None:
        counts, alpha = sp.csr_matrix(X.astype(np.float64)), None
    else:
        counts = (X + two_sided_geometric(epsilon, 1, X.shape, random_state=1)).astype(float)
        alpha = math.exp(-epsilon)
    restarted = restart_coinciding(counts, alpha, state_theta, state_phi)
    assert len(restarted) == 1
    kept, gone, cosine = restarted[0]
    assert {kept, gone} == {1, 2} and cosine > 0.99
    assert _unit(state_phi[gone]) @ _unit(phi[2]) > 0.98
    assert _unit(state_phi[kept]) @ _unit(phi[1]) > 0.99
    kept_rates = np.outer(state_theta[:, kept], state_phi[kept])
    true_rates = np.outer(theta[:, 1], phi[1])
    assert np.abs(kept_rates - true_rates).max() < 0.05 * true_rates.max()
    # it starts on 300 // (2 * 3) rows, those using the missing component most
    seed_rows = state_theta[:, gone] > 10 * state_theta[:, gone].min()
    assert seed_rows.sum() == 50
    assert theta[seed_rows, 2].mean() > 2.5 * theta[:, 2].mean()


def test_restart_coinciding_leaves_distinct_components_and_restarts_shared_top_columns():
    X, theta, phi, _, _ = _three_blocks()
    counts = sp.csr_matrix(X.astype(np.float64))
    state_theta, state_phi = theta.copy(), phi.copy()
    assert restart_coinciding(counts, None, state_theta, state_phi) == []
    np.testing.assert_array_equal(state_theta, theta)
    np.testing.assert_array_equal(state_phi, phi)
    # two profiles with the same 8 largest columns coincide whatever their cosine
    state_phi[2, :8] = state_phi[1, :8] = 1.2 * state_phi.max()
    assert _unit(state_phi[1]) @ _unit(state_phi[2]) < 0.95
    assert [pair[:2] for pair in restart_coinciding(counts, None, state_theta, state_phi)] in (
        [(1, 2)], [(2, 1)])


def test_sampler_restarts_coinciding_components_halfway_through_the_burn_in(capsys,
                                                                             monkeypatch):
    from skprivfact.poisson_mf import _mcmc

    X, theta, phi, state_theta, state_phi = _three_blocks()
    counts = sp.csr_matrix(X.astype(np.float64))
    prior = (np.full(3, 0.3), np.full(3, 0.3))
    calls = []

    def recording_restart(X, alpha, theta, phi):
        restarted = restart_coinciding(X, alpha, theta, phi)
        calls.append(restarted)
        return restarted

    monkeypatch.setattr(_mcmc, "restart_coinciding", recording_restart)
    # two burn-in sweeps: the restart comes after the first
    result = run_chain(counts, None, 3, prior, prior, 2, 60, 0, verbose=1,
                       start=(state_theta, state_phi))
    assert len(calls) == 1 and len(calls[0]) == 1
    kept, gone, cosine = calls[0][0]
    assert (f"chain 0: sweep 1: components {kept} and {gone} coincide (cosine "
            f"similarity {cosine:.4f}); {gone} restarted") in capsys.readouterr().out
    assert np.all((_unit(result[1]) @ _unit(phi).T).max(axis=0) > 0.99)
    # without burn-in the kept sweeps are the chain's from its start: no restart
    run_chain(counts, None, 3, prior, prior, 0, 5, 0, start=(state_theta, state_phi))
    assert len(calls) == 1
    # where nothing coincides the restart draws nothing: the chain is the one
    # it would be without the step
    with_step = run_chain(counts, None, 3, prior, prior, 10, 5, 0, start=(theta, phi))
    assert calls[1:] == [[]]
    monkeypatch.setattr(_mcmc, "restart_coinciding", lambda *args: [])
    without_step = run_chain(counts, None, 3, prior, prior, 10, 5, 0, start=(theta, phi))
    for first, second in zip(with_step, without_step):
        np.testing.assert_array_equal(first, second)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_chains_are_pooled_component_by_component():
    # every chain orders its components its own way: pooled in the first
    # chain's order, two or four chains recover the components as one does
    # (averaged in whatever order the chains left them, they were blends:
    # cosines to the truth 0.72-0.91 and two of them alike at 0.99)
    _, X_noisy, _, phi = make_poisson_factorization(
        300, 80, 4, factor_shape=0.3, factor_rate=0.3, epsilon=2.0, random_state=0
    )
    unit_truth = phi / np.linalg.norm(phi, axis=1, keepdims=True)
    for n_chains in (1, 2, 4):
        model = PrivatePoissonMF(
            4, epsilon=2.0, solver="mcmc", n_burn_in=200, n_kept_samples=100,
            n_chains=n_chains, random_state=0,
        ).fit(X_noisy)
        unit = model.components_ / np.linalg.norm(model.components_, axis=1, keepdims=True)
        assert np.all((unit @ unit_truth.T).max(axis=1) > 0.99)
        assert model.max_component_similarity_ < 0.5


def test_match_components_finds_the_permutation():
    rng = np.random.default_rng(0)
    reference = rng.gamma(0.3, size=(6, 40))
    order = rng.permutation(6)
    noisy_copy = reference[order] * rng.uniform(0.8, 1.2, size=(6, 40))
    np.testing.assert_array_equal(order[match_components(reference, noisy_copy)], np.arange(6))


@njit
def _binomial_draws(n, p, n_draws, seed):
    numba_seed = np.empty(2, dtype=np.uint64)
    state = _row_seed(seed, 0, 0)
    _start_row(numba_seed, state)
    draws = np.empty(n_draws, dtype=np.int64)
    for i in range(n_draws):
        draws[i], state = _binomial(n, p, state, numba_seed)
    return draws


@njit
def _true_count_draws(count, rate, alpha, n_draws, seed):
    state = _row_seed(seed, 0, 0)
    draws = np.empty(n_draws, dtype=np.int64)
    for i in range(n_draws):
        uniform, state = _uniform(state)
        second, state = _uniform(state)
        draws[i] = int(draw_true_count(count, rate, alpha, uniform, second))
    return draws


@njit
def _split_totals(count, theta_row, phi_column, n_repeats, seed):
    numba_seed = np.empty(2, dtype=np.uint64)
    state = _row_seed(seed, 0, 0)
    _start_row(numba_seed, state)
    row_totals = np.zeros(theta_row.shape[0])
    col_totals = np.zeros(theta_row.shape[0])
    cumulative = np.empty(theta_row.shape[0])
    for _ in range(n_repeats):
        state = _split_over_components(count, theta_row, phi_column, row_totals,
                                       col_totals, cumulative, state, numba_seed)
    return row_totals, col_totals


def _chisquare_pvalue(observed, expected):
    keep = expected > 0
    assert observed[~keep].sum() == 0
    return stats.chisquare(observed[keep], expected[keep] * observed.sum() / expected[keep].sum()).pvalue


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 9, 16, 17, 200])
def test_gibbs_binomial_draws_are_exact(n):
    p, n_draws = 0.37, 50_000
    draws = _binomial_draws(n, p, n_draws, 11 + n)
    assert draws.min() >= 0 and draws.max() <= n
    observed = np.bincount(draws, minlength=n + 1).astype(float)
    expected = stats.binom.pmf(np.arange(n + 1), n, p)
    # pool the tails where the expected counts are small
    lo, hi = stats.binom.ppf([1e-4, 1 - 1e-4], n, p).astype(int)
    observed = np.concatenate([[observed[:lo + 1].sum()], observed[lo + 1:hi], [observed[hi:].sum()]])
    expected = np.concatenate([[expected[:lo + 1].sum()], expected[lo + 1:hi], [expected[hi:].sum()]])
    if n == 0:
        assert np.all(draws == 0)
    else:
        assert _chisquare_pvalue(observed, expected) > 1e-3


@pytest.mark.parametrize("count, rate", [(0.0, 0.3), (-3.0, 4.0), (1.0, 0.01),
                                         (3.0, 0.5), (5.0, 20.0), (40.0, 2.0)])
def test_gibbs_true_count_draws_are_exact(count, rate):
    # the law of y given y~ = y + 2Geo(alpha) noise and y ~ Poisson(rate)
    alpha, n_draws = 0.37, 50_000
    draws = _true_count_draws(count, rate, alpha, n_draws, 7)
    support = np.arange(draws.max() + 50)
    log_w = (support * np.log(rate) - special.gammaln(support + 1)
             + np.abs(count - support) * np.log(alpha))
    expected = np.exp(log_w - log_w.max())
    expected /= expected.sum()
    observed = np.bincount(draws, minlength=support.size).astype(float)
    keep = expected * n_draws >= 5
    observed = np.append(observed[keep], observed[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    assert _chisquare_pvalue(observed, expected) > 1e-3


def test_simd_log_and_exp_match_numpy():
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.random(10_000), rng.random(1_000) * 1e6,
        [1.0, 0.5, 2.0**-848, 1e-300, math.sqrt(2.0), 0.7071067811865476, 1e300],
    ])
    logs = np.array([simd_log(x) for x in values])
    np.testing.assert_allclose(logs, np.log(values), rtol=5e-16, atol=0)
    exponents = np.concatenate([rng.uniform(-700, 700, 10_000), [-1e-300, 0.0, 1e-300]])
    np.testing.assert_allclose([simd_exp(x) for x in exponents], np.exp(exponents),
                               rtol=5e-16, atol=0)
    assert simd_exp(-800.0) == 0.0 and simd_exp(800.0) == math.inf
    assert math.isnan(simd_exp(math.nan))


@pytest.mark.parametrize("count", [1, 3, 16, 40])
def test_multinomial_split_is_exact(count):
    rng = np.random.default_rng(count)
    theta_row = rng.gamma(0.3, size=13)
    phi_column = rng.gamma(0.3, size=13)
    theta_row[4] = 0.0
    n_repeats = 40_000 // count
    row_totals, col_totals = _split_totals(count, theta_row, phi_column, n_repeats, 5)
    np.testing.assert_array_equal(row_totals, col_totals)
    assert row_totals.sum() == count * n_repeats and row_totals[4] == 0
    # sums of independent multinomials: a multinomial of all the units
    assert _chisquare_pvalue(row_totals, theta_row * phi_column) > 1e-3


def test_split_rhat():
    rng = np.random.default_rng(0)
    assert split_rhat(rng.normal(size=(4, 1000))) == pytest.approx(1.0, abs=0.01)
    shifted = rng.normal(size=(2, 1000)) + np.array([[0.0], [3.0]])
    assert split_rhat(shifted) > 1.5
    trending = np.tile(np.linspace(0, 10, 1000), (2, 1)) + rng.normal(size=(2, 1000))
    assert split_rhat(trending) > 1.5


def test_fit_gamma_prior_recovers_known_prior():
    rng = np.random.default_rng(0)
    shape, rate = np.array([0.3, 1.0, 4.0]), np.array([2.0, 1.0, 0.5])
    exposure = np.array([5.0, 20.0, 2.0])
    latent = rng.gamma(shape, 1 / rate, size=(20000, 3))
    counts = rng.poisson(latent * exposure).astype(float)
    fitted_shape, fitted_rate = fit_gamma_prior(counts, exposure)
    np.testing.assert_allclose(fitted_shape, shape, rtol=0.06)
    np.testing.assert_allclose(fitted_rate, rate, rtol=0.08)
    # a component with no counts carries no information
    nan_shape, _ = fit_gamma_prior(np.zeros((10, 1)), np.ones(1))
    assert np.isnan(nan_shape[0])


def test_empirical_bayes_fits_priors(synthetic):
    X, X_noisy, rates = synthetic
    for data, epsilon in [(X, None), (X_noisy, EPSILON)]:
        model = PrivatePoissonMF(5, epsilon=epsilon, empirical_bayes=True,
                                 random_state=0)
        factors = model.fit_transform(data)
        assert model.factor_prior_shape_.shape == (5,)
        assert not np.allclose(model.factor_prior_shape_, 0.1)
        assert np.all(model.factor_prior_rate_ > 0)
        assert np.all(np.isfinite(model.components_))
        fixed = PrivatePoissonMF(5, epsilon=epsilon, random_state=0)
        assert _mae(model, factors, rates) < 1.5 * _mae(fixed, fixed.fit_transform(data), rates)


def test_grid_search_over_epsilon_traces_privacy_utility(synthetic):
    X = synthetic[0]
    search = GridSearchCV(
        PrivatePoissonMF(5, privatize=True, epsilon=1.0, max_iter=30, random_state=0),
        {"epsilon": [0.5, 4.0]}, cv=2,
    )
    search.fit(X)
    scores = search.cv_results_["mean_test_score"]
    assert scores[1] > scores[0]
    assert search.best_params_ == {"epsilon": 4.0}


def test_privatize_without_a_seed_draws_noise_numpy_global_seed_cannot_replay(
        monkeypatch):
    X = np.random.default_rng(0).poisson(2.0, size=(30, 8))
    noise = []

    def recording(*args, **kwargs):
        noise.append(two_sided_geometric(*args, **kwargs))
        return noise[-1]

    monkeypatch.setattr(_estimator, "two_sided_geometric", recording)
    for _ in range(2):
        np.random.seed(0)
        model = PrivatePoissonMF(2, epsilon=1.0, privatize=True, max_iter=5,
                                 factor_prior_shape=0.3, component_prior_shape=0.3)
        model.fit(X).transform(X)
    # the fits' releases differ, and so do the transforms'
    assert len(noise) == 4
    assert not np.array_equal(noise[0], noise[2])
    assert not np.array_equal(noise[1], noise[3])


def test_pipeline_with_privatizer(synthetic):
    X = synthetic[0]
    pipe = make_pipeline(
        GeometricPrivatizer(epsilon=2.0, random_state=0),
        PrivatePoissonMF(5, epsilon=2.0, max_iter=20, random_state=0),
    )
    factors = pipe.fit_transform(X)
    assert factors.shape == (X.shape[0], 5) and np.all(factors >= 0)
    assert np.isfinite(pipe.score(X))


def test_pickle_and_clone(synthetic):
    X_noisy = synthetic[1]
    model = PrivatePoissonMF(5, epsilon=EPSILON, max_iter=10, random_state=0).fit(X_noisy)
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.transform(X_noisy[:5]), model.transform(X_noisy[:5]))
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert not hasattr(copy, "components_")


def test_verbose_output(synthetic, capsys):
    X_noisy = synthetic[1]
    PrivatePoissonMF(5, epsilon=EPSILON, max_iter=10, verbose=1, random_state=0).fit(X_noisy)
    out = capsys.readouterr().out
    # The shared progress format (tests/test_conventions.py), then the
    # components' diagnostic.
    assert "private CAVI: iteration 10 of 10, objective" in out
    assert "largest cosine similarity between two components: " in out
    PrivatePoissonMF(5, epsilon=EPSILON, solver="mcmc", n_burn_in=5, n_kept_samples=5,
                     verbose=1, random_state=0).fit(X_noisy)
    out = capsys.readouterr().out
    assert "MCMC chain 0: iteration 10 of 10, objective" in out


def test_bad_input_errors(synthetic):
    X, X_noisy, _ = synthetic
    with pytest.raises(ValueError, match="integer counts"):
        PrivatePoissonMF(2).fit(X + 0.5)
    with pytest.raises(ValueError, match="NaN"):
        PrivatePoissonMF(2).fit(np.array([[1.0, np.nan], [0.0, 2.0]]))
    with pytest.raises(ValueError, match="infinity|inf"):
        PrivatePoissonMF(2, epsilon=1.0).fit(np.array([[1.0, np.inf], [0.0, 2.0]]))
    with pytest.raises(ValueError, match="Negative values"):
        PrivatePoissonMF(2).fit(X_noisy)
    with pytest.raises(ValueError, match="Negative values"):
        PrivatePoissonMF(2, epsilon=1.0, privatize=True).fit(X_noisy)
    with pytest.raises(ValueError, match="0 sample"):
        PrivatePoissonMF(2).fit(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="epsilon"):
        PrivatePoissonMF(2, epsilon=0.0).fit(X)
    with pytest.raises(ValueError, match="epsilon"):
        PrivatePoissonMF(2, epsilon=-1.0).fit(X)
    with pytest.raises(ValueError, match="sensitivity"):
        PrivatePoissonMF(2, epsilon=1.0, sensitivity=0).fit(X)
    with pytest.raises(ValueError, match="privatize=True"):
        PrivatePoissonMF(2, privatize=True).fit(X)
    with pytest.raises(ValueError, match="empirical_bayes=True needs solver='cavi'"):
        PrivatePoissonMF(2, solver="mcmc", empirical_bayes=True).fit(X)
    model = PrivatePoissonMF(2, epsilon=1.0, max_iter=5, random_state=0).fit(X_noisy)
    with pytest.raises(ValueError, match="features"):
        model.transform(X_noisy[:, :-1])
    with pytest.raises(ValueError, match="integer"):
        model.score(X_noisy[:3] + 0.25)
    with pytest.warns(UserWarning, match="n_components=5 is larger"):
        PrivatePoissonMF(5, max_iter=5, random_state=0).fit(X[:3])


@pytest.mark.parametrize("solver", ["cavi", "mcmc"])
def test_degenerate_inputs_do_not_crash(solver):
    kwargs = dict(solver=solver, max_iter=5, n_burn_in=3, n_kept_samples=3, random_state=0)
    zeros = np.zeros((4, 3), dtype=np.int64)
    for model, data in [
        (PrivatePoissonMF(2, **kwargs), zeros),
        (PrivatePoissonMF(2, epsilon=1.0, **kwargs), zeros),
        (PrivatePoissonMF(2, epsilon=0.01, **kwargs), zeros - 50),
        (PrivatePoissonMF(2, epsilon=50.0, **kwargs), np.full((4, 3), 10**6)),
        (PrivatePoissonMF(2, **kwargs), np.full((1, 1), 7)),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            factors = model.fit_transform(data)
        assert np.all(np.isfinite(factors)) and np.all(factors >= 0)
        assert np.all(np.isfinite(model.components_))
        assert np.isfinite(model.score(data))


# The common checks fit on random floats; integer counts are required by
# design, so each check below stops at "X must hold integer counts" (the
# behaviour they test is covered on integer data by the tests above).
_FRACTIONAL = "fractional input is rejected by design (integer counts only)"
EXPECTED_FAILED_CHECKS = {
    name: _FRACTIONAL
    for name in [
        "check_dont_overwrite_parameters", "check_estimators_fit_returns_self",
        "check_readonly_memmap_input", "check_n_features_in_after_fitting",
        "check_estimators_dtypes", "check_dtype_object", "check_pipeline_consistency",
        "check_estimators_nan_inf", "check_estimator_sparse_tag",
        "check_estimator_sparse_array", "check_estimator_sparse_matrix",
        "check_estimators_pickle", "check_f_contiguous_array_estimator",
        "check_transformer_data_not_an_array", "check_transformer_general",
        "check_transformer_preserve_dtypes", "check_transformer_n_iter",
        "check_methods_sample_order_invariance", "check_methods_subset_invariance",
        "check_fit2d_1sample", "check_fit2d_1feature", "check_dict_unchanged",
        "check_fit_idempotent", "check_fit_check_is_fitted", "check_n_features_in",
        "check_fit2d_predict1d", "check_fit_score_takes_y",
        "check_estimators_overwrite_params",
    ]
}
# With epsilon set the input may be negative (positive_only=False), and the
# check that negative input is accepted also feeds fractional values.
EXPECTED_FAILED_CHECKS_PRIVATE = {
    **EXPECTED_FAILED_CHECKS,
    "check_positive_only_tag_during_fit": _FRACTIONAL,
}


def test_sklearn_estimator_checks_with_epsilon():
    # The default (non-private) configuration is checked in tests/test_common.py.
    check_estimator(
        PrivatePoissonMF(n_components=2, max_iter=10, random_state=0, epsilon=1.0),
        expected_failed_checks=EXPECTED_FAILED_CHECKS_PRIVATE,
    )


def test_demo_on_an_input_file(tmp_path):
    import io

    from skprivfact.__main__ import main

    X, _, _, _ = make_poisson_factorization(80, 30, 2, factor_shape=1.0, random_state=0)
    path = tmp_path / "counts.npz"
    sp.save_npz(path, sp.csr_matrix(X))
    figure = tmp_path / "factors.png"
    out = io.StringIO()
    assert main(["--input", str(path), "--rank", "2", "--figure", str(figure)], out=out) == 0
    text = out.getvalue()
    assert "Local privacy" in text and "Central privacy" in text
    for model in ("private", "naive", "non-private"):
        line = next(row for row in text.splitlines() if row.strip().startswith(model + " "))
        assert "n/a" in line  # no true rates for a file
        assert np.isfinite(float(line.split()[3]))  # held-out log-likelihood
    pytest.importorskip("matplotlib")
    assert figure.exists()
    with pytest.raises(SystemExit):
        main(["--input", str(path), "--epsilon", "0"], out=io.StringIO())


def test_coinciding_components_are_reported(synthetic):
    X, X_noisy, _ = synthetic
    # rank-1 counts: three components can only repeat one pattern
    rank_one = np.outer(np.arange(1, 31), np.arange(1, 11))
    with pytest.warns(UserWarning, match=r"Components [0-2] and [0-2] have cosine "
                      r"similarity 0\.9\d{3} > 0\.95 and share 8 of their 8 largest"):
        model = PrivatePoissonMF(3, random_state=0).fit(rank_one)
    assert model.max_component_similarity_ > 0.95
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        private = PrivatePoissonMF(5, epsilon=EPSILON, random_state=0).fit(X_noisy)
    unit = private.components_ / np.linalg.norm(private.components_, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, 0.0)
    assert private.max_component_similarity_ == pytest.approx(similarity.max())
    assert private.max_component_similarity_ < 0.95


def test_fitted_total_far_from_the_released_total_is_reported(capsys, monkeypatch):
    # the noise in a total of n entries: the formula the warning uses
    alpha = math.exp(-2.0)
    simulated = two_sided_geometric(2.0, size=(4000, 200), random_state=0).sum(axis=1)
    assert simulated.std() == pytest.approx(math.sqrt(2 * alpha * 200) / (1 - alpha),
                                            rel=0.05)
    # rank-1 counts, and the same with sparse spikes one component cannot
    # carry: CAVI with a Bessel noise update takes the spikes for noise, so
    # its total falls short of the release; the marginal update and the
    # sampler end at the release
    rng = np.random.default_rng(0)
    rates = rng.gamma(1.0, 1.0, size=(300, 1)) @ (3.0 * rng.dirichlet(np.ones(60), size=1))
    rank_one = rng.poisson(rates).astype(np.float64)
    spikes = (rng.random(rank_one.shape) < 0.02) * rng.poisson(4.0, size=rank_one.shape)
    noise = two_sided_geometric(2.0, size=rank_one.shape, random_state=1)
    noisy_rank_one, noisy_spiky = rank_one + noise, rank_one + spikes + noise
    noise_std = math.sqrt(2 * alpha * rank_one.size) / (1 - alpha)
    sampler = {"solver": "mcmc", "random_state": 0}
    pattern = (r"The fitted total rate (\S+) is (\S+) below the released total (\S+), "
               r"(\S+) times the standard deviation of the noise in that total "
               r"\((\S+)\): the components miss part of the signal\. "
               r"noise_update='marginal' \(and the sampler\) scales the fit")
    model = PrivatePoissonMF(1, epsilon=2.0, verbose=1, noise_update="bessel-mean",
                             random_state=0)
    with pytest.warns(UserWarning, match=pattern) as record:
        factors = model.fit_transform(noisy_spiky)
    message = next(str(w.message) for w in record if "fitted total" in str(w.message))
    fitted, gap, released, ratio, std = map(float, re.match(pattern, message).groups())
    # (fit_transform gives the rows' factors as transform infers them)
    assert fitted == pytest.approx((factors @ model.components_).sum(), rel=1e-3)
    assert released == pytest.approx(noisy_spiky.sum(), rel=1e-5)
    assert std == pytest.approx(noise_std, rel=1e-2)
    assert gap == pytest.approx(released - fitted, rel=1e-4)
    assert ratio == pytest.approx(gap / noise_std, abs=0.06) and ratio > 3.0
    assert (f"fitted total rate {fitted:.6g}, released total {released:.6g} "
            f"(noise standard deviation {std:.3g})") in capsys.readouterr().out
    for solver_params, counts in [({}, noisy_spiky), (sampler, noisy_rank_one),
                                  (sampler, noisy_spiky)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = PrivatePoissonMF(1, epsilon=2.0, **solver_params)
            factors = model.fit_transform(counts)
        assert not [w for w in caught if "fitted total" in str(w.message)]
        assert abs((factors @ model.components_).sum() - counts.sum()) < 3 * noise_std
    # privatize=True: the totals are those of the estimator's own release,
    # here a spy's noise of +1 on every count, never of the raw counts
    monkeypatch.setattr(_estimator, "two_sided_geometric",
                        lambda epsilon, sensitivity, size, random_state: np.ones(size))
    PrivatePoissonMF(1, epsilon=2.0, privatize=True, verbose=1,
                     random_state=0).fit(rank_one)
    assert (f"released total {rank_one.sum() + rank_one.size:.6g} "
            f"(noise standard deviation {noise_std:.3g})") in capsys.readouterr().out
    # a total far below 0 is no release of counts at this epsilon
    shifted = noisy_rank_one - 1.0
    with pytest.warns(UserWarning, match=r"The released total -\d+ is (\S+) standard "
                      r"deviations of its noise \((\S+)\) below 0.*were the counts "
                      r"privatized with this epsilon and sensitivity\?") as record:
        PrivatePoissonMF(1, epsilon=2.0, random_state=0).fit(shifted)
    assert not [w for w in record if "fitted total" in str(w.message)]


def test_sampler_components_are_scaled_to_the_released_total(capsys, monkeypatch):
    # Rank-1 counts with sparse spikes one component cannot carry: the
    # sampler's posterior mean misses the spikes' mass, which the release
    # holds; its components are scaled so that the training rates' total is
    # the released total, and its transform and posterior follow.
    rng = np.random.default_rng(0)
    rates = rng.gamma(1.0, 1.0, size=(300, 1)) @ (3.0 * rng.dirichlet(np.ones(60), size=1))
    counts = rng.poisson(rates) + ((rng.random(rates.shape) < 0.02)
                                   * rng.poisson(4.0, size=rates.shape))
    noisy = counts + two_sided_geometric(2.0, size=counts.shape, random_state=1)
    params = {"solver": "mcmc", "n_burn_in": 100, "n_kept_samples": 50, "random_state": 0}
    model = PrivatePoissonMF(1, epsilon=2.0, verbose=1, **params)
    factors = model.fit_transform(noisy)
    assert (factors @ model.components_).sum() == pytest.approx(noisy.sum(), rel=1e-6)
    assert model.total_scale_ > 1.05  # the posterior mean's total was short
    assert f"components scaled by {model.total_scale_:.4g}" in capsys.readouterr().out
    np.testing.assert_allclose(model.component_shape_ / model.component_rate_,
                               model.components_, rtol=1e-6)
    # the same chain without the scale: the posterior mean, total_scale_ below
    with monkeypatch.context() as patch:
        patch.setattr(PrivatePoissonMF, "_scale_sampler_to_release",
                      lambda self, X, row_factors, released: None)
        unscaled = PrivatePoissonMF(1, epsilon=2.0, **params).fit(noisy)
    np.testing.assert_allclose(model.components_ / model.total_scale_,
                               unscaled.components_, rtol=1e-6)
    # CAVI, and the sampler without noise, keep their fits
    assert PrivatePoissonMF(1, epsilon=2.0, random_state=0).fit(noisy).total_scale_ == 1.0
    clean = PrivatePoissonMF(1, **params).fit(counts)
    assert clean.total_scale_ == 1.0


def test_most_similar_components_names_the_pair_and_their_shared_top_columns():
    from skprivfact.poisson_mf._estimator import (
        max_cosine_similarity,
        most_similar_components,
    )

    decreasing = np.arange(12.0, 0.0, -1.0)  # top 8: columns 0-7
    swapped = decreasing[[0, 1, 2, 3, 4, 5, 10, 11, 8, 9, 6, 7]]  # top 8: 0-5, 10, 11
    components = np.array([decreasing[::-1], swapped, decreasing])
    similarity, first, second, shared = most_similar_components(components)
    # rows 1 and 2 are the closest pair, reported in increasing order
    expected = swapped @ decreasing / (np.linalg.norm(swapped) * np.linalg.norm(decreasing))
    assert (first, second, shared) == (1, 2, 6)
    assert similarity == pytest.approx(expected)
    assert max_cosine_similarity(components) == pytest.approx(expected)
    assert max_cosine_similarity(components[:1]) == 0.0
    # fewer columns than the top count: every column is shared
    assert most_similar_components(components[:, :3], n_top=8)[3] == 3
    assert most_similar_components(components, n_top=2)[3] == 2
    assert most_similar_components(components[[0, 1]], n_top=2)[1:] == (0, 1, 0)


@pytest.mark.parametrize("epsilon", [None, EPSILON])
def test_transform_of_training_rows_matches_fit_transform(synthetic, epsilon):
    X, X_noisy, _ = synthetic
    data = X if epsilon is None else X_noisy
    model = PrivatePoissonMF(5, epsilon=epsilon, random_state=0)
    factors = model.fit_transform(data)
    assert_allclose = np.testing.assert_allclose
    assert_allclose(model.transform(data), factors, rtol=1e-10, atol=1e-12)
    assert_allclose(model.inverse_transform(factors), factors @ model.components_)
    with pytest.raises(ValueError, match="row factors"):
        model.inverse_transform(factors[:, :2])


def test_privatize_draws_the_noise_at_the_estimators_epsilon_and_sensitivity(monkeypatch):
    calls = []
    original = _estimator.two_sided_geometric

    def recording(*args, **kwargs):
        calls.append(dict(zip(["epsilon", "sensitivity"], args)) | kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(_estimator, "two_sided_geometric", recording)
    X = np.random.default_rng(0).poisson(2.0, size=(20, 6))
    PrivatePoissonMF(2, epsilon=0.7, sensitivity=3, privatize=True, max_iter=3,
                     random_state=0).fit(X)
    assert len(calls) == 1
    assert calls[0]["epsilon"] == 0.7 and calls[0]["sensitivity"] == 3


def test_privatize_reads_the_counts_through_their_release_only(monkeypatch):
    # Two inputs whose noise is forced to give the same release must give the
    # same fitted attributes: anything else was read from the clean counts.
    rng = np.random.default_rng(0)
    release = rng.poisson(3.0, size=(20, 6)).astype(float)
    states = []
    for X in (rng.poisson(1.0, size=(20, 6)), rng.poisson(5.0, size=(20, 6))):
        monkeypatch.setattr(
            _estimator, "two_sided_geometric",
            lambda epsilon, sensitivity, size, random_state, X=X: release - X,
        )
        model = PrivatePoissonMF(2, epsilon=1.0, privatize=True, max_iter=3,
                                 random_state=0).fit(X)
        states.append({k: v for k, v in vars(model).items() if k.endswith("_")})
    assert states[0].keys() == states[1].keys()
    for key, value in states[0].items():
        if isinstance(value, np.ndarray) or np.isscalar(value):
            np.testing.assert_array_equal(value, states[1][key], err_msg=key)
