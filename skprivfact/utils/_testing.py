"""Helpers shared by the test suite and the benchmark scripts."""

import numpy as np

__all__ = ["gaussian_kl"]


def gaussian_kl(mean_p, cov_p, mean_q, cov_q):
    """KL(N(mean_p, cov_p) || N(mean_q, cov_q)) between two Gaussians.

    Parameters
    ----------
    mean_p, mean_q : ndarray of shape (n,)
        The means.
    cov_p, cov_q : ndarray of shape (n, n)
        The covariances, positive definite.

    Returns
    -------
    kl : float
        The Kullback-Leibler divergence in nats.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.utils._testing import gaussian_kl
    >>> float(gaussian_kl(np.zeros(2), np.eye(2), np.ones(2), np.eye(2)))
    1.0
    """
    mean_p = np.asarray(mean_p, dtype=np.float64)
    mean_q = np.asarray(mean_q, dtype=np.float64)
    inv_q = np.linalg.inv(cov_q)
    diff = mean_q - mean_p
    return 0.5 * (
        np.trace(inv_q @ cov_p)
        + diff @ inv_q @ diff
        - mean_p.size
        + np.linalg.slogdet(cov_q)[1]
        - np.linalg.slogdet(cov_p)[1]
    )
