"""Tests of skprivfact.sep_mixture: DPSEPGaussianMixture."""

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.stats import multivariate_normal
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from skprivfact import DPSEPGaussianMixture, PrivacyLeakWarning, sep
from skprivfact.privacy import PrivacyBudget, PrivacyEngine

CENTRES = np.array([[-2.0, -2.0], [2.0, -2.0], [0.0, 2.5]])


def blobs(n, seed=0, scale=0.5):
    rng = np.random.RandomState(seed)
    labels = rng.randint(len(CENTRES), size=n)
    return CENTRES[labels] + scale * rng.normal(size=(n, 2)), labels


def matched_error(means, truth):
    cost = ((means[:, None, :] - truth[None]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    return np.sqrt(cost[rows, cols].max())


def mixture(**params):
    defaults = dict(
        n_components=3, bounds_X=(-5, 5), covariance=0.25, random_state=0
    )
    return DPSEPGaussianMixture(**{**defaults, **params})


def test_one_component_is_the_exact_conjugate_posterior():
    # With one component every record belongs to it: the tilted distribution
    # is Gaussian and one full-batch SEP update at damping 1 is exact.
    rng = np.random.RandomState(0)
    X = rng.normal(1.0, 0.7, size=(400, 3))
    prior_mean, prior_precision, variance = 0.5, 2.0, 0.49
    gm = DPSEPGaussianMixture(
        1, epsilon=math.inf, clip_norm=None, damping=1.0, max_iter=3, batch_size=None,
        bounds_X=(-4, 4), covariance=variance, mean_prior=prior_mean,
        mean_precision_prior=prior_precision, random_state=0,
    ).fit(X)
    precision = prior_precision + X.shape[0] / variance
    mean = (prior_precision * prior_mean + X.sum(axis=0) / variance) / precision
    np.testing.assert_allclose(gm.means_[0], mean, rtol=1e-10)
    np.testing.assert_allclose(gm.means_variance_, [1 / precision], rtol=1e-10)
    np.testing.assert_allclose(gm.means_covariance_[0], np.eye(3) / precision, rtol=1e-10)


def test_noise_free_sep_recovers_the_means_and_their_uncertainty():
    X, labels = blobs(3000)
    gm = mixture(epsilon=math.inf, clip_norm=None, max_iter=60).fit(X)
    assert matched_error(gm.means_, CENTRES) < 0.05
    # Posterior variance of a mean: about covariance / (records in it).
    counts = np.sort(np.bincount(labels))
    np.testing.assert_allclose(np.sort(gm.means_variance_)[::-1], 0.25 / counts, rtol=0.1)
    assert np.mean(gm.predict(X) == gm.predict(CENTRES)[labels]) > 0.99


def test_private_fit_recovers_the_means_on_large_data():
    X, _ = blobs(20_000, seed=1)
    gm = mixture(epsilon=1.0).fit(X)
    assert gm.privacy_spent_[0] <= 1.0 and gm.noise_multiplier_ > 0
    assert gm.neighbouring_relation_ == "substitution"
    assert matched_error(gm.means_, CENTRES) < 0.1


def test_density_methods_agree_with_the_posterior_predictive():
    X, _ = blobs(500)
    gm = mixture(epsilon=math.inf, clip_norm=None).fit(X)
    test = X[:7]
    density = sum(
        w * multivariate_normal(m, (gm.covariance + v) * np.eye(2)).pdf(test)
        for w, m, v in zip(gm.weights_, gm.means_, gm.means_variance_)
    )
    np.testing.assert_allclose(gm.score_samples(test), np.log(density), rtol=1e-10)
    assert gm.score(test) == pytest.approx(np.mean(np.log(density)))
    proba = gm.predict_proba(test)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(gm.transform(test), proba)
    np.testing.assert_array_equal(gm.predict(test), proba.argmax(axis=1))
    assert list(gm.get_feature_names_out()) == [
        "dpsepgaussianmixture0", "dpsepgaussianmixture1", "dpsepgaussianmixture2"
    ]


class EngineSpy:
    """Records every call to the engine: method and arguments, not data values."""

    def __init__(self, monkeypatch):
        self.calls = []
        sample, release = PrivacyEngine.sample, PrivacyEngine.release
        spy = self

        def recording_sample(engine, n_samples, sample_rate=None):
            spy.calls.append(("sample", n_samples, sample_rate))
            return sample(engine, n_samples, sample_rate)

        def recording_release(engine, blocks, sensitivities, **kwargs):
            spy.calls.append(
                ("release", tuple(np.shape(b) for b in blocks), tuple(sensitivities),
                 tuple(sorted(kwargs.items())))
            )
            return release(engine, blocks, sensitivities, **kwargs)

        monkeypatch.setattr(PrivacyEngine, "sample", recording_sample)
        monkeypatch.setattr(PrivacyEngine, "release", recording_release)


@pytest.mark.parametrize("batch_size", [None, 40])
def test_control_flow_does_not_depend_on_the_data(monkeypatch, batch_size):
    # Two datasets of the same shape, one clustered and one that leaves
    # components empty and precisions negative: the same engine calls.
    spy = EngineSpy(monkeypatch)
    clustered, _ = blobs(200)
    rng = np.random.RandomState(3)
    degenerate = np.vstack([np.full((199, 2), 4.9), rng.uniform(-5, 5, size=(1, 2))])
    sequences = []
    for X in (clustered, degenerate):
        spy.calls.clear()
        mixture(epsilon=1.0, max_iter=4, batch_size=batch_size).fit(X)
        sequences.append(list(spy.calls))
    assert sequences[0] == sequences[1]
    n_releases = 4 * (1 if batch_size is None else 5)
    assert [c[0] for c in sequences[0]] == ["sample", "release"] * n_releases
    # One release per update: all components' sites in one block.
    assert sequences[0][1][1:3] == (((3 * 3,),), (1.0,))


def test_each_record_contribution_is_clipped_over_all_components(monkeypatch):
    outputs = []
    original = sep.clip_rows

    def recording(X, max_norm):
        clipped = original(X, max_norm)
        outputs.append((clipped, max_norm))
        return clipped

    monkeypatch.setattr(sep, "clip_rows", recording)
    X, _ = blobs(300)
    mixture(epsilon=math.inf, clip_norm=0.2, max_iter=20).fit(X)
    site_calls = [c for c in outputs if c[0].shape[0] > 1]
    assert site_calls
    for clipped, max_norm in site_calls:
        assert max_norm == 0.2 and clipped.shape[1] == 3 * 3
        assert np.all(np.linalg.norm(clipped, axis=1) <= 0.2 * (1 + 1e-12))
    # The bound binds: once the components have formed, the stacked sites
    # of typical records exceed it (at the broad start they are small).
    assert np.mean(np.isclose(np.linalg.norm(site_calls[-1][0], axis=1), 0.2)) > 0.5


def test_bounds_none_warns_only_when_private():
    X, _ = blobs(100)
    with pytest.warns(PrivacyLeakWarning, match="bounds_X is None"):
        mixture(bounds_X=None, epsilon=1.0).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        mixture(bounds_X=None, epsilon=math.inf, clip_norm=None).fit(X)


def test_parameter_errors():
    X, _ = blobs(50)
    with pytest.raises(ValueError, match="clip_norm=None"):
        mixture(clip_norm=None).fit(X)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        mixture(weights=[0.5, 0.3, 0.3]).fit(X)
    with pytest.raises(ValueError, match=r"weights must have shape \(3,\)"):
        mixture(weights=[0.5, 0.5]).fit(X)
    with pytest.raises(ValueError, match="at least 2 samples"):
        mixture().fit(X[:1])
    # A component variance negligible against the data's scale (one outlier
    # of 1e12 standardizes the rest onto a point) is refused, not divided by.
    X_outlier = X.copy()
    X_outlier[0, 0] = 1e12
    for params in ({"bounds_X": None, "epsilon": math.inf, "clip_norm": None},
                   {"bounds_X": (-1e12, 1e12)}):
        with pytest.raises(ValueError, match="covariance is negligible against the "
                           "scale of X"):
            mixture(**params).fit(X_outlier)


def test_known_weights_enter_the_responsibilities():
    X, _ = blobs(300)
    uniform = mixture(epsilon=math.inf, clip_norm=None).fit(X)
    order = np.argsort(uniform.means_[:, 0])
    weights = np.full(3, 0.05)
    weights[order[0]] = 0.9
    skewed = mixture(epsilon=math.inf, clip_norm=None, weights=weights).fit(X)
    point = np.array([[-1.0, 0.0]])  # between the two lower blobs
    assert skewed.predict_proba(point)[0, order[0]] > uniform.predict_proba(point)[0, order[0]]


def test_pipeline_and_grid_search_over_epsilon_share_one_budget():
    X, _ = blobs(600)
    budget = PrivacyBudget(epsilon=30.0, delta=1e-5)
    pipe = make_pipeline(
        FunctionTransformer(), mixture(max_iter=5, budget=budget)
    )
    search = GridSearchCV(
        pipe, {"dpsepgaussianmixture__epsilon": [0.5, 2.0]}, cv=2, error_score="raise"
    ).fit(X)
    assert budget.n_fits == 5  # 2 epsilons x 2 folds, and the refit
    best = search.best_estimator_[-1]
    assert best.privacy_spent_[0] <= best.epsilon
    assert search.best_params_["dpsepgaussianmixture__epsilon"] == 2.0
    assert np.isfinite(search.score(X))


def test_sites_match_the_tilted_moments_by_quadrature():
    # One dimension, two components: the tilted distribution
    # N(mu1; m1, v1) N(mu2; m2, v2) (pi1 N(x; mu1, s2) + pi2 N(x; mu2, s2))
    # integrated on a grid; cavity + site must be its moment match.
    from skprivfact.sep_mixture import _MixtureModel

    s2, weights = 0.04, np.array([0.3, 0.7])
    means, variances = np.array([-0.2, 0.3]), np.array([0.05, 0.02])
    model = _MixtureModel(2, 1, s2, np.log(weights), np.zeros(1), 1.0, 10, 1.0, 1.0)
    cavity = np.column_stack([1 / variances, means / variances]).ravel()
    grid = np.linspace(-1.5, 1.5, 1201)
    mu1, mu2 = np.meshgrid(grid, grid, indexing="ij")
    for x in (-0.5, 0.05, 0.6):
        density = (
            np.exp(-((mu1 - means[0]) ** 2) / (2 * variances[0]))
            * np.exp(-((mu2 - means[1]) ** 2) / (2 * variances[1]))
            * (
                weights[0] * np.exp(-((x - mu1) ** 2) / (2 * s2))
                + weights[1] * np.exp(-((x - mu2) ** 2) / (2 * s2))
            )
        )
        density /= density.sum()
        site = model.sites(np.array([[x]]), None, cavity)[0].reshape(2, 2)
        for k, mu in enumerate((mu1, mu2)):
            mean = (density * mu).sum()
            var = (density * mu**2).sum() - mean**2
            precision = 1 / variances[k] + site[k, 0]
            assert precision == pytest.approx(1 / var, rel=1e-5)
            assert (means[k] / variances[k] + site[k, 1]) / precision == pytest.approx(
                mean, abs=1e-6
            )


@pytest.mark.parametrize(
    "mean_prior, message",
    [
        ([0.0, 0.0, 0.0], r"one entry per feature \(2\); got shape \(3,\)"),
        (np.nan, "mean_prior must be finite"),
        ([0.0, np.inf], "mean_prior must be finite"),
    ],
)
def test_a_bad_mean_prior_is_refused_before_any_budget_is_reserved(mean_prior, message):
    X = np.random.RandomState(0).normal(size=(50, 2))
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5)
    with pytest.raises(ValueError, match=message):
        DPSEPGaussianMixture(2, mean_prior=mean_prior, budget=budget).fit(X)
    assert budget.n_fits == 0


def test_a_scalar_mean_prior_is_every_features_prior_mean():
    X = np.random.RandomState(0).normal(size=(50, 2))
    scalar = DPSEPGaussianMixture(2, epsilon=float("inf"), mean_prior=0.5, random_state=0)
    vector = DPSEPGaussianMixture(
        2, epsilon=float("inf"), mean_prior=[0.5, 0.5], random_state=0
    )
    np.testing.assert_array_equal(scalar.fit(X).means_, vector.fit(X).means_)


def test_a_mean_prior_near_a_corner_still_separates_the_components():
    # The initial means are drawn in the whole box, not around the prior mean:
    # around a prior near a corner they were clipped to that corner together
    # and never separated.
    X = np.vstack(
        [np.random.RandomState(0).normal(loc, 0.3, size=(500, 2)) for loc in (-2.0, 2.0)]
    )
    model = DPSEPGaussianMixture(
        2, epsilon=float("inf"), bounds_X=(-4, 4), mean_prior=3.9, random_state=0
    ).fit(X)
    truth = np.array([[-2.0, -2.0], [2.0, 2.0]])
    assert matched_error(model.means_, truth) < 0.1


@pytest.mark.parametrize("mean_prior", [10.0, [0.0, -4.5]])
def test_a_mean_prior_outside_the_bounds_is_refused_before_any_budget(mean_prior):
    X = np.random.RandomState(0).normal(size=(50, 2))
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5)
    with pytest.raises(ValueError, match="mean_prior must lie within bounds_X"):
        DPSEPGaussianMixture(2, bounds_X=(-4, 4), mean_prior=mean_prior, budget=budget).fit(X)
    assert budget.n_fits == 0


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"bounds_X": (4, -4)}, "every lower bound must be below"),
        ({"covariance": 1e-20}, "covariance is negligible"),
    ],
)
def test_a_refused_refit_keeps_the_model_and_charges_nothing(bad, message):
    X, _ = blobs(200)
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5)
    model = mixture(budget=budget).fit(X)
    labels = model.predict(X)
    with pytest.raises(ValueError, match=message):
        model.set_params(**bad).fit(X)
    assert budget.n_fits == 1
    np.testing.assert_array_equal(model.predict(X), labels)


def test_predictions_use_the_fitted_covariances_not_the_parameter():
    X, _ = blobs(200)
    model = mixture(epsilon=float("inf")).fit(X)
    scores = model.score_samples(X)
    model.set_params(covariance=25.0)
    np.testing.assert_array_equal(model.score_samples(X), scores)
    np.testing.assert_array_equal(model.covariances_, np.full(3, 0.25))


def test_sample_draws_from_the_posterior_predictive():
    X, _ = blobs(400)
    model = mixture(epsilon=float("inf"), weights=[0.5, 0.3, 0.2]).fit(X)
    samples, labels = model.sample(30_000)
    assert samples.shape == (30_000, 2) and labels.shape == (30_000,)
    np.testing.assert_allclose(np.bincount(labels) / 30_000, [0.5, 0.3, 0.2], atol=0.01)
    spread = model.covariances_ + model.means_variance_
    for k in range(3):
        drawn = samples[labels == k]
        np.testing.assert_allclose(drawn.mean(axis=0), model.means_[k], atol=0.03)
        np.testing.assert_allclose(drawn.var(axis=0), spread[k], rtol=0.05)
    # The same random_state draws the same samples, as in scikit-learn.
    np.testing.assert_array_equal(model.sample(5)[0], model.sample(5)[0])
    with pytest.raises(ValueError, match="n_samples must be an integer of at least 1"):
        model.sample(0)
