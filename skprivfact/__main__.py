"""``python -m skprivfact``: private Poisson factorization and the privacy machinery.

1. Local privacy: a synthetic count matrix is privatized with two-sided
   geometric noise at several epsilons; the noise added and the guarantee given
   are printed.
2. Central privacy: the shared RDP accountant reports the (epsilon, delta)
   spent by a DP training run of the shape the central-DP estimators use, and
   calibrates the noise for a target epsilon.
3. Private Poisson factorization: a count matrix (generated, or read with
   ``--input``) is privatized at epsilon/N (default 1); a private model
   (PrivatePoissonMF), a naive one (noise ignored, negatives clipped to 0) and a
   non-private one on the clean counts are fitted on 90% of the rows; the table
   gives the mean absolute error of the rates against the truth (when known),
   the held-out clean log-likelihood per entry and the seconds taken, and a
   figure of the true and recovered factors is saved (``--figure``).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import __version__
from .accounting import RDPAccountant, calibrate_noise_multiplier
from .datasets import make_poisson_factorization
from .preprocessing import GeometricPrivatizer


def _local_privacy(seed, out):
    X, _, _, _ = make_poisson_factorization(
        n_samples=300, n_features=200, n_components=10, random_state=seed
    )
    print("Local privacy: two-sided geometric noise on every count", file=out)
    print(
        f"  data: {X.shape[0]} x {X.shape[1]} synthetic Poisson factorization counts, "
        f"mean {X.mean():.2f}, {np.mean(X == 0):.0%} zeros, max {X.max()}",
        file=out,
    )
    header = (
        f"  {'epsilon':>7} {'N':>3} {'alpha':>7} {'mean |noise|':>12} {'expected':>9} "
        f"{'max |noise|':>11} {'negative':>9}  guarantee"
    )
    print(header, file=out)
    for epsilon, sensitivity in [(0.5, 1), (1.0, 1), (2.0, 1), (5.0, 1), (2.0, 2)]:
        privatizer = GeometricPrivatizer(
            epsilon=epsilon, sensitivity=sensitivity, random_state=seed
        )
        noisy = privatizer.fit_transform(X)
        noise = noisy - X
        alpha = privatizer.alpha_
        print(
            f"  {epsilon:7.2f} {sensitivity:3d} {alpha:7.4f} {np.abs(noise).mean():12.3f} "
            f"{-privatizer.score(X):9.3f} {np.abs(noise).max():11d} {np.mean(noisy < 0):9.1%}"
            f"  ({sensitivity}, {epsilon:g})-limited-precision LDP: rows within L1 "
            f"distance {sensitivity} are e^{epsilon:g}-indistinguishable",
            file=out,
        )


def _central_privacy(out):
    n_samples, batch_size, epochs, noise_multiplier, delta = 60_000, 600, 10, 1.1, 1e-5
    sample_rate = batch_size / n_samples
    steps = epochs * n_samples // batch_size
    print("\nCentral privacy: RDP accountant, Poisson-subsampled Gaussian releases", file=out)
    print(
        f"  training run: {n_samples} records, expected batch {batch_size} "
        f"(sample rate {sample_rate:g}), {epochs} epochs = {steps} steps, "
        f"noise multiplier {noise_multiplier}",
        file=out,
    )
    accountant = RDPAccountant()
    for epoch in range(1, epochs + 1):
        accountant.compose(noise_multiplier, sample_rate, steps // epochs)
        if epoch in (1, 5, epochs):
            epsilon, order = accountant.get_privacy_spent(delta)
            print(
                f"  after epoch {epoch:2d}: ({epsilon:.3f}, {delta:g})-DP "
                f"(best Renyi order {order:g})",
                file=out,
            )
    for target in (0.5, 1.0, 4.0):
        sigma = calibrate_noise_multiplier(target, delta, sample_rate, steps)
        spent = RDPAccountant().compose(sigma, sample_rate, steps).get_epsilon(delta)
        print(
            f"  for ({target:g}, {delta:g})-DP over {steps} steps: noise multiplier "
            f"{sigma:.4f} (spends epsilon {spent:.4f})",
            file=out,
        )


def _load_counts(path):
    path = Path(path)
    if path.suffix == ".npz":
        return sp.load_npz(path).toarray()
    if path.suffix == ".npy":
        return np.load(path)
    raise ValueError(f"--input must be a .npz sparse matrix or a .npy array; got {path}")


def _align(true_components, fitted_components):
    """Order and scale fitted components to best match the true ones."""
    from scipy.optimize import linear_sum_assignment

    def unit(rows):
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-300)

    similarity = unit(true_components) @ unit(fitted_components).T
    true_idx, fitted_idx = linear_sum_assignment(-similarity)
    aligned = np.zeros_like(true_components)
    aligned[true_idx] = unit(fitted_components[fitted_idx]) * np.linalg.norm(
        true_components[true_idx], axis=1, keepdims=True)
    return aligned


def _save_figure(path, true_components, models, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"  (matplotlib is not installed: no figure written to {path})", file=out)
        return
    panels = [("true components", true_components)] if true_components is not None else []
    for name, model in models:
        components = model.components_
        if true_components is not None:
            components = _align(true_components, components)
        panels.append((name, components))
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.3 * len(panels) + 0.6),
                             sharex=True)
    vmax = np.quantile(panels[0][1], 0.99)
    for ax, (name, components) in zip(np.atleast_1d(axes), panels):
        ax.imshow(components, aspect="auto", cmap="magma", vmin=0, vmax=vmax,
                  interpolation="nearest")
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        ax.set_yticks([])
    np.atleast_1d(axes)[-1].set_xlabel("feature")
    fig.suptitle("Components (rows) of the Poisson factorization")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"  figure of the true and recovered components: {path}", file=out)


def _private_poisson_mf(args, out):
    from .mechanisms import two_sided_geometric
    from .poisson_mf import (
        PrivatePoissonMF,
        generalized_kl_divergence,
        heldout_loglik,
        poisson_loglik_per_entry,
    )

    rng = np.random.default_rng(args.seed)
    if args.input is None:
        X, _, theta, phi = make_poisson_factorization(
            n_samples=600, n_features=300, n_components=args.rank, factor_shape=0.3,
            random_state=args.seed,
        )
        source = f"synthetic {X.shape[0]} x {X.shape[1]}, rank {args.rank}"
        rates_true, components_true = theta @ phi, phi
    else:
        X = _load_counts(args.input)
        source = f"{args.input}: {X.shape[0]} x {X.shape[1]}"
        rates_true = components_true = None
    X = np.asarray(X).astype(np.int64)
    print(f"\nPrivate Poisson factorization (PrivatePoissonMF, solver={args.solver!r})",
          file=out)
    print(f"  data: {source}, mean count {X.mean():.3f}; privatized at epsilon/N = "
          f"{args.epsilon:g}; held out 10% of rows", file=out)
    X_noisy = X + two_sided_geometric(args.epsilon, 1, size=X.shape, random_state=rng)
    order = rng.permutation(X.shape[0])
    n_test = max(1, X.shape[0] // 10)
    test, train = order[:n_test], order[n_test:]
    solver_kwargs = dict(solver=args.solver, n_burn_in=300, n_kept_samples=200)
    runs = [
        ("private", PrivatePoissonMF(args.rank, epsilon=args.epsilon, random_state=args.seed,
                                     **solver_kwargs), X_noisy),
        ("naive", PrivatePoissonMF(args.rank, random_state=args.seed, **solver_kwargs),
         np.maximum(X_noisy, 0)),
        ("non-private", PrivatePoissonMF(args.rank, random_state=args.seed, **solver_kwargs),
         X),
    ]
    # the held-out score is the clean counts' Poisson log-likelihood per entry
    # at the rates each model infers from the rows' release (heldout_loglik)
    print(f"  {'model':12} {'MAE of rates':>12} {'KL of rates':>11} {'held-out loglik':>15} "
          f"{'seconds':>8}", file=out)
    fitted = []
    for name, model, data in runs:
        start = time.perf_counter()
        train_factors = model.fit_transform(data[train])
        loglik = heldout_loglik(model, data[test], X[test])
        seconds = time.perf_counter() - start
        mae = kl = "n/a"
        if rates_true is not None:
            factors = np.empty((X.shape[0], args.rank))
            factors[train], factors[test] = train_factors, model.transform(data[test])
            rates = factors @ model.components_
            mae = f"{np.abs(rates - rates_true).mean():.4f}"
            kl = f"{generalized_kl_divergence(rates_true, rates):.4f}"
        print(f"  {name:12} {mae:>12} {kl:>11} {loglik:15.4f} {seconds:8.2f}", file=out)
        fitted.append((name, model))
    # the trivial model a user would compare with: each column's mean noisy count
    word_mean = np.tile(X_noisy[train].mean(axis=0), (n_test, 1))
    print(f"  {'column mean':12} {'':>12} {'':>11} "
          f"{poisson_loglik_per_entry(X[test], word_mean):15.4f}", file=out)
    _save_figure(args.figure, components_true, fitted, out)


def main(argv=None, out=None):
    """Run the demo; returns the process exit code."""
    out = sys.stdout if out is None else out
    parser = argparse.ArgumentParser(
        prog="python -m skprivfact", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--epsilon", type=float, default=1.0,
                        help="epsilon/N of the privatized counts (default 1)")
    parser.add_argument("--solver", choices=["cavi", "mcmc"], default="cavi",
                        help="inference for the factorization (default cavi)")
    parser.add_argument("--rank", type=int, default=5,
                        help="number of components (default 5)")
    parser.add_argument("--input", default=None,
                        help="counts to factorize: a .npz scipy sparse matrix or a .npy "
                        "array (default: a generated matrix with known factors)")
    parser.add_argument("--figure", default="skprivfact_demo_factors.png",
                        help="where to save the figure (default "
                        "./skprivfact_demo_factors.png)")
    args = parser.parse_args(argv)
    if not args.epsilon > 0:
        parser.error(f"--epsilon must be positive; got {args.epsilon}")
    if args.rank < 1:
        parser.error(f"--rank must be >= 1; got {args.rank}")
    start = time.perf_counter()
    print(f"skprivfact {__version__}", file=out)
    _local_privacy(args.seed, out)
    _central_privacy(out)
    _private_poisson_mf(args, out)
    print(f"\ndone in {time.perf_counter() - start:.1f} s", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
