"""Synthetic data generators, the real data sets' folder and their loaders."""

import os
from numbers import Integral, Real
from pathlib import Path

import numpy as np
from scipy.special import expit
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, validate_params

from .mechanisms import two_sided_geometric

__all__ = [
    "get_data_home",
    "load_adult",
    "make_poisson_factorization",
    "make_sigmoid_belief_net",
]


def get_data_home(data_home=None):
    """Return the folder of the real data sets (UCI, KOS, SOTU, ...).

    As in :func:`sklearn.datasets.get_data_home`, the first of: the
    ``data_home`` argument; the ``SKPRIVFACT_DATA`` environment variable;
    ``../shared/data`` next to the source tree, when skprivfact is run from a
    checkout that has it; else ``~/skprivfact_data``. A leading "~" is
    expanded. The folder is neither created nor checked: the benchmarks,
    examples and tests that need a data set skip it when its subfolder is
    absent.

    Parameters
    ----------
    data_home : str or path-like, default=None
        The folder to use; None means the rule above.

    Returns
    -------
    data_home : pathlib.Path
        The folder.

    Examples
    --------
    >>> from skprivfact.datasets import get_data_home
    >>> str(get_data_home("/data/skprivfact"))
    '/data/skprivfact'
    """
    if data_home is None:
        data_home = os.environ.get("SKPRIVFACT_DATA")
    if data_home is None:
        shared = Path(__file__).resolve().parents[1].parent / "shared" / "data"
        data_home = shared if shared.is_dir() else "~/skprivfact_data"
    return Path(data_home).expanduser()


@validate_params(
    {
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "factor_shape": [Interval(Real, 0, None, closed="neither")],
        "factor_rate": [Interval(Real, 0, None, closed="neither")],
        "epsilon": [Interval(Real, 0, None, closed="neither"), None],
        "sensitivity": [Interval(Integral, 1, None, closed="left")],
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
    epsilon=None,
    sensitivity=1,
    random_state=None,
):
    """Draw a count matrix from the Poisson factorization model, and privatize it.

    ``theta[d, k] ~ Gamma(factor_shape, rate=factor_rate)``,
    ``phi[k, v] ~ Gamma(factor_shape, rate=factor_rate)`` and
    ``X[d, v] ~ Poisson(mu[d, v])`` with ``mu = theta @ phi``. With ``epsilon``
    set, ``X_noisy = X + tau`` with tau drawn from the two-sided geometric
    distribution at ``(sensitivity, epsilon)``
    (:func:`~skprivfact.mechanisms.two_sided_geometric`), the input of
    :class:`~skprivfact.PrivatePoissonMF` with the same ``epsilon``.

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
    epsilon : float, default=None
        Privacy parameter of the noise added to make ``X_noisy``; None adds no
        noise (``X_noisy`` is then None).
    sensitivity : int, default=1
        The L1 distance N of limited-precision local privacy; the noise ratio
        is ``alpha = exp(-epsilon / sensitivity)``.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible draws.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), dtype int64
        The clean counts.
    X_noisy : ndarray of shape (n_samples, n_features), dtype int64, or None
        The privatized counts (None when ``epsilon`` is None).
    sample_factors : ndarray of shape (n_samples, n_components)
        ``theta``.
    components : ndarray of shape (n_components, n_features)
        ``phi``; the Poisson rates are ``sample_factors @ components``.

    Examples
    --------
    >>> from skprivfact.datasets import make_poisson_factorization
    >>> X, X_noisy, theta, phi = make_poisson_factorization(
    ...     20, 10, 3, epsilon=1.0, random_state=0
    ... )
    >>> X.shape, X_noisy.shape, theta.shape, phi.shape
    ((20, 10), (20, 10), (20, 3), (3, 10))
    >>> bool((X_noisy < 0).any())
    True
    """
    rng = check_random_state(random_state)
    scale = 1.0 / factor_rate
    sample_factors = rng.gamma(factor_shape, scale, size=(n_samples, n_components))
    components = rng.gamma(factor_shape, scale, size=(n_components, n_features))
    X = rng.poisson(sample_factors @ components).astype(np.int64)
    X_noisy = None
    if epsilon is not None:
        X_noisy = X + two_sided_geometric(
            epsilon, sensitivity, size=X.shape, random_state=rng
        )
    return X, X_noisy, sample_factors, components


@validate_params(
    {
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "weight_scale": [Interval(Real, 0, None, closed="left")],
        "density": [Interval(Real, 0, 1, closed="right")],
        "hidden_logit_scale": [Interval(Real, 0, None, closed="left")],
        "visible_bias": [Real],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def make_sigmoid_belief_net(
    n_samples=1000,
    n_features=64,
    n_components=10,
    *,
    weight_scale=3.0,
    density=0.3,
    hidden_logit_scale=1.0,
    visible_bias=-1.5,
    random_state=None,
):
    """Draw binary rows from a one-hidden-layer sigmoid belief network.

    Each hidden unit connects to a random ``density`` fraction of the visible
    units with weights ``N(0, weight_scale**2)`` (the others are 0), so that
    the units are identifiable parts, as in Gan et al.'s learned MNIST
    weights; ``c_k ~ N(0, hidden_logit_scale**2)``; every visible bias is
    ``visible_bias``. Then ``h_k ~ Bernoulli(sigmoid(c_k))`` and ``v_j ~
    Bernoulli(sigmoid(W[j] @ h + b_j))``. The exact log-likelihood of the
    rows under the true parameters is
    :func:`~skprivfact.sbn.sigmoid_belief_net_log_likelihood`.

    Parameters
    ----------
    n_samples : int, default=1000
        Number of rows.
    n_features : int, default=64
        Number of visible units ``D``.
    n_components : int, default=10
        Number of hidden units ``K``.
    weight_scale : float, default=3.0
        Standard deviation of the non-zero weights.
    density : float, default=0.3
        Fraction of non-zero weights of each hidden unit, in (0, 1].
    hidden_logit_scale : float, default=1.0
        Standard deviation of the hidden logits.
    visible_bias : float, default=-1.5
        The bias of every visible unit.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible draws.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), dtype float64
        Binary rows.
    hidden : ndarray of shape (n_samples, n_components), dtype float64
        The binary hidden states that generated them.
    params : dict
        ``"weights"`` (n_features, n_components), ``"visible_bias"``
        (n_features,) and ``"hidden_logits"`` (n_components,).

    Examples
    --------
    >>> from skprivfact.datasets import make_sigmoid_belief_net
    >>> X, H, params = make_sigmoid_belief_net(5, 8, 2, random_state=0)
    >>> X.shape, H.shape, params["weights"].shape
    ((5, 8), (5, 2), (8, 2))
    >>> sorted(set(X.ravel().tolist()))
    [0.0, 1.0]
    """
    rng = check_random_state(random_state)
    mask = rng.uniform(size=(n_features, n_components)) < density
    weights = np.where(
        mask, weight_scale * rng.standard_normal((n_features, n_components)), 0.0
    )
    hidden_logits = hidden_logit_scale * rng.standard_normal(n_components)
    bias = np.full(n_features, float(visible_bias))
    hidden = (
        rng.uniform(size=(n_samples, n_components)) < expit(hidden_logits)
    ).astype(np.float64)
    logits = hidden @ weights.T + bias
    X = (rng.uniform(size=logits.shape) < expit(logits)).astype(np.float64)
    params = {"weights": weights, "visible_bias": bias, "hidden_logits": hidden_logits}
    return X, hidden, params


_ADULT_COLUMNS = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
]
_ADULT_CATEGORICAL = [
    "workclass",
    "education",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "native-country",
]


def load_adult(path):
    """Load UCI Adult (``adult.data``) as features of norm <= 1 and binary labels.

    The five continuous columns are scaled by bounds fixed in advance, not read
    from the data (age / 100, education-num / 16, log1p(capital-gain) /
    log1p(1e5), log1p(capital-loss) / log1p(1e4), hours-per-week / 100, then
    clipped to [0, 1]); the eight categorical columns are one-hot encoded
    (missing values as their own category). A row has at most 13 entries of at
    most 1, so dividing by sqrt(13) bounds every row's norm by 1 without
    looking at the data. The scaling thus costs no privacy; the one-hot
    vocabulary (the categories present) is taken from the file, as is usual
    for this data set. Requires pandas.

    Parameters
    ----------
    path : str or path-like
        The ``adult.data`` file (comma-separated, no header, "?" for missing
        values), or the folder holding it.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        Features, every row of Euclidean norm <= 1.
    y : ndarray of shape (n_samples,)
        1 where income is ">50K", else 0.
    """
    from pathlib import Path

    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover
        raise ImportError("load_adult needs pandas: pip install pandas") from exc
    path = Path(path)
    if path.is_dir():
        path = path / "adult.data"
    frame = pd.read_csv(
        path, header=None, names=_ADULT_COLUMNS, skipinitialspace=True, na_values="?"
    )
    continuous = np.column_stack(
        [
            frame["age"] / 100,
            frame["education-num"] / 16,
            np.log1p(frame["capital-gain"]) / np.log1p(1e5),
            np.log1p(frame["capital-loss"]) / np.log1p(1e4),
            frame["hours-per-week"] / 100,
        ]
    ).clip(0, 1)
    onehot = pd.get_dummies(frame[_ADULT_CATEGORICAL].fillna("missing"), dtype=float)
    X = np.hstack([continuous, onehot.to_numpy()]) / np.sqrt(13.0)
    y = (frame["income"] == ">50K").to_numpy().astype(int)
    return X, y
