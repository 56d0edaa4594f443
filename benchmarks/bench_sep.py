"""Acceptance measurements for DPSEPRegressor.

Run from the project root (with the package installed, or ``PYTHONPATH=.``)::

    python benchmarks/bench_sep.py [linear] [mlp] [raw] [private] [private-linear]
        [scaling] [default-model] [sweep] [noise] [floor] [speed] [dpsgd]
        [--datasets kin8nm power-plant ...] [--n-splits N] [--protein-passes 40]
        [--save-json PATH] [--reference-json PATH] [--numba-threads 1]
        [--dpsgd-grid small|wide] [--dpsgd-splits 3] [--tables-from-json PATH]

linear   non-private linear SEP (defaults, noise variance fixed to the truth)
         against the exact conjugate posterior on a synthetic problem (n = 5000,
         d = 5): KL divergence both ways; also with batch_size=100
mlp      non-private network SEP (epsilon=inf, clip_norm=None) on the UCI sets,
         random 90/10 splits (by default as many as in probabilistic
         backpropagation's protocol: 20, 5 for protein; ``--n-splits`` sets one
         number for all), inputs and target standardized with the training
         split's statistics (the estimator's behaviour with bounds None): test
         RMSE and log-likelihood, against probabilistic backpropagation's
         published RMSE
raw      DPSEPRegressor(epsilon=inf) with all other parameters at their
         defaults (the network of 50 hidden units, no clipping, 40 passes) on
         the raw UCI columns, same splits as mlp: what a user gets without
         preprocessing, against probabilistic backpropagation's published RMSE
private  epsilon = 1, delta = 1e-5, with bounds fixed before the splits (see
         below), against the non-private run on the same splits (taken from
         ``--reference-json``, a file written by ``mlp --save-json``, or run
         again)
private-linear
         linear SEP at epsilon = 1 on the sets with n >= 8000 (3 splits), with
         the noise level inferred and with it given, against no privacy
scaling  the location and scale release: DPSEPRegressor at epsilon = 1 with
         scaling_share=0 (the bounds' map alone) and "auto", linear and
         network, on the sets with n >= 8000 (``--n-splits``, default 3), with
         the private section's bounds and with bounds three times as wide
default-model
         the private default model: DPSEPRegressor at its private defaults
         with model="linear" and model="mlp", epsilon 1 and 3, the private
         section's bounds, validation RMSE (10% of each training split held
         out; the test splits are not read), first 3 splits (``--n-splits``);
         every set but protein unless ``--datasets`` names it
sweep    clip_norm in {0.3, 1, 3, 10} at epsilon = 1 on one split of kin8nm
noise    why the network loses accuracy under noise: the std of the privacy
         noise in each natural parameter of the posterior (the averaged factor
         times n), per unit of clip_norm, over batch sizes, passes and damping
         at epsilon = 1 (computed from the accountant, no fit); then, on one
         split of kin8nm, the weights' median posterior precision without
         clipping, with clipping alone and at epsilon = 1, beside that noise;
         and the quantiles of the sites' norms at the non-private posterior on
         kin8nm, naval and power-plant
floor    the best RMSE this form of DP-SEP could reach at epsilon = 1, on kin8nm,
         naval and power-plant (``--datasets`` picks among the n >= 8000 sets;
         ``--n-splits``, default 2): first the smallest privacy noise per
         natural parameter of the posterior over schedules that forget their
         data-independent start (damping * passes = 3, batch 28 to 2048); then,
         for clip_norm 0.3 to 30, the test RMSE of clipping without noise and of
         an oracle that starts from that noise-free posterior and adds only this
         smallest noise (weights whose noisy precision falls below the prior keep
         their clean values, the noise level is left clean, and the estimator's
         shrinkage of noisy means applies). This is an estimate, not a bound: a
         real fit computes later sites at the noisy factor, which partly
         corrects it. Last, the private fit at clip_norm 1 with the defaults,
         from its random start and (an oracle) from the noise-free clipped
         posterior.
dpsgd    a reference for what epsilon = 1 costs a network of the same size
         trained another way: DP-SGD (Poisson batches, per-example gradient
         clipping, Gaussian noise calibrated with the same accountant, Adam) on
         the sets with n >= 8000, same bounds as ``private``, the first
         ``--dpsgd-splits`` splits; the best setting of a grid (``--dpsgd-grid``
         small: batch 256, 40 epochs, 2 clipping norms x 3 learning rates; wide:
         also batch 64-1024 and 5-100 epochs, 144 settings) is chosen on the
         test splits, which favours the reference (``bench_sep_dpsgd.py``
         compares with Opacus's DP-SGD tuned on validation splits instead);
         its non-private SEP column and ratio come from ``mlp`` in the same
         run or from ``--reference-json`` (nan without either)
speed    seconds per pass on kin8nm (50 hidden units, 40 passes) against
         scikit-learn's MLPRegressor seconds per epoch at the same batch size,
         medians of 3 in this process

Bounds of the private runs: for each data set, the minimum and maximum of
every column over the WHOLE data file, widened outward by 5% of the range.
They stand in for public domain knowledge of the features' ranges (physical
limits, instrument ranges) that a data holder would fix before seeing the
data; they are read from the data here, so the epsilon of these runs is not a
formal guarantee for the bounds themselves, only for everything the estimator
computes given them.

Without a section name every section runs. The UCI files are read from the
``uci`` folder of ``skprivfact.datasets.get_data_home()`` (``SKPRIVFACT_DATA``,
else ../shared/data; sections that need them are skipped when it is absent).

The sections live in ``_sep_accuracy.py`` (linear, mlp, raw, private,
private-linear, scaling, sweep), ``_sep_noise.py`` (noise, floor) and
``_sep_reference.py`` (dpsgd, speed), over the data and metrics of
``_sep_common.py``; whatever they read of the estimator's private state goes
through ``_sep_internals.py``, which lists the public hooks of ``sep.py``
that would replace it.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from _sep_accuracy import (
    section_default_model,
    section_linear,
    section_mlp,
    section_private,
    section_private_linear,
    section_raw,
    section_scaling,
    section_sweep,
)
from _sep_common import DATASETS, N_PASSES, UCI, print_uci_table
from _sep_noise import section_floor, section_noise
from _sep_reference import DPSGD_GRIDS, section_dpsgd, section_speed
from threadpoolctl import threadpool_limits

SECTIONS = (
    "linear",
    "mlp",
    "raw",
    "private",
    "private-linear",
    "scaling",
    "default-model",
    "sweep",
    "noise",
    "floor",
    "speed",
    "dpsgd",
)


# ----------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sections",
        nargs="*",
        help=f"one or more of {', '.join(SECTIONS)} (default: all)",
    )
    parser.add_argument(
        "--datasets",
        nargs="+",
        choices=sorted(DATASETS),
        default=None,
        help="UCI sets of the mlp and private sections (default: all)",
    )
    parser.add_argument(
        "--n-splits",
        type=int,
        default=None,
        help="splits per UCI set (default: the protocol's 20, 5 for protein)",
    )
    parser.add_argument(
        "--protein-passes",
        type=int,
        default=N_PASSES,
        help="passes on protein (the protocol's 40; its n_epochs file says 20)",
    )
    parser.add_argument(
        "--save-json",
        type=Path,
        default=None,
        help="write the per-split results of mlp/private to this file",
    )
    parser.add_argument(
        "--reference-json",
        type=Path,
        default=None,
        help="non-private results (from mlp --save-json) for the private ratios",
    )
    parser.add_argument(
        "--tables-from-json",
        type=Path,
        default=None,
        help="print the tables of a file written by --save-json and exit",
    )
    parser.add_argument(
        "--numba-threads",
        type=int,
        default=1,
        help="numba threads of the kernels (BLAS is limited to one thread)",
    )
    parser.add_argument(
        "--dpsgd-grid",
        choices=sorted(DPSGD_GRIDS),
        default="small",
        help="settings of the dpsgd section (wide: 144 settings, minutes per set)",
    )
    parser.add_argument(
        "--dpsgd-splits",
        type=int,
        default=3,
        help="splits per set of the dpsgd section",
    )
    args = parser.parse_args(argv)
    all_sections = list(SECTIONS)
    unknown = set(args.sections) - set(all_sections)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {all_sections}")
    sections = args.sections or all_sections
    if args.tables_from_json is not None:
        saved = json.loads(args.tables_from_json.read_text())
        reference = saved.get("mlp")
        if args.reference_json is not None:
            reference = json.loads(args.reference_json.read_text())["mlp"]
        if "mlp" in saved:
            print_uci_table(saved["mlp"], "Non-private (epsilon=inf, clip_norm=None)")
        if "raw" in saved:
            print_uci_table(saved["raw"], "Raw data, defaults (epsilon=inf)")
        if "private" in saved:
            print_uci_table(
                saved["private"],
                "Private (epsilon=1, delta=1e-5, clip_norm=1.0, data-independent bounds)",
                reference=reference,
            )
        return
    names = args.datasets or list(DATASETS)

    import numba

    numba.set_num_threads(min(args.numba_threads, numba.config.NUMBA_NUM_THREADS))
    print(
        f"threads: numba {numba.get_num_threads()}, BLAS 1 (threadpoolctl); "
        f"python {sys.version.split()[0]}, numpy {np.__version__}"
    )
    uci_sections = set(sections) - {"linear"}
    if uci_sections and not UCI.exists():
        print(f"{UCI} not found: skipping {sorted(uci_sections)}")
        sections = [s for s in sections if s not in uci_sections]

    saved = {}
    reference = None
    if args.reference_json is not None:
        reference = json.loads(args.reference_json.read_text())["mlp"]
    with threadpool_limits(limits=1, user_api="blas"):
        for section in sections:
            start = time.perf_counter()
            if section == "linear":
                section_linear(args)
            elif section == "mlp":
                saved["mlp"] = section_mlp(args, names)
                reference = {**(reference or {}), **saved["mlp"]}
            elif section == "raw":
                saved["raw"] = section_raw(args, names)
            elif section == "private":
                saved["private"] = section_private(args, names, reference)
            elif section == "sweep":
                section_sweep(args)
            elif section == "noise":
                section_noise(args)
            elif section == "floor":
                section_floor(args, names)
            elif section == "speed":
                section_speed(args)
            elif section == "dpsgd":
                section_dpsgd(args, names, reference)
            elif section == "private-linear":
                section_private_linear(args, names)
            elif section == "scaling":
                section_scaling(args, names)
            elif section == "default-model":
                section_default_model(args, names)
            print(f"[{section}: {time.perf_counter() - start:.1f} s]\n", flush=True)
            if args.save_json is not None and saved:
                args.save_json.write_text(json.dumps(saved, indent=1))


if __name__ == "__main__":
    main()
