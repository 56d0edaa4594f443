"""Held-out evaluation of count models, against clean counts or under the noise model."""

import copy

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import gammaln
from sklearn.utils import check_random_state

from ._likelihood import noisy_loglik_sum

__all__ = ["generalized_kl_divergence", "heldout_loglik", "poisson_loglik_per_entry"]

# Components more similar than this (cosine) are reported as coinciding.
SIMILARITY_WARNING = 0.95
# Largest columns of each component compared when two are reported.
_N_TOP_COLUMNS = 8

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


def heldout_loglik(estimator, X, X_clean=None, *, held_out="entries", n_folds=2,
                   random_state=0):
    """Log-likelihood per entry of held-out counts: clean ones, or the noisy ones.

    The fitted ``estimator`` (any transformer with ``components_`` whose
    ``transform(X) @ components_`` are rates: :class:`~skprivfact.PrivatePoissonMF`, or
    scikit-learn's ``NMF`` with ``beta_loss="kullback-leibler"``) infers the
    rows' factors from ``X``, the form of the held-out rows it was trained on
    (their privatized release, or its clipped version for a naive model),
    and the score is that of the clean counts ``X_clean`` of the same rows.
    This measures what a model of privatized data is for, the true counts,
    with no noise model in the score.

    Without ``X_clean`` the entries of ``X`` themselves are scored, under the
    estimator's noise model: the Poisson law convolved with the two-sided
    geometric noise of its ``alpha_`` (plain Poisson when it was fitted
    without noise). That needs nothing but the privatized release, so it is
    the score for choosing hyperparameters on validation rows of privatized
    data (with the clean score only where clean counts exist, as in a
    benchmark).

    With ``held_out="entries"`` (the default) no entry is scored by factors
    inferred from it: the columns are split at random into ``n_folds``
    parts, and each part's clean counts are scored at the factors inferred
    from the other parts' entries of ``X`` (with the components restricted
    to those columns), so every entry is scored once. With
    ``held_out="rows"`` the factors are inferred from the whole rows that
    are scored: under little noise that rewards a model that fits each
    row's own counts closely (a maximum-likelihood fit such as NMF) rather
    than one that predicts unseen counts.

    Parameters
    ----------
    estimator : fitted estimator
        Has ``transform`` and ``components_``.
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        Held-out rows as the estimator takes them.
    X_clean : {array-like, sparse matrix} of shape (n_samples, n_features), \
            default=None
        The clean counts of the same rows; None scores ``X`` itself under the
        noise model (``estimator`` then needs ``alpha_``, as
        :class:`~skprivfact.PrivatePoissonMF` has).
    held_out : {"entries", "rows"}, default="entries"
        What the factors of the scored entries are inferred without.
    n_folds : int, default=2
        Number of parts the columns are split into (``held_out="entries"``).
    random_state : int, RandomState instance or None, default=0
        The random split of the columns.

    Returns
    -------
    loglik : float
        Mean log-likelihood per entry (higher is better).
    """
    if held_out not in ("entries", "rows"):
        raise ValueError(f"held_out must be 'entries' or 'rows', got {held_out!r}.")
    if X_clean is None:
        if not hasattr(estimator, "alpha_"):
            raise ValueError(
                "Scoring X under the noise model (X_clean=None) needs an estimator "
                f"with a noise model (alpha_, as PrivatePoissonMF has); "
                f"{type(estimator).__name__} has none: pass the clean counts."
            )
        if getattr(estimator, "privatize", False):
            raise ValueError(
                "With privatize=True the estimator takes raw counts, which have "
                "no noise to score: pass them as X_clean too."
            )
        # the noise law of the fit; None (a noise-free fit): Poisson
        alpha, scored_counts = estimator.alpha_, X
    else:
        alpha, scored_counts = None, X_clean
    scored_counts = (scored_counts.toarray() if hasattr(scored_counts, "toarray")
                     else np.asarray(scored_counts))
    if held_out == "rows":
        return _noisy_loglik_per_entry(scored_counts, estimator.transform(X),
                                       estimator.components_, alpha)
    n_features = X.shape[1]
    if not 2 <= n_folds <= n_features:
        raise ValueError(
            f"n_folds must be between 2 and the number of columns ({n_features}), "
            f"got {n_folds}."
        )
    order = check_random_state(random_state).permutation(n_features)
    total = 0.0
    for scored in np.array_split(order, n_folds):
        scored = np.sort(scored)
        observed = np.setdiff1d(order, scored)
        factors = _restricted_to_columns(estimator, observed).transform(
            _columns(X, observed))
        total += _noisy_loglik_per_entry(
            scored_counts[:, scored], factors,
            np.asarray(estimator.components_)[:, scored], alpha) * scored.size
    return float(total / n_features)


def _noisy_loglik_per_entry(counts, factors, components, alpha):
    """Mean log-likelihood per entry of counts at the rates ``factors @
    components``, under the two-sided geometric noise of ratio ``alpha``
    (None: Poisson)."""
    factors = np.asarray(factors, dtype=np.float64)
    components = np.asarray(components, dtype=np.float64)
    if alpha is None:
        return poisson_loglik_per_entry(counts, factors @ components)
    # the kernel reads compact integer counts as they are (no float64 copy)
    total = noisy_loglik_sum(np.ascontiguousarray(counts), factors, components, alpha)
    return float(total / np.size(counts))


def match_components(reference, components):
    """The order of the rows of ``components`` that best matches the rows of
    ``reference``: the permutation maximising the summed cosine similarity of
    matched pairs (Hungarian algorithm). ``components[order]`` is aligned with
    ``reference`` row by row."""
    similarity = _unit_rows(reference) @ _unit_rows(components).T
    _, order = linear_sum_assignment(similarity, maximize=True)
    return order


def same_top_columns(components, n_top=_N_TOP_COLUMNS):
    """Which pairs of rows of ``components`` have the same ``n_top`` largest
    columns (as sets): boolean matrix, the diagonal included."""
    n_top = min(n_top, components.shape[1])
    tops = np.sort(np.argsort(-components, axis=1, kind="stable")[:, :n_top], axis=1)
    return (tops[:, None, :] == tops[None, :, :]).all(axis=2)


def _unit_rows(rows):
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-300)


def _columns(X, columns):
    return X[:, columns] if hasattr(X, "tocsc") else np.asarray(X)[:, columns]


def _restricted_to_columns(estimator, columns):
    """A shallow copy of a fitted factorization whose per-column attributes
    (the components and, for PrivatePoissonMF, their posterior parameters)
    hold ``columns`` only: its ``transform`` takes those columns alone."""
    restricted = copy.copy(estimator)
    for name in ("components_", "component_shape_", "component_rate_"):
        if hasattr(estimator, name):
            setattr(restricted, name,
                    np.ascontiguousarray(getattr(estimator, name)[:, columns]))
    restricted.n_features_in_ = len(columns)
    restricted.__dict__.pop("feature_names_in_", None)
    return restricted


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
