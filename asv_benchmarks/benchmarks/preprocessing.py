"""GeometricPrivatizer on a 1000 x 1000 count matrix."""

import numpy as np

from skprivfact import GeometricPrivatizer

from .common import Benchmark, Transformer


class GeometricPrivatizerSuite(Transformer, Benchmark):
    """Two-sided geometric noise on every entry of a 1000 x 1000 count matrix."""

    param_names = ["epsilon"]
    params = ([0.1, 1.0, 10.0],)

    def make_data(self, epsilon):
        rng = np.random.default_rng(0)
        return rng.poisson(2.0, size=(1000, 1000))

    def make_estimator(self, epsilon):
        return GeometricPrivatizer(epsilon=epsilon, random_state=0)
