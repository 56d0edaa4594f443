"""
=======================================================
Privacy-utility trade-off of differentially private LDA
=======================================================

:class:`~skprivfact.DPLDA` fits latent Dirichlet allocation by stochastic
variational inference and releases each iteration's expected word-topic counts
through the Gaussian mechanism (VIPS, Park et al. 2020): every document of a
Poisson-sampled batch is resampled to ``doc_length`` tokens, its statistic is
clipped to norm ``clip_norm``, and the batch sum gets noise scaled to that
bound. The noise is calibrated to a target ``epsilon``.

This example sweeps ``epsilon`` with :class:`~sklearn.model_selection.GridSearchCV`
on a generated corpus whose topics have readable words, plots the held-out
perplexity against epsilon beside the non-private fit (``epsilon=inf``), and
prints the top words of a few topics, private and non-private, side by side.
"""

# %%
# A corpus with known topics
# --------------------------
#
# Six themes of twelve words each, plus a background of common words shared
# by every theme. Documents mix a few themes (doc-topic Dirichlet(0.2)) and
# hold about 80 words. 20,000 documents: differential privacy needs many
# records, since the noise is fixed while the signal grows with the corpus.

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment
from sklearn.model_selection import GridSearchCV, ShuffleSplit

from skprivfact.lda import DPLDA

themes = {
    "sport": "match team goal season coach player league score win cup fans stadium",
    "finance": "market stock bank price rate investor fund trade profit bond share debt",
    "weather": "rain storm wind snow cloud forecast cold heat flood sunny temperature ice",
    "health": "doctor patient hospital drug vaccine disease nurse care virus clinic cancer test",
    "music": "song album band concert guitar singer tour record chart piano rock lyrics",
    "space": "rocket orbit planet moon launch star nasa mars satellite galaxy crew telescope",
}
background = [
    "said",
    "year",
    "people",
    "time",
    "new",
    "day",
    "week",
    "report",
    "city",
    "state",
]
vocabulary = np.array(
    background + [w for words in themes.values() for w in words.split()]
)
n_topics, n_words = len(themes), vocabulary.size

rng = np.random.RandomState(0)
true_topics = np.full((n_topics, n_words), 0.002)
true_topics[:, : len(background)] = 0.02
for k in range(n_topics):
    start = len(background) + 12 * k
    true_topics[k, start : start + 12] = rng.dirichlet(np.full(12, 2.0)) * 0.8
true_topics /= true_topics.sum(axis=1, keepdims=True)

n_documents = 20_000
proportions = rng.dirichlet(np.full(n_topics, 0.2), size=n_documents)
lengths = np.maximum(rng.poisson(80, size=n_documents), 1)
word_probabilities = proportions @ true_topics
counts = np.vstack([rng.multinomial(n, p) for n, p in zip(lengths, word_probabilities)])
X = sp.csr_matrix(counts)
print(f"{X.shape[0]} documents, {X.shape[1]} words, {int(X.sum())} tokens")

# %%
# Sweeping epsilon with GridSearchCV
# ----------------------------------
#
# Two passes over the corpus in batches of about 1,000 documents (sampling
# rate 0.0625 on the training split, 32 noisy releases). Each candidate calibrates its
# noise to its own epsilon at ``delta = 1e-5``. ``DPLDA.score`` is the
# document-only variational bound of the held-out documents (scikit-learn's
# also charges the topics' own KL term to the held-out words, which on a small
# test split, and for noisy topics, swamps the difference between models), so
# the held-out perplexity is ``exp(-score / number of held-out words)``.


epsilons = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, float("inf")]
search = GridSearchCV(
    DPLDA(
        n_components=n_topics,
        batch_size=1000,
        max_iter=2,
        learning_offset=4.0,
        doc_length=80,
        random_state=2,
    ),
    {"epsilon": epsilons},
    cv=ShuffleSplit(n_splits=1, test_size=0.2, random_state=0),
).fit(X)

(test_rows,) = [test for _, test in search.cv.split(X)]
n_test_words = X[test_rows].sum()
perplexities = np.exp(-search.cv_results_["mean_test_score"] / n_test_words)
for epsilon, perplexity in zip(epsilons, perplexities):
    print(f"epsilon = {epsilon:>5}: held-out perplexity {perplexity:.2f}")

# %%
# Held-out perplexity against epsilon
# -----------------------------------

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(epsilons[:-1], perplexities[:-1], "o-", label="DPLDA")
ax.axhline(
    perplexities[-1],
    color="k",
    linestyle="--",
    label=r"non-private ($\epsilon = \infty$)",
)
ax.set_xscale("log")
ax.set_xlabel(r"$\epsilon$ ($\delta = 10^{-5}$)")
ax.set_ylabel("held-out perplexity (document bound)")
ax.set_title("Privacy-utility trade-off, two passes")
ax.legend()
fig.tight_layout()

# %%
# Top words, private and non-private
# ----------------------------------
#
# A private model at epsilon = 1 and the non-private one, fitted on the whole
# corpus. Each fitted topic is matched to a true theme by the Hungarian
# algorithm on the total-variation distance. Local optima of LDA can merge two
# themes into one topic, private or not.


def fit(epsilon):
    return DPLDA(
        n_topics,
        epsilon=epsilon,
        batch_size=1000,
        max_iter=2,
        learning_offset=4.0,
        doc_length=80,
        random_state=2,
    ).fit(X)


def matched_topics(model):
    topics = model.components_ / model.components_.sum(axis=1, keepdims=True)
    distances = 0.5 * np.abs(topics[:, None, :] - true_topics[None, :, :]).sum(axis=2)
    rows, cols = linear_sum_assignment(distances)
    order = np.empty(n_topics, dtype=int)
    order[cols] = rows
    return topics[order], distances[rows, cols].mean()


private, public = fit(1.0), fit(float("inf"))
print(
    f"private model: epsilon spent {private.privacy_spent_[0]:.3f}, "
    f"noise multiplier {private.noise_multiplier_:.2f}"
)
private_topics, private_distance = matched_topics(private)
public_topics, public_distance = matched_topics(public)
print(
    f"mean total-variation distance to the true themes: non-private "
    f"{public_distance:.3f}, epsilon = 1: {private_distance:.3f}"
)
for k, theme in enumerate(list(themes)[:4]):
    print(
        f"{theme:>8} | non-private: {' '.join(vocabulary[np.argsort(public_topics[k])[::-1][:6]])}"
    )
    print(
        f"{'':>8} | epsilon = 1: {' '.join(vocabulary[np.argsort(private_topics[k])[::-1][:6]])}"
    )
