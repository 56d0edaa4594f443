"""skprivfact: privacy-preserving Bayesian inference with a scikit-learn API.

The shared privacy accountant lives in :mod:`skprivfact.accounting`, the release
mechanisms in :mod:`skprivfact.mechanisms`; the estimators are importable from
the top level.
"""

from . import accounting, mechanisms
from .exceptions import PrivacyBudgetExceededError, PrivacyLeakWarning
from .lda import DPLDA
from .logistic import DPBayesLogReg
from .poisson_mf import PrivatePoissonMF
from .preprocessing import GeometricPrivatizer
from .sbn import DPSigmoidBeliefNet
from .sep import DPSEPRegressor

__version__ = "0.1.0.dev0"

__all__ = [
    "DPBayesLogReg",
    "DPLDA",
    "DPSEPRegressor",
    "DPSigmoidBeliefNet",
    "GeometricPrivatizer",
    "PrivatePoissonMF",
    "PrivacyLeakWarning",
    "PrivacyBudgetExceededError",
    "accounting",
    "mechanisms",
    "__version__",
]
