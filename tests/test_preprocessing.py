"""Tests of GeometricPrivatizer: behaviour, noise law, privacy audit, bad input."""

import math
import pickle
import random

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skprivfact import GeometricPrivatizer, mechanisms
from skprivfact.mechanisms import two_sided_geometric

# Tolerances of the moment tests: a correct implementation fails one with
# probability about 1e-6 under a random seed (the seeds here are fixed).
Z_TOLERANCE = stats.norm.isf(1e-6 / 2)


def noise_moments(alpha, max_abs=4000):
    """E|tau|, E[tau**2], Var(tau**2) and Var|tau| by summing the exact pmf."""
    t = np.arange(-max_abs, max_abs + 1)
    pmf = (1 - alpha) / (1 + alpha) * alpha ** np.abs(t)
    mean_abs = np.sum(pmf * np.abs(t))
    second = np.sum(pmf * t**2)
    fourth = np.sum(pmf * t**4)
    return mean_abs, second, fourth - second**2, second - mean_abs**2


# Behaviour -----------------------------------------------------------------


def test_transform_returns_int64_counts_plus_noise():
    X = np.array([[0, 3, 1], [2, 0, 5]])
    for data in (X, X.astype(np.float64), X.astype(np.int32), sp.csr_matrix(X)):
        privatizer = GeometricPrivatizer(epsilon=1.0, random_state=0).fit(data)
        X_private = privatizer.transform(data)
        assert isinstance(X_private, np.ndarray)
        assert X_private.dtype == np.int64 and X_private.shape == X.shape
        # The same stream, drawn directly, is the noise that was added.
        expected_noise = two_sided_geometric(1.0, 1, size=X.shape, random_state=0)
        np.testing.assert_array_equal(X_private - X, expected_noise)
    assert privatizer.alpha_ == math.exp(-1.0)
    assert privatizer.n_features_in_ == 3


def test_sparse_input_zeros_get_noise():
    epsilon = 1.0
    X = sp.random(2000, 50, density=0.01, format="csr", random_state=0)
    X.data = np.ceil(X.data * 10)
    X_private = GeometricPrivatizer(epsilon=epsilon, random_state=0).fit_transform(X)
    zero_entries = X.toarray() == 0
    # The fraction of zeros kept at zero is P(tau = 0) = (1 - alpha) / (1 + alpha).
    alpha = math.exp(-epsilon)
    p_zero = (1 - alpha) / (1 + alpha)
    n_zero = zero_entries.sum()
    kept = np.count_nonzero(X_private[zero_entries] == 0)
    tolerance = Z_TOLERANCE * math.sqrt(n_zero * p_zero * (1 - p_zero))
    assert abs(kept - n_zero * p_zero) <= tolerance


def test_repeated_transform_draws_fresh_noise_reproducibly():
    X = np.full((100, 20), 4)
    privatizer = GeometricPrivatizer(epsilon=1.0, random_state=7).fit(X)
    first, second = privatizer.transform(X), privatizer.transform(X)
    assert not np.array_equal(first, second)
    # The whole sequence is reproducible from the int seed ...
    other = GeometricPrivatizer(epsilon=1.0, random_state=7).fit(X)
    np.testing.assert_array_equal(other.transform(X), first)
    np.testing.assert_array_equal(other.transform(X), second)
    # ... and a new fit restarts it.
    np.testing.assert_array_equal(privatizer.fit(X).transform(X), first)
    # fit_transform is fit then transform.
    np.testing.assert_array_equal(
        GeometricPrivatizer(epsilon=1.0, random_state=7).fit_transform(X), first
    )


def test_unseeded_noise_is_not_replayed_by_numpy_global_seed():
    # random_state=None must not read numpy's global state: a seed set
    # anywhere in the process would replay the noise and strip it off.
    X = np.zeros((50, 20), dtype=int)
    releases = []
    for _ in range(2):
        np.random.seed(1234)
        releases.append(GeometricPrivatizer(epsilon=1.0).fit_transform(X))
    assert not np.array_equal(*releases)


def test_random_state_instance_is_used_and_advanced():
    X = np.ones((10, 3), dtype=int)
    rng = np.random.RandomState(0)
    privatizer = GeometricPrivatizer(random_state=rng).fit(X)
    X_private = privatizer.transform(X)
    reference = np.random.RandomState(0)
    np.testing.assert_array_equal(
        X_private - X, two_sided_geometric(1.0, size=X.shape, random_state=reference)
    )
    # The caller's instance advanced with the draws, as in scikit-learn.
    assert rng.randint(2**31) == reference.randint(2**31)


def test_noise_mean_and_variance():
    epsilon, sensitivity = 1.5, 2
    alpha = math.exp(-epsilon / sensitivity)
    X = np.zeros((1000, 1000), dtype=np.int64)
    noise = GeometricPrivatizer(epsilon, sensitivity, random_state=0).fit_transform(X)
    n = noise.size
    mean_abs, second, second_variance, _ = noise_moments(alpha)
    np.testing.assert_allclose(second, 2 * alpha / (1 - alpha) ** 2, rtol=1e-12)
    assert abs(noise.mean()) <= Z_TOLERANCE * math.sqrt(second / n)
    squares = noise.astype(np.float64) ** 2
    assert abs(squares.mean() - second) <= Z_TOLERANCE * math.sqrt(second_variance / n)


def test_score_is_minus_expected_absolute_noise():
    epsilon, sensitivity = 0.7, 1
    X = np.zeros((1000, 500), dtype=np.int64)
    privatizer = GeometricPrivatizer(epsilon, sensitivity, random_state=1).fit(X)
    noise = privatizer.transform(X)
    alpha = math.exp(-epsilon / sensitivity)
    mean_abs, _, _, abs_variance = noise_moments(alpha)
    score = privatizer.score(X)
    np.testing.assert_allclose(score, -mean_abs, rtol=1e-12)
    tolerance = Z_TOLERANCE * math.sqrt(abs_variance / noise.size)
    assert abs(score + np.abs(noise).mean()) <= tolerance
    # Data-independent, but X is still validated.
    assert privatizer.score(np.full((3, 500), 9)) == score
    with pytest.raises(ValueError, match="non-negative counts"):
        privatizer.score(-np.ones((3, 500)))


def test_grid_search_prefers_less_noise():
    X = np.random.RandomState(0).poisson(3.0, size=(40, 5))
    search = GridSearchCV(
        GeometricPrivatizer(random_state=0), {"epsilon": [0.5, 1.0, 2.0]}, cv=2
    ).fit(X)
    assert search.best_params_ == {"epsilon": 2.0}


def test_pipeline_clone_and_feature_names():
    X = np.random.RandomState(0).poisson(3.0, size=(30, 4))
    pipeline = make_pipeline(
        GeometricPrivatizer(epsilon=2.0, random_state=0), StandardScaler()
    )
    X_out = pipeline.fit_transform(X)
    assert X_out.shape == X.shape
    privatizer = pipeline[0]
    np.testing.assert_array_equal(
        privatizer.get_feature_names_out(), ["x0", "x1", "x2", "x3"]
    )
    np.testing.assert_array_equal(
        privatizer.get_feature_names_out(["a", "b", "c", "d"]), ["a", "b", "c", "d"]
    )
    cloned = clone(privatizer)
    assert cloned.get_params() == privatizer.get_params()
    assert not hasattr(cloned, "alpha_")


def test_feature_names_from_dataframe():
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame({"clicks": [1, 2, 0], "visits": [3, 0, 4]})
    privatizer = GeometricPrivatizer(random_state=0).fit(X)
    np.testing.assert_array_equal(privatizer.feature_names_in_, ["clicks", "visits"])
    np.testing.assert_array_equal(
        privatizer.get_feature_names_out(), ["clicks", "visits"]
    )


def test_pickle_round_trip():
    X = np.arange(12).reshape(4, 3)
    privatizer = GeometricPrivatizer(epsilon=0.5, sensitivity=2, random_state=3).fit(X)
    restored = pickle.loads(pickle.dumps(privatizer))
    assert restored.get_params() == privatizer.get_params()
    assert restored.alpha_ == privatizer.alpha_
    # A copy continues the same noise stream (documented in the Notes).
    np.testing.assert_array_equal(restored.transform(X), privatizer.transform(X))
    secure = GeometricPrivatizer(secure=True).fit(X)
    restored_secure = pickle.loads(pickle.dumps(secure))
    assert restored_secure.transform(X).shape == X.shape


def test_secure_transform_uses_the_exact_sampler(monkeypatch):
    # Replace the operating system's randomness by a seeded source: the output
    # must then be exactly the exact sampler's draws from that source.
    X = np.random.RandomState(0).poisson(2.0, size=(50, 8))
    monkeypatch.setattr(mechanisms.secrets, "SystemRandom", lambda: random.Random(11))
    X_private = GeometricPrivatizer(
        epsilon=0.8, sensitivity=2, secure=True
    ).fit_transform(X)
    expected_noise = two_sided_geometric(
        0.8, 2, size=X.shape, secure=True, random_state=random.Random(11)
    )
    assert X_private.dtype == np.int64
    np.testing.assert_array_equal(X_private - X, expected_noise)


def test_tags():
    tags = GeometricPrivatizer().__sklearn_tags__()
    assert tags.input_tags.sparse and tags.input_tags.positive_only
    assert tags.non_deterministic
    assert tags.transformer_tags.preserves_dtype == []


# Privacy audit -------------------------------------------------------------

AUDIT_DRAWS = 10**6
AUDIT_CONFIDENCE = (
    1e-3  # each one-sided Clopper-Pearson bound fails with this probability
)


def epsilon_lower_bound(release, count, sensitivity, n_draws=AUDIT_DRAWS):
    """High-confidence lower bound on the epsilon of ``release`` from one event.

    ``release`` maps a column of counts to its privatized column. The inputs
    ``count`` and ``count + sensitivity`` are neighbours; the event
    {output <= count} is fixed in advance (for the geometric mechanism it is
    exactly tight: P = 1 / (1 + alpha) against alpha**N / (1 + alpha) when
    alpha = exp(-epsilon / N)). Clopper-Pearson bounds, one-sided at
    confidence 1 - AUDIT_CONFIDENCE each, give a lower bound on
    log P(event | count) - log P(event | count + sensitivity) <= epsilon.
    """
    threshold = count
    outputs = release(np.full((n_draws, 1), count))
    neighbour_outputs = release(np.full((n_draws, 1), count + sensitivity))
    hits = np.count_nonzero(outputs <= threshold)
    neighbour_hits = np.count_nonzero(neighbour_outputs <= threshold)
    p_lower = stats.beta.ppf(AUDIT_CONFIDENCE, hits, n_draws - hits + 1)
    neighbour_p_upper = stats.beta.ppf(
        1 - AUDIT_CONFIDENCE, neighbour_hits + 1, n_draws - neighbour_hits
    )
    return math.log(p_lower / neighbour_p_upper)


def privatizer_release(epsilon, sensitivity, seed):
    # One stream for all calls: the two neighbours get independent noise.
    rng = np.random.RandomState(seed)

    def release(column):
        privatizer = GeometricPrivatizer(epsilon, sensitivity, random_state=rng)
        return privatizer.fit_transform(column)

    return release


def secure_sampler_release(epsilon, sensitivity, seed):
    rng = random.Random(seed)

    def release(column):
        return column + two_sided_geometric(
            epsilon, sensitivity, size=column.shape, secure=True, random_state=rng
        )

    return release


AUDIT_CASES = [(1.0, 1), (2.0, 2), (0.5, 1)]


@pytest.mark.parametrize("epsilon, sensitivity", AUDIT_CASES)
def test_audit_lower_bound_below_claimed_epsilon(epsilon, sensitivity):
    release = privatizer_release(epsilon, sensitivity, seed=2024)
    bound = epsilon_lower_bound(release, 5, sensitivity)
    print(f"\naudit numpy epsilon={epsilon} N={sensitivity}: lower bound {bound:.4f}")
    assert bound <= epsilon
    # The audit is tight: it gets within 2% of the claim at 10**6 draws.
    assert bound > 0.98 * epsilon - 0.01


@pytest.mark.parametrize("epsilon, sensitivity", AUDIT_CASES[:2])
def test_audit_secure_sampler(epsilon, sensitivity):
    release = secure_sampler_release(epsilon, sensitivity, seed=2024)
    bound = epsilon_lower_bound(release, 5, sensitivity)
    print(f"\naudit secure epsilon={epsilon} N={sensitivity}: lower bound {bound:.4f}")
    assert bound <= epsilon


@pytest.mark.parametrize("epsilon, sensitivity", AUDIT_CASES)
def test_audit_catches_a_ten_percent_violation(epsilon, sensitivity):
    # A broken mechanism: claims epsilon but draws noise for 1.1 * epsilon.
    broken = privatizer_release(1.1 * epsilon, sensitivity, seed=2025)
    bound = epsilon_lower_bound(broken, 5, sensitivity)
    print(f"\naudit broken claimed={epsilon} N={sensitivity}: lower bound {bound:.4f}")
    assert bound > epsilon


# Bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    "X, message",
    [
        (np.array([[1.5, 2.0]]), "non-integer value"),
        (np.array([[1.0, -2.0]]), "Negative values in data passed to X: it must hold non-negative counts"),
        (np.array([[1.0, np.nan]]), "NaN"),
        (np.array([[1.0, np.inf]]), "infinity"),
        (np.array([[2.0**53, 1.0]]), "counts must be below it"),
        (sp.csr_matrix(np.array([[0.0, 0.5]])), "non-integer value"),
        (np.zeros((0, 2)), "0 sample"),
    ],
)
@pytest.mark.parametrize("method", ["fit", "transform", "score"])
def test_bad_counts(X, message, method):
    privatizer = GeometricPrivatizer(random_state=0)
    if method != "fit":
        privatizer.fit(np.ones((2, 2), dtype=int))
    with pytest.raises(ValueError, match=message):
        getattr(privatizer, method)(X)


def test_wrong_number_of_features():
    privatizer = GeometricPrivatizer().fit(np.ones((3, 4), dtype=int))
    with pytest.raises(ValueError, match="X has 3 features, but GeometricPrivatizer"):
        privatizer.transform(np.ones((3, 3), dtype=int))


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(epsilon=0.0), "'epsilon' parameter of GeometricPrivatizer must be"),
        (dict(epsilon=-1.0), "'epsilon' parameter of GeometricPrivatizer must be"),
        (dict(epsilon=np.inf), "'epsilon' parameter of GeometricPrivatizer must be"),
        (dict(epsilon=np.nan), "'epsilon' parameter of GeometricPrivatizer must be"),
        (dict(sensitivity=0), "'sensitivity' parameter of GeometricPrivatizer must be"),
        (
            dict(sensitivity=1.5),
            "'sensitivity' parameter of GeometricPrivatizer must be",
        ),
        (dict(secure="yes"), "'secure' parameter of GeometricPrivatizer must be"),
        (dict(random_state="seed"), "'random_state' parameter of GeometricPrivatizer"),
        (dict(epsilon=1e-9, sensitivity=10**4), "overflow int64"),
        (dict(secure=True, random_state=0), "set random_state=None"),
    ],
)
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        GeometricPrivatizer(**params).fit(np.ones((2, 2), dtype=int))


@pytest.mark.parametrize("method", ["transform", "score"])
def test_not_fitted(method):
    with pytest.raises(NotFittedError):
        getattr(GeometricPrivatizer(), method)(np.ones((2, 2), dtype=int))


@pytest.mark.parametrize("changed", [{"epsilon": 10.0}, {"sensitivity": 1000}, {"secure": True}])
def test_noise_parameters_changed_after_fit_are_refused(changed):
    # alpha_ and score would describe one noise and transform draw another.
    X = np.random.RandomState(0).poisson(2, size=(20, 4))
    privatizer = GeometricPrivatizer(epsilon=1.0).fit(X)
    privatizer.set_params(**changed)
    for method in (privatizer.transform, privatizer.score):
        with pytest.raises(ValueError, match="changed since fit: call fit again"):
            method(X)
    assert privatizer.fit(X).alpha_ == pytest.approx(
        math.exp(-privatizer.epsilon / privatizer.sensitivity)
    )
