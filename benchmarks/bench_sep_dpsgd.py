"""DP-SEP's network against DP-SGD (Opacus) at the same (epsilon, delta).

Run from the project root (with the package installed, or ``PYTHONPATH=.``;
needs the ``baseline`` extra: torch and opacus)::

    python benchmarks/bench_sep_dpsgd.py [--datasets kin8nm power-plant ...]
        [--epsilons 1 3] [--n-splits 5] [--sep-grid default|tuned|adam|adam-wide]
        [--relation add_remove|substitution] [--tune-splits K] [--final-fits R]
        [--settings-from PATH ...] [--save-json PATH] [--tables-from-json PATH ...]
        [--tune-fits R] [--refine K R] [--schedules constant [linear]] [--higher-rate]
        [--sep-probes JSON]
        [--sep-clip-norms C ...] [--dpsgd-clip-norms C ...] [--sep-params JSON]
        [--methods sep|dpsgd ...] [--fit-cache PATH]
        [--explore-sep JSON [--explore-fits R]]

Protocol, per data set, epsilon and split (the random 90/10 splits of
``bench_sep.py``, delta 1e-5, the public bounds of its ``private`` section,
inputs and target mapped by them to [-1, 1] for both methods, predictions
clipped to ``bounds_y`` for both):

- a validation split, 10% of the training split (its own seeded
  permutation), is carved out; each setting of a grid fixed in advance is
  trained on the remaining 90% and scored by validation RMSE; the best
  setting is trained again on the whole training split and scored on the
  test split. The test split never chooses anything.
- The final fits are seeded independently of the tuning fits (seeds
  ``1000 * (split + 1) + r``, ``r < R``; the tuning fits use the split's
  index): a refit with the tuning fit's seed starts again from the initial
  weights (torch's generator for DP-SGD, ``random_state`` for DP-SEP's
  initial means) that the chosen setting was picked with, which flatters
  the test score of both methods. DP-SEP draws its noise and batches from
  the operating system whatever the seed. With ``--final-fits R`` each
  method's chosen setting is trained R times (default 1) and its test RMSE
  and log-likelihood are the means over those fits; ``--reuse-*`` refuses
  rows from a different number of final fits.
- ``--tune-fits T`` scores each setting of both grids by its mean
  validation RMSE over T fits (seeds ``split + 100 * t``, ``t < T``; default
  1). A method whose fits spread widely from one draw of noise to the next
  otherwise tends to choose the setting that one lucky fit flattered.
  ``--reuse-*`` refuses rows from a different number of tuning fits.
- ``--refine K R`` (both grids): after that, the K settings with the lowest
  mean are fitted again up to R fits each (the seeds continue those of
  ``--tune-fits``), and the choice is the lowest mean of R among those K.
  The best mean of T fits over a grid of 128 settings is often a lucky one
  (the more so for the method whose fits spread more between draws of
  noise); a setting put first by luck rarely stays first over R fits.
  DP-SGD's noise variance (below) is then the mean over R validation fits
  where a grid was searched, over T where its grid is one setting (later
  splits of ``--tune-splits``, ``--settings-from``).
  ``--reuse-*`` refuses rows from a different refinement.
- DP-SGD: ``torch.nn`` network of the same shape as DP-SEP's (one hidden layer
  of 50 ReLU units on every set, protein included, where ``bench_sep.py``
  uses 100), squared loss,
  Adam, Opacus's ``PrivacyEngine`` (its default PRV accountant) with
  ``make_private_with_epsilon`` at the target (epsilon, delta), Poisson
  sampling, flat per-example clipping. The grid: expected batch 256 or 1024,
  clipping norm 0.1 or 1, learning rate 0.003, 0.01 or 0.03, 20 epochs at
  batch 256 and 50 at batch 1024, on every set. Its point predictions get a
  homoscedastic Gaussian noise model for the test log-likelihood: the
  variance is the chosen setting's mean squared error on the validation
  split (estimated on validation, not privately; the smallest of the
  grid's, so it tends to be low, which lowers DP-SGD's log-likelihood where
  its test error is larger).
- ``--schedules constant linear`` crosses both grids with the step size's
  schedule: constant (the default, alone) or falling linearly over the
  training steps, from the grid's rate to that rate over the number of steps
  at the last one (DP-SGD: torch's ``LambdaLR`` on Adam, stepped per
  batch; DP-SEP: ``learning_rate_schedule="linear"`` over its Adam
  updates; its ``mean_update="sep"`` settings take no step size and are
  not crossed), so each method's grid doubles and each chooses on
  validation.
- ``--higher-rate`` adds each method's next step size up (DP-SEP 0.3,
  DP-SGD 0.1) to the settings at its grid's largest one, before the
  schedules cross the grids: with ``adam-wide``, 16 settings each, 32 with
  both schedules.
- ``--sep-probes JSON`` sets the tuning constants or probes of
  ``--explore-sep`` below (a dict, keys starting with ``_``) for every
  DP-SEP fit of the run, tuning and final fits alike, so that a change
  explored on validation rows is measured by the whole protocol before it
  becomes a default.
- ``--sep-clip-norms C ...`` crosses DP-SEP's grid with these clipping
  norms (each setting gets ``clip_norm``), as DP-SGD's grid has two; without
  it DP-SEP keeps its default norm. ``--dpsgd-clip-norms C ...`` replaces
  DP-SGD's two norms by these, so that both grids can be widened alike
  (e.g. a third norm between each method's two).
- ``--sep-params JSON`` sets constructor arguments of ``DPSEPRegressor``
  (a dict, e.g. ``{"adam_sites": "cavity"}``) for every DP-SEP setting of the
  run, before ``--sep-clip-norms`` crosses the grid.
- ``--tune-splits K`` searches the grids on the first K splits only (to
  bound the run time on protein); later splits train the setting chosen most
  often there, and DP-SGD's noise variance still comes from their own
  validation split. The splits are drawn independently, so the first K
  splits' validation rows include some of the later splits' test rows
  (about 17% of them with K = 2): those test rows then took part in
  choosing the setting they are scored with, for both methods alike.
- DP-SEP: ``DPSEPRegressor(model="mlp")`` at the same (epsilon, delta);
  ``--sep-grid default`` fits its defaults on the whole training split
  (no tuning); ``tuned`` chooses among ``mean_update="sep"`` settings
  (accountant, clipping norm, damping, batch size) by the same validation
  protocol, and ``adam`` among ``mean_update="adam"`` settings (learning
  rate 0.01, 0.03 or 0.1; 40 or 100 passes; batch 256), ``adam-wide`` the
  same with batches of 256 or 1024 (12 settings, as many as DP-SGD's).
- ``--settings-from`` takes each method's chosen setting per split from an
  earlier run's ``--save-json`` file instead of searching the grid again
  (DP-SGD still trains the setting once on the validation split, for its
  noise variance), to repeat the final fits alone.
- ``--reuse-sep`` / ``--reuse-dpsgd`` take one method's per-split rows from an
  earlier run's ``--save-json`` file (same splits), to compare a new setting
  of the other method without training this one again.
- ``--methods sep`` (or ``dpsgd``) runs one method only, so that the two
  can run side by side on two cores; a later run with ``--reuse-sep`` and
  ``--reuse-dpsgd`` on their files joins them into one table (and one
  ``--save-json`` file) without fitting anything; ``--tables-from-json`` on
  both files prints that table alone (it merges by data set and method and
  refuses one method's rows from two files, or unequal numbers of splits).
- ``--fit-cache PATH`` appends each tuning fit's validation RMSE to a
  JSON-lines file as it ends and reads it back instead of refitting, so
  that a run longer than one sitting (protein under four tuning fits)
  resumes where it was stopped; DP-SGD's fits are seeded and would repeat
  exactly, DP-SEP's draw fresh noise, so a resumed search is one search.
- ``--explore-sep JSON`` prints the validation RMSE of DP-SEP settings on
  split 0 (a list of dicts of constructor arguments and of ``sep.py``'s
  tuning constants, keys starting with ``_``, or the probe
  ``_ADAM_SITE_VARIANCE_SCALE``: the Adam phase's sites computed with the
  weights' variances times it, see ``_sep_internals``; the test split is
  not read),
  the mean over ``--explore-fits R`` fits. The constants of
  ``mean_update="adam"`` and its ``"auto"`` averaging were chosen this way
  (``sep.py``'s comments give the figures), e.g.::

      python benchmarks/bench_sep_dpsgd.py --epsilons 1 --explore-fits 4 \
          --datasets kin8nm naval-propulsion-plant power-plant \
          --explore-sep '[{"_ADAM_PRECISION_WEIGHT": 0.03}, {}, {"averaging_fraction": 0.5}]'

Neither method's tuning is charged to the privacy budget: every setting of a
grid reads the private training data, so a real deployment would pay for the
search (or tune on public data). This favours whichever method is tuned, so
``--sep-grid default`` against a tuned DP-SGD favours DP-SGD, though less
than it seems: DP-SEP's Adam defaults (warm-up share, precision weight,
averaging, batch size) were themselves chosen on validation rows of split 0
of some of these sets (``--explore-sep``; the comments in ``sep.py`` give the
figures). The validation noise variance given to DP-SGD is likewise free.

Neighbouring relations: DP-SEP's guarantee holds for replacing one row
(substitution); Opacus's accountant counts adding or removing one row, the
weaker relation for the same epsilon (a replacement is a removal and an
addition). ``--relation substitution`` trains DP-SGD with Opacus at the noise
multiplier calibrated for substitution by ``skprivfact.accounting`` (tight
PLD accountant, same sampling rate and number of steps), so both claims are
the same; the default ``add_remove`` is Opacus as a user would run it.

Threads: torch, BLAS and numba one each.
"""

import argparse
import itertools
import json
import math
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _sep_common import (
    DELTA,
    LARGE,
    fmt,
    gaussian_log_likelihood,
    load_uci,
    mean_se,
    network,
    public_bounds,
    split,
)
from _sep_internals import sep_constants
from threadpoolctl import threadpool_limits

from skprivfact.accounting import calibrate_noise_multiplier, make_accountant

VALIDATION_FRACTION = 0.1
FINAL_SEED_STRIDE = 1000
# --tune-fits: a setting's r-th tuning fit on split s has seed s + r * this.
TUNING_SEED_STRIDE = 100
# One hidden layer of 50 ReLU units on every set, protein included (where
# bench_sep.py follows probabilistic backpropagation's 100).
HIDDEN_UNITS = 50
# (expected batch size, epochs) pairs, then clipping norms and learning rates.
DPSGD_SCHEDULES = [(256, 20), (1024, 50)]
DPSGD_CLIP_NORMS = [0.1, 1.0]
DPSGD_LEARNING_RATES = [0.003, 0.01, 0.03]
# --higher-rate: each method's next step size up (about 3 times its grid's
# largest), where both grids' choices sat at their upper edge.
HIGHER_RATES = {"sep": 0.3, "dpsgd": 0.1}
# Constructor settings of DPSEPRegressor chosen among on validation.
SEP_GRIDS = {
    "default": [{}],
    "tuned": [
        {
            "accountant": "pld",
            "mean_update": "sep",
            "clip_norm": clip_norm,
            "damping": damping,
            "batch_size": batch_size,
        }
        for clip_norm, damping, batch_size in itertools.product(
            [1.0, 2.0], ["auto", 0.3], [64, "auto"]
        )
    ],
    # Adam on the means from released gradients: batch size, step size and
    # passes, 12 settings, as many as DP-SGD's grid.
    "adam-wide": [
        {
            "accountant": "pld",
            "mean_update": "adam",
            "batch_size": batch_size,
            "learning_rate": learning_rate,
            "max_iter": passes,
        }
        for batch_size, learning_rate, passes in itertools.product(
            [256, 1024], [0.01, 0.03, 0.1], [40, 100]
        )
    ],
}
# Adam on the means from released gradients, batches of 256: step size and passes.
SEP_GRIDS["adam"] = [
    setting for setting in SEP_GRIDS["adam-wide"] if setting["batch_size"] == 256
]


def dpsgd_settings(clip_norms=DPSGD_CLIP_NORMS):
    """DP-SGD's settings: batch and epochs, clipping norm, learning rate."""
    return [
        {"batch_size": batch, "epochs": epochs, "clip_norm": clip, "learning_rate": lr}
        for (batch, epochs), clip, lr in itertools.product(
            DPSGD_SCHEDULES, clip_norms, DPSGD_LEARNING_RATES
        )
    ]


SCHEDULES = ["constant", "linear"]


def with_higher_rate(sep_grid, dpsgd_grid):
    """Both grids with each setting at the largest step size repeated at
    ``HIGHER_RATES`` (a grid without step sizes is left alone): 4 more
    settings each for ``adam-wide`` and DP-SGD's grid, 2 for ``adam``."""

    def extended(grid, higher):
        rates = [setting["learning_rate"] for setting in grid if "learning_rate" in setting]
        if not rates:
            return list(grid)
        top = max(rates)
        return grid + [
            {**setting, "learning_rate": higher}
            for setting in grid
            if setting.get("learning_rate") == top
        ]

    return extended(sep_grid, HIGHER_RATES["sep"]), extended(dpsgd_grid, HIGHER_RATES["dpsgd"])


def with_schedules(sep_grid, dpsgd_grid, schedules):
    """Both grids crossed with the step-size schedules (a constant schedule
    adds no key, so that settings saved without schedules still match;
    DP-SEP's ``mean_update="sep"`` settings take no step size and are not
    crossed)."""

    def crossed(grid, key):
        settings = [
            setting
            if schedule == "constant" or setting.get("mean_update") == "sep"
            else {**setting, key: schedule}
            for schedule in schedules
            for setting in grid
        ]
        return [s for i, s in enumerate(settings) if s not in settings[:i]]

    return crossed(sep_grid, "learning_rate_schedule"), crossed(dpsgd_grid, "schedule")


def validation_split(train, seed):
    """Split the training indices into (fit, validation), its own permutation."""
    order = np.random.RandomState(10_000 + seed).permutation(train.size)
    n_validation = round(VALIDATION_FRACTION * train.size)
    return train[order[n_validation:]], train[order[:n_validation]]


class Scaled:
    """The public-bounds map of inputs and target to [-1, 1] (both methods)."""

    def __init__(self, X, y):
        self.lower_X, self.upper_X = public_bounds(X)
        self.lower_y, self.upper_y = public_bounds(y)
        self.bounds_X = (self.lower_X, self.upper_X)
        self.bounds_y = (self.lower_y, self.upper_y)
        span = self.upper_X - self.lower_X
        self.X = np.clip(2 * (X - self.lower_X) / span - 1, -1, 1).astype(np.float32)
        self.y = (2 * (y - self.lower_y) / (self.upper_y - self.lower_y) - 1).astype(
            np.float32
        )

    def unscale_y(self, values):
        values = (values + 1) / 2 * (self.upper_y - self.lower_y) + self.lower_y
        return np.clip(values, self.lower_y, self.upper_y)


def train_dpsgd(X, y, hidden, epsilon, setting, seed, relation):
    """Train the network with Opacus's DP-SGD; returns (predict, noise multiplier, epsilon)."""
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(X.shape[1], hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=setting["learning_rate"])
    loader = DataLoader(
        TensorDataset(torch.from_numpy(X), torch.from_numpy(y[:, None])),
        batch_size=setting["batch_size"],
    )
    engine = PrivacyEngine()
    common = {
        "module": model,
        "optimizer": optimizer,
        "data_loader": loader,
        "max_grad_norm": setting["clip_norm"],
        "poisson_sampling": True,
    }
    if relation == "add_remove":
        model, optimizer, loader = engine.make_private_with_epsilon(
            **common,
            target_epsilon=epsilon,
            target_delta=DELTA,
            epochs=setting["epochs"],
        )
    else:
        # Opacus's own sampling rate and number of steps, a multiplier for
        # replacing one row (sensitivity 2 * clip_norm of the sum). Its
        # Poisson loader runs int(1 / sample_rate) steps an epoch, which
        # float rounding makes one less than len(loader) for some lengths
        # (93, 99, ...).
        sample_rate = 1.0 / len(loader)
        steps_per_epoch = int(1 / sample_rate)
        sigma = calibrate_noise_multiplier(
            epsilon,
            DELTA,
            sample_rate=sample_rate,
            steps=setting["epochs"] * steps_per_epoch,
            accountant="pld",
            neighbouring_relation="substitution",
        )
        model, optimizer, loader = engine.make_private(**common, noise_multiplier=sigma)
    loss = torch.nn.MSELoss()
    # "linear": the step size falls linearly over the training steps, from
    # the setting's rate to that rate / n_steps at the last one, as
    # DPSEPRegressor(learning_rate_schedule="linear") does over its Adam
    # updates.
    n_steps = setting["epochs"] * len(loader)
    linear = setting.get("schedule", "constant") == "linear"
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1.0 - step / n_steps if linear else 1.0
    )
    for _ in range(setting["epochs"]):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss(model(inputs), targets).backward()
            optimizer.step()
            scheduler.step()
    if relation == "add_remove":
        spent = engine.get_epsilon(DELTA)
    else:
        spent = (
            make_accountant("pld", "substitution")
            .compose(sigma, sample_rate, setting["epochs"] * steps_per_epoch)
            .get_epsilon(DELTA)
        )

    def predict(X_new):
        with torch.no_grad():
            return model(torch.from_numpy(X_new)).numpy()[:, 0].astype(np.float64)

    return predict, float(optimizer.noise_multiplier), float(spent)


def tuning_seed(seed, r):
    """Seed of a setting's r-th tuning fit on split ``seed``: the split's index
    first (so that one tuning fit is the protocol's original), then strides
    below the final fits'."""
    return seed + TUNING_SEED_STRIDE * r


def saved_tuning_fits(title):
    """The ``--tune-fits`` of a run, from the title its ``--save-json`` file holds."""
    match = re.search(r", (\d+) tuning fits per setting", title)
    return int(match.group(1)) if match else 1


def saved_refinement(title):
    """The ``--refine`` of a run (None without), from its ``--save-json`` title."""
    match = re.search(r", the (\d+) best refined to (\d+) fits", title)
    return (int(match.group(1)), int(match.group(2))) if match else None


def final_seeds(seed, n_fits):
    """Seeds of the final fits, none of them a tuning fit's (``tuning_seed``)."""
    return [FINAL_SEED_STRIDE * (seed + 1) + r for r in range(n_fits)]


def rmse(mean, target):
    if not np.all(np.isfinite(mean)):
        return math.inf
    return float(np.sqrt(np.mean((mean - target) ** 2)))


class FitCache:
    """Validation RMSEs of tuning fits, kept in a JSON-lines file
    (``--fit-cache``), so that a run stopped part-way starts again where it
    stopped: a tuning fit already in the file is read, not refitted."""

    def __init__(self, path=None):
        self.path = path
        self.scores = {}
        if path is not None and path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    entry = json.loads(line)
                    self.scores[entry["fit"]] = entry["score"]

    def score(self, fit, compute):
        """The score of the tuning fit described by ``fit`` (a JSON-able list),
        from the file (or this run) or from ``compute()``, which is then kept
        (and appended to the file)."""
        fit = json.dumps(fit, sort_keys=True)
        if fit not in self.scores:
            self.scores[fit] = compute()
            if self.path is not None:
                with self.path.open("a") as file:
                    file.write(json.dumps({"fit": fit, "score": self.scores[fit]}) + "\n")
        return self.scores[fit]


def choose_setting(n_settings, score, n_tuning_fits, refine=None):
    """The index of the setting with the lowest mean validation RMSE, and that mean.

    ``score(i, r)`` is the validation RMSE of setting ``i``'s tuning fit
    ``r`` (seed ``tuning_seed(split, r)``). Each setting is scored by the
    mean of ``n_tuning_fits`` fits; with ``refine=(K, R)`` the K best are
    scored again by the mean of R fits (the first ``n_tuning_fits`` of them
    the same) and the best of those K is chosen, so that a setting one lucky
    draw of noise put first must hold its place over more fits.
    """
    means = [
        statistics.mean(score(i, r) for r in range(n_tuning_fits)) for i in range(n_settings)
    ]
    candidates = range(n_settings)
    if refine is not None and n_settings > 1:
        top, n_fits = refine
        candidates = sorted(candidates, key=means.__getitem__)[:top]
        for i in candidates:
            means[i] = statistics.mean(score(i, r) for r in range(n_fits))
    best = min(candidates, key=means.__getitem__)
    return best, means[best]


def run_dpsgd(
    data, y, hidden, epsilon, train, test, seed, relation, grid, n_fits, n_tuning_fits=1,
    cache=None, cache_key=None, refine=None,
):
    cache = cache or FitCache()
    fit, validation = validation_split(train, seed)

    def tuning_fit(setting, tuning_seed):
        predict, _, _ = train_dpsgd(
            data.X[fit], data.y[fit], hidden, epsilon, setting, tuning_seed, relation
        )
        return rmse(data.unscale_y(predict(data.X[validation])), y[validation])

    def score(i, r):
        setting, fit_seed = grid[i], tuning_seed(seed, r)
        return cache.score(
            [cache_key, relation, seed, "dpsgd", setting, fit_seed],
            lambda: tuning_fit(setting, fit_seed),
        )

    best, validation_rmse = choose_setting(len(grid), score, n_tuning_fits, refine)
    setting = grid[best]
    # Noise model of the point network: the validation RMSE of the chosen
    # setting (the mean over its tuning fits).
    noise_std = validation_rmse
    rmses, lls, seconds = [], [], []
    for final_seed in final_seeds(seed, n_fits):
        start = time.process_time()
        predict, sigma, spent = train_dpsgd(
            data.X[train], data.y[train], hidden, epsilon, setting, final_seed, relation
        )
        seconds.append(time.process_time() - start)
        mean = data.unscale_y(predict(data.X[test]))
        rmses.append(rmse(mean, y[test]))
        lls.append(gaussian_log_likelihood(y[test], mean, noise_std))
    return {
        "rmse": statistics.mean(rmses),
        "ll": statistics.mean(lls),
        "rmse_fits": rmses,
        "setting": setting,
        "validation_rmse": validation_rmse,
        "noise_multiplier": sigma,
        "epsilon_spent": spent,
        "cpu_seconds": statistics.median(seconds),
    }


def fit_sep(data, X, y, hidden, epsilon, rows, seed, setting):
    # A setting's constructor arguments override the defaults given here; its
    # keys starting with "_" are sep.py's tuning constants or probes.
    constants = {k: v for k, v in setting.items() if k.startswith("_")}
    params = {
        "hidden_units": hidden,
        "epsilon": epsilon,
        "random_state": seed,
        **{k: v for k, v in setting.items() if not k.startswith("_")},
    }
    estimator = network(data.bounds_X, data.bounds_y, **params)
    with warnings.catch_warnings(record=True) as caught, sep_constants(**constants):
        warnings.simplefilter("always")
        estimator.fit(X[rows], y[rows])
    for warning in caught:
        print(f"    DP-SEP warning: {warning.message}", flush=True)
    return estimator


def run_sep(
    data, X, y, hidden, epsilon, train, test, seed, grid, n_fits, n_tuning_fits=1,
    cache=None, cache_key=None, refine=None,
):
    cache = cache or FitCache()
    best, validation_rmse = 0, None
    if len(grid) > 1:
        fit, validation = validation_split(train, seed)

        def tuning_fit(setting, tuning_seed):
            estimator = fit_sep(data, X, y, hidden, epsilon, fit, tuning_seed, setting)
            return rmse(estimator.predict(X[validation]), y[validation])

        def score(i, r):
            setting, fit_seed = grid[i], tuning_seed(seed, r)
            return cache.score(
                [cache_key, seed, "sep", setting, fit_seed],
                lambda: tuning_fit(setting, fit_seed),
            )

        best, validation_rmse = choose_setting(len(grid), score, n_tuning_fits, refine)
    setting = grid[best]
    rmses, lls, seconds = [], [], []
    for final_seed in final_seeds(seed, n_fits):
        start = time.process_time()
        estimator = fit_sep(data, X, y, hidden, epsilon, train, final_seed, setting)
        seconds.append(time.process_time() - start)
        mean, std = estimator.predict(X[test], return_std=True)
        rmses.append(rmse(mean, y[test]))
        lls.append(gaussian_log_likelihood(y[test], mean, std))
    return {
        "rmse": statistics.mean(rmses),
        "ll": statistics.mean(lls),
        "rmse_fits": rmses,
        "setting": setting,
        "validation_rmse": validation_rmse,
        "noise_multiplier": float(estimator.noise_multiplier_),
        "epsilon_spent": float(estimator.privacy_spent_[0]),
        "cpu_seconds": statistics.median(seconds),
    }


def explore_sep(args):
    """Validation RMSE of DP-SEP settings on split 0 (the test split unread).

    A setting's keys that start with ``_`` are tuning constants of ``sep.py``
    (``_sep_internals.TUNABLE_CONSTANTS``) or probes (``_sep_internals.PROBES``),
    set for its fits; the others are
    constructor arguments. Each setting is fitted ``--explore-fits`` times
    (``random_state`` 0, 1, ...; the noise is secret) and the mean validation
    RMSE is printed with the fits' own.
    """
    print(
        f"DP-SEP settings, validation RMSE on split 0 (mean of {args.explore_fits} "
        f"fit{'s' if args.explore_fits > 1 else ''}), delta {DELTA:g}"
    )
    with threadpool_limits(limits=1, user_api="blas"):
        for name in args.datasets:
            X, y = load_uci(name)
            data = Scaled(X, y)
            train, _ = split(len(y), 0)
            fit, validation = validation_split(train, 0)
            for epsilon in args.epsilons:
                for setting in args.explore_sep:
                    start = time.process_time()
                    scores = []
                    for seed in range(args.explore_fits):
                        estimator = fit_sep(
                            data, X, y, HIDDEN_UNITS, epsilon, fit, seed, setting
                        )
                        scores.append(rmse(estimator.predict(X[validation]), y[validation]))
                    print(
                        f"  {name} epsilon {estimator.epsilon:g} {setting}: validation RMSE "
                        f"{statistics.mean(scores):.4g} "
                        f"({', '.join(f'{score:.4g}' for score in scores)}), "
                        f"sigma {estimator.noise_multiplier_:.3g}, damping "
                        f"{estimator.damping_:.3g}, batch "
                        f"{estimator.sample_rate_ * fit.size:.0f} "
                        f"[{(time.process_time() - start) / len(scores):.1f} s CPU per fit]",
                        flush=True,
                    )


def most_chosen(rows):
    """The setting chosen on the most splits (the earliest among ties)."""
    keys = [json.dumps(row["setting"], sort_keys=True) for row in rows]
    return json.loads(max(keys, key=lambda key: (keys.count(key), -keys.index(key))))


def print_table(results, title):
    print()
    print(title)
    header = (
        f"{'data set':<27}{'eps':>4}{'spl':>4}  {'DP-SEP RMSE':>18}  {'DP-SGD RMSE':>18}"
        f"{'ratio':>7}{'SEP<=SGD':>9}  {'SEP-SGD paired':>20}  {'DP-SEP LL':>17}"
        f"  {'DP-SGD LL':>17}"
    )
    print(header)
    print("-" * len(header))
    for key, result in results.items():
        name, epsilon = key.rsplit("@", 1)
        sep, sgd = result["sep"], result["dpsgd"]
        sep_rmse = mean_se([r["rmse"] for r in sep])
        sgd_rmse = mean_se([r["rmse"] for r in sgd])
        ratio = sep_rmse[0] / sgd_rmse[0]
        wins = sum(a["rmse"] <= b["rmse"] for a, b in zip(sep, sgd))
        # Same splits for both methods: the paired difference's standard
        # error leaves out the spread between splits that both share.
        paired = mean_se([a["rmse"] - b["rmse"] for a, b in zip(sep, sgd)])
        print(
            f"{name:<27}{float(epsilon):>4g}{len(sep):>4}  {fmt(*sep_rmse):>18}  "
            f"{fmt(*sgd_rmse):>18}{ratio:>7.3f}{f'{wins}/{len(sep)}':>9}  "
            f"{fmt(*paired, digits=3):>20}  "
            f"{fmt(*mean_se([r['ll'] for r in sep])):>17}  "
            f"{fmt(*mean_se([r['ll'] for r in sgd])):>17}"
        )
    print(
        "mean ± standard error over splits; ratio = DP-SEP RMSE / DP-SGD RMSE (means); "
        "SEP<=SGD: splits where DP-SEP's test RMSE is at most DP-SGD's; SEP-SGD "
        "paired: mean ± standard error over splits of DP-SEP's test RMSE less "
        "DP-SGD's on the same split; LL: mean test "
        "log-likelihood per row in the target's units (DP-SGD: Gaussian with the "
        "validation MSE as variance)."
    )
    print("chosen settings (count over splits) and noise multipliers (split 0):")
    for key, result in results.items():
        for method in ("sep", "dpsgd"):
            chosen = statistics.multimode(
                json.dumps(r["setting"], sort_keys=True) for r in result[method]
            )
            counts = {
                c: sum(
                    json.dumps(r["setting"], sort_keys=True) == c
                    for r in result[method]
                )
                for c in chosen
            }
            row = result[method][0]
            print(
                f"  {key:<32}{method:>6}: sigma {row['noise_multiplier']:.3g}, "
                f"epsilon spent {row['epsilon_spent']:.3g}, final fit "
                f"{statistics.median(r['cpu_seconds'] for r in result[method]):.1f} s CPU; "
                f"most chosen {', '.join(f'{c} x{n}' for c, n in counts.items())}"
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    large = sorted(LARGE)
    parser.add_argument("--datasets", nargs="+", choices=large, default=large)
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 3.0])
    parser.add_argument("--n-splits", type=int, default=5)
    parser.add_argument(
        "--tune-splits",
        type=int,
        default=None,
        help="search the grids on the first K splits only; later splits use the "
        "setting chosen most often there (default: every split)",
    )
    parser.add_argument("--sep-grid", choices=sorted(SEP_GRIDS), default="default")
    parser.add_argument(
        "--tune-fits",
        type=int,
        default=1,
        help="score each setting of both grids by its mean validation RMSE over "
        f"this many fits (1 to {FINAL_SEED_STRIDE // TUNING_SEED_STRIDE - 1}; "
        "default 1): fewer choices made by one fit's luck",
    )
    parser.add_argument(
        "--refine",
        type=int,
        nargs=2,
        default=None,
        metavar=("K", "R"),
        help="score the K best settings of each grid (by --tune-fits) again by the "
        "mean of R fits and choose among them (R above --tune-fits)",
    )
    parser.add_argument(
        "--final-fits",
        type=int,
        default=1,
        help="train each chosen setting this many times on the training split "
        "(seeds independent of the tuning fits) and report the mean test scores",
    )
    parser.add_argument(
        "--settings-from",
        type=Path,
        nargs="+",
        default=[],
        help="take each method's chosen setting per split from files written by "
        "--save-json (same splits) instead of searching the grids",
    )
    parser.add_argument(
        "--relation", choices=["add_remove", "substitution"], default="add_remove"
    )
    parser.add_argument(
        "--explore-sep",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="a JSON list of DPSEPRegressor settings (dicts of constructor "
        "arguments, which override hidden_units and the --epsilons value, and "
        "of sep.py's tuning constants or probes, keys starting with '_'): print each "
        "one's validation RMSE on split 0 for each of --epsilons (inf allowed) "
        "and exit",
    )
    parser.add_argument(
        "--explore-fits",
        type=int,
        default=1,
        help="with --explore-sep, fit each setting this many times and print "
        "the mean validation RMSE",
    )
    parser.add_argument(
        "--schedules",
        nargs="+",
        choices=SCHEDULES,
        default=["constant"],
        help="cross both methods' grids with these step-size schedules (DP-SEP's "
        "learning_rate_schedule, the same linear decay for DP-SGD's Adam); "
        "default: constant only",
    )
    parser.add_argument(
        "--higher-rate",
        action="store_true",
        help="add each method's next step size up to its grid (DP-SEP "
        f"{HIGHER_RATES['sep']:g}, DP-SGD {HIGHER_RATES['dpsgd']:g}) before the "
        "schedules cross it",
    )
    parser.add_argument(
        "--sep-probes",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="a JSON dict of sep.py's tuning constants or probes (keys starting "
        "with '_', as in --explore-sep) set for every DP-SEP fit of the run",
    )
    parser.add_argument(
        "--sep-clip-norms",
        type=float,
        nargs="+",
        default=None,
        metavar="C",
        help="cross DP-SEP's grid with these clipping norms (default: its own)",
    )
    parser.add_argument(
        "--dpsgd-clip-norms",
        type=float,
        nargs="+",
        default=None,
        metavar="C",
        help="DP-SGD's clipping norms (default: "
        f"{' and '.join(f'{c:g}' for c in DPSGD_CLIP_NORMS)})",
    )
    parser.add_argument(
        "--sep-params",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="a JSON dict of DPSEPRegressor constructor arguments set for every "
        "DP-SEP setting of the run",
    )
    parser.add_argument("--save-json", type=Path, default=None)
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=["sep", "dpsgd"],
        default=["sep", "dpsgd"],
        help="run these methods only (default both); a file of one method's rows "
        "joins the other's through --reuse-*",
    )
    parser.add_argument(
        "--fit-cache",
        type=Path,
        default=None,
        metavar="PATH",
        help="a JSON-lines file of the tuning fits' validation RMSEs: each fit is "
        "appended as it ends and read instead of refitted when the run is started "
        "again (delete it when the code or the protocol changes)",
    )
    for method in ("sep", "dpsgd"):
        parser.add_argument(
            f"--reuse-{method}",
            type=Path,
            nargs="+",
            default=[],
            help=f"take the {method} rows of files written by --save-json (same "
            "splits) instead of running them again",
        )
    parser.add_argument(
        "--tables-from-json",
        type=Path,
        nargs="+",
        default=None,
        help="print the table of files written by --save-json, merged by data "
        "set and method (one method's rows in two files is an error), and exit",
    )
    args = parser.parse_args(argv)
    if args.tables_from_json is not None:
        merged, sources, titles = {}, {}, []
        for path in args.tables_from_json:
            saved = json.loads(path.read_text())
            # Merged by data set and method: a file of one method's rows
            # (--methods) holds empty rows for the other, which must not blank
            # them, and one method's rows from two files would be ambiguous.
            for key, rows_of in saved["results"].items():
                cell = merged.setdefault(key, {})
                for method, rows in rows_of.items():
                    if not rows:
                        cell.setdefault(method, [])
                        continue
                    if cell.get(method) and cell[method] != rows:
                        parser.error(
                            f"{key}: {method} rows in both {sources[key, method]} "
                            f"and {path}"
                        )
                    cell[method] = rows
                    sources[key, method] = path
            titles.append(saved["title"])
        for key, cell in merged.items():
            if len(cell.get("sep", [])) != len(cell.get("dpsgd", [])):
                parser.error(f"{key}: the files hold different numbers of splits")
        print_table(merged, " | ".join(sorted(set(titles))))
        for (key, method), path in sorted(sources.items()):
            print(f"  {key} {method} rows from {path}")
        return

    import numba
    import torch

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    # Opacus's advice on its RDP orders and secure_mode: not this benchmark's concern.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"opacus\.")
    # Opacus's per-example gradient hooks fire on the first layer, whose input
    # (the data) needs no gradient: torch's notice of that is expected.
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    if args.explore_sep is not None:
        if args.explore_fits < 1:
            parser.error("--explore-fits must be at least 1")
        explore_sep(args)
        return
    for option in ("sep_clip_norms", "dpsgd_clip_norms"):
        norms = getattr(args, option) or []
        if not all(0 < norm < math.inf for norm in norms):
            parser.error(f"--{option.replace('_', '-')} takes positive finite norms")
    grid = SEP_GRIDS[args.sep_grid]
    dpsgd_grid = dpsgd_settings(args.dpsgd_clip_norms or DPSGD_CLIP_NORMS)
    if args.higher_rate:
        grid, dpsgd_grid = with_higher_rate(grid, dpsgd_grid)
    grid, dpsgd_grid = with_schedules(grid, dpsgd_grid, args.schedules)
    if args.sep_probes:
        if not all(key.startswith("_") for key in args.sep_probes):
            parser.error("--sep-probes takes keys starting with '_' only")
        # Unknown names and values out of range fail here, before any data is read.
        try:
            with sep_constants(**args.sep_probes):
                pass
        except ValueError as error:
            parser.error(f"--sep-probes: {error}")
        grid = [{**setting, **args.sep_probes} for setting in grid]
    if args.sep_params:
        from skprivfact import DPSEPRegressor

        # Unknown or invalid arguments fail here, before any data is read.
        try:
            DPSEPRegressor(**args.sep_params)._validate_params()
        except (TypeError, ValueError) as error:
            parser.error(f"--sep-params: {error}")
        grid = [{**setting, **args.sep_params} for setting in grid]
    if args.sep_clip_norms:
        grid = [
            {**setting, "clip_norm": norm}
            for norm in args.sep_clip_norms
            for setting in grid
        ]
    title = (
        f"DP-SEP ({args.sep_grid}) against DP-SGD (Opacus, "
        f"{'PRV, add/remove' if args.relation == 'add_remove' else 'substitution'}), "
        f"delta {DELTA:g}, {args.n_splits} splits, {args.final_fits} final "
        f"fit{'s' if args.final_fits > 1 else ''} per split"
    )
    if args.higher_rate:
        title += (
            f", step sizes up to {HIGHER_RATES['sep']:g} (DP-SEP) and "
            f"{HIGHER_RATES['dpsgd']:g} (DP-SGD)"
        )
    if args.schedules != ["constant"]:
        title += f", step-size schedules {' and '.join(args.schedules)}"
    if args.methods != ["sep", "dpsgd"]:
        title += f", {' and '.join(args.methods)} only"
    if args.tune_fits > 1:
        title += f", {args.tune_fits} tuning fits per setting"
    if args.refine:
        title += f", the {args.refine[0]} best refined to {args.refine[1]} fits"
    if args.sep_probes:
        title += f", DP-SEP with {json.dumps(args.sep_probes)}"
    if args.sep_params:
        title += f", DP-SEP with {json.dumps(args.sep_params)}"
    if args.sep_clip_norms:
        title += f", DP-SEP clipping norms {' and '.join(f'{c:g}' for c in args.sep_clip_norms)}"
    if args.dpsgd_clip_norms:
        title += (
            f", DP-SGD clipping norms {' and '.join(f'{c:g}' for c in args.dpsgd_clip_norms)}"
        )
    print(f"grids: {len(grid)} DP-SEP and {len(dpsgd_grid)} DP-SGD settings")
    print(f"{title}; python {sys.version.split()[0]}, torch {torch.__version__}")
    if args.final_fits < 1:
        parser.error("--final-fits must be at least 1")
    if not 1 <= args.tune_fits < FINAL_SEED_STRIDE // TUNING_SEED_STRIDE:
        parser.error(
            f"--tune-fits must be between 1 and {FINAL_SEED_STRIDE // TUNING_SEED_STRIDE - 1}"
        )
    if args.refine and not (
        args.refine[0] >= 1
        and args.tune_fits < args.refine[1] < FINAL_SEED_STRIDE // TUNING_SEED_STRIDE
    ):
        parser.error(
            "--refine K R takes K >= 1 and R between --tune-fits + 1 and "
            f"{FINAL_SEED_STRIDE // TUNING_SEED_STRIDE - 1}"
        )
    if args.tune_splits is not None and args.tune_splits < 1:
        parser.error("--tune-splits must be at least 1")
    reuse = {"sep": {}, "dpsgd": {}}
    chosen = {"sep": {}, "dpsgd": {}}
    relation_label = "substitution" if args.relation == "substitution" else "add/remove"
    for path in args.settings_from:
        saved = json.loads(path.read_text())
        if relation_label not in saved["title"]:
            parser.error(f"{path} was not run with --relation {args.relation}")
        for key, rows in saved["results"].items():
            if len(rows["sep"]) < args.n_splits:
                parser.error(f"{path} has {len(rows['sep'])} splits of {key}")
            for method, allowed in (("sep", grid), ("dpsgd", dpsgd_grid)):
                settings = [row["setting"] for row in rows[method]]
                if any(setting not in allowed for setting in settings):
                    parser.error(f"{path}: a {method} setting of {key} is not in the grid")
                chosen[method][key] = settings
        title += f"; settings from {path.name}"
    for method, rows_of in reuse.items():
        for path in getattr(args, f"reuse_{method}"):
            saved_file = json.loads(path.read_text())
            # Rows of one table must come from the same number of tuning and
            # final fits.
            if saved_tuning_fits(saved_file["title"]) != args.tune_fits:
                parser.error(f"{path} was not run with --tune-fits {args.tune_fits}")
            if saved_refinement(saved_file["title"]) != (
                tuple(args.refine) if args.refine else None
            ):
                parser.error(f"{path} was not run with the same --refine")
            for key, rows in saved_file["results"].items():
                if any(len(row.get("rmse_fits", [0])) != args.final_fits for row in rows[method]):
                    parser.error(f"{path}: the {method} rows of {key} are not from "
                                 f"--final-fits {args.final_fits}")
                rows_of[key] = rows[method]
            title += f"; {method} rows from {path.name}"
    results = {}
    cache = FitCache(args.fit_cache)
    with threadpool_limits(limits=1, user_api="blas"):
        for name in args.datasets:
            X, y = load_uci(name)
            hidden = HIDDEN_UNITS
            data = Scaled(X, y)
            for epsilon in args.epsilons:
                key = f"{name}@{epsilon:g}"
                results[key] = {"sep": [], "dpsgd": []}
                for seed in range(args.n_splits):
                    start = time.perf_counter()
                    train, test = split(len(y), seed)
                    tuned = args.tune_splits is None or seed < args.tune_splits
                    if key in chosen["sep"]:
                        sep_grid = [chosen["sep"][key][seed]]
                    else:
                        sep_grid = (
                            grid
                            if tuned or not results[key]["sep"]
                            else [most_chosen(results[key]["sep"])]
                        )
                    if key in chosen["dpsgd"]:
                        sgd_grid = [chosen["dpsgd"][key][seed]]
                    else:
                        sgd_grid = (
                            dpsgd_grid
                            if tuned or not results[key]["dpsgd"]
                            else [most_chosen(results[key]["dpsgd"])]
                        )
                    sep = sgd = None
                    if key in reuse["sep"]:
                        sep = reuse["sep"][key][seed]
                    elif "sep" in args.methods:
                        sep = run_sep(
                            data, X, y, hidden, epsilon, train, test, seed,
                            sep_grid, args.final_fits, args.tune_fits, cache, key,
                            args.refine,
                        )
                    if key in reuse["dpsgd"]:
                        sgd = reuse["dpsgd"][key][seed]
                    elif "dpsgd" in args.methods:
                        sgd = run_dpsgd(
                            data, y, hidden, epsilon, train, test, seed,
                            args.relation, sgd_grid, args.final_fits, args.tune_fits,
                            cache, key, args.refine,
                        )
                    line = []
                    for method, label, row in (("sep", "DP-SEP", sep), ("dpsgd", "DP-SGD", sgd)):
                        if row is not None:
                            results[key][method].append(row)
                            line.append(
                                f"{label} RMSE {row['rmse']:.4g} LL {row['ll']:.4g}"
                            )
                    print(
                        f"  {key} split {seed}: {' | '.join(line)} "
                        f"{sgd['setting'] if sgd else ''} "
                        f"[{time.perf_counter() - start:.0f} s]",
                        flush=True,
                    )
                if args.save_json is not None:
                    args.save_json.write_text(
                        json.dumps({"title": title, "results": results}, indent=1)
                    )
    if all(rows["sep"] and rows["dpsgd"] for rows in results.values()):
        print_table(results, title)
    else:
        print("one method's rows only: join them to the other's with --reuse-* for the table")


if __name__ == "__main__":
    main()
