"""bench_sep sections on accuracy: linear, mlp, private, private-linear, scaling, sweep."""

import time

import numpy as np

from _sep_common import (
    BOUNDS_WIDENING,
    DATASETS,
    DELTA,
    INF,
    LARGE,
    fit_and_score,
    load_uci,
    network,
    print_uci_table,
    public_bounds,
    run_uci,
    split,
    splits_for,
)
from skprivfact.sep import DPSEPRegressor
from skprivfact.utils._testing import gaussian_kl

SWEEP_CLIP_NORMS = [0.3, 1.0, 3.0, 10.0]




def section_linear(args):
    print("== linear: non-private SEP against the exact conjugate posterior ==")
    rng = np.random.RandomState(0)
    n_samples, n_features, noise_std = 5000, 5, 0.5
    X = (
        rng.normal(size=(n_samples, n_features))
        * rng.uniform(0.5, 2.0, size=n_features)
        + 1.0
    )
    coef = rng.normal(size=n_features)
    y = X @ coef + 0.5 + noise_std * rng.normal(size=n_samples)
    print(
        f"synthetic: n = {n_samples}, d = {n_features}, noise std {noise_std} "
        "(noise_variance fixed to the truth), epsilon=inf, clip_norm=None"
    )
    print(
        f"{'setting':<38}{'KL(SEP||exact)':>16}{'KL(exact||SEP)':>16}"
        f"{'max |dmean|/sd':>16}{'prior prec.':>12}{'fit s':>8}"
    )
    for label, params in [
        ("defaults", {}),
        ("batch_size=100", {"batch_size": 100}),
        ("prior_precision=1.0", {"prior_precision": 1.0}),
        (
            "prior_precision=1.0, batch_size=100",
            {"prior_precision": 1.0, "batch_size": 100},
        ),
    ]:
        estimator = DPSEPRegressor(
            model="linear",
            epsilon=INF,
            clip_norm=None,
            noise_variance=noise_std**2,
            random_state=0,
            **params,
        )
        start = time.perf_counter()
        estimator.fit(X, y)
        seconds = time.perf_counter() - start
        # Exact posterior in the estimator's scaled units (prior N(0, I /
        # prior_precision_) on weights and intercept, at the fitted prior
        # precision when it is learned, noise variance scaled), then mapped to
        # the original units by the same affine map.
        X_scaled = (X - estimator.X_offset_) / estimator.X_scale_
        y_scaled = (y - estimator.y_offset_) / estimator.y_scale_
        rows = np.hstack([X_scaled, np.ones((n_samples, 1))])
        noise_var = noise_std**2 / estimator.y_scale_**2
        prior_precision = getattr(
            estimator, "prior_precision_", estimator.prior_precision
        )
        precision = prior_precision * np.eye(n_features + 1) + rows.T @ rows / noise_var
        covariance = np.linalg.inv(precision)
        mean = covariance @ (rows.T @ y_scaled) / noise_var
        transform = np.zeros((n_features + 1, n_features + 1))
        transform[:n_features, :n_features] = np.diag(
            estimator.y_scale_ / estimator.X_scale_
        )
        transform[n_features, :n_features] = (
            -estimator.y_scale_ * estimator.X_offset_ / estimator.X_scale_
        )
        transform[n_features, n_features] = estimator.y_scale_
        exact_mean = transform @ mean
        exact_mean[-1] += estimator.y_offset_
        exact_cov = transform @ covariance @ transform.T
        sep_mean = np.append(estimator.coef_, estimator.intercept_)
        sep_cov = estimator.coef_covariance_
        forward = gaussian_kl(sep_mean, sep_cov, exact_mean, exact_cov)
        backward = gaussian_kl(exact_mean, exact_cov, sep_mean, sep_cov)
        shift = np.max(np.abs(sep_mean - exact_mean) / np.sqrt(np.diag(exact_cov)))
        print(
            f"{label:<38}{forward:>16.3g}{backward:>16.3g}{shift:>16.3g}"
            f"{prior_precision:>12.4g}{seconds:>8.2f}"
        )
    defaults = DPSEPRegressor().get_params()
    print(
        "defaults: "
        + ", ".join(
            f"{key}={defaults[key]!r}"
            for key in [
                "damping",
                "max_iter",
                "batch_size",
                "averaging_fraction",
                "prior_precision",
            ]
        )
        + "; 'max |dmean|/sd' is the largest difference of posterior means in exact "
        "posterior standard deviations; the exact posterior uses the fitted "
        "prior_precision_ when it is learned ('auto')"
    )
    print()


def section_mlp(args, names):
    splits = args.n_splits or "20 (protein 5)"
    print(f"== mlp: non-private network SEP, {splits} random 90/10 splits ==")
    results = run_uci(names, args, private=False)
    print_uci_table(
        results,
        "Non-private (epsilon=inf, clip_norm=None), standardized with training statistics",
    )
    print()
    return results


def section_raw(args, names):
    """DPSEPRegressor(epsilon=inf) with every other parameter at its default,
    fitted to the raw UCI columns (no scaling outside the estimator)."""
    splits = args.n_splits or "20 (protein 5)"
    print(
        f"== raw: DPSEPRegressor(epsilon=inf, random_state=seed) on the raw data, "
        f"{splits} random 90/10 splits =="
    )
    results = {}
    for name in names:
        X, y = load_uci(name)
        rows = []
        for seed in range(splits_for(name, args)):
            train, test = split(len(y), seed)
            estimator = DPSEPRegressor(epsilon=INF, random_state=seed)
            row = fit_and_score(estimator, X, y, train, test)
            rows.append(row)
            print(
                f"  {name} split {seed}: RMSE {row['rmse']:.4g}, LL {row['ll']:.4g}, "
                f"{row['seconds']:.1f} s, model {estimator.model_}, clip_norm "
                f"{estimator.clip_norm_}"
                + (f", warnings {row['warnings']}" if row["warnings"] else ""),
                flush=True,
            )
        results[name] = {
            "n": len(y),
            "d": X.shape[1],
            "passes": estimator.max_iter,
            "hidden": estimator.hidden_units,
            "rows": rows,
        }
    print_uci_table(
        results,
        "Raw data, defaults (epsilon=inf): against probabilistic backpropagation",
    )
    print()
    return results


def section_private(args, names, reference):
    print(
        f"== private: epsilon=1, delta={DELTA:g}, clip_norm=1.0, bounds from the whole "
        f"file widened by {BOUNDS_WIDENING:.0%} =="
    )
    print(
        "  (the bounds stand in for public domain knowledge of the feature ranges; they "
        "are read from the data here, so the guarantee does not cover them)"
    )
    missing = [name for name in names if reference is None or name not in reference]
    if missing:
        print(f"  running the non-private reference for {missing}")
        reference = {**(reference or {}), **run_uci(missing, args, private=False)}
    results = run_uci(names, args, private=True)
    print_uci_table(
        results,
        "Private (epsilon=1, delta=1e-5, clip_norm=1.0, data-independent bounds)",
        reference={name: reference[name] for name in names},
    )
    print()
    return results


def section_sweep(args):
    print("== sweep: clip_norm at epsilon=1 on kin8nm, split 0 ==")
    print(
        "  (choosing clip_norm on data costs privacy that this epsilon does not count; "
        "the sweep shows the sensitivity of the result to it)"
    )
    X, y = load_uci("kin8nm")
    bounds_X, bounds_y = public_bounds(X), public_bounds(y)
    train, test = split(len(y), 0)
    print(
        f"{'clip_norm':>10}{'RMSE':>10}{'LL':>10}{'sigma':>10}{'eps spent':>11}{'fit s':>8}"
    )
    for clip_norm in SWEEP_CLIP_NORMS:
        estimator = network(bounds_X, bounds_y, epsilon=1.0, clip_norm=clip_norm)
        row = fit_and_score(estimator, X, y, train, test)
        print(
            f"{clip_norm:>10g}{row['rmse']:>10.4g}{row['ll']:>10.4g}"
            f"{row['noise_multiplier']:>10.4g}{row['epsilon_spent']:>11.4g}"
            f"{row['seconds']:>8.1f}"
        )
    print()


def section_private_linear(args, names):
    names = [name for name in names if name in LARGE]
    print(
        f"== private-linear: linear SEP at epsilon=1, delta={DELTA:g}, clip_norm=1.0, "
        "same bounds as private, first 3 splits =="
    )
    print(
        "  (noise given: noise_variance set to the non-private fit's estimate on the "
        "same split, standing in for a public estimate)"
    )
    header = (
        f"{'data set':<27}{'non-private':>12}{'noise inferred':>16}{'noise given':>13}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        X, y = load_uci(name)
        bounds_X, bounds_y = public_bounds(X), public_bounds(y)
        rmses = {"non-private": [], "inferred": [], "given": []}
        for seed in range(min(3, splits_for(name, args))):
            train, test = split(len(y), seed)
            reference = DPSEPRegressor(
                model="linear", epsilon=INF, clip_norm=None, random_state=seed
            )
            rmses["non-private"].append(
                fit_and_score(reference, X, y, train, test)["rmse"]
            )
            for key, noise_variance in [
                ("inferred", None),
                ("given", reference.noise_variance_),
            ]:
                estimator = DPSEPRegressor(
                    model="linear",
                    epsilon=1.0,
                    delta=DELTA,
                    clip_norm=1.0,
                    bounds_X=bounds_X,
                    bounds_y=bounds_y,
                    noise_variance=noise_variance,
                    random_state=seed,
                )
                rmses[key].append(fit_and_score(estimator, X, y, train, test)["rmse"])
        print(
            f"{name:<27}{np.mean(rmses['non-private']):>12.4g}"
            f"{np.mean(rmses['inferred']):>16.4g}{np.mean(rmses['given']):>13.4g}",
            flush=True,
        )
    print("test RMSE, mean over splits, in the target's units")
    print()


def section_scaling(args, names):
    """The location and scale release (scaling_share) against the bounds' map alone."""
    names = [name for name in names if name in LARGE]
    n_splits = args.n_splits or 3
    print(
        f"== scaling: epsilon=1, delta={DELTA:g}, scaling_share 0 (the bounds' map) "
        f'against "auto", the private section\'s bounds and bounds 3x as wide, '
        f"first {n_splits} splits =="
    )
    header = f"{'data set':<27}{'model':>7}{'bounds':>8}{'share 0':>10}{'auto':>10}{'ratio':>7}"
    print(header)
    print("-" * len(header))
    for name in names:
        X, y = load_uci(name)
        hidden, _ = DATASETS[name]
        public = (public_bounds(X), public_bounds(y))
        widened = tuple(
            (lower - (upper - lower), upper + (upper - lower))
            for lower, upper in (
                (np.asarray(b[0], dtype=float), np.asarray(b[1], dtype=float)) for b in public
            )
        )
        for model in ("linear", "mlp"):
            for label, (bounds_X, bounds_y) in (("public", public), ("3x", widened)):
                rmse = {}
                for share in (0.0, "auto"):
                    rmse[share] = []
                    for seed in range(n_splits):
                        train, test = split(len(y), seed)
                        estimator = DPSEPRegressor(
                            model=model,
                            hidden_units=hidden,
                            epsilon=1.0,
                            delta=DELTA,
                            bounds_X=bounds_X,
                            bounds_y=bounds_y,
                            scaling_share=share,
                            # The SEP update, whose noise the release was
                            # measured against.
                            mean_update="sep",
                            random_state=seed,
                        )
                        rmse[share].append(fit_and_score(estimator, X, y, train, test)["rmse"])
                before, after = np.mean(rmse[0.0]), np.mean(rmse["auto"])
                print(
                    f"{name:<27}{model:>7}{label:>8}{before:>10.4g}{after:>10.4g}"
                    f"{after / before:>7.3f}",
                    flush=True,
                )
    print("test RMSE, mean over splits; ratio auto / share 0")
    print()


def section_default_model(args, names):
    """The private default model: the network (Adam) against the linear model.

    Chosen on validation rows: 10% of each training split held out (its own
    seeded permutation); the test splits are not read.
    """
    if args.datasets is None:
        # protein's network fits take minutes each: name it to include it
        names = [name for name in names if name != "protein-tertiary-structure"]
    n_splits = args.n_splits or 3
    print(
        f"== default-model: DPSEPRegressor(model=...) at its private defaults, "
        f"delta={DELTA:g}, the private section's bounds, validation RMSE (10% of "
        f"each training split), first {n_splits} splits =="
    )
    header = (
        f"{'data set':<27}{'epsilon':>8}{'linear':>10}{'mlp':>10}{'ratio':>7}"
        f"{'mean':>10}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        X, y = load_uci(name)
        bounds_X, bounds_y = public_bounds(X), public_bounds(y)
        for epsilon in (1.0, 3.0):
            rmse = {"linear": [], "mlp": [], "mean": []}
            for seed in range(n_splits):
                train, _ = split(len(y), seed)
                order = np.random.RandomState(10_000 + seed).permutation(train.size)
                validation, fit = train[order[: train.size // 10]], train[order[train.size // 10 :]]
                rmse["mean"].append(
                    float(np.sqrt(np.mean((y[validation] - y[fit].mean()) ** 2)))
                )
                for model in ("linear", "mlp"):
                    estimator = DPSEPRegressor(
                        model=model,
                        epsilon=epsilon,
                        delta=DELTA,
                        bounds_X=bounds_X,
                        bounds_y=bounds_y,
                        random_state=seed,
                    )
                    rmse[model].append(
                        fit_and_score(estimator, X, y, fit, validation)["rmse"]
                    )
            linear, mlp, mean = (np.mean(rmse[key]) for key in ("linear", "mlp", "mean"))
            print(
                f"{name:<27}{epsilon:>8g}{linear:>10.4g}{mlp:>10.4g}{mlp / linear:>7.3f}"
                f"{mean:>10.4g}",
                flush=True,
            )
    print("validation RMSE, mean over splits; ratio mlp / linear; mean: predicting")
    print("the training mean")
    print()
