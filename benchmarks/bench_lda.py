"""Acceptance measurements of DPLDA, printed as tables.

1. KOS, 90/10 split of the documents, K = 20: held-out perplexity of the
   non-private DPLDA (epsilon=inf) against scikit-learn's online LDA with the
   same batch size and passes (scikit-learn-compatible bound and the
   document-only bound), over three seeds.
2. A synthetic LDA corpus of 100,000 training documents (V = 1000, K = 10,
   topic-word Dirichlet(0.05), doc-topic Dirichlet(0.1), lengths
   Poisson(100), seed 0) and 10,000 held-out ones: document-only held-out
   perplexity and topic recovery (Hungarian matching, mean total-variation
   distance) against epsilon, one pass; the same curve on KOS.
3. Seconds per pass over KOS: DPLDA with noise (epsilon=1) against
   scikit-learn's online LDA, same K, batch size and passes, medians of
   repeats in this process, BLAS limited to one thread; DPLDA with n_jobs=1
   and n_jobs=2.

4. ``agreement``: SOTU (4000 training / 1000 held-out paragraphs) and KOS
   (3087 / 343 documents), K = 10, batch 400, 2 passes: document-only
   held-out perplexity of the non-private DPLDA against scikit-learn's online
   LDA with the same settings, four seeds, ratio of the means.
5. ``floor``: the same splits, epsilon in {1, 2, 4}: DPLDA (K = 10; its
   default ``floor_negatives="pooled"`` releases the documents' counts as one
   more row, ``"per_iteration"``, VIPS, does not; its defaults release the
   word totals first and fit the topics over the 1000 most frequent words;
   and the setting the ``validation`` section chooses) against
   the private unigram floor, a model without topics spending the same
   budget through the same engine and accountant: one released word-count
   vector, ``DPLDA(n_components=1, batch_size=None, max_iter=1)``, scored by
   the same document-only perplexity; a unigram from the same Poisson
   batches as the chosen setting (its batch size and passes, the clipped
   counts of each batch released and their plain mean denoised as the
   floor's), to check that the floor's single release is not a weaker way to
   spend the budget on the totals than the chosen setting's batches; and a
   plug-in private unigram (rows
   clipped to L2 norm 2, one release, negatives set to 0, add-5 smoothing,
   exact held-out likelihood). The floor is also scored as K identical
   topics: the same word distribution, charged the topic proportions' KL
   term as DPLDA is (on SOTU's 20-word paragraphs that term alone takes the
   non-private unigram from 2406 to 5107). DPLDA and the floor are also
   scored by the held-out likelihood itself (``perplexity(X,
   method="importance")``: topics at their posterior mean, topic proportions
   integrated by importance sampling), which charges no KL term. Each
   DPLDA setting is fitted 9 times (its noise is secret, so every fit is a
   fresh draw; the floor's own spread from fit to fit is about 1% at
   epsilon 1). The bound is reported as the median of the fits against the
   floor's median; the likelihood as each fit's ratio to the floor's median
   (also of 9 fits), with their median, range and the number of fits at or
   below the floor.
6. ``validation``: the settings of ``floor``'s last row, chosen without the
   test split: 10% of the training documents (seed 1) are held out, and
   ``counts_weight`` in {1, 4, 8, 16} with batches of 1000 or 2000 and two
   passes (K = 10, topics over every word) is fitted 7 times on the rest at
   epsilon 1, 2 and 4 on both corpora and scored by the held-out likelihood
   against the floor's (median of 7 fits); the setting of lowest mean ratio
   over the six cells is chosen.
7. ``ceiling``: the same splits and epsilons: how far below the floor a
   model that splits the budget as DPLDA does could get if its topics cost
   nothing. Each word's shares among the topics are those of the
   non-private fit (K = 10, batch 400, 2 passes), exact; the word totals are
   one private release at a share s of the budget, the preliminary release
   of ``n_topic_words`` (multiplier: the floor's over ``sqrt(s)``, denoised
   as DPLDA denoises it), s in {0.5, 0.7, 0.85, 0.95}, and s = 1, the
   floor's own release. Held-out likelihood perplexity, median of 9 draws,
   as a ratio to the floor's median. A private fit at share s has noisy
   shares, and its topics' releases add to the totals of the words they
   model (the counts' row), so this is a reference for it, not a bound.
   At s = 1 the exact shares are also kept for the N words of largest
   released totals only, N in {300, 1000, 2000} (``top N``), every other
   word shared evenly among the topics (as DPLDA's pooled topics share a
   word whose entries are all noise): how much of the gain lies in the
   words frequent enough for a private release to place them.

8. ``batch``: DPLDA's default batch size against batches of 1000 on
   synthetic LDA corpora (as section 2's, lengths Poisson(100)) of 50,000,
   100,000 and 300,000 training documents and 10,000 held-out ones, K = 10,
   one pass, delta 1e-5 on 50,000 documents and 1e-7 on the larger corpora
   (well below one over their number), every other parameter at its
   default: the default ("auto") is a twentieth of the documents in a
   private fit. Topic recovery (mean total-variation distance after
   Hungarian matching) and document-only held-out perplexity at epsilon
   0.5, 1, 2 and 4, mean, least and largest of 4 fits (seeds 0-3 for the
   random start; the noise is secret).
9. ``topics``: the splits and epsilons of ``floor`` (SOTU and KOS, epsilon
   1, 2 and 4), the setting ``validation`` chooses: how much of each fit's
   held-out likelihood its topics give, as against its own word totals.
   Each fit is scored as fitted and again with its topics made identical
   (every topic the mean of the fitted ones: each word's total shared
   evenly, the fit's totals as a unigram), both as ratios to the floor's
   median (of as many fits), and the two are paired fit by fit. A fit's
   ratio to the floor moves with its draw of noise on the totals; the
   paired ratio isolates the topics. Also printed: the ratio of the
   geometric means of the fits and of the floors, with the difference of
   their mean log perplexities, its standard error (the two samples are
   independent) and their quotient.

    python benchmarks/bench_lda.py [kos] [synthetic] [kos_curve] [speed]
        [agreement] [floor] [validation] [ceiling] [batch] [topics]
        [--repeats N] [--corpus NAME]

``--repeats N`` sets the number of fits (or draws) per cell of ``floor``,
``validation``, ``ceiling``, ``batch`` and ``topics`` (by default 9, 7, 9, 4
and 9); ``--corpus SOTU`` or ``--corpus KOS`` runs their real corpus alone.
With no section named, ``kos``, ``speed``, ``synthetic`` and ``kos_curve`` run
(``kos_curve`` is section 2's curve on KOS); ``agreement``, ``floor``,
``validation``, ``ceiling``, ``batch`` and ``topics`` run only when named.
"""

import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from _lda_corpora import (
    KOS_DIR,
    kos_split,
    load_kos,
    make_lda_corpus,
    sotu_split,
    split_documents,
)
from _sections import run_sections
from scipy.optimize import linear_sum_assignment
from sklearn.decomposition import LatentDirichletAllocation
from threadpoolctl import threadpool_limits

from skprivfact.lda import (
    DEFAULT_CLIP_FRACTION,
    DPLDA,
    _deconvolved_totals,
    _dirichlet_expectation_2d,
    _resample_documents,
)
from skprivfact.privacy import PrivacyEngine, plan_privacy

INF = float("inf")
EPSILONS = [0.5, 1.0, 2.0, 4.0, INF]


def likelihood_perplexity(model, X):
    """Held-out perplexity of a DPLDA by the importance-sampled likelihood."""
    return model.perplexity(X, method="importance", random_state=0)


def mean_topic_distance(components, true_topics):
    estimated = components / components.sum(axis=1, keepdims=True)
    distances = 0.5 * np.abs(estimated[:, None, :] - true_topics[None, :, :]).sum(
        axis=2
    )
    rows, cols = linear_sum_assignment(distances)
    return distances[rows, cols].mean()


def doc_only_perplexity(model, X):
    """Document-only held-out perplexity of any fitted LDA's topics, with our bound."""
    if isinstance(model, DPLDA):
        return model.perplexity(X, include_topic_word_bound=False)
    holder = DPLDA(model.n_components, epsilon=INF, batch_size=1)
    holder.n_features_in_ = X.shape[1]
    holder.components_ = model.components_
    holder.exp_dirichlet_component_ = model.exp_dirichlet_component_
    holder.doc_topic_prior_ = model.doc_topic_prior_
    holder.topic_word_prior_ = model.topic_word_prior_
    return holder.perplexity(X, include_topic_word_bound=False)


def kos_agreement():
    loaded = load_kos()
    if loaded is None:
        print(f"KOS not found under {KOS_DIR}: skipped")
        return
    X, _ = loaded
    train, test = split_documents(X)
    n_topics, batch_size, passes = 20, 128, 5
    print(
        f"\n== KOS agreement: K={n_topics}, batch_size={batch_size}, passes={passes}, "
        f"learning_offset=10, {train.shape[0]} train / {test.shape[0]} test documents =="
    )
    print(
        "seed | sklearn full | DPLDA(inf) full | ratio | sklearn doc-only | DPLDA(inf) doc-only | ratio"
    )
    ratios_full, ratios_doc, values = [], [], []
    for seed in range(3):
        with threadpool_limits(1):
            ref = LatentDirichletAllocation(
                n_topics,
                learning_method="online",
                batch_size=batch_size,
                max_iter=passes,
                learning_offset=10.0,
                random_state=seed,
            ).fit(train)
            ours = DPLDA(
                n_topics,
                epsilon=INF,
                batch_size=batch_size,
                max_iter=passes,
                learning_offset=10.0,
                random_state=seed,
            ).fit(train)
        ref_full, ours_full = ref.perplexity(test), ours.perplexity(test)
        ref_doc, ours_doc = (
            doc_only_perplexity(ref, test),
            doc_only_perplexity(ours, test),
        )
        values.append((ref_full, ours_full, ref_doc, ours_doc))
        ratios_full.append(ours_full / ref_full)
        ratios_doc.append(ours_doc / ref_doc)
        print(
            f"{seed} | {ref_full:.1f} | {ours_full:.1f} | {ours_full / ref_full:.3f} | "
            f"{ref_doc:.1f} | {ours_doc:.1f} | {ours_doc / ref_doc:.3f}"
        )
    print(
        f"median of per-seed ratios: full {statistics.median(ratios_full):.3f}, "
        f"doc-only {statistics.median(ratios_doc):.3f}"
    )
    medians = [statistics.median(column) for column in zip(*values)]
    print(
        f"ratio of medians over seeds: full {medians[1] / medians[0]:.3f} "
        f"({medians[1]:.1f} / {medians[0]:.1f}), doc-only {medians[3] / medians[2]:.3f} "
        f"({medians[3]:.1f} / {medians[2]:.1f})"
    )


def privacy_utility(
    train,
    test,
    true_topics,
    n_topics,
    batch_size,
    label,
    doc_length=500,
    learning_offset=10.0,
):
    print(
        f"\n== privacy-utility on {label}: K={n_topics}, batch_size={batch_size}, "
        f"learning_offset={learning_offset}, one pass, doc_length={doc_length}, "
        "clip_norm=0.1*doc_length, delta=1e-5 =="
    )
    header = "epsilon | floor_negatives | noise_multiplier | epsilon spent | doc-only perplexity | ratio to inf"
    if true_topics is not None:
        header += " | mean TV"
    print(header)
    for floor in ("pooled", "per_iteration", "running_average"):
        results = {}
        for epsilon in sorted(EPSILONS, reverse=True):
            start = time.perf_counter()
            model = DPLDA(
                n_topics,
                epsilon=epsilon,
                delta=1e-5,
                batch_size=batch_size,
                max_iter=1,
                doc_length=doc_length,
                floor_negatives=floor,
                learning_offset=learning_offset,
                n_topic_words=None,
                random_state=0,
            ).fit(train)
            perplexity = doc_only_perplexity(model, test)
            results[epsilon] = perplexity
            line = (
                f"{epsilon} | {floor} | {model.noise_multiplier_:.3f} | "
                f"{model.privacy_spent_[0]:.3f} | {perplexity:.2f} | "
                f"{perplexity / results[INF]:.3f}"
            )
            if true_topics is not None:
                line += f" | {mean_topic_distance(model.components_, true_topics):.3f}"
            print(line + f"   ({time.perf_counter() - start:.1f} s)", flush=True)


def synthetic():
    start = time.perf_counter()
    X, topics = make_lda_corpus(n_documents=110_000, seed=0)
    train, test = X[:100_000], X[100_000:]
    print(f"\nsynthetic corpus generated in {time.perf_counter() - start:.1f} s")
    # Anchors: the true topics, scikit-learn's online LDA after one and five passes.
    truth = DPLDA(10, epsilon=INF, batch_size=1)
    truth.n_features_in_ = train.shape[1]
    # Topics concentrated at the truth: the prior plus 1e8 pseudo-counts.
    truth.components_ = 0.05 + 1e8 * topics
    truth.exp_dirichlet_component_ = np.exp(
        _dirichlet_expectation_2d(truth.components_)
    )
    truth.doc_topic_prior_, truth.topic_word_prior_ = 0.1, 0.05
    print(
        f"true model: doc-only held-out perplexity "
        f"{truth.perplexity(test, include_topic_word_bound=False):.2f}"
    )
    for passes in (1, 5):
        with threadpool_limits(1):
            ref = LatentDirichletAllocation(
                10,
                learning_method="online",
                batch_size=128,
                max_iter=passes,
                random_state=0,
            ).fit(train)
        print(
            f"sklearn online LDA (batch 128, {passes} pass(es)): doc-only "
            f"{doc_only_perplexity(ref, test):.2f}, mean TV "
            f"{mean_topic_distance(ref.components_, topics):.3f}",
            flush=True,
        )
    # Large batches (sampling rate 0.05, 20 releases) with a short memory,
    # then the batch size at which the non-private fit is best.
    privacy_utility(
        train, test, topics, 10, 5000, "synthetic 100k", learning_offset=1.0
    )
    privacy_utility(
        train, test, topics, 10, 1000, "synthetic 100k", learning_offset=10.0
    )


def batch(sizes=(50_000, 100_000, 300_000), epsilons=(0.5, 1.0, 2.0, 4.0), repeats=4):
    for n_documents in sizes:
        X, topics = make_lda_corpus(n_documents=n_documents + 10_000, seed=0)
        train, test = X[:n_documents], X[n_documents:]
        delta = 1e-5 if n_documents < 100_000 else 1e-7
        print(
            f"\n== batch size: synthetic corpus, {n_documents} train / "
            f"{test.shape[0]} test documents, K=10, one pass, delta={delta:g}, "
            f"mean [least-largest] of {repeats} fits =="
        )
        print("epsilon | batch_size | mean TV | doc-only perplexity")
        for epsilon in epsilons:
            for batch_size in ("auto", 1000):
                distances, perplexities = [], []
                for seed in range(repeats):
                    with threadpool_limits(1):
                        model = DPLDA(
                            10,
                            epsilon=epsilon,
                            delta=delta,
                            batch_size=batch_size,
                            random_state=seed,
                        ).fit(train)
                    distances.append(mean_topic_distance(model.components_, topics))
                    perplexities.append(doc_only_perplexity(model, test))
                label = (
                    f"auto ({round(model.sample_rate_ * n_documents)})"
                    if batch_size == "auto"
                    else batch_size
                )
                print(
                    f"{epsilon} | {label} | {np.mean(distances):.3f} "
                    f"[{min(distances):.3f}-{max(distances):.3f}] | "
                    f"{np.mean(perplexities):.1f} "
                    f"[{min(perplexities):.1f}-{max(perplexities):.1f}]",
                    flush=True,
                )


def kos_curve():
    loaded = load_kos()
    if loaded is None:
        print("KOS not found: skipped")
        return
    train, test = split_documents(loaded[0])
    privacy_utility(train, test, None, 20, 500, "KOS (3087 training documents)")


def median_seconds(fit, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fit()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed(repeats=5):
    loaded = load_kos()
    if loaded is None:
        print("KOS not found: skipped")
        return
    X, _ = loaded
    n_topics, batch_size, passes = 20, 128, 2

    def sklearn_fit():
        LatentDirichletAllocation(
            n_topics,
            learning_method="online",
            batch_size=batch_size,
            max_iter=passes,
            random_state=0,
        ).fit(X)

    def ours_fit(n_jobs):
        return lambda: DPLDA(
            n_topics,
            epsilon=1.0,
            batch_size=batch_size,
            max_iter=passes,
            n_jobs=n_jobs,
            random_state=0,
        ).fit(X)

    with threadpool_limits(1):
        ours_fit(1)()  # compile the kernels outside the timing
        # Interleaved, so that load from other processes hits all three alike.
        times = {"sklearn": [], 1: [], 2: []}
        for _ in range(repeats):
            times["sklearn"].append(median_seconds(sklearn_fit, 1) / passes)
            times[1].append(median_seconds(ours_fit(1), 1) / passes)
            times[2].append(median_seconds(ours_fit(2), 1) / passes)
    reference, one, two = (statistics.median(times[key]) for key in ("sklearn", 1, 2))
    print(
        f"\n== speed on KOS ({X.shape[0]} docs): K={n_topics}, batch_size={batch_size}, "
        f"{passes} passes, median of {repeats}, BLAS threads=1 =="
    )
    print(f"sklearn online LDA (n_jobs=None): {reference:.3f} s/pass")
    print(
        f"DPLDA epsilon=1, n_jobs=1: {one:.3f} s/pass, ratio to sklearn {one / reference:.3f}"
    )
    print(
        f"DPLDA epsilon=1, n_jobs=2: {two:.3f} s/pass, ratio to n_jobs=1 {two / one:.3f}"
    )
    print(
        "cores free for this process: two threads of a GIL-free loop run "
        f"{free_core_speedup():.2f} times as fast as one (2.0 on an idle 2-core machine)"
    )


def free_core_speedup(n_iterations=200_000_000):
    """Speed-up of a GIL-free numba loop from one thread to two, right now."""
    import threading

    from numba import njit

    @njit(nogil=True)
    def spin(n):
        total = 0.0
        for i in range(n):
            total += (i % 7) * 0.5
        return total

    spin(10)
    start = time.perf_counter()
    spin(n_iterations)
    spin(n_iterations)
    serial = time.perf_counter() - start
    threads = [threading.Thread(target=spin, args=(n_iterations,)) for _ in range(2)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return serial / (time.perf_counter() - start)


REAL_CORPORA = {"SOTU": sotu_split, "KOS": kos_split}


def real_corpora():
    """``(name, train, test)`` of each real corpus found; a line for the others."""
    for name, split in REAL_CORPORA.items():
        loaded = split()
        if loaded is None:
            print(f"{name} not found: skipped")
            continue
        yield name, *loaded


def agreement(seeds=range(4)):
    n_topics, batch_size, passes = 10, 400, 2
    for name, train, test in real_corpora():
        print(
            f"\n== {name} agreement without noise: K={n_topics}, batch_size="
            f"{batch_size}, passes={passes}, {train.shape[0]} train / "
            f"{test.shape[0]} test documents, document-only perplexity =="
        )
        print("seed | sklearn online | DPLDA(epsilon=inf) | ratio")
        ours, reference = [], []
        for seed in seeds:
            with threadpool_limits(1):
                ref = LatentDirichletAllocation(
                    n_topics,
                    learning_method="online",
                    batch_size=batch_size,
                    max_iter=passes,
                    random_state=seed,
                ).fit(train)
                model = DPLDA(
                    n_topics,
                    epsilon=INF,
                    batch_size=batch_size,
                    max_iter=passes,
                    random_state=seed,
                ).fit(train)
            reference.append(doc_only_perplexity(ref, test))
            ours.append(doc_only_perplexity(model, test))
            print(
                f"{seed} | {reference[-1]:.1f} | {ours[-1]:.1f} | "
                f"{ours[-1] / reference[-1]:.3f}",
                flush=True,
            )
        print(
            f"mean: sklearn {np.mean(reference):.1f}, DPLDA {np.mean(ours):.1f}, "
            f"ratio {np.mean(ours) / np.mean(reference):.3f}"
        )


def clipped_count_sum(X, clip):
    """The sum of the rows of the sparse counts ``X``, each scaled to L2 norm at most ``clip``.

    Sparse, for whole corpora (``skprivfact.mechanisms.clip_rows`` takes dense
    rows); the benchmark's unigrams only, not a release of the package.
    """
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    scale = 1.0 / np.maximum(1.0, norms / clip)
    return np.asarray(X.multiply(scale[:, np.newaxis]).sum(axis=0)).ravel()


def plug_in_unigram(train, test, epsilon, clip=2.0, smoothing=5.0, delta=1e-5):
    """Held-out perplexity of a private unigram: one release of the clipped counts.

    Every row of ``train`` is scaled to L2 norm at most ``clip``, the rows
    are summed and released once with Gaussian noise by a PrivacyEngine planned
    for one full-batch release at ``(epsilon, delta)`` (the accountant and
    neighbouring relation of DPLDA); negatives are set to 0, ``smoothing`` is
    added to every word, and the exact likelihood of the held-out words is
    scored.
    """
    counts = clipped_count_sum(train, clip)
    if epsilon != INF:
        plan = plan_privacy(epsilon, delta, sample_rate=1.0, n_releases=1)
        (counts,) = PrivacyEngine(plan).release([counts], [clip])
    probabilities = np.maximum(counts, 0.0) + smoothing
    probabilities /= probabilities.sum()
    test_counts = np.asarray(test.sum(axis=0)).ravel()
    return float(np.exp(-(test_counts @ np.log(probabilities)) / test_counts.sum()))


def unigram_floor(train, epsilon, delta=1e-5):
    """The private unigram floor: DPLDA without topics, one full-batch release."""
    return DPLDA(
        1, epsilon=epsilon, delta=delta, batch_size=None, max_iter=1, n_topic_words=None
    ).fit(train)


def subsampled_unigram(train, epsilon, batch_size, passes, delta=1e-5):
    """A private unigram from Poisson-subsampled releases of the clipped counts.

    DPLDA's resampling and clipping (its default ``doc_length`` and
    ``clip_norm``) on each Poisson batch of expected size ``batch_size``, as
    many releases as DPLDA plans for ``passes`` passes; each batch's sum is
    released through a PrivacyEngine planned for all of them, the releases'
    plain mean is denoised by the floor's empirical Bayes step, and the
    result, with one pseudo-count per word (the floor's single online step
    keeps about ten, from its prior and its random start), is a one-topic
    DPLDA to score.
    """
    template = DPLDA(1)
    doc_length = template.doc_length
    clip = DEFAULT_CLIP_FRACTION * doc_length
    n_documents = train.shape[0]
    rate = min(1.0, batch_size / n_documents)
    n_releases = passes * DPLDA._releases_per_pass(rate)
    engine = PrivacyEngine(
        plan_privacy(epsilon, delta, sample_rate=rate, n_releases=n_releases)
    )
    mean = np.zeros(train.shape[1])
    for release in range(n_releases):
        batch = train[engine.sample(n_documents, rate)]
        batch = _resample_documents(batch, doc_length, engine.generator())
        counts = clipped_count_sum(batch, clip)
        expected = rate * n_documents
        (released,) = engine.release([counts / expected], [clip / expected])
        mean += (n_documents * released - mean) / (release + 1)
    (noise_std,) = engine.noise_scales([clip / (rate * n_documents)])
    totals = _deconvolved_totals(mean, noise_std * n_documents / np.sqrt(n_releases))
    unigram = DPLDA(1, epsilon=INF, batch_size=1)
    unigram.n_features_in_ = train.shape[1]
    unigram.doc_topic_prior_ = unigram.topic_word_prior_ = 1.0
    unigram.components_ = (1.0 + totals)[np.newaxis, :]
    unigram.exp_dirichlet_component_ = np.exp(
        _dirichlet_expectation_2d(unigram.components_)
    )
    return unigram


def as_topic_copies(unigram, n_topics):
    """The unigram floor as an LDA of ``n_topics`` identical topics.

    The same word distribution scored as a K-topic model: the document-only
    bound then also charges the topic proportions' KL term, as it does for
    DPLDA, which on short documents costs more than the topics can gain.
    """
    copies = DPLDA(n_topics, epsilon=INF, batch_size=1)
    copies.n_features_in_ = unigram.n_features_in_
    copies.components_ = np.tile(unigram.components_, (n_topics, 1))
    copies.exp_dirichlet_component_ = np.exp(
        _dirichlet_expectation_2d(copies.components_)
    )
    copies.doc_topic_prior_ = copies.topic_word_prior_ = 1.0 / n_topics
    return copies


def floor(epsilons=(1.0, 2.0, 4.0), repeats=9):
    n_topics = 10
    settings = [
        # topics over every word
        {"batch_size": 1000, "max_iter": 1, "floor_negatives": "pooled", "n_topic_words": None},
        {"batch_size": 1000, "max_iter": 1, "floor_negatives": "per_iteration",
         "n_topic_words": None},
        # the defaults: the word totals released first, topics over the 1000
        # most frequent words
        {},
        # The setting the validation section chooses (training documents
        # held out, never the test split), one for both corpora and every
        # epsilon: topics over every word, the counts' row taking most of
        # each release's norm.
        VALIDATION_CHOICE,
    ]
    for name, train, test in real_corpora():
        print(
            f"\n== {name}: private DPLDA (K={n_topics}) against the private unigram "
            f"floor, {train.shape[0]} train / {test.shape[0]} test documents, "
            f"delta=1e-5, RDP, document-only held-out perplexity, median of "
            f"{repeats} fits (secret noise) =="
        )
        with threadpool_limits(1):
            reference = DPLDA(
                n_topics, epsilon=INF, batch_size=1000, random_state=0
            ).fit(train)
            unigram_inf = unigram_floor(train, INF)
            print(
                f"no noise: DPLDA {doc_only_perplexity(reference, test):.1f} "
                f"(likelihood {likelihood_perplexity(reference, test):.1f}), "
                f"unigram (DPLDA K=1) {doc_only_perplexity(unigram_inf, test):.1f} "
                f"(likelihood {likelihood_perplexity(unigram_inf, test):.1f}), "
                f"as {n_topics} identical topics "
                f"{doc_only_perplexity(as_topic_copies(unigram_inf, n_topics), test):.1f}, "
                f"plug-in unigram {plug_in_unigram(train, test, INF):.1f}"
            )
            for epsilon in epsilons:
                unigrams = [unigram_floor(train, epsilon) for _ in range(repeats)]
                floor_values = [doc_only_perplexity(u, test) for u in unigrams]
                copies_values = [
                    doc_only_perplexity(as_topic_copies(u, n_topics), test)
                    for u in unigrams
                ]
                plug_in = [
                    plug_in_unigram(train, test, epsilon) for _ in range(repeats)
                ]
                subsampled = statistics.median(
                    likelihood_perplexity(
                        subsampled_unigram(
                            train,
                            epsilon,
                            VALIDATION_CHOICE["batch_size"],
                            VALIDATION_CHOICE["max_iter"],
                        ),
                        test,
                    )
                    for _ in range(repeats)
                )
                unigram = statistics.median(floor_values)
                unigram_likelihood = statistics.median(
                    likelihood_perplexity(u, test) for u in unigrams
                )
                print(
                    f"epsilon {epsilon}: unigram floor (DPLDA K=1) {unigram:.1f} "
                    f"(likelihood {unigram_likelihood:.1f}), "
                    f"as {n_topics} identical topics "
                    f"{statistics.median(copies_values):.1f}, "
                    f"plug-in unigram {statistics.median(plug_in):.1f}; "
                    f"unigram from subsampled releases: likelihood {subsampled:.1f} "
                    f"(ratio to the floor {subsampled / unigram_likelihood:.3f})"
                )
                for params in settings:
                    models = [
                        DPLDA(**{"n_components": n_topics, **params}, epsilon=epsilon,
                              random_state=seed).fit(train)
                        for seed in range(repeats)
                    ]
                    values = [doc_only_perplexity(m, test) for m in models]
                    value = statistics.median(values)
                    ratios = np.array(
                        [likelihood_perplexity(m, test) for m in models]
                    ) / unigram_likelihood
                    print(
                        f"  DPLDA {params}: {value:.1f} (ratio to the floor "
                        f"{value / unigram:.3f}); likelihood ratio to the floor: "
                        f"median {np.median(ratios):.3f}, range {ratios.min():.3f}-"
                        f"{ratios.max():.3f}, {np.sum(ratios <= 1)}/{repeats} fits "
                        "at or below",
                        flush=True,
                    )


VALIDATION_CHOICE = {"counts_weight": 8.0, "n_topic_words": None, "batch_size": 2000,
                     "max_iter": 2}
VALIDATION_GRID = [
    {"counts_weight": weight, "n_topic_words": None, "batch_size": batch_size,
     "max_iter": 2}
    for weight in (1.0, 4.0, 8.0, 16.0)
    for batch_size in (1000, 2000)
]


def validation(epsilons=(1.0, 2.0, 4.0), repeats=7, n_topics=10):
    ratios = {}
    for name, train, _ in real_corpora():
        fit_docs, held_out = split_documents(train, test_fraction=0.1, seed=1)
        print(
            f"\n== {name} validation: {fit_docs.shape[0]} / {held_out.shape[0]} "
            f"training documents, K={n_topics}, held-out likelihood over the "
            f"floor's, median of {repeats} fits =="
        )
        print(
            "settings, in order: "
            + "; ".join(
                f"weight {p['counts_weight']:g}, batch {p['batch_size']}"
                for p in VALIDATION_GRID
            )
        )
        with threadpool_limits(1):
            for epsilon in epsilons:
                floor_value = statistics.median(
                    likelihood_perplexity(unigram_floor(fit_docs, epsilon), held_out)
                    for _ in range(repeats)
                )
                cells = []
                for index, params in enumerate(VALIDATION_GRID):
                    value = statistics.median(
                        likelihood_perplexity(
                            DPLDA(n_topics, epsilon=epsilon, **params).fit(fit_docs),
                            held_out,
                        )
                        for _ in range(repeats)
                    )
                    ratios.setdefault(index, []).append(value / floor_value)
                    cells.append(f"{value / floor_value:.3f}")
                print(f"epsilon {epsilon}: " + ", ".join(cells), flush=True)
    if not ratios:
        return
    print("\nsettings (mean ratio over the cells):")
    for index, params in enumerate(VALIDATION_GRID):
        print(f"  {params}: {np.mean(ratios[index]):.4f}")
    best = min(ratios, key=lambda index: np.mean(ratios[index]))
    print(f"chosen: {VALIDATION_GRID[best]}")


def exact_share_topics(reference, totals, n_top=None):
    """Topics splitting ``totals`` among them by the shares of ``reference``'s.

    With ``n_top``, only the ``n_top`` words of largest ``totals`` keep their
    shares; every other word is shared evenly among the topics.
    """
    statistics_ = reference.components_ - reference.topic_word_prior_
    shares = statistics_ / statistics_.sum(axis=0)
    if n_top is not None:
        others = np.ones(totals.size, dtype=bool)
        others[np.argsort(-totals)[:n_top]] = False
        shares[:, others] = 1.0 / shares.shape[0]
    topics = DPLDA(reference.n_components, epsilon=INF, batch_size=1)
    topics.n_features_in_ = totals.size
    topics.components_ = reference.topic_word_prior_ + totals * shares
    topics.exp_dirichlet_component_ = np.exp(
        _dirichlet_expectation_2d(topics.components_)
    )
    topics.doc_topic_prior_ = reference.doc_topic_prior_
    topics.topic_word_prior_ = reference.topic_word_prior_
    return topics


def ceiling(
    epsilons=(1.0, 2.0, 4.0),
    shares=(0.5, 0.7, 0.85, 0.95, 1.0),
    top_words=(300, 1000, 2000),
    repeats=9,
):
    n_topics = 10
    for name, train, test in real_corpora():
        print(
            f"\n== {name}: exact topic shares (non-private K={n_topics}, batch 400, "
            "2 passes) on private word totals released at a share s of the budget, "
            "held-out likelihood perplexity over the floor's, median of "
            f"{repeats} draws =="
        )
        with threadpool_limits(1):
            reference = DPLDA(
                n_topics, epsilon=INF, batch_size=400, max_iter=2, random_state=0
            ).fit(train)
            clean_unigram = likelihood_perplexity(unigram_floor(train, INF), test)
            print(
                "no noise: the topics' perplexity over the unigram's "
                f"{likelihood_perplexity(reference, test) / clean_unigram:.3f}"
            )
            for epsilon in epsilons:
                floors = [unigram_floor(train, epsilon) for _ in range(repeats)]
                floor_value = statistics.median(
                    likelihood_perplexity(u, test) for u in floors
                )
                multiplier = floors[0].noise_multiplier_
                ratios = []
                top_values = {}
                for share in shares:
                    values = []
                    for _ in range(repeats):
                        # The multiplier sets the noise; an infinite epsilon
                        # only lifts the budget check (this release spends
                        # the share s of epsilon, not all of it).
                        totals = DPLDA(
                            1,
                            epsilon=INF,
                            noise_multiplier=multiplier / np.sqrt(share),
                            batch_size=None,
                            max_iter=1,
                            n_topic_words=None,
                        ).fit(train)
                        released = totals.components_[0] - totals.topic_word_prior_
                        values.append(
                            likelihood_perplexity(
                                exact_share_topics(reference, released), test
                            )
                        )
                        if share == 1.0:
                            for n_top in top_words:
                                top_values.setdefault(n_top, []).append(
                                    likelihood_perplexity(
                                        exact_share_topics(reference, released, n_top),
                                        test,
                                    )
                                )
                    ratio = statistics.median(values) / floor_value
                    ratios.append(f"s={share:g}: {ratio:.3f}")
                ratios += [
                    f"s=1, top {n_top}: "
                    f"{statistics.median(top_values[n_top]) / floor_value:.3f}"
                    for n_top in top_words
                    if n_top in top_values
                ]
                print(
                    f"epsilon {epsilon}: floor {floor_value:.1f} "
                    f"({floor_value / clean_unigram:.3f} of the unigram without noise); "
                    + ", ".join(ratios),
                    flush=True,
                )


def with_identical_topics(model):
    """``model`` with every topic replaced by the mean of its topics.

    Each word keeps its total over the topics, shared evenly among them: the
    fit's own word totals as a unigram (identical topics make the held-out
    likelihood that of their common word distribution, up to the importance
    sampling's own error). Post-processing of the fitted topics.
    """
    identical = copy.deepcopy(model)
    identical.components_ = np.tile(
        model.components_.mean(axis=0), (model.components_.shape[0], 1)
    )
    identical.exp_dirichlet_component_ = np.exp(
        _dirichlet_expectation_2d(identical.components_)
    )
    return identical


def topics(epsilons=(1.0, 2.0, 4.0), repeats=9, n_topics=10):
    for name, train, test in real_corpora():
        print(
            f"\n== {name}: what the topics add to the chosen setting's own word "
            f"totals (K={n_topics}, {VALIDATION_CHOICE}), held-out likelihood "
            f"perplexity over the floor's median, {repeats} fits =="
        )
        with threadpool_limits(1):
            for epsilon in epsilons:
                floors = np.array(
                    [
                        likelihood_perplexity(unigram_floor(train, epsilon), test)
                        for _ in range(repeats)
                    ]
                )
                floor_value = np.median(floors)
                fitted, identical = [], []
                for seed in range(repeats):
                    model = DPLDA(
                        n_topics,
                        epsilon=epsilon,
                        random_state=seed,
                        **VALIDATION_CHOICE,
                    ).fit(train)
                    fitted.append(likelihood_perplexity(model, test) / floor_value)
                    identical.append(
                        likelihood_perplexity(with_identical_topics(model), test)
                        / floor_value
                    )
                fitted, identical = np.array(fitted), np.array(identical)
                paired = fitted / identical
                # Both samples are draws of secret noise: the difference of
                # their mean log perplexities, with its standard error.
                log_gap = np.log(fitted).mean() - np.log(floors / floor_value).mean()
                log_gap_se = np.sqrt(
                    np.log(fitted).var(ddof=1) / fitted.size
                    + np.log(floors).var(ddof=1) / floors.size
                )
                print(
                    f"epsilon {epsilon}: fitted topics median {np.median(fitted):.4f} "
                    f"(range {fitted.min():.4f}-{fitted.max():.4f}); identical "
                    f"topics median {np.median(identical):.4f} (range "
                    f"{identical.min():.4f}-{identical.max():.4f}); fitted over "
                    f"identical, same fit: median {np.median(paired):.4f}, range "
                    f"{paired.min():.4f}-{paired.max():.4f}; {np.sum(fitted <= 1)}/"
                    f"{repeats} fits at or below the floor's median; geometric means, "
                    f"fits over floors: {np.exp(log_gap):.4f} (log difference "
                    f"{log_gap:+.5f} +- {log_gap_se:.5f}, "
                    f"{log_gap / log_gap_se:+.1f} standard errors)",
                    flush=True,
                )


def _pop_option(name, convert):
    """The value after ``name`` on the command line, removed from it (None if absent)."""
    if name not in sys.argv:
        return None
    index = sys.argv.index(name)
    if index + 1 >= len(sys.argv):
        raise SystemExit(f"{name} needs a value")
    value = convert(sys.argv[index + 1])
    del sys.argv[index : index + 2]
    return value


if __name__ == "__main__":
    repeats = _pop_option("--repeats", int)
    corpus = _pop_option("--corpus", str)
    if corpus is not None:
        if corpus not in REAL_CORPORA:
            raise SystemExit(f"--corpus takes one of {', '.join(REAL_CORPORA)}")
        REAL_CORPORA = {corpus: REAL_CORPORA[corpus]}
    repeated = {} if repeats is None else {"repeats": repeats}
    run_sections(
        {
            "kos": kos_agreement,
            "synthetic": synthetic,
            "kos_curve": kos_curve,
            "speed": speed,
            "agreement": agreement,
            "floor": lambda: floor(**repeated),
            "validation": lambda: validation(**repeated),
            "ceiling": lambda: ceiling(**repeated),
            "batch": lambda: batch(**repeated),
            "topics": lambda: topics(**repeated),
        },
        __doc__,
        default=["kos", "speed", "synthetic", "kos_curve"],
    )
