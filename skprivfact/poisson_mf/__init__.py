"""Bayesian Poisson factorization of (locally privatized) counts."""

from ._estimator import PrivatePoissonMF

__all__ = ["PrivatePoissonMF"]
