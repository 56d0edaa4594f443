"""Helpers shared by the test suite and the benchmark scripts."""

import numpy as np

__all__ = ["dp_accounting_epsilon", "gaussian_kl"]


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


def dp_accounting_epsilon(noise_multiplier, sample_rate, steps, delta):
    """Epsilon of ``steps`` Poisson-subsampled Gaussian releases by dp-accounting.

    The reference our accountant is checked against: Google's
    ``dp_accounting`` RDP accountant (a test extra, imported here), with the
    Gaussian event alone when ``sample_rate`` is 1.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the L2 sensitivity.
    sample_rate : float
        Poisson sampling rate of each step, in (0, 1].
    steps : int
        Number of releases.
    delta : float
        Target delta.

    Returns
    -------
    epsilon : float
    """
    import logging

    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    logging.getLogger("absl").setLevel(logging.ERROR)
    event = dp_event.GaussianDpEvent(noise_multiplier)
    if sample_rate < 1:
        event = dp_event.PoissonSampledDpEvent(sample_rate, event)
    accountant = rdp_privacy_accountant.RdpAccountant()
    accountant.compose(event, steps)
    return accountant.get_epsilon(delta)
