"""``python -m skprivfact``: a short tour of the privacy machinery.

1. Local privacy: a synthetic count matrix is privatized with two-sided
   geometric noise at several epsilons; the noise added and the guarantee given
   are printed.
2. Central privacy: the shared RDP accountant reports the (epsilon, delta)
   spent by a DP training run of the shape the central-DP estimators use, and
   calibrates the noise for a target epsilon.
"""

import argparse
import sys
import time

import numpy as np

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


def main(argv=None, out=None):
    """Run the demo; returns the process exit code."""
    out = sys.stdout if out is None else out
    parser = argparse.ArgumentParser(
        prog="python -m skprivfact", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    print(f"skprivfact {__version__}", file=out)
    _local_privacy(args.seed, out)
    _central_privacy(out)
    print(f"\ndone in {time.perf_counter() - start:.1f} s", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
