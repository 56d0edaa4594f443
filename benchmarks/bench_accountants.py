"""The accountants: what the tight one buys (RDP against PLD), and their speed.

Run from the project root (with the package installed, or ``PYTHONPATH=.``),
one section or all::

    python benchmarks/bench_accountants.py [calibration] [adult] [kos] [speed]

calibration  the noise multiplier each accountant calibrates for the plans
             the estimators make (epsilon 0.5 to 8, delta 1e-5, both
             neighbouring relations), and their ratio
adult        DPBayesLogReg (full batch, the defaults) on Adult, 10 random 80/20
             splits: test AUC at epsilon 0.5 and 1 with either accountant
kos          DPLDA on KOS (3087 training documents, K = 10, batch 300, 2
             passes, doc_length 100), 3 splits: held-out document-only
             perplexity at epsilon 1, 2 and 4 with either accountant
speed        time to compute epsilon after 10,000 steps: skprivfact's RDP
             accountant against dp-accounting's (from the ``test`` extra),
             both in this process on the same settings, each timing from a
             fresh accountant and an empty cache; medians and their ratio

The data are read from ``skprivfact.datasets.get_data_home()`` (``SKPRIVFACT_DATA``,
else ../shared/data; a section is skipped without them).
"""

import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split

from skprivfact import DPLDA, DPBayesLogReg, accounting
from skprivfact.accounting import calibrate_noise_multiplier
from skprivfact.datasets import get_data_home, load_adult
from skprivfact.utils._testing import dp_accounting_epsilon

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _lda_corpora import load_kos, split_documents
from _sections import run_sections

ADULT = get_data_home() / "adult"
DELTA = 1e-5

# (sampling rate, releases): full batch 10 iterations (DPBayesLogReg), one
# pass of 10 batches (DPLDA), 40 passes full batch (DPSEPRegressor linear),
# 40 passes of 32 batches (DPSEPRegressor mlp), 2 passes of 100 batches.
PLANS = [(1.0, 10), (0.1, 10), (1.0, 40), (1 / 32, 1280), (0.01, 200)]


def section_calibration():
    print("== 1. Calibrated noise multipliers, delta = 1e-5 ==")
    print("relation     | q      | releases | epsilon | sigma RDP | sigma PLD | PLD / RDP")
    ratios = []
    for relation in ("add_remove", "substitution"):
        for rate, steps in PLANS:
            for epsilon in (0.5, 1.0, 2.0, 4.0, 8.0):
                sigmas = [
                    calibrate_noise_multiplier(
                        epsilon,
                        DELTA,
                        sample_rate=rate,
                        steps=steps,
                        accountant=accountant,
                        neighbouring_relation=relation,
                    )
                    for accountant in ("rdp", "pld")
                ]
                ratios.append(sigmas[1] / sigmas[0])
                print(
                    f"{relation:12} | {rate:.4f} | {steps:8} | {epsilon:7} | "
                    f"{sigmas[0]:9.4f} | {sigmas[1]:9.4f} | {ratios[-1]:.3f}",
                    flush=True,
                )
    print(
        f"PLD / RDP over {len(ratios)} plans: median {np.median(ratios):.3f}, "
        f"range {min(ratios):.3f} to {max(ratios):.3f}"
    )


def section_adult():
    print("\n== 2. DPBayesLogReg on Adult, full batch, defaults, 10 splits ==")
    if not (ADULT / "adult.data").exists():
        print("  Adult data absent: skipped")
        return
    X, y = load_adult(ADULT)
    for epsilon in (0.5, 1.0):
        results = {}
        for accountant in ("rdp", "pld"):
            aucs = []
            for seed in range(10):
                X_train, X_test, y_train, y_test = train_test_split(
                    X, y, test_size=0.2, stratify=y, random_state=seed
                )
                clf = DPBayesLogReg(
                    epsilon=epsilon, delta=DELTA, data_norm=1.0, accountant=accountant
                ).fit(X_train, y_train)
                aucs.append(roc_auc_score(y_test, clf.predict_proba(X_test)[:, 1]))
            results[accountant] = (np.mean(aucs), np.std(aucs), clf.noise_multiplier_)
        (rdp_auc, rdp_sd, rdp_sigma), (pld_auc, pld_sd, pld_sigma) = (
            results["rdp"],
            results["pld"],
        )
        print(
            f"  epsilon={epsilon}: RDP sigma {rdp_sigma:.3f} AUC {rdp_auc:.4f} +- "
            f"{rdp_sd:.4f}; PLD sigma {pld_sigma:.3f} AUC {pld_auc:.4f} +- {pld_sd:.4f}",
            flush=True,
        )


def doc_only_perplexity(model, X):
    return model.perplexity(X, include_topic_word_bound=False)


def section_kos():
    print("\n== 3. DPLDA on KOS: K = 10, batch 300, 2 passes, doc_length 100 ==")
    loaded = load_kos()
    if loaded is None:
        print("  KOS data absent: skipped")
        return
    X, _ = loaded
    for epsilon in (1.0, 2.0, 4.0):
        line = f"  epsilon={epsilon}:"
        for accountant in ("rdp", "pld"):
            values = []
            start = time.perf_counter()
            for seed in range(3):
                train, test = split_documents(X, seed=seed)
                model = DPLDA(
                    10,
                    epsilon=epsilon,
                    delta=DELTA,
                    batch_size=300,
                    max_iter=2,
                    doc_length=100,
                    accountant=accountant,
                    random_state=seed,
                ).fit(train)
                values.append(doc_only_perplexity(model, test))
            line += (
                f" {accountant.upper()} sigma {model.noise_multiplier_:.3f} perplexity "
                f"{np.mean(values):.1f} +- {np.std(values):.1f}"
                f" ({time.perf_counter() - start:.0f} s);"
            )
        print(line, flush=True)


SPEED_STEPS = 10_000
# (noise multiplier, sampling rate) of the speed section.
SPEED_SETTINGS = [(1.1, 0.01), (0.8, 0.001), (2.0, 0.1), (5.0, 0.05), (0.6, 0.01)]
SPEED_REPEATS = 7


def median_seconds(function, *args):
    times = []
    for _ in range(SPEED_REPEATS):
        start = time.perf_counter()
        function(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def section_speed():
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        print("[speed] skipped: needs dp-accounting (pip install '.[test]')")
        return

    def ours(noise_multiplier, sample_rate):
        # An empty per-(sigma, q) cache: every timing computes the RDP series.
        accounting._cached_rdp_one_step.cache_clear()
        accountant = accounting.RDPAccountant()
        accountant.compose(noise_multiplier, sample_rate, SPEED_STEPS)
        return accountant.get_epsilon(DELTA)

    def reference(noise_multiplier, sample_rate):
        return dp_accounting_epsilon(noise_multiplier, sample_rate, SPEED_STEPS, DELTA)

    ours(1.0, 0.01), reference(1.0, 0.01)  # imports and scipy's first calls
    print(
        f"[speed] epsilon after {SPEED_STEPS} steps at delta={DELTA:g}, "
        f"median of {SPEED_REPEATS} runs"
    )
    print(
        f"{'sigma':>6} {'q':>6} {'eps ours':>10} {'eps ref':>10} {'ours s':>9} "
        f"{'ref s':>9} {'ref/ours':>9}"
    )
    ratios = []
    for noise_multiplier, sample_rate in SPEED_SETTINGS:
        seconds_ours = median_seconds(ours, noise_multiplier, sample_rate)
        seconds_reference = median_seconds(reference, noise_multiplier, sample_rate)
        ratios.append(seconds_reference / seconds_ours)
        print(
            f"{noise_multiplier:6.2f} {sample_rate:6.3f} "
            f"{ours(noise_multiplier, sample_rate):10.4f} "
            f"{reference(noise_multiplier, sample_rate):10.4f} {seconds_ours:9.4f} "
            f"{seconds_reference:9.4f} {ratios[-1]:9.2f}"
        )
    print(
        "[speed] median ratio (dp-accounting time / skprivfact time): "
        f"{statistics.median(ratios):.2f}"
    )


SECTIONS = {
    "calibration": section_calibration,
    "adult": section_adult,
    "kos": section_kos,
    "speed": section_speed,
}

if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)
    run_sections(SECTIONS, __doc__)
