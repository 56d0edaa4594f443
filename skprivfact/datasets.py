"""Synthetic data generators for examples, tests and benchmarks."""

from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, validate_params

__all__ = ["make_poisson_factorization"]


@validate_params(
    {
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "factor_shape": [Interval(Real, 0, None, closed="neither")],
        "factor_rate": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def make_poisson_factorization(
    n_samples=100,
    n_features=50,
    n_components=5,
    *,
    factor_shape=0.1,
    factor_rate=1.0,
    random_state=None,
):
    """Draw a count matrix from the Poisson factorization model.

    ``theta[d, k] ~ Gamma(factor_shape, rate=factor_rate)``,
    ``phi[k, v] ~ Gamma(factor_shape, rate=factor_rate)`` and
    ``X[d, v] ~ Poisson(mu[d, v])`` with ``mu = theta @ phi``.

    Parameters
    ----------
    n_samples : int, default=100
        Number of rows (documents, users, cells).
    n_features : int, default=50
        Number of columns (words, items, genes).
    n_components : int, default=5
        Rank of the rate matrix.
    factor_shape : float, default=0.1
        Shape of the gamma prior of both factors (small values give sparse,
        over-dispersed counts).
    factor_rate : float, default=1.0
        Rate of the gamma prior of both factors.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible draws.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), dtype int64
        The counts.
    rates : ndarray of shape (n_samples, n_features)
        The Poisson rates ``mu = theta @ phi``.
    sample_factors : ndarray of shape (n_samples, n_components)
        ``theta``.
    components : ndarray of shape (n_components, n_features)
        ``phi``.

    Examples
    --------
    >>> from skprivfact.datasets import make_poisson_factorization
    >>> X, rates, theta, phi = make_poisson_factorization(20, 10, 3, random_state=0)
    >>> X.shape, theta.shape, phi.shape
    ((20, 10), (20, 3), (3, 10))
    """
    rng = check_random_state(random_state)
    scale = 1.0 / factor_rate
    sample_factors = rng.gamma(factor_shape, scale, size=(n_samples, n_components))
    components = rng.gamma(factor_shape, scale, size=(n_components, n_features))
    rates = sample_factors @ components
    X = rng.poisson(rates).astype(np.int64)
    return X, rates, sample_factors, components
