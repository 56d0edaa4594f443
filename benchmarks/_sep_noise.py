"""bench_sep sections on the privacy noise: noise and floor.

Both study the SEP update of the network's natural parameters, so their
networks run ``mean_update="sep"`` (the private network's default is Adam).
What they read of a fitted DPSEPRegressor beyond its public API goes through
``_sep_internals``.
"""

import math
import statistics
import warnings

import numpy as np

import _sep_common
from _sep_common import (
    DATASETS,
    DELTA,
    INF,
    LARGE,
    fit_and_score,
    load_uci,
    public_bounds,
    split,
    test_rmse,
)
from _sep_internals import (
    factor_noise_std,
    fitted_factor,
    network_start,
    posterior_noise_std,
    site_values,
    weight_precisions,
    with_posterior_noise,
)
from skprivfact.accounting import calibrate_noise_multiplier


def network(*args, **kwargs):
    """The benchmark's network with the SEP update these sections measure."""
    return _sep_common.network(*args, mean_update="sep", **kwargs)


# floor section: (damping, passes) with damping * passes = 3 (the start's weight
# in the factor decays as exp(-damping * passes), to 5% here), batch sizes,
# clipping norms, noise draws per oracle and default splits per set.
FLOOR_SCHEDULES = [(0.05, 60), (0.1, 30), (0.2, 15), (0.3, 10), (0.5, 6), (1.0, 3)]
FLOOR_BATCH_SIZES = (28, 128, 512, 2048)
FLOOR_CLIP_NORMS = [0.3, 1.0, 3.0, 10.0, 30.0]
FLOOR_DRAWS = 5
FLOOR_SPLITS = 2
FLOOR_DATASETS = ["kin8nm", "naval-propulsion-plant", "power-plant"]


def posterior_noise(n_samples, batch_size, damping, n_passes):
    """Std of the privacy noise in each natural parameter of the posterior (the
    averaged factor times ``n_samples``, averaging_fraction 0.5) per unit of
    clip_norm at epsilon = 1, and the noise multiplier."""
    sample_rate = batch_size / n_samples
    n_steps = n_passes * math.ceil(1.0 / sample_rate)
    sigma = calibrate_noise_multiplier(
        1.0, DELTA, sample_rate=sample_rate, steps=n_steps
    )
    first_averaged = n_steps - round(0.5 * n_steps)
    _, averaged = factor_noise_std(
        sigma * 2.0 * damping / n_samples,
        damping * sample_rate,
        n_steps,
        first_averaged,
    )
    return n_samples * averaged, sigma


def section_noise(args):
    X, y = load_uci("kin8nm")
    train, test = split(len(y), 0)
    n_samples = len(train)
    print(
        "== noise: std of the privacy noise in each natural parameter of the posterior, "
        f"per unit of clip_norm (epsilon=1, delta={DELTA:g}, n = {n_samples}, "
        "averaging_fraction 0.5) =="
    )
    dampings = (0.1, 0.5, 1.0)
    print(
        f"{'batch':>6}{'passes':>7}{'sigma':>7}"
        + "".join(f"{f'damping {d:g}':>13}" for d in dampings)
    )
    for batch_size in (28, 128, 512, 2048):
        for n_passes in (10, 40):
            cells = []
            for damping in dampings:
                noise, sigma = posterior_noise(n_samples, batch_size, damping, n_passes)
                cells.append(f"{noise:>13.2f}")
            print(f"{batch_size:>6}{n_passes:>7}{sigma:>7.2f}" + "".join(cells))
    print()
    print("kin8nm split 0, 50 hidden units, defaults; median over the weights of the")
    print("posterior precision and the privacy noise std in each natural parameter:")
    bounds_X, bounds_y = public_bounds(X), public_bounds(y)
    runs = {
        "no clipping, no noise": {"epsilon": INF, "clip_norm": None},
        "clip_norm 1, no noise": {"epsilon": INF, "clip_norm": 1.0},
        "clip_norm 1, epsilon 1": {"epsilon": 1.0, "clip_norm": 1.0},
    }
    for label, kwargs in runs.items():
        estimator = network(bounds_X, bounds_y, **kwargs)
        row = fit_and_score(estimator, X, y, train, test)
        # The posterior's natural parameters before the estimator's shrinkage
        # of noisy means (weights_variance_ includes that shrinkage).
        precision = weight_precisions(estimator)
        print(
            f"  {label:<24} precision {np.median(precision):9.1f}   noise std "
            f"{posterior_noise_std(estimator):6.2f}   test RMSE {row['rmse']:.4g}"
        )
    print()
    print("norms of the sites at the non-private posterior (no clipping, no noise,")
    print("the private runs' bounds; split 0, first 2000 training rows), quantiles:")
    print(f"  {'data set':<26}{'10%':>8}{'50%':>8}{'90%':>8}")
    for name in ("kin8nm", "naval-propulsion-plant", "power-plant"):
        X, y = load_uci(name)
        train, _ = split(len(y), 0)
        bounds_X, bounds_y = public_bounds(X), public_bounds(y)
        estimator = network(
            bounds_X, bounds_y, DATASETS[name][0], epsilon=INF, clip_norm=None
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(X[train], y[train])
        rows = train[:2000]
        X_scaled = (
            np.clip(X[rows], *bounds_X) - estimator.X_offset_
        ) / estimator.X_scale_
        y_scaled = (
            np.clip(y[rows], *bounds_y) - estimator.y_offset_
        ) / estimator.y_scale_
        sites = site_values(estimator, X_scaled, y_scaled, len(train))
        quantiles = np.quantile(np.linalg.norm(sites, axis=1), [0.1, 0.5, 0.9])
        print(f"  {name:<26}" + "".join(f"{q:>8.1f}" for q in quantiles))
    print()


def section_floor(args, names):
    names = (
        [name for name in names if name in LARGE] if args.datasets else FLOOR_DATASETS
    )
    n_splits = args.n_splits or FLOOR_SPLITS
    print(
        "== floor: the best RMSE of this DP-SEP at epsilon=1 (clipping alone, and an "
        f"optimistic oracle adding the smallest noise), {n_splits} splits =="
    )
    for name in names:
        X, y = load_uci(name)
        hidden, _ = DATASETS[name]
        bounds_X, bounds_y = public_bounds(X), public_bounds(y)
        n_train = len(split(len(y), 0)[0])
        floor_noise, schedule = min(
            (
                posterior_noise(n_train, batch_size, damping, n_passes)[0],
                (batch_size, damping, n_passes),
            )
            for batch_size in FLOOR_BATCH_SIZES
            for damping, n_passes in FLOOR_SCHEDULES
        )
        print(
            f"{name} (n = {n_train}): smallest posterior noise {floor_noise:.2f} x clip_norm "
            f"per natural parameter, at (batch, damping, passes) = {schedule}"
        )
        clip_only = {clip_norm: [] for clip_norm in FLOOR_CLIP_NORMS}
        oracle = {clip_norm: [] for clip_norm in FLOOR_CLIP_NORMS}
        non_private = []
        cold, warm = [], []
        for seed in range(n_splits):
            train, test = split(len(y), seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                estimator = network(
                    bounds_X,
                    bounds_y,
                    hidden,
                    epsilon=INF,
                    clip_norm=None,
                    random_state=seed,
                )
                non_private.append(
                    test_rmse(estimator.fit(X[train], y[train]), X[test], y[test])
                )
                for clip_norm in FLOOR_CLIP_NORMS:
                    estimator = network(
                        bounds_X,
                        bounds_y,
                        hidden,
                        epsilon=INF,
                        clip_norm=clip_norm,
                        random_state=seed,
                    ).fit(X[train], y[train])
                    clip_only[clip_norm].append(test_rmse(estimator, X[test], y[test]))
                    random_state = np.random.RandomState(seed)
                    oracle[clip_norm].append(
                        statistics.mean(
                            test_rmse(
                                with_posterior_noise(
                                    estimator, floor_noise * clip_norm, random_state
                                ),
                                X[test],
                                y[test],
                            )
                            for _ in range(FLOOR_DRAWS)
                        )
                    )
                    if clip_norm == 1.0:
                        start = fitted_factor(estimator, len(train))
                private = network(
                    bounds_X, bounds_y, hidden, epsilon=1.0, random_state=seed
                )
                cold.append(
                    test_rmse(private.fit(X[train], y[train]), X[test], y[test])
                )
                with network_start(start):
                    warm.append(
                        test_rmse(private.fit(X[train], y[train]), X[test], y[test])
                    )
        reference = statistics.mean(non_private)
        print(f"  no clipping, no noise: RMSE {reference:.4g}")
        print(
            f"  {'clip_norm':>10}{'clip only':>12}{'ratio':>8}{'oracle':>12}{'ratio':>8}"
        )
        for clip_norm in FLOOR_CLIP_NORMS:
            clipped, noisy = (
                statistics.mean(clip_only[clip_norm]),
                statistics.mean(oracle[clip_norm]),
            )
            print(
                f"  {clip_norm:>10g}{clipped:>12.4g}{clipped / reference:>8.3f}"
                f"{noisy:>12.4g}{noisy / reference:>8.3f}"
            )
        for label, rmses in (
            ("from its random start (a private fit)", cold),
            ("from the noise-free clipped posterior (an oracle)", warm),
        ):
            print(
                f"  epsilon 1, clip_norm 1, defaults, {label}: RMSE "
                f"{statistics.mean(rmses):.4g}, ratio {statistics.mean(rmses) / reference:.3f}"
            )
        print(flush=True)
