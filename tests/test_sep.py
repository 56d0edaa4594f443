"""Tests of skprivfact.sep: DPSEPRegressor and its probabilistic-backpropagation kernels."""

import math
from pathlib import Path
import pickle
import re
from fractions import Fraction
import warnings

import numpy as np
import pytest
from scipy import integrate, stats
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skprivfact import sep
from skprivfact._pbp_kernels import (
    mlp_mean_sites,
    mlp_predictive_moments,
    mlp_sites,
    noise_sites,
)
from skprivfact.accounting import calibrate_noise_multiplier, make_accountant
from skprivfact.exceptions import PrivacyLeakWarning, ReproducibleNoiseWarning
from skprivfact.privacy import PrivacyBudget, PrivacyEngine, plan_privacy
from skprivfact.sep import DPSEPRegressor
from skprivfact.utils._testing import dp_accounting_pld_epsilon, gaussian_kl

INF = float("inf")
UCI_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "uci"

COEF = np.array([1.0, -0.5, 0.25, 0.0, 0.75])
INTERCEPT = 0.5
NOISE_STD = 0.3
# Inputs are uniform on [-1, 3]^5, so the targets stay well inside (-6, 10).
BOUNDS_X = (-1.0, 3.0)
BOUNDS_Y = (-6.0, 10.0)


@pytest.fixture(autouse=True)
def single_numba_thread():
    # The kernels' results do not depend on the number of threads (tested
    # below); on a busy machine the parallel regions of small batches wait on
    # each other far longer than they compute, so tests run on one thread.
    import numba

    previous = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(previous)


def make_linear(n_samples, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(*BOUNDS_X, size=(n_samples, COEF.size))
    y = X @ COEF + INTERCEPT + NOISE_STD * rng.normal(size=n_samples)
    assert BOUNDS_Y[0] < y.min() and y.max() < BOUNDS_Y[1]
    return X, y


def scaled_to_original(n_features, x_mid, x_half, y_half):
    """Matrix T with (coef, intercept - y_mid) = T (scaled weights, scaled intercept)."""
    transform = np.zeros((n_features + 1, n_features + 1))
    transform[:n_features, :n_features] = np.diag(y_half / x_half)
    transform[n_features, :n_features] = -y_half * x_mid / x_half
    transform[n_features, n_features] = y_half
    return transform


# 1. Linear model: exact conjugate posterior -----------------------------------


def test_noise_free_linear_sep_is_the_exact_conjugate_posterior():
    X, y = make_linear(5000)
    prior_precision = 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the data lie inside the bounds
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # conftest
        reg = DPSEPRegressor(
            model="linear",
            epsilon=INF,
            clip_norm=None,
            noise_variance=NOISE_STD**2,
            prior_precision=prior_precision,
            bounds_X=BOUNDS_X,
            bounds_y=BOUNDS_Y,
        ).fit(X, y)
    # Exact posterior in the scaled space, intercept as a constant-1 feature.
    x_mid, x_half = 1.0, 2.0
    y_mid, y_half = 2.0, 8.0
    design = np.column_stack([(X - x_mid) / x_half, np.ones(X.shape[0])])
    y_scaled = (y - y_mid) / y_half
    noise_var = NOISE_STD**2 / y_half**2
    precision = prior_precision * np.eye(6) + design.T @ design / noise_var
    covariance = np.linalg.inv(precision)
    mean = covariance @ design.T @ y_scaled / noise_var
    # The default ("auto") damping of the linear model is 1: one full-batch
    # update reaches the fixed point.
    assert reg.damping_ == 1.0
    np.testing.assert_allclose(reg.weights_mean_, mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(reg.weights_variance_, np.diag(covariance), rtol=1e-9)
    # The same posterior in the original units.
    transform = scaled_to_original(5, np.full(5, x_mid), np.full(5, x_half), y_half)
    exact_mean = transform @ mean + np.r_[np.zeros(5), y_mid]
    exact_cov = transform @ covariance @ transform.T
    fitted_mean = np.r_[reg.coef_, reg.intercept_]
    kl_forward = gaussian_kl(fitted_mean, reg.coef_covariance_, exact_mean, exact_cov)
    kl_backward = gaussian_kl(exact_mean, exact_cov, fitted_mean, reg.coef_covariance_)
    assert abs(kl_forward) < 1e-6 and abs(kl_backward) < 1e-6
    # And it recovers the generating model (within 5 posterior standard deviations).
    posterior_std = np.sqrt(np.diag(exact_cov))
    assert np.all(np.abs(fitted_mean - np.r_[COEF, INTERCEPT]) < 5 * posterior_std)
    assert reg.noise_variance_ == pytest.approx(NOISE_STD**2, rel=1e-12)
    assert reg.privacy_spent_ == (INF, reg.delta) and reg.noise_multiplier_ == 0.0
    # Every update is still a release, without noise: an infinite epsilon.
    assert reg.n_releases_ == reg.accountant_.steps == reg.n_iter_ == 40
    assert reg.accountant_.history == [(0.0, 1.0, 1)] * reg.n_iter_


def test_noise_free_linear_sep_learns_the_noise_variance():
    X, y = make_linear(5000)
    reg = DPSEPRegressor(
        epsilon=INF, clip_norm=None, bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y
    )
    reg.fit(X, y)
    # The sample variance of 5000 draws has relative standard error 2%; the
    # Gamma factor adds the EP approximation's own small bias.
    assert reg.noise_variance_ == pytest.approx(NOISE_STD**2, rel=0.06)


# 2. Probabilistic-backpropagation kernels --------------------------------------


def relu_moments_reference(mean, var):
    std = np.sqrt(var)
    alpha = mean / std
    cdf, pdf = stats.norm.cdf(alpha), stats.norm.pdf(alpha)
    first = mean * cdf + std * pdf
    second = (mean**2 + var) * cdf + mean * std * pdf
    return first, second - first**2


def network_output_moments(x, weight_mean, weight_var, n_hidden):
    """Mean and variance of the output of the one-hidden-layer net, written from the layout."""
    n_inputs = x.size
    row = np.r_[x, 1.0] / math.sqrt(n_inputs + 1)
    n_first = n_hidden * (n_inputs + 1)
    first_mean = weight_mean[:n_first].reshape(n_hidden, n_inputs + 1)
    first_var = weight_var[:n_first].reshape(n_hidden, n_inputs + 1)
    hidden_mean, hidden_var = relu_moments_reference(
        first_mean @ row, first_var @ row**2
    )
    # Output layer input: the hidden units and a constant 1, divided by sqrt(H + 1).
    h_mean = np.r_[hidden_mean, 1.0] / math.sqrt(n_hidden + 1)
    h_var = np.r_[hidden_var, 0.0] / (n_hidden + 1)
    w_mean, w_var = weight_mean[n_first:], weight_var[n_first:]
    out_mean = w_mean @ h_mean
    out_var = np.sum(w_mean**2 * h_var + w_var * (h_mean**2 + h_var))
    return out_mean, out_var


def reference_sites(x, y, weight_mean, weight_var, n_hidden, noise_var):
    """PBP sites from central finite differences of log Z."""

    def log_z(mean, var):
        m_z, v_z = network_output_moments(x, mean, var, n_hidden)
        return stats.norm.logpdf(y, m_z, math.sqrt(v_z + noise_var))

    n_weights = weight_mean.size
    grad_m, grad_v = np.empty(n_weights), np.empty(n_weights)
    for w in range(n_weights):
        step = np.zeros(n_weights)
        step[w] = 1e-6
        grad_m[w] = (
            log_z(weight_mean + step, weight_var)
            - log_z(weight_mean - step, weight_var)
        ) / 2e-6
        step[w] = 1e-6 * weight_var[w]
        grad_v[w] = (
            log_z(weight_mean, weight_var + step)
            - log_z(weight_mean, weight_var - step)
        ) / (2e-6 * weight_var[w])
    new_mean = weight_mean + weight_var * grad_m
    new_var = weight_var - weight_var**2 * (grad_m**2 - 2 * grad_v)
    ok = new_var > 0
    precision = np.where(ok, 1 / np.where(ok, new_var, 1) - 1 / weight_var, 0.0)
    shift = np.where(
        ok, new_mean / np.where(ok, new_var, 1) - weight_mean / weight_var, 0.0
    )
    return np.r_[precision, shift]


def random_cavity(n_inputs, n_hidden, seed):
    rng = np.random.RandomState(seed)
    n_weights = n_hidden * (n_inputs + 1) + n_hidden + 1
    return rng.normal(size=n_weights), rng.uniform(0.05, 1.0, size=n_weights)


@pytest.mark.parametrize("learn_noise", [False, True])
def test_mlp_sites_match_finite_differences_of_log_z(learn_noise):
    n_inputs, n_hidden, n_rows = 3, 4, 6
    weight_mean, weight_var = random_cavity(n_inputs, n_hidden, seed=1)
    rng = np.random.RandomState(2)
    X = rng.uniform(-1, 1, size=(n_rows, n_inputs))
    y = rng.uniform(-1, 1, size=n_rows)
    shape, rate = 5.0, 0.4
    noise_var = rate / (shape - 1) if learn_noise else 0.1
    sites = mlp_sites(
        X, y, weight_mean, weight_var, n_hidden, shape, rate, learn_noise, 0.1
    )
    n_weights = weight_mean.size
    assert sites.shape == (n_rows, 2 * n_weights + 2)
    for i in range(n_rows):
        expected = reference_sites(
            X[i], y[i], weight_mean, weight_var, n_hidden, noise_var
        )
        np.testing.assert_allclose(
            sites[i, : 2 * n_weights], expected, rtol=1e-6, atol=1e-7
        )
    if learn_noise:
        m_z, v_z = mlp_predictive_moments(X, weight_mean, weight_var, n_hidden)
        np.testing.assert_allclose(
            sites[:, -2:], noise_sites(y, m_z, v_z, shape, rate), rtol=1e-12
        )
    else:
        assert np.all(sites[:, -2:] == 0)


def test_mlp_mean_sites_are_the_zero_variance_limit_of_the_sites():
    n_inputs, n_hidden, n_rows = 3, 4, 6
    weight_mean, _ = random_cavity(n_inputs, n_hidden, seed=4)
    rng = np.random.RandomState(5)
    X = rng.uniform(-1, 1, size=(n_rows, n_inputs))
    y = rng.uniform(-1, 1, size=n_rows)
    noise_var = 0.3
    n_weights = weight_mean.size
    at_means = mlp_mean_sites(X, y, weight_mean, n_hidden, noise_var)
    assert at_means.shape == (n_rows, 2 * n_weights)
    # The cavity's sites as the variances shrink: precision site, and shift
    # site less the mean times it (the released gradient).
    tiny = mlp_sites(
        X, y, weight_mean, np.full(n_weights, 1e-9), n_hidden, 2.0, 0.1, False, noise_var
    )
    precision = tiny[:, :n_weights]
    np.testing.assert_allclose(at_means[:, :n_weights], precision, atol=1e-5)
    np.testing.assert_allclose(
        at_means[:, n_weights:], tiny[:, n_weights : 2 * n_weights] - weight_mean * precision,
        atol=1e-5,
    )

    # And the derivatives of the Gaussian log-likelihood at the means.
    def output(weights, x):
        return mlp_predictive_moments(x[None], weights, np.zeros(n_weights), n_hidden)[0][0]

    step = 1e-6
    for i in range(n_rows):
        slope = np.array(
            [
                (output(weight_mean + step * e, X[i]) - output(weight_mean - step * e, X[i]))
                / (2 * step)
                for e in np.eye(n_weights)
            ]
        )
        residual = y[i] - output(weight_mean, X[i])
        np.testing.assert_allclose(at_means[i, :n_weights], slope**2 / noise_var, atol=1e-7)
        np.testing.assert_allclose(
            at_means[i, n_weights:], residual * slope / noise_var, atol=1e-7
        )


@pytest.mark.parametrize("max_norm", [1e-3, 0.3, 30.0, 1e300])
def test_clipped_mean_site_sum_is_the_sum_of_clip_rows_bit_for_bit(max_norm):
    # The fused kernel of the updates at the means against the unfused path:
    # mlp_mean_sites on the batch's rows, the precision block weighted, rows
    # that are not finite zeroed, clip_rows, sum(axis=0). The same bits, for
    # every row clipped (1e-3), some (0.3, 30) or none (1e300), a row whose
    # sites overflow (dropped), one clipped by the divide-first branch and an
    # empty batch.
    from skprivfact._pbp_kernels import mlp_clipped_mean_site_sum
    from skprivfact.mechanisms import _row_clip_arguments, clip_rows

    n_inputs, n_hidden, n_samples = 4, 6, 200
    weight_mean, _ = random_cavity(n_inputs, n_hidden, seed=7)
    n_weights = weight_mean.size
    rng = np.random.RandomState(8)
    X = rng.uniform(-1, 1, size=(n_samples, n_inputs)) * rng.lognormal(0, 2, (n_samples, 1))
    y = rng.normal(scale=3.0, size=n_samples)
    X[17] = 1e300 * np.array([1.0, -1.0, 1.0, -1.0])
    # Finite, but far enough out that at max_norm=1e-3 the clip's factor
    # leaves its one-product range: the divide-first branch.
    X[5] = 1e140 * np.array([1.0, -1.0, 1.0, -1.0])
    precision_weight, noise_variance = 0.01, 0.05
    arguments = _row_clip_arguments(2 * n_weights, max_norm)
    for rows in (np.sort(rng.choice(n_samples, 64, replace=False)), np.arange(n_samples),
                 np.arange(0)):
        fused = mlp_clipped_mean_site_sum(
            X, y, rows, weight_mean, n_hidden, noise_variance, precision_weight, *arguments
        )
        sites = mlp_mean_sites(X[rows], y[rows], weight_mean, n_hidden, noise_variance)
        with np.errstate(over="ignore", invalid="ignore"):
            sites[:, :n_weights] *= precision_weight
        finite = np.isfinite(sites).all(axis=1)
        sites[~finite] = 0.0
        expected = clip_rows(sites, max_norm).sum(axis=0)
        assert fused.shape == (2 * n_weights,)
        np.testing.assert_array_equal(fused.view(np.int64), expected.view(np.int64))
        if 17 in rows:
            assert not finite[np.searchsorted(rows, 17)]
    assert _row_clip_arguments(2 * n_weights, 2.0**-961) is None
    assert _row_clip_arguments(2 * n_weights, 2**70)[0] == 2.0**70
    for bad in (0.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="max_norm must be a positive finite number"):
            _row_clip_arguments(2 * n_weights, bad)


def test_mlp_sites_are_zero_where_the_moment_match_fails():
    # A far outlier with large weight variances makes some tilted variances negative.
    n_inputs, n_hidden = 2, 3
    weight_mean, weight_var = random_cavity(n_inputs, n_hidden, seed=3)
    weight_var = weight_var * 20
    X = np.array([[0.9, -0.8]])
    y = np.array([40.0])
    sites = mlp_sites(X, y, weight_mean, weight_var, n_hidden, 2.0, 0.1, False, 1e-3)
    expected = reference_sites(X[0], y[0], weight_mean, weight_var, n_hidden, 1e-3)
    assert np.any(expected[: weight_mean.size] == 0)
    np.testing.assert_allclose(sites[0, :-2], expected, rtol=1e-5, atol=1e-7)


def test_mlp_predictive_moments_match_monte_carlo():
    n_inputs, n_hidden, n_draws = 3, 4, 200_000
    weight_mean, weight_var = random_cavity(n_inputs, n_hidden, seed=4)
    rng = np.random.RandomState(5)
    X = rng.uniform(-1, 1, size=(3, n_inputs))
    means, variances = mlp_predictive_moments(X, weight_mean, weight_var, n_hidden)
    weights = weight_mean + np.sqrt(weight_var) * rng.normal(
        size=(n_draws, weight_mean.size)
    )
    n_first = n_hidden * (n_inputs + 1)
    first = weights[:, :n_first].reshape(n_draws, n_hidden, n_inputs + 1)
    for i, x in enumerate(X):
        hidden = np.maximum(first @ (np.r_[x, 1.0] / math.sqrt(n_inputs + 1)), 0.0)
        hidden = np.column_stack([hidden, np.ones(n_draws)]) / math.sqrt(n_hidden + 1)
        out = np.sum(weights[:, n_first:] * hidden, axis=1)
        # Five Monte Carlo standard errors (mean: sd / sqrt(N); variance:
        # sqrt((m4 - var^2) / N)).
        centred = out - out.mean()
        mc_var = np.mean(centred**2)
        var_se = math.sqrt((np.mean(centred**4) - mc_var**2) / n_draws)
        assert abs(means[i] - out.mean()) < 5 * out.std() / math.sqrt(n_draws)
        assert abs(variances[i] - mc_var) < 5 * var_se


def pbp_noise_site(y, m, v, shape, rate):
    """PBP's Gamma update with Z(a, b) ~ N(y | m, v + b / (a - 1))."""

    def z(a):
        return stats.norm.pdf(y, m, math.sqrt(v + rate / (a - 1)))

    z0, z1, z2 = z(shape), z(shape + 1), z(shape + 2)
    new_shape = 1 / (z0 * z2 / z1**2 * (shape + 1) / shape - 1)
    new_rate = 1 / ((z2 / z1 * (shape + 1) - z1 / z0 * shape) / rate)
    return new_shape - shape, new_rate - rate


def test_noise_sites_follow_the_pbp_gamma_update():
    rng = np.random.RandomState(6)
    y, m = rng.normal(size=5), rng.normal(size=5)
    v = rng.uniform(0.01, 0.5, size=5)
    for shape, rate in [(3.0, 0.5), (20.0, 1.0), (2.0, 0.1)]:
        sites = noise_sites(y, m, v, shape, rate)
        expected = [pbp_noise_site(*args, shape, rate) for args in zip(y, m, v)]
        np.testing.assert_allclose(sites, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("y", [0.3, -0.1, 0.6])
def test_noise_site_matches_the_tilted_gamma_moments(y):
    # The exact tilted distribution Gamma(lam | a, b) N(y | m, v + 1 / lam),
    # integrated numerically. PBP's Gaussian approximation of the normaliser
    # is exact as the Gamma concentrates (error O(1 / a^2)): at a = 500 the
    # moment-matched Gamma's mean and variance agree to about 1e-6.
    m, v, shape, rate = 0.0, 0.05, 500.0, 50.0
    d_shape, d_rate = noise_sites(
        np.array([y]), np.array([m]), np.array([v]), shape, rate
    )[0]
    lo, hi = stats.gamma.ppf([1e-12, 1 - 1e-12], shape, scale=1 / rate)

    def moment(k):
        def integrand(lam):
            return (
                stats.norm.pdf(y, m, math.sqrt(v + 1 / lam))
                * lam**k
                * stats.gamma.pdf(lam, shape, scale=1 / rate)
            )

        return integrate.quad(integrand, lo, hi, epsabs=0, epsrel=1e-12, limit=200)[0]

    z0, z1, z2 = moment(0), moment(1), moment(2)
    tilted_mean, tilted_var = z1 / z0, z2 / z0 - (z1 / z0) ** 2
    new_shape, new_rate = shape + d_shape, rate + d_rate
    assert new_shape / new_rate == pytest.approx(tilted_mean, rel=1e-5)
    assert new_shape / new_rate**2 == pytest.approx(tilted_var, rel=1e-4)


# 3. Privacy ---------------------------------------------------------------------


class ReleaseSpy:
    """Records every PrivacyEngine.release: clean and noisy blocks, sensitivities.

    ``replace`` (a function of the clean blocks) substitutes what is released,
    after the original release has run (and taken its accountant step).
    """

    def __init__(self, monkeypatch, events=None, replace=None):
        self.calls = [] if events is None else events
        original = PrivacyEngine.release
        spy = self

        def release(engine, blocks, sensitivities, **kwargs):
            clean = [np.array(block, dtype=float, copy=True) for block in blocks]
            noisy = original(engine, blocks, sensitivities, **kwargs)
            if replace is not None:
                noisy = replace(clean)
            spy.calls.append(
                {
                    "kind": "release",
                    "clean": clean,
                    "noisy": [np.array(block, copy=True) for block in noisy],
                    "sensitivities": list(sensitivities),
                    "noise_multiplier": engine.plan.noise_multiplier,
                }
            )
            return noisy

        monkeypatch.setattr(PrivacyEngine, "release", release)


@pytest.fixture
def clip_record(monkeypatch):
    """Every call of sep.clip_rows (the sites, and the factor after each
    update) and every release, in order."""
    events = []
    original = sep.clip_rows

    def recording(rows, max_norm):
        clipped = original(rows, max_norm)
        events.append(
            {
                "kind": "clip",
                "rows": np.array(rows, dtype=float),
                "clipped": clipped,
                "max_norm": max_norm,
            }
        )
        return clipped

    monkeypatch.setattr(sep, "clip_rows", recording)
    ReleaseSpy(monkeypatch, events)
    return events


def adversarial_data(n_samples, n_features=3, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-1, 1, size=(n_samples, n_features))
    y = rng.uniform(-1, 1, size=n_samples)
    X[:5] = 1e12 * rng.choice([-1, 1], size=(5, n_features))
    y[:5] = [1e12, -1e12, 1e12, -1e12, 1e12]
    X[5:10] = rng.choice([-1.0, 1.0], size=(5, n_features))  # exactly on the bounds
    y[5:10] = [-1.0, 1.0, 1.0, -1.0, 1.0]
    return X, y


@pytest.mark.parametrize(
    "params",
    [
        {"model": "linear"},
        {"model": "mlp", "mean_update": "sep", "hidden_units": 4, "batch_size": 20},
    ],
)
def test_sites_and_factor_never_exceed_clip_norm(clip_record, params):
    X, y = adversarial_data(200)
    clip_norm = 0.5
    with warnings.catch_warnings():
        # a private fit clips silently
        warnings.filterwarnings("error", message=".*outside bounds")
        reg = DPSEPRegressor(
            epsilon=1.0,
            clip_norm=clip_norm,
            max_iter=3,
            bounds_X=(-1, 1),
            bounds_y=(-1, 1),
            random_state=0,
            **params,
        ).fit(X, y)
    clips = [e for e in clip_record if e["kind"] == "clip"]
    releases = [e for e in clip_record if e["kind"] == "release"]
    site_calls = [c for c in clips if c["rows"].shape[0] > 1]
    factor_calls = [c for c in clips if c["rows"].shape[0] == 1]
    # The initial factor, then the factor after each update (post-processing).
    assert len(releases) == reg.n_releases_ > 0
    assert len(factor_calls) == reg.n_releases_ + 1
    for call in clips:
        assert call["max_norm"] == clip_norm
        assert np.all(np.linalg.norm(call["clipped"], axis=1) <= clip_norm)
    # Each release is the sum of the sites clipped just before it (in the
    # weighted coordinates, where they were clipped), with sensitivity
    # clip_norm: the factor is not part of what is released.
    previous = None
    for event in clip_record:
        if event["kind"] == "clip" and event["rows"].shape[0] > 1:
            previous = event
        elif event["kind"] == "release":
            assert event["sensitivities"] == [clip_norm]
            expected = (
                np.zeros_like(event["clean"][0])
                if previous is None
                else previous["clipped"].sum(axis=0)
            )
            np.testing.assert_allclose(event["clean"][0], expected, rtol=1e-12, atol=1e-15)
            previous = None
    # Clipping did act on the sites (the test would otherwise prove nothing).
    raw_norms = np.concatenate([np.linalg.norm(c["rows"], axis=1) for c in site_calls])
    assert raw_norms.max() > 2 * clip_norm


@pytest.mark.parametrize(
    "damping, clip_norm, n_samples, batch_size",
    [(1.0, 1.0, 100, "auto"), (0.5, 2.0, 300, "auto"), (0.3, 0.1, 150, 50)],
)
def test_release_is_the_site_sum_with_sensitivity_clip_norm(
    monkeypatch, damping, clip_norm, n_samples, batch_size
):
    # The released quantity is the sum of the clipped sites, centred: its
    # sensitivity is clip_norm whatever the damping and the number of rows
    # (the factor, damping and 1 / n enter only after the release).
    spy = ReleaseSpy(monkeypatch)
    X, y = adversarial_data(n_samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        reg = DPSEPRegressor(model="linear",
            epsilon=2.0,
            damping=damping,
            clip_norm=clip_norm,
            batch_size=batch_size,
            max_iter=4,
            bounds_X=(-1, 1),
            bounds_y=(-1, 1),
            random_state=0,
        ).fit(X, y)
    sample_rate = 1.0 if batch_size == "auto" else batch_size / n_samples
    assert reg.sample_rate_ == sample_rate and reg.damping_ == damping
    assert reg.noise_multiplier_ > 0
    # One release per update, over the whole vector of natural parameters.
    assert len(spy.calls) == reg.n_releases_ == 4 * math.ceil(1 / sample_rate)
    # Linear model, 3 features and the intercept: precision triangle, shift, Gamma.
    n_params = 4 * 5 // 2 + 4 + 2
    noise = []
    for call in spy.calls:
        assert call["sensitivities"] == [clip_norm]
        assert call["noise_multiplier"] == reg.noise_multiplier_
        assert call["clean"][0].shape == (n_params,)
        noise.append(call["noisy"][0] - call["clean"][0])
    noise = np.concatenate(noise)
    expected_std = reg.noise_multiplier_ * clip_norm
    # m normal draws: the sample variance is within 6 standard errors
    # (sqrt(2 / m)) of the truth with overwhelming probability.
    assert abs(np.mean(noise**2) / expected_std**2 - 1) < 6 * math.sqrt(2 / noise.size)


@pytest.mark.parametrize("batch_size", [100, 25])
def test_factor_update_from_the_released_sum(monkeypatch, batch_size):
    # Whatever is released (here a fixed vector R in place of the sum), the
    # factor follows f <- (1 - damping q) f + (damping / n) R from f = 0, and
    # the posterior is prior + n times the average of the last factors. So
    # noise of std s on the release is noise of std damping s / n on the
    # factor: noise_multiplier * damping * clip_norm / n.
    X, y = make_linear(100)
    model = sep._LinearModel(5, 1.0, 0.09)
    released = np.zeros(model.size)
    released[: model.n_triangle][model.upper[0] == model.upper[1]] = 3.0  # PSD
    released[model.n_triangle : model.n_triangle + model.n_coef] = np.linspace(-1, 1, 6)
    spy = ReleaseSpy(monkeypatch, replace=lambda clean: [released.copy()])
    damping = 0.5
    reg = DPSEPRegressor(
        model="linear",
        epsilon=INF,
        clip_norm=None,
        damping=damping,
        batch_size=batch_size,
        max_iter=1,
        averaging_fraction=0.5,
        noise_variance=0.09 * 8.0**2,  # 0.09 in the scaled units of y
        prior_precision=1.0,
        bounds_X=BOUNDS_X,
        bounds_y=BOUNDS_Y,
        random_state=0,
    ).fit(X, y)
    q = batch_size / 100
    n_steps = math.ceil(1 / q)
    assert len(spy.calls) == reg.n_releases_ == n_steps
    factors, factor = [], np.zeros(model.size)
    for _ in range(n_steps):
        factor = (1 - damping * q) * factor + (damping / 100) * released
        factors.append(factor)
    n_averaged = max(1, round(0.5 * n_steps))
    expected = model.prior() + 100 * np.mean(factors[-n_averaged:], axis=0)
    np.testing.assert_allclose(reg._posterior, expected, rtol=1e-12, atol=1e-14)


def test_privacy_noise_is_the_only_difference_from_clipped_sep(monkeypatch):
    # With the same batches and the noise taken out of the releases, a
    # private fit is exactly the clipped noise-free fit: nothing else depends
    # on epsilon (but the learned prior precision, which is learned without
    # noise only: fixed here, the "auto" damping and batch size, given here,
    # and the denoising of the released means, disabled here).
    monkeypatch.setattr(sep, "_denoise_weights", lambda mean, var, *args: (mean, var))
    batches = []
    replay = None
    original_sample = PrivacyEngine.sample

    def sample(engine, n_samples, sample_rate=None):
        if replay is not None:
            return replay.pop(0)
        batch = original_sample(engine, n_samples, sample_rate)
        batches.append(batch.copy())
        return batch

    monkeypatch.setattr(PrivacyEngine, "sample", sample)
    spy = ReleaseSpy(monkeypatch, replace=lambda clean: clean)
    X, y = adversarial_data(300)
    params = {
        "prior_precision": 1.0,
        "model": "mlp",
        "mean_update": "sep",
        "clip_norm": 1.0,
        "hidden_units": 3,
        "batch_size": 30,
        "damping": 0.5,
        "max_iter": 2,
        "bounds_X": (-1, 1),
        "bounds_y": (-1, 1),
        "random_state": 3,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        silent = DPSEPRegressor(epsilon=1.0, **params).fit(X, y)
        assert silent.noise_multiplier_ > 0
        # The original releases did draw noise (then discarded).
        assert len(spy.calls) == silent.n_releases_ == 20
        replay = list(batches)
        plain = DPSEPRegressor(epsilon=INF, **params).fit(X, y)
    assert replay == []
    np.testing.assert_array_equal(silent.weights_mean_, plain.weights_mean_)
    np.testing.assert_array_equal(silent.weights_variance_, plain.weights_variance_)


@pytest.mark.parametrize("batch_size", ["auto", 25])
def test_one_accountant_step_per_update(batch_size):
    X, y = make_linear(200)
    reg = DPSEPRegressor(model="linear",
        epsilon=1.5,
        delta=1e-6,
        batch_size=batch_size,
        max_iter=5,
        bounds_X=BOUNDS_X,
        bounds_y=BOUNDS_Y,
        random_state=0,
    ).fit(X, y)
    sample_rate = 1.0 if batch_size == "auto" else 25 / 200
    steps = 5 * math.ceil(1 / sample_rate)
    assert reg.sample_rate_ == sample_rate
    # n is public (it sets the rate and the update): substitution, also in
    # full batch.
    assert reg.neighbouring_relation_ == "substitution"
    assert reg.n_releases_ == steps == reg.accountant_.steps
    assert reg.accountant_.history == [(reg.noise_multiplier_, sample_rate, 1)] * steps
    assert reg.noise_multiplier_ == calibrate_noise_multiplier(
        1.5,
        1e-6,
        sample_rate=sample_rate,
        steps=steps,
        neighbouring_relation="substitution",
    )
    assert reg.n_iter_ == 5
    assert 0.99 * 1.5 <= reg.privacy_spent_[0] <= 1.5


def test_prior_precision_auto_is_learned_only_without_noise():
    X, y = make_linear(600)
    private = DPSEPRegressor(model="linear", bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y, random_state=0).fit(X, y)
    # Under noise "auto" keeps the prior precision fixed (the noise in the
    # released means would otherwise drive it towards zero), at
    # n_features + 1 for the linear model: inputs and target lie in [-1, 1].
    assert private.prior_precision_ == X.shape[1] + 1.0
    assert np.all(np.isfinite(private.coef_))
    clean = DPSEPRegressor(
        model="linear",
        epsilon=INF,
        bounds_X=BOUNDS_X,
        bounds_y=BOUNDS_Y,
        random_state=0,
    ).fit(X, y)
    # Without noise it is learned: at the end it is (to convergence) the
    # variational update's fixed point given the returned posterior.
    assert clean.prior_precision_ != 1.0
    assert clean.prior_precision_ == pytest.approx(
        sep._prior_precision_update(clean._model, clean._posterior), rel=1e-6
    )


@pytest.mark.parametrize("model", ["linear", "mlp"])
def test_no_data_derived_attributes_with_bounds(model):
    X, y = make_linear(300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # conftest
        reg = DPSEPRegressor(
            model=model,
            hidden_units=3,
            batch_size=50,
            max_iter=2,
            bounds_X=BOUNDS_X,
            bounds_y=BOUNDS_Y,
            random_state=0,
        ).fit(X, y)
    np.testing.assert_array_equal(reg.X_offset_, np.full(5, 1.0))
    np.testing.assert_array_equal(reg.X_scale_, np.full(5, 2.0))
    assert (reg.y_offset_, reg.y_scale_) == (2.0, 8.0)
    # No per-record quantity anywhere in the fitted state.
    for name, value in list(vars(reg).items()) + list(vars(reg._model).items()):
        if isinstance(value, np.ndarray):
            assert 300 not in value.shape, name


def test_missing_bounds_warn_only_when_private():
    X, y = make_linear(100)
    for kwargs, missing in [
        ({"bounds_y": BOUNDS_Y}, "bounds_X"),
        ({"bounds_X": BOUNDS_X}, "bounds_y"),
    ]:
        with pytest.warns(PrivacyLeakWarning, match=f"{missing} is None"):
            reg = DPSEPRegressor(epsilon=1.0, max_iter=2, **kwargs).fit(X, y)
    # Without bounds the data's own mean and std are used (and revealed).
    np.testing.assert_allclose(reg.y_offset_, y.mean())
    np.testing.assert_allclose(reg.y_scale_, y.std())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # conftest
        DPSEPRegressor(epsilon=INF, max_iter=2).fit(X, y)


def test_batches_are_poisson_samples(monkeypatch):
    sizes = []
    first_columns = []
    original = sep._LinearModel.sites

    def recording(self, X, y, cavity, noise_std=0.0):
        sizes.append(X.shape[0])
        first_columns.append(X[:, 0].copy())
        return original(self, X, y, cavity, noise_std)

    monkeypatch.setattr(sep._LinearModel, "sites", recording)
    X, y = make_linear(100)
    reg = DPSEPRegressor(
        model="linear",
        epsilon=INF,
        batch_size=10,
        max_iter=200,
        bounds_X=BOUNDS_X,
        bounds_y=BOUNDS_Y,
        random_state=0,
    ).fit(X, y)
    # Empty batches skip the site computation.
    sizes = np.r_[sizes, np.zeros(reg.n_releases_ - len(sizes))]
    assert sizes.size == 2000
    # Binomial(100, 0.1): mean 10, variance 9. Five standard errors.
    assert abs(sizes.mean() - 10) < 5 * math.sqrt(9 / sizes.size)
    assert abs(sizes.var() / 9 - 1) < 5 * math.sqrt(2 / sizes.size)
    # Without replacement, and every row equally likely: each row (told apart
    # by its scaled first feature, distinct here) is drawn Binomial(2000, 0.1)
    # times, mean 200 and variance 180.
    rows = np.unique((X[:, 0] - 1.0) / 2.0)
    assert rows.size == 100
    for column in first_columns:
        assert np.unique(column).size == column.size
    counts = np.array([np.sum(np.concatenate(first_columns) == row) for row in rows])
    statistic = np.sum((counts - 200) ** 2 / 180)
    assert stats.chi2.sf(statistic, df=100) > 1e-4


def test_scaling_release_sums_the_mapped_columns_and_squares_within_norm_one(monkeypatch):
    # The location and scale release comes first, over every row: each row's
    # bounded columns clipped and mapped to [-1, 1] (here the bounds are
    # [-1, 1]: clipping only) and their squares, over sqrt(2 d), a vector of
    # norm at most 1 whatever the row, the sensitivity the engine is told;
    # the accountant composes it with the updates.
    clipped_rows = []
    original_clip = sep.clip_rows

    def recording_clip(rows, max_norm):
        clipped = original_clip(rows, max_norm)
        clipped_rows.append((np.array(rows, copy=True), max_norm, clipped))
        return clipped

    monkeypatch.setattr(sep, "clip_rows", recording_clip)
    spy = ReleaseSpy(monkeypatch)
    X, y = adversarial_data(400)
    reg = DPSEPRegressor(model="linear",
        epsilon=2.0, max_iter=3, bounds_X=(-1, 1), bounds_y=(-1, 1),
        scaling_share=0.2, random_state=0,
    ).fit(X, y)
    assert reg.scaling_share_ == 0.2 and reg.n_releases_ == 3 + 1
    first = spy.calls[0]
    assert first["sensitivities"] == [1.0]
    columns = np.column_stack([np.clip(X, -1, 1), np.clip(y, -1, 1)])
    rows = np.hstack([columns, columns**2]) / math.sqrt(2 * 4)
    assert np.linalg.norm(rows, axis=1).max() <= 1.0 + 1e-12
    np.testing.assert_allclose(first["clean"][0], rows.sum(axis=0), rtol=1e-12)
    _, max_norm, clipped = clipped_rows[0]
    assert max_norm == 1.0
    assert np.linalg.norm(clipped, axis=1).max() <= 1.0 + 1e-12
    # The noise of the updates is calibrated to what the release leaves.
    plan = reg._engine.plan
    assert plan.n_preliminary_releases == 1
    expected = (
        make_accountant("rdp", "substitution")
        .compose(plan.preliminary_noise_multiplier, 1.0, 1)
        .compose(reg.noise_multiplier_, 1.0, 3)
        .get_epsilon(reg.delta)
    )
    assert reg.privacy_spent_[0] == pytest.approx(expected, rel=1e-9)
    assert 0.98 * 2.0 < reg.privacy_spent_[0] <= 2.0


def _scaling_engine(share=0.1):
    plan = plan_privacy(
        1.0, 1e-5, sample_rate=1.0, n_releases=1,
        neighbouring_relation="substitution",
        n_preliminary_releases=1, preliminary_share=share,
    )
    return PrivacyEngine(plan)


def test_released_location_and_scale_follow_their_formula(monkeypatch):
    # With the release's noise replaced by a known vector, the map is exactly
    # the documented one: centre m, half-width 2.5 sqrt(v + 2 tau) (at most
    # 1, inside [-1, 1]), m and v the released mean and variance in the
    # bounds' units, tau the noise std of a released mean.
    rng = np.random.RandomState(0)
    n_samples = 5000
    values = rng.normal([5.0, -3.0, 0.0], [1.0, 4.0, 30.0], size=(n_samples, 3))
    offset, scale = np.zeros(3), np.full(3, 20.0)
    box = (offset - scale, offset + scale)
    engine = _scaling_engine()
    shift = rng.normal(size=6)
    original = PrivacyEngine.release

    def release(self, blocks, sensitivities, **kwargs):
        original(self, blocks, sensitivities, **kwargs)  # the accountant's step
        return [blocks[0] + shift]

    monkeypatch.setattr(PrivacyEngine, "release", release)
    ((new_offset, new_scale),) = sep._released_location_scale(
        [(values, offset, scale, box)], engine
    )
    (noise_std,) = engine.noise_scales([1.0], preliminary=True)
    norm = math.sqrt(2 * 3)
    mapped = np.clip(values, -20, 20) / 20
    released = (np.hstack([mapped, mapped**2]).sum(axis=0) / norm + shift) * norm / n_samples
    tau = noise_std * norm / n_samples
    mean = np.clip(released[:3], -1, 1)
    half_width = np.minimum(1.0, 2.5 * np.sqrt(np.maximum(released[3:] - mean**2, 0) + 2 * tau))
    centre = np.clip(mean, half_width - 1, 1 - half_width)
    np.testing.assert_allclose(new_offset, 20 * centre, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new_scale, 20 * half_width, rtol=1e-12)
    # The third column's spread exceeds the bounds: its map stays theirs.
    assert new_scale[2] == 20.0 and new_offset[2] == 0.0


@pytest.mark.parametrize("n_samples", [200_000, 60])
def test_released_location_and_scale_fit_wide_bounds_to_the_data(n_samples):
    # Columns of mean (5, -3) and std (1, 4) inside bounds ten to twenty times
    # wider: with many rows the map sends the mean plus or minus 2.5 stds
    # (inflated by twice the noise std of a released second moment) to
    # [-1, 1]; with few, the noise swamps the estimate and the map stays the
    # bounds'.
    rng = np.random.RandomState(0)
    values = rng.normal([5.0, -3.0], [1.0, 4.0], size=(n_samples, 2))
    engine = _scaling_engine()
    offset, scale = np.zeros(2), np.full(2, 20.0)
    ((new_offset, new_scale),) = sep._released_location_scale(
        [(values, offset, scale, (offset - scale, offset + scale))], engine
    )
    assert engine.n_releases == 1
    (noise_std,) = engine.noise_scales([1.0], preliminary=True)
    # Noise std of a released mean or second moment, in the bounds' units
    # (half-widths), and of the released variance in the data's units.
    tau = noise_std * math.sqrt(2 * 2) / n_samples
    variance_noise = tau * scale**2
    if n_samples > 1000:
        assert np.all(np.abs(new_offset - [5.0, -3.0]) < 10 * tau * scale)
        implied_variance = (new_scale / 2.5) ** 2 - 2 * variance_noise
        assert np.all(np.abs(implied_variance - [1.0, 16.0]) < 5 * variance_noise)
    else:
        np.testing.assert_array_equal(new_scale, scale)
        np.testing.assert_array_equal(new_offset, offset)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_auto_scaling_share_spends_only_where_the_release_can_narrow_the_map(accountant):
    if accountant == "pld":
        pytest.importorskip("dp_accounting")
    # The rule, from public quantities only: spend 0.1 where a released mean
    # would carry noise of std at most 0.02 half-widths of the bounds, that
    # is sqrt(2 d) times the multiplier of a release at that share (under
    # substitution, with the fit's accountant) over n_samples, at most 0.02.
    sigma = calibrate_noise_multiplier(
        1.0, 1e-5, accountant=accountant, neighbouring_relation="substitution"
    ) / math.sqrt(0.1)
    estimator = DPSEPRegressor(model="linear", epsilon=1.0, accountant=accountant)
    for n_bounded in (1, 6, 30):
        threshold = sigma * math.sqrt(2 * n_bounded) / 0.02
        assert estimator._scaling_share(math.ceil(threshold * 1.01), n_bounded) == 0.1
        assert estimator._scaling_share(math.floor(threshold * 0.99), n_bounded) == 0.0
        assert estimator._scaling_share(10**9, 0) == 0.0
    X, y = make_linear(300)
    params = {"epsilon": 1.0, "max_iter": 2, "bounds_X": BOUNDS_X, "bounds_y": BOUNDS_Y,
              "accountant": accountant}
    small = DPSEPRegressor(model="linear", **params).fit(X, y)
    assert small.scaling_share_ == 0.0 and small.n_releases_ == 2
    big_X, big_y = make_linear(30_000)
    big = DPSEPRegressor(model="linear", **params).fit(big_X, big_y)
    assert big.scaling_share_ == 0.1 and big.n_releases_ == 3
    assert big.privacy_spent_[0] <= 1.0
    # Nothing to narrow without bounds, nothing released without noise.
    with pytest.warns(PrivacyLeakWarning):
        unbounded = DPSEPRegressor(model="linear", **{**params, "bounds_X": None, "bounds_y": None}).fit(
            big_X, big_y
        )
    assert unbounded.scaling_share_ == 0.0 and unbounded.n_releases_ == 2
    exact = DPSEPRegressor(model="linear", **{**params, "epsilon": INF}).fit(big_X, big_y)
    assert exact.scaling_share_ == 0.0
    np.testing.assert_array_equal(exact.X_scale_, (BOUNDS_X[1] - BOUNDS_X[0]) / 2)


def test_a_released_map_fits_wide_bounds_and_clips_at_the_bounds_only():
    X, y = make_linear(30_000)
    wide_X, wide_y = (-20.0, 20.0), (-60.0, 60.0)
    reg = DPSEPRegressor(model="linear",
        epsilon=1.0, max_iter=5, bounds_X=wide_X, bounds_y=wide_y, random_state=0
    ).fit(X, y)
    assert reg.scaling_share_ == 0.1
    # The data's inputs span [-1, 3]: the released map is much narrower than
    # the bounds' (half-width 20) and centred on the data.
    assert np.all(reg.X_scale_ < 10.0) and np.all(np.abs(reg.X_offset_ - 1.0) < 1.0)
    # Inputs are clipped at the bounds only: inside them the model is linear
    # in the input (no silent clip at the map's edge), and beyond them a
    # point predicts as the bound, with a warning.
    X_test, _ = make_linear(200, seed=1)
    far = np.vstack([X_test, np.full((1, COEF.size), 15.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(
            reg.predict(far), far @ reg.coef_ + reg.intercept_, rtol=1e-9, atol=1e-9
        )
    with pytest.warns(UserWarning, match="outside bounds_X"):
        beyond = reg.predict(np.full((1, COEF.size), 25.0))
    np.testing.assert_array_equal(beyond, reg.predict(np.full((1, COEF.size), 20.0)))
    assert np.sqrt(np.mean((reg.predict(X_test) - X_test @ COEF - INTERCEPT) ** 2)) < 0.5


def test_a_rare_value_keeps_its_effect_under_the_released_map():
    # A binary column with 1% ones and a target that is large only there:
    # the released map puts the ones far beyond [-1, 1] (2.5 stds of the
    # column are about 0.25), and since values are clipped at the bounds
    # only the model still sees, and predicts, the rare group's targets.
    rng = np.random.RandomState(0)
    n_samples = 40_000
    X = np.column_stack([rng.uniform(size=(n_samples, 2)), rng.uniform(size=n_samples) < 0.01])
    y = 5.0 * X[:, 2] + X[:, 0] + 0.1 * rng.normal(size=n_samples)
    reg = DPSEPRegressor(model="linear",
        epsilon=1.0, max_iter=10, bounds_X=(0.0, 1.0), bounds_y=(-2.0, 7.0), random_state=0
    ).fit(X, y)
    assert reg.scaling_share_ == 0.1 and reg.X_scale_[2] < 0.5
    rare = np.array([[0.5, 0.5, 1.0]])
    assert abs(reg.predict(rare)[0] - 5.5) < 0.5


def test_bad_bounds_are_refused_before_the_budget_is_charged():
    budget = PrivacyBudget(5.0, 1e-5)
    X, y = make_linear(200)
    reg = DPSEPRegressor(model="linear",
        epsilon=1.0, max_iter=2, bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y, budget=budget
    ).fit(X, y)
    coef, spent = reg.coef_.copy(), budget.spent
    for bad in [{"bounds_X": (1.0, 0.0)}, {"bounds_y": (0.0, np.inf)}]:
        with pytest.raises(ValueError, match="bound"):
            reg.set_params(**bad).fit(X, y)
        reg.set_params(bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y)
    assert budget.n_fits == 1 and budget.spent == spent
    np.testing.assert_array_equal(reg.coef_, coef)


# 4. scikit-learn contract ----------------------------------------------------


# scikit-learn's common checks run in tests/test_common.py (linear and mlp).


def test_pickle_clone_grid_search_and_pipeline():
    X, y = make_linear(600)
    reg = DPSEPRegressor(
        bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y, prior_precision=1.0, random_state=0
    ).fit(X, y)
    restored = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(restored.predict(X), reg.predict(X))
    assert restored.accountant_.history == reg.accountant_.history
    cloned = clone(reg)
    assert cloned.get_params() == reg.get_params() and not hasattr(cloned, "coef_")
    search = GridSearchCV(
        DPSEPRegressor(
            model="linear",
            bounds_X=BOUNDS_X,
            bounds_y=BOUNDS_Y,
            noise_variance=0.09,
            prior_precision=1.0,
            random_state=0,
        ),
        {"epsilon": [0.5, 1.0, INF]},
        cv=3,
    ).fit(X, y)
    assert [p["epsilon"] for p in search.cv_results_["params"]] == [0.5, 1.0, INF]
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert search.cv_results_["mean_test_score"][2] > 0.95
    # After a StandardScaler the inputs lie within a few units of 0: public
    # bounds on the standardized scale (the scaler itself is not private).
    pipe = make_pipeline(
        StandardScaler(),
        DPSEPRegressor(epsilon=INF, bounds_X=(-5, 5), bounds_y=BOUNDS_Y),
    ).fit(X, y)
    assert pipe.score(X, y) > 0.95


@pytest.mark.parametrize("model", ["linear", "mlp"])
def test_fixed_random_state_reproduces_the_fit(model):
    X, y = make_linear(300)
    params = {
        "model": model,
        "hidden_units": 4,
        "batch_size": 30,
        "max_iter": 3,
        "bounds_X": BOUNDS_X,
        "bounds_y": BOUNDS_Y,
    }
    first = DPSEPRegressor(random_state=7, **params).fit(X, y)
    second = DPSEPRegressor(random_state=7, **params).fit(X, y)
    other = DPSEPRegressor(random_state=8, **params).fit(X, y)
    np.testing.assert_array_equal(first.predict(X), second.predict(X))
    assert not np.array_equal(first.predict(X), other.predict(X))


def test_mlp_results_do_not_depend_on_the_number_of_threads():
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has a single thread")
    X, y = make_linear(400)
    params = {
        "model": "mlp",
        "hidden_units": 6,
        "batch_size": 40,
        "max_iter": 3,
        "bounds_X": BOUNDS_X,
        "bounds_y": BOUNDS_Y,
        "random_state": 0,
    }
    previous = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        single = DPSEPRegressor(**params).fit(X, y)
        single_std = single.predict(X, return_std=True)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        multi = DPSEPRegressor(**params).fit(X, y)
        multi_std = multi.predict(X, return_std=True)
    finally:
        numba.set_num_threads(previous)
    np.testing.assert_array_equal(single.weights_mean_, multi.weights_mean_)
    np.testing.assert_array_equal(single_std, multi_std)


# 5. Bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, match",
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"damping": 0.0}, "damping"),
        ({"damping": 1.5}, "damping"),
        ({"model": "gp"}, "model"),
        ({"mean_update": "sgd"}, "mean_update"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate_schedule": "cosine"}, "learning_rate_schedule"),
        ({"averaging_fraction": 0.0}, "averaging_fraction"),
        ({"clip_norm": None, "epsilon": 1.0}, "clip_norm=None"),
        ({"bounds_X": (-1, 3, 5)}, "bounds_X must be a pair"),
        (
            {"bounds_X": ([-1, -1], [3, 3])},
            "bounds_X: lower and upper must be scalars or of length 5",
        ),
        ({"bounds_X": (3, -1)}, "bounds_X: every lower bound must be below"),
        ({"bounds_X": (1, 1)}, "bounds_X: every lower bound must be below"),
        ({"bounds_X": (-np.inf, 3)}, "bounds_X must be finite"),
        ({"bounds_y": (-6, np.nan)}, "bounds_y must be finite"),
        ({"bounds_y": (10, -6)}, "bounds_y: every lower bound must be below"),
    ],
)
def test_bad_parameters_are_rejected(params, match):
    X, y = make_linear(50)
    base = {"bounds_X": BOUNDS_X, "bounds_y": BOUNDS_Y, "max_iter": 1}
    with pytest.raises(ValueError, match=match):
        DPSEPRegressor(**{**base, **params}).fit(X, y)


def test_bad_input_is_rejected():
    X, y = make_linear(50)
    reg = DPSEPRegressor(bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y, max_iter=1)
    for bad in (np.nan, np.inf):
        X_bad = X.copy()
        X_bad[3, 1] = bad
        with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
            reg.fit(X_bad, y)
        y_bad = y.copy()
        y_bad[4] = bad
        with pytest.raises(ValueError, match="Input y contains (NaN|infinity)"):
            reg.fit(X, y_bad)
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
        reg.fit(X[:, 0], y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        reg.fit(X, y[:-1])
    # A constant target is fine, with or without bounds_y (a small
    # cross-validation fold can be constant). Without bounds_y it is only
    # centred, and without noise it is predicted.
    constant = DPSEPRegressor(epsilon=np.inf, bounds_X=BOUNDS_X, max_iter=5)
    mean, std = constant.fit(X, np.full(50, 3.0)).predict(X[:5], return_std=True)
    np.testing.assert_allclose(mean, 3.0, atol=0.05)
    assert np.all(np.isfinite(std))
    bounded = DPSEPRegressor(bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y, max_iter=1)
    mean = bounded.fit(X, np.full(50, 3.0)).predict(X[:5])
    assert np.all((mean >= BOUNDS_Y[0]) & (mean <= BOUNDS_Y[1]))
    reg.fit(X, y)
    with pytest.raises(ValueError, match="features"):
        reg.predict(X[:, :2])


def test_batch_size_none_uses_every_row_as_other_estimators_do():
    X, y = make_linear(200)
    params = {"model": "mlp", "mean_update": "sep", "hidden_units": 4, "max_iter": 3,
              "random_state": 0, "bounds_X": BOUNDS_X, "bounds_y": BOUNDS_Y}
    full = DPSEPRegressor(batch_size=None, **params).fit(X, y)
    assert full.sample_rate_ == 1.0
    # Without noise, as a batch of every row (the same updates, deterministic).
    reference = DPSEPRegressor(batch_size=200, **params).fit(X, y)
    np.testing.assert_array_equal(full.predict(X), reference.predict(X))
    private = DPSEPRegressor(batch_size=None, epsilon=1.0, **params).fit(X, y)
    assert private.sample_rate_ == 1.0 and private.n_releases_ == 3


@pytest.mark.parametrize("model", ["linear", "mlp"])
def test_values_outside_the_bounds_are_clipped_and_said_only_without_privacy(model):
    X, y = make_linear(200)
    X[0, 0] = 100.0
    params = {
        "model": model,
        "hidden_units": 4,
        "batch_size": 50,
        "max_iter": 2,
        "bounds_X": BOUNDS_X,
        "bounds_y": BOUNDS_Y,
        "random_state": 0,
        "epsilon": float("inf"),
    }
    with pytest.warns(UserWarning, match="outside bounds_X; they were clipped"):
        reg = DPSEPRegressor(**params).fit(X, y)
    X_in = X.copy()
    X_in[0, 0] = BOUNDS_X[1]
    # The fit saw the clipped row.
    reference = DPSEPRegressor(**params).fit(X_in, y)
    np.testing.assert_array_equal(reg.weights_mean_, reference.weights_mean_)
    y_out = y.copy()
    y_out[1] = -50.0
    with pytest.warns(UserWarning, match="outside bounds_y; they were clipped"):
        DPSEPRegressor(**params).fit(X_in, y_out)
    # A private fit clips as silently as it fits rows inside the bounds:
    # whether a record lies outside them is not released.
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*outside bounds")
        DPSEPRegressor(**{**params, "epsilon": 1.0}).fit(X, y_out)
        # ...and so does fit_transform on its training rows, which transform
        # alone would warn about.
        private = DPSEPRegressor(**{**params, "epsilon": 1.0})
        moments = private.fit_transform(X, y_out)
    with pytest.warns(UserWarning, match="outside bounds_X"):
        np.testing.assert_array_equal(moments, private.transform(X))
    # Prediction clips too: a point beyond the bound predicts as the bound.
    with pytest.warns(UserWarning, match="outside bounds_X"):
        outside = reg.predict(X[:1], return_std=True)
    np.testing.assert_array_equal(outside, reg.predict(X_in[:1], return_std=True))


# 6. Predictions -----------------------------------------------------------------


def test_predict_transform_and_score_on_a_nonlinear_problem():
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, size=(1000, 1))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=1000)
    reg = DPSEPRegressor(
        model="mlp",
        hidden_units=20,
        batch_size=20,
        max_iter=20,
        epsilon=INF,
        bounds_X=(-1, 1),
        bounds_y=(-1.5, 1.5),
        random_state=0,
    ).fit(X, y)
    X_test = np.linspace(-0.95, 0.95, 50)[:, None]
    mean, std = reg.predict(X_test, return_std=True)
    assert np.all(std > 0)
    np.testing.assert_array_equal(reg.transform(X_test), np.column_stack([mean, std]))
    np.testing.assert_array_equal(reg.predict(X_test), mean)
    assert reg.transform(X_test).shape == (50, 2)
    y_test = np.sin(3 * X_test[:, 0])
    score = reg.score(X_test, y_test)
    residual = y_test - mean
    assert score == pytest.approx(
        1 - residual @ residual / np.sum((y_test - y_test.mean()) ** 2)
    )
    assert score > 0.9
    # The predictive std includes the observation noise (0.1).
    assert np.all(std > 0.05)


def test_private_linear_fit_recovers_the_coefficients():
    X, y = make_linear(20000, seed=1)
    params = {
        "model": "linear",
        "clip_norm": 1.0,
        "bounds_X": BOUNDS_X,
        "bounds_y": BOUNDS_Y,
        "noise_variance": NOISE_STD**2,
    }
    # The bounds' map alone (no location and scale release), as without noise.
    private = DPSEPRegressor(epsilon=1.0, random_state=0, scaling_share=0, **params).fit(X, y)
    clipped = DPSEPRegressor(epsilon=INF, **params).fit(X, y)
    assert private.privacy_spent_[0] <= 1.0
    truth = np.r_[COEF, INTERCEPT]
    # The clipped noise-free posterior contains the truth.
    clipped_mean = np.r_[clipped.coef_, clipped.intercept_]
    assert np.all(
        np.abs(clipped_mean - truth) < 5 * np.sqrt(np.diag(clipped.coef_covariance_))
    )
    # Privacy noise: each release carries noise of std sigma C (C = 1), the
    # factor damping sigma C / n per update, and each natural parameter of
    # the posterior (n times the average of the last 20 of the 40 factors)
    # independent noise of std tau, from that AR(1) recursion of decay
    # damping q (q = 1). To first order the scaled weights move by
    # S (dh - dP w), of covariance at most tau^2 (1 + |w|^2) S^2 (S the scaled
    # posterior covariance); mapped to the original units by T.
    assert private.damping_ == 0.1 and private.sample_rate_ == 1.0
    assert private.n_releases_ == 40
    transform = scaled_to_original(5, np.full(5, 1.0), np.full(5, 2.0), 8.0)
    n = X.shape[0]
    factor_noise = private.noise_multiplier_ * private.damping_ * 1.0 / n
    tau = n * sep._factor_noise_std(factor_noise, private.damping_, 40, 20)[1]
    scaled_cov = np.linalg.solve(
        transform, np.linalg.solve(transform, clipped.coef_covariance_).T
    )
    spread = transform @ scaled_cov @ scaled_cov @ transform.T
    weights = np.linalg.solve(transform, clipped_mean - np.r_[np.zeros(5), 2.0])
    noise_std = tau * math.sqrt(1 + weights @ weights) * np.sqrt(np.diag(spread))
    private_mean = np.r_[private.coef_, private.intercept_]
    assert np.all(np.abs(private_mean - clipped_mean) < 5 * noise_std)
    # And the coefficients are recovered to about a tenth of their scale.
    assert np.all(np.abs(private.coef_ - COEF) < 0.1)


def test_private_linear_fit_learns_the_noise_level_with_weighted_gamma(monkeypatch):
    # With the noise level learned, the Gamma's coordinates are weighted by
    # (tau, tau**2) in the clipped, noised vector. Unweighted they are a tiny
    # part of it: the noise swamps them and the noise variance comes out
    # hundreds of times too large (the coefficients, denoised, survive).
    X, y = make_linear(20000, seed=1)
    params = {"epsilon": 1.0, "bounds_X": BOUNDS_X, "bounds_y": BOUNDS_Y, "damping": 1.0}
    weighted = DPSEPRegressor(model="linear", random_state=0, **params).fit(X, y)
    assert np.all(np.abs(weighted.coef_ - COEF) < 0.1)
    # Clipping tempers the rows' likelihood, so the Gamma(2, 0.1) prior keeps
    # some weight: the estimate is too large, but within a small factor.
    assert NOISE_STD**2 < weighted.noise_variance_ < 10 * NOISE_STD**2
    monkeypatch.setattr(sep._LinearModel, "release_weights", lambda self, cavity: None)
    unweighted = DPSEPRegressor(model="linear", random_state=0, **params).fit(X, y)
    assert unweighted.noise_variance_ > 100 * NOISE_STD**2


def test_release_weights_put_the_gamma_on_a_par_and_stay_bounded():
    model = sep._LinearModel(2, 1.0, None)
    cavity = model.prior()
    cavity[-2:] = (50.0, 0.5)  # mean noise precision 100
    weights = model.release_weights(cavity)
    np.testing.assert_array_equal(weights[:-2], 1.0)
    np.testing.assert_allclose(weights[-2:], [100.0, 1e4])
    cavity[-2:] = (2.0, 1e9)
    np.testing.assert_allclose(model.release_weights(cavity)[-2:], [1.0, 1.0])
    cavity[-2:] = (1e9, 1.0)
    np.testing.assert_allclose(model.release_weights(cavity)[-2:], [1e4, 1e8])
    assert sep._LinearModel(2, 1.0, 0.5).release_weights(cavity) is None
    assert sep._NetworkModel(2, 3, 1.0, None).release_weights(cavity) is None


def test_verbose_reports_each_pass(capsys):
    X, y = make_linear(200)
    DPSEPRegressor(
        max_iter=3,
        verbose=1,
        prior_precision=1.0,
        bounds_X=BOUNDS_X,
        bounds_y=BOUNDS_Y,
        random_state=0,
    ).fit(X, y)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    for i, line in enumerate(lines, start=1):
        assert re.fullmatch(
            rf"DPSEPRegressor: pass {i} of 3, "
            r"epsilon spent [\d.]+(e[+-]\d+)? of 1, elapsed [\d.]+ s, ETA ([\d.]+ s|\?)",
            line,
        ), line
    epsilons = [float(re.search(r"epsilon spent (\S+) of", line)[1]) for line in lines]
    assert epsilons[0] < epsilons[1] < epsilons[2] <= 1.0


def test_verbose_last_line_counts_the_noise_variance_release(capsys):
    X, y = make_sine(300)
    reg = DPSEPRegressor(max_iter=3, batch_size=30, verbose=2, **ADAM_PARAMS).fit(X, y)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("DPSEPRegressor: pass 3 of 3, ")
    # The residual release comes before the last line: it shows all that
    # was spent.
    shown = float(re.search(r"epsilon spent (\S+) of", last)[1])
    assert shown == float(f"{reg.privacy_spent_[0]:.3g}")
    assert reg.accountant_.history[-1][1] == 1.0  # the preliminary release was last


def test_adam_refuses_a_scaling_share_that_leaves_no_budget():
    X, y = make_sine(100)
    reg = DPSEPRegressor(scaling_share=0.99, max_iter=1, **ADAM_PARAMS)
    with pytest.raises(ValueError, match="scaling_share=0.99 leaves no budget"):
        reg.fit(X, y)
    assert not hasattr(reg, "privacy_spent_")  # refused before anything was planned
    # A fixed noise level needs no residual release: the share is allowed.
    DPSEPRegressor(scaling_share=0.99, max_iter=1, noise_variance=0.01, **ADAM_PARAMS).fit(X, y)


@pytest.mark.parametrize("adam_sites", ["means", "cavity"])
def test_adam_drops_a_row_whose_sites_overflow_silently(adam_sites, monkeypatch):
    # A row's released vector computed from huge finite sites can overflow:
    # that row contributes nothing (its own map, so the bound holds), without
    # a warning or an error that would depend on the data.
    if adam_sites == "cavity":
        original = sep._NetworkModel.sites

        def overflowing(model, X, y, cavity, noise_std=0.0):
            sites = original(model, X, y, cavity, noise_std)
            if sites.shape[1] == 2 * model.n_weights + 2 and X.shape[0] > 1:
                # shift - mean * precision overflows wherever |mean| > 0.2.
                sites[0, : model.n_weights] = -1.5e308
                sites[0, model.n_weights : 2 * model.n_weights] = 1.5e308
            return sites

        monkeypatch.setattr(sep._NetworkModel, "sites", overflowing)
    events = record_clips_and_releases(monkeypatch)
    if adam_sites == "means":
        # Inside the record's spy, so that its reference rows see the same input.
        recorded = sep._NetworkModel.clipped_mean_site_sum

        def overflowing(model, X, y, rows, *args):
            if rows.size > 1:
                # The batch's first row at 1e300: its squared gradients
                # overflow in the kernel.
                X = X.copy()
                X[rows[0]] = 1e300 * np.where(np.arange(X.shape[1]) % 2, -1.0, 1.0)
            return recorded(model, X, y, rows, *args)

        monkeypatch.setattr(sep._NetworkModel, "clipped_mean_site_sum", overflowing)
    X, y = make_sine(300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # the test mode's
        reg = DPSEPRegressor(
            epsilon=1.0, batch_size=30, max_iter=2, adam_sites=adam_sites, **ADAM_PARAMS
        ).fit(X, y)
    assert np.all(np.isfinite(reg.weights_mean_))
    assert update_release_violations(events, 1.0) == []
    clipped = [e[1] for e in events if e[0] == "clip" and e[1].shape[0] > 1]
    assert clipped
    assert any(np.all(rows[0] == 0.0) for rows in clipped)


def test_denoise_weights_limits_and_formula():
    rng = np.random.RandomState(0)
    prior_precision = 2.0
    variance = rng.uniform(0.01, 0.5, size=50)
    mean = rng.normal(size=50)
    # No noise: unchanged.
    m, v = sep._denoise_weights(mean, variance, np.zeros(50), prior_precision)
    np.testing.assert_array_equal(m, mean)
    np.testing.assert_array_equal(v, variance)
    # A weight the data left at its prior carries nothing but noise: mean 0.
    m, v = sep._denoise_weights(
        np.array([3.0]), np.array([0.5]), np.array([1.0]), prior_precision
    )
    assert m[0] == 0.0 and v[0] == 0.5
    # Otherwise the linear shrinkage of a signal of variance 1/prior - v
    # observed with noise variance s^2, checked by simulation.
    spread = 1 / prior_precision - 0.1
    signal = rng.normal(scale=math.sqrt(spread), size=200_000)
    observed = signal + rng.normal(scale=0.3, size=signal.size)
    m, v = sep._denoise_weights(
        observed, np.full(signal.size, 0.1), np.full(signal.size, 0.3), prior_precision
    )
    slope = np.polyfit(observed, signal, 1)[0]
    assert m[0] / observed[0] == pytest.approx(slope, abs=0.01)
    assert v[0] - 0.1 == pytest.approx(np.mean((signal - m) ** 2), rel=0.02)


def test_factor_noise_std_matches_simulation():
    rng = np.random.RandomState(1)
    decay, n_steps, first = 0.05, 400, 200
    running, averaged = sep._factor_noise_std(1.0, decay, n_steps, first)
    noise = rng.normal(size=(n_steps, 20_000))
    factor = np.zeros(noise.shape[1])
    total = np.zeros_like(factor)
    for step in range(n_steps):
        factor = (1 - decay) * factor + noise[step]
        if step >= first:
            total += factor
    assert np.std(factor) == pytest.approx(running, rel=0.03)
    assert np.std(total / (n_steps - first)) == pytest.approx(averaged, rel=0.03)


@pytest.mark.parametrize(
    "params, expected_damping, expected_batch",
    [
        ({"model": "linear", "max_iter": 40}, 0.1, 400),
        ({"model": "linear", "max_iter": 2}, 1.0, 400),
        ({"model": "mlp", "max_iter": 1}, 1.0, 400 // 32),
        ({"model": "mlp", "batch_size": 100, "max_iter": 8}, 0.5, 100),
        ({"model": "mlp", "batch_size": 64, "damping": 0.9, "max_iter": 1}, 0.9, 64),
        ({"model": "mlp", "batch_size": 200}, 0.1, 200),
    ],
)
@pytest.mark.parametrize("noise_variance", [None, 0.5])
def test_auto_settings_under_noise_and_the_noise_they_set(
    monkeypatch, params, expected_damping, expected_batch, noise_variance
):
    spy = ReleaseSpy(monkeypatch)
    X, y = make_linear(400)
    reg = DPSEPRegressor(
        hidden_units=2, bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y, random_state=0,
        noise_variance=noise_variance, **params,
    ).fit(X, y)
    # The network under noise moves its means by Adam; with the noise level
    # learned, one preliminary release (the residuals') is planned besides.
    network = params["model"] == "mlp"
    assert reg.mean_update_ == ("adam" if network else "sep")
    n_preliminary = int(network and noise_variance is None)
    assert reg._engine.plan.n_preliminary_releases == n_preliminary
    preceded_by = ()
    if n_preliminary:
        preceded_by = ((reg._engine.plan.preliminary_noise_multiplier, 1.0, 1),)
    # Under noise, "auto" damping is min(1, 4 / max_iter), and max_iter="auto"
    # is 40 passes whatever the number of rows.
    assert reg.damping_ == expected_damping
    assert reg.n_iter_ == params.get("max_iter", 40)
    assert reg.sample_rate_ == expected_batch / 400
    # The plan they set: max_iter passes of ceil(400 / batch) releases, the
    # noise calibrated for all of them (replacing one row), each release of
    # sensitivity clip_norm (default 1); the factor's noise is then
    # noise_multiplier * damping * clip_norm / n.
    sample_rate = expected_batch / 400
    n_releases = reg.n_iter_ * math.ceil(400 / expected_batch)
    assert len(spy.calls) == reg.n_releases_ == n_releases + n_preliminary
    assert reg.noise_multiplier_ == calibrate_noise_multiplier(
        1.0,
        1e-5,
        sample_rate=sample_rate,
        steps=n_releases,
        neighbouring_relation="substitution",
        preceded_by=preceded_by,
    )
    for call in spy.calls:
        assert call["sensitivities"] == [1.0]
        assert call["noise_multiplier"] == reg.noise_multiplier_


@pytest.mark.parametrize(
    "params, expected_damping, expected_batch",
    [
        ({"model": "linear"}, 1.0, 400),
        ({"model": "mlp"}, 1.0, 1),
        ({"model": "mlp", "batch_size": 8}, 1.0, 8),
        ({"model": "mlp", "batch_size": 32}, 0.5, 32),
    ],
)
def test_auto_settings_without_noise(params, expected_damping, expected_batch):
    X, y = make_linear(400)
    reg = DPSEPRegressor(
        hidden_units=2, max_iter=1, epsilon=np.inf, clip_norm=None, random_state=0,
        **params,
    ).fit(X, y)
    assert reg.damping_ == expected_damping
    assert reg.sample_rate_ == expected_batch / 400


def test_auto_model_and_clip_norm_follow_epsilon():
    X, y = make_linear(300)
    bounds = {
        "bounds_X": BOUNDS_X,
        "bounds_y": BOUNDS_Y,
        "max_iter": 2,
        "random_state": 0,
    }
    private = DPSEPRegressor(epsilon=1.0, hidden_units=3, **bounds).fit(X, y)
    clean = DPSEPRegressor(epsilon=INF, hidden_units=3, **bounds).fit(X, y)
    # The network with or without noise; clipping only under noise.
    assert (private.model_, private.clip_norm_) == ("mlp", 1.0)
    assert (clean.model_, clean.clip_norm_) == ("mlp", None)
    # "auto" is exactly the explicit setting it names (same seeded stream).
    explicit_private = DPSEPRegressor(
        epsilon=1.0, model="mlp", clip_norm=1.0, hidden_units=3, **bounds
    ).fit(X, y)
    explicit_clean = DPSEPRegressor(
        epsilon=INF, model="mlp", clip_norm=None, hidden_units=3, **bounds
    ).fit(X, y)
    np.testing.assert_array_equal(private.weights_mean_, explicit_private.weights_mean_)
    np.testing.assert_array_equal(clean.weights_mean_, explicit_clean.weights_mean_)
    # Explicit values are kept whatever epsilon is.
    kept = DPSEPRegressor(epsilon=INF, model="linear", clip_norm=0.5, **bounds)
    kept.fit(X, y)
    assert (kept.model_, kept.clip_norm_) == ("linear", 0.5)


@pytest.mark.parametrize(
    "n_samples, params, expected_passes",
    [
        (300, {}, 400),  # ceil(200_000 / 300) = 667, capped at 400
        (1000, {}, 200),
        (6000, {}, 40),  # ceil(200_000 / 6000) = 34, raised to 40
        (300, {"model": "linear"}, 40),
        (300, {"max_iter": 7}, 7),
    ],
)
def test_auto_passes_without_noise_grow_on_small_data(n_samples, params, expected_passes):
    X, y = make_linear(n_samples)
    reg = DPSEPRegressor(epsilon=INF, hidden_units=1, random_state=0, **params).fit(X, y)
    assert reg.n_iter_ == expected_passes
    assert reg.n_releases_ == expected_passes * math.ceil(1.0 / reg.sample_rate_)


def load_uci(name):
    folder = UCI_DIR / name
    if not (folder / "data.txt").exists():
        pytest.skip("UCI data absent")
    data = np.loadtxt(folder / "data.txt")
    features = np.atleast_1d(np.loadtxt(folder / "index_features.txt", dtype=int))
    target = int(np.loadtxt(folder / "index_target.txt", dtype=int))
    return data[:, features], data[:, target]


def test_more_passes_settle_the_network_on_small_real_data():
    # UCI energy, 691 training rows: the factor moves by a row or two per
    # update, and 40 passes stop it well short of where it settles;
    # max_iter="auto" (290 passes) roughly halves the held-out RMSE.
    X, y = load_uci("energy")
    order = np.random.RandomState(1).permutation(y.size)
    train, test = order[: round(0.9 * y.size)], order[round(0.9 * y.size) :]
    auto = DPSEPRegressor(epsilon=INF, random_state=0)
    short = clone(auto).set_params(max_iter=40)
    errors = []
    for reg in (auto, short):
        reg.fit(X[train], y[train])
        errors.append(np.sqrt(np.mean((reg.predict(X[test]) - y[test]) ** 2)))
    assert auto.n_iter_ == math.ceil(200_000 / train.size)
    assert errors[0] < 0.7 * errors[1]


def test_defaults_without_noise_fit_raw_data_as_standardized_data():
    # A nonlinear target on raw units far from [-1, 1]: the defaults (no
    # bounds, the network, no clipping) standardize inside the estimator, so
    # the fit on raw data is the fit on standardized data mapped back.
    rng = np.random.RandomState(0)
    z = rng.uniform(-2.0, 2.0, size=(400, 2))
    target = np.sin(2.0 * z[:, 0]) + 0.5 * z[:, 1] ** 2 + 0.05 * rng.normal(size=400)
    X_raw = 1000.0 + z * [300.0, 0.02]
    y_raw = 5000.0 + 2000.0 * target
    X_std = (X_raw - X_raw.mean(axis=0)) / X_raw.std(axis=0)
    y_std = (y_raw - y_raw.mean()) / y_raw.std()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # conftest
        # 40 passes keep the test short (the pass count is tested above).
        raw = DPSEPRegressor(epsilon=INF, max_iter=40, random_state=0).fit(X_raw, y_raw)
    standardized = DPSEPRegressor(epsilon=INF, max_iter=40, random_state=0).fit(X_std, y_std)
    np.testing.assert_allclose(
        raw.predict(X_raw),
        y_raw.mean() + y_raw.std() * standardized.predict(X_std),
        rtol=1e-6,
    )
    # And the network fits what a linear model cannot: R^2 on the training
    # data well above the linear model's.
    linear = DPSEPRegressor(epsilon=INF, model="linear").fit(X_raw, y_raw)
    assert raw.score(X_raw, y_raw) > 0.9 > linear.score(X_raw, y_raw) + 0.3


def test_linear_denoising_shrinks_to_the_prior_as_the_noise_grows():
    rng = np.random.RandomState(0)
    A = rng.normal(size=(4, 4))
    covariance = A @ A.T / 40 + 0.05 * np.eye(4)
    mean = rng.normal(size=4)
    same_mean, same_cov = sep._denoise_linear(mean, covariance, 1e-12, 5.0)
    np.testing.assert_allclose(same_mean, mean, rtol=1e-9)
    np.testing.assert_allclose(same_cov, covariance, atol=1e-12)
    shrunk, wider = sep._denoise_linear(mean, covariance, 1e6, 5.0)
    # Noise far above the prior spread: the prior (variance 1/5, and 1 for the
    # intercept, last) is all that is left.
    np.testing.assert_allclose(shrunk, 0.0, atol=1e-6)
    np.testing.assert_allclose(
        np.diag(wider - covariance), [0.2, 0.2, 0.2, 1.0], rtol=1e-6
    )
    middle, _ = sep._denoise_linear(mean, covariance, 1.0, 5.0)
    assert np.linalg.norm(middle) < np.linalg.norm(mean)


@pytest.mark.parametrize("model", ["linear", "mlp"])
@pytest.mark.parametrize("epsilon", [0.01, 0.03, 0.1])
def test_tiny_budgets_fit_and_predict_inside_bounds_y(model, epsilon):
    X, y = make_linear(300)
    reg = DPSEPRegressor(
        model=model, epsilon=epsilon, bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y,
        max_iter=5, random_state=0,
    ).fit(X, y)
    # The network under noise runs its default, Adam.
    assert reg.mean_update_ == ("adam" if model == "mlp" else "sep")
    prediction, std = reg.predict(X, return_std=True)
    assert np.all(np.isfinite(prediction)) and np.all(np.isfinite(std) & (std > 0))
    assert np.all((prediction >= BOUNDS_Y[0]) & (prediction <= BOUNDS_Y[1]))


@pytest.mark.parametrize("model", ["auto", "linear"])
@pytest.mark.parametrize("name", ["yacht", "concrete", "wine-quality-red"])
def test_private_fit_no_worse_than_the_mean_with_min_max_bounds(name, model):
    # "auto" is the network (Adam under noise).
    X, y = load_uci(name)
    ratios = []
    for seed in range(5):
        order = np.random.RandomState(seed).permutation(y.size)
        train, test = order[: round(0.9 * y.size)], order[round(0.9 * y.size) :]
        reg = DPSEPRegressor(
            model=model,
            epsilon=1.0,
            bounds_X=(X.min(axis=0), X.max(axis=0)),
            bounds_y=(y.min(), y.max()),
            random_state=seed,
        ).fit(X[train], y[train])
        rmse = np.sqrt(np.mean((reg.predict(X[test]) - y[test]) ** 2))
        ratios.append(rmse / y[test].std())
    # No worse than predicting the mean, on average over the splits.
    assert np.mean(ratios) <= 1.0


@pytest.mark.parametrize("model", ["auto", "linear", "mlp"])
@pytest.mark.parametrize("clip_norm", ["auto", 0.3])
def test_every_noisy_release_is_a_sum_of_clipped_sites(model, clip_norm, monkeypatch):
    # Under noise the clip is always on: whatever model, clip_norm and
    # mean_update resolve to, each update's release declares the finite
    # clip_norm_ as its sensitivity and is the sum of the rows that the
    # clip_rows call just before it bounded by that norm (exactly, in
    # rationals). The preliminary releases have tests of their own.
    events = record_clips_and_releases(monkeypatch)
    X, y = make_linear(60)
    X = X * 50.0  # far beyond the bounds: many sites clipped
    # Targets at either bound: large residuals, large gradients.
    y = np.where(np.arange(60) % 2, BOUNDS_Y[0], BOUNDS_Y[1])
    reg = DPSEPRegressor(
        epsilon=1.0,
        model=model,
        clip_norm=clip_norm,
        hidden_units=3,
        max_iter=2,
        batch_size=20,
        bounds_X=BOUNDS_X,
        bounds_y=BOUNDS_Y,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        reg.fit(X, y)
    assert reg.noise_multiplier_ > 0
    assert reg.clip_norm_ == (1.0 if clip_norm == "auto" else clip_norm)
    updates = [e for e in events if e[0] == "release" and not e[3]]
    preliminary = [e for e in events if e[0] == "release" and e[3]]
    assert len(updates) == reg.n_iter_ * 3 and len(preliminary) == int(reg.model_ == "mlp")
    assert len(updates) + len(preliminary) == reg.n_releases_
    assert update_release_violations(events, reg.clip_norm_) == []
    clipped = [e[1] for e in events if e[0] == "clip" and e[1].shape[0] > 1]
    largest = max(np.linalg.norm(rows, axis=1).max() for rows in clipped)
    assert largest > 0.99 * reg.clip_norm_  # some sites were clipped


# 6. mean_update="adam" -------------------------------------------------------------


def make_sine(n_samples, seed=0, noise_std=0.1):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-1, 1, size=(n_samples, 2))
    y = np.sin(3 * X[:, 0]) + 0.5 * X[:, 1] + noise_std * rng.normal(size=n_samples)
    return X, y


ADAM_PARAMS = {
    "model": "mlp",
    "mean_update": "adam",
    "hidden_units": 10,
    "bounds_X": (-1, 1),
    "bounds_y": (-2, 2),
    "random_state": 0,
}


def update_release_violations(events, clip_norm):
    """What breaks the updates' contract in a record of clip_rows calls and
    releases (:func:`record_clips_and_releases`): every release of the
    updates is the sum of rows the clip_rows call just before it bounded by
    ``clip_norm`` (exactly, in rationals) and declares that sensitivity."""
    violations = []
    bound = Fraction(clip_norm) ** 2
    for i, event in enumerate(events):
        if event[0] != "release" or event[3]:
            continue
        _, block, sensitivities, _ = event
        if sensitivities != [clip_norm]:
            violations.append(f"release {i}: sensitivities {sensitivities}")
        kind, rows, max_norm = events[i - 1][:3] if i else (None, None, None)
        if kind != "clip" or max_norm != clip_norm:
            violations.append(f"release {i}: not preceded by a clip to {clip_norm}")
            continue
        if not all(sum(Fraction(float(v)) ** 2 for v in row) <= bound for row in rows):
            violations.append(f"release {i}: a row beyond the clip norm")
        if not np.array_equal(block, rows.sum(axis=0)):
            violations.append(f"release {i}: not the sum of the clipped rows")
    return violations


def record_clips_and_releases(monkeypatch, clip=None):
    """Every clip_rows call of sep (``clip`` in place of the real one) and every release.

    The network's updates at the weight means clip and sum their rows inside
    one kernel (``clipped_mean_site_sum``), which never holds them all: for
    those the record holds the rows the unfused path makes of the same batch
    (``mean_sites``, the precision block weighted, rows that are not finite
    zeroed, then ``clip_rows`` to the kernel's norm), so that the check that
    the release is their sum compares the kernel with that path, bit for bit.
    """
    events = []
    original_clip = sep.clip_rows if clip is None else clip
    original_release = PrivacyEngine.release
    original_fused = sep._NetworkModel.clipped_mean_site_sum

    def clip_spy(rows, max_norm):
        out = original_clip(rows, max_norm)
        events.append(("clip", np.array(out, copy=True), max_norm))
        return out

    def fused_spy(model, X, y, rows, mean, cavity, precision_weight, clip_arguments):
        total = original_fused(model, X, y, rows, mean, cavity, precision_weight, clip_arguments)
        sites = model.mean_sites(X[rows], y[rows], mean, cavity)
        with np.errstate(over="ignore", invalid="ignore"):
            sites[:, : model.n_weights] *= precision_weight
        sites[~np.isfinite(sites).all(axis=1)] = 0.0
        max_norm = clip_arguments[0]
        clipped = original_clip(sites, max_norm) if rows.size else sites
        events.append(("clip", np.array(clipped, copy=True), max_norm))
        return total

    def release_spy(engine, blocks, sensitivities, **kwargs):
        events.append(
            (
                "release",
                np.array(blocks[0], copy=True),
                list(sensitivities),
                kwargs.get("preliminary", False),
            )
        )
        return original_release(engine, blocks, sensitivities, **kwargs)

    monkeypatch.setattr(sep, "clip_rows", clip_spy)
    monkeypatch.setattr(sep._NetworkModel, "clipped_mean_site_sum", fused_spy)
    monkeypatch.setattr(PrivacyEngine, "release", release_spy)
    return events


@pytest.mark.parametrize("adam_sites, n_warmup", [("cavity", 4), ("means", 0)])
def test_adam_releases_are_sums_of_clipped_rows(adam_sites, n_warmup, monkeypatch):
    events = record_clips_and_releases(monkeypatch)
    X, y = make_sine(300)
    X = X * 30.0  # far beyond the bounds: clipped inputs, large sites
    reg = DPSEPRegressor(
        epsilon=1.0, clip_norm=0.3, batch_size=30, max_iter=4, adam_sites=adam_sites,
        **ADAM_PARAMS,
    )
    reg.fit(X, y)
    assert reg.model_ == "mlp" and reg.noise_multiplier_ > 0
    main = [e for e in events if e[0] == "release" and not e[3]]
    assert len(main) == 4 * 10 == reg.accountant_.steps - 1
    # After the SEP warm-up (a tenth of the 40 updates; none with the sites
    # at the means) the released vector is [precision sites, gradients]:
    # two blocks of the weights, no Gamma.
    n_weights = reg._model.n_weights
    assert [e[1].size for e in main] == (
        [2 * n_weights + 2] * n_warmup + [2 * n_weights] * (40 - n_warmup)
    )
    assert update_release_violations(events, 0.3) == []
    clips = [e for e in events if e[0] == "clip" and e[1].shape[0] > 1]
    assert max(np.linalg.norm(e[1], axis=1).max() for e in clips) > 0.299


def test_private_network_defaults_release_gradients_at_the_means_from_the_start(monkeypatch):
    # The defaults under noise: the network, Adam on the means, the sites at
    # the weight means (no SEP warm-up releasing the Gamma's site).
    events = record_clips_and_releases(monkeypatch)
    X, y = make_sine(300)
    reg = DPSEPRegressor(
        epsilon=1.0, hidden_units=10, bounds_X=(-1, 1), bounds_y=(-2, 2), batch_size=30,
        max_iter=2,
    ).fit(X, y)
    assert (reg.model_, reg.mean_update_) == ("mlp", "adam")
    main = [e for e in events if e[0] == "release" and not e[3]]
    assert len(main) == 2 * 10
    assert {e[1].size for e in main} == {2 * reg._model.n_weights}
    assert update_release_violations(events, 1.0) == []


@pytest.mark.parametrize("adam_sites", ["cavity", "means"])
def test_adam_release_check_catches_an_unclipped_gradient(adam_sites, monkeypatch):
    # The contract check of the test above, on a deliberately broken variant
    # that lets the Adam phase's rows through unclipped: caught. With the
    # sites at the cavity the break is in clip_rows (rows beyond the norm);
    # at the means, where the rows are clipped and summed inside one kernel,
    # it is a kernel that sums them unclipped (releases that are not the sum
    # of the record's clipped rows).
    from skprivfact.mechanisms import clip_rows

    n_weights = 10 * (2 + 1) + 10 + 1  # ADAM_PARAMS' network on 2 inputs
    if adam_sites == "cavity":

        def unclipped_gradients(rows, max_norm):
            # The warm-up's sites have 2 P + 2 columns, the Adam rows 2 P.
            if rows.shape[0] > 1 and rows.shape[1] == 2 * n_weights:
                return np.array(rows, copy=True)
            return clip_rows(rows, max_norm)

        events = record_clips_and_releases(monkeypatch, clip=unclipped_gradients)
        expected = "beyond the clip norm"
    else:

        def unclipped_sum(X, y, rows, weight_mean, n_hidden, noise_variance,
                          precision_weight, *clip_arguments):
            sites = mlp_mean_sites(X[rows], y[rows], weight_mean, n_hidden, noise_variance)
            sites[:, :n_weights] *= precision_weight
            return sites.sum(axis=0)

        monkeypatch.setattr(sep, "mlp_clipped_mean_site_sum", unclipped_sum)
        events = record_clips_and_releases(monkeypatch)
        expected = "not the sum of the clipped rows"
    X, y = make_sine(300)
    X = X * 30.0
    DPSEPRegressor(
        epsilon=1.0, clip_norm=0.3, batch_size=30, max_iter=4, adam_sites=adam_sites,
        **ADAM_PARAMS,
    ).fit(X, y)
    violations = update_release_violations(events, 0.3)
    assert violations and all(expected in v for v in violations)


@pytest.mark.parametrize("adam_sites", ["means", "cavity"])
def test_noise_variance_release_is_clipped_centred_residuals(adam_sites, monkeypatch):
    events = record_clips_and_releases(monkeypatch)
    # The posterior the release is computed for (with adam_sites="means" the
    # precisions are rescaled after it, which moves the predictive means).
    released_for = []
    original = sep._released_noise_site

    def recording(model, posterior, *args):
        released_for.append(posterior.copy())
        return original(model, posterior, *args)

    monkeypatch.setattr(sep, "_released_noise_site", recording)
    rng = np.random.RandomState(1)
    X, y = make_sine(400)
    # Targets at the bounds, of random sign: many residuals beyond the clip.
    y[:100] = 2.0 * rng.choice([-1.0, 1.0], size=100)
    reg = DPSEPRegressor(
        epsilon=1.0, batch_size=40, max_iter=3, adam_sites=adam_sites, **ADAM_PARAMS
    ).fit(X, y)
    preliminary = [e for e in events if e[0] == "release" and e[3]]
    assert len(preliminary) == 1 and events[-1] is preliminary[0]
    _, block, sensitivities, _ = preliminary[0]
    assert sensitivities == [1.0] and block.shape == (1,)
    # Each row's squared residual in scaled units (bounds_y mapped to
    # [-1, 1]) under the fitted means, clipped to 1, centred and scaled to
    # [-1, 1]; the means are those of the posterior the release was made
    # for, the means of the weights those of the fitted posterior.
    (posterior,) = released_for
    X_scaled = np.clip(X, -1, 1)
    mean = reg._model.predict_moments(posterior, X_scaled)[0]
    n_weights = reg._model.n_weights
    np.testing.assert_allclose(
        reg._model.moments(posterior)[0], reg._model.moments(reg._posterior)[0], rtol=1e-10
    )
    if adam_sites == "cavity":
        np.testing.assert_array_equal(posterior[: 2 * n_weights], reg._posterior[: 2 * n_weights])
    squared = (np.clip(mean, -1, 1) - y / 2.0) ** 2
    assert np.sum(squared > 1) > 10  # the clip acts
    contributions = (np.minimum(squared, 1.0) - 0.5) / 0.5
    assert np.all(np.abs(contributions) <= 1.0)
    np.testing.assert_allclose(block[0], contributions.sum(), rtol=1e-10)
    # Accounting: the updates, then one full-batch release with the plan's
    # preliminary multiplier, composed within epsilon.
    plan = reg._engine.plan
    assert plan.n_preliminary_releases == 1
    assert reg.accountant_.history == [(reg.noise_multiplier_, reg.sample_rate_, 1)] * 30 + [
        (plan.preliminary_noise_multiplier, 1.0, 1)
    ]
    assert 0.99 <= reg.privacy_spent_[0] <= 1.0
    pytest.importorskip("dp_accounting")
    tight = dp_accounting_pld_epsilon(reg.accountant_.history, "substitution", 1e-5)
    assert tight * (1 - 1e-6) <= reg.privacy_spent_[0] <= 1.5 * tight
    # The preliminary share is the noise variance release's alone.
    assert plan.preliminary_noise_multiplier == pytest.approx(
        calibrate_noise_multiplier(1.0, 1e-5, neighbouring_relation="substitution")
        / math.sqrt(sep._NOISE_VARIANCE_SHARE)
    )


@pytest.mark.secret_noise
def test_noise_variance_release_noise_has_the_preliminary_std(monkeypatch):
    # The release's noise (released minus clean) over many fits: normal with
    # std the preliminary multiplier (sensitivity 1), from secret randomness.
    spy = ReleaseSpy(monkeypatch)
    X, y = make_sine(200)
    noise = []
    for _ in range(40):
        reg = DPSEPRegressor(epsilon=2.0, batch_size=50, max_iter=1, **ADAM_PARAMS)
        reg.fit(X, y)
        call = spy.calls[-1]
        assert call["sensitivities"] == [1.0]
        noise.append(call["noisy"][0][0] - call["clean"][0][0])
    expected = reg._engine.plan.preliminary_noise_multiplier
    assert stats.kstest(np.array(noise) / expected, "norm").pvalue > 1e-4


def test_fixed_noise_variance_releases_no_residuals():
    X, y = make_sine(300)
    reg = DPSEPRegressor(
        epsilon=1.0, batch_size=30, max_iter=2, noise_variance=0.01, **ADAM_PARAMS
    ).fit(X, y)
    assert reg._engine.plan.n_preliminary_releases == 0
    assert reg.accountant_.steps == 20
    assert reg.noise_variance_ == pytest.approx(0.01)


def test_adam_with_the_scaling_release_shares_the_preliminary_budget():
    X, y = make_sine(20000)
    reg = DPSEPRegressor(
        epsilon=1.0, batch_size=2000, max_iter=1, scaling_share=0.1,
        **{**ADAM_PARAMS, "bounds_X": (-3, 3), "bounds_y": (-6, 6)},
    ).fit(X, y)
    plan = reg._engine.plan
    assert plan.n_preliminary_releases == 2
    # Two releases at one multiplier: each takes half of the summed shares.
    assert reg.scaling_share_ == pytest.approx((0.1 + sep._NOISE_VARIANCE_SHARE) / 2)
    assert plan.preliminary_noise_multiplier == pytest.approx(
        calibrate_noise_multiplier(1.0, 1e-5, steps=2, neighbouring_relation="substitution")
        / math.sqrt(0.1 + sep._NOISE_VARIANCE_SHARE)
    )
    assert 0.99 <= reg.privacy_spent_[0] <= 1.0


@pytest.mark.parametrize("adam_sites", ["cavity", "means"])
def test_adam_recovers_a_nonlinear_function_and_its_noise_level(adam_sites):
    X, y = make_sine(4000, noise_std=0.1)
    X_test, y_test = make_sine(1000, seed=1, noise_std=0.0)
    # (epsilon, clip_norm, bound on the test RMSE, range of the noise variance).
    # At epsilon 4 the noise variance release (2% of the budget, residuals
    # clipped to 1 in units of half bounds_y) carries noise of std about
    # 0.005 in y's units.
    for epsilon, clip_norm, rmse_bound, variance_range in [
        (INF, None, 0.07, (0.009, 0.015)),
        (4.0, 1.0, 0.1, (0.0, 0.03)),
    ]:
        reg = DPSEPRegressor(
            epsilon=epsilon, clip_norm=clip_norm, batch_size=200, max_iter=40,
            learning_rate=0.03, adam_sites=adam_sites, **ADAM_PARAMS,
        ).fit(X, y)
        rmse = np.sqrt(np.mean((reg.predict(X_test) - y_test) ** 2))
        assert rmse < rmse_bound, (epsilon, rmse)
        assert variance_range[0] < reg.noise_variance_ < variance_range[1], epsilon
        # A posterior, not a point: every weight keeps a positive variance
        # below the prior's.
        assert np.all(reg.weights_variance_ > 0) and np.all(reg.weights_variance_ < 1)
    # Plain SEP at the same budget and passes: Adam is better.
    sep_reg = DPSEPRegressor(
        epsilon=4.0, clip_norm=1.0, batch_size=200, max_iter=40,
        **{**ADAM_PARAMS, "mean_update": "sep"},
    ).fit(X, y)
    sep_rmse = np.sqrt(np.mean((sep_reg.predict(X_test) - y_test) ** 2))
    assert rmse < sep_rmse


@pytest.mark.parametrize("noise_variance", [None, 0.02])
def test_adam_at_the_means_uses_one_noise_variance_and_rescales_the_precisions(
    noise_variance, monkeypatch
):
    # Every fit's gradients are taken at the same noise variance (the
    # prior's, or the fixed one), never at one learned from noisy releases;
    # with the noise level learned, the precision sites are moved at the end
    # from that variance to the released one.
    used, scales = [], []
    original_sites = sep._NetworkModel.mean_sites
    original_factor = sep._AdamMeans.factor

    original_sum = sep._NetworkModel.clipped_mean_site_sum

    def sites_spy(self, X, y, mean, cavity):
        used.append(self.noise_var(cavity[-2], cavity[-1]))
        return original_sites(self, X, y, mean, cavity)

    def sum_spy(self, X, y, rows, mean, cavity, *args):
        used.append(self.noise_var(cavity[-2], cavity[-1]))
        return original_sum(self, X, y, rows, mean, cavity, *args)

    def factor_spy(self, model, precision_scale=1.0):
        scales.append(precision_scale)
        return original_factor(self, model, precision_scale)

    monkeypatch.setattr(sep._NetworkModel, "mean_sites", sites_spy)
    monkeypatch.setattr(sep._NetworkModel, "clipped_mean_site_sum", sum_spy)
    monkeypatch.setattr(sep._AdamMeans, "factor", factor_spy)
    X, y = make_sine(400)
    for epsilon in (1.0, INF):
        used.clear()
        scales.clear()
        reg = DPSEPRegressor(
            epsilon=epsilon, batch_size=40, max_iter=3, adam_sites="means",
            noise_variance=noise_variance, **ADAM_PARAMS,
        ).fit(X, y)
        scaled_noise = reg.noise_variance_ / reg.y_scale_**2
        if noise_variance is None:
            prior_shape, prior_rate = reg._model.prior()[-2:]
            assert set(used) == {prior_rate / (prior_shape - 1)}
            assert scales[-1] == pytest.approx(used[0] / scaled_noise)
            assert scales[-1] != pytest.approx(1.0)
        else:
            assert used and used == pytest.approx([scaled_noise] * len(used))
            assert scales == [1.0]


def record_adam_steps(monkeypatch):
    """Patch Adam's update to record, per update, the move of the weight means,
    Adam's bias-corrected direction m / (sqrt(v) + eps) after it, and the
    number of updates planned."""
    records = []
    original = sep._AdamMeans.update

    def recording_update(self, *args, **kwargs):
        before = self.mean.copy()
        original(self, *args, **kwargs)
        n = self.n_updates
        direction = (self.first_moment / (1.0 - self._BETA1**n)) / (
            np.sqrt(self.second_moment / (1.0 - self._BETA2**n)) + self._EPS
        )
        records.append((self.mean - before, direction, self.n_updates_planned))

    monkeypatch.setattr(sep._AdamMeans, "update", recording_update)
    return records


@pytest.mark.parametrize("epsilon", [INF, 1.0])
@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_learning_rate_schedule_sets_every_adam_step(epsilon, schedule, monkeypatch):
    X, y = make_sine(600, noise_std=0.1)
    learning_rate = 0.3
    records = record_adam_steps(monkeypatch)
    DPSEPRegressor(
        **ADAM_PARAMS, epsilon=epsilon, batch_size=60, max_iter=20,
        learning_rate=learning_rate, learning_rate_schedule=schedule,
    ).fit(X, y)
    n_updates = len(records)
    assert n_updates > 100
    assert all(planned == n_updates for _, _, planned in records)
    # The u-th Adam update (u = 0, ..., U - 1) moves the means by
    # learning_rate * (1 - u / U) times Adam's direction, linearly; by
    # learning_rate times it, constant.
    for u, (move, direction, _) in enumerate(records):
        rate = learning_rate * (1.0 - u / n_updates if schedule == "linear" else 1.0)
        np.testing.assert_allclose(move, rate * direction, rtol=1e-9, atol=1e-15)


def test_linear_learning_rate_schedule_settles_noisy_means():
    # Under noise, a large constant step keeps the means moving with the
    # noisy gradients to the end; the linear schedule lets them settle.
    X, y = make_sine(2000, noise_std=0.1)
    X_test, y_test = make_sine(500, seed=1, noise_std=0.0)
    rmse = {}
    for schedule in ("constant", "linear"):
        rmse[schedule] = np.mean([
            np.sqrt(np.mean((DPSEPRegressor(
                epsilon=1.0, clip_norm=1.0, batch_size=100, max_iter=20,
                learning_rate=0.3, learning_rate_schedule=schedule,
                **{**ADAM_PARAMS, "random_state": seed},
            ).fit(X, y).predict(X_test) - y_test) ** 2))
            for seed in range(6)
        ])
    assert rmse["linear"] < 0.8 * rmse["constant"], rmse


def test_adam_is_the_network_only():
    X, y = make_sine(100)
    with pytest.raises(ValueError, match='mean_update="adam" updates the network'):
        DPSEPRegressor(**{**ADAM_PARAMS, "model": "linear"}).fit(X, y)
    # model="auto" fits the network when asked for Adam, also under noise.
    reg = DPSEPRegressor(**{**ADAM_PARAMS, "model": "auto"}, max_iter=1).fit(X, y)
    assert reg.model_ == "mlp"


@pytest.mark.parametrize("mean_update, fraction", [("sep", 0.5), ("adam", 0.05)])
def test_auto_averaging_fraction(mean_update, fraction):
    X, y = make_sine(300)
    params = {**ADAM_PARAMS, "mean_update": mean_update, "epsilon": INF,
              "batch_size": 30, "max_iter": 3}
    auto = DPSEPRegressor(**params).fit(X, y)
    given = DPSEPRegressor(**params, averaging_fraction=fraction).fit(X, y)
    other = DPSEPRegressor(**params, averaging_fraction=0.3).fit(X, y)
    np.testing.assert_array_equal(auto.weights_mean_, given.weights_mean_)
    assert not np.array_equal(auto.weights_mean_, other.weights_mean_)


def test_bounds_are_any_pair_and_errors_name_the_parameter():
    X, y = make_linear(200)
    as_tuple = DPSEPRegressor(
        model="linear", bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y, random_state=0
    )
    as_array = DPSEPRegressor(
        model="linear",
        bounds_X=np.array(BOUNDS_X),
        bounds_y=np.array(BOUNDS_Y),
        random_state=0,
    )
    np.testing.assert_array_equal(as_tuple.fit(X, y).predict(X), as_array.fit(X, y).predict(X))
    for bounds, message in [
        (("a", "b"), r"bounds_X must hold numbers"),
        ((-1e308, 1e308), r"bounds_X: every range upper - lower must be a finite float"),
    ]:
        with pytest.raises(ValueError, match=message):
            DPSEPRegressor(bounds_X=bounds, bounds_y=BOUNDS_Y).fit(X, y)


def test_a_huge_clip_norm_shrinks_to_the_prior_instead_of_failing():
    # The noise then swamps every released shift: the empirical-Bayes shrinkage
    # must give the prior's mean, not a singular solve after budget was spent.
    X, y = make_linear(400)
    for clip_norm in (1e8, 1e12):
        reg = DPSEPRegressor(
            model="linear", clip_norm=clip_norm, bounds_X=BOUNDS_X, bounds_y=BOUNDS_Y
        ).fit(X, y)
        prediction = reg.predict(X)
        assert np.all(np.isfinite(prediction))
        assert np.all((prediction >= BOUNDS_Y[0]) & (prediction <= BOUNDS_Y[1]))


def test_transform_columns_are_named():
    X, y = make_linear(100)
    reg = DPSEPRegressor(epsilon=float("inf"), max_iter=2).fit(X, y)
    assert list(reg.get_feature_names_out()) == ["predictive_mean", "predictive_std"]
    frame = reg.set_output(transform="pandas").transform(X[:3])
    assert list(frame.columns) == ["predictive_mean", "predictive_std"]


def test_bounds_given_as_a_frame_or_a_dict_are_refused():
    # Unpacking them would take their labels as the bounds.
    pd = pytest.importorskip("pandas")
    X, y = make_linear(50)
    for bounds in (pd.DataFrame([[-20.0, -20.0], [40.0, 40.0]]), {0: 1, 1: 2}):
        with pytest.raises(ValueError, match="bounds_X"):
            DPSEPRegressor(model="linear", bounds_X=bounds).fit(X, y)


# (Where [0, 1] holds no mass in floating point, e.g. loc=-5 at scale 0.02,
# the next test checks the tail's limit instead.)
@pytest.mark.parametrize(
    "loc, scale",
    [(loc, scale) for loc in (-0.1, 0.0, 0.01, 0.3, 0.5, 0.99, 1.5) for scale in (0.02, 1.0, 50.0)]
    + [(loc, scale) for loc in (-5.0, -1.0, 30.0) for scale in (1.0, 50.0)],
)
def test_truncated_normal_mean_matches_integration(loc, scale):
    density = stats.norm(loc, scale).pdf
    kink = [min(max(loc, 0.0), 1.0)]
    mass = integrate.quad(density, 0, 1, points=kink, epsabs=0, epsrel=1e-12)[0]
    assert mass > 1e-200
    first = integrate.quad(lambda v: v * density(v), 0, 1, points=kink, epsabs=0, epsrel=1e-12)[0]
    assert sep._truncated_normal_mean(loc, scale, 1.0) == pytest.approx(first / mass, rel=1e-9)


def test_truncated_normal_mean_far_outside_the_interval():
    # Far below 0 the mass piles up at 0 with mean about scale**2 / |loc|;
    # far above 1, symmetrically at 1; finite where the densities underflow.
    for loc in (-1.0, -10.0, -1e3):
        value = sep._truncated_normal_mean(loc, 0.02, 1.0)
        assert value == pytest.approx(0.02**2 / -loc, rel=0.01)
        assert sep._truncated_normal_mean(1.0 - loc, 0.02, 1.0) == pytest.approx(1.0 - value)
    for loc in (-1e6, 1e6):
        assert 0.0 <= sep._truncated_normal_mean(loc, 1e-5, 1.0) <= 1.0 + 1e-9


class _FixedRelease:
    """An engine stub whose preliminary release returns a chosen sum."""

    def __init__(self, released_sum, noise_multiplier):
        self.released_sum = released_sum
        self.plan = type("Plan", (), {"preliminary_noise_multiplier": noise_multiplier})()

    def release(self, blocks, sensitivities, preliminary=False):
        assert preliminary and sensitivities == [1.0]
        return [np.array([self.released_sum])]


class _ZeroPredictions:
    def predict_moments(self, posterior, X):
        return np.zeros(X.shape[0]), None, None


class _RecordingRelease(_FixedRelease):
    def release(self, blocks, sensitivities, preliminary=False):
        self.blocks = [np.array(block) for block in blocks]
        return super().release(blocks, sensitivities, preliminary=preliminary)


class _PredictionsWithOverflow:
    def predict_moments(self, posterior, X):
        mean = np.zeros(X.shape[0])
        mean[0], mean[1] = np.nan, np.inf
        return mean, None, None


def test_residual_release_counts_a_non_finite_residual_as_clipped():
    # Two rows whose predictions overflowed (no bounds_y to clip them to) and
    # three finite ones with squared residuals 0, 0.25 and 4 (clipped to 1):
    # the released sum is that of the contributions in [-1, 1], finite.
    engine = _RecordingRelease(0.0, 20.0)
    X = np.zeros((5, 1))
    y = np.array([0.0, 0.0, 0.0, 0.5, 2.0])
    sep._released_noise_site(_PredictionsWithOverflow(), None, X, y, engine, None)
    half = sep._RESIDUAL_CLIP / 2
    expected = sum((value - half) / half for value in (1.0, 1.0, 0.0, 0.25, 1.0))
    np.testing.assert_allclose(engine.blocks[0], [expected], rtol=1e-12)


@pytest.mark.parametrize("released_mean_square", [-0.05, 0.0, 0.01, 0.2])
def test_released_noise_variance_is_its_mean_given_the_release(released_mean_square):
    # A release that the noise pushed towards or below zero sets the mean of
    # the clipped mean square given it (flat prior on [0, 1], the release's
    # public noise std), not the floor; far from 0 it is the release itself.
    n_samples, multiplier = 500, 20.0
    half = sep._RESIDUAL_CLIP / 2
    released_sum = (released_mean_square / half - 1.0) * n_samples
    engine = _FixedRelease(released_sum, multiplier)
    X, y = np.zeros((n_samples, 1)), np.zeros(n_samples)
    site = sep._released_noise_site(_ZeroPredictions(), None, X, y, engine, None)
    noise_std = half * multiplier / n_samples
    expected = sep._truncated_normal_mean(released_mean_square, noise_std, 1.0)
    np.testing.assert_allclose(site, [0.5, expected / 2], rtol=1e-12)
    # Closed forms, independent of the function: at 0 (the upper end 25
    # stds away) the half-normal's mean; 10 stds inside, the release itself.
    if released_mean_square == 0.0:
        assert expected == pytest.approx(noise_std * math.sqrt(2 / math.pi), rel=1e-9)
    if released_mean_square == 0.2:
        assert expected == pytest.approx(0.2, rel=1e-9)
    # Never the old floor of 1e-4.
    assert expected > 0.1 * noise_std
