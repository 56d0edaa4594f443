"""skprivfact: privacy-preserving Bayesian inference with a scikit-learn API.

The privacy engine and the budget that spans fits live in
:mod:`skprivfact.privacy`, the accountants in :mod:`skprivfact.accounting`, the
release mechanisms in :mod:`skprivfact.mechanisms`; the estimators (and
:class:`PrivacyBudget`) are importable from the top level.
"""

from . import accounting, mechanisms, privacy
from .exceptions import PrivacyBudgetExceededError, PrivacyLeakWarning
from .lda import DPLDA
from .logistic import DPBayesLogReg
from .poisson_mf import PrivatePoissonMF
from .preprocessing import GeometricPrivatizer
from .privacy import PrivacyBudget
from .sbn import DPSigmoidBeliefNet
from .sep import DPSEPRegressor
from .sep_mixture import DPSEPGaussianMixture
from .utils._numba import install_compile_listener

# one line on stderr when a kernel first compiles (kernels compile on first call)
install_compile_listener()

__version__ = "0.1.0.dev0"

__all__ = [
    "DPBayesLogReg",
    "DPLDA",
    "DPSEPRegressor",
    "DPSEPGaussianMixture",
    "DPSigmoidBeliefNet",
    "GeometricPrivatizer",
    "PrivatePoissonMF",
    "PrivacyLeakWarning",
    "PrivacyBudgetExceededError",
    "PrivacyBudget",
    "accounting",
    "privacy",
    "mechanisms",
    "__version__",
]
