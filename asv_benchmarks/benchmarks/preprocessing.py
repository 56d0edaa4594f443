"""GeometricPrivatizer on a 1000 x 1000 count matrix."""

import numpy as np

from skprivfact import GeometricPrivatizer

from .common import Benchmark, Transformer


class GeometricPrivatizerSuite(Transformer, Benchmark):
    """Two-sided geometric noise on every entry of a 1000 x 1000 count matrix.

    ``secure=False`` is numpy's sampler, ``secure=True`` the exact integer
    sampler fed by the operating system's randomness.
    """

    param_names = ["epsilon", "secure"]
    params = ([0.1, 1.0, 10.0], [False, True])

    def make_data(self, epsilon, secure):
        rng = np.random.default_rng(0)
        return rng.poisson(2.0, size=(1000, 1000))

    def make_estimator(self, epsilon, secure):
        # The secure sampler cannot be seeded.
        random_state = None if secure else 0
        return GeometricPrivatizer(
            epsilon=epsilon, secure=secure, random_state=random_state
        )
