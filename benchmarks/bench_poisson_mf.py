"""Acceptance measurements for PrivatePoissonMF (recovery, speed, real data).

Usage::

    python benchmarks/bench_poisson_mf.py [--n-burn-in 1000] [--n-kept 500]
        [--repeats 5] [--default-malloc] [--skip-recovery] [--skip-mcmc]
        [--skip-speed] [--skip-real] [--real-rows 3000]
        [--real-words 1000]

1. Recovery on a synthetic 1000 x 1000 rank-50 matrix, theta and phi ~
   Gamma(0.1, rate 1), privatized at epsilon/N = 1: MAE = mean |mu_hat - mu|
   and the generalized KL divergence of mu_hat from mu, for private MCMC,
   private CAVI, naive CAVI (noise ignored, negatives clipped to 0) and
   non-private CAVI on the clean counts.
2. Speed on the same matrix, in this process, against scikit-learn's
   NMF(beta_loss="kullback-leibler", solver="mu") on the clipped matrix:
   seconds per iteration (sweeps 10 to 30 of a fit from a random start; NMF
   iterations 5 to 25), the methods taken in turn within each repeat, in an
   order rotated from one repeat to the next, and the medians over repeats
   of the times and of the ratios to NMF in the same repeat. NMF is timed
   with 2 BLAS threads and with 1 and the faster is the reference. numba
   compilation is timed separately (the kernels are compiled into a fresh
   cache directory first).

   glibc's malloc serves blocks above its mmap threshold (128 KiB at start,
   raised to the size of a freed mmapped block, up to 32 MiB) with fresh
   pages and returns heap tops above the trim threshold to the system, so
   NMF's 8 MB temporaries cost about 2,600 page faults (zero-filled pages)
   per iteration until something in the process has freed a large enough
   mmapped block: its time per iteration halves after an unrelated large
   allocation. The thresholds are therefore fixed here (mallopt) before
   anything is timed, for all methods alike; the page faults per iteration
   are printed with the times.
3. Real data (sotu and kos under get_data_home(), skipped when absent): held-out
   (10% of rows) clean log-likelihood per entry of private CAVI against the
   naive model at epsilon/N in {1, 2, 5}, and empirical Bayes against the
   default priors without privacy.
"""

import argparse
import ctypes
import os
import resource
import sys
import tempfile
import time


def fix_malloc_thresholds():
    """Stop glibc adapting its mmap and trim thresholds during the run
    (see 2. above); returns whether it could."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 * 2**20)
                and libc.mallopt(m_trim_threshold, 256 * 2**20))


# compile into an empty cache so the compile time measured is the real one
os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="skprivfact-numba-"))

import math
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numba
import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import NMF
from threadpoolctl import threadpool_info, threadpool_limits

from skprivfact.datasets import make_poisson_factorization
from skprivfact.mechanisms import two_sided_geometric
from skprivfact.poisson_mf import PrivatePoissonMF
from skprivfact.poisson_mf._cavi import fit_cavi
from skprivfact.poisson_mf._likelihood import clean_loglik_sum
from skprivfact.poisson_mf._mcmc import run_chain

from bench_poisson_mf_real import load as load_real_counts  # noqa: E402



def generalized_kl(rates, estimate):
    estimate = np.maximum(estimate, 1e-300)
    return float(np.mean(rates * np.log(np.maximum(rates, 1e-300) / estimate) - rates + estimate))


def compile_kernels():
    """Call every kernel once on tiny inputs; returns seconds spent."""
    start = time.perf_counter()
    X, X_noisy, _, _ = make_poisson_factorization(6, 5, 2, epsilon=1.0, random_state=0)
    for solver in ("cavi", "mcmc"):
        kwargs = {"solver": solver, "max_iter": 2, "evaluate_every": 1, "n_burn_in": 1,
                      "n_kept_samples": 1, "random_state": 0}
        PrivatePoissonMF(2, epsilon=1.0, **kwargs).fit(X_noisy).score(X_noisy)
        PrivatePoissonMF(2, **kwargs).fit(X).score(X)
    return time.perf_counter() - start


def seconds_per_iteration(run, n_short, n_long):
    """(time(n_long) - time(n_short)) / (n_long - n_short), and the minor
    page faults per iteration over the same difference."""
    faults = []
    seconds = []
    for n_iter in (n_short, n_long):
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        run(n_iter)
        seconds.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before)
    n_diff = n_long - n_short
    return (seconds[1] - seconds[0]) / n_diff, (faults[1] - faults[0]) / n_diff


def timing_table(methods, repeats):
    """Per method: median seconds per iteration, median ratio to the
    reference (the fastest of the methods named "NMF...") in the same repeat,
    median page faults per iteration. ``methods`` maps a name to
    (run, n_short, n_long)."""
    names = list(methods)
    per_repeat = []
    for repeat in range(repeats):
        shift = repeat % len(names)
        order = names[shift:] + names[:shift]
        per_repeat.append({name: seconds_per_iteration(*methods[name]) for name in order})
    table = {}
    for name in names:
        ratios = []
        for timings in per_repeat:
            reference = min(t[0] for n, t in timings.items() if n.startswith("NMF"))
            ratios.append(timings[name][0] / reference)
        table[name] = (
            float(np.median([t[name][0] for t in per_repeat])),
            float(np.median(ratios)),
            float(np.median([t[name][1] for t in per_repeat])),
        )
    return table


def recovery_and_speed(args):
    n_components, epsilon = 50, 1.0
    X, X_noisy, theta, phi = make_poisson_factorization(
        1000, 1000, n_components, factor_shape=0.1, factor_rate=1.0,
        epsilon=epsilon, random_state=0,
    )
    rates = theta @ phi
    clipped = np.maximum(X_noisy, 0)
    # `python benchmarks/...` puts benchmarks/ first on sys.path, not the
    # project root: an installed copy of the package may be the one measured.
    print(f"skprivfact imported from {Path(sys.modules['skprivfact'].__file__).parent}")
    print(f"synthetic 1000 x 1000, rank {n_components}, mean rate {rates.mean():.3f}, "
          f"epsilon/N = {epsilon}")
    print(f"MAE of a constant (median rate): {np.abs(rates - np.median(rates)).mean():.4f}")
    if not args.skip_speed:
        alpha = math.exp(-epsilon)
        noisy = np.ascontiguousarray(X_noisy, dtype=np.float64)
        prior = (np.full(n_components, 0.1), np.ones(n_components))
        rng = np.random.default_rng(0)
        start_shapes = [rng.uniform(1, 2, size=s) for s in
                        [(1000, n_components), (1000, n_components),
                         (n_components, 1000), (n_components, 1000)]]

        def cavi(n_iter, update="marginal", evaluate_every=10**9):
            fit_cavi(noisy, alpha, *[s.copy() for s in start_shapes],
                     theta_prior=prior, phi_prior=prior, max_iter=n_iter,
                     evaluate_every=evaluate_every, noise_update=update)

        def cavi_mean(n_iter):
            cavi(n_iter, "bessel-mean")

        def cavi_mode(n_iter):
            cavi(n_iter, "bessel-mode")

        def cavi_with_objective(n_iter):
            # the estimator's default: the stopping-rule objective every 5 sweeps
            cavi(n_iter, evaluate_every=5)

        def mcmc(n_iter):
            run_chain(noisy, alpha, n_components, prior, prior, n_iter - 1, 1, 0)

        def nmf(n_iter):
            NMF(n_components, beta_loss="kullback-leibler", solver="mu", init="random",
                max_iter=n_iter, tol=0.0, random_state=0).fit(clipped)

        def nmf_one_blas_thread(n_iter):
            with threadpool_limits(limits=1, user_api="blas"):
                nmf(n_iter)

        import warnings

        from sklearn.exceptions import ConvergenceWarning
        warnings.simplefilter("ignore", ConvergenceWarning)
        blas = ", ".join(f"{i['internal_api']}:{i['num_threads']}" for i in threadpool_info())
        print(f"threads: numba {numba.get_num_threads()}, BLAS {blas}; malloc thresholds "
              f"fixed: {args.malloc_fixed}")
        # untimed runs first: compiled code, thread pools and heap all warm
        for run in (nmf, nmf_one_blas_thread, cavi, cavi_mean, cavi_mode, mcmc):
            run(3)
        # sweeps 10 to 30: past the first sweeps from the random start, whose
        # dense rates and large Bessel parameters are not typical of a fit
        methods = {
            "NMF(KL, mu), BLAS threads as started": (nmf, 5, 25),
            "NMF(KL, mu), 1 BLAS thread": (nmf_one_blas_thread, 5, 25),
            "CAVI (noise marginalised)": (cavi, 10, 30),
            "CAVI (Bessel mean)": (cavi_mean, 10, 30),
            "CAVI (Bessel mode)": (cavi_mode, 10, 30),
            "CAVI (marginalised), objective every 5 sweeps": (cavi_with_objective, 10, 30),
            "MCMC": (mcmc, 10, 30),
        }
        table = timing_table(methods, args.repeats)
        print(f"seconds per iteration, medians of {args.repeats} repeats "
              f"(ratio: to the faster NMF in the same repeat)")
        for name, (seconds, ratio, faults) in table.items():
            print(f"  {name:46s} {seconds:8.4f} s  {ratio:6.2f}x  "
                  f"{faults:7.0f} page faults/iteration", flush=True)
    if args.skip_recovery:
        return
    rows = []
    for name, model, data in [
        ("private CAVI", PrivatePoissonMF(n_components, epsilon=epsilon, max_iter=300,
                                          random_state=0), X_noisy),
        ("private CAVI Bessel mean", PrivatePoissonMF(
            n_components, epsilon=epsilon, max_iter=300, noise_update="bessel-mean",
            random_state=0), X_noisy),
        ("private CAVI Bessel mode", PrivatePoissonMF(
            n_components, epsilon=epsilon, max_iter=300, noise_update="bessel-mode",
            random_state=0), X_noisy),
        ("naive CAVI", PrivatePoissonMF(n_components, max_iter=300, random_state=0), clipped),
        ("non-private CAVI", PrivatePoissonMF(n_components, max_iter=300, random_state=0), X),
        ("private MCMC", PrivatePoissonMF(n_components, epsilon=epsilon, solver="mcmc",
                                          n_burn_in=args.n_burn_in,
                                          n_kept_samples=args.n_kept, random_state=0),
         X_noisy),
    ]:
        if args.skip_mcmc and "MCMC" in name:
            continue
        start = time.perf_counter()
        factors = model.fit_transform(data)
        seconds = time.perf_counter() - start
        estimate = factors @ model.components_
        rows.append((name, np.abs(estimate - rates).mean(), generalized_kl(rates, estimate),
                     model.n_iter_, seconds))
        print(f"  {name:18s} MAE {rows[-1][1]:.4f}  KL {rows[-1][2]:.4f}  "
              f"sweeps {rows[-1][3]:5d}  {seconds:7.1f} s", flush=True)


def real_data(args):
    n_components = 20
    for name in ("sotu", "kos"):
        rng = np.random.default_rng(0)
        X = load_real_counts(name, args.real_rows, args.real_words, rng)
        if X is None:
            print(f"{name}: data absent, skipped")
            continue
        order = rng.permutation(X.shape[0])
        n_test = X.shape[0] // 10
        test, train = X[order[:n_test]], X[order[n_test:]]
        print(f"{name}: {X.shape[0]} rows (held out {n_test}) x {X.shape[1]} words, "
              f"mean count {X.mean():.3f}, rank {n_components}")
        print(f"  {'epsilon/N':>9} {'private CAVI':>13} {'naive CAVI':>11}  (held-out clean "
              "log-likelihood per entry)")
        for epsilon in (1.0, 2.0, 5.0):
            noise_rng = np.random.default_rng(int(epsilon * 1000))
            noisy_train = train + two_sided_geometric(epsilon, 1, train.shape,
                                                      random_state=noise_rng)
            noisy_test = test + two_sided_geometric(epsilon, 1, test.shape,
                                                    random_state=noise_rng)
            private = PrivatePoissonMF(n_components, epsilon=epsilon, random_state=0)
            private.fit(noisy_train)
            private_ll = clean_loglik_sum(
                sp.csr_matrix(test.astype(float)), private.transform(noisy_test),
                private.components_) / test.size
            naive = PrivatePoissonMF(n_components, random_state=0)
            naive.fit(np.maximum(noisy_train, 0))
            naive_ll = clean_loglik_sum(
                sp.csr_matrix(test.astype(float)),
                naive.transform(np.maximum(noisy_test, 0)), naive.components_) / test.size
            print(f"  {epsilon:9g} {private_ll:13.5f} {naive_ll:11.5f}", flush=True)
        default = PrivatePoissonMF(n_components, random_state=0).fit(train).score(test)
        eb = PrivatePoissonMF(n_components, empirical_bayes=True, random_state=0)
        eb = eb.fit(train).score(test)
        print(f"  non-private held-out log-likelihood per entry: default priors (shapes "
              f"chosen on validation rows) {default:.5f}, empirical Bayes {eb:.5f}",
              flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-burn-in", type=int, default=1000)
    parser.add_argument("--n-kept", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's adaptive malloc thresholds on")
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--skip-mcmc", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--real-rows", type=int, default=3000)
    parser.add_argument("--real-words", type=int, default=1000)
    args = parser.parse_args()
    args.malloc_fixed = not args.default_malloc and fix_malloc_thresholds()
    print(f"numba compilation (empty cache): {compile_kernels():.1f} s")
    if not (args.skip_recovery and args.skip_speed):
        recovery_and_speed(args)
    if not args.skip_real:
        real_data(args)


if __name__ == "__main__":
    main()
