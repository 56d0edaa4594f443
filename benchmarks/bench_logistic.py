"""Acceptance measurements for DPBayesLogReg.

Run from the project root (with the package installed, or ``PYTHONPATH=.``),
one section or all::

    python benchmarks/bench_logistic.py [reference] [utility] [accounting]
        [predictive] [speed]

reference   noise-free posterior against a Laplace approximation and a long
            Metropolis run (n = 2000, d = 10); Adult AUC against scikit-learn's
            LogisticRegression with the matching L2 penalty
utility     Adult test AUC and log-loss over 10 random 80/20 splits, for
            epsilon in {0.1, 0.5, 1, 2, 5, inf}, full batch and stochastic
accounting  privacy_spent_ against dp-accounting's tight (PLD) epsilon of the
            same releases under the fit's neighbouring relation, for the
            utility settings, and their ratio (at least 1: the reported
            epsilon is never the smaller)
predictive  integrated predict_proba against the plug-in (n = 100)
speed       default fit on a1a (unit rows) and on 100,000 x 50, against
            LogisticRegression(solver="lbfgs"), BLAS limited to 1 and 2 threads

Adult is read from the ``adult`` folder of ``skprivfact.datasets.get_data_home()``
(``SKPRIVFACT_DATA``, else ../shared/data; the section is skipped without it).
"""

import math
import time
import warnings

import numpy as np
from _sections import run_sections
from scipy import optimize, special
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, roc_auc_score
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

from skprivfact.datasets import get_data_home, load_adult
from skprivfact.logistic import DPBayesLogReg
from skprivfact.utils._testing import dp_accounting_pld_epsilon, gaussian_kl

ADULT = get_data_home() / "adult"
INF = float("inf")
EPSILONS = [0.1, 0.5, 1.0, 2.0, 5.0, INF]
DELTA = 1e-5
N_SPLITS = 10
STOCHASTIC = {"batch_size": 5200, "max_iter": 4}  # 4 passes of 6 iterations


def make_problem(n_samples, n_features, *, scale=3.0, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n_samples, n_features)) / math.sqrt(2.0 * n_features)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, np.newaxis]
    weights = scale * rng.normal(size=n_features)
    y = (rng.uniform(size=n_samples) < special.expit(X @ weights)).astype(int)
    return X, y


def negative_log_posterior(w, X, y):
    logits = X @ w
    value = -np.sum(y * logits - np.logaddexp(0, logits)) + 0.5 * w @ w
    return value, -X.T @ (y - special.expit(logits)) + w


def metropolis(X, y, start, proposal_cov, n_steps, seed):
    """Random-walk Metropolis on the exact posterior, w ~ N(0, I)."""
    rng = np.random.RandomState(seed)
    chol = np.linalg.cholesky(proposal_cov * 2.38**2 / X.shape[1])
    current, current_value = start, -negative_log_posterior(start, X, y)[0]
    samples, accepted = np.empty((n_steps, X.shape[1])), 0
    for i in range(n_steps):
        proposal = current + chol @ rng.normal(size=X.shape[1])
        value = -negative_log_posterior(proposal, X, y)[0]
        if math.log(rng.uniform()) < value - current_value:
            current, current_value, accepted = proposal, value, accepted + 1
        samples[i] = current
    return samples, accepted / n_steps


def section_reference():
    print("== 1. Noise-free posterior against independent references ==")
    X, y = make_problem(2000, 10)
    clf = DPBayesLogReg(
        epsilon=INF,
        data_norm=1.0,
        fit_intercept=False,
        max_iter=100,
        prior_shape=1e6,
        prior_rate=1e6,
    ).fit(X, y)
    vb_mean, vb_cov = clf.coef_[0], clf.coef_covariance_
    result = optimize.minimize(
        negative_log_posterior,
        np.zeros(10),
        args=(X, y),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-10},
    )
    p = special.expit(X @ result.x)
    laplace_cov = np.linalg.inv((X.T * (p * (1 - p))) @ X + np.eye(10))
    samples, acceptance = metropolis(X, y, result.x, laplace_cov, 200_000, 0)
    samples = samples[20_000:]
    mcmc_mean, mcmc_cov = samples.mean(axis=0), np.cov(samples.T)
    for name, mean, cov in [
        ("Laplace (scipy BFGS + Hessian)", result.x, laplace_cov),
        (f"Metropolis, 180k draws, acceptance {acceptance:.2f}", mcmc_mean, mcmc_cov),
    ]:
        std = np.sqrt(np.diag(cov))
        print(
            f"  VB vs {name}: KL(VB || ref) = {gaussian_kl(vb_mean, vb_cov, mean, cov):.4f}, "
            f"max |mean error| / sd = {np.max(np.abs(vb_mean - mean) / std):.4f}, "
            f"max |mean error| = {np.max(np.abs(vb_mean - mean)):.4f}, "
            f"VB / ref variance: {np.min(np.diag(vb_cov) / std**2):.3f}"
            f"..{np.max(np.diag(vb_cov) / std**2):.3f}"
        )
    if not (ADULT / "adult.data").exists():
        print("  Adult data absent: skipped")
        return
    X, y = load_adult(ADULT)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.2, stratify=y, random_state=0
    )
    clf = DPBayesLogReg(epsilon=INF, data_norm=1.0, max_iter=30).fit(X_train, y_train)
    # Prior N(0, I / a) on features scaled by sqrt(3)/2: penalty (2a/3)||coef||^2.
    reference = LogisticRegression(
        C=3.0 / (4.0 * clf.weight_precision_), max_iter=5000
    ).fit(X_train, y_train)
    auc = roc_auc_score(y_test, clf.predict_proba(X_test)[:, 1])
    reference_auc = roc_auc_score(y_test, reference.predict_proba(X_test)[:, 1])
    print(
        f"  Adult ({X.shape[1]} features), split seed 0: AUC DPBayesLogReg(epsilon=inf) "
        f"{auc:.4f}, LogisticRegression(C={reference.C:.3g}) {reference_auc:.4f}, "
        f"difference {auc - reference_auc:+.4f}"
    )


def section_utility():
    print("== 2. Privacy-utility on Adult, 10 splits, delta = 1e-5 ==")
    if not (ADULT / "adult.data").exists():
        print("  Adult data absent: skipped")
        return
    X, y = load_adult(ADULT)
    settings = [
        ("full batch, max_iter=10", {}),
        (
            (
                f"stochastic, batch_size={STOCHASTIC['batch_size']}, "
                f"max_iter={STOCHASTIC['max_iter']}"
            ),
            STOCHASTIC,
        ),
    ]
    for name, params in settings:
        print(f"  {name}")
        for epsilon in EPSILONS:
            aucs, losses, spent = [], [], []
            for seed in range(N_SPLITS):
                X_train, X_test, y_train, y_test = train_test_split(
                    X, y, test_size=0.2, stratify=y, random_state=seed
                )
                clf = DPBayesLogReg(
                    epsilon=epsilon,
                    delta=DELTA,
                    data_norm=1.0,
                    random_state=seed,
                    **params,
                ).fit(X_train, y_train)
                proba = clf.predict_proba(X_test)[:, 1]
                aucs.append(roc_auc_score(y_test, proba))
                losses.append(log_loss(y_test, proba))
                spent.append(clf.privacy_spent_[0])
            print(
                f"    epsilon={epsilon:<4}: AUC {np.mean(aucs):.4f} +- {np.std(aucs):.4f}, "
                f"log-loss {np.mean(losses):.4f} +- {np.std(losses):.4f}, "
                f"epsilon spent {max(spent):.4g}, sigma {clf.noise_multiplier_:.3g}",
                flush=True,
            )


def section_accounting():
    print(
        "== 3. privacy_spent_ against dp-accounting's tight (PLD) epsilon of the "
        "same releases, under the fit's neighbouring relation =="
    )
    X, y = make_problem(26_048, 5)
    for params in [{}, STOCHASTIC]:
        for epsilon in EPSILONS[:-1]:
            clf = DPBayesLogReg(
                epsilon=epsilon, delta=DELTA, data_norm=1.0, random_state=0, **params
            ).fit(X, y)
            reference = dp_accounting_pld_epsilon(
                clf.accountant_.history, clf.neighbouring_relation_, DELTA
            )
            print(
                f"  q={clf.sample_rate_:.4f}, releases={clf.n_releases_}, "
                f"{clf.neighbouring_relation_}, target {epsilon}: sigma "
                f"{clf.noise_multiplier_:.4g}, privacy_spent_ "
                f"{clf.privacy_spent_[0]:.5f}, dp-accounting {reference:.5f} "
                f"(ratio {clf.privacy_spent_[0] / reference:.3f})"
            )


def section_predictive():
    print("== 4. Integrated predict_proba against the plug-in, n = 100, d = 10 ==")
    scale = 3.0
    for epsilon in [INF, 5.0, 1.0]:
        differences = []
        for seed in range(40):
            X, y = make_problem(1100, 10, scale=scale, seed=seed)
            clf = DPBayesLogReg(
                epsilon=epsilon,
                data_norm=1.0,
                fit_intercept=False,
                max_iter=30,
                prior_shape=1e6,
                prior_rate=1e6 * scale**2,
                random_state=seed,
            ).fit(X[:100], y[:100])
            integrated = clf.predict_proba(X[100:])[:, 1]
            plug_in = special.expit(clf.transform(X[100:])[:, 0])
            differences.append(
                [log_loss(y[100:], integrated), log_loss(y[100:], plug_in)]
            )
        differences = np.array(differences)
        gain = differences[:, 1] - differences[:, 0]
        print(
            f"  epsilon={epsilon}: test log-loss integrated {differences[:, 0].mean():.4f}, "
            f"plug-in {differences[:, 1].mean():.4f}, gain {gain.mean():+.4f} "
            f"(standard error {gain.std() / math.sqrt(len(gain)):.4f}, 40 seeds)"
        )


def median_times(function, repeats):
    """Median wall and CPU seconds of ``repeats`` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        function()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return float(np.median(wall)), float(np.median(cpu))


def load_a1a():
    """LIBSVM's a1a, rows normalised to unit norm (every row on the bound)."""
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(ADULT / "a1a.svmlight"), n_features=123)
    X = X.toarray()
    return X / np.linalg.norm(X, axis=1, keepdims=True), (y > 0).astype(int)


def section_speed():
    print("== 7. Speed: default fit (10 full-batch iterations) against lbfgs ==")
    rng = np.random.RandomState(0)
    X = rng.normal(size=(100_000, 50)) / math.sqrt(100)
    y = (X @ rng.normal(size=50) * 3 + rng.logistic(size=100_000) > 0).astype(int)
    problems = [("synthetic 100,000 x 50", X, y)]
    if (ADULT / "a1a.svmlight").exists():
        problems.insert(0, ("a1a 1605 x 123, unit rows", *load_a1a()))
    for name, X, y in problems:
        ours = DPBayesLogReg(epsilon=1.0, data_norm=1.0)
        reference = LogisticRegression(solver="lbfgs")
        for threads in (1, 2):
            with threadpool_limits(threads):
                ours.fit(X, y)  # warm-up
                ours_wall, ours_cpu = median_times(lambda: ours.fit(X, y), 7)
                ref_wall, ref_cpu = median_times(lambda: reference.fit(X, y), 7)
            print(
                f"  {name}, BLAS threads {threads}: DPBayesLogReg {ours_wall:.3f} s "
                f"(CPU {ours_cpu:.3f}), LogisticRegression(lbfgs, "
                f"{reference.n_iter_[0]} iterations) {ref_wall:.3f} s (CPU "
                f"{ref_cpu:.3f}); ratio wall {ours_wall / ref_wall:.1f}, CPU "
                f"{ours_cpu / ref_cpu:.1f}  (medians of 7)",
                flush=True,
            )


SECTIONS = {
    "reference": section_reference,
    "utility": section_utility,
    "accounting": section_accounting,
    "predictive": section_predictive,
    "speed": section_speed,
}

if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)
    run_sections(SECTIONS, __doc__)
