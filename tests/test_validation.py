"""Tests of skprivfact.utils._validation: the input gateways and parameter checks."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator

import skprivfact
from skprivfact.utils._validation import (
    check_count_matrix,
    check_noisy_count_matrix,
    check_positive_bound,
    check_privacy_params,
)

COUNTS = np.array([[0, 3, 1], [2, 0, 5]])


class _Recorder(BaseEstimator):
    """A bare estimator for validate_data to record n_features_in_ on."""


# check_count_matrix --------------------------------------------------------


@pytest.mark.parametrize(
    "X",
    [
        COUNTS,
        COUNTS.astype(np.int32),
        COUNTS.astype(np.float64),
        COUNTS.astype(np.float32),
        COUNTS.tolist(),
    ],
)
def test_count_matrix_accepts_integral_values(X):
    validated = check_count_matrix(X)
    assert isinstance(validated, np.ndarray)
    np.testing.assert_array_equal(validated, COUNTS)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_count_matrix_accepts_sparse(fmt):
    X = sp.random(20, 10, density=0.2, format=fmt, random_state=0)
    X.data = np.ceil(X.data * 5)
    validated = check_count_matrix(X)
    assert sp.issparse(validated)
    np.testing.assert_array_equal(validated.toarray(), X.toarray())


@pytest.mark.parametrize(
    "X, message",
    [
        (
            np.array([[1.0, 2.375]]),
            "X must hold integer counts; found a non-integer value",
        ),
        (
            np.array([[1, -27]]),
            "Negative values in data passed to X: it must hold non-negative counts",
        ),
        (np.array([[1.0, np.nan]]), "Input X contains NaN"),
        (np.array([[1.0, np.inf]]), "Input X contains infinity"),
        (np.ones(3), "Expected 2D array, got 1D array"),
        (np.zeros((0, 3)), "0 sample\\(s\\)"),
        (sp.csr_matrix(np.array([[0.0, -1.0]])), "non-negative counts"),
        (sp.csr_matrix(np.array([[0.0, 0.5]])), "non-integer value"),
    ],
)
def test_count_matrix_rejects(X, message):
    with pytest.raises(ValueError, match=message) as error:
        check_count_matrix(X)
    # a record's value is not named: it may be private
    assert "27" not in str(error.value) and "2.375" not in str(error.value)


def test_count_matrix_names_the_input():
    with pytest.raises(ValueError, match="X_test must hold integer counts"):
        check_count_matrix(np.array([[0.5]]), input_name="X_test")


def test_count_matrix_rejects_fractional_list_input():
    with pytest.raises(ValueError, match="non-integer value"):
        check_count_matrix([[1.5, 2.0]])


def test_count_matrix_with_estimator_records_and_checks_n_features():
    estimator = _Recorder()
    check_count_matrix(COUNTS, estimator=estimator, reset=True)
    assert estimator.n_features_in_ == 3
    check_count_matrix(COUNTS[:, :3], estimator=estimator, reset=False)
    with pytest.raises(
        ValueError, match="X has 2 features, but _Recorder is expecting 3"
    ):
        check_count_matrix(COUNTS[:, :2], estimator=estimator, reset=False)


# check_noisy_count_matrix --------------------------------------------------


def test_noisy_count_matrix_accepts_negative_integers():
    X = np.array([[-3, 0, 2], [1, -1, 7]])
    np.testing.assert_array_equal(check_noisy_count_matrix(X), X)
    np.testing.assert_array_equal(check_noisy_count_matrix(X.astype(float)), X)


@pytest.mark.parametrize(
    "X, message",
    [
        (np.array([[-1.5, 2.0]]), "X must hold integer \\(noisy\\) counts"),
        (np.array([[np.nan, 2.0]]), "Input X contains NaN"),
        (sp.csr_matrix(np.array([[0.0, -0.5]])), "integer \\(noisy\\) counts"),
    ],
)
def test_noisy_count_matrix_rejects(X, message):
    with pytest.raises(ValueError, match=message):
        check_noisy_count_matrix(X)


def test_noisy_count_matrix_with_estimator():
    estimator = _Recorder()
    check_noisy_count_matrix(-COUNTS, estimator=estimator)
    assert estimator.n_features_in_ == 3


# check_privacy_params ------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(epsilon=1.0),
        dict(epsilon=1),
        dict(epsilon=np.float32(0.5)),
        dict(epsilon=1e-8, delta=1e-5, sensitivity=3),
        dict(sensitivity=np.int64(2)),
        dict(epsilon=float("inf"), allow_infinite_epsilon=True),
        dict(),
    ],
)
def test_privacy_params_accepted(kwargs):
    assert check_privacy_params(**kwargs) is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(epsilon=0.0), "epsilon must be a positive number; got 0.0"),
        (dict(epsilon=-1.0), "epsilon must be a positive number"),
        (dict(epsilon=float("nan")), "epsilon must be a positive number"),
        (
            dict(epsilon=float("inf")),
            "epsilon must be a positive finite number; got inf",
        ),
        (dict(epsilon=True), "epsilon must be a positive number"),
        (dict(epsilon="1"), "epsilon must be a positive number"),
        (dict(delta=0.0), "delta must lie in the open interval \\(0, 1\\)"),
        (dict(delta=1.0), "delta must lie in the open interval"),
        (dict(delta=float("nan")), "delta must lie in the open interval"),
        (dict(sensitivity=0), "sensitivity must be an integer >= 1; got 0"),
        (dict(sensitivity=1.5), "sensitivity must be an integer >= 1; got 1.5"),
        (dict(sensitivity=1.0), "sensitivity must be an integer >= 1"),
        (dict(sensitivity=True), "sensitivity must be an integer >= 1"),
    ],
)
def test_privacy_params_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_privacy_params(**kwargs)


# check_positive_bound ------------------------------------------------------


def test_positive_bound_returns_float():
    value = check_positive_bound(np.int64(3), "data_norm")
    assert value == 3.0 and type(value) is float


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), float("nan"), True, "1"])
def test_positive_bound_rejected(value):
    with pytest.raises(ValueError, match="data_norm must be a positive finite number"):
        check_positive_bound(value, "data_norm")


def test_noisy_count_matrix_rejects_counts_beyond_float_precision():
    with pytest.raises(ValueError, match="2\\*\\*53 = 9007199254740992 or more in absolute"):
        check_noisy_count_matrix(np.array([[-(2.0**53), 1.0]]))
    check_noisy_count_matrix(np.array([[-(2.0**53) + 1, 1.0]]))


def _one_entry_per_token(seed=0):
    """40 documents of 12 tokens as a CSR matrix of one entry per token:
    duplicate, unsorted column indices, each entry a count of 1."""
    rng = np.random.RandomState(seed)
    indices = rng.randint(0, 6, size=480)
    indptr = np.arange(0, 481, 12)
    return sp.csr_matrix((np.ones(480, dtype=np.int64), indices, indptr), shape=(40, 6))


@pytest.mark.parametrize(
    "make",
    [
        lambda: skprivfact.PrivatePoissonMF(2, max_iter=3, random_state=0),
        lambda: skprivfact.PrivatePoissonMF(2, max_iter=3, epsilon=1.0, random_state=0),
        lambda: skprivfact.DPLDA(2, epsilon=float("inf"), batch_size=10, random_state=0),
        lambda: skprivfact.GeometricPrivatizer(epsilon=1.0),
    ],
    ids=["PoissonMF", "PoissonMF-noisy", "DPLDA", "GeometricPrivatizer"],
)
def test_duplicate_entries_are_summed_on_a_copy(make):
    # The caller's matrix is left as it was (its index arrays included), and
    # the estimator sees the summed counts.
    X = _one_entry_per_token()
    before = [a.copy() for a in (X.data, X.indices, X.indptr)]
    assert X.nnz == 480 and not X.has_canonical_format
    estimator = make().fit(X)
    if hasattr(estimator, "transform"):
        estimator.transform(X)
    for old, new in zip(before, (X.data, X.indices, X.indptr)):
        np.testing.assert_array_equal(old, new)
    checked = check_count_matrix(X)
    assert checked.has_canonical_format
    np.testing.assert_array_equal(checked.toarray(), X.toarray())
    if hasattr(estimator, "components_"):
        # The fit is the fit of the merged counts.
        merged = make().fit(sp.csr_matrix(X.toarray()))
        np.testing.assert_allclose(estimator.components_, merged.components_, rtol=1e-10)
