"""DPBayesLogReg: full-batch and stochastic fits, posterior predictive."""

import math

import numpy as np

from skprivfact.logistic import DPBayesLogReg

from .common import Benchmark


def make_classification_data(n_samples, n_features, seed=0):
    """Rows of norm at most 1 and labels from a logistic model."""
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n_samples, n_features)) / math.sqrt(2.0 * n_features)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, np.newaxis]
    logits = X @ (3.0 * rng.normal(size=n_features)) - 0.5
    y = (rng.uniform(size=n_samples) < 1.0 / (1.0 + np.exp(-logits))).astype(int)
    return X, y


class DPBayesLogRegSuite(Benchmark):
    """Fit and predict on 100,000 x 50 synthetic rows.

    ``batch_size=None`` is the full-batch VIPS of the acceptance timing (50
    iterations); 5000 is the stochastic mode, 50 iterations on Poisson batches
    of about 5% of the rows.
    """

    param_names = ["epsilon", "batch_size"]
    params = ([1.0, float("inf")], [None, 5000])

    def setup(self, epsilon, batch_size):
        self.X, self.y = make_classification_data(100_000, 50)
        self.estimator = DPBayesLogReg(
            epsilon=epsilon,
            data_norm=1.0,
            max_iter=50,
            batch_size=batch_size,
            random_state=0,
        ).fit(self.X, self.y)

    def time_fit(self, epsilon, batch_size):
        self.estimator.fit(self.X, self.y)

    def peakmem_fit(self, epsilon, batch_size):
        self.estimator.fit(self.X, self.y)

    def time_predict_proba(self, epsilon, batch_size):
        self.estimator.predict_proba(self.X)

    def track_train_accuracy(self, epsilon, batch_size):
        return float(self.estimator.score(self.X, self.y))

    track_train_accuracy.unit = "accuracy"
