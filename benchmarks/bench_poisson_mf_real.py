"""PrivatePoissonMF on real counts: held-out clean log-likelihood, totals and
distinct components against the fits and baselines a user would compare with.

Usage::

    python benchmarks/bench_poisson_mf_real.py [--datasets sotu kos pbmc]
        [--epsilons 1 2 5] [--components 10 20] [--seeds 0 1 2]
        [--rows 2000] [--words 1000] [--mcmc-seeds 0] [--n-burn-in 300]
        [--n-kept 100] [--chain-start cavi] [--compare-shapes 0.1 0.1]

Each data set (../shared/data, skipped when absent) is cut to its ``--words``
most frequent words (genes for PBMC) and ``--rows`` random non-empty rows; 10%
of the rows are held out. The words are counted over every row of the file,
held-out rows included, before any noise: the columns are treated as a public
vocabulary given with the data set (as a published word list would be), the
same for every model compared, and no fit reads a held-out count through them
beyond that choice. Per epsilon/N and seed, training and held-out rows
are privatized with the two-sided geometric mechanism, and each model's score
is the Poisson log-likelihood per entry of the clean held-out counts
(``heldout_loglik``: the columns split in two at random, each half scored at
the factors inferred from the other half's release, so no entry is scored by
factors fitted to it):

- private CAVI and private MCMC (``PrivatePoissonMF`` with ``epsilon``; MCMC
  for ``--mcmc-seeds`` only, it is the slow one, its chains started as
  ``--chain-start`` says),
- naive CAVI (the same model on the noisy counts clipped at 0),
- scikit-learn's NMF(beta_loss="kullback-leibler") on the clipped counts,
- word mean: every row gets each word's mean noisy training count,
- rank 1: each held-out row's noisy total over the columns it shows (clipped
  at 0.5) spread over the words in proportion to their noisy training totals.

Every PrivatePoissonMF here (private, naive and clean CAVI) has its default
"auto" prior shapes: CAVI chooses them on a validation split of its own
training rows (the noisy ones for a private fit), never the test rows. With
``--compare-shapes A C``, one more line per fit: private CAVI with the prior
shapes (A, C) fixed, what the search is measured against.

Also printed: the fitted mean training rate over the clean data's mean count
(private fits), beside the released training counts' own mean over it (the
noise's share of a rate that is off: at epsilon/N 1 on the sparse text the
released total alone strays by several percent, and a fit reads only the
release), and the largest cosine similarity between two components with
the number of distinct top-8 word lists, for the private fits and for CAVI on
the clean training counts (per K, also the largest cosine of MCMC on the clean
training counts for the ``--mcmc-seeds``: the sampler's own reference). On
PBMC the same two figures for the mean profiles of the ten FACS-sorted
populations (``cells.tsv``) over the same genes show how similar distinct
cell types are in these data.
"""

import argparse
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import NMF
from sklearn.exceptions import ConvergenceWarning

from skprivfact.datasets import get_data_home
from skprivfact.mechanisms import two_sided_geometric
from skprivfact.poisson_mf import PrivatePoissonMF, heldout_loglik

DATA = get_data_home()


def load(name, n_rows, n_words, rng):
    """Counts (dense int64) of the ``n_words`` most frequent columns and
    ``n_rows`` random non-empty rows; None when the files are absent."""
    if name == "sotu":
        path = DATA / "sotu" / "sotu_counts_csr.npz"
        if not path.exists():
            return None
        X = sp.load_npz(path).tocsr()
    elif name == "pbmc":
        path = DATA / "pbmc_facs" / "counts_csr.npz"
        if not path.exists():
            return None
        X = sp.load_npz(path).tocsr()
    else:
        path = DATA / "kos" / "docword.kos.txt"
        if not path.exists():
            return None
        with open(path) as handle:
            n_docs, n_vocab, _ = (int(handle.readline()) for _ in range(3))
            triples = np.loadtxt(handle, dtype=np.int64)
        X = sp.csr_matrix((triples[:, 2], (triples[:, 0] - 1, triples[:, 1] - 1)),
                          shape=(n_docs, n_vocab))
    top = np.argsort(-np.asarray(X.sum(axis=0)).ravel(), kind="stable")[:n_words]
    X = X[:, np.sort(top)]
    X = X[np.asarray(X.sum(axis=1)).ravel() > 0]
    if X.shape[0] > n_rows:
        X = X[np.sort(rng.choice(X.shape[0], n_rows, replace=False))]
    return X.toarray().astype(np.int64)


class ColumnMean:
    """Every row gets each column's mean noisy training count."""

    def __init__(self, means):
        self.components_ = np.asarray(means, dtype=float)[None, :]
        self.n_features_in_ = self.components_.shape[1]

    def transform(self, X):
        return np.ones((X.shape[0], 1))


class RankOne:
    """Each row's noisy total over the columns it shows (at least 0.5),
    spread over the columns in proportion to their noisy training totals."""

    def __init__(self, shares):
        self.components_ = np.asarray(shares, dtype=float)[None, :]
        self.n_features_in_ = self.components_.shape[1]

    def transform(self, X):
        totals = np.maximum(np.asarray(X, dtype=float).sum(axis=1, keepdims=True), 0.5)
        return totals / max(self.components_.sum(), 1e-300)


def component_summary(components, n_top=8):
    """(largest cosine similarity between two components, number of distinct
    top-``n_top`` column sets)."""
    unit = components / np.maximum(np.linalg.norm(components, axis=1, keepdims=True), 1e-300)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    tops = {tuple(sorted(np.argsort(-row)[:n_top])) for row in components}
    return float(similarity.max()), len(tops)


def labelled_population_summary(n_words):
    """PBMC only: (largest cosine similarity between the mean profiles of the
    FACS-sorted populations over the ``n_words`` columns ``load`` keeps, pairs
    above the warning's 0.95, number of pairs, distinct top-8 gene sets,
    populations), the scale of similarity between distinct patterns in these
    data; None when the files are absent."""
    folder = DATA / "pbmc_facs"
    if not (folder / "cells.tsv").exists():
        return None
    X = sp.load_npz(folder / "counts_csr.npz").tocsr()
    with open(folder / "cells.tsv") as handle:
        next(handle)
        labels = np.array([line.split("\t")[1] for line in handle])
    top = np.argsort(-np.asarray(X.sum(axis=0)).ravel(), kind="stable")[:n_words]
    X = X[:, np.sort(top)]
    profiles = np.array([np.asarray(X[labels == label].mean(axis=0)).ravel()
                         for label in np.unique(labels)])
    unit = profiles / np.linalg.norm(profiles, axis=1, keepdims=True)
    pairs = (unit @ unit.T)[np.triu_indices(len(profiles), 1)]
    largest, n_distinct = component_summary(profiles)
    return largest, int((pairs > 0.95).sum()), pairs.size, n_distinct, len(profiles)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["sotu", "kos", "pbmc"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 2.0, 5.0])
    parser.add_argument("--components", nargs="+", type=int, default=[10, 20])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--mcmc-seeds", nargs="*", type=int, default=[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--words", type=int, default=1000)
    parser.add_argument("--n-burn-in", type=int, default=300)
    parser.add_argument("--n-kept", type=int, default=100)
    parser.add_argument("--chain-start", choices=["cavi", "random"], default="cavi")
    parser.add_argument("--compare-shapes", nargs=2, type=float, default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    warnings.simplefilter("ignore", UserWarning)
    print(" ".join(sys.argv))
    for name in args.datasets:
        rng = np.random.default_rng(0)
        X = load(name, args.rows, args.words, rng)
        if X is None:
            print(f"{name}: data absent, skipped")
            continue
        order = rng.permutation(X.shape[0])
        n_test = X.shape[0] // 10
        test, train = X[order[:n_test]], X[order[n_test:]]
        print(f"\n{name}: {train.shape[0]} training + {n_test} held-out rows x {X.shape[1]} "
              f"columns, mean count {train.mean():.4f}", flush=True)
        if name == "pbmc" and (populations := labelled_population_summary(args.words)):
            largest, n_above, n_pairs, n_distinct, n_populations = populations
            print(f" the {n_populations} FACS-sorted populations' mean profiles: largest cosine "
                  f"{largest:.3f}, {n_above} of {n_pairs} pairs above 0.95, distinct top-8 "
                  f"gene lists {n_distinct}/{n_populations}", flush=True)
        for n_components in args.components:
            clean, clean_mcmc = {}, {}
            for seed in args.seeds:
                model = PrivatePoissonMF(n_components, random_state=seed).fit(train)
                clean[seed] = (heldout_loglik(model, test, test),
                               *component_summary(model.components_))
                if seed in args.mcmc_seeds:
                    # the sampler's own reference: without noise, same sweeps
                    model = PrivatePoissonMF(n_components, solver="mcmc",
                                             n_burn_in=args.n_burn_in,
                                             n_kept_samples=args.n_kept,
                                             chain_start=args.chain_start,
                                             random_state=seed).fit(train)
                    clean_mcmc[seed] = component_summary(model.components_)[0]
            print(f" K = {n_components}; clean CAVI: held-out "
                  f"{np.mean([c[0] for c in clean.values()]):.4f}, largest cosine "
                  + " ".join(f"{c[1]:.2f}" for c in clean.values())
                  + ("; clean MCMC: largest cosine "
                     + " ".join(f"{c:.2f}" for c in clean_mcmc.values()) if clean_mcmc else ""),
                  flush=True)
            print(f"  {'eps/N':>5} {'seed':>4} {'CAVI':>8} {'MCMC':>8} {'naive':>8} "
                  f"{'NMF':>8} {'wordmean':>8} {'rank1':>8} | {'rate CAVI':>9} "
                  f"{'MCMC':>5} {'release':>7} | {'cos CAVI':>8} {'MCMC':>5} {'clean':>5} | "
                  f"top8 CAVI/MCMC/clean  s")
            for epsilon in args.epsilons:
                for seed in args.seeds:
                    start = time.perf_counter()
                    noise_rng = np.random.default_rng([seed, int(epsilon * 1000)])
                    noisy_train = train + two_sided_geometric(epsilon, 1, train.shape,
                                                              random_state=noise_rng)
                    noisy_test = test + two_sided_geometric(epsilon, 1, test.shape,
                                                            random_state=noise_rng)
                    clipped_train = np.maximum(noisy_train, 0)
                    clipped_test = np.maximum(noisy_test, 0)
                    row = {}
                    cavi = PrivatePoissonMF(n_components, epsilon=epsilon, random_state=seed)
                    rate = {"CAVI": cavi.fit_transform(noisy_train) @ cavi.components_}
                    row["CAVI"] = heldout_loglik(cavi, noisy_test, test)
                    summary = {"CAVI": component_summary(cavi.components_)}
                    chosen = (f"{cavi.factor_prior_shape_[0]:g}/"
                              f"{cavi.component_prior_shape_[0]:g}")
                    if seed in args.mcmc_seeds:
                        mcmc = PrivatePoissonMF(n_components, epsilon=epsilon, solver="mcmc",
                                                n_burn_in=args.n_burn_in,
                                                n_kept_samples=args.n_kept,
                                                chain_start=args.chain_start,
                                                random_state=seed)
                        rate["MCMC"] = mcmc.fit_transform(noisy_train) @ mcmc.components_
                        row["MCMC"] = heldout_loglik(mcmc, noisy_test, test)
                        summary["MCMC"] = component_summary(mcmc.components_)
                    naive = PrivatePoissonMF(n_components, random_state=seed).fit(clipped_train)
                    row["naive"] = heldout_loglik(naive, clipped_test, test)
                    nmf = NMF(n_components, beta_loss="kullback-leibler", solver="mu",
                              init="nndsvda", max_iter=400, random_state=seed)
                    nmf.fit(clipped_train)
                    row["NMF"] = heldout_loglik(nmf, clipped_test, test)
                    row["wordmean"] = heldout_loglik(
                        ColumnMean(noisy_train.mean(axis=0)), noisy_test, test)
                    shares = np.maximum(noisy_train.sum(axis=0), 0.0)
                    row["rank1"] = heldout_loglik(RankOne(shares / shares.sum()),
                                                  noisy_test, test)
                    fmt = {k: f"{row[k]:8.4f}" if k in row else f"{'-':>8}"
                           for k in ("CAVI", "MCMC", "naive", "NMF", "wordmean", "rank1")}
                    ratio = {k: f"{v.mean() / train.mean():.3f}" for k, v in rate.items()}
                    cos = {k: f"{v[0]:.2f}" for k, v in summary.items()}
                    tops = {k: str(v[1]) for k, v in summary.items()}
                    print(f"  {epsilon:5g} {seed:4d} {fmt['CAVI']} {fmt['MCMC']} {fmt['naive']} "
                          f"{fmt['NMF']} {fmt['wordmean']} {fmt['rank1']} | "
                          f"{ratio['CAVI']:>9} {ratio.get('MCMC', '-'):>5} "
                          f"{noisy_train.mean() / train.mean():7.3f} | "
                          f"{cos['CAVI']:>8} {cos.get('MCMC', '-'):>5} {clean[seed][1]:5.2f} | "
                          f"{tops['CAVI']}/{tops.get('MCMC', '-')}/{clean[seed][2]} "
                          f"shapes {chosen}  {time.perf_counter() - start:.0f}", flush=True)
                    if args.compare_shapes:
                        fixed = PrivatePoissonMF(n_components, epsilon=epsilon,
                                                 factor_prior_shape=args.compare_shapes[0],
                                                 component_prior_shape=args.compare_shapes[1],
                                                 random_state=seed)
                        fixed_rate = fixed.fit_transform(noisy_train) @ fixed.components_
                        fixed_cos, fixed_tops = component_summary(fixed.components_)
                        print(f"  {'':5} {'':4} {heldout_loglik(fixed, noisy_test, test):8.4f} "
                              f"CAVI at shapes {args.compare_shapes[0]:g}/"
                              f"{args.compare_shapes[1]:g} | rate "
                              f"{fixed_rate.mean() / train.mean():.3f} | cos {fixed_cos:.2f} | "
                              f"top8 {fixed_tops}", flush=True)


if __name__ == "__main__":
    main()
