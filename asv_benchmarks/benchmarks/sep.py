"""DPSEPRegressor: fit and predict, linear and network models.

The data are drawn in ``setup``, where the numba kernels are also compiled by
a first fit, so the timed bodies measure the work alone.
"""

import numpy as np

from skprivfact.sep import DPSEPRegressor

from .common import Benchmark

N_FEATURES = 5
BOUNDS_X = (-3.0, 3.0)
BOUNDS_Y = (-6.0, 6.0)


def make_regression_data(n_samples, seed=0):
    """Inputs in [-3, 3], a smooth nonlinear target with noise std 0.1."""
    rng = np.random.RandomState(seed)
    X = rng.uniform(-3.0, 3.0, size=(n_samples, N_FEATURES))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] - 0.3 * X[:, 2] * X[:, 3] / 3.0
    return X, y + 0.1 * rng.normal(size=n_samples)


class DPSEPRegressorSuite(Benchmark):
    """Fit and predict on 2,000 training rows, 10 passes.

    ``model="linear"`` runs full-batch updates (batch_size="auto"); ``"mlp"``
    has 50 hidden units and the default batch size.
    """

    param_names = ["model", "epsilon"]
    params = (["linear", "mlp"], [1.0, float("inf")])

    def setup(self, model, epsilon):
        X, y = make_regression_data(2500)
        self.X, self.y = X[:2000], y[:2000]
        self.X_test, self.y_test = X[2000:], y[2000:]
        private = epsilon != float("inf")
        self.estimator = DPSEPRegressor(
            model=model,
            hidden_units=50,
            epsilon=epsilon,
            clip_norm=1.0 if private else None,
            max_iter=10,
            bounds_X=BOUNDS_X,
            bounds_y=BOUNDS_Y,
            random_state=0,
        ).fit(self.X, self.y)
        # First call outside the timing: predict's kernel compiles here too.
        self.estimator.predict(self.X_test, return_std=True)

    def time_fit(self, model, epsilon):
        self.estimator.fit(self.X, self.y)

    def peakmem_fit(self, model, epsilon):
        self.estimator.fit(self.X, self.y)

    def time_predict(self, model, epsilon):
        self.estimator.predict(self.X_test, return_std=True)

    def track_test_rmse(self, model, epsilon):
        prediction = self.estimator.predict(self.X_test)
        return float(np.sqrt(np.mean((prediction - self.y_test) ** 2)))

    track_test_rmse.unit = "rmse"
