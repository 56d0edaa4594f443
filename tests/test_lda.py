"""Tests of DPLDA and its kernels."""

import math
import pickle
import re
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import special, stats
from scipy.optimize import linear_sum_assignment
from sklearn.base import clone
from sklearn.decomposition import LatentDirichletAllocation
from sklearn.decomposition._lda import _update_doc_distribution
from sklearn.model_selection import GridSearchCV

from skprivfact import _lda_kernels, lda, privacy
from skprivfact.accounting import RDPAccountant
from skprivfact.datasets import get_data_home
from skprivfact.exceptions import PrivacyBudgetExceededError
from skprivfact.lda import DPLDA
from skprivfact.mechanisms import clip_frobenius
from skprivfact.privacy import PrivacyEngine
from skprivfact.utils._testing import ReleaseSpy

INF = float("inf")


def _exact_norm_at_most(values, max_norm):
    """Whether the Euclidean norm of ``values`` is <= max_norm, exactly."""
    return sum(Fraction(float(v)) ** 2 for v in values) <= Fraction(max_norm) ** 2


def make_lda_corpus(
    n_documents,
    n_words,
    n_topics,
    mean_length=60,
    seed=0,
    topic_word_concentration=0.1,
    doc_topic_concentration=0.2,
):
    """Documents drawn from LDA (no empty row) and the true topics."""
    rng = np.random.RandomState(seed)
    topics = rng.dirichlet(np.full(n_words, topic_word_concentration), size=n_topics)
    proportions = rng.dirichlet(
        np.full(n_topics, doc_topic_concentration), size=n_documents
    )
    lengths = np.maximum(rng.poisson(mean_length, size=n_documents), 1)
    probabilities = proportions @ topics
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    counts = np.vstack([rng.multinomial(n, p) for n, p in zip(lengths, probabilities)])
    return sp.csr_matrix(counts.astype(np.float64)), topics


def mean_topic_distance(estimated, true):
    """Mean total-variation distance between matched topics (Hungarian matching)."""
    estimated = estimated / estimated.sum(axis=1, keepdims=True)
    distances = 0.5 * np.abs(estimated[:, None, :] - true[None, :, :]).sum(axis=2)
    rows, cols = linear_sum_assignment(distances)
    return distances[rows, cols].mean()


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(3000, 60, 4, seed=0)


# Kernels -----------------------------------------------------------------


def test_digamma_matches_scipy():
    x = np.concatenate([np.geomspace(1e-8, 1e-5, 7), np.geomspace(1e-5, 1e6, 300)])
    ours = np.array([_lda_kernels.digamma(value) for value in x])
    np.testing.assert_allclose(ours, special.psi(x), rtol=1e-9, atol=1e-12)


def random_topics(n_topics, n_words, seed):
    rng = np.random.RandomState(seed)
    components = rng.gamma(1.0, 1.0, size=(n_topics, n_words)) + 0.1
    return np.exp(lda._dirichlet_expectation_2d(components))


def run_e_step(
    X, exp_topic_word, clip_norm=INF, n_jobs=1, prior=0.2, tol=1e-3, n_iter=100
):
    return lda._e_step(
        sp.csr_matrix(X, dtype=np.float64),
        exp_topic_word,
        prior,
        n_iter,
        tol,
        clip_norm,
        True,
        n_jobs,
    )


def test_e_step_matches_scikit_learn(corpus):
    X = corpus[0][:300]
    exp_topic_word = random_topics(4, X.shape[1], seed=1)
    # A fixed number of rounds: with a tolerance, rounding differences in the
    # sums could stop the two at different rounds.
    doc_topic, suff_stats, n_clipped = run_e_step(X, exp_topic_word, tol=0.0, n_iter=30)
    expected_doc_topic, expected_stats = _update_doc_distribution(
        X, exp_topic_word, 0.2, 30, 0.0, True, None
    )
    # scikit-learn's digamma drops the x**-8 term of the series (relative
    # error about 1e-9 at x = 6); ours keeps it, hence the tolerance.
    np.testing.assert_allclose(doc_topic, expected_doc_topic, rtol=1e-6)
    np.testing.assert_allclose(suff_stats, expected_stats * exp_topic_word, rtol=1e-6)
    assert n_clipped == 0
    # Each document's statistic sums to its length, so the total is the corpus size.
    assert suff_stats.sum() == pytest.approx(X.sum(), rel=1e-10)


def test_e_step_does_not_depend_on_the_number_of_threads(corpus):
    X = corpus[0][:500]
    exp_topic_word = random_topics(4, X.shape[1], seed=2)
    one = run_e_step(X, exp_topic_word, clip_norm=5.0, n_jobs=1)
    two = run_e_step(X, exp_topic_word, clip_norm=5.0, n_jobs=2)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_allclose(one[1], two[1], rtol=1e-12)
    assert one[2] == two[2] > 0


def per_document_statistics(X, exp_topic_word, clip_norm):
    """Each document's (clipped) contribution, from the E-step run on it alone."""
    return [run_e_step(X[[d]], exp_topic_word, clip_norm)[1] for d in range(X.shape[0])]


def adversarial_documents(n_words, doc_length):
    rows = [
        np.eye(n_words)[0] * doc_length,  # one word repeated doc_length times
        np.zeros(n_words),  # empty after vocabulary filtering
        np.eye(n_words)[n_words - 1] * 3.0,  # one word, short
        np.full(n_words, doc_length // n_words),  # every word equally
    ]
    rng = np.random.RandomState(3)
    rows += [
        rng.multinomial(doc_length, rng.dirichlet(np.full(n_words, 0.05)))
        for _ in range(30)
    ]
    return sp.csr_matrix(np.array(rows, dtype=np.float64))


@pytest.mark.parametrize("clip_norm", [0.5, 3.0, 10.0, 49.999999999999])
def test_clipped_contribution_never_exceeds_clip_norm(clip_norm):
    doc_length, n_words, n_topics = 50, 12, 3
    X = adversarial_documents(n_words, doc_length)
    exp_topic_word = random_topics(n_topics, n_words, seed=4)
    clipped = per_document_statistics(X, exp_topic_word, clip_norm)
    unclipped = per_document_statistics(X, exp_topic_word, INF)
    reference = clip_frobenius(np.array(unclipped), clip_norm)
    for d, (ours, raw) in enumerate(zip(clipped, unclipped)):
        # Exact rational arithmetic: the bound holds for the floats returned.
        assert _exact_norm_at_most(ours.ravel(), clip_norm), d
        np.testing.assert_allclose(ours, reference[d], rtol=1e-12, atol=1e-300)
        if np.linalg.norm(raw) <= clip_norm * (1 - 1e-9):
            np.testing.assert_array_equal(ours, raw)
    assert np.all(clipped[1] == 0)  # the empty document contributes nothing
    # The repeated word: every token on one word, so its norm is at least
    # doc_length / sqrt(n_topics); clipped onto the sphere when beyond it.
    raw_norm = np.linalg.norm(unclipped[0])
    assert raw_norm >= doc_length / math.sqrt(n_topics)
    assert np.linalg.norm(clipped[0]) == pytest.approx(
        min(raw_norm, clip_norm), rel=1e-12
    )


@pytest.mark.parametrize("weight", [1.0, 8.0])
@pytest.mark.parametrize("clip_norm", [0.5, 10.0, INF])
def test_counts_row_is_clipped_jointly_with_the_topics(clip_norm, weight):
    doc_length, n_words, n_topics = 50, 12, 3
    X = adversarial_documents(n_words, doc_length)
    exp_topic_word = random_topics(n_topics, n_words, seed=4)
    for d in range(X.shape[0]):
        doc = X[[d]]
        _, with_counts, _ = lda._e_step(
            doc, exp_topic_word, 0.2, 100, 1e-3, clip_norm, True, 1,
            unigram_weight=weight,
        )
        _, topics_only, _ = run_e_step(doc, exp_topic_word, INF)
        assert with_counts.shape == (n_topics + 1, n_words)
        # One norm over the topics' rows and the counts' row together.
        if clip_norm < INF:
            assert _exact_norm_at_most(with_counts.ravel(), clip_norm), d
        # Both parts scaled by the same factor: the counts' row stays the
        # weight times the sum of the topics' rows, the document's weighted
        # counts times that factor.
        np.testing.assert_allclose(
            with_counts[-1], weight * with_counts[:-1].sum(axis=0), rtol=1e-12,
            atol=1e-300,
        )
        raw = np.vstack([topics_only, weight * doc.toarray()])
        scale = min(1.0, clip_norm / np.linalg.norm(raw)) if raw.any() else 1.0
        np.testing.assert_allclose(with_counts, scale * raw, rtol=1e-9, atol=1e-300)


def test_clip_kernel_certifies_boundary_and_tiny_blocks():
    for block, max_norm in [
        (np.array([[3.0, 4.0]]), 5.0),  # exactly on the sphere
        (np.full((40, 7), 1e-160), 1e-200),
        (np.full((3, 2), 1e200), 1.0),
        (np.array([[0.1, 0.2], [0.3, 0.4]]), np.nextafter(math.sqrt(0.3), 0.0)),
    ]:
        stats_copy = block.copy()
        _lda_kernels.clip_frobenius_inplace(stats_copy, block.shape[0], max_norm)
        assert _exact_norm_at_most(stats_copy.ravel(), max_norm)
        np.testing.assert_allclose(
            stats_copy, clip_frobenius(block[None], max_norm)[0], rtol=1e-12
        )


def _with_topics(topics, doc_topic_prior):
    """A DPLDA holding the given topics (rows of word probabilities)."""
    model = DPLDA(topics.shape[0], epsilon=INF, batch_size=1)
    model.n_features_in_ = topics.shape[1]
    model.components_ = np.asarray(topics, dtype=np.float64) * 1e6
    model.exp_dirichlet_component_ = np.exp(
        lda._dirichlet_expectation_2d(model.components_)
    )
    model.doc_topic_prior_ = doc_topic_prior
    model.topic_word_prior_ = 1.0
    return model


def test_importance_likelihood_of_one_topic_is_the_unigram_likelihood(corpus):
    X, _ = corpus
    unigram = DPLDA(1, epsilon=INF, batch_size=None).fit(X)
    probabilities = unigram.components_[0] / unigram.components_[0].sum()
    exact = np.asarray(X.sum(axis=0)).ravel() @ np.log(probabilities)
    # One topic: every draw of the proportions is 1, each weight is exact.
    for n_draws, seed in [(1, 0), (3, 1), (50, 2)]:
        assert unigram.score(
            X, method="importance", n_draws=n_draws, random_state=seed
        ) == pytest.approx(exact, rel=1e-12)
    assert unigram.perplexity(X, method="importance") == pytest.approx(
        math.exp(-exact / X.sum()), rel=1e-12
    )


def test_importance_likelihood_agrees_with_numerical_integration():
    from scipy.integrate import quad

    topics = np.array([[0.5, 0.3, 0.1, 0.1], [0.05, 0.05, 0.3, 0.6]])
    alpha = 0.7
    model = _with_topics(topics, alpha)
    documents = np.array([[2, 1, 0, 0], [0, 0, 1, 3], [1, 1, 1, 1], [0, 5, 0, 0]])
    for counts in documents:
        # p(w) = int prod_w (t beta_1w + (1 - t) beta_2w)^n_w Beta(t | alpha, alpha) dt
        def integrand(t, counts=counts):
            mixture = t * topics[0] + (1 - t) * topics[1]
            return np.prod(mixture**counts) * stats.beta.pdf(t, alpha, alpha)

        exact = math.log(quad(integrand, 0, 1, points=[0.5], limit=200)[0])
        estimate = model.score(
            sp.csr_matrix(counts[np.newaxis].astype(float)),
            method="importance",
            n_draws=200000,
            random_state=0,
        )
        assert estimate == pytest.approx(exact, abs=2e-3)
        # The bound (document part, at E[log beta] ~ log beta here) is below.
        assert model.score(sp.csr_matrix(counts[np.newaxis].astype(float))) < exact


def test_importance_likelihood_errs_low_and_tightens_with_draws():
    topics = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7]])
    model = _with_topics(topics, 0.3)
    document = sp.csr_matrix(np.array([[3.0, 0.0, 1.0, 2.0]]))
    reference = model.score(document, method="importance", n_draws=200000, random_state=0)
    few = [
        model.score(document, method="importance", n_draws=2, random_state=seed)
        for seed in range(400)
    ]
    many = [
        model.score(document, method="importance", n_draws=100, random_state=seed)
        for seed in range(400)
    ]
    # The log of an unbiased mean errs low on average (Jensen), less with
    # more draws.
    assert np.mean(few) < np.mean(many) < reference + 1e-3
    assert np.std(many) < np.std(few)


def test_importance_likelihood_arguments_and_edge_cases(corpus):
    X, _ = corpus
    model = DPLDA(3, epsilon=INF, batch_size=500, random_state=0).fit(X[:1000])
    kwargs = {"method": "importance", "n_draws": 20, "random_state": 3}
    assert model.score(X[:50], **kwargs) == model.score(X[:50], **kwargs)
    assert model.perplexity(X[:50], **kwargs) == pytest.approx(
        math.exp(-model.score(X[:50], **kwargs) / X[:50].sum()), rel=1e-12
    )
    # Documents without words have nothing to predict.
    empty = sp.csr_matrix((3, X.shape[1]))
    assert model.score(empty, **kwargs) == 0.0
    assert math.isnan(model.perplexity(empty, **kwargs))
    with pytest.raises(ValueError, match="method must be 'bound' or 'importance'"):
        model.score(X, method="exact")
    with pytest.raises(ValueError, match="n_draws must be an integer >= 1"):
        model.perplexity(X, method="importance", n_draws=0)
    with pytest.raises(ValueError, match="applies to the bound"):
        model.perplexity(X, method="importance", include_topic_word_bound=True)


SOTU_COUNTS = get_data_home() / "sotu" / "sotu_counts_csr.npz"


@pytest.mark.skipif(not SOTU_COUNTS.exists(), reason="../shared/data/sotu absent")
def test_bound_ranks_topics_below_a_unigram_the_likelihood_ranks_above():
    # SOTU paragraphs (about 24 words): the bound charges each paragraph the
    # KL term of its topic proportions, so it ranks ten topics below the
    # unigram; the held-out likelihood ranks them above.
    X = sp.load_npz(SOTU_COUNTS).astype(np.float64).tocsr()
    order = np.random.RandomState(0).permutation(X.shape[0])
    train, test = X[order[1000:5000]], X[order[:1000]]
    topics = DPLDA(10, epsilon=INF, batch_size=400, max_iter=2, random_state=0).fit(
        train
    )
    unigram = DPLDA(1, epsilon=INF, batch_size=None).fit(train)
    assert topics.perplexity(test) > 1.05 * unigram.perplexity(test)
    importance = {"method": "importance", "random_state": 0}
    assert topics.perplexity(test, **importance) < 0.95 * unigram.perplexity(
        test, **importance
    )


def test_bound_matches_scikit_learn_perplexity(corpus):
    X, _ = corpus
    reference = LatentDirichletAllocation(
        4, learning_method="online", batch_size=200, max_iter=2, random_state=0
    ).fit(X)
    ours = DPLDA(4, epsilon=INF, batch_size=200, random_state=0).fit(X)
    # Put scikit-learn's topics into our estimator: the bounds must agree.
    ours.components_ = reference.components_
    ours.exp_dirichlet_component_ = reference.exp_dirichlet_component_
    full = {"include_topic_word_bound": True}
    assert ours.perplexity(X, **full) == pytest.approx(
        reference.perplexity(X), rel=1e-9
    )
    assert ours.score(X, **full) == pytest.approx(reference.score(X), rel=1e-9)
    # The default, document-only bound leaves out a negative KL term, and
    # perplexity and score agree on it.
    assert ours.perplexity(X) < ours.perplexity(X, **full)
    assert ours.perplexity(X) == pytest.approx(math.exp(-ours.score(X) / X.sum()))
    # sub_sampling scales the document part and the word count alike: only
    # the topic-word term changes.
    assert ours.perplexity(X, sub_sampling=True) == pytest.approx(ours.perplexity(X))
    half = X[: X.shape[0] // 2]
    assert ours.perplexity(half, sub_sampling=True, **full) < ours.perplexity(
        half, **full
    )


# Resampling --------------------------------------------------------------


def test_resampling_gives_exact_lengths_and_multinomial_counts():
    doc = np.array([[0.0, 1.0, 0.0, 3.0, 6.0]])
    X = sp.csr_matrix(np.vstack([doc] * 4000 + [np.zeros((1, 5)), [[0, 0, 0, 0, 7.0]]]))
    doc_length = 20
    resampled = lda._resample_documents(
        X, doc_length, np.random.default_rng(0)
    ).toarray()
    np.testing.assert_array_equal(resampled[:4000].sum(axis=1), doc_length)
    assert np.all(resampled[:, [0, 2]] == 0)  # only words of the document
    np.testing.assert_array_equal(resampled[4000], 0)  # empty stays empty
    np.testing.assert_array_equal(resampled[4001], [0, 0, 0, 0, doc_length])
    # Pooled tokens follow the document's word frequencies.
    observed = resampled[:4000, [1, 3, 4]].sum(axis=0)
    expected = 4000 * doc_length * np.array([0.1, 0.3, 0.6])
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # Counts of one word follow Binomial(doc_length, 0.3).
    histogram = np.bincount(resampled[:4000, 3].astype(int), minlength=doc_length + 1)
    probabilities = stats.binom.pmf(np.arange(doc_length + 1), doc_length, 0.3)
    keep = probabilities * 4000 >= 5
    expected_counts = np.append(probabilities[keep], probabilities[~keep].sum()) * 4000
    observed_counts = np.append(histogram[keep], histogram[~keep].sum())
    assert stats.chisquare(observed_counts, expected_counts).pvalue > 1e-3


# Privacy -----------------------------------------------------------------


def test_pooled_topics_floor_each_word_total_once():
    noise_std, prior = 2.0, 0.1
    average = np.array(
        [
            [50.0, -3.0, 1.0, 0.0],
            [-1.0, -3.0, 1.0, 0.0],
            [-1.0, -3.0, 1.0, 40.0],
        ]
    )
    topics = lda._pooled_topics(average, noise_std, prior)
    smoothing = 0.5 * math.sqrt(3) * noise_std
    # Each word's mass is its total over the topics floored at zero once,
    # plus half the noise std of that total (sqrt(K) noise_std).
    expected_totals = np.maximum(average.sum(axis=0), 0.0) + smoothing
    np.testing.assert_allclose((topics - prior).sum(axis=0), expected_totals)
    # A word with no signal (negative total, entries all floored) is shared
    # evenly; a word held by one topic goes mostly to it, in proportion to
    # the floored entries plus the noise std.
    np.testing.assert_allclose(topics[:, 1], prior + smoothing / 3)
    np.testing.assert_allclose(topics[:, 2], topics[0, 2])
    np.testing.assert_allclose(
        topics[:, 0] - prior, expected_totals[0] * np.array([52.0, 2.0, 2.0]) / 56.0
    )
    assert topics[2, 3] > 0.9 * (topics[:, 3] - prior).sum()


def test_deconvolved_totals_approach_the_posterior_means_under_the_true_prior():
    # True totals from a known prior (most words rare, a few frequent), with
    # Gaussian noise: the empirical-Bayes posterior means, learned from the
    # released totals alone, approach those under the true prior, and are
    # much closer to the truth than the floored totals.
    rng = np.random.RandomState(0)
    noise_std = 10.0
    support = np.array([0.0, 5.0, 20.0, 60.0, 400.0])
    weights = np.array([0.5, 0.25, 0.15, 0.08, 0.02])
    truth = rng.choice(support, p=weights, size=40_000)
    released = truth + noise_std * rng.standard_normal(truth.size)
    denoised = lda._deconvolved_totals(released, noise_std)
    likelihood = stats.norm.pdf(released[:, None], support, noise_std) * weights
    oracle = likelihood @ support / likelihood.sum(axis=1)
    small = released < lda._DECONVOLUTION_RANGE * noise_std
    distance = np.abs(denoised - oracle)[small]
    assert np.mean(distance) < 0.03 * noise_std
    assert np.max(distance) < 0.3 * noise_std
    # Below the range, its squared error is within 2% of the Bayes risk,
    # and less than half that of the floored (and smoothed) totals.
    error = np.mean((denoised - truth)[small] ** 2)
    assert error < 1.02 * np.mean((oracle - truth)[small] ** 2)
    floored = np.maximum(released, 0) + lda._SMOOTHING * noise_std
    assert error < 0.5 * np.mean((floored - truth)[small] ** 2)
    # Large totals keep their values; the posterior mean rises with the
    # released total and is never negative.
    np.testing.assert_array_equal(denoised[~small], released[~small])
    order = np.argsort(released[small])
    assert np.all(np.diff(denoised[small][order]) >= -1e-9 * noise_std)
    assert denoised.min() >= 0.0
    # No noise: the floor at zero.
    np.testing.assert_array_equal(
        lda._deconvolved_totals(np.array([-1.0, 2.0]), 0.0), [0.0, 2.0]
    )


def test_deconvolved_totals_are_continuous_at_the_range():
    # Zipf-shaped totals (in noise stds): the prior is fitted beyond the range
    # of the totals it replaces, so those just below it are not pulled down
    # (a prior fitted below the range only lacked the true totals that noise
    # pushed above it: a bias of -0.75 noise std there), and the denoised
    # value does not jump at the range.
    rng = np.random.default_rng(0)
    truth = 3000.0 / np.arange(1, 20_001)
    errors, jumps = [], []
    for _ in range(20):
        released = truth + rng.standard_normal(truth.size)
        denoised = lda._deconvolved_totals(
            np.concatenate([released, [29.999, 30.0]]), 1.0
        )
        near = (released >= 28.5) & (released < 30.0)
        errors.append(denoised[:-2][near] - truth[near])
        jumps.append(denoised[-1] - denoised[-2])
    assert abs(np.mean(np.concatenate(errors))) < 0.3
    assert np.max(np.abs(jumps)) < 0.01


def test_a_private_fit_ends_with_its_word_totals_deconvolved(corpus):
    # The one-topic model's parameters are the prior plus the deconvolved
    # released totals; the iterations before the last use the floor.
    X, _ = corpus
    model = DPLDA(1, epsilon=2.0, batch_size=None, max_iter=2, n_topic_words=None).fit(X)
    # The running average of the raw releases, and its noise std.
    average = model._noisy_components[0]
    noise_std = math.sqrt(model._noise_var)
    np.testing.assert_allclose(
        model.components_[0],
        model.topic_word_prior_ + lda._deconvolved_totals(average, noise_std),
        rtol=1e-10,
    )
    floored = lda._pooled_topics(average[None, :], noise_std, model.topic_word_prior_)
    assert not np.allclose(model.components_[0], floored[0])


def test_pooled_noise_variance_follows_the_step_sizes(corpus):
    X, _ = corpus
    est = DPLDA(
        4,
        epsilon=INF,
        noise_multiplier=1.5,
        batch_size=500,
        max_iter=2,
        learning_offset=3.0,
        random_state=0,
    ).fit(X)
    # Public quantities only: N sigma C / B per release, averaged with rho_t.
    release_std = X.shape[0] * 1.5 * est.clip_norm_ / 500
    variance = 0.0
    for t in range(1, est.n_releases_ + 1):
        rho = (3.0 + t) ** -0.7
        variance = (1 - rho) ** 2 * variance + (rho * release_std) ** 2
    assert est._noise_var == pytest.approx(variance, rel=1e-12)


def test_given_noise_multiplier_is_used_and_reported(corpus):
    X, _ = corpus
    est = DPLDA(
        4, epsilon=INF, noise_multiplier=0.8, batch_size=300, random_state=0
    ).fit(X)
    assert est.noise_multiplier_ == 0.8
    expected = (
        RDPAccountant(neighbouring_relation="substitution")
        .compose(0.8, 0.1, 10)
        .get_epsilon(1e-5)
    )
    assert est.privacy_spent_[0] == pytest.approx(expected, rel=1e-12)
    # A finite epsilon caps a given multiplier: refused before any release.
    with pytest.raises(PrivacyBudgetExceededError, match="beyond the budget"):
        DPLDA(4, epsilon=expected / 2, noise_multiplier=0.8, batch_size=300).fit(X)


def test_partial_fit_spends_cumulatively_and_stops_before_the_budget(corpus):
    X, _ = corpus
    est = DPLDA(4, epsilon=0.5, batch_size=600, max_iter=1, random_state=0)
    spent = []
    while True:
        try:
            est.partial_fit(X)
        except PrivacyBudgetExceededError:
            break
        spent.append(est.privacy_spent_[0])
        assert len(est.accountant_.history) == len(spent)
        assert len(spent) < 50
    # Calibrated for one pass of 5 iterations; each call spends more.
    assert len(spent) >= 5
    assert np.all(np.diff(spent) > 0)
    assert spent[-1] <= 0.5
    # Refused before reading the data: invalid data gives the budget error,
    # and nothing changes.
    components = est.components_.copy()
    bad = X.toarray()
    bad[0, 0] = -1
    with pytest.raises(
        PrivacyBudgetExceededError, match="beyond the budget epsilon = 0.5"
    ):
        est.partial_fit(bad)
    np.testing.assert_array_equal(est.components_, components)
    assert len(est.accountant_.history) == len(spent)


def test_partial_fit_accounts_each_release_at_its_own_batch_rate():
    # Each call samples its own documents at batch_size / n_documents of
    # that call: a smaller corpus is sampled (and accounted) at a higher
    # rate, which a plan-rate accountant would under-count.
    X = np.random.RandomState(0).poisson(2.0, size=(100, 8))
    est = DPLDA(2, epsilon=50.0, batch_size=10, doc_length=20, clip_norm=1.0,
                max_doc_update_iter=3, max_iter=1)
    est.partial_fit(X)
    est.partial_fit(X[:20])
    assert [rate for _, rate, _ in est.accountant_.history] == [0.1, 0.5]


def test_partial_fit_refuses_a_first_step_beyond_the_budget(corpus):
    X, _ = corpus
    est = DPLDA(4, epsilon=0.01, noise_multiplier=0.5, batch_size=600, random_state=0)
    with pytest.raises(PrivacyBudgetExceededError, match="beyond the budget epsilon"):
        est.partial_fit(X)
    assert not hasattr(est, "components_") and not hasattr(est, "accountant_")


def test_infinite_epsilon_runs_without_noise_or_resampling(corpus, monkeypatch):
    X, _ = corpus

    def forbidden(*args, **kwargs):
        raise AssertionError("called without privacy")

    monkeypatch.setattr(privacy, "gaussian_mechanism", forbidden)
    monkeypatch.setattr(lda, "_resample_documents", forbidden)
    est = DPLDA(4, epsilon=INF, batch_size=300, random_state=0).fit(X)
    assert est.privacy_spent_ == (INF, 1e-5)
    assert est.noise_multiplier_ == 0.0 and est.clip_norm_ == INF
    # partial_fit has no budget to exceed.
    for _ in range(3):
        est.partial_fit(X)


def test_no_per_document_parameter_is_stored(corpus):
    X, _ = corpus
    fitted = DPLDA(4, epsilon=1.0, batch_size=300, random_state=0)
    fitted.fit_transform(X)
    partially_fitted = DPLDA(4, epsilon=1.0, batch_size=300, random_state=0)
    partially_fitted.partial_fit(X[:2000])
    for est in (fitted, partially_fitted):
        for name, value in vars(est).items():
            if isinstance(value, np.ndarray):
                # Only topic-word arrays and word totals: nothing per document.
                assert value.shape in ((4, 60), (60,)), name


def test_non_private_fit_matches_scikit_learn_held_out(corpus):
    X, _ = corpus
    train, test = X[:2700], X[2700:]
    kwargs = {
        "batch_size": 100,
        "max_iter": 3,
        "learning_offset": 10.0,
        "random_state": 0,
    }
    reference = LatentDirichletAllocation(4, learning_method="online", **kwargs).fit(
        train
    )
    ours = DPLDA(4, epsilon=INF, **kwargs).fit(train)
    # The same bound on both: put scikit-learn's topics in a copy of ours.
    reference_as_ours = clone(ours).fit(train)
    reference_as_ours.components_ = reference.components_
    reference_as_ours.exp_dirichlet_component_ = reference.exp_dirichlet_component_
    for full in (True, False):
        assert ours.perplexity(test, include_topic_word_bound=full) == pytest.approx(
            reference_as_ours.perplexity(test, include_topic_word_bound=full), rel=0.03
        )


@pytest.mark.parametrize(
    "floor_negatives", ["pooled", "per_iteration", "running_average"]
)
def test_private_fit_recovers_topics(floor_negatives):
    X, topics = make_lda_corpus(20000, 40, 3, mean_length=60, seed=5)
    # With the default doc_topic_prior (1 / 3) and the documents resampled
    # to doc_length, stochastic VI merges two topics in a good part of the
    # random streams (batches, resampling, initial topics), with or without
    # noise: a local optimum, not the privacy noise. A flat prior on the
    # proportions avoids it, so the test measures what the noise costs.
    private = DPLDA(
        3,
        epsilon=2.0,
        batch_size=1000,
        max_iter=5,
        doc_length=60,
        doc_topic_prior=1.0,
        floor_negatives=floor_negatives,
        random_state=0,
    ).fit(X)
    assert private.neighbouring_relation_ == "substitution"
    assert private.n_releases_ == 5 * 20
    assert private.privacy_spent_[0] <= 2.0
    # No posterior parameter below the prior: the floor of both variants.
    assert private.components_.min() >= private.topic_word_prior_ * (1 - 1e-12)
    baseline = np.full_like(topics, 1.0 / topics.shape[1])
    assert mean_topic_distance(baseline, topics) > 0.5
    assert mean_topic_distance(private.components_, topics) < 0.08


def test_released_word_totals_take_the_private_fit_below_the_unigram_floor():
    # Long documents over a large vocabulary at epsilon = 1: the word totals
    # summed over K noisy topic rows are far noisier than those of a private
    # unigram (n_components=1) spending the same budget on one release, and
    # the topics then do not reliably beat that unigram on held-out words.
    # The counts' row released with the topics gives back precise totals.
    # Its weight shares each release's norm: these topics are strong, and a
    # weight of 8 leaves them too little of it.
    X, _ = make_lda_corpus(3500, 1000, 5, mean_length=100, seed=0)
    train, test = X[:3000], X[3000:]

    def held_out(n_components, **params):
        return np.array(
            [
                DPLDA(
                    n_components,
                    epsilon=1.0,
                    doc_length=100,
                    random_state=seed,
                    **params,
                )
                .fit(train)
                .perplexity(test)
                for seed in range(3)
            ]
        )

    floor = held_out(1, batch_size=None, max_iter=1)
    topics = held_out(5, batch_size=300, max_iter=2)
    without_counts = held_out(5, batch_size=300, max_iter=2, counts_weight=0.0)
    heavy_counts = held_out(5, batch_size=300, max_iter=2, counts_weight=8.0)
    assert np.all(topics < floor)
    assert np.all(topics < without_counts)
    assert topics.max() < heavy_counts.min()


def test_short_documents_need_a_heavy_counts_row():
    # Paragraph-length documents of weak topics at epsilon = 1: the word
    # totals set the held-out likelihood, and a counts' row of weight 8 keeps
    # them nearly as precise as the unigram's, which weight 1 does not.
    X, _ = make_lda_corpus(
        4400, 2000, 10, topic_word_concentration=0.2, doc_topic_concentration=1.0,
        mean_length=20, seed=0,
    )
    train, test = X[:4000], X[4000:]

    def held_out(counts_weight):
        return np.array(
            [
                DPLDA(
                    10, epsilon=1.0, counts_weight=counts_weight, n_topic_words=None,
                    batch_size=2000, max_iter=2, random_state=seed,
                )
                .fit(train)
                .perplexity(test, method="importance", random_state=0)
                for seed in range(5)
            ]
        )

    # Means of 5 fits each: about 1850 and 1880, and with noise that is not
    # replayed (the suite replays it from one seed) their spread is about 4.
    assert held_out(8.0).mean() < held_out(1.0).mean() - 10.0


def test_n_jobs_does_not_change_the_fit(corpus):
    X, _ = corpus
    fits = [
        DPLDA(4, epsilon=1.0, batch_size=500, n_jobs=n_jobs, random_state=0).fit(X)
        for n_jobs in (1, 2)
    ]
    np.testing.assert_allclose(fits[0].components_, fits[1].components_, rtol=1e-9)


def test_verbose_two_shows_progress_within_a_long_pass(capsys):
    # The default private fit is one pass of many releases: with verbose=2 a
    # line about every tenth of them, then the pass's line; verbose=1 too,
    # as it prints about ten lines in all.
    X = np.random.RandomState(0).poisson(1.0, size=(2000, 30))
    DPLDA(3, batch_size=50, max_iter=1, verbose=2, random_state=0).fit(X)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 10
    for k, line in enumerate(lines[:-1], start=1):
        assert re.fullmatch(
            rf"DPLDA: pass 1 of 1 \(release {4 * k} of 40\), "
            r"epsilon spent [\d.]+ of 1, elapsed [\d.]+ s, ETA ([\d.]+ s|\?)",
            line,
        ), line
    assert lines[-1].startswith("DPLDA: pass 1 of 1, epsilon spent 1 of 1")
    epsilons = [float(re.search(r"epsilon spent (\S+) of", line)[1]) for line in lines]
    assert np.all(np.diff(epsilons) > 0)
    DPLDA(3, batch_size=50, max_iter=1, verbose=1, random_state=0).fit(X)
    assert len(capsys.readouterr().out.strip().splitlines()) == 10
    # Five passes at verbose=1: two lines each (one within, the pass's own).
    DPLDA(3, batch_size=50, max_iter=5, verbose=1, random_state=0).fit(X)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 10
    assert [line for line in lines if "(release" not in line] == [
        line for line in lines if re.match(r"DPLDA: pass \d of 5, ", line)
    ]


def test_verbose_prints_progress(corpus, capsys):
    X, _ = corpus
    DPLDA(4, epsilon=1.0, batch_size=1000, max_iter=3, verbose=1, random_state=0).fit(X)
    # A line per pass, in the format every estimator shares (and lines within
    # the passes, tested above); no training perplexity unless evaluate_every
    # asks for it.
    lines = [
        line for line in capsys.readouterr().out.strip().splitlines() if "(release" not in line
    ]
    assert len(lines) == 3
    for i, line in enumerate(lines, start=1):
        assert re.fullmatch(
            rf"DPLDA: pass {i} of 3, "
            r"epsilon spent [\d.]+(e[+-]\d+)? of 1, elapsed [\d.]+ s, ETA ([\d.]+ s|\?)",
            line,
        ), line
    epsilons = [float(re.search(r"epsilon spent (\S+) of", line)[1]) for line in lines]
    assert epsilons[0] < epsilons[1] < epsilons[2] <= 1.0


def test_evaluate_every_and_bound_only_without_privacy(corpus, capsys):
    X, _ = corpus
    est = DPLDA(
        4,
        epsilon=INF,
        batch_size=1000,
        max_iter=2,
        evaluate_every=1,
        verbose=1,
        random_state=0,
    ).fit(X)
    lines = capsys.readouterr().out.strip().splitlines()
    values = [float(re.search(r"perplexity ([\d.]+)", line)[1]) for line in lines]
    assert len(values) == 2 and values[1] < values[0]
    assert est.bound_ == pytest.approx(est.perplexity(X))
    assert values[1] == pytest.approx(est.bound_, rel=1e-4)
    # A private fit never prints or stores the training perplexity (computed
    # without noise from the private documents), and says so.
    with pytest.warns(UserWarning, match="evaluate_every=1 is ignored by a private fit"):
        private = DPLDA(4, epsilon=1.0, batch_size=1000, max_iter=2, evaluate_every=1,
                        verbose=1).fit(X)
    assert not hasattr(private, "bound_")
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and not any("perplexity" in line for line in lines)


# API ---------------------------------------------------------------------


def test_transform_and_feature_names(corpus):
    X, _ = corpus
    est = DPLDA(4, batch_size=500, random_state=0)
    theta = est.fit_transform(X)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    unnormalized = est.transform(X[:5], normalize=False)
    np.testing.assert_allclose(
        unnormalized.sum(axis=1), X[:5].sum(axis=1).A1 + 4 * 0.25
    )
    assert list(est.get_feature_names_out()) == [f"dplda{k}" for k in range(4)]
    assert est.doc_topic_prior_ == est.topic_word_prior_ == 0.25


def test_pickle_clone_and_grid_search(corpus):
    X, _ = corpus
    est = DPLDA(4, batch_size=300, random_state=0).fit(X)
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.transform(X[:10]), est.transform(X[:10]))
    assert restored.accountant_.history == est.accountant_.history
    assert clone(est).get_params() == est.get_params()
    assert not hasattr(clone(est), "components_")

    search = GridSearchCV(
        DPLDA(4, batch_size=300, doc_length=60, random_state=0),
        {"epsilon": [0.05, 1.0, INF]},
        cv=3,
    ).fit(X)
    scores = search.cv_results_["mean_test_score"]
    assert scores[0] < scores[1] < scores[2]
    assert search.best_params_ == {"epsilon": INF}


@pytest.mark.parametrize(
    "params, X, message",
    [
        ({}, [[1, -27], [3, 4]], "Negative values"),
        ({}, [[1, 2.375], [3, 4]], "non-integer value"),
        (
            {"doc_length": 0},
            [[1, 2], [3, 4]],
            "'doc_length' parameter of DPLDA must be",
        ),
        ({"delta": 0.0}, [[1, 2], [3, 4]], "'delta' parameter of DPLDA must be"),
        ({"delta": 1.0}, [[1, 2], [3, 4]], "'delta' parameter of DPLDA must be"),
        ({"epsilon": -1.0}, [[1, 2], [3, 4]], "'epsilon' parameter of DPLDA must be"),
        (
            {"clip_norm": 0.0},
            [[1, 2], [3, 4]],
            "'clip_norm' parameter of DPLDA must be",
        ),
    ],
)
def test_bad_input(params, X, message):
    est = DPLDA(2, **{"batch_size": 1, **params})
    with pytest.raises(ValueError, match=message) as error:
        est.fit(X)
    # a record's value is not named: it may be private
    assert "27" not in str(error.value) and "2.375" not in str(error.value)
    if "parameter of DPLDA" not in message:
        with pytest.raises(ValueError, match=message):
            DPLDA(2, **{"batch_size": 1, **params}).partial_fit(X)


@pytest.mark.parametrize("epsilon", [INF, 1.0])
def test_empty_documents_are_accepted_and_contribute_nothing(corpus, epsilon):
    # Full batch (batch_size beyond the corpus): the same releases with and
    # without the empty rows, which draw no tokens in the resampling and add
    # nothing to the statistic; the noise is drawn alike (same stream, same
    # plan), so the topics agree up to rounding.
    X = corpus[0][:200]
    empty = sp.csr_matrix((5, X.shape[1]))
    padded_X = sp.vstack([empty[:2], X[:100], empty[2:], X[100:]]).tocsr()
    assert np.sum(np.diff(padded_X.indptr) == 0) == 5
    params = {"batch_size": 1000, "max_iter": 3, "random_state": 0, "epsilon": epsilon}
    plain = DPLDA(4, **params).fit(X)
    padded = DPLDA(4, **params).fit(padded_X)
    assert padded.sample_rate_ == plain.sample_rate_ == 1.0
    assert padded.noise_multiplier_ == plain.noise_multiplier_
    assert padded.accountant_.history == plain.accountant_.history
    np.testing.assert_allclose(padded.components_, plain.components_, rtol=1e-9)
    # partial_fit accepts them too, and so does transform.
    stepped = DPLDA(4, **params).partial_fit(padded_X)
    assert stepped.n_releases_ == 1
    theta = padded.transform(padded_X[:2])
    np.testing.assert_allclose(theta, 0.25)  # the prior's proportions
    # A corpus of empty documents only: nothing to learn, but a valid fit.
    DPLDA(4, **params).fit(empty)


def test_batch_size_beyond_the_corpus_uses_every_document(monkeypatch):
    batches = []
    original = PrivacyEngine.sample

    def sample(engine, n_samples, sample_rate=None):
        batch = original(engine, n_samples, sample_rate)
        batches.append(batch.copy())
        return batch

    monkeypatch.setattr(PrivacyEngine, "sample", sample)
    X = [[1, 2], [3, 4]]
    est = DPLDA(2, batch_size=3, max_iter=2, random_state=0).fit(X)
    assert est.sample_rate_ == 1.0
    assert est.n_releases_ == len(batches) == 2
    for batch in batches:
        np.testing.assert_array_equal(batch, [0, 1])
    assert est.accountant_.history == [(est.noise_multiplier_, 1.0, 1)] * 2
    # The same plan, hence the same fit, as batch_size = n_documents.
    same = DPLDA(2, batch_size=2, max_iter=2, random_state=0).fit(X)
    assert same.noise_multiplier_ == est.noise_multiplier_
    np.testing.assert_array_equal(same.components_, est.components_)
    batches.clear()
    stepped = DPLDA(2, batch_size=3, random_state=0).partial_fit(X)
    assert stepped.sample_rate_ == 1.0 and stepped.accountant_.history[0][1] == 1.0
    np.testing.assert_array_equal(batches[0], [0, 1])


def test_auto_batch_size_takes_a_twentieth_of_a_large_private_corpus(monkeypatch):
    # The plan's sampling rate is fixed before any document is read: record
    # the rates of the first release and stop there.
    rates = []

    def sample(engine, n_samples, sample_rate=None):
        rates.append((n_samples, sample_rate))
        raise StopIteration

    monkeypatch.setattr(PrivacyEngine, "sample", sample)
    for n_documents, expected in ((30_000, 0.05), (3000, 1000 / 3000), (500, 1.0)):
        X = sp.csr_matrix(np.ones((n_documents, 3)))
        for method in ("fit", "partial_fit"):
            est = DPLDA(2, epsilon=1.0, n_topic_words=None, random_state=0)
            rates.clear()
            with pytest.raises(StopIteration):
                getattr(est, method)(X)
            assert rates == [(n_documents, pytest.approx(expected))]
            assert est.sample_rate_ == pytest.approx(expected)
    # A given batch size is kept.
    X = sp.csr_matrix(np.ones((30_000, 3)))
    rates.clear()
    with pytest.raises(StopIteration):
        DPLDA(2, epsilon=1.0, batch_size=300, n_topic_words=None).fit(X)
    assert rates == [(30_000, pytest.approx(0.01))]
    monkeypatch.undo()
    # Later partial_fit calls release at the rate the first one planned.
    stepped = DPLDA(2, epsilon=1.0, n_topic_words=None, random_state=0)
    stepped.partial_fit(X).partial_fit(X)
    assert [step[1] for step in stepped.accountant_.history] == [0.05, 0.05]
    # Without privacy "auto" is scikit-learn's consecutive mini-batches of
    # 1000 documents, whatever the corpus.
    public = DPLDA(2, epsilon=INF, max_iter=1, random_state=0).fit(X)
    assert public.n_batch_iter_ == 1 + 30


def test_fractional_weights_without_privacy_only(corpus):
    X, _ = corpus
    tfidf = X.multiply(1.0 / np.log1p(np.asarray(X.sum(axis=0)) + 1.0)).tocsr()
    # Without noise, any non-negative weights, as LatentDirichletAllocation.
    est = DPLDA(4, epsilon=INF, batch_size=500, random_state=0).fit(tfidf)
    assert np.isfinite(est.perplexity(tfidf))
    # With noise, resampling draws tokens: integer counts only.
    for params in ({"epsilon": 1.0}, {"epsilon": INF, "noise_multiplier": 1.0}):
        with pytest.raises(ValueError, match="needs integer word counts"):
            DPLDA(4, batch_size=500, **params).fit(tfidf)
    # Inference on new documents releases nothing: weights are accepted.
    private = DPLDA(4, batch_size=500, random_state=0).fit(X)
    halves = private.transform(X[:3] * 0.5)
    assert halves.shape == (3, 4) and np.allclose(halves.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="features"):
        private.transform(X[:3, :10])


def test_float32_input_gives_float32_topics(corpus):
    X, _ = corpus
    est64 = DPLDA(4, batch_size=500, random_state=0).fit(X)
    est32 = DPLDA(4, batch_size=500, random_state=0).fit(X.astype(np.float32))
    assert est32.components_.dtype == np.float32
    assert est32.transform(X[:5].astype(np.float32)).dtype == np.float32
    # The same computation in float64, rounded at the end.
    np.testing.assert_allclose(est32.components_, est64.components_, rtol=1e-6)


# The common checks feed random floats; DPLDA models integer counts and
# rejects fractional values ("X must hold integer counts; found the
# non-integer value ..."), so every check below fails at that error before
# reaching what it tests. (The empty rows of the sparse checks' random
# matrices are no obstacle: empty documents are accepted and contribute
# nothing.) These are the entries for tests/test_common.py.
def test_duplicate_entries_are_merged_before_clipping():
    # The same word stored twice in a row: clipping must see one entry of 40.
    X = sp.csr_matrix(
        (np.array([20.0, 20.0, 1.0]), np.array([0, 0, 1]), np.array([0, 2, 3])),
        shape=(2, 3),
    )
    assert not X.has_canonical_format
    checked = DPLDA(2, batch_size=1).fit(X[[1]].toarray())._check_counts(X, reset=False)
    assert checked.has_canonical_format
    np.testing.assert_array_equal(checked.toarray(), [[40.0, 0, 0], [0, 1.0, 0]])
    assert X.nnz == 3  # the input is not modified


def test_resampling_very_long_documents():
    # Too many tokens for a token-to-entry table: the cumulative-count search.
    X = sp.csr_matrix(np.tile([[3e6, 0.0, 1e6]], (2000, 1)))
    resampled = lda._resample_documents(X, 20, np.random.default_rng(0)).toarray()
    np.testing.assert_array_equal(resampled.sum(axis=1), 20)
    assert np.all(resampled[:, 1] == 0)
    observed = resampled.sum(axis=0)[[0, 2]]
    assert stats.chisquare(observed, [30000, 10000]).pvalue > 1e-3


def test_resampling_keeps_each_documents_tokens_when_the_batch_total_overflows():
    # 2049 documents of 2**53 - 1 tokens on one word, each followed by an
    # ordinary one: the batch holds more than 2**64 tokens, beyond int64
    # cumulative counts. Every document must still get exactly doc_length
    # tokens, all drawn from its own words (a token handed to a neighbour
    # would let one document move another's clipped statistic).
    big, n_big = 2**53 - 1, 2049
    rows = np.zeros((2 * n_big, 6))
    rows[0::2][np.arange(n_big), np.arange(n_big) % 3] = big
    rows[1::2, 3:] = [1.0, 2.0, 3.0]
    X = sp.csr_matrix(rows)
    resampled = lda._resample_documents(X, 10, np.random.default_rng(0)).toarray()
    np.testing.assert_array_equal(resampled.sum(axis=1), 10)
    np.testing.assert_array_equal(resampled[0::2], 10 * (rows[0::2] > 0))
    assert np.all(resampled[1::2, :3] == 0)
    # The ordinary documents still follow their own word frequencies.
    observed = resampled[1::2, 3:].sum(axis=0)
    assert stats.chisquare(observed, n_big * 10 * np.array([1, 2, 3]) / 6).pvalue > 1e-3


def test_a_document_of_2_53_tokens_is_refused_before_any_release(monkeypatch):
    # One document of 2049 words of 2**53 - 1 tokens each (more than 2**64
    # in all): its cumulative counts would wrap in int64 and hand its tokens
    # to the other document.
    released = []
    monkeypatch.setattr(
        PrivacyEngine, "release", lambda *args, **kwargs: released.append(args)
    )
    big, n_words = 2**53 - 1, 2049
    X = np.zeros((2, n_words + 3))
    X[0, n_words:] = 1.0
    X[1, :n_words] = big
    with pytest.raises(ValueError, match=r"fewer than 2\*\*53 = 9007199254740992"):
        DPLDA(2, epsilon=1.0, batch_size=None, doc_length=10).fit(X)
    assert released == []


# Topics over the most frequent words ------------------------------------------


def test_topic_words_release_the_totals_first_then_topics_over_the_largest(
    corpus, monkeypatch
):
    X, _ = corpus
    recorder = ReleaseSpy(monkeypatch)
    # Documents kept as they are (not resampled), so that the clean release
    # can be computed here.
    monkeypatch.setattr(lda, "_resample_documents", lambda X, length, rng: X)
    model = DPLDA(
        4,
        epsilon=2.0,
        doc_length=60,
        batch_size=600,
        max_iter=2,
        n_topic_words=25,
        totals_share=0.6,
        random_state=0,
    ).fit(X)
    first, *rest = recorder.calls
    # One release of the word totals over every document: one (1, V) block,
    # the documents' counts (resampled, clipped to clip_norm_), its own noise.
    assert first["preliminary"] and not any(call["preliminary"] for call in rest)
    assert first["clean"][0].shape == (1, X.shape[1])
    assert first["sensitivities"] == [model.clip_norm_]
    counts = X.toarray()
    norms = np.linalg.norm(counts, axis=1, keepdims=True)
    clipped = counts * np.minimum(1.0, model.clip_norm_ / np.maximum(norms, 1e-300))
    np.testing.assert_allclose(first["clean"][0][0], clipped.sum(axis=0), rtol=1e-9)
    assert norms.max() > 2 * model.clip_norm_  # the clip is exercised
    # Then the planned topic releases over the 25 words whose released totals
    # are largest (post-processing of the first release).
    assert len(rest) == 2 * 5 == model.n_releases_ - 1
    assert model.topic_words_.shape == (25,)
    assert np.all(np.diff(model.topic_words_) > 0)
    released = first["noisy"][0][0]
    others = np.setdiff1d(np.arange(X.shape[1]), model.topic_words_)
    assert released[model.topic_words_].min() >= released[others].max()
    assert all(call["clean"][0].shape == (4 + 1, 25) for call in rest)
    # Its own multiplier: a share 0.6 of the budget, the rest calibrated to it.
    plan = model._engine.plan
    alone = privacy.plan_privacy(
        2.0, 1e-5, sample_rate=1.0, n_releases=1, neighbouring_relation="substitution"
    ).noise_multiplier
    assert plan.preliminary_noise_multiplier == pytest.approx(alone / math.sqrt(0.6))
    assert model.accountant_.history[0] == (plan.preliminary_noise_multiplier, 1.0, 1)
    assert model.accountant_.history[1:] == [
        (model.noise_multiplier_, model.sample_rate_, 1)
    ] * 10
    assert 1.9 < model.privacy_spent_[0] <= 2.0
    noise = first["noisy"][0] - first["clean"][0]
    expected = plan.preliminary_noise_multiplier * model.clip_norm_
    assert abs(np.std(noise) / expected - 1) < 6 / math.sqrt(2 * noise.size)
    # The topics cover every word; on the others they follow the released
    # totals (denoised by empirical Bayes), never the clean ones.
    assert model.components_.shape == (4, X.shape[1])
    totals = lda._deconvolved_totals(released, expected)
    topic_mass = model.components_[:, model.topic_words_].sum(axis=1, keepdims=True)
    np.testing.assert_allclose(
        model.components_[:, others],
        np.maximum(
            topic_mass * totals[others] / totals[model.topic_words_].sum(),
            model.topic_word_prior_,
        ),
        rtol=1e-12,
    )
    assert model.totals_noise_multiplier_ == plan.preliminary_noise_multiplier
    assert np.isfinite(model.perplexity(X[:100]))


def test_topics_agree_on_the_words_they_do_not_model(corpus):
    X, _ = corpus
    model = DPLDA(
        4, epsilon=float("inf"), batch_size=600, max_iter=2, n_topic_words=20,
        random_state=0,
    ).fit(X)
    totals = np.asarray(X.sum(axis=0)).ravel()
    # Without noise the modelled words are the 20 most frequent.
    np.testing.assert_array_equal(
        model.topic_words_, np.sort(np.argsort(-totals, kind="stable")[:20])
    )
    others = np.setdiff1d(np.arange(X.shape[1]), model.topic_words_)
    # Outside them every topic follows the word totals: it gives them the
    # totals' mass relative to the modelled words, never less than the prior
    # (a word absent from the corpus gets the prior in every topic).
    topic_mass = model.components_[:, model.topic_words_].sum(axis=1, keepdims=True)
    expected = np.maximum(
        topic_mass * totals[others] / totals[model.topic_words_].sum(),
        model.topic_word_prior_,
    )
    np.testing.assert_allclose(model.components_[:, others], expected, rtol=1e-12)
    assert np.any(totals[others] == 0) and np.any(expected > model.topic_word_prior_)
    # n_topic_words of at least the vocabulary is the usual fit.
    usual = DPLDA(4, epsilon=float("inf"), batch_size=600, max_iter=2, random_state=0)
    every = clone(usual).set_params(n_topic_words=X.shape[1]).fit(X)
    np.testing.assert_allclose(every.components_, usual.fit(X).components_)
    np.testing.assert_array_equal(every.topic_words_, np.arange(X.shape[1]))


def test_topic_words_need_fit_not_partial_fit():
    model = DPLDA(4, n_topic_words=10)
    assert not hasattr(model, "partial_fit")
    with pytest.raises(AttributeError, match="has no attribute 'partial_fit'") as raised:
        getattr(model, "partial_fit")  # noqa: B009 (the access is the test)
    # The reason is chained to the error.
    assert "n_topic_words needs the word totals" in str(raised.value.__cause__)
    assert hasattr(model.set_params(n_topic_words=None), "partial_fit")
    assert hasattr(model.set_params(n_topic_words="auto"), "partial_fit")


def test_auto_topic_words_are_a_thousand_in_private_fits_and_every_word_otherwise(
    monkeypatch,
):
    # The default: private fits of a larger vocabulary, planned from epsilon,
    # release the totals first and model the 1000 largest; without privacy,
    # with a given noise multiplier, with one topic, in partial_fit and for
    # a vocabulary of at most 1000 words, every word, as scikit-learn.
    rng = np.random.RandomState(0)
    X = sp.csr_matrix(rng.poisson(0.05, size=(60, 1200)))
    recorder = ReleaseSpy(monkeypatch)
    model = DPLDA(2, epsilon=1.0, batch_size=None, doc_length=20, random_state=0).fit(X)
    assert model.n_topic_words == "auto"
    assert recorder.calls[0]["preliminary"]
    assert recorder.calls[1]["clean"][0].shape == (3, 1000)
    assert model.topic_words_.size == 1000 and model.totals_noise_multiplier_ > 0
    # the totals' release is in the accountant's composition
    assert model.accountant_.history[0] == (model.totals_noise_multiplier_, 1.0, 1)
    assert 0.9 < model.privacy_spent_[0] <= 1.0
    recorder.calls.clear()
    DPLDA(2, epsilon=1.0, batch_size=None, doc_length=20).fit(X[:, :1000])
    assert not any(call["preliminary"] for call in recorder.calls)
    # one topic is the word totals themselves: one release, every word
    unigram = DPLDA(1, epsilon=1.0, batch_size=None, max_iter=1, doc_length=20).fit(X)
    assert not any(call["preliminary"] for call in recorder.calls)
    assert unigram.topic_words_.size == 1200
    recorder.calls.clear()
    online = DPLDA(2, epsilon=1.0, batch_size=30, doc_length=20).partial_fit(X)
    assert not recorder.calls[0]["preliminary"]
    assert online.topic_words_.size == 1200
    clean = DPLDA(2, epsilon=float("inf"), batch_size=30, random_state=0).fit(X)
    assert clean.topic_words_.size == 1200 and clean.totals_noise_multiplier_ == 0.0
    # a given noise_multiplier is every release's: no totals' release added
    recorder.calls.clear()
    given = DPLDA(2, epsilon=3.0, noise_multiplier=4.0, batch_size=None, doc_length=20).fit(X)
    assert not any(call["preliminary"] for call in recorder.calls)
    assert given.topic_words_.size == 1200 and given.n_releases_ == 1
    with pytest.raises(ValueError, match="n_topic_words"):
        DPLDA(2, n_topic_words="most").fit(X)


def test_topic_words_follow_the_vocabulary_size_not_the_data(monkeypatch):
    # Restricting is decided by the shape alone (public): here only 3 of the
    # 8 words occur, and 4 < 8 words still means a release of the totals.
    X = np.zeros((40, 8), dtype=int)
    X[:, :3] = np.random.RandomState(0).poisson(3.0, size=(40, 3))
    recorder = ReleaseSpy(monkeypatch)
    model = DPLDA(2, epsilon=1.0, batch_size=None, doc_length=10, n_topic_words=4)
    model.fit(X)
    assert recorder.calls[0]["preliminary"] and model.topic_words_.size == 4
    recorder.calls.clear()
    model.set_params(n_topic_words=8).fit(X)
    assert not any(call["preliminary"] for call in recorder.calls)
    assert model.totals_noise_multiplier_ == 0.0


def test_topic_words_with_a_given_noise_multiplier_of_zero_stay_finite(corpus):
    # Noise-free releases through the private code path: a word that never
    # occurs gets the prior, not 0 / 0.
    X, _ = corpus
    X = sp.hstack([X, sp.csr_matrix((X.shape[0], 1))]).tocsr()
    model = DPLDA(
        4, epsilon=float("inf"), noise_multiplier=0.0, doc_length=60,
        batch_size=600, n_topic_words=20, random_state=0,
    ).fit(X)
    assert np.all(np.isfinite(model.components_))
    np.testing.assert_array_equal(model.components_[:, -1], model.topic_word_prior_)


def test_partial_fit_does_not_continue_a_model_fitted_on_topic_words(corpus):
    X, _ = corpus
    model = DPLDA(
        4, epsilon=float("inf"), noise_multiplier=3.0, doc_length=60,
        batch_size=600, n_topic_words=20, random_state=0,
    ).fit(X)
    n_releases = model.n_releases_
    model.set_params(n_topic_words=None)
    with pytest.raises(ValueError, match="cannot continue it"):
        model.partial_fit(X)
    assert model.n_releases_ == n_releases
