"""numba kernels of :class:`~skprivfact.lda.DPLDA`: E-step, bound and held-out likelihood.

Each document's statistic is clipped inside the E-step with the shared kernel
:func:`skprivfact._clip_kernels.clip_frobenius_inplace`.

Every kernel works on one contiguous range of rows of a CSR matrix given by
its ``indptr``, ``indices`` and ``data`` arrays, releases the GIL and touches
no shared state except its own output rows and its own sufficient-statistics
buffer, so the estimator can run one kernel per thread on disjoint slices of a
batch (as scikit-learn's online LDA runs one E-step per joblib worker). No
kernel draws random numbers: results do not depend on the number of threads
beyond the order of the final sum of the per-thread buffers.

The topic-word matrices are passed transposed, of shape (n_features,
n_components), so that the topics of one word are contiguous in memory.
"""

import math

import numpy as np
from numba import njit

from ._clip_kernels import clip_frobenius_inplace

__all__ = [
    "digamma",
    "doc_log_likelihood_bound",
    "doc_log_likelihood_draws",
    "e_step",
]

# Added to every normaliser of the word-topic responsibilities, as
# scikit-learn does, so that a word no topic explains does not divide by zero.
_EPS = np.finfo(np.float64).eps
_EULER = 0.577215664901532860606512090082


@njit(cache=True, nogil=True)
def digamma(x):
    """The digamma function for x > 0 (recurrence, then asymptotic series)."""
    if x <= 1e-6:
        # psi(x) = -1/x - Euler's constant + O(x) near zero.
        return -_EULER - 1.0 / x
    result = 0.0
    while x < 6.0:
        result -= 1.0 / x
        x += 1.0
    inverse = 1.0 / x
    result += math.log(x) - 0.5 * inverse
    inverse_sq = inverse * inverse
    result -= inverse_sq * (
        1.0 / 12.0
        - inverse_sq
        * (
            1.0 / 120.0
            - inverse_sq
            * (1.0 / 252.0 - inverse_sq * (1.0 / 240.0 - inverse_sq / 132.0))
        )
    )
    return result


@njit(cache=True, nogil=True)
def _exp_dirichlet_expectation(doc_topic, out):
    """out[k] = exp(E[log theta_k]) for theta ~ Dirichlet(doc_topic)."""
    total = 0.0
    for k in range(doc_topic.shape[0]):
        total += doc_topic[k]
    psi_total = digamma(total)
    for k in range(doc_topic.shape[0]):
        out[k] = math.exp(digamma(doc_topic[k]) - psi_total)


@njit(cache=True, nogil=True)
def e_step(
    indptr,
    indices,
    data,
    row_start,
    row_stop,
    exp_topic_word_t,
    doc_topic_prior,
    max_doc_update_iter,
    mean_change_tol,
    clip_norm,
    compute_suff_stats,
    doc_topic_out,
    suff_stats_out,
    unigram_weight=0.0,
):
    """Variational E-step of LDA for rows ``row_start:row_stop`` of a CSR matrix.

    For each document, the topic proportions' Dirichlet parameters ``gamma_d``
    (started at 1) and the word-topic responsibilities
    ``phi_dwk`` proportional to ``exp(E[log theta_dk]) exp(E[log beta_kw])``
    are updated in turn until the mean absolute change of ``gamma_d`` falls
    below ``mean_change_tol`` (at most ``max_doc_update_iter`` rounds).

    With ``compute_suff_stats``, the document's sufficient statistic
    ``s_d[w, k] = n_dw phi_dwk`` (summing to the document's length) is clipped
    to Frobenius norm ``clip_norm`` (``np.inf``: no clipping) and added to
    ``suff_stats_out`` (shape (n_features, n_components), word-major). With
    ``unigram_weight > 0`` the statistic has one more column, the document's
    counts times ``unigram_weight``, clipped jointly with the topics' columns
    (one norm over all of them), and ``suff_stats_out`` has
    ``n_components + 1`` columns.

    Parameters
    ----------
    indptr, indices, data : ndarray
        The CSR arrays of the documents (int64, int32/int64, float64 counts).
    row_start, row_stop : int
        The rows handled by this call.
    exp_topic_word_t : ndarray of shape (n_features, n_components)
        ``exp(E[log beta])``, transposed.
    doc_topic_prior : float
        The Dirichlet prior of the topic proportions (alpha).
    max_doc_update_iter : int
        Maximum number of rounds per document.
    mean_change_tol : float
        Stopping tolerance on the mean absolute change of ``gamma_d``.
    clip_norm : float
        Bound on each document's statistic, or ``np.inf``.
    compute_suff_stats : bool
        Whether to accumulate the sufficient statistics.
    doc_topic_out : ndarray of shape (n_documents, n_components)
        Receives ``gamma_d`` in the rows handled.
    suff_stats_out : ndarray of shape (n_features, n_columns)
        Accumulates the clipped statistics (unused without
        ``compute_suff_stats``): ``n_columns`` is ``n_components``, plus one
        with ``unigram_weight``.
    unigram_weight : float, default=0.0
        Weight of the counts' column (0: no such column).

    Returns
    -------
    n_clipped : int
        Number of documents whose statistic was scaled down.
    """
    n_topics = exp_topic_word_t.shape[1]
    n_columns = n_topics + 1 if unigram_weight > 0.0 else n_topics
    max_words = 0
    for d in range(row_start, row_stop):
        max_words = max(max_words, indptr[d + 1] - indptr[d])
    topic_word_doc = np.empty((max_words, n_topics))
    stats = np.empty((max_words, n_columns))
    count_over_norm = np.empty(max_words)
    exp_doc_topic = np.empty(n_topics)
    last_doc_topic = np.empty(n_topics)
    n_clipped = 0

    for d in range(row_start, row_stop):
        start = indptr[d]
        n_words = indptr[d + 1] - start
        doc_topic = doc_topic_out[d]
        for k in range(n_topics):
            doc_topic[k] = 1.0
        _exp_dirichlet_expectation(doc_topic, exp_doc_topic)
        for j in range(n_words):
            word = indices[start + j]
            for k in range(n_topics):
                topic_word_doc[j, k] = exp_topic_word_t[word, k]

        for _ in range(max_doc_update_iter):
            for k in range(n_topics):
                last_doc_topic[k] = doc_topic[k]
                doc_topic[k] = 0.0
            for j in range(n_words):
                norm_phi = _EPS
                for k in range(n_topics):
                    norm_phi += exp_doc_topic[k] * topic_word_doc[j, k]
                ratio = data[start + j] / norm_phi
                for k in range(n_topics):
                    doc_topic[k] += ratio * topic_word_doc[j, k]
            for k in range(n_topics):
                doc_topic[k] = exp_doc_topic[k] * doc_topic[k] + doc_topic_prior
            _exp_dirichlet_expectation(doc_topic, exp_doc_topic)
            change = 0.0
            for k in range(n_topics):
                change += abs(doc_topic[k] - last_doc_topic[k])
            if change / n_topics < mean_change_tol:
                break

        if not compute_suff_stats or n_words == 0:
            continue
        for j in range(n_words):
            norm_phi = _EPS
            for k in range(n_topics):
                norm_phi += exp_doc_topic[k] * topic_word_doc[j, k]
            count_over_norm[j] = data[start + j] / norm_phi
        for j in range(n_words):
            for k in range(n_topics):
                stats[j, k] = (
                    count_over_norm[j] * exp_doc_topic[k] * topic_word_doc[j, k]
                )
            if n_columns > n_topics:
                stats[j, n_topics] = unigram_weight * data[start + j]
        if clip_frobenius_inplace(stats, n_words, clip_norm) < 1.0:
            n_clipped += 1
        for j in range(n_words):
            word = indices[start + j]
            for k in range(n_columns):
                suff_stats_out[word, k] += stats[j, k]
    return n_clipped


@njit(cache=True, nogil=True)
def doc_log_likelihood_bound(
    indptr,
    indices,
    data,
    row_start,
    row_stop,
    dirichlet_doc_topic,
    dirichlet_topic_word_t,
):
    """sum_d sum_w n_dw log sum_k exp(E[log theta_dk] + E[log beta_kw]).

    The data term of the variational bound (the expected log-likelihood of the
    words plus the entropy of the responsibilities, at their optimum), over
    rows ``row_start:row_stop``.
    """
    n_topics = dirichlet_topic_word_t.shape[1]
    total = 0.0
    for d in range(row_start, row_stop):
        for idx in range(indptr[d], indptr[d + 1]):
            word = indices[idx]
            largest = -np.inf
            for k in range(n_topics):
                value = dirichlet_doc_topic[d, k] + dirichlet_topic_word_t[word, k]
                largest = max(largest, value)
            acc = 0.0
            for k in range(n_topics):
                acc += math.exp(
                    dirichlet_doc_topic[d, k]
                    + dirichlet_topic_word_t[word, k]
                    - largest
                )
            total += data[idx] * (largest + math.log(acc))
    return total


@njit(cache=True, nogil=True)
def doc_log_likelihood_draws(
    indptr, indices, data, row_start, doc_topic_draws, topic_word_t, out
):
    """out[i, s] = sum_w n_dw log sum_k theta_sk beta_kw for d = row_start + i.

    ``doc_topic_draws[i, s]`` is the s-th draw of the topic proportions theta
    of document d, and ``topic_word_t`` holds the topics beta transposed
    (their entries are positive, so each mixture is).
    """
    n_rows, n_draws, n_topics = doc_topic_draws.shape
    for i in range(n_rows):
        d = row_start + i
        for s in range(n_draws):
            total = 0.0
            for idx in range(indptr[d], indptr[d + 1]):
                word = indices[idx]
                acc = 0.0
                for k in range(n_topics):
                    acc += doc_topic_draws[i, s, k] * topic_word_t[word, k]
                total += data[idx] * (math.log(acc) if acc > 0.0 else -np.inf)
            out[i, s] = total
