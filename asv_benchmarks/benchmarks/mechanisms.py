"""clip_rows, the clipping every central estimator's per-row release goes through.

Rows of unit norm scaled by 0.5 or 2, so that half are clipped; the kernel
compiles in ``setup``.
"""

import numpy as np

from skprivfact.mechanisms import clip_rows

from .common import Benchmark


class ClipRowsSuite(Benchmark):
    """A network batch of DPSEPRegressor (256 x 1102) and a tall matrix (20,000 x 123)."""

    param_names = ["shape"]
    params = (["256x1102", "20000x123"],)

    def setup(self, shape):
        n_samples, n_features = map(int, shape.split("x"))
        rng = np.random.RandomState(0)
        X = rng.normal(size=(n_samples, n_features))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        self.X = X * rng.choice([0.5, 2.0], size=(n_samples, 1))
        clip_rows(self.X, 1.0)

    def time_clip_rows(self, shape):
        clip_rows(self.X, 1.0)

    def peakmem_clip_rows(self, shape):
        clip_rows(self.X, 1.0)
