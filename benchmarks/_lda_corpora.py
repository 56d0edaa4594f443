"""Corpora of the LDA benchmark script: KOS, SOTU and a synthetic LDA corpus."""

import numpy as np
import scipy.sparse as sp

from skprivfact.datasets import get_data_home

KOS_DIR = get_data_home() / "kos"
SOTU_DIR = get_data_home() / "sotu"


def load_kos():
    """KOS blog entries as a (3430, 6906) CSR count matrix and the vocabulary.

    Returns None when the ``kos`` folder of ``get_data_home()`` is absent.
    """
    path = KOS_DIR / "docword.kos.txt"
    if not path.exists():
        return None
    triples = np.loadtxt(path, skiprows=3, dtype=np.int64)
    with open(path) as header:
        n_documents, n_words = int(header.readline()), int(header.readline())
    X = sp.csr_matrix(
        (triples[:, 2].astype(np.float64), (triples[:, 0] - 1, triples[:, 1] - 1)),
        shape=(n_documents, n_words),
    )
    vocabulary = np.array((KOS_DIR / "vocab.kos.txt").read_text().split())
    return X, vocabulary


def load_sotu():
    """State of the Union paragraphs as a (9736, 5000) CSR count matrix and the vocabulary.

    Returns None when ../shared/data/sotu is absent. 24 rows are empty.
    """
    path = SOTU_DIR / "sotu_counts_csr.npz"
    if not path.exists():
        return None
    X = sp.load_npz(path).astype(np.float64).tocsr()
    vocabulary = np.array((SOTU_DIR / "sotu_vocab.txt").read_text().split())
    return X, vocabulary


def sotu_split(n_train=4000, n_test=1000, seed=0):
    """4000 training and 1000 held-out SOTU paragraphs, drawn at random (seed 0)."""
    loaded = load_sotu()
    if loaded is None:
        return None
    X = loaded[0]
    order = np.random.RandomState(seed).permutation(X.shape[0])
    return X[order[n_test : n_test + n_train]], X[order[:n_test]]


def kos_split():
    """KOS: 3087 training and 343 held-out documents (90/10, seed 0)."""
    loaded = load_kos()
    if loaded is None:
        return None
    return split_documents(loaded[0])


def split_documents(X, test_fraction=0.1, seed=0):
    """A random split of the rows of X into training and held-out documents."""
    rng = np.random.RandomState(seed)
    order = rng.permutation(X.shape[0])
    n_test = round(test_fraction * X.shape[0])
    return X[order[n_test:]], X[order[:n_test]]


def make_lda_corpus(
    n_documents=100_000,
    n_words=1000,
    n_topics=10,
    topic_word_concentration=0.05,
    doc_topic_concentration=0.1,
    mean_length=100,
    seed=0,
):
    """Documents drawn from LDA: returns (X CSR counts, true topics (K, V)).

    Topics ~ Dirichlet(topic_word_concentration), proportions ~
    Dirichlet(doc_topic_concentration), lengths ~ Poisson(mean_length)
    (documents of length 0 are redrawn as length 1 so that no row is empty).
    """
    rng = np.random.RandomState(seed)
    topics = rng.dirichlet(np.full(n_words, topic_word_concentration), size=n_topics)
    proportions = rng.dirichlet(
        np.full(n_topics, doc_topic_concentration), size=n_documents
    )
    lengths = np.maximum(rng.poisson(mean_length, size=n_documents), 1)
    rows = []
    word_distributions = proportions @ topics
    word_distributions /= word_distributions.sum(axis=1, keepdims=True)
    for start in range(0, n_documents, 5000):
        stop = min(start + 5000, n_documents)
        counts = np.vstack(
            [
                rng.multinomial(lengths[d], word_distributions[d])
                for d in range(start, stop)
            ]
        )
        rows.append(sp.csr_matrix(counts.astype(np.float64)))
    return sp.vstack(rows).tocsr(), topics
