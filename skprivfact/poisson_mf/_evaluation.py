"""Held-out evaluation of count models against clean counts."""

import numpy as np
from scipy.special import gammaln

__all__ = ["generalized_kl_divergence", "heldout_loglik", "poisson_loglik_per_entry"]

# Rates below this are raised to it: a zero rate under a positive count would
# make the score -inf (word-mean baselines and clipped fits give zeros).
_RATE_FLOOR = 1e-10


def poisson_loglik_per_entry(X_clean, rates):
    """Mean Poisson log-likelihood per entry of clean counts at given rates.

    Parameters
    ----------
    X_clean : {array-like, sparse matrix} of shape (n_samples, n_features)
        Clean (never privatized) counts.
    rates : array-like of shape (n_samples, n_features)
        Poisson rates; values below 1e-10 are raised to 1e-10.

    Returns
    -------
    loglik : float
        The mean ``x log(rate) - rate - log(x!)`` over the entries.
    """
    X_clean = X_clean.toarray() if hasattr(X_clean, "toarray") else np.asarray(X_clean)
    X_clean = X_clean.astype(np.float64)
    rates = np.maximum(np.asarray(rates, dtype=np.float64), _RATE_FLOOR)
    total = (X_clean * np.log(rates) - rates - gammaln(X_clean + 1.0)).sum()
    return float(total / X_clean.size)


def heldout_loglik(estimator, X, X_clean):
    """Poisson log-likelihood per entry of clean held-out rows.

    The fitted ``estimator`` (any transformer with ``components_`` whose
    ``transform(X) @ components_`` are rates: :class:`PrivatePoissonMF`, or
    scikit-learn's ``NMF`` with ``beta_loss="kullback-leibler"``) infers the
    rows' factors from ``X``, the form of the held-out rows it was trained on
    (their privatized release, or its clipped version for a naive model);
    the score is that of the clean counts ``X_clean`` of the same rows. This
    measures what a model of privatized data is for, the true counts, with
    no noise model in the score.

    Parameters
    ----------
    estimator : fitted estimator
        Has ``transform`` and ``components_``.
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        Held-out rows as the estimator takes them.
    X_clean : {array-like, sparse matrix} of shape (n_samples, n_features)
        The clean counts of the same rows.

    Returns
    -------
    loglik : float
        Mean log-likelihood per entry (higher is better).
    """
    rates = estimator.transform(X) @ estimator.components_
    return poisson_loglik_per_entry(X_clean, rates)


def reconstruction_error(X, row_factors, components, block_entries=2**20):
    """``sqrt(2 * D)``, D the generalized KL divergence of the rates
    ``row_factors @ components`` from the counts ``X`` (summed over entries):
    NMF's ``reconstruction_err_`` for ``beta_loss="kullback-leibler"``.

    Negative (noisy) counts count as zero. The rates are formed a block of
    rows at a time, so no dense copy of the whole matrix is made.
    """
    n_rows, n_cols = X.shape
    row_factors = np.asarray(row_factors, dtype=np.float64)
    components = np.asarray(components, dtype=np.float64)
    block = max(1, block_entries // max(n_cols, 1))
    divergence = 0.0
    for start in range(0, n_rows, block):
        rows = slice(start, min(start + block, n_rows))
        counts = X[rows]
        counts = counts.toarray() if hasattr(counts, "toarray") else np.asarray(counts)
        counts = np.maximum(counts.astype(np.float64), 0.0)
        rates = np.maximum(row_factors[rows] @ components, _RATE_FLOOR)
        positive = counts > 0
        divergence += float(
            np.sum(counts[positive] * np.log(counts[positive] / rates[positive]))
            - counts.sum() + rates.sum()
        )
    return float(np.sqrt(2.0 * max(divergence, 0.0)))


def generalized_kl_divergence(rates, estimate):
    """Mean generalized KL divergence of estimated rates from the true ones.

    The mean over entries of ``r log(r / e) - r + e``: 0 for a perfect
    estimate.

    Parameters
    ----------
    rates : array-like
        True Poisson rates.
    estimate : array-like of the same shape
        Estimated rates; values below 1e-10 are raised to 1e-10.

    Returns
    -------
    divergence : float
        The mean divergence per entry.
    """
    rates = np.asarray(rates, dtype=np.float64)
    estimate = np.maximum(np.asarray(estimate, dtype=np.float64), _RATE_FLOOR)
    ratio_term = np.where(rates > 0, rates * np.log(np.maximum(rates, _RATE_FLOOR) / estimate),
                          0.0)
    return float(np.mean(ratio_term - rates + estimate))
