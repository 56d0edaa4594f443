"""Bayesian Poisson factorization of (locally privatized) counts."""

from ._estimator import PrivatePoissonMF
from ._evaluation import generalized_kl_divergence, heldout_loglik, poisson_loglik_per_entry

__all__ = [
    "PrivatePoissonMF",
    "generalized_kl_divergence",
    "heldout_loglik",
    "poisson_loglik_per_entry",
]
