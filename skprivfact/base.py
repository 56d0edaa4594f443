"""Base classes holding the privacy parameters every estimator shares.

Estimators merge these constraints with their own, as
``{**LocalPrivacyEstimator._parameter_constraints, ...}``, so that a privacy
parameter is checked the same way everywhere.
"""

from numbers import Integral, Real

from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, Options

__all__ = ["LocalPrivacyEstimator", "CentralPrivacyEstimator"]


class LocalPrivacyEstimator(BaseEstimator):
    """Base for estimators of the local model: two-sided geometric noise.

    Holds the constraints of ``epsilon`` (positive and finite) and of
    ``sensitivity`` (the integer L1 distance ``N`` of limited-precision local
    privacy).
    """

    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "sensitivity": [Interval(Integral, 1, None, closed="left")],
    }


class CentralPrivacyEstimator(BaseEstimator):
    """Base for estimators of the central model: (epsilon, delta)-DP releases.

    ``epsilon=float("inf")`` is the documented "no privacy" value: the same
    algorithm runs without clipping noise, for comparison.
    """

    _parameter_constraints: dict = {
        # Interval(..., closed="neither") excludes inf, the "no privacy" value.
        "epsilon": [Interval(Real, 0, None, closed="neither"), Options(Real, {float("inf")})],
        "delta": [Interval(Real, 0, 1, closed="neither")],
    }
