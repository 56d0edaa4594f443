"""PrivatePoissonMF on a 500 x 500 rank-20 count matrix privatized at epsilon/N = 1."""

from skprivfact.datasets import make_poisson_factorization
from skprivfact.poisson_mf import PrivatePoissonMF

from .common import Benchmark, Transformer


class PrivatePoissonMFSuite(Transformer, Benchmark):
    """Fixed numbers of sweeps (tol=0), so the timings compare per-sweep work.

    ``private=False`` fits the clean counts (sparse work); ``private=True`` the
    noisy ones.
    """

    param_names = ["solver", "private"]
    params = (["cavi", "mcmc"], [False, True])
    timeout = 600

    def make_data(self, solver, private):
        X, X_noisy, _, _ = make_poisson_factorization(
            500, 500, 20, factor_shape=0.1, epsilon=1.0, random_state=0
        )
        return X_noisy if private else X

    def make_estimator(self, solver, private):
        # the solvers' speed: prior shapes given, so no search of "auto" ones
        return PrivatePoissonMF(
            20, epsilon=1.0 if private else None, solver=solver, max_iter=20, tol=0.0,
            factor_prior_shape=0.1, component_prior_shape=0.1,
            evaluate_every=10, n_burn_in=10, n_kept_samples=10, random_state=0,
        )

    def time_score(self, solver, private):
        self.estimator.score(self.X)

