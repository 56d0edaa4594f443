"""bench_sep: data, splits, bounds, metrics and the network of every section.

The UCI sets are read from the ``uci`` folder of
``skprivfact.datasets.get_data_home()``.
"""

import math
import statistics
import time
import warnings

import numpy as np

from skprivfact.datasets import get_data_home
from skprivfact.sep import DPSEPRegressor

UCI = get_data_home() / "uci"
INF = float("inf")
DELTA = 1e-5
# name: (hidden units, published PBP test RMSE)
DATASETS = {
    "concrete": (50, 5.67),
    "energy": (50, 1.80),
    "kin8nm": (50, 0.098),
    "naval-propulsion-plant": (50, 0.006),
    "power-plant": (50, 4.12),
    "protein-tertiary-structure": (100, 4.73),
    "wine-quality-red": (50, 0.635),
    "yacht": (50, 1.02),
}
LARGE = {
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
}
N_PASSES = 40
# Splits per set in probabilistic backpropagation's protocol (20; protein 5).
PROTOCOL_SPLITS = {"protein-tertiary-structure": 5}
BOUNDS_WIDENING = 0.05




def load_uci(name):
    folder = UCI / name
    data = np.loadtxt(folder / "data.txt")
    features = np.atleast_1d(np.loadtxt(folder / "index_features.txt", dtype=int))
    target = int(np.loadtxt(folder / "index_target.txt", dtype=int))
    return data[:, features], data[:, target]


def split(n_samples, seed):
    """Random 90/10 split from its own seeded permutation."""
    order = np.random.RandomState(seed).permutation(n_samples)
    n_train = round(0.9 * n_samples)
    return order[:n_train], order[n_train:]


def public_bounds(values):
    """Min and max over the whole file, widened by 5% of the range each side."""
    lower, upper = values.min(axis=0), values.max(axis=0)
    margin = BOUNDS_WIDENING * np.where(upper > lower, upper - lower, 1.0)
    if values.ndim == 1:
        return float(lower - margin), float(upper + margin)
    return lower - margin, upper + margin


def gaussian_log_likelihood(y, mean, std):
    return float(
        np.mean(-0.5 * np.log(2 * math.pi * std**2) - 0.5 * ((y - mean) / std) ** 2)
    )


def mean_se(values):
    values = np.asarray(values, dtype=float)
    se = (
        values.std(ddof=1) / math.sqrt(values.size) if values.size > 1 else float("nan")
    )
    return float(values.mean()), float(se)


def fmt(mean, se, digits=4):
    return f"{mean:.{digits}g} ± {se:.2g}"


def splits_for(name, args):
    if args.n_splits is not None:
        return args.n_splits
    return PROTOCOL_SPLITS.get(name, 20)


def passes_for(name, args):
    return args.protein_passes if name == "protein-tertiary-structure" else N_PASSES


def fit_and_score(estimator, X, y, train, test):
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X[train], y[train])
        seconds = time.perf_counter() - start
        mean, std = estimator.predict(X[test], return_std=True)
    messages = sorted({f"{w.category.__name__}: {str(w.message)[:80]}" for w in caught})
    finite = bool(
        np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)
    )
    rmse = float(np.sqrt(np.mean((mean - y[test]) ** 2))) if finite else float("nan")
    ll = gaussian_log_likelihood(y[test], mean, std) if finite else float("nan")
    return {
        "rmse": rmse,
        "ll": ll,
        "seconds": seconds,
        "finite": finite,
        "warnings": messages,
        "noise_multiplier": float(estimator.noise_multiplier_),
        "epsilon_spent": float(estimator.privacy_spent_[0]),
        "batch_size": float(estimator.sample_rate_ * len(train)),
    }


def network(bounds_X, bounds_y, hidden_units=50, **kwargs):
    """The network model of the benchmark: one hidden layer (50 units by
    default), 40 passes and seed 0 unless ``kwargs`` say otherwise."""
    params = {"delta": DELTA, "max_iter": N_PASSES, "random_state": 0, **kwargs}
    return DPSEPRegressor(
        model="mlp",
        hidden_units=hidden_units,
        bounds_X=bounds_X,
        bounds_y=bounds_y,
        **params,
    )


def run_uci(names, args, private, clip_norm=1.0):
    """Per data set, the list of per-split results."""
    results = {}
    for name in names:
        X, y = load_uci(name)
        hidden, _ = DATASETS[name]
        n_passes = passes_for(name, args)
        if private:
            bounds_X, bounds_y = public_bounds(X), public_bounds(y)
        rows = []
        for seed in range(splits_for(name, args)):
            train, test = split(len(y), seed)
            if private:
                estimator = network(
                    bounds_X,
                    bounds_y,
                    hidden,
                    epsilon=1.0,
                    clip_norm=clip_norm,
                    max_iter=n_passes,
                    random_state=seed,
                )
            else:
                estimator = network(
                    None,
                    None,
                    hidden,
                    epsilon=INF,
                    clip_norm=None,
                    max_iter=n_passes,
                    random_state=seed,
                )
            row = fit_and_score(estimator, X, y, train, test)
            rows.append(row)
            print(
                f"  {name} split {seed}: RMSE {row['rmse']:.4g}, LL {row['ll']:.4g}, "
                f"{row['seconds']:.1f} s"
                + (f", eps spent {row['epsilon_spent']:.3g}" if private else "")
                + (f", warnings {row['warnings']}" if row["warnings"] else ""),
                flush=True,
            )
        results[name] = {"n": len(y), "d": X.shape[1], "passes": n_passes, "rows": rows}
    return results


def baseline_rmse(name, n_splits):
    """Mean test RMSE of predicting the training split's mean."""
    _, y = load_uci(name)
    rmses = []
    for seed in range(n_splits):
        train, test = split(len(y), seed)
        rmses.append(np.sqrt(np.mean((y[test] - y[train].mean()) ** 2)))
    return float(np.mean(rmses))


def print_uci_table(results, title, reference=None):
    print()
    print(title)
    header = (
        f"{'data set':<27}{'n':>6}{'d':>3}{'H':>4}{'pass':>5}{'B':>5}  "
        f"{'test RMSE':>18}  {'median':>8}  {'mean-pred':>9}  {'test LL':>18}  {'fit s':>7}"
    )
    if reference is None:
        header += f"  {'PBP':>6}  {'ratio':>6}  within 10%"
    else:
        header += f"  {'non-priv':>8}  {'ratio':>6}  within 15% (n>=8000)"
    print(header)
    print("-" * len(header))
    for name, result in results.items():
        rows = result["rows"]
        rmse = mean_se([r["rmse"] for r in rows])
        ll = mean_se([r["ll"] for r in rows])
        median_rmse = statistics.median(r["rmse"] for r in rows)
        seconds = statistics.mean(r["seconds"] for r in rows)
        line = (
            f"{name:<27}{result['n']:>6}{result['d']:>3}"
            f"{result.get('hidden', DATASETS[name][0]):>4}"
            f"{result['passes']:>5}{rows[0]['batch_size']:>5.0f}  "
            f"{fmt(*rmse):>18}  {median_rmse:>8.4g}  {baseline_rmse(name, len(rows)):>9.4g}  "
            f"{fmt(*ll):>18}  {seconds:>7.1f}"
        )
        if reference is None:
            published = DATASETS[name][1]
            ratio = rmse[0] / published
            line += f"  {published:>6.3g}  {ratio:>6.3f}  {'yes' if ratio <= 1.10 else 'NO'}"
        else:
            base = mean_se([r["rmse"] for r in reference[name]["rows"]])[0]
            ratio = rmse[0] / base
            flag = ("yes" if ratio <= 1.15 else "NO") if name in LARGE else "(n < 8000)"
            line += f"  {base:>8.4g}  {ratio:>6.3f}  {flag}"
        if not all(r["finite"] for r in rows):
            line += "  [non-finite predictions]"
        print(line)
    if reference is not None:
        print("  noise multiplier / epsilon spent per set (split 0):")
        for name, result in results.items():
            row = result["rows"][0]
            print(
                f"    {name:<27} sigma {row['noise_multiplier']:.4g}, "
                f"epsilon spent {row['epsilon_spent']:.4g} (delta {DELTA:g})"
            )
    print(
        "ratio <= 1.10 (1.15) counts as within 10% (15%); RMSE and LL in the target's "
        "original units, mean ± standard error over splits (median: median RMSE over "
        "splits); mean-pred: RMSE of predicting the training mean on the same splits; the "
        "ratio is of means; B = expected batch size; fit s = mean seconds per fit."
    )


def test_rmse(estimator, X, y):
    return float(np.sqrt(np.mean((estimator.predict(X) - y) ** 2)))
