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
from .utils._numba import compile_seconds


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
    if path.suffix not in (".npz", ".npy"):
        raise ValueError(f"--input must be a .npz sparse matrix or a .npy array; got {path}")
    if not path.is_file():
        raise ValueError(f"--input {path}: no such file")
    try:
        X = sp.load_npz(path) if path.suffix == ".npz" else np.load(path)
    except Exception as exc:  # any unreadable file ends in the same one-line error
        raise ValueError(f"--input {path}: cannot be read ({exc})") from None
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    if X.ndim != 2 or X.size == 0 or not np.issubdtype(X.dtype, np.number):
        raise ValueError(f"--input {path}: expected a non-empty 2-D numeric array; "
                         f"got shape {X.shape}, dtype {X.dtype}")
    if X.min() < 0 or not np.array_equal(X, np.round(X)):
        raise ValueError(f"--input {path}: expected non-negative integer counts")
    return X


def _load_vocabulary(path, n_features):
    """Words of a one-word-per-line file, or None when there is none to read.

    Without ``--vocab``, a single ``*vocab*.txt`` file next to the input is used.
    """
    if path is None:
        return None
    words = Path(path).read_text().split()
    if len(words) != n_features:
        raise ValueError(f"--vocab {path}: {len(words)} words for {n_features} features")
    return np.array(words)


def _find_vocabulary(input_path):
    candidates = sorted(Path(input_path).parent.glob("*vocab*.txt"))
    return candidates[0] if len(candidates) == 1 else None


def _unit_sum(rows):
    """Each component as the share of its total rate per feature (removes
    the scale that Poisson factorization leaves unidentified)."""
    return rows / np.maximum(rows.sum(axis=1, keepdims=True), 1e-300)


def _match(reference, components):
    """Permutation of ``components``' rows that best matches ``reference``'s,
    and the cosine similarity of each matched pair."""
    from .poisson_mf._evaluation import _unit_rows, match_components

    order = match_components(reference, components)
    cosine = np.sum(_unit_rows(reference) * _unit_rows(components[order]), axis=1)
    return order, cosine


def _feature_columns(reference, vocabulary, words_per_component=6):
    """Columns to draw and their labels: every feature grouped by the
    reference component it loads most on; with a vocabulary, only each
    reference component's top words, labelled."""
    if vocabulary is None:
        dominant = reference.argmax(axis=0)
        columns = np.lexsort((-reference.max(axis=0), dominant))
        return columns, None
    columns = []
    for row in reference:
        top = [v for v in np.argsort(row)[::-1] if v not in columns]
        columns.extend(top[:words_per_component])
    columns = np.array(columns)
    return columns, vocabulary[columns]


def _save_figure(path, true_components, models, out, vocabulary=None):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"  (matplotlib is not installed: no figure written to {path}; "
              'install it with python -m pip install "skprivfact[demo]")', file=out)
        return
    panels = []
    if true_components is not None:
        reference_name, reference = "true", _unit_sum(true_components)
        panels.append(("true components", reference, None))
    else:
        # without a truth, the non-private fit is the reference the others are matched to
        reference_name = models[-1][0]
        reference = _unit_sum(models[-1][1].components_)
    for name, model in models:
        components = _unit_sum(model.components_)
        if true_components is None and name == reference_name:
            panels.append((f"{name} fit (the reference)", components, None))
            continue
        order, cosine = _match(reference, components)
        panels.append((f"{name} fit", components[order], cosine))
    columns, labels = _feature_columns(reference, vocabulary)
    n_rows = reference.shape[0]
    height = 0.28 * n_rows + 0.9
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, height * len(panels) + (1.4 if labels is not None else 0.8)),
        sharex=True, squeeze=False,
    )
    for ax, (name, components, cosine) in zip(axes[:, 0], panels):
        shown = components[:, columns]
        # each panel its own scale: noise flattens or sharpens whole panels
        image = ax.imshow(shown, aspect="auto", cmap="viridis", vmin=0,
                          vmax=max(np.quantile(shown, 0.99), 1e-300),
                          interpolation="nearest")
        colorbar = fig.colorbar(image, ax=ax, pad=0.01, fraction=0.04)
        colorbar.ax.tick_params(labelsize=7)
        title = name
        if cosine is not None:
            title += (f": cosine similarity to the {reference_name} components, "
                      f"mean {np.mean(cosine):.2f} "
                      f"({', '.join(f'{c:.2f}' for c in cosine)})")
        if np.all(components.max(axis=1) < 1.5 * components.min(axis=1)):
            title += "; all nearly uniform"
        ax.set_title(title, fontsize=8, loc="left")
        ax.set_yticks(range(n_rows), [f"{k + 1}" for k in range(n_rows)], fontsize=7)
        ax.set_ylabel("component", fontsize=7)
    last = axes[-1, 0]
    if labels is None:
        last.set_xlabel(f"feature ({len(columns)}), grouped by the {reference_name} "
                        "component it loads most on", fontsize=8)
    else:
        last.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        last.set_xlabel(f"the top words of each {reference_name} component", fontsize=8)
    fig.suptitle(
        "Poisson factorization components, each row scaled to sum to 1 "
        "(colour: share of the component's rate)\n"
        f"rows matched to the {reference_name} components; "
        "each panel has its own colour scale", fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
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
            n_samples=_SYNTHETIC_SHAPE[0], n_features=_SYNTHETIC_SHAPE[1],
            n_components=args.rank, factor_shape=0.3,
            random_state=args.seed,
        )
        source = f"synthetic {X.shape[0]} x {X.shape[1]}, rank {args.rank}"
        rates_true, components_true = theta @ phi, phi
    else:
        X = args.counts
        source = f"{args.input}: {X.shape[0]} x {X.shape[1]}"
        rates_true = components_true = None
    X = np.asarray(X).astype(np.int64)
    print(f"\nPrivate Poisson factorization (PrivatePoissonMF, solver={args.solver!r})",
          file=out)
    print(f"  data: {source}, mean count {X.mean():.3f}; privatized at epsilon/N = "
          f"{args.epsilon:g}; held out 10% of rows, each half of their entries "
          "scored at the factors inferred from the other half", file=out)
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
    # at the rates each model infers from the release of the rows' other
    # entries (heldout_loglik)
    print(f"  {'model':12} {'MAE of rates':>12} {'KL of rates':>11} {'held-out loglik':>15} "
          f"{'fit s':>7} {'compile s':>9}", file=out)
    fitted = []
    for name, model, data in runs:
        start, compiled = time.perf_counter(), compile_seconds()
        train_factors = model.fit_transform(data[train])
        test_factors = model.transform(data[test])
        compiling = compile_seconds() - compiled
        seconds = time.perf_counter() - start - compiling
        loglik = heldout_loglik(model, data[test], X[test])
        mae = kl = "n/a"
        if rates_true is not None:
            factors = np.empty((X.shape[0], args.rank))
            factors[train], factors[test] = train_factors, test_factors
            rates = factors @ model.components_
            mae = f"{np.abs(rates - rates_true).mean():.4f}"
            kl = f"{generalized_kl_divergence(rates_true, rates):.4f}"
        print(f"  {name:12} {mae:>12} {kl:>11} {loglik:15.4f} {seconds:7.2f} "
              f"{compiling:9.2f}", file=out)
        fitted.append((name, model))
    # the trivial model a user would compare with: each column's mean noisy count
    word_mean = np.tile(X_noisy[train].mean(axis=0), (n_test, 1))
    print(f"  {'column mean':12} {'':>12} {'':>11} "
          f"{poisson_loglik_per_entry(X[test], word_mean):15.4f}", file=out)
    print("  (fit s: fitting and transforming, without compile s: the one-off "
          "compilation of numba kernels, cached for later runs)", file=out)
    _save_figure(args.figure, components_true, fitted, out, vocabulary=args.vocabulary)


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        # one line, without the usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


# The generated counts when there is no --input (rows, features).
_SYNTHETIC_SHAPE = (600, 300)
# An --input needs this many rows: one in ten is held out to score the fits.
_MIN_INPUT_ROWS = 10


def _check_args(parser, args):
    """Validate every option (and read the input) before any work."""
    from .poisson_mf._estimator import MAX_EPSILON_PER_UNIT, MIN_EPSILON_PER_UNIT

    if not MIN_EPSILON_PER_UNIT <= args.epsilon <= MAX_EPSILON_PER_UNIT:
        parser.error(
            f"--epsilon must lie in [{MIN_EPSILON_PER_UNIT:g}, {MAX_EPSILON_PER_UNIT:g}] "
            f"(the range PrivatePoissonMF models); got {args.epsilon}"
        )
    if not 0 <= args.seed < 2**32:
        parser.error(f"--seed must lie in [0, 2**32); got {args.seed}")
    if args.rank < 1:
        parser.error(f"--rank must be >= 1; got {args.rank}")
    if args.input is None and args.rank > min(_SYNTHETIC_SHAPE) // 10:
        parser.error(
            f"--rank must be at most {min(_SYNTHETIC_SHAPE) // 10} for the generated "
            f"{_SYNTHETIC_SHAPE[0]} x {_SYNTHETIC_SHAPE[1]} counts; got {args.rank}"
        )
    figure_dir = Path(args.figure).resolve().parent
    if not figure_dir.is_dir():
        parser.error(f"--figure {args.figure}: directory {figure_dir} does not exist")
    if Path(args.figure).suffix.lower() not in (".png", ".pdf", ".svg", ".jpg", ".jpeg"):
        parser.error(f"--figure {args.figure}: expected a .png, .pdf, .svg or .jpg file")
    args.counts = args.vocabulary = None
    if args.input is None:
        if args.vocab is not None:
            parser.error("--vocab needs --input")
        return
    try:
        args.counts = _load_counts(args.input)
        if args.counts.shape[0] < _MIN_INPUT_ROWS:
            raise ValueError(f"--input {args.input} has {args.counts.shape[0]} rows; "
                             f"the demo needs at least {_MIN_INPUT_ROWS} (one in ten "
                             "is held out)")
        if args.rank > min(args.counts.shape):
            raise ValueError(f"--rank {args.rank} exceeds the smaller dimension of "
                             f"--input {args.input} {args.counts.shape}")
        if args.vocab is not None:
            args.vocabulary = _load_vocabulary(args.vocab, args.counts.shape[1])
        else:
            found = _find_vocabulary(args.input)
            try:
                args.vocabulary = _load_vocabulary(found, args.counts.shape[1])
            except ValueError as exc:
                raise ValueError(
                    f"{exc.args[0].replace('--vocab ', '')} (found next to --input, "
                    "as no --vocab was given; pass --vocab to name the right file)"
                ) from None
    except (ValueError, OSError) as exc:
        parser.error(str(exc))


def main(argv=None, out=None):
    """Run the demo; returns the process exit code."""
    out = sys.stdout if out is None else out
    parser = _ArgumentParser(
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
    parser.add_argument("--vocab", default=None,
                        help="with --input: a text file of the features' names, one per "
                        "line, to label the figure (default: the one *vocab*.txt file "
                        "next to the input, if there is one)")
    parser.add_argument("--figure", default="skprivfact_demo_factors.png",
                        help="where to save the figure (default "
                        "./skprivfact_demo_factors.png)")
    args = parser.parse_args(argv)
    _check_args(parser, args)
    start = time.perf_counter()
    print(f"skprivfact {__version__}", file=out)
    _local_privacy(args.seed, out)
    _central_privacy(out)
    _private_poisson_mf(args, out)
    print(f"\ndone in {time.perf_counter() - start:.1f} s "
          f"({compile_seconds():.1f} s of it compiling numba kernels)", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
