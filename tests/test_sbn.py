"""Tests of DPSigmoidBeliefNet: kernels against brute force, scores against the
exact likelihood, per-block sensitivities against adversarial binary rows,
recovery of a known network, and the scikit-learn integration."""

import itertools
import math

import numpy as np
import pytest
from scipy import special
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from skprivfact import DPBayesLogReg, DPSigmoidBeliefNet, sbn
from skprivfact import _sbn_kernels as kernels
from skprivfact.datasets import make_sigmoid_belief_net
from skprivfact.exceptions import PrivacyBudgetExceededError
from skprivfact.privacy import PrivacyBudget
from skprivfact.sbn import sigmoid_belief_net_log_likelihood


def _states(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def test_polya_gamma_mean_is_tanh_ratio_and_at_most_a_quarter():
    c = np.concatenate([[0.0, 1e-8, 1e-5, 9.9e-5, 1e-4], np.geomspace(1e-3, 700, 200)])
    out = np.empty_like(c)
    kernels.polya_gamma_mean(c**2, out)
    reference = np.where(c == 0, 0.25, np.tanh(c / 2) / (2 * np.where(c == 0, 1, c)))
    np.testing.assert_allclose(out, reference, rtol=1e-12)
    assert out.max() <= 0.25 and out[0] == 0.25


def test_expected_outer_product_against_enumeration():
    rng = np.random.RandomState(0)
    K = 3
    mu = rng.uniform(size=(4, K))
    out = np.empty((4, (K + 1) * (K + 2) // 2))
    kernels.expected_outer_tri(mu, out)
    rows, cols = np.triu_indices(K + 1)
    for i in range(4):
        expected = np.zeros((K + 1, K + 1))
        for h in _states(K):
            p = np.prod(np.where(h == 1, mu[i], 1 - mu[i]))
            h1 = np.append(h, 1.0)
            expected += p * np.outer(h1, h1)
        np.testing.assert_allclose(out[i], expected[rows, cols], atol=1e-14)


def test_exact_log_likelihood_is_normalised():
    rng = np.random.RandomState(1)
    D, K = 5, 3
    weights, bias, logits = rng.normal(size=(D, K)), rng.normal(size=D), rng.normal(size=K)
    ll = sigmoid_belief_net_log_likelihood(_states(D), weights, bias, logits)
    assert special.logsumexp(ll) == pytest.approx(0.0, abs=1e-12)
    # Brute force for one row.
    v = _states(D)[7]
    total = 0.0
    for h in _states(K):
        prior = np.prod(special.expit(np.where(h == 1, logits, -logits)))
        p_v = special.expit(weights @ h + bias)
        total += prior * np.prod(np.where(v == 1, p_v, 1 - p_v))
    assert ll[7] == pytest.approx(math.log(total), rel=1e-12)


def _point_model(weights, bias, logits, **params):
    """A fitted estimator whose posterior is the given point (no covariance)."""
    D, K = weights.shape
    model = DPSigmoidBeliefNet(K, epsilon=float("inf"), random_state=0, **params)
    model.fit(np.zeros((2, D)))
    model._mean = np.hstack([weights, bias[:, None]])
    model._covariance = np.zeros((D, K + 1, K + 1))
    model._hidden_mean = np.asarray(logits, float)
    model._publish()
    return model


def test_scores_bracket_the_exact_log_likelihood():
    X, _, params = make_sigmoid_belief_net(300, 20, 4, random_state=0)
    model = _point_model(
        params["weights"],
        params["visible_bias"],
        params["hidden_logits"],
        n_importance_samples=2000,
        max_local_iter=10,
    )
    exact = sigmoid_belief_net_log_likelihood(X, **params)
    bound = model.lower_bound(X)
    estimate = model.score_samples(X)
    assert np.all(bound <= exact + 1e-9)
    # The mean-field bound is not tight; importance sampling nearly is.
    gap_bound = np.mean(exact - bound)
    gap_estimate = abs(np.mean(exact - estimate))
    assert gap_bound > 0.05
    assert gap_estimate < 0.02
    assert model.score(X) == pytest.approx(np.mean(estimate))


def test_local_sweeps_increase_the_bound():
    X, _, params = make_sigmoid_belief_net(200, 16, 4, random_state=3)
    bounds = [
        _point_model(
            params["weights"], params["visible_bias"], params["hidden_logits"],
            max_local_iter=n,
        ).lower_bound(X).mean()
        for n in (1, 2, 4, 8)
    ]
    # Coordinate ascent: each sweep can only raise the bound.
    assert np.all(np.diff(bounds) >= -1e-9) and bounds[-1] > bounds[0] + 0.02


# Per-block sensitivities -----------------------------------------------------


def _contributions(local_step, rows, sensitivities, n_sweeps=3):
    U = sbn._centred_observations(rows)
    return [
        [np.linalg.norm(block) for block in sbn._batch_statistics(
            U[i : i + 1], local_step, n_sweeps, sensitivities
        )[:3]]
        for i in range(rows.shape[0])
    ]


@pytest.mark.parametrize("D,K", [(8, 3), (64, 10)])
def test_block_sensitivities_against_adversarial_binary_rows(D, K):
    sensitivities = sbn._block_sensitivities(D, K)
    n_tri = (K + 1) * (K + 2) // 2
    assert sensitivities == pytest.approx(
        (math.sqrt(D * n_tri) / 4, math.sqrt(D * (K + 1)) / 2, math.sqrt(K))
    )
    rng = np.random.RandomState(0)
    adversarial = np.vstack(
        [np.ones(D), np.zeros(D), (np.arange(D) % 2).astype(float)]
        + [(rng.uniform(size=D) < p).astype(float) for p in (0.1, 0.5, 0.9)]
    )
    # The worst case: zero weights (E[omega] = 1/4 exactly) and hidden units
    # certainly on (mu = 1): every bound is attained.
    worst = sbn._point_local_step(np.zeros((D, K)), np.zeros(D), np.full(K, 60.0))
    for norms in _contributions(worst, adversarial, sensitivities):
        for norm, bound in zip(norms, sensitivities):
            assert bound * (1 - 1e-6) <= norm <= bound * (1 + 1e-12)
    # Random networks, and rows far outside [0, 1]: never beyond the bounds.
    wild = np.vstack([adversarial, np.full((1, D), 1e6), -1e3 * np.ones((1, D))])
    for seed in range(5):
        r = np.random.RandomState(seed)
        mean = r.normal(scale=3.0, size=(D, K + 1))
        root = r.normal(scale=0.3, size=(D, K + 1, K + 1))
        step = sbn._LocalStep(
            mean, root @ np.swapaxes(root, 1, 2) + mean[:, :, None] * mean[:, None, :],
            r.normal(scale=3.0, size=K),
        )
        for norms in _contributions(step, wild, sensitivities):
            assert all(n <= b * (1 + 1e-12) for n, b in zip(norms, sensitivities))


def test_one_release_of_three_blocks_per_iteration(monkeypatch):
    calls = []
    from skprivfact.privacy import PrivacyEngine

    original = PrivacyEngine.release

    def spy(engine, blocks, sensitivities, **kwargs):
        calls.append(([b.shape for b in blocks], list(sensitivities)))
        return original(engine, blocks, sensitivities, **kwargs)

    monkeypatch.setattr(PrivacyEngine, "release", spy)
    X, _, _ = make_sigmoid_belief_net(400, 12, 3, random_state=0)
    model = DPSigmoidBeliefNet(3, epsilon=1.0, batch_size=100, max_iter=2, random_state=0)
    model.fit(X)
    assert len(calls) == model.n_releases_ == 8  # 2 passes of 4 batches
    assert calls[0] == ([(12, 10), (12, 4), (3,)], list(sbn._block_sensitivities(12, 3)))


def test_batch_statistics_in_chunks_are_the_whole_batch_sums(monkeypatch):
    # Each row's factors depend on that row alone: summing them chunk by
    # chunk (for memory) gives the whole batch's sums, empty batches included.
    X, _, _ = make_sigmoid_belief_net(50, 6, 3, random_state=0)
    model = DPSigmoidBeliefNet(3, epsilon=float("inf"), max_iter=1, random_state=0).fit(X)
    U = sbn._centred_observations(X)
    sensitivities = sbn._block_sensitivities(6, 3)
    whole = sbn._batch_statistics(U, model._posterior_local_step(), 3, sensitivities)
    monkeypatch.setattr(sbn, "_CHUNK", 7)
    chunked = sbn._batch_statistics(U, model._posterior_local_step(), 3, sensitivities)
    for a, b in zip(whole, chunked):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    empty = sbn._batch_statistics(U[:0], model._posterior_local_step(), 3, sensitivities)
    assert [np.shape(a) for a in empty] == [(6, 10), (6, 4), (3,), (0, 3)]
    assert all(not np.any(a) for a in empty)


# Learning ----------------------------------------------------------------------


def test_recovers_a_known_network_without_noise():
    X, _, params = make_sigmoid_belief_net(6000, 16, 3, random_state=0)
    train, test = X[:5000], X[5000:]
    model = DPSigmoidBeliefNet(3, epsilon=float("inf"), max_iter=40, random_state=0)
    model.fit(train)
    true = sigmoid_belief_net_log_likelihood(test, **params).mean()
    learned = sigmoid_belief_net_log_likelihood(
        test, model.components_.T, model.intercept_visible_, model.intercept_hidden_
    ).mean()
    assert learned >= true * 1.02  # within 2% (log-likelihoods are negative)
    # A model with the right marginals but no hidden structure is far worse.
    p = train.mean(axis=0)
    independent = (test @ np.log(p) + (1 - test) @ np.log(1 - p)).mean()
    assert learned > independent + 0.5 * (true - independent)


def test_private_fit_learns_and_reports_its_epsilon():
    X, _, params = make_sigmoid_belief_net(20000, 16, 3, random_state=1)
    train, test = X[:18000], X[18000:]
    model = DPSigmoidBeliefNet(
        3, epsilon=4.0, batch_size=2000, max_iter=5, random_state=0
    ).fit(train)
    assert model.privacy_spent_[0] <= 4.0 and model.noise_multiplier_ > 0
    assert model.neighbouring_relation_ == "substitution"
    learned = sigmoid_belief_net_log_likelihood(
        test, model.components_.T, model.intercept_visible_, model.intercept_hidden_
    ).mean()
    p = train.mean(axis=0)
    independent = (test @ np.log(p) + (1 - test) @ np.log(1 - p)).mean()
    assert learned > independent


def test_sample_follows_the_fitted_model():
    X, _, params = make_sigmoid_belief_net(10, 6, 2, random_state=0)
    model = _point_model(params["weights"], params["visible_bias"], params["hidden_logits"])
    draws = model.sample(40000, random_state=0)
    assert set(np.unique(draws)) <= {0.0, 1.0}
    states = _states(6)
    probabilities = np.exp(sigmoid_belief_net_log_likelihood(states, **params))
    marginals = probabilities @ states
    np.testing.assert_allclose(draws.mean(axis=0), marginals, atol=4 * 0.5 / 200)


def test_transform_is_the_posterior_of_the_hidden_units():
    X, H, params = make_sigmoid_belief_net(500, 32, 3, weight_scale=4.0, random_state=2)
    model = _point_model(params["weights"], params["visible_bias"], params["hidden_logits"])
    mu = model.transform(X)
    assert mu.shape == (500, 3) and np.all((mu >= 0) & (mu <= 1))
    # Strong weights: the posterior recovers the generating hidden states.
    assert np.mean((mu > 0.5) == (H == 1)) > 0.9


def test_partial_fit_spends_one_release_per_call():
    X, _, _ = make_sigmoid_belief_net(300, 8, 2, random_state=0)
    model = DPSigmoidBeliefNet(2, epsilon=2.0, batch_size=100, max_iter=2, random_state=0)
    spent = []
    for _ in range(3):
        model.partial_fit(X)
        spent.append(model.privacy_spent_[0])
    assert model.n_releases_ == 3 and spent[0] < spent[1] < spent[2] <= 2.0
    with pytest.raises(ValueError, match="changed since the first partial_fit"):
        model.set_params(epsilon=float("inf")).partial_fit(X)
    model.set_params(epsilon=2.0)
    with pytest.raises(PrivacyBudgetExceededError):
        for _ in range(100):
            model.partial_fit(X)
    assert model.privacy_spent_[0] <= 2.0


@pytest.mark.parametrize("value", [-0.5, 2.0, 16.0])
def test_values_outside_zero_one_are_refused_without_naming_them(value):
    # Pixel intensities (0..16) would fit and score garbage: a positive
    # "log-likelihood" of binary rows.
    X, _, _ = make_sigmoid_belief_net(40, 6, 2, random_state=0)
    X_bad = X.copy()
    X_bad[3, 2] = value
    message = r"models binary rows: X must hold values in \[0, 1\]"
    for epsilon in (1.0, float("inf")):
        with pytest.raises(ValueError, match=message) as error:
            DPSigmoidBeliefNet(2, epsilon=epsilon, max_iter=1).fit(X_bad)
        assert str(value) not in str(error.value)
    model = DPSigmoidBeliefNet(2, epsilon=float("inf"), max_iter=2, random_state=0)
    model.fit(X)
    for method in (model.transform, model.score, model.partial_fit):
        with pytest.raises(ValueError, match=message):
            method(X_bad)
    # soft observations in [0, 1] are accepted, and a score is a log-probability
    assert model.score(np.clip(X, 0.25, 0.75)) < 0 and model.score(X) < 0


def _binary_digits(classes):
    digits = load_digits()
    keep = np.isin(digits.target, classes)
    return (digits.data[keep] > 7).astype(float), digits.target[keep]


def test_pipeline_with_private_logistic_regression_on_hidden_features():
    X, y = _binary_digits([0, 1])
    rng = np.random.RandomState(0)
    order = rng.permutation(len(y))
    X, y = X[order], y[order]
    pipe = make_pipeline(
        DPSigmoidBeliefNet(6, epsilon=float("inf"), max_iter=30, random_state=0),
        DPBayesLogReg(epsilon=float("inf"), data_norm=math.sqrt(6)),
    )
    pipe.fit(X[:250], y[:250])
    assert pipe.score(X[250:], y[250:]) > 0.95


def test_grid_search_over_epsilon_charges_one_budget():
    X, _ = _binary_digits([0, 1, 2])
    budget = PrivacyBudget(epsilon=30.0, delta=1e-5)
    search = GridSearchCV(
        DPSigmoidBeliefNet(4, batch_size=100, max_iter=2, n_importance_samples=50,
                           random_state=0, budget=budget),
        {"epsilon": [1.0, 4.0]},
        cv=2,
        error_score="raise",
    ).fit(X)
    assert budget.n_fits == 5  # 2 epsilons x 2 folds, and the refit
    assert search.best_params_["epsilon"] in (1.0, 4.0)
    assert np.isfinite(search.best_score_)
    assert budget.spent[0] > 4.0


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_refused_input_reserves_no_budget(method):
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5)
    X = np.random.RandomState(0).normal(size=(300, 5))  # not binary
    with pytest.raises(ValueError, match="binary rows"):
        getattr(DPSigmoidBeliefNet(2, budget=budget), method)(X)
    assert budget.n_fits == 0
    assert budget.spent[0] == 0.0


def test_partial_fit_refuses_a_changed_n_components_before_releasing():
    X, _, _ = make_sigmoid_belief_net(300, 8, 2, random_state=0)
    model = DPSigmoidBeliefNet(2, epsilon=2.0, batch_size=100, max_iter=3, random_state=0)
    model.partial_fit(X)
    hidden = model.transform(X)
    with pytest.raises(ValueError, match="n_components changed since the first partial_fit"):
        model.set_params(n_components=4).partial_fit(X)
    assert model.n_releases_ == 1
    np.testing.assert_array_equal(model.set_params(n_components=2).transform(X), hidden)
    model.partial_fit(X)
    assert model.n_releases_ == 2


def test_init_scale_must_be_positive():
    X, _, _ = make_sigmoid_belief_net(50, 4, 2, random_state=0)
    with pytest.raises(ValueError, match="init_scale"):
        DPSigmoidBeliefNet(2, init_scale=0.0).fit(X)
