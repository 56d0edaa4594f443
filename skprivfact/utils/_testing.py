"""Helpers shared by the test suite and the benchmark scripts."""

import functools
import inspect
import threading

import numpy as np
import scipy.sparse as sp
from sklearn.utils.metaestimators import available_if

from ..privacy import PrivacyEngine

__all__ = [
    "ReleaseSpy",
    "binary_adaptor",
    "counts_adaptor",
    "dp_accounting_epsilon",
    "dp_accounting_pld_epsilon",
    "gaussian_kl",
]


def gaussian_kl(mean_p, cov_p, mean_q, cov_q):
    """KL(N(mean_p, cov_p) || N(mean_q, cov_q)) between two Gaussians.

    Parameters
    ----------
    mean_p, mean_q : ndarray of shape (n,)
        The means.
    cov_p, cov_q : ndarray of shape (n, n)
        The covariances, positive definite.

    Returns
    -------
    kl : float
        The Kullback-Leibler divergence in nats.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.utils._testing import gaussian_kl
    >>> float(gaussian_kl(np.zeros(2), np.eye(2), np.ones(2), np.eye(2)))
    1.0
    """
    mean_p = np.asarray(mean_p, dtype=np.float64)
    mean_q = np.asarray(mean_q, dtype=np.float64)
    inv_q = np.linalg.inv(cov_q)
    diff = mean_q - mean_p
    return 0.5 * (
        np.trace(inv_q @ cov_p)
        + diff @ inv_q @ diff
        - mean_p.size
        + np.linalg.slogdet(cov_q)[1]
        - np.linalg.slogdet(cov_p)[1]
    )


def dp_accounting_epsilon(noise_multiplier, sample_rate, steps, delta):
    """Epsilon of ``steps`` Poisson-subsampled Gaussian releases by dp-accounting.

    The reference our accountant is checked against: Google's
    ``dp_accounting`` RDP accountant (a test extra, imported here), with the
    Gaussian event alone when ``sample_rate`` is 1.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the L2 sensitivity.
    sample_rate : float
        Poisson sampling rate of each step, in (0, 1].
    steps : int
        Number of releases.
    delta : float
        Target delta.

    Returns
    -------
    epsilon : float
    """
    import logging

    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    logging.getLogger("absl").setLevel(logging.ERROR)
    event = dp_event.GaussianDpEvent(noise_multiplier)
    if sample_rate < 1:
        event = dp_event.PoissonSampledDpEvent(sample_rate, event)
    accountant = rdp_privacy_accountant.RdpAccountant()
    accountant.compose(event, steps)
    return accountant.get_epsilon(delta)


def dp_accounting_pld_epsilon(
    history, neighbouring_relation, delta, value_discretization_interval=1e-4
):
    """Tight epsilon of Poisson-subsampled Gaussian releases by dp-accounting.

    The reference for the epsilon a fit reports under the neighbouring
    relation it declares: Google's ``dp_accounting`` PLD accountant (a test
    extra, imported here).

    Parameters
    ----------
    history : iterable of (noise_multiplier, sample_rate, steps)
        The releases, as an accountant's ``history``.
    neighbouring_relation : {"add_remove", "substitution"}
        Adding or removing one record, or replacing one.
    delta : float
        Target delta.
    value_discretization_interval : float, default=1e-4
        The PLD's discretisation of the privacy loss.

    Returns
    -------
    epsilon : float
    """
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    relation = {
        "add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        "substitution": dp_accounting.NeighboringRelation.REPLACE_ONE,
    }[neighbouring_relation]
    accountant = pld_privacy_accountant.PLDAccountant(
        relation, value_discretization_interval=value_discretization_interval
    )
    for noise_multiplier, sample_rate, steps in history:
        accountant.compose(
            dp_accounting.PoissonSampledDpEvent(
                sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier)
            ),
            steps,
        )
    return accountant.get_epsilon(delta)


# scikit-learn's common checks draw uniform, normal or blob floats; the count
# estimators reject fractional values by design. Scaled by this and rounded
# away from zero, uniform (0, 1) floats become counts 1 to 5.
_COUNT_SCALE = 5.0
_adapting = threading.local()


def _round_away(values):
    # away from zero: a non-zero float stays a non-zero count (no empty
    # documents appear), zeros stay zeros
    return np.sign(values) * np.ceil(np.abs(values) * _COUNT_SCALE)


def _is_integral(values):
    return values.dtype.kind in "iub" or bool(np.all(values == np.floor(values)))


def _binarize(values):
    """1 where positive, 0 elsewhere; NaN and infinity kept."""
    return np.where(np.isfinite(values), values > 0, values)


def _is_binary(values):
    return bool(np.all((values == 0) | (values == 1)))


# How each adaptor maps the checks' data into its estimators' domain, and
# tells data already inside it.
_DOMAINS = {
    "Counts": (_round_away, _is_integral),
    "Binary": (_binarize, _is_binary),
}


def _to_domain(X, domain):
    """Map fractional data into ``domain``, keeping container and dtype.

    NaN, infinity and zeros survive (so the checks of bad input still see
    them; counts keep the sign too); data already in the domain, complex, or
    that cannot be read as numbers (an object array holding a dict, say)
    passes through unchanged.
    """
    convert, inside = _DOMAINS[domain]
    if getattr(getattr(X, "dtype", None), "kind", None) == "c":
        return X
    if sp.issparse(X):
        csr = X.tocsr(copy=True)
        if csr.dtype.kind != "f" or inside(csr.data):
            return X
        csr.data = convert(csr.data)
        return csr.asformat(X.format)
    if hasattr(X, "iloc"):  # a pandas DataFrame or Series keeps its names
        if inside(X.to_numpy()):
            return X
        return X.apply(convert)
    try:
        values = np.asarray(X, dtype=float)
    except (TypeError, ValueError):
        return X
    if values.ndim == 0 or inside(values):
        return X
    converted = convert(values)
    if isinstance(X, np.ndarray):
        return converted.astype(X.dtype)
    if isinstance(X, list):
        return converted.tolist()
    return type(X)(converted)  # a non-array container such as _NotAnArray


def _adapt_method(method, domain):
    @functools.wraps(method)
    def adapted(self, X, *args, **kwargs):
        outermost = not getattr(_adapting, "active", False)
        if outermost:
            X = _to_domain(X, domain)
            _adapting.active = True
        try:
            return method(self, X, *args, **kwargs)
        finally:
            if outermost:
                _adapting.active = False

    return adapted


_ADAPTED_METHODS = (
    "fit", "partial_fit", "fit_transform", "transform", "score", "perplexity",
    "predict", "score_samples",
)


def _adapt_available_method(estimator_class, method, domain):
    """The adapted method, hidden when the original is (``available_if``)."""
    adapted = _adapt_method(getattr(estimator_class, method), domain)
    check = getattr(inspect.getattr_static(estimator_class, method), "check", None)
    return adapted if check is None else available_if(check)(adapted)


def counts_adaptor(estimator_class):
    """A subclass of a count estimator that rounds its input to counts first.

    Test-only: lets scikit-learn's common checks, which feed fractional
    floats, reach what they test in estimators that take integer counts.
    ``X`` given to ``fit``, ``partial_fit``, ``fit_transform``,
    ``transform``, ``score``, ``perplexity``, ``predict`` and
    ``score_samples`` is scaled by 5 and rounded away from zero (in the
    outermost call only,
    so ``fit_transform`` calling ``fit`` does not round twice), keeping its
    container, dtype (float32 stays float32), NaN, infinity and sign.
    Parameters, tags and signatures are the wrapped class's.

    The subclass is registered in this module under ``Counts`` + the class
    name, so that it pickles.

    Parameters
    ----------
    estimator_class : type
        The estimator class, for example :class:`~skprivfact.DPLDA`.

    Returns
    -------
    adapted_class : type
        Subclass with ``adapted_from`` set to ``estimator_class``.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact import GeometricPrivatizer
    >>> from skprivfact.utils._testing import counts_adaptor
    >>> Adapted = counts_adaptor(GeometricPrivatizer)
    >>> Adapted(random_state=0).fit(np.array([[0.1, 0.5]])).n_features_in_
    2
    """
    return _adaptor(estimator_class, "Counts")


def binary_adaptor(estimator_class):
    """A subclass of a binary-row estimator that binarizes its input first.

    Test-only, as :func:`counts_adaptor`: finite values are mapped to 1 where
    positive and 0 elsewhere, NaN and infinity kept. The subclass is
    registered in this module under ``Binary`` + the class name.

    Parameters
    ----------
    estimator_class : type
        The estimator class, for example :class:`~skprivfact.DPSigmoidBeliefNet`.

    Returns
    -------
    adapted_class : type
        Subclass with ``adapted_from`` set to ``estimator_class``.
    """
    return _adaptor(estimator_class, "Binary")


def _adaptor(estimator_class, domain):
    name = f"{domain}{estimator_class.__name__}"
    if name in globals():
        return globals()[name]
    namespace = {
        method: _adapt_available_method(estimator_class, method, domain)
        for method in _ADAPTED_METHODS
        if callable(getattr(estimator_class, method, None))
    }
    namespace.update(__module__=__name__, __qualname__=name,
                     adapted_from=estimator_class)
    adapted_class = type(name, (estimator_class,), namespace)
    globals()[name] = adapted_class
    return adapted_class


class ReleaseSpy:
    """Records every release of every engine: clean blocks, noisy blocks, plan.

    ``monkeypatch`` is pytest's fixture: the engine is restored after the test.
    """

    def __init__(self, monkeypatch):
        self.calls = []
        original = PrivacyEngine.release
        spy = self

        def release(engine, blocks, sensitivities, **kwargs):
            clean = [np.array(block, dtype=float, copy=True) for block in blocks]
            n_before = engine.accountant.steps
            noisy = original(engine, blocks, sensitivities, **kwargs)
            preliminary = kwargs.get("preliminary", False)
            spy.calls.append(
                {
                    "clean": clean,
                    "noisy": [block.copy() for block in noisy],
                    "sensitivities": list(map(float, sensitivities)),
                    "noise_multiplier": (
                        engine.plan.preliminary_noise_multiplier
                        if preliminary
                        else engine.plan.noise_multiplier
                    ),
                    "sample_rate": (
                        1.0
                        if preliminary
                        else kwargs.get("sample_rate") or engine.plan.sample_rate
                    ),
                    "preliminary": preliminary,
                    "n_before": n_before,
                }
            )
            return noisy

        monkeypatch.setattr(PrivacyEngine, "release", release)
