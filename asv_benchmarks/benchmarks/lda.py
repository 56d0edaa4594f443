"""DPLDA: fit (one private pass), E-step kernel, transform and perplexity.

The corpus is drawn from LDA in ``setup``, where the numba kernels are also
compiled, so the timed bodies measure the work alone.
"""

import numpy as np
import scipy.sparse as sp

from skprivfact import lda
from skprivfact.lda import DPLDA

from .common import Benchmark, Transformer

N_WORDS = 1000
N_TOPICS = 20


def make_corpus(n_documents, seed=0):
    rng = np.random.RandomState(seed)
    topics = rng.dirichlet(np.full(N_WORDS, 0.05), size=N_TOPICS)
    proportions = rng.dirichlet(np.full(N_TOPICS, 0.1), size=n_documents)
    lengths = np.maximum(rng.poisson(100, size=n_documents), 1)
    probabilities = proportions @ topics
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    counts = np.vstack([rng.multinomial(n, p) for n, p in zip(lengths, probabilities)])
    return sp.csr_matrix(counts.astype(np.float64))


class DPLDASuite(Transformer, Benchmark):
    """Fit, transform and perplexity for private and non-private fits."""

    param_names = ["epsilon", "n_jobs"]
    params = ([1.0, float("inf")], [1, 2])

    def make_data(self, epsilon, n_jobs):
        return make_corpus(5000)

    def make_estimator(self, epsilon, n_jobs):
        return DPLDA(
            N_TOPICS,
            epsilon=epsilon,
            batch_size=500,
            max_iter=1,
            n_jobs=n_jobs,
            random_state=0,
        )

    def time_perplexity(self, epsilon, n_jobs):
        self.estimator.perplexity(self.X, include_topic_word_bound=False)

    def track_doc_only_perplexity(self, epsilon, n_jobs):
        return self.estimator.perplexity(self.X, include_topic_word_bound=False)

    track_doc_only_perplexity.unit = "perplexity"


class EStepSuite(Benchmark):
    """The E-step kernel on 1,000 documents resampled to 500 tokens, clipped."""

    param_names = ["n_jobs"]
    params = ([1, 2],)

    def setup(self, n_jobs):
        X = make_corpus(1000)
        rng = np.random.default_rng(0)
        self.X = lda._resample_documents(X, 500, rng)
        components = rng.gamma(100.0, 0.01, size=(N_TOPICS, N_WORDS))
        self.exp_topic_word = np.exp(lda._dirichlet_expectation_2d(components))
        self.time_e_step(n_jobs)

    def time_e_step(self, n_jobs):
        lda._e_step(self.X, self.exp_topic_word, 0.05, 100, 1e-3, 50.0, True, n_jobs)

    def time_resample(self, n_jobs):
        lda._resample_documents(self.X, 500, np.random.default_rng(1))
