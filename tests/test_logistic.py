"""Tests of skprivfact.logistic: DPBayesLogReg and its kernels."""

import io
import math
import pickle
import re
import warnings
from contextlib import redirect_stdout
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import integrate, optimize, special, stats
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from skprivfact import logistic
from skprivfact._logistic_kernels import dense_to_csr, root_omega_rows
from skprivfact.accounting import calibrate_noise_multiplier
from skprivfact.datasets import load_adult
from skprivfact.exceptions import PrivacyLeakWarning
from skprivfact.logistic import (
    DPBayesLogReg,
    _design_rows,
    _EStep,
    _expected_polya_gamma,
    _expected_sufficient_statistics,
    _floored_posterior,
    _gaussian_posterior,
    _log_expected_sigmoid,
)
from skprivfact.mechanisms import project_psd
from skprivfact.privacy import PrivacyEngine
from skprivfact.utils._testing import (
    dp_accounting_epsilon,
    dp_accounting_pld_epsilon,
    gaussian_kl,
)

INF = float("inf")


def make_problem(n_samples, n_features, *, intercept=0.0, scale=3.0, seed=0):
    """Rows of norm below 1 and labels from a known logistic model."""
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n_samples, n_features)) / math.sqrt(2.0 * n_features)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, np.newaxis]
    weights = scale * rng.normal(size=n_features)
    logits = X @ weights + intercept
    y = (rng.uniform(size=n_samples) < special.expit(logits)).astype(int)
    return X, y, weights


# Kernels ---------------------------------------------------------------------


def test_expected_polya_gamma_matches_the_series_definition():
    # omega ~ PG(1, c) is sum_k g_k / (2 pi^2 ((k - 1/2)^2 + c^2 / (4 pi^2)))
    # with g_k ~ Exp(1) (Polson, Scott and Windle 2013), so its mean is the
    # series below; its tail beyond K terms is about 1 / (2 pi^2 K).
    k = np.arange(1, 2_000_001, dtype=float)
    for c in [0.0, 1e-6, 1e-3, 0.5, 2.0, 10.0, 50.0]:
        series = np.sum(1.0 / ((k - 0.5) ** 2 + c**2 / (4 * math.pi**2))) / (
            2 * math.pi**2
        )
        series += 1.0 / (2 * math.pi**2 * k[-1])
        assert _expected_polya_gamma(c) == pytest.approx(series, rel=1e-6)
    assert _expected_polya_gamma(0.0) == 0.25
    values = _expected_polya_gamma(np.linspace(0, 1e-3, 10_001))
    assert np.all(values <= 0.25)


@pytest.mark.parametrize("mean", [-40.0, -5.0, -0.3, 0.0, 2.0, 12.0])
@pytest.mark.parametrize("std", [0.0, 0.2, 1.0, 1.0 + 1e-9, 3.0, 30.0])
def test_log_expected_sigmoid_matches_adaptive_quadrature(mean, std):
    if std == 0:
        reference = special.expit(mean)
    else:
        reference = integrate.quad(
            lambda t: special.expit(t) * stats.norm.pdf(t, mean, std),
            mean - 12 * std,
            mean + 12 * std,
            points=[0.0] if abs(mean) < 12 * std else None,
            epsabs=0,
            epsrel=1e-12,
            limit=400,
        )[0]
    value = np.exp(_log_expected_sigmoid(np.array([mean]), np.array([std])))[0]
    assert value == pytest.approx(reference, rel=1e-8, abs=1e-300)


def test_design_rows_bound_every_record_contribution():
    rng = np.random.RandomState(0)
    data_norm = 0.7
    X = np.vstack(
        [
            rng.normal(size=(50, 4)) * 1e6,
            rng.normal(size=(50, 4)) * 1e-3,
            np.full((1, 4), data_norm / 2.0),  # norm exactly data_norm
            np.zeros((1, 4)),
        ]
    )
    labels = np.arange(X.shape[0]) % 2
    for fit_intercept in (True, False):
        rows = _design_rows(X, data_norm, fit_intercept)
        assert np.all(np.linalg.norm(rows, axis=1) <= data_norm)
        if fit_intercept:
            np.testing.assert_allclose(rows[:, -1], data_norm / 2.0)
        # E[omega] is largest (1/4) when the second moment is zero.
        for second_moment in (np.zeros((rows.shape[1],) * 2), np.eye(rows.shape[1])):
            for i in range(X.shape[0]):
                first, second = _expected_sufficient_statistics(
                    rows[i : i + 1], labels[i : i + 1].astype(float), second_moment
                )
                assert np.linalg.norm(first) <= data_norm / 2.0
                assert np.linalg.norm(second) <= data_norm**2 / 4.0 * (1 + 1e-15)


@pytest.mark.parametrize("data_norm", [1e-310, 1e-300, 1e300])
def test_design_rows_bound_holds_exactly_at_extreme_scales(data_norm):
    rng = np.random.RandomState(1)
    X = np.vstack([rng.normal(size=(5, 3)) * data_norm, np.full((1, 3), data_norm)])
    for fit_intercept in (True, False):
        rows = _design_rows(X, data_norm, fit_intercept)
        for row in rows:
            exact = sum(Fraction(float(v)) ** 2 for v in row)
            assert exact <= Fraction(data_norm) ** 2


def sparse_rows(n_samples, n_features, density, seed):
    """Design rows of norm <= 1 with about ``density`` of their entries non-zero."""
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n_samples, n_features)) * (
        rng.uniform(size=(n_samples, n_features)) < density
    )
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, np.newaxis]
    return _design_rows(X, 1.0, True), (rng.uniform(size=n_samples) < 0.5) * 1.0


def random_second_moment(n_weights, seed):
    rng = np.random.RandomState(seed)
    A = rng.normal(size=(n_weights, n_weights))
    mean = rng.normal(size=n_weights)
    return np.linalg.inv(A @ A.T / n_weights + np.eye(n_weights)) + np.outer(mean, mean)


def test_dense_to_csr_matches_scipy():
    rows, _ = sparse_rows(50, 12, 0.2, 0)
    rows[3] = 0.0
    indptr, indices, values = dense_to_csr(rows)
    reference = sp.csr_matrix(rows)
    np.testing.assert_array_equal(indptr, reference.indptr)
    np.testing.assert_array_equal(indices, reference.indices)
    np.testing.assert_array_equal(values, reference.data)


@pytest.mark.parametrize("density", [0.05, 0.6, "mixed"])
def test_e_step_paths_agree_with_the_dense_reference(density):
    if density == "mixed":
        rows, labels = sparse_rows(400, 30, 0.05, 1)
        dense_rows, _ = sparse_rows(400, 30, 0.6, 7)
        rows[1::2] = dense_rows[1::2]
    else:
        rows, labels = sparse_rows(400, 30, density, 1)
    second_moment = random_second_moment(rows.shape[1], 2)
    first, second = _expected_sufficient_statistics(rows, labels, second_moment)
    batch = np.arange(0, 400, 3)
    batch_first, batch_second = _expected_sufficient_statistics(
        rows[batch], labels[batch], second_moment
    )
    exact = _EStep(rows, labels, float32=False)
    fast = _EStep(rows, labels)
    # Each row's path is chosen from that row alone.
    sparse_row = np.count_nonzero(rows, axis=1) <= logistic._SPARSE_DENSITY * rows.shape[1]
    np.testing.assert_array_equal(exact.sparse_row, sparse_row)
    expected_share = {0.05: 1.0, 0.6: 0.0, "mixed": 0.5}[density]
    assert abs(sparse_row.mean() - expected_share) < 0.05
    for e_step, rtol in [(exact, 1e-12), (fast, 1e-12 if sparse_row.all() else 1e-5)]:
        for kwargs, (ref_first, ref_second) in [
            ({}, (first, second)),
            ({"batch": batch}, (batch_first, batch_second)),
        ]:
            got_first, got_second = e_step(second_moment, **kwargs)
            np.testing.assert_allclose(got_first, ref_first, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(
                got_second, ref_second, rtol=rtol, atol=rtol * np.abs(ref_second).max()
            )
            np.testing.assert_array_equal(got_second, got_second.T)
    # The first iteration's isotropic shortcut is the product with c I.
    isotropic = 0.7 * np.eye(rows.shape[1])
    np.testing.assert_allclose(
        fast(isotropic, isotropic=True)[1],
        _expected_sufficient_statistics(rows, labels, isotropic)[1],
        rtol=1e-12,
    )


@pytest.mark.parametrize("density", [0.05, 1.0])
@pytest.mark.parametrize("scale", [0.0, 1.0, -1.0, 1e38, -1e300])
def test_every_e_step_path_bounds_each_record(density, scale):
    # Whatever the second moment (huge ones overflow float32's product and
    # take the float64 path), each record adds at most data_norm^2 / 4.
    data_norm = 0.7
    rows, labels = sparse_rows(30, 8, density, 3)
    rows = _design_rows(rows[:, :-1], data_norm, True)
    second_moment = scale * random_second_moment(rows.shape[1], 4)
    for float32 in (True, False):
        for i in range(rows.shape[0]):
            e_step = _EStep(rows[i : i + 1], labels[i : i + 1], float32=float32)
            for isotropic in (False, True):
                moment = (
                    np.eye(rows.shape[1]) * abs(scale) if isotropic else second_moment
                )
                first, second = e_step(moment, isotropic=isotropic)
                assert np.linalg.norm(first) <= data_norm / 2.0
                assert np.linalg.norm(second) <= data_norm**2 / 4.0 * (1 + 1e-15)


@pytest.mark.parametrize("float32", [True, False])
def test_an_added_empty_record_leaves_every_other_weight_unchanged(float32):
    # A neighbouring data set with one more (empty) record must give the same
    # second-moment statistic: the empty record adds nothing, and no other
    # record's weight may depend on it. Here the data set sits at the density
    # where a data-wide choice of path flipped from dense (float32) to sparse
    # (float64), and the posterior mean is large and orthogonal to the rows,
    # where float32's rounding of x' E[w w'] x is large: the choice moved the
    # release by 3.7 times its bound.
    n_weights, n_records = 5, 1000
    record = np.array([0.5, -0.5, 0.0, 0.0, 0.0])
    mean = 1e4 * np.array([1.0, 1.0, 0.0, 0.0, 0.0]) / math.sqrt(2.0)
    second_moment = np.eye(n_weights) / 25.0 + np.outer(mean, mean)
    bound = np.linalg.norm(record) ** 2 / 4.0
    statistics = []
    for n_empty in (n_records - 1, n_records):
        rows = np.vstack([np.tile(record, (n_records, 1)), np.zeros((n_empty, n_weights))])
        labels = np.arange(rows.shape[0]) % 2 * 1.0
        e_step = _EStep(rows, labels, float32=float32)
        statistics.append(e_step(second_moment)[1])
        batch = np.arange(0, rows.shape[0], 2)
        statistics.append(e_step(second_moment, batch=batch)[1])
    full_change = np.linalg.norm(statistics[2] - statistics[0])
    batch_change = np.linalg.norm(statistics[3] - statistics[1])
    assert full_change <= 1e-9 * bound
    assert batch_change <= 1e-9 * bound


@pytest.mark.parametrize("n_rows", [1, 2, 8, 100])
def test_an_added_record_leaves_the_float32_weights_of_the_others_unchanged(n_rows):
    # The dense path's float32 product gives each row the same weight whatever
    # the batch holds: a one-row batch too (BLAS would round a matrix-vector
    # product differently, about 4e-8 relative, without the padding).
    def weighted_rows(rows, second_moment):
        e_step = _EStep(rows, np.zeros(rows.shape[0]))
        e_step._dense_gram(second_moment, None, False)
        return e_step.work

    for seed in range(10):
        rng = np.random.default_rng(seed)
        rows = rng.normal(size=(n_rows, 50))
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        A = rng.normal(size=(50, 50))
        second_moment = A @ A.T * 50
        added = rng.normal(size=(1, 50))
        added /= np.linalg.norm(added)
        np.testing.assert_array_equal(
            weighted_rows(np.vstack([rows, added]), second_moment)[:n_rows],
            weighted_rows(rows, second_moment),
        )


def test_a_row_overflowing_float32_does_not_move_the_other_weights():
    # The float64 fallback of an overflowing float32 product is per row: the
    # other rows keep their float32 weights, whichever rows share the batch.
    rows, _ = sparse_rows(60, 8, 1.0, 11)
    second_moment = random_second_moment(rows.shape[1], 12)
    huge = rows[:1] * 1e30

    def weighted_rows(rows):
        rows32 = rows.astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            product = rows32 @ second_moment.astype(np.float32)
        out = np.empty_like(rows)
        root_omega_rows(product, rows32, rows, second_moment, out)
        return out

    with np.errstate(over="ignore"):
        assert not np.isfinite(np.float32(1e30) ** 2)
    alone = weighted_rows(rows)
    shared = weighted_rows(np.vstack([rows, huge]))
    np.testing.assert_array_equal(shared[:-1], alone)
    # The overflowing row's weight is its float64 one.
    c = math.sqrt(huge[0] @ second_moment @ huge[0])
    np.testing.assert_allclose(
        shared[-1], huge[0] * math.sqrt(math.tanh(c / 2.0) / (2.0 * c)), rtol=1e-12
    )


@pytest.mark.parametrize(
    "floor, path", [(0.0, "cholesky"), (1e-3, "float64"), (5.0, "float32")]
)
def test_floored_posterior_is_the_projected_gaussian_posterior(floor, path):
    rng = np.random.RandomState(5)
    A = rng.normal(size=(15, 15))
    second_total = (A + A.T) * 2 + (45.0 if path == "cholesky" else 0.0) * np.eye(15)
    eigenvalues = np.linalg.eigvalsh(second_total)
    assert (eigenvalues.min() >= floor) == (path == "cholesky")
    assert eigenvalues.max() > floor
    in_float32 = (
        logistic._FLOAT32_ROUNDING * np.linalg.norm(second_total)
        <= logistic._EIGH_FLOAT32_SHARE * floor
    )
    assert in_float32 == (path == "float32")
    first_total = rng.normal(size=15)
    covariance, mean, projected = _floored_posterior(
        second_total, floor, 1.3, first_total
    )
    ref_projected = project_psd(second_total, floor)
    ref_covariance, ref_mean = _gaussian_posterior(
        1.3 * np.eye(15) + ref_projected, first_total
    )
    rtol = 1e-5 if in_float32 else 1e-10
    scale = np.abs(ref_projected).max()
    np.testing.assert_allclose(projected(), ref_projected, rtol=0, atol=rtol * scale)
    np.testing.assert_allclose(
        covariance, ref_covariance, rtol=0, atol=rtol * np.abs(ref_covariance).max()
    )
    np.testing.assert_allclose(mean, ref_mean, rtol=rtol)
    np.testing.assert_array_equal(covariance, covariance.T)


def test_sparse_and_dense_paths_give_the_same_noise_free_fit(monkeypatch):
    rows, labels = sparse_rows(500, 20, 0.1, 6)
    X = rows[:, :-1] / (math.sqrt(3.0) / 2.0)
    fits = []
    for density in (0.0, 1.0):
        monkeypatch.setattr(logistic, "_SPARSE_DENSITY", density)
        fits.append(DPBayesLogReg(epsilon=INF, data_norm=1.0).fit(X, labels))
    np.testing.assert_allclose(fits[0].coef_, fits[1].coef_, rtol=1e-10)
    np.testing.assert_allclose(
        fits[0].coef_covariance_, fits[1].coef_covariance_, rtol=1e-10
    )


# Exactness without noise -------------------------------------------------------


def reference_variational_bayes(X, y, prior_shape, prior_rate, n_iter):
    """Plain Jaakkola-Jordan variational Bayes, written from the textbook.

    lambda(xi) = tanh(xi / 2) / (4 xi); S^-1 = E[a] I + 2 sum lambda(xi_n) x_n x_n',
    m = S sum (y_n - 1/2) x_n, xi_n^2 = x_n'(S + m m') x_n; q(a) Gamma.
    """
    n_features = X.shape[1]
    expected_a = prior_shape / prior_rate
    S, m = np.eye(n_features) / expected_a, np.zeros(n_features)
    for _ in range(n_iter):
        xi = np.sqrt(np.array([x @ (S + np.outer(m, m)) @ x for x in X]))
        lam = np.where(xi > 0, np.tanh(xi / 2) / (4 * np.where(xi > 0, xi, 1)), 1 / 8)
        precision = expected_a * np.eye(n_features) + 2 * (X.T * lam) @ X
        S = np.linalg.inv(precision)
        m = S @ ((y - 0.5) @ X)
        shape = prior_shape + n_features / 2
        rate = prior_rate + 0.5 * (np.trace(S) + m @ m)
        expected_a = shape / rate
    return m, S, shape, rate


def test_noise_free_fit_is_plain_variational_bayes():
    X, y, _ = make_problem(300, 4)
    clf = DPBayesLogReg(
        epsilon=INF,
        data_norm=1.0,
        fit_intercept=False,
        max_iter=15,
        learning_decay=0.0,
        prior_shape=2.0,
        prior_rate=0.5,
    ).fit(X, y)
    m, S, shape, rate = reference_variational_bayes(X, y, 2.0, 0.5, 15)
    np.testing.assert_allclose(clf.coef_[0], m, rtol=1e-9)
    np.testing.assert_allclose(clf.coef_covariance_, S, rtol=1e-9)
    assert clf.weight_precision_shape_ == pytest.approx(shape)
    assert clf.weight_precision_rate_ == pytest.approx(rate, rel=1e-9)


def laplace_approximation(X, y, prior_precision):
    """MAP weights and inverse Hessian of the negative log-posterior (scipy)."""

    def objective(w):
        logits = X @ w
        value = -np.sum(y * logits - np.logaddexp(0, logits)) + 0.5 * w @ (
            prior_precision * w
        )
        gradient = -X.T @ (y - special.expit(logits)) + prior_precision * w
        return value, gradient

    result = optimize.minimize(
        objective,
        np.zeros(X.shape[1]),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-10},
    )
    p = special.expit(X @ result.x)
    hessian = (X.T * (p * (1 - p))) @ X + np.diag(prior_precision)
    return result.x, np.linalg.inv(hessian)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_noise_free_posterior_matches_laplace_approximation(fit_intercept):
    # A Gamma(1e6, 1e6) hyperprior pins the weight precision a to 1, so the
    # model is y ~ Bernoulli(sigmoid(w' z)), w ~ N(0, I) on the design rows
    # z; in (coef, intercept) coordinates the prior precision is 1 / scale^2.
    X, y, _ = make_problem(2000, 10, intercept=-0.5 if fit_intercept else 0.0)
    clf = DPBayesLogReg(
        epsilon=INF,
        data_norm=1.0,
        fit_intercept=fit_intercept,
        max_iter=100,
        learning_decay=0.0,
        prior_shape=1e6,
        prior_rate=1e6,
    ).fit(X, y)
    if fit_intercept:
        features = np.hstack([X, np.ones((X.shape[0], 1))])
        scale = np.r_[np.full(10, math.sqrt(0.75)), 0.5]
        prior_precision = 1.0 / scale**2
        vb_mean = np.r_[clf.coef_[0], clf.intercept_]
    else:
        features, prior_precision, vb_mean = X, np.ones(10), clf.coef_[0]
    laplace_mean, laplace_cov = laplace_approximation(features, y, prior_precision)
    std = np.sqrt(np.diag(laplace_cov))
    # Both are Gaussian approximations of a posterior that is close to
    # Gaussian at n = 2000: the means agree to a small fraction of its spread.
    assert np.max(np.abs(vb_mean - laplace_mean) / std) < 0.1
    # The Jaakkola-Jordan bound behind Polya-Gamma VB is known to understate
    # the posterior variance (Bishop 2006, section 10.6): smaller, not wildly.
    variance_ratio = np.diag(clf.coef_covariance_) / std**2
    assert np.all((variance_ratio > 0.5) & (variance_ratio < 1.0 + 1e-6))
    assert gaussian_kl(vb_mean, clf.coef_covariance_, laplace_mean, laplace_cov) < 0.5


def test_noise_free_full_batch_ignores_random_state():
    X, y, _ = make_problem(200, 3)
    a = DPBayesLogReg(epsilon=INF, data_norm=1.0, random_state=0).fit(X, y)
    b = DPBayesLogReg(epsilon=INF, data_norm=1.0, random_state=1).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.noise_multiplier_ == 0.0
    assert a.privacy_spent_ == (INF, 1e-5)


def test_noise_free_stochastic_mode_approaches_full_batch():
    X, y, _ = make_problem(2000, 5)
    full = DPBayesLogReg(epsilon=INF, data_norm=1.0, max_iter=60).fit(X, y)
    assert full.learning_decay_ == 0.0
    stochastic = DPBayesLogReg(
        epsilon=INF,
        data_norm=1.0,
        batch_size=400,
        max_iter=60,  # passes of 5 iterations: 300 iterations
        random_state=0,
    ).fit(X, y)
    assert stochastic.sample_rate_ == pytest.approx(0.2)
    assert stochastic.n_releases_ == 300
    std = np.sqrt(np.diag(full.coef_covariance_))[:5]
    # A batch estimate of the totals has about (1 - q) / q = 4 times the
    # posterior variance; averaged over the last ~300**0.8 = 96 batches, the
    # mean is off by about sqrt(4 / 96) = 0.2 posterior sd per coordinate,
    # plus what remains of the start (the step decays slowly).
    assert stochastic.learning_decay_ == 0.8
    assert np.max(np.abs(stochastic.coef_[0] - full.coef_[0]) / std) < 1.0


# Privacy ---------------------------------------------------------------------


class RecordingRelease:
    """Wraps PrivacyEngine.release and keeps its arguments and noisy output."""

    def __init__(self, release):
        self.release = release
        self.calls = []

    def __call__(self, engine, blocks, sensitivities, **kwargs):
        clean = [np.array(b, dtype=float, copy=True) for b in blocks]
        noisy = self.release(engine, blocks, sensitivities, **kwargs)
        self.calls.append(
            {
                "blocks": clean,
                "noisy": [np.array(b, copy=True) for b in noisy],
                "sensitivities": list(sensitivities),
                "noise_multiplier": engine.plan.noise_multiplier,
                "sample_rate": kwargs.get("sample_rate") or engine.plan.sample_rate,
                "symmetric": kwargs.get("symmetric"),
            }
        )
        return noisy


@pytest.fixture
def recording(monkeypatch):
    recorder = RecordingRelease(PrivacyEngine.release)

    def release(engine, blocks, sensitivities, **kwargs):
        return recorder(engine, blocks, sensitivities, **kwargs)

    monkeypatch.setattr(PrivacyEngine, "release", release)
    return recorder


@pytest.mark.parametrize(
    "batch_size, relation", [(None, "add_remove"), (100, "substitution")]
)
def test_each_iteration_is_one_joint_release_and_one_accountant_step(
    recording, batch_size, relation
):
    X, y, _ = make_problem(500, 3)
    data_norm = 0.8
    clf = DPBayesLogReg(
        epsilon=1.0,
        data_norm=data_norm,
        max_iter=12,
        batch_size=batch_size,
        random_state=0,
    ).fit(X, y)
    sample_rate = 1.0 if batch_size is None else batch_size / 500
    # max_iter counts passes; a pass is ceil(n / batch_size) iterations.
    n_iterations = 12 * math.ceil(1 / sample_rate)
    assert clf.n_iter_ == 12
    assert len(recording.calls) == clf.n_releases_ == n_iterations
    # Full batch uses nothing but sums over every row: adding or removing a
    # row; a Poisson batch's rate uses n, which is then public: substitution.
    assert clf.neighbouring_relation_ == relation
    for call in recording.calls:
        assert call["sensitivities"] == [data_norm / 2, data_norm**2 / 4]
        assert call["noise_multiplier"] == clf.noise_multiplier_
        assert call["symmetric"] == [False, True]
        assert call["sample_rate"] == sample_rate
    # One step per release, with the joint noise multiplier: composing the
    # two blocks as separate steps would show twice as many steps here.
    assert clf.accountant_.history == [(clf.noise_multiplier_, sample_rate, 1)] * (
        n_iterations
    )
    assert clf.noise_multiplier_ == calibrate_noise_multiplier(
        1.0,
        1e-5,
        sample_rate=sample_rate,
        steps=n_iterations,
        neighbouring_relation=relation,
    )
    assert 0.99 <= clf.privacy_spent_[0] <= 1.0


@pytest.mark.parametrize("batch_size", [None, 50])
def test_privacy_spent_matches_dp_accounting(batch_size):
    pytest.importorskip("dp_accounting")
    X, y, _ = make_problem(1000, 3)
    clf = DPBayesLogReg(
        epsilon=0.7,
        delta=1e-6,
        data_norm=1.0,
        max_iter=3,
        batch_size=batch_size,
        random_state=0,
    ).fit(X, y)
    if batch_size is None:
        assert clf.neighbouring_relation_ == "add_remove"
        assert clf.n_releases_ == 3
        expected = dp_accounting_epsilon(clf.noise_multiplier_, 1.0, 3, 1e-6)
        # The same RDP bound; the orders differ (ours is a finer grid), which
        # moves the converted epsilon by well under 1%.
        assert clf.privacy_spent_[0] == pytest.approx(expected, rel=1e-2)
    else:
        # 3 passes of 20 iterations at rate 0.05, for replacing one row.
        assert clf.neighbouring_relation_ == "substitution"
        assert clf.n_releases_ == 60
        tight = dp_accounting_pld_epsilon(
            [(clf.noise_multiplier_, 0.05, 60)], "substitution", 1e-6
        )
        # Our substitution RDP bound is never below the tight PLD epsilon,
        # and not far above it.
        assert tight * (1 - 1e-6) <= clf.privacy_spent_[0] <= 1.5 * tight
    # Calibrated to spend the budget, not much less.
    assert clf.privacy_spent_[1] == 1e-6
    assert 0.69 <= clf.privacy_spent_[0] <= 0.7


def test_released_noise_has_the_joint_scale(recording):
    # With k = 2 blocks, block i gets noise std sigma * sqrt(2) * Delta_i.
    X, y, _ = make_problem(200, 4)
    data_norm = 2.0
    clf = DPBayesLogReg(
        epsilon=2.0, data_norm=data_norm, max_iter=300, random_state=0
    ).fit(X, y)
    assert len(recording.calls) == 300
    first_noise = np.concatenate(
        [c["noisy"][0] - c["blocks"][0] for c in recording.calls]
    )
    second_noise = np.stack([c["noisy"][1] - c["blocks"][1] for c in recording.calls])
    for noise in second_noise:
        np.testing.assert_array_equal(noise, noise.T)
    upper_rows, upper_cols = np.triu_indices(5)
    upper = second_noise[:, upper_rows, upper_cols].ravel()
    sigma = clf.noise_multiplier_ * math.sqrt(2)
    for values, expected_std in [
        (first_noise, sigma * data_norm / 2),
        (upper, sigma * data_norm**2 / 4),
    ]:
        # The sample variance of m normal draws is within 5 standard errors
        # (sqrt(2 / m)) of the truth except with probability below 1e-6.
        ratio = np.mean(values**2) / expected_std**2
        assert abs(ratio - 1) < 5 * math.sqrt(2 / values.size)


def test_data_norm_none_warns_and_records_the_leaked_bound():
    X, y, _ = make_problem(100, 3)
    X[0] *= 5
    with pytest.warns(PrivacyLeakWarning, match="data_norm is None"):
        clf = DPBayesLogReg(max_iter=3, random_state=0).fit(X, y)
    assert clf.data_norm_ == pytest.approx(np.linalg.norm(X, axis=1).max())
    # without noise nothing is released: no leak to warn of
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        clean = DPBayesLogReg(epsilon=INF, max_iter=3).fit(X, y)
    assert clean.data_norm_ == clf.data_norm_


def test_private_fit_recovers_the_signal_at_moderate_epsilon():
    X, y, weights = make_problem(20_000, 5, intercept=-0.5, seed=3)
    noise_free = DPBayesLogReg(epsilon=INF, data_norm=1.0).fit(X, y)
    private = DPBayesLogReg(epsilon=2.0, data_norm=1.0, random_state=0).fit(X, y)
    correlation = np.corrcoef(private.coef_[0], weights)[0, 1]
    assert correlation > 0.95
    agreement = np.mean(private.predict(X) == noise_free.predict(X))
    assert agreement > 0.95


# Prediction ------------------------------------------------------------------


def test_integrated_probabilities_beat_the_plug_in_on_small_data():
    # A well-specified model: weights drawn from the prior N(0, scale^2 I),
    # whose precision the Gamma(1e6, 1e6 scale^2) hyperprior pins. The
    # posterior predictive is then the better forecast in expectation.
    scale, differences = 3.0, []
    for seed in range(40):
        X, y, _ = make_problem(1100, 10, scale=scale, seed=seed)
        train, test = slice(0, 100), slice(100, None)
        clf = DPBayesLogReg(
            epsilon=INF,
            data_norm=1.0,
            fit_intercept=False,
            max_iter=30,
            learning_decay=0.0,
            prior_shape=1e6,
            prior_rate=1e6 * scale**2,
        ).fit(X[train], y[train])
        integrated = clf.predict_proba(X[test])[:, 1]
        plug_in = special.expit(clf.transform(X[test])[:, 0])
        differences.append(
            np.mean(stats.bernoulli.logpmf(y[test], integrated))
            - np.mean(stats.bernoulli.logpmf(y[test], plug_in))
        )
    # Mean gain in held-out log-likelihood, at least two standard errors.
    assert np.mean(differences) > 2 * np.std(differences) / math.sqrt(40)


def test_prediction_methods_agree():
    X, y, _ = make_problem(300, 3, intercept=0.4)
    labels = np.array(["no", "yes"])[y]
    clf = DPBayesLogReg(epsilon=1.0, data_norm=1.0, random_state=0).fit(X, labels)
    np.testing.assert_array_equal(clf.classes_, ["no", "yes"])
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.log(proba), clf.predict_log_proba(X), rtol=1e-10)
    decision = clf.decision_function(X)
    np.testing.assert_allclose(decision, np.log(proba[:, 1] / proba[:, 0]), atol=1e-9)
    np.testing.assert_array_equal(clf.predict(X), np.where(decision > 0, "yes", "no"))
    moments = clf.transform(X)
    assert moments.shape == (300, 2) and np.all(moments[:, 1] > 0)
    np.testing.assert_allclose(moments[:, 0], X @ clf.coef_[0] + clf.intercept_[0])
    # The predictive log-odds shrink the mean logit towards 0, sign kept.
    assert np.all(np.abs(decision) <= np.abs(moments[:, 0]) + 1e-12)
    assert np.all(np.sign(decision) == np.sign(moments[:, 0]))
    assert clf.score(X, labels) == np.mean(clf.predict(X) == labels)


def test_verbose_reports_epsilon_spent():
    X, y, _ = make_problem(100, 2)
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        DPBayesLogReg(data_norm=1.0, max_iter=3, verbose=1, random_state=0).fit(X, y)
    lines = buffer.getvalue().splitlines()
    # One line per pass (3 of them: verbose=1 shows every tenth or more), in
    # the format every estimator shares.
    assert len(lines) == 3
    for i, line in enumerate(lines, start=1):
        assert re.fullmatch(
            rf"DPBayesLogReg: pass {i} of 3, objective -?[\d.]+(e[+-]\d+)?, "
            r"epsilon spent [\d.]+(e[+-]\d+)? of 1, elapsed [\d.]+ s, ETA ([\d.]+ s|\?)",
            line,
        ), line
    epsilons = [float(re.search(r"epsilon spent (\S+) of", line)[1]) for line in lines]
    assert epsilons[0] < epsilons[1] < epsilons[2] <= 1.0
    # With batches, still a line per pass (of four releases each here).
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        DPBayesLogReg(data_norm=1.0, batch_size=25, max_iter=2, verbose=2).fit(X, y)
    lines = buffer.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "DPBayesLogReg: pass 1 of 2",
        "DPBayesLogReg: pass 2 of 2",
    ]
    assert lines[-1].split("epsilon spent ")[1].startswith("1 of 1")


# scikit-learn compatibility ----------------------------------------------------


def test_pickle_clone_and_grid_search():
    X, y, _ = make_problem(600, 3)
    clf = DPBayesLogReg(data_norm=1.0, random_state=0).fit(X, y)
    restored = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(restored.predict_proba(X), clf.predict_proba(X))
    assert restored.accountant_.history == clf.accountant_.history
    cloned = clone(clf)
    assert cloned.get_params() == clf.get_params()
    assert not hasattr(cloned, "coef_")
    search = GridSearchCV(
        DPBayesLogReg(data_norm=1.0, random_state=0),
        {"epsilon": [0.1, 1.0, INF]},
        scoring="roc_auc",
        cv=3,
    ).fit(X, y)
    scores = search.cv_results_["mean_test_score"]
    assert scores.shape == (3,) and np.all((scores > 0.5) & (scores <= 1))
    assert search.best_params_["epsilon"] in (1.0, INF)


# Bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, match",
    [
        ({"data_norm": 0.0}, "data_norm"),
        ({"data_norm": -1.0}, "data_norm"),
        ({"data_norm": INF}, "data_norm"),
        ({"data_norm": 1e19}, r"data_norm must lie in \[1e-18, 1e\+18\): its square"),
        ({"data_norm": 1e-300}, r"data_norm must lie in \[1e-18, 1e\+18\): its square"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"max_iter": 0}, "max_iter"),
        ({"batch_size": 0}, "batch_size"),
        ({"learning_decay": 1.5}, "learning_decay"),
    ],
)
def test_bad_parameters_are_rejected(params, match):
    X, y, _ = make_problem(50, 2)
    with pytest.raises(ValueError, match=match):
        DPBayesLogReg(**params).fit(X, y)


def test_given_classes_fit_a_y_of_one_class_and_refuse_others_unnamed():
    X, y, _ = make_problem(60, 2)
    labels = np.where(y == 1, "spam", "ham")
    clf = DPBayesLogReg(data_norm=1.0, max_iter=2, classes=["spam", "ham"])
    np.testing.assert_array_equal(clf.fit(X, labels).classes_, ["ham", "spam"])
    # Without classes, whether a class is present would decide success.
    clf.fit(X, np.full(60, "ham"))
    assert clf.predict_proba(X)[:, 1].mean() < 0.5  # leans to the only label seen
    with pytest.raises(ValueError, match="not one of classes") as error:
        clf.fit(X, np.where(y == 1, "secret-label", "ham"))
    assert "secret-label" not in str(error.value)
    for bad in (["spam"], ["spam", "spam"], [["spam", "ham"]]):
        with pytest.raises(ValueError, match="classes must hold two distinct"):
            DPBayesLogReg(data_norm=1.0, classes=bad).fit(X, labels)


def test_bad_input_is_rejected():
    X, y, _ = make_problem(60, 2)
    clf = DPBayesLogReg(data_norm=1.0, max_iter=2)
    with pytest.raises(ValueError, match="Only binary classification is supported"):
        clf.fit(X, np.arange(60) % 3)
    with pytest.raises(ValueError, match="one class only") as error:
        clf.fit(X, np.full(60, "Alice-positive"))
    assert "Alice" not in str(error.value)
    with pytest.raises(ValueError, match="Unknown label type"):
        clf.fit(X, np.linspace(0, 1, 60))
    for bad in (np.nan, np.inf):
        X_bad = X.copy()
        X_bad[3, 1] = bad
        with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
            clf.fit(X_bad, y)
    with pytest.raises(TypeError, match="Sparse data was passed"):
        clf.fit(sp.csr_matrix(X), y)
    with pytest.raises(ValueError, match="the largest row norm of X must lie in"):
        DPBayesLogReg(epsilon=INF, max_iter=2).fit(X * 1e19, y)
    # just below the limit the float32 products and eigendecomposition hold
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for batch_size in (None, 20):
            DPBayesLogReg(epsilon=0.01, data_norm=9.9e17, batch_size=batch_size,
                          max_iter=2).fit(X * 1e17, y)
    clf.fit(X, y)
    with pytest.raises(TypeError, match="Sparse data was passed"):
        clf.predict(sp.csr_matrix(X))
    with pytest.raises(ValueError, match="features"):
        clf.predict(X[:, :1])


# Data ------------------------------------------------------------------------

ADULT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "adult"


@pytest.mark.skipif(not (ADULT / "adult.data").exists(), reason="Adult data absent")
def test_adult_noise_free_matches_logistic_regression():
    pytest.importorskip("pandas")
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    X, y = load_adult(ADULT)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.2, stratify=y, random_state=0
    )
    clf = DPBayesLogReg(epsilon=INF, data_norm=1.0, max_iter=15).fit(X_train, y_train)
    # The matching L2 penalty: the prior w ~ N(0, I / a) on features scaled by
    # sqrt(3) / 2 is a penalty (2 a / 3) ||coef||^2, i.e. C = 3 / (4 a).
    reference = LogisticRegression(
        C=3.0 / (4.0 * clf.weight_precision_), max_iter=2000
    ).fit(X_train, y_train)
    auc = roc_auc_score(y_test, clf.predict_proba(X_test)[:, 1])
    reference_auc = roc_auc_score(y_test, reference.predict_proba(X_test)[:, 1])
    assert abs(auc - reference_auc) < 0.005


ADVERSARIAL_LOGREG_ROWS = np.array(
    [
        [1e300, -1e300] + [0.0] * 6,
        [5e-324] * 8,  # subnormal
        [3.0, 4.0] + [0.0] * 6,  # on the sphere, once scaled
        [0.0] * 8,
        [3.4e38, 3.4e38, 1e-300] + [0.0] * 5,  # float32 overflow
        [1.0] * 8,
        [np.nextafter(3.0, 4.0), 4.0] + [0.0] * 6,  # one ulp outside
    ]
)


@pytest.mark.parametrize("data_norm", [5.0, 1e-150, 1e20, 1e150])
def test_each_record_stays_within_its_sensitivity_exactly(data_norm):
    # In rational arithmetic, whatever the second moment (huge ones overflow
    # the float32 and even the float64 product: the weight is then 1/4, not
    # NaN), each record adds at most data_norm / 2 to the first block and
    # data_norm^2 / 4 (as the float the accountant is told) to the second.
    first_bound = Fraction(data_norm / 2.0) ** 2
    second_bound = Fraction(logistic._MAX_EXPECTED_OMEGA * data_norm**2) ** 2
    # Padded with zeros: rows with few non-zero entries take the sparse
    # kernel, the others the dense products.
    n_padding = 12
    n_weights = 9 + n_padding
    parity = np.add.outer(np.arange(n_weights), np.arange(n_weights)) % 2
    moments = [
        (np.zeros((n_weights, n_weights)), True),
        (1e-300 * np.eye(n_weights), True),
        (3e38 * np.eye(n_weights), True),
        (-1e30 * np.eye(n_weights), False),
        (np.full((n_weights, n_weights), 1e300), False),
        (np.where(parity, 1e300, -1e300), False),
    ]
    paths = set()
    for fit_intercept in (True, False):
        X = np.hstack(
            [
                ADVERSARIAL_LOGREG_ROWS,
                np.zeros((len(ADVERSARIAL_LOGREG_ROWS), n_padding)),
            ]
        )
        X[[2, 6]] *= data_norm / 5.0  # on, and just outside, the sphere
        rows = _design_rows(
            X if fit_intercept else np.hstack([X, X[:, :1]]), data_norm, fit_intercept
        )
        assert rows.shape[1] == n_weights
        for i in range(rows.shape[0]):
            for float32 in (True, False):
                e_step = _EStep(rows[i : i + 1], np.array([1.0]), float32=float32)
                paths.add(e_step.sparse is not None)
                for moment, isotropic_too in moments:
                    for isotropic in (False, True) if isotropic_too else (False,):
                        with np.errstate(all="ignore"):
                            first, second = e_step(moment, isotropic=isotropic)
                        assert (
                            sum(Fraction(float(v)) ** 2 for v in first) <= first_bound
                        )
                        assert np.all(np.isfinite(second)), (i, float32, isotropic)
                        assert (
                            sum(Fraction(float(v)) ** 2 for v in second.ravel())
                            <= second_bound
                        ), (i, float32, isotropic)
    assert paths == {True, False}


def test_expected_polya_gamma_is_a_quarter_at_nan():
    # As in the numba kernels: an overflowed product gives the largest weight
    # (still within the bound), not NaN.
    values = logistic._expected_polya_gamma(np.array([np.nan, np.inf, 0.0]))
    np.testing.assert_array_equal(values, [0.25, 0.0, 0.25])


def test_pandas_output_leaves_the_predictions_unchanged():
    # set_output wraps transform; the predictions read the logit moments
    # without it (Pipeline.set_output reaches every step).
    pd = pytest.importorskip("pandas")
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.RandomState(0)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] + 0.5 * rng.normal(size=300) > 0).astype(int)
    plain = make_pipeline(StandardScaler(), DPBayesLogReg(epsilon=INF, data_norm=4.0))
    framed = clone(plain).set_output(transform="pandas")
    plain.fit(X, y)
    framed.fit(X, y)
    for method in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        np.testing.assert_array_equal(
            getattr(framed, method)(X[:20]), getattr(plain, method)(X[:20])
        )
    assert framed.score(X, y) == plain.score(X, y)
    moments = framed.transform(X[:5])
    assert isinstance(moments, pd.DataFrame)
    assert list(moments.columns) == ["logit_mean", "logit_std"]
    np.testing.assert_array_equal(moments.to_numpy(), plain.transform(X[:5]))


def test_rows_beyond_data_norm_warn_except_a_private_fits_training_rows():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] > 0).astype(int)
    long_rows = X * 10.0
    with pytest.warns(UserWarning, match="above data_norm = 1; they were clipped"):
        model = DPBayesLogReg(epsilon=INF, data_norm=1.0).fit(long_rows, y)
    with pytest.warns(UserWarning, match="above data_norm = 1; they were clipped"):
        model.predict(long_rows)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*clipped")
        model.predict(X / 10.0)
        # Whether a private fit's training row lies outside the bound is not
        # released: no warning.
        private = DPBayesLogReg(epsilon=1.0, data_norm=1.0).fit(long_rows, y)
    with pytest.warns(UserWarning, match="clipped"):
        private.predict_proba(long_rows)


def test_a_learning_offset_does_not_pull_the_average_towards_zero():
    # With tau_0 > 0 the first steps are below 1; the second moment's average
    # is normalized by the weight of its steps, so that it is not scaled
    # down (which inflated the coefficients several times).
    X, y, _ = make_problem(500, 3)
    converged = DPBayesLogReg(data_norm=2.0, epsilon=INF, max_iter=50).fit(X, y).coef_
    for offset in (10.0, 1000.0):
        offset_fit = DPBayesLogReg(
            data_norm=2.0, epsilon=INF, learning_decay=0.8, learning_offset=offset,
            max_iter=50,
        ).fit(X, y)
        np.testing.assert_allclose(offset_fit.coef_, converged, rtol=0.05, atol=0.02)


@pytest.mark.secret_noise
def test_fit_transform_clips_private_training_rows_silently():
    X, y, _ = make_problem(60, 2)
    X[17] = [50.0, 0.0]
    private = DPBayesLogReg(data_norm=1.0, max_iter=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moments = private.fit_transform(X, y)
    assert moments.shape == (60, 2)
    with pytest.warns(UserWarning, match="clipped"):
        private.transform(X)
    with pytest.warns(UserWarning, match="clipped"):
        DPBayesLogReg(data_norm=1.0, max_iter=2, epsilon=INF).fit_transform(X, y)
