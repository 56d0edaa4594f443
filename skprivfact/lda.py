"""Differentially private latent Dirichlet allocation: VIPS on stochastic variational LDA."""

import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from joblib import effective_n_jobs
from scipy.special import gammaln, logsumexp, psi
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils import check_random_state, gen_batches, gen_even_slices
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import _num_samples, check_is_fitted

from . import _lda_kernels
from .base import CentralPrivacyEstimator
from .utils._validation import (
    _COUNT_DTYPES,
    _check_integral,
    _stored_values,
    _validate,
)

__all__ = ["DPLDA"]

# Default clipping bound as a fraction of doc_length: the value of Park et
# al. (2020), under which few documents are clipped.
DEFAULT_CLIP_FRACTION = 0.1
# Pseudo-count added to each word's floored total, in units of the totals'
# noise std: half a std predicted held-out words better than one or a quarter
# on validation documents of SOTU and KOS at epsilon 1, 2 and 4, with and
# without topics.
_SMOOTHING = 0.5
# Empirical-Bayes denoising of released word totals (_deconvolved_totals), in
# units of their noise std: totals up to the range are denoised on a grid of
# this step (the noise leaves nothing finer to resolve); larger ones, whose
# noise is a small share of them, keep their released values. The prior is
# fitted to the totals up to the range plus a margin, so that the true totals
# near the range that noise pushed above it still count.
_DECONVOLUTION_RANGE = 30.0
_DECONVOLUTION_MARGIN = 10.0
_DECONVOLUTION_STEP = 0.125
_DECONVOLUTION_ITERATIONS = 200
# Words the topics model in a private fit by default (n_topic_words="auto"):
# on validation documents of SOTU and KOS at epsilon 1, 2 and 4, 1000 was
# best or within the run-to-run spread of the best of 1000 to 3000.
_AUTO_TOPIC_WORDS = 1000
# batch_size="auto": this many documents, and in a private fit at least this
# share of them. Larger batches take fewer releases per pass, each with less
# noise against its signal; on synthetic LDA corpora of 100,000 and 300,000
# documents a twentieth gave topics closer to the truth than batches of 1000
# at every epsilon from 0.5 to 4, level on 50,000 (bench_lda.py batch), while
# below 20,000 documents "auto" stays 1000, the setting of the real corpora.
_AUTO_BATCH_SIZE = 1000
_AUTO_BATCH_FRACTION = 0.05
# Tokens of a batch beyond which resampling counts each document on its own
# (int64 cumulative counts; the float sum deciding it errs far below 2x).
_MAX_BATCH_TOKENS = 2.0**62
# Tokens of one document: below this its cumulative counts are exact in int64
# and in float64.
_MAX_DOCUMENT_TOKENS = 2**53


# Entries (documents x draws x topics) of one block of the importance sampler
# of the held-out likelihood: a few megabytes whatever the corpus.
_IMPORTANCE_BLOCK_ENTRIES = 2**20


def _log_dirichlet_draws(concentration, n_draws, rng):
    """log theta of ``n_draws`` draws theta ~ Dirichlet(concentration[i]), per row i.

    Returns shape (n_rows, n_draws, n_components). Gamma(a) is drawn as
    Gamma(a + 1) U^(1/a) in the log domain, exact for small shapes (a << 1),
    whose draws would underflow to zero.
    """
    shape = (concentration.shape[0], n_draws, concentration.shape[1])
    concentration = np.broadcast_to(concentration[:, np.newaxis, :], shape)
    log_gamma = np.log(rng.standard_gamma(concentration + 1.0))
    log_gamma += np.log1p(-rng.uniform(size=shape)) / concentration  # U in (0, 1]
    return log_gamma - logsumexp(log_gamma, axis=2, keepdims=True)


def _log_dirichlet_density(log_theta, concentration):
    """log Dirichlet(theta | concentration) of the draws ``log_theta`` (.., draws, K).

    ``concentration`` is (K,) or one row per document of shape (n, 1, K).
    """
    log_norm = gammaln(concentration.sum(axis=-1)) - gammaln(concentration).sum(axis=-1)
    return log_norm + ((concentration - 1.0) * log_theta).sum(axis=-1)


def _dirichlet_expectation_2d(params):
    """E[log x] for each row x ~ Dirichlet(params[i])."""
    return psi(params) - psi(params.sum(axis=1))[:, np.newaxis]


def _csr_arrays(X):
    """The CSR arrays of ``X`` with the dtypes the kernels are compiled for."""
    return (
        X.indptr.astype(np.int64, copy=False),
        X.indices.astype(np.int64, copy=False),
        X.data.astype(np.float64, copy=False),
    )


def _resample_each_document(X, counts, doc_length, rng):
    """:func:`_resample_documents` one document at a time (integer ``counts``)."""
    new_counts = np.zeros(counts.size)
    for d in range(X.shape[0]):
        start, stop = X.indptr[d], X.indptr[d + 1]
        cumulative = np.cumsum(counts[start:stop])
        if stop == start or cumulative[-1] == 0:
            continue
        positions = rng.integers(0, cumulative[-1], size=doc_length)
        entries = np.searchsorted(cumulative, positions, side="right")
        new_counts[start:stop] = np.bincount(entries, minlength=stop - start)
    X_resampled = sp.csr_matrix(
        (new_counts, X.indices.copy(), X.indptr.copy()), shape=X.shape
    )
    X_resampled.eliminate_zeros()
    return X_resampled


def _resample_documents(X, doc_length, rng):
    """Redraw every row of the count matrix ``X`` as ``doc_length`` tokens.

    Row ``d`` becomes Multinomial(doc_length, X[d] / X[d].sum()): its tokens
    are drawn with replacement, so every document contributes exactly
    ``doc_length`` tokens. Empty rows stay empty. Integer arithmetic only: a
    token is a uniform integer position among the document's tokens, located
    in the cumulative counts.

    Parameters
    ----------
    X : sparse matrix of shape (n_documents, n_features), CSR
        Integer counts.
    doc_length : int
        Number of tokens of every resampled document.
    rng : numpy Generator
        Source of the draws (the release's secret stream).

    Returns
    -------
    X_resampled : sparse matrix of shape (n_documents, n_features), CSR, float64
        The resampled counts, on the sparsity pattern of ``X`` (minus the words
        not drawn).
    """
    counts = np.rint(X.data).astype(np.int64)
    if X.data.sum() >= _MAX_BATCH_TOKENS:
        # The batch's cumulative count would overflow int64 and stop being
        # sorted, so that the search below would hand one document's tokens
        # to another: count each document on its own (each has fewer than
        # 2**53 tokens, see DPLDA._check_counts).
        return _resample_each_document(X, counts, doc_length, rng)
    cumulative = np.cumsum(counts)
    tokens_before = np.concatenate([[0], cumulative])
    doc_offsets = tokens_before[X.indptr[:-1]]
    doc_totals = tokens_before[X.indptr[1:]] - doc_offsets
    nonempty = np.flatnonzero(doc_totals > 0)
    positions = rng.integers(
        0, doc_totals[nonempty][:, np.newaxis], size=(nonempty.size, doc_length)
    )
    positions += doc_offsets[nonempty][:, np.newaxis]
    positions = positions.ravel()
    if cumulative.size and cumulative[-1] <= 4 * positions.size + 1_000_000:
        # A table from token to entry: one gather per draw.
        entries = np.repeat(np.arange(counts.size), counts)[positions]
    else:
        # Very long documents: no table; the entry holding token g is the
        # first with cumulative count > g.
        entries = np.searchsorted(cumulative, positions, side="right")
    new_counts = np.bincount(entries, minlength=counts.size).astype(np.float64)
    X_resampled = sp.csr_matrix(
        (new_counts, X.indices.copy(), X.indptr.copy()), shape=X.shape
    )
    X_resampled.eliminate_zeros()
    return X_resampled


def _e_step(
    X,
    exp_topic_word,
    doc_topic_prior,
    max_doc_update_iter,
    mean_change_tol,
    clip_norm,
    compute_suff_stats,
    n_jobs,
    executor=None,
    unigram_weight=0.0,
):
    """E-step over the rows of ``X``, in ``n_jobs`` threads over even slices.

    Parameters
    ----------
    X : sparse matrix of shape (n_documents, n_features), CSR
        The documents.
    exp_topic_word : ndarray of shape (n_components, n_features)
        ``exp(E[log beta])``.
    doc_topic_prior : float
        The Dirichlet prior of the topic proportions.
    max_doc_update_iter : int
        Maximum number of rounds per document.
    mean_change_tol : float
        Stopping tolerance of the per-document updates.
    clip_norm : float
        Bound on the Frobenius norm of each document's statistic (``np.inf``:
        none).
    compute_suff_stats : bool
        Whether to compute the summed (clipped) sufficient statistics.
    n_jobs : int
        Number of threads.
    executor : concurrent.futures.ThreadPoolExecutor, default=None
        A pool of ``n_jobs`` threads to reuse; one is made when None.
    unigram_weight : float, default=0.0
        When positive, each document's statistic has one more row, its word
        counts times ``unigram_weight``, clipped jointly with the topics' rows.

    Returns
    -------
    doc_topic_distr : ndarray of shape (n_documents, n_components)
        The variational Dirichlet parameters ``gamma`` of the documents.
    suff_stats : ndarray of shape (n_rows, n_features) or None
        The sum over documents of the clipped statistics ``n_dw phi_dwk``
        (``n_rows = n_components``), and of the weighted counts in one more
        row with ``unigram_weight``.
    n_clipped : int
        Number of documents whose statistic was clipped.
    """
    n_documents = X.shape[0]
    n_topics, n_features = exp_topic_word.shape
    indptr, indices, data = _csr_arrays(X)
    exp_topic_word_t = np.ascontiguousarray(exp_topic_word.T)
    doc_topic_distr = np.empty((n_documents, n_topics))

    n_rows = n_topics + 1 if unigram_weight > 0 else n_topics

    def run(rows):
        shape = (n_features, n_rows) if compute_suff_stats else (1, 1)
        suff_stats = np.zeros(shape)
        n_clipped = _lda_kernels.e_step(
            indptr,
            indices,
            data,
            rows.start,
            rows.stop,
            exp_topic_word_t,
            float(doc_topic_prior),
            int(max_doc_update_iter),
            float(mean_change_tol),
            float(clip_norm),
            compute_suff_stats,
            doc_topic_distr,
            suff_stats,
            float(unigram_weight),
        )
        return suff_stats, n_clipped

    n_slices = min(n_jobs, n_documents)
    slices = list(gen_even_slices(n_documents, n_slices)) if n_documents else []
    if n_slices <= 1:
        results = [run(rows) for rows in slices]
    else:
        # The kernels release the GIL. A plain thread pool: joblib's dispatch
        # costs about 10 ms per call, as much as the E-step of a small batch.
        if executor is None:
            with ThreadPoolExecutor(max_workers=n_slices) as pool:
                results = list(pool.map(run, slices))
        else:
            results = list(executor.map(run, slices))

    if not compute_suff_stats:
        return doc_topic_distr, None, 0
    suff_stats_t = np.zeros((n_features, n_rows))
    for partial_stats, _ in results:
        suff_stats_t += partial_stats
    return doc_topic_distr, suff_stats_t.T.copy(), sum(n for _, n in results)


def _deconvolved_totals(totals, noise_std):
    """Posterior means of non-negative totals released with Gaussian noise.

    Empirical Bayes: the prior of the true totals is the distribution on a
    grid from 0 that maximises the likelihood of the released ones (the
    nonparametric maximum likelihood of Kiefer and Wolfowitz, fitted by EM
    as in Jiang and Zhang 2009), and each released total is replaced by its
    posterior mean under it. Most words of a vocabulary have totals within a
    few noise stds of 0, where flooring at 0 keeps much of the noise and the
    prior learned from all of them takes it out. Totals above
    ``_DECONVOLUTION_RANGE`` noise stds keep their values (those within 5
    noise stds below it move part of the way). Post-processing: released
    values and the public noise std only.
    """
    totals = np.asarray(totals, dtype=np.float64)
    if not noise_std > 0:
        return np.maximum(totals, 0.0)
    denoised = totals.copy()
    small = totals < _DECONVOLUTION_RANGE * noise_std
    fitted = totals < (_DECONVOLUTION_RANGE + _DECONVOLUTION_MARGIN) * noise_std
    if not small.any():
        return denoised
    # In units of the noise std (a total far below 0, which only noise makes,
    # counts as 10 below), grouped to 1/16 of it (the posterior mean does not
    # change on that scale): the EM's cost is then set by the range, not by
    # the vocabulary.
    scaled = np.maximum(totals[fitted] / noise_std, -10.0)
    _, group, counts = np.unique(
        np.round(scaled * 16.0), return_inverse=True, return_counts=True
    )
    centres = np.bincount(group, weights=scaled) / counts
    grid = np.arange(
        0.0, _DECONVOLUTION_RANGE + _DECONVOLUTION_MARGIN + 4.0, _DECONVOLUTION_STEP
    )
    log_likelihood = -0.5 * (centres[:, np.newaxis] - grid) ** 2
    likelihood = np.exp(log_likelihood - log_likelihood.max(axis=1, keepdims=True))
    prior = np.full(grid.size, 1.0 / grid.size)
    share = counts / counts.sum()
    for _ in range(_DECONVOLUTION_ITERATIONS):
        posterior = likelihood * prior
        posterior /= posterior.sum(axis=1, keepdims=True)
        prior = share @ posterior
    posterior = likelihood * prior
    posterior /= posterior.sum(axis=1, keepdims=True)
    means = (posterior @ grid)[group][small[fitted]] * noise_std
    # From 5 noise stds below the range up to it, the posterior mean hands
    # over linearly to the released value: no jump at the range.
    weight = np.clip(
        (_DECONVOLUTION_RANGE - scaled[small[fitted]]) / 5.0, 0.0, 1.0
    )
    denoised[small] = weight * means + (1.0 - weight) * totals[small]
    return denoised


def _pooled_topics(
    noisy_average,
    noise_std,
    topic_word_prior,
    totals=None,
    totals_std=None,
    deconvolve=False,
):
    """Topic parameters from the noisy average of the topic-word statistics.

    Each word's total over the topics, ``t_w = sum_k A_kw``, carries the noise
    of K entries (std ``sqrt(K) * noise_std``) but all of the word's signal;
    it is floored at zero once (``deconvolve``: replaced by its
    empirical-Bayes posterior mean, :func:`_deconvolved_totals`). The topics
    split it in proportion to their own entries floored at zero plus
    ``noise_std`` (so that a word whose entries are all noise is shared
    evenly). Flooring each of the K entries instead would add about ``0.4 *
    noise_std`` of spurious mass per entry, ``sqrt(K)`` times more per word.
    ``totals`` (of noise std ``totals_std``) replaces the topics' own totals
    when given.
    """
    shares = np.maximum(noisy_average, 0.0)
    shares += noise_std
    shares /= shares.sum(axis=0)
    n_topics = noisy_average.shape[0]
    if totals is None:
        totals = noisy_average.sum(axis=0)
        totals_std = math.sqrt(n_topics) * noise_std
    if deconvolve:
        totals = _deconvolved_totals(totals, totals_std)
    else:
        totals = np.maximum(totals, 0.0)
        totals += _SMOOTHING * totals_std
    return topic_word_prior + totals * shares


def _dirichlet_bound_term(prior, distr, dirichlet_distr, size):
    """E[log p(x | prior) - log q(x | distr)] for Dirichlet rows, summed."""
    score = np.sum((prior - distr) * dirichlet_distr)
    score += np.sum(gammaln(distr) - gammaln(prior))
    score += np.sum(gammaln(prior * size) - gammaln(np.sum(distr, axis=1)))
    return score


def _check_score_method(method, n_draws, include_topic_word_bound):
    """Validate the keyword arguments of :meth:`DPLDA.score` and ``perplexity``."""
    if method not in ("bound", "importance"):
        raise ValueError(f"method must be 'bound' or 'importance', got {method!r}.")
    if isinstance(n_draws, bool) or not isinstance(n_draws, Integral) or n_draws < 1:
        raise ValueError(f"n_draws must be an integer >= 1; got {n_draws!r}.")
    if method == "importance" and include_topic_word_bound:
        raise ValueError(
            "include_topic_word_bound=True applies to the bound, not to "
            "method='importance', which estimates the likelihood of the words "
            "given the topics."
        )


class DPLDA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, CentralPrivacyEstimator):
    """Differentially private latent Dirichlet allocation (VIPS).

    Privacy: (epsilon, delta)-differential privacy of the released topics
    (``components_`` and everything derived from it) with respect to
    replacing one document by another (substitution: the number of documents,
    which sets the sampling rate and the scale of the update, is public), for
    the whole of :meth:`fit` (or of the :meth:`partial_fit` calls made so
    far). Every iteration of stochastic
    variational inference (Hoffman et al. 2010) draws a Poisson-subsampled
    batch, each document kept with probability ``q = batch_size /
    n_documents``; each document of the batch is resampled with replacement to
    exactly ``doc_length`` tokens; its expected sufficient statistic (a
    topic-by-word matrix of expected counts; with noise, the default
    ``floor_negatives="pooled"``, more than one topic and a positive
    ``counts_weight``, one more row holds the document's resampled word
    counts times ``counts_weight``) is
    clipped, as a whole, to Frobenius norm ``clip_norm``; the clipped
    statistics are summed, divided by the expected batch size ``q *
    n_documents = batch_size`` (a constant, so the sensitivity is
    ``clip_norm / batch_size`` whatever the data) and released with Gaussian
    noise of standard deviation ``noise_multiplier * clip_norm /
    batch_size`` on every entry (``learning_method="batch"``: every document,
    ``q = 1``). The topics are computed from the noisy statistics alone, with
    the public noise scale, by post-processing that costs no privacy
    (``floor_negatives``: how negative noisy counts are handled). This is
    the VIPS algorithm of Park et al. (2020). The
    per-document variational parameters never leave the E-step. Batches and
    noise come from the operating system's entropy, a fresh stream per
    release (:class:`~skprivfact.privacy.PrivacyEngine`), so neither
    ``random_state`` nor a copy of the estimator can replay them. The
    accountant (``accountant``) takes one step of the Poisson-subsampled
    Gaussian mechanism per iteration, and ``privacy_spent_`` reports its
    epsilon; a :class:`~skprivfact.privacy.PrivacyBudget` passed as
    ``budget`` is charged too. The guarantee rests on ``clip_norm`` alone,
    not on the data; the number of documents (``n_documents_``) and the
    vocabulary are public. With ``n_topic_words`` below the vocabulary
    (by default 1000 words in a private fit planned from ``epsilon``) one
    more release comes
    first: every document's resampled counts, clipped to ``clip_norm``,
    summed over all documents and released once with noise of its own
    (``totals_share`` of the budget, see the parameter), and the
    accountant composes it with the topics' releases, whose noise is
    calibrated to what it leaves. Resampling needs integer counts: with noise,
    fractional weights are refused.
    The progress that ``verbose`` prints during a private fit holds public
    and released quantities only (passes, epsilon spent), and the elapsed
    time, which like any running time is not covered: the
    training perplexity, computed from the documents without noise, is
    neither printed (``evaluate_every`` is ignored, with a warning) nor
    stored (``bound_``). ``epsilon=float("inf")`` (with
    ``noise_multiplier=None``) runs scikit-learn's online LDA: no resampling,
    clipping or noise, and consecutive mini-batches (every document once per
    pass) in place of Poisson batches.

    Read more in :ref:`Privacy guarantees <privacy-guarantees>`.

    Parameters
    ----------
    n_components : int, default=10
        Number of topics.
    epsilon : float, default=1.0
        The privacy budget, positive; ``float("inf")`` for the non-private
        algorithm. With ``noise_multiplier=None`` the noise is calibrated so
        that :meth:`fit` spends at most ``epsilon``; :meth:`partial_fit` never
        takes a step that would spend more.
    delta : float, default=1e-5
        The delta of (epsilon, delta)-DP, in (0, 1); choose it well below
        ``1 / n_documents`` (a fit whose ``delta`` exceeds it warns with
        :class:`~skprivfact.exceptions.PrivacyLeakWarning`).
    doc_length : int, default=500
        Number of tokens every training document is resampled to (with
        replacement), at least 1. Longer documents keep more of their words,
        but the statistic's norm grows with it.
    clip_norm : float, default=None
        Bound on the Frobenius norm of each document's sufficient statistic
        (whose topic rows sum to ``doc_length``; the counts' row of
        ``floor_negatives="pooled"`` adds ``counts_weight`` times that),
        positive. None means
        ``0.1 * doc_length``, the setting of Park et al. (2020). Unused when
        not private.
    batch_size : int, "auto" or None, default="auto"
        Expected number of documents per iteration: each document is kept with
        probability ``batch_size / n_documents``; None or a value of at least
        the number of documents uses every document in every iteration. Larger
        batches lower the noise relative to the signal, at the cost of fewer
        iterations per pass. "auto" is 1000, or when private (a finite
        ``epsilon`` or a given ``noise_multiplier``) a twentieth of the
        documents if that is more (``n_documents`` is public); elsewhere
        these docs mean by ``batch_size`` the number it resolves to.
    max_iter : int, default=1
        Number of passes over the documents in :meth:`fit`; a pass is
        ``ceil(n_documents / batch_size)`` iterations (one with
        ``learning_method="batch"``). More passes spend more privacy, so the
        calibrated noise grows with them.
    learning_method : {"online", "batch"}, default="online"
        "online": stochastic variational inference, each iteration a
        mini-batch and a step of size ``rho_t``. "batch": every iteration uses
        every document and sets the topics to the prior plus the released
        statistic (step 1), as scikit-learn's batch learning.
    evaluate_every : int, default=-1
        Compute the perplexity of the training documents every
        ``evaluate_every`` passes, printed with ``verbose`` (0 or a negative
        value: never), and never used to stop early (scikit-learn's
        ``perp_tol``). Without privacy only: the perplexity is computed from
        the documents without noise, so a private fit ignores it (with a
        warning) and always takes the releases it planned.
    noise_multiplier : float, default=None
        Noise standard deviation relative to the sensitivity, >= 0. None
        calibrates it from ``(epsilon, delta)`` and the planned number of
        iterations (``max_iter`` passes). A given value is used as is (the
        algorithm is then private even with ``epsilon=inf``) and the epsilon
        it spends is reported in ``privacy_spent_``; a finite ``epsilon``
        still caps it.
    doc_topic_prior : float, default=None
        Prior of the document-topic proportions (alpha), positive. None means
        ``1 / n_components``.
    topic_word_prior : float, default=None
        Prior of the topic-word distributions (eta), positive. None means
        ``1 / n_components``.
    floor_negatives : {"pooled", "per_iteration", "running_average"}, \
            default="pooled"
        How the noisy statistics become topics (all are post-processing of
        the released statistics and cost no privacy).
        "pooled": the step averages the raw noisy statistics (zero-mean
        noise of known std ``s`` per entry, beside what remains of the random
        start); each word's total is floored at
        zero once and smoothed by half its own noise std during the fit, and
        denoised by empirical Bayes at its end, and the topics share it in
        proportion to their own entries floored at zero plus ``s`` (see
        Notes). With noise, more than one topic and a positive
        ``counts_weight``, every release also carries the documents' word
        counts (one more row, weighted by ``counts_weight`` and clipped with
        the topics), whose mean over all the releases gives the word totals
        far less noise than the sum of the K noisy topic rows (for weights of
        about 1 or more).
        "per_iteration" (VIPS): each released statistic is floored at zero
        before the step of the topic update. Zero-mean noise on the many
        near-zero entries then leaves a positive bias of about 0.4 noise
        standard deviations per entry that averaging does not remove.
        "running_average": the step averages the raw noisy statistics, and
        the topics are that average floored at ``topic_word_prior`` (a
        posterior Dirichlet parameter is at least the prior); the noise
        averages out before the floor, so less mass lands on absent words.
    counts_weight : float, default=1.0
        Weight of the counts' row (``floor_negatives="pooled"``, with noise
        and more than one topic): 0, or in [0.001, 1e6]. Each document's
        statistic holds its resampled counts times ``counts_weight`` beside
        its topic rows, and the whole is clipped to ``clip_norm``, so the
        guarantee does not depend on it. It shares the norm of each clipped
        statistic (most are clipped) between the word totals and the topics:
        the larger it is, the closer the totals come to those of a model
        without topics spending the whole budget on them, and the noisier
        the topics (their rows carry ``counts_weight`` times less signal than
        the counts' row against the same noise; a large weight also shrinks
        the topics' parameters against ``topic_word_prior``). 0 releases no
        counts' row: the totals are then the sum of the topics' rows. Where
        the topics are strong the topics' share counts most, where a model
        without topics is hard to beat (few, short documents) the totals':
        choose it on validation documents against the private unigram floor
        (``n_components=1``, ``batch_size=None``, ``max_iter=1``), as
        ``benchmarks/bench_lda.py validation`` does, by the held-out
        likelihood (``score(X, method="importance")``; in scikit-learn's
        ``GridSearchCV``, through a ``scoring`` callable), by which a topic
        model and a unigram compare (see Notes).
    n_topic_words : int, "auto" or None, default="auto"
        The number of words the topics model: None models every word. An int
        (smaller than the vocabulary) first releases the word totals, then
        fits the topics on the ``n_topic_words`` words whose released totals
        are largest; on the other words every topic follows the released
        totals (it gives them the totals' mass relative to its own words, in
        their proportions), so all topics agree there. The noise of the
        topics' releases then falls on the frequent words, where it is small
        against their counts, instead of swamping the rare ones, and the
        totals of all words come from one release over every document (see
        Notes). "auto" is 1000 for private fits of more than one topic whose
        noise is planned from ``epsilon``, and None with one topic, with a
        given ``noise_multiplier``, without privacy (scikit-learn's online
        LDA) and in :meth:`partial_fit`, which cannot make the totals'
        release over the whole corpus. An int needs
        :meth:`fit`: with it set, :meth:`partial_fit` is not available.
        Choose it, with ``totals_share``, on validation documents: the
        larger epsilon, the more words (and the larger share of the budget)
        the topics can usefully take.
    totals_share : float, default=0.5
        With ``n_topic_words``: the share, in (0, 1), of the budget that the
        release of the word totals takes, counted in inverse noise variance
        (as Gaussian releases compose under zero-concentrated DP), not in
        epsilon: its noise is that of a single full-batch release spending
        the whole budget, over ``sqrt(totals_share)``, and the topics'
        releases are calibrated to what the accountant leaves. Unused with a
        given ``noise_multiplier``, which every release uses.
    learning_decay : float, default=0.7
        Exponent kappa of the step size ``rho_t = (learning_offset + t) **
        -kappa``, in [0, 1]; (0.5, 1] guarantees convergence.
    learning_offset : float, default=10.0
        The offset tau0 of the step size, >= 1. Larger values average the
        noisy statistics over more iterations.
    mean_change_tol : float, default=1e-3
        Stopping tolerance of the per-document E-step updates.
    max_doc_update_iter : int, default=100
        Maximum number of E-step updates per document.
    n_jobs : int, default=None
        Number of threads of the E-step (the numba kernels release the GIL).
        None means 1 unless in a :obj:`joblib.parallel_backend` context; -1
        means all processors.
    verbose : int or "bar", default=0
        Progress in the format of every skprivfact estimator: 1 prints about
        ten lines (within the passes when there are fewer than ten: the
        private default is one pass), 2 one per pass (the epsilon spent so
        far, elapsed time and time left, and without privacy the training
        perplexity every ``evaluate_every`` passes), and within a pass of at
        least 10 batches about one per tenth of them; :meth:`partial_fit`
        prints a line per call (its release and the epsilon spent); "bar"
        draws a tqdm bar (the ``progress`` extra).
    accountant : {"rdp", "pld"}, default="rdp"
        The privacy accountant: Renyi DP, or privacy loss distributions
        (tight: less noise for the same claim; needs dp-accounting).
    budget : PrivacyBudget, default=None
        A budget shared across fits, copies and a whole ``GridSearchCV``,
        charged by every release; a fit that would exceed it is refused
        once the input is validated, before anything is released or charged.
    secure : bool, default=False
        Draw floating-point-safe noise: each release is rounded to a fine grid
        and gets exact discrete Gaussian noise from the operating system's
        cryptographic randomness (Mironov 2012 showed how textbook
        floating-point noise can leak). Needs full batches and
        ``accountant="rdp"``; slower (a pure-Python sampler).
    random_state : int, RandomState instance or None, default=None
        Seeds the initial topics, which depend on no data. A private fit's
        batches, resampling and noise never come from it; with
        ``noise_multiplier=0`` (clipping without noise, no privacy) an integer
        seeds the batches and the resampling too.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Variational parameters (lambda) of the topic-word distributions: a
        post-processing of the noisy statistics. Normalise the rows for the
        topics' word distributions.
    exp_dirichlet_component_ : ndarray of shape (n_components, n_features)
        ``exp(E[log beta])`` under ``components_``.
    bound_ : float
        Document-only perplexity of the training documents at the end of a
        non-private :meth:`fit` (as scikit-learn's ``bound_``); absent after a
        private fit, as it is computed from the documents without noise.
    n_documents_ : int
        Number of documents of the last :meth:`fit` or :meth:`partial_fit`
        (public under substitution); ``perplexity(X, sub_sampling=True)``
        scales to it.
    n_iter_ : int
        Number of passes completed by :meth:`fit`.
    n_batch_iter_ : int
        One more than the number of iterations (released statistics) so far,
        as in scikit-learn's online LDA; it sets the step size.
    doc_topic_prior_ : float
        The prior alpha used.
    topic_word_prior_ : float
        The prior eta used.
    clip_norm_ : float
        The clipping bound used (``inf`` when not private).
    topic_words_ : ndarray of shape (n_topic_words,)
        Sorted indices of the words the topics model (every word when
        ``n_topic_words`` is None or at least the vocabulary, and when "auto"
        means every word): the words of largest released totals.
    noise_multiplier_ : float
        The noise multiplier used (0 when not private); with ``n_topic_words``,
        that of the topics' releases.
    totals_noise_multiplier_ : float
        The noise multiplier of the word totals' release (``n_topic_words``
        smaller than the vocabulary, private fits; 0 otherwise).
    sample_rate_ : float
        The Poisson sampling rate ``batch_size / n_documents`` (at most 1).
    accountant_ : RDPAccountant or PLDAccountant
        The accountant, with one step per iteration.
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` spent so far by this model (epsilon is ``inf``
        when not private).
    neighbouring_relation_ : str
        The relation ``privacy_spent_`` holds for ("substitution").
    reproducible_noise_ : bool
        Whether the fit ran inside
        :func:`~skprivfact.privacy.reproducible_noise` (not private).
    n_releases_ : int
        Number of releases so far: the iterations, and with ``n_topic_words``
        the word totals' release.
    random_state_ : RandomState instance
        The stream that drew the initial topics (from ``random_state``).
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`. Defined only when `X`
        has feature names that are all strings.

    See Also
    --------
    sklearn.decomposition.LatentDirichletAllocation : The non-private online
        LDA whose interface this estimator follows.

    Notes
    -----
    :meth:`perplexity` and :meth:`score` report the document-only bound
    ``sum_d (E[log p(w_d, theta_d | beta)] - E[log q(theta_d)])`` by default,
    unlike scikit-learn, whose bound adds the topic-word term
    ``E[log p(beta | eta) - log q(beta | lambda)]`` (``include_topic_word_bound=True``
    gives scikit-learn's figure exactly). That term is a property of the
    model alone, a KL divergence summed over all ``K V`` entries of
    ``lambda``, yet it is divided by the number of words of ``X``: on a
    held-out set it dominates, and for a private model, whose ``lambda``
    carries noise on every entry, it is enormous (orders of magnitude above
    the document-only figure), so that a comparison of models, or a
    ``GridSearchCV`` over ``epsilon`` or ``clip_norm``, would rank the noise
    of ``lambda`` rather than the prediction of held-out words. Both methods agree (``perplexity =
    exp(-score / number of words)``), as scikit-learn's do.

    With ``floor_negatives="pooled"`` the step keeps the running average
    ``A_t = (1 - rho_t) A_{t-1} + rho_t N s~_t`` of the raw releases (``N``
    documents), whose noise is Gaussian with per-entry variance
    ``v_t = (1 - rho_t)^2 v_{t-1} + rho_t^2 (N sigma C / B)^2`` (``sigma`` the
    noise multiplier, ``C`` the clip norm, ``B`` the expected batch). With
    ``s = sqrt(v_t)`` and word totals ``T_w`` of noise std ``s_T``, the
    topics are ``lambda_kw = eta + (max(T_w, 0) + s_T / 2) (max(A_kw, 0) + s) /
    sum_j (max(A_jw, 0) + s)``. Flooring
    each entry (VIPS) adds about ``0.4 s`` of spurious mass to each of the
    ``K V`` entries, most of which hold no signal; thresholding them instead
    (``max(A - t s, 0)``) was far worse, and so was flooring the totals
    without smoothing: words that lose all their mass become nearly
    impossible. Pooling floors each word's total once, smooths it at the
    scale of its noise, and lets a word whose entries are noise fall back to
    the corpus frequency shared evenly by the topics.

    At the end of a private fit (and of each ``partial_fit`` call) the word
    totals are instead denoised by empirical Bayes: the distribution of the
    true totals is estimated from all the released ones (on a grid from 0,
    by nonparametric maximum likelihood: Kiefer and Wolfowitz 1956; Jiang and
    Zhang 2009), and each total becomes its posterior mean under it (totals
    above 30 noise stds keep their value). Most words have totals within a
    few noise stds of zero, where flooring keeps much of the noise, and
    the estimated distribution takes most of it out. The same applies to
    the preliminary release of the word totals (``n_topic_words``).

    The word totals set how likely each word is, and their noise costs a
    private topic model more held-out likelihood than the noise of the
    topics' shares. The sum of the K topic rows, ``sum_k A_kw``, carries K
    times the noise variance of a single row, and the decaying step
    ``rho_t`` keeps only the last few releases. So with noise and more than
    one topic each release has one more row, the document's counts times
    ``counts_weight`` (``u``; at 1, the sum of its topic rows), clipped
    jointly with them: the clipping bound and the noise per entry are
    unchanged and the accountant takes the same single step. A document's
    topic rows have norm at most that of its counts (each count is split
    among the topics), so with a large ``u`` the counts' row holds nearly
    all of a clipped document's norm: the row over ``u`` then estimates the
    word totals about as well as the same releases would without topics,
    while the topics' rows carry ``u`` times less signal against the same
    noise. Every release of that
    row estimates the same clipped word totals (up to the clipping of each
    document, which depends on the topics only through the norm of its
    topic rows), so ``T_w`` is their plain mean over all releases (noise
    variance falling as one over the number of releases), combined with
    ``sum_k A_kw`` by inverse variance; ``s_T`` is the std of that
    combination. Without the row (``floor_negatives="per_iteration"`` and
    ``"running_average"`` never release it) the totals are the noisy sum of
    the topics.

    To compare models with different numbers of topics, use
    ``perplexity(X, method="importance")``, an estimate of the held-out
    likelihood itself. The bound charges each document the KL term of its
    topic proportions, which a unigram model does not pay and which grows
    with the number of topics: on short documents (paragraphs of a few tens
    of words) it ranks a non-private K-topic fit below the non-private
    unigram when the likelihood ranks it above.

    A private topic model can still be worse than a private model without
    topics (``n_components=1``) at the same budget, by the likelihood too:
    the unigram spends the whole budget on one full-batch release of the
    word totals, while the topic model clips the totals jointly with the
    topics' rows and adds the noise of the topics' shares. On short
    documents what the topics gain does not repay that unless the totals
    take most of each release (a large ``counts_weight`` can bring the
    model level with the unigram), and a user who needs only word
    frequencies should fit the unigram
    (``benchmarks/bench_lda.py floor`` compares the two, and
    ``benchmarks/bench_lda.py validation`` chooses ``counts_weight`` on
    validation documents). A large
    ``doc_topic_prior`` (tens to hundreds) gives every document nearly the
    same topic proportions: the model then tends to a unigram built from the
    noisier totals of many releases, close to the floor but not below it;
    on longer documents the default does better. Choose it on validation
    documents.

    ``n_topic_words`` answers the same cost differently. Most words of a
    vocabulary are rare: in a private release of the topics' statistics
    their entries are mostly noise, which the pooled topics spread over
    every topic, and which takes budget the totals need. With
    ``n_topic_words`` the totals are released first, once, over every
    document (the unigram's release, at ``totals_share`` of the budget),
    the topics are fitted on the most frequent words only, and the other
    words follow the released totals in every topic. The model then is a
    unigram on the rare words and a topic model on the frequent ones, and
    it can beat the private unigram where topics over every word do not
    (``benchmarks/bench_lda.py floor`` measures both against it). Private
    fits whose noise is planned from ``epsilon`` do this by default
    (``n_topic_words="auto"``: 1000 words).

    Without privacy, :meth:`fit` takes scikit-learn's consecutive
    mini-batches, as ``LatentDirichletAllocation(learning_method="online")``
    does, and reaches its held-out perplexity (the topics themselves differ
    as random starts make them differ): Poisson batches miss about a third
    of the documents in a pass and repeat others, which costs held-out
    perplexity. Private fits need the Poisson batches, whose secrecy the
    accountant's subsampling amplification rests on.

    Every :meth:`fit` spends the budget anew: fitting the same documents twice
    releases two models and spends twice.

    References
    ----------
    M. Park, J. Foulds, K. Chaudhuri and M. Welling, "Variational Bayes In
    Private Settings (VIPS)", Journal of Artificial Intelligence Research 68,
    2020.

    M. D. Hoffman, D. M. Blei and F. Bach, "Online Learning for Latent
    Dirichlet Allocation", NeurIPS 2010.

    H. M. Wallach, I. Murray, R. Salakhutdinov and D. Mimno, "Evaluation
    Methods for Topic Models", ICML 2009.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.lda import DPLDA
    >>> rng = np.random.RandomState(0)
    >>> X = rng.poisson(1.0, size=(2000, 30))
    >>> lda = DPLDA(n_components=3, epsilon=1.0, batch_size=500, doc_length=50,
    ...             random_state=0).fit(X)
    >>> lda.transform(X[:2]).shape
    (2, 3)
    >>> lda.privacy_spent_[0] <= 1.0
    True
    """

    _parameter_constraints: dict = {
        **CentralPrivacyEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "doc_length": [Interval(Integral, 1, None, closed="left")],
        "clip_norm": [None, Interval(Real, 0, None, closed="neither")],
        "batch_size": [
            None, StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")
        ],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "learning_method": [StrOptions({"online", "batch"})],
        "evaluate_every": [Integral],
        "noise_multiplier": [None, Interval(Real, 0, None, closed="left")],
        "doc_topic_prior": [None, Interval(Real, 0, None, closed="neither")],
        "topic_word_prior": [None, Interval(Real, 0, None, closed="neither")],
        "floor_negatives": [StrOptions({"pooled", "per_iteration", "running_average"})],
        # 0 or bounded away from it and from overflow: the released row is
        # divided by the weight and its noise variance by its square, which
        # must stay far inside float64 whatever the documents.
        "counts_weight": [Options(Real, {0}), Interval(Real, 1e-3, 1e6, closed="both")],
        "n_topic_words": [
            None, StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")
        ],
        "totals_share": [Interval(Real, 0, 1, closed="neither")],
        "learning_decay": [Interval(Real, 0, 1, closed="both")],
        "learning_offset": [Interval(Real, 1.0, None, closed="left")],
        "mean_change_tol": [Interval(Real, 0, None, closed="left")],
        "max_doc_update_iter": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [None, Integral],
        "verbose": ["verbose", StrOptions({"bar"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components=10,
        *,
        epsilon=1.0,
        delta=1e-5,
        doc_length=500,
        clip_norm=None,
        batch_size="auto",
        max_iter=1,
        learning_method="online",
        evaluate_every=-1,
        noise_multiplier=None,
        doc_topic_prior=None,
        topic_word_prior=None,
        floor_negatives="pooled",
        counts_weight=1.0,
        n_topic_words="auto",
        totals_share=0.5,
        learning_decay=0.7,
        learning_offset=10.0,
        mean_change_tol=1e-3,
        max_doc_update_iter=100,
        n_jobs=None,
        verbose=0,
        accountant="rdp",
        budget=None,
        secure=False,
        random_state=None,
    ):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.doc_length = doc_length
        self.clip_norm = clip_norm
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.learning_method = learning_method
        self.evaluate_every = evaluate_every
        self.noise_multiplier = noise_multiplier
        self.doc_topic_prior = doc_topic_prior
        self.topic_word_prior = topic_word_prior
        self.floor_negatives = floor_negatives
        self.counts_weight = counts_weight
        self.n_topic_words = n_topic_words
        self.totals_share = totals_share
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.mean_change_tol = mean_change_tol
        self.max_doc_update_iter = max_doc_update_iter
        self.accountant = accountant
        self.budget = budget
        self.secure = secure
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.random_state = random_state

    # Input and parameters --------------------------------------------------

    def _check_counts(self, X, reset, integer=False):
        """The one gateway for documents: CSR float64 of non-negative weights.

        ``integer`` (private fits, which resample tokens) also requires
        integer counts. Remembers the input's floating dtype when resetting.
        """
        X = _validate(X, self, reset, "csr", _COUNT_DTYPES, "X")
        values = _stored_values(X)
        if values.size and values.min() < 0:
            raise ValueError(
                "Negative values in data passed to X: it must hold non-negative "
                "word counts (or weights)."
            )
        if integer and values.dtype.kind == "f" and values.size:
            fractional = values != np.floor(values)
            if np.any(fractional):
                raise ValueError(
                    "DPLDA with privacy resamples the tokens of every document, "
                    "which needs integer word counts; found a non-integer value. "
                    "Pass raw counts, or use "
                    'epsilon=float("inf") (no noise) to fit fractional weights '
                    "such as tf-idf."
                )
        _check_integral(
            np.rint(values) if values.dtype.kind == "f" else values, "X", "counts"
        )
        if integer and X.shape[0]:
            # Resampling locates tokens by 64-bit cumulative counts.
            longest = float(np.max(X.sum(axis=1, dtype=np.float64)))
            if longest >= _MAX_DOCUMENT_TOKENS:
                raise ValueError(
                    "X holds a document of 2**53 tokens or more; DPLDA with "
                    "privacy resamples the tokens of every document, which needs "
                    f"fewer than 2**53 = {_MAX_DOCUMENT_TOKENS} per document."
                )
        if reset:
            self._dtype = np.float32 if X.dtype == np.float32 else np.float64
        # (Duplicate entries are merged by the gateway.)
        return sp.csr_matrix(X, dtype=np.float64)

    def _batch_size(self, n_documents):
        """The plan's expected batch size ("auto" resolved); None: every document."""
        if self.learning_method == "batch":
            return None
        if self.batch_size == "auto":
            if not self._is_private:
                return _AUTO_BATCH_SIZE
            return max(_AUTO_BATCH_SIZE, math.ceil(_AUTO_BATCH_FRACTION * n_documents))
        return self.batch_size

    def _start(self, n_documents, reserve=None, n_features=None):
        """Plan the fit's releases and resolve the clipping bound."""
        self._start_privacy(
            n_documents,
            self._batch_size(n_documents),
            noise_multiplier=self.noise_multiplier,
            reserve=reserve,
            n_preliminary_releases=int(self._restricts_topic_words(n_features)),
            preliminary_share=self.totals_share,
        )
        if not self._is_private:
            self.clip_norm_ = math.inf
        elif self.clip_norm is None:
            self.clip_norm_ = DEFAULT_CLIP_FRACTION * self.doc_length
        else:
            self.clip_norm_ = float(self.clip_norm)
        self.totals_noise_multiplier_ = self._engine.plan.preliminary_noise_multiplier

    def _topic_word_count(self):
        """``n_topic_words`` with "auto" resolved (None: every word)."""
        if self.n_topic_words == "auto":
            # Only a budget planned from epsilon takes the totals' release:
            # a given noise_multiplier is every release's, and one topic is
            # the word totals themselves.
            planned = self.noise_multiplier is None and not math.isinf(self.epsilon)
            return _AUTO_TOPIC_WORDS if planned and self.n_components > 1 else None
        return self.n_topic_words

    def _restricts_topic_words(self, n_features):
        """Whether the topics model fewer words than there are (a first release)."""
        n_topic_words = self._topic_word_count()
        return (
            n_topic_words is not None
            and n_features is not None
            and n_topic_words < n_features
        )

    def _release_word_totals(self, X, executor):
        """The preliminary release: the word totals, and the words the topics model.

        Every document is resampled and clipped as in the topics' releases
        (with one topic its statistic is its counts) and the sum over all
        documents is released once, with the plan's preliminary noise. Returns
        the denoised totals (post-processing as one topic's at the end of a
        fit, see ``_pooled_topics``) and the sorted indices of the
        ``n_topic_words`` largest.
        """
        batch = X
        if self._is_private:
            batch = _resample_documents(X, self.doc_length, self._engine.generator())
        _, counts, _ = _e_step(
            batch,
            np.ones((1, X.shape[1])),
            1.0,
            self.max_doc_update_iter,
            self.mean_change_tol,
            self.clip_norm_,
            True,
            effective_n_jobs(self.n_jobs),
            executor,
        )
        (released,) = self._engine.release(
            [counts], [self.clip_norm_], preliminary=True
        )
        totals = released[0]
        if self._is_private:
            # One topic's post-processing at the end of a fit (_pooled_topics):
            # the totals denoised by empirical Bayes.
            (noise_std,) = self._engine.noise_scales([self.clip_norm_], preliminary=True)
            totals = _deconvolved_totals(totals, noise_std)
        # A stable sort: ties (words of one group of the denoising) keep the
        # column order.
        largest = np.argsort(-totals, kind="stable")[: self._topic_word_count()]
        return totals, np.sort(largest)

    def _spread_over_all_words(self, totals):
        """Topics over every word: outside ``topic_words_``, the totals' shape.

        Each topic keeps its parameters on the words it models and gives the
        others the mass the totals give them relative to those words, shared
        in proportion to the totals: all topics agree on the other words.
        """
        n_topics = self.components_.shape[0]
        others = np.ones(totals.size, dtype=bool)
        others[self.topic_words_] = False
        modelled_total = totals[self.topic_words_].sum()
        components = np.empty((n_topics, totals.size))
        components[:, self.topic_words_] = self.components_
        spread = 0.0
        if modelled_total > 0:
            spread = (
                self.components_.sum(axis=1, keepdims=True)
                * totals[others]
                / modelled_total
            )
        # No parameter below the prior (a word absent from the totals).
        components[:, others] = np.maximum(spread, self.topic_word_prior_)
        self.components_ = components
        self.exp_dirichlet_component_ = np.exp(_dirichlet_expectation_2d(components))

    def _init_latent_vars(self, n_features):
        """Initial topics, drawn without looking at the data."""
        self.random_state_ = check_random_state(self.random_state)
        self.n_batch_iter_ = 1
        self.n_iter_ = 0
        self.doc_topic_prior_ = (
            1.0 / self.n_components
            if self.doc_topic_prior is None
            else float(self.doc_topic_prior)
        )
        self.topic_word_prior_ = (
            1.0 / self.n_components
            if self.topic_word_prior is None
            else float(self.topic_word_prior)
        )
        init_gamma = 100.0
        self.components_ = self.random_state_.gamma(
            init_gamma, 1.0 / init_gamma, (self.n_components, n_features)
        )
        self.exp_dirichlet_component_ = np.exp(
            _dirichlet_expectation_2d(self.components_)
        )
        # The unfloored running average of floor_negatives="running_average"
        # (a post-processing of the noisy releases, kept for partial_fit).
        self._noisy_components = self.components_.copy()
        self._noise_var = 0.0
        # The mean of the released word totals (the counts' row), kept over
        # every release, and the sum of the releases' noise variances.
        self._unigram_mean = np.zeros(n_features)
        self._unigram_var_sum = 0.0
        self._n_unigram = 0

    # Training ---------------------------------------------------------------

    def _to_working_precision(self):
        """Continue in float64 from attributes left in the input's dtype."""
        self.components_ = np.asarray(self.components_, dtype=np.float64)
        self.exp_dirichlet_component_ = np.asarray(
            self.exp_dirichlet_component_, dtype=np.float64
        )

    def _to_input_dtype(self):
        """Fitted arrays in the dtype of the training input (float32 or float64)."""
        dtype = getattr(self, "_dtype", np.float64)
        self.components_ = self.components_.astype(dtype, copy=False)
        self.exp_dirichlet_component_ = self.exp_dirichlet_component_.astype(
            dtype, copy=False
        )

    # Training ---------------------------------------------------------------

    def _em_step(self, X, executor, rows=None):
        """One iteration on the corpus ``X``: sample, E-step, release, M-step.

        ``rows`` (non-private online fits only) is scikit-learn's next
        consecutive mini-batch; otherwise the batch is the engine's Poisson
        sample.
        """
        n_documents = X.shape[0]
        sample_rate = self._sample_rate(self._batch_size(n_documents), n_documents)
        private = self._is_private
        if rows is None:
            batch = X[self._engine.sample(n_documents, sample_rate)]
            # The expected batch size is a constant: dividing by it (not by
            # the drawn size) keeps the sensitivity at clip_norm / batch_size.
            batch_scale = sample_rate * n_documents
        else:
            batch = X[rows]
            batch_scale = batch.shape[0]
        if private:
            # From the release's secret stream: how far a stored stream
            # advanced would count the non-empty documents of the batch.
            batch = _resample_documents(
                batch, self.doc_length, self._engine.generator()
            )
        unigram_weight = self._unigram_weight()
        doc_topic_distr, suff_stats, _ = _e_step(
            batch,
            self.exp_dirichlet_component_,
            self.doc_topic_prior_,
            self.max_doc_update_iter,
            self.mean_change_tol,
            self.clip_norm_,
            True,
            effective_n_jobs(self.n_jobs),
            executor,
            unigram_weight=unigram_weight,
        )
        (mean_stats,) = self._engine.release(
            [suff_stats / batch_scale],
            [self.clip_norm_ / batch_scale],
            sample_rate=sample_rate,
        )

        if self.learning_method == "batch":
            weight = 1.0
        else:
            weight = (self.learning_offset + self.n_batch_iter_) ** (
                -self.learning_decay
            )
        if private and self.floor_negatives == "pooled":
            # Post-processing (see Notes): the running average of the raw
            # releases (zero-mean noise of known variance per entry, and what
            # remains of the random start); the
            # word totals pool the noise of the topics, the topics split them.
            (noise_std,) = self._engine.noise_scales([self.clip_norm_ / batch_scale])
            noise_std *= n_documents
            self._noise_var = (1.0 - weight) ** 2 * self._noise_var + (
                weight * noise_std
            ) ** 2
            n_topics = self.components_.shape[0]
            self._noisy_components *= 1.0 - weight
            self._noisy_components += weight * (n_documents * mean_stats[:n_topics])
            if unigram_weight > 0:
                # Every release estimates the same word totals (up to the
                # clipping): their plain mean, whose noise falls as one over
                # the number of releases.
                self._n_unigram += 1
                released = n_documents * mean_stats[n_topics] / unigram_weight
                self._unigram_mean += (released - self._unigram_mean) / self._n_unigram
                self._unigram_var_sum += (noise_std / unigram_weight) ** 2
            self.components_ = self._pooled_components()
        elif private and self.floor_negatives == "running_average":
            # Post-processing: average the raw releases, then floor the
            # average at the prior, as no posterior parameter is below it.
            self._noisy_components *= 1.0 - weight
            self._noisy_components += weight * (
                self.topic_word_prior_ + n_documents * mean_stats
            )
            self.components_ = np.maximum(
                self._noisy_components, self.topic_word_prior_
            )
        else:
            if private:
                # Post-processing: expected counts are non-negative.
                np.maximum(mean_stats, 0.0, out=mean_stats)
            self.components_ *= 1.0 - weight
            self.components_ += weight * (
                self.topic_word_prior_ + n_documents * mean_stats
            )
        self.exp_dirichlet_component_ = np.exp(
            _dirichlet_expectation_2d(self.components_)
        )
        self.n_batch_iter_ += 1

    def _pooled_components(self, deconvolve=False):
        """The topics from the running averages of the releases (post-processing).

        The word totals are the topics' own, combined by inverse variance
        with the mean of the counts' rows when the releases carry them;
        ``deconvolve`` denoises them by empirical Bayes (done once, at the
        end of a fit: the iterations' E-steps do as well with the cheaper
        floor).
        """
        totals = totals_std = None
        if self._n_unigram:
            unigram_var = self._unigram_var_sum / self._n_unigram**2
            pooled_var = self._noisy_components.shape[0] * self._noise_var
            totals_var = 1.0 / (1.0 / unigram_var + 1.0 / pooled_var)
            totals = totals_var * (
                self._unigram_mean / unigram_var
                + self._noisy_components.sum(axis=0) / pooled_var
            )
            totals_std = math.sqrt(totals_var)
        return _pooled_topics(
            self._noisy_components,
            math.sqrt(self._noise_var),
            self.topic_word_prior_,
            totals,
            totals_std,
            deconvolve=deconvolve,
        )

    def _denoise_released_topics(self):
        """End of a private fit: the topics with their word totals deconvolved."""
        if (
            self._is_private
            and self.floor_negatives == "pooled"
            and self.noise_multiplier_ > 0
            and self.n_batch_iter_ > 1
        ):
            self.components_ = self._pooled_components(deconvolve=True)
            self.exp_dirichlet_component_ = np.exp(
                _dirichlet_expectation_2d(self.components_)
            )

    def _unigram_weight(self):
        """Weight of the counts' row in each release (0: no such row)."""
        if (
            not self._is_private
            or self.noise_multiplier_ == 0
            or self.floor_negatives != "pooled"
            or self.components_.shape[0] == 1
        ):
            # Without noise, or with one topic, the topics' rows already
            # hold exact totals.
            return 0.0
        return float(self.counts_weight)

    def _make_pass_progress(self):
        """Progress per pass, in the shared format, naming the perplexity."""
        return self._make_progress(self.max_iter, objective_name="perplexity")

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, **fit_params):
        """Learn the topics from the documents ``X``, spending the privacy budget.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Document-word counts: non-negative integers (float arrays with
            integral values are accepted) when private; any non-negative
            weights (for example tf-idf) when not. Empty documents contribute
            nothing.
        y : Ignored
            Not used, present for API consistency by convention.
        **fit_params : dict
            None accepted: ``sample_weight`` raises a TypeError saying why.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._refuse_fit_params(fit_params)
        private = self._is_private
        if private and self.evaluate_every > 0:
            warnings.warn(
                f"evaluate_every={self.evaluate_every} is ignored by a private fit: "
                "the training perplexity is computed from the documents without "
                "noise. Score held-out documents with perplexity() instead.",
                UserWarning,
            )
        X = self._check_counts(X, reset=True, integer=private)
        n_documents, n_features = X.shape
        self._start(n_documents, n_features=n_features)
        restricted = self._restricts_topic_words(n_features)
        self.n_documents_ = n_documents
        # Without privacy, online learning takes scikit-learn's consecutive
        # mini-batches (every document once per pass); private fits need the
        # engine's secret Poisson batches for the accountant's amplification.
        sequential = not private and self.learning_method == "online"
        if sequential:
            batch_size = self._batch_size(n_documents) or n_documents
            slices = list(gen_batches(n_documents, batch_size))
            steps_per_pass = len(slices)
        else:
            steps_per_pass = self._releases_per_pass(self.sample_rate_)
        n_jobs = effective_n_jobs(self.n_jobs)
        with ThreadPoolExecutor(max_workers=n_jobs) as executor:
            X_topics = X
            if restricted:
                totals, self.topic_words_ = self._release_word_totals(X, executor)
                X_topics = X[:, self.topic_words_]
            else:
                self.topic_words_ = np.arange(n_features)
            self._init_latent_vars(X_topics.shape[1])
            progress = self._make_pass_progress()
            for n_pass in range(1, self.max_iter + 1):
                for step in range(steps_per_pass):
                    self._em_step(
                        X_topics, executor, rows=slices[step] if sequential else None
                    )
                    progress.update_within(
                        n_pass,
                        step + 1,
                        steps_per_pass,
                        epsilon_spent=lambda: self._engine.spent[0],
                        step_unit="release" if private else "batch",
                    )
                evaluate = (
                    not private
                    and self.evaluate_every > 0
                    and n_pass % self.evaluate_every == 0
                )
                # Of the words the topics model, until they are spread over all.
                progress.update(
                    n_pass,
                    objective=(
                        self._perplexity_precomp_distr(X_topics) if evaluate else None
                    ),
                    epsilon_spent=lambda: self._engine.spent[0],
                )
                self.n_iter_ += 1
        progress.close()
        self._denoise_released_topics()
        if restricted:
            self._spread_over_all_words(totals)
        if not private:
            # The training perplexity, as scikit-learn stores it; a private
            # fit does not store it (it is computed from X without noise).
            self.bound_ = self._perplexity_precomp_distr(X)
        self._to_input_dtype()
        return self

    def _check_partial_fit(self):
        # Hidden, as scikit-learn's MLP hides partial_fit from solvers without
        # it: hasattr(model, "partial_fit") is then False.
        # "auto" is every word in partial_fit
        if self.n_topic_words not in (None, "auto"):
            raise AttributeError(
                "partial_fit cannot choose the topics' words: n_topic_words needs "
                "the word totals of the whole corpus, released before the topics. "
                "Use fit, or n_topic_words=None or 'auto' (every word in partial_fit)."
            )
        return True

    @available_if(_check_partial_fit)
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None):
        """Take one iteration on the corpus ``X``, spending cumulatively.

        Each call draws one Poisson batch from ``X`` (rate ``batch_size /
        n_samples``; every document with ``learning_method="batch"``) and
        releases one noisy statistic: one accountant step. The first call
        (when not fitted) calibrates the noise for ``max_iter`` passes over
        ``X``. Before ``X`` is read, the call checks that the step keeps the
        total within ``epsilon``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The whole (private) corpus, as document-word counts.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self : object
            The estimator.

        Raises
        ------
        PrivacyBudgetExceededError
            If this step would take the epsilon spent beyond ``epsilon``; the
            estimator and its accountant are left unchanged.
        """
        first_time = not hasattr(self, "components_")
        n_documents = _num_samples(X)
        if first_time:
            self._start(n_documents, reserve=1)
        else:
            if self.topic_words_.size != self.n_features_in_:
                raise ValueError(
                    "This model's topics cover only the words of its word totals' "
                    "release (fitted with n_topic_words below the vocabulary, as "
                    "n_topic_words='auto' does in a private fit): partial_fit cannot "
                    "continue it. Call fit to start a new model, or fit with "
                    "n_topic_words=None to continue it with partial_fit."
                )
            self._check_plan_unchanged(self.noise_multiplier)
            self._engine.check_next(
                self._sample_rate(self._batch_size(n_documents), n_documents)
            )
        X = self._check_counts(X, reset=first_time, integer=self._is_private)
        if first_time:
            self.topic_words_ = np.arange(X.shape[1])
            self._init_latent_vars(X.shape[1])
        else:
            self._to_working_precision()
        self.n_documents_ = n_documents
        n_jobs = effective_n_jobs(self.n_jobs)
        with ThreadPoolExecutor(max_workers=n_jobs) as executor:
            self._em_step(X, executor)
        self._denoise_released_topics()
        self._to_input_dtype()
        self._show_partial_fit_release()
        return self

    # Inference on new documents ---------------------------------------------

    def _unnormalized_transform(self, X):
        doc_topic_distr, _, _ = _e_step(
            X,
            np.asarray(self.exp_dirichlet_component_, dtype=np.float64),
            self.doc_topic_prior_,
            self.max_doc_update_iter,
            self.mean_change_tol,
            math.inf,
            False,
            effective_n_jobs(self.n_jobs),
        )
        return doc_topic_distr

    def transform(self, X, *, normalize=True):
        """Document-topic distributions of ``X`` under the fitted topics.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Document-word counts (or non-negative weights).
        normalize : bool, default=True
            Whether to normalise each row to sum to 1 (else the variational
            Dirichlet parameters are returned).

        Returns
        -------
        doc_topic_distr : ndarray of shape (n_samples, n_components)
            The document-topic distributions, float32 for float32 input.
        """
        check_is_fitted(self)
        dtype = np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64
        X = self._check_counts(X, reset=False)
        doc_topic_distr = self._unnormalized_transform(X)
        if normalize:
            doc_topic_distr /= doc_topic_distr.sum(axis=1)[:, np.newaxis]
        return doc_topic_distr.astype(dtype, copy=False)

    def fit_transform(self, X, y=None, *, normalize=True):
        """Fit to ``X``, then return its document-topic distributions.

        The distributions are computed after training by :meth:`transform`,
        from the private topics: they are outputs for the holder of ``X``, not
        stored in the estimator.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Document-word counts.
        y : Ignored
            Not used, present for API consistency by convention.
        normalize : bool, default=True
            Whether to normalise each row to sum to 1.

        Returns
        -------
        doc_topic_distr : ndarray of shape (n_samples, n_components)
            The document-topic distributions.
        """
        return self.fit(X, y).transform(X, normalize=normalize)

    def _approx_bound(
        self, X, doc_topic_distr, include_topic_word_bound=False, doc_ratio=1.0
    ):
        """The variational lower bound of log p(X), as scikit-learn's LDA computes it.

        The document part is E[log p(words, theta | beta)] - E[log q(theta)]
        summed over the documents (times ``doc_ratio``); the topic-word part
        is E[log p(beta | eta) - log q(beta | lambda)], included when asked.
        """
        components = np.asarray(self.components_, dtype=np.float64)
        dirichlet_doc_topic = _dirichlet_expectation_2d(doc_topic_distr)
        dirichlet_component = _dirichlet_expectation_2d(components)
        indptr, indices, data = _csr_arrays(X)
        score = _lda_kernels.doc_log_likelihood_bound(
            indptr,
            indices,
            data,
            0,
            X.shape[0],
            np.ascontiguousarray(dirichlet_doc_topic),
            np.ascontiguousarray(dirichlet_component.T),
        )
        score += _dirichlet_bound_term(
            self.doc_topic_prior_,
            doc_topic_distr,
            dirichlet_doc_topic,
            self.n_components,
        )
        score *= doc_ratio
        if include_topic_word_bound:
            score += _dirichlet_bound_term(
                self.topic_word_prior_,
                components,
                dirichlet_component,
                components.shape[1],
            )
        return score

    def score(
        self,
        X,
        y=None,
        *,
        include_topic_word_bound=False,
        method="bound",
        n_draws=100,
        random_state=None,
    ):
        """Approximate log-likelihood of ``X`` (higher is better).

        The document-only variational bound by default; with
        ``include_topic_word_bound=True`` the bound of scikit-learn's
        ``LatentDirichletAllocation.score``; with ``method="importance"`` an
        importance-sampling estimate of the log-likelihood itself (see
        :meth:`perplexity`).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Document-word counts.
        y : Ignored
            Not used, present for API consistency by convention.
        include_topic_word_bound : bool, default=False
            Whether to add the topic-word term E[log p(beta) - log q(beta)]
            (bound only).
        method : {"bound", "importance"}, default="bound"
            The variational bound, or the importance-sampling estimate of
            ``sum_d log p(w_d | topics)`` described in :meth:`perplexity`.
        n_draws : int, default=100
            Draws of each document's topic proportions (``method="importance"``).
        random_state : int, RandomState instance or None, default=None
            Seeds the draws (``method="importance"``).

        Returns
        -------
        score : float
            The bound, or the estimate.
        """
        check_is_fitted(self)
        _check_score_method(method, n_draws, include_topic_word_bound)
        X = self._check_counts(X, reset=False)
        if method == "importance":
            return self._importance_log_likelihood(X, n_draws, random_state)
        return self._approx_bound(
            X,
            self._unnormalized_transform(X),
            include_topic_word_bound=include_topic_word_bound,
        )

    def _importance_log_likelihood(self, X, n_draws, random_state):
        """sum_d log p(w_d | topics at their posterior mean), by importance sampling.

        The proposal of document d is the mixture of its variational posterior
        Dirichlet(gamma_d) and the prior Dirichlet(alpha) in the proportions of
        the draws taken from each: the prior keeps the weights bounded where
        the posterior is too narrow. Documents without words score 0.
        """
        rng = check_random_state(random_state)
        components = np.asarray(self.components_, dtype=np.float64)
        topic_word_t = np.ascontiguousarray(
            (components / components.sum(axis=1, keepdims=True)).T
        )
        prior = np.full(self.n_components, float(self.doc_topic_prior_))
        posterior = self._unnormalized_transform(X)
        n_from_posterior = (n_draws + 1) // 2
        indptr, indices, data = _csr_arrays(X)
        has_words = np.diff(indptr) > 0
        n_rows = max(1, _IMPORTANCE_BLOCK_ENTRIES // (n_draws * self.n_components))
        total = 0.0
        for start in range(0, X.shape[0], n_rows):
            stop = min(start + n_rows, X.shape[0])
            # (number of draws, concentration of shape (rows, 1, K)) of each
            # component of the proposal
            proposals = [
                (n_from_posterior, posterior[start:stop, np.newaxis, :]),
                (
                    n_draws - n_from_posterior,
                    np.broadcast_to(prior, (stop - start, 1, prior.size)),
                ),
            ]
            proposals = [(n, c) for n, c in proposals if n > 0]
            log_theta = np.concatenate(
                [_log_dirichlet_draws(c[:, 0, :], n, rng) for n, c in proposals],
                axis=1,
            )
            log_proposal = logsumexp(
                [
                    math.log(n / n_draws) + _log_dirichlet_density(log_theta, c)
                    for n, c in proposals
                ],
                axis=0,
            )
            log_likelihood = np.empty(log_theta.shape[:2])
            _lda_kernels.doc_log_likelihood_draws(
                indptr,
                indices,
                data,
                start,
                np.exp(log_theta),
                topic_word_t,
                log_likelihood,
            )
            log_weights = (
                log_likelihood + _log_dirichlet_density(log_theta, prior) - log_proposal
            )
            per_document = logsumexp(log_weights, axis=1) - math.log(n_draws)
            total += per_document[has_words[start:stop]].sum()
        return float(total)

    def _perplexity_precomp_distr(
        self,
        X,
        doc_topic_distr=None,
        sub_sampling=False,
        include_topic_word_bound=False,
    ):
        """Perplexity of the validated ``X`` given its ``doc_topic_distr``."""
        if doc_topic_distr is None:
            doc_topic_distr = self._unnormalized_transform(X)
        else:
            n_samples, n_components = doc_topic_distr.shape
            if n_samples != _num_samples(X):
                raise ValueError(
                    "Number of samples in X and doc_topic_distr do not match."
                )
            if n_components != self.n_components:
                raise ValueError("Number of topics does not match.")
        doc_ratio = self.n_documents_ / X.shape[0] if sub_sampling else 1.0
        bound = self._approx_bound(
            X,
            doc_topic_distr,
            include_topic_word_bound=include_topic_word_bound,
            doc_ratio=doc_ratio,
        )
        word_count = X.sum() * doc_ratio
        if word_count == 0:
            # No word to predict: the perplexity is undefined.
            return math.nan
        return math.exp(-bound / word_count)

    def perplexity(
        self,
        X,
        sub_sampling=False,
        *,
        include_topic_word_bound=False,
        method="bound",
        n_draws=100,
        random_state=None,
    ):
        """Approximate perplexity of ``X``: exp(-bound / number of words).

        With ``method="importance"``, exp(-L / number of words) where ``L``
        estimates the log-likelihood of the words of ``X`` given the topics at
        their posterior mean (``components_`` normalised), each document's
        topic proportions integrated over their Dirichlet prior by importance
        sampling (Wallach et al. 2009): half of the ``n_draws`` draws come from
        the document's variational posterior, half from the prior, and each
        document scores the log of the mean importance weight. The variational
        bound charges each document the KL divergence of its topic
        proportions and the topics' uncertainty, which grow with the number of
        topics: it can rank a topic model below a unigram model that predicts
        the held-out words worse. The estimate is not biased that way; by
        Jensen's inequality it errs low in expectation (the perplexity high),
        less so with more draws.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Document-word counts.
        sub_sampling : bool, default=False
            Treat ``X`` as a sample of a corpus of ``n_documents_`` documents
            (the training corpus's size): the document part of the bound and
            the word count are scaled by ``n_documents_ / n_samples``. Only
            the topic-word term is affected (the document-only perplexity is
            the same).
        include_topic_word_bound : bool, default=False
            Whether the bound includes the topic-word term, as scikit-learn's
            ``perplexity`` does (its value is then scikit-learn's). The
            default, the document-only bound, does not charge the model's own
            KL term to the words of ``X``: see the Notes of the class.
        method : {"bound", "importance"}, default="bound"
            The variational bound, or the importance-sampling estimate of the
            log-likelihood.
        n_draws : int, default=100
            Draws of each document's topic proportions (``method="importance"``).
        random_state : int, RandomState instance or None, default=None
            Seeds the draws (``method="importance"``).

        Returns
        -------
        perplexity : float
            The perplexity (lower is better).
        """
        check_is_fitted(self)
        _check_score_method(method, n_draws, include_topic_word_bound)
        X = self._check_counts(X, reset=False)
        if method == "importance":
            word_count = X.sum()
            if word_count == 0:
                return math.nan
            log_likelihood = self._importance_log_likelihood(X, n_draws, random_state)
            return math.exp(-log_likelihood / word_count)
        return self._perplexity_precomp_distr(
            X,
            sub_sampling=sub_sampling,
            include_topic_word_bound=include_topic_word_bound,
        )

    @property
    def _n_features_out(self):
        """Number of transformed output features."""
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
