"""Acceptance measurements for DPSEPGaussianMixture.

Run from the project root (with the package installed, or ``PYTHONPATH=.``)::

    python benchmarks/bench_sep_mixture.py [table1] [private] [speed]
        [--runs 5] [--sizes 1000 100000] [--epsilons 1 5 10]
        [--gibbs-sweeps 20000]

The synthetic setting of Li et al. (2015) and Vinaroz and Park (2022, section
6.1): J = 4 isotropic components in 4 dimensions with variance 0.5**2, means
drawn from N(0, I), uniform weights; the model knows the variance and the
weights and puts the prior N(0, I) on each mean. Public bounds (-5, 5) on
every coordinate (no record of the generated data sets here falls outside).

table1   N = 1000: the F-norm of the error of the posterior means (the 4 x 4
         matrix of the means' posterior means) and of the posterior
         covariances (the four 4 x 4 covariance matrices, flattened) against a
         long Gibbs-sampling reference, for full EP (sequential, per-record
         sites, in this script), SEP (epsilon = inf, no clipping), clipped SEP,
         DP-SEP and DP-EM at epsilon in {1, 5, 10, 50}, and scikit-learn's
         GaussianMixture (maximum likelihood, no posterior covariance), as the
         paper's Table 1 (mean over ``--runs`` runs; components matched to the
         reference by the Hungarian algorithm on the means)
private  for each N in ``--sizes`` and epsilon in ``--epsilons``, delta = 1e-5:
         F-norm on means against the Gibbs reference and held-out mean
         log-likelihood on 20,000 fresh records, DP-SEP against DP-EM, ``--runs``
         runs each (mean and std), and diffprivlib's KMeans's F-norm when it is
         installed
speed    N = 100,000: seconds per pass of DP-SEP (the default ten updates
         and releases per pass, and full batch: one update per pass) against scikit-learn's GaussianMixture
         (covariance_type="spherical") seconds per EM iteration, same process,
         one thread, medians of 5; a pass is a whole 40-pass fit's time over 40
         (planning and noise calibration included)

DP-EM (Park et al., 2017) is run through the same privacy engine: each EM
iteration releases, in one Gaussian mechanism, every component's expected
sufficient statistics ``(sum_n r_nk, sum_n r_nk z_n)`` (scaled data ``z`` in
[-1, 1]^4, one record's stacked statistics of norm at most sqrt(1 + 4), the
bound declared, no clipping needed), and the M-step takes the MAP means under
the same prior and known variance; 10 iterations (the noise is calibrated for
them), the same data-independent start as DP-SEP, the same (epsilon, delta)
and neighbouring relation (substitution); "DP-EM-p" (or "prior start") is
DP-EM started instead from means drawn from the prior N(0, I), the very
distribution of the true means here, a start that favours the baseline.
SEP without noise runs 100 passes (the paper's 100 iterations), full batch
(damping 0.5) and, in ``table1`` also with the default ten Poisson batches
per pass; clipped SEP runs full batch; DP-SEP runs
the defaults (40 passes of ten Poisson batches, damping 0.1, clip_norm 1).
"""

import argparse
import math
import time
import warnings

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import logsumexp
from threadpoolctl import threadpool_limits

from skprivfact import DPSEPGaussianMixture
from skprivfact.mechanisms import clip_rows
from skprivfact.privacy import PrivacyEngine, plan_privacy

N_COMPONENTS = 4
N_FEATURES = 4
VARIANCE = 0.25
BOUND = 5.0
DELTA = 1e-5
DP_EM_ITERATIONS = 10


def make_data(n_samples, seed, n_test=20_000):
    """Means from N(0, I), the data, and a held-out sample from the same mixture."""
    rng = np.random.RandomState(seed)
    means = rng.normal(size=(N_COMPONENTS, N_FEATURES))
    labels = rng.randint(N_COMPONENTS, size=n_samples + n_test)
    X = means[labels] + math.sqrt(VARIANCE) * rng.normal(size=(labels.size, N_FEATURES))
    assert np.all(np.abs(X) < BOUND)
    return means, X[:n_samples], X[n_samples:]


def log_joint(X, means, variance):
    """``log pi_k + log N(x; means[k], (VARIANCE + variance[k]) I)`` with uniform pi."""
    spread = VARIANCE + np.asarray(variance)
    distance = ((X[:, None, :] - means[None]) ** 2).sum(-1)
    return (
        -math.log(N_COMPONENTS)
        - 0.5 * N_FEATURES * np.log(2 * np.pi * spread)
        - distance / (2 * spread)
    )


GIBBS_BURN_IN = 200


def gibbs_reference(X, true_means, n_sweeps, seed=0, burn_in=GIBBS_BURN_IN):
    """Posterior means and covariances of the component means by Gibbs sampling.

    Alternates the labels given the means and the means given the labels
    (conjugate: prior N(0, I), known variance); Rao-Blackwellised: the
    posterior mean is the average of the conditional means, the covariance
    the average conditional covariance plus the covariance of the conditional
    means. Started at the true means (no label switching in these
    well-separated settings: checked by the label counts staying put).
    """
    rng = np.random.RandomState(seed)
    n = X.shape[0]
    mu = true_means.copy()
    sums = np.zeros_like(mu)
    outer = np.zeros((N_COMPONENTS, N_FEATURES, N_FEATURES))
    conditional_var = np.zeros(N_COMPONENTS)
    kept = 0
    for sweep in range(n_sweeps):
        logits = log_joint(X, mu, np.zeros(N_COMPONENTS))
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        u = rng.uniform(size=(n, 1))
        labels = (p.cumsum(axis=1) < u).sum(axis=1)
        labels = np.minimum(labels, N_COMPONENTS - 1)
        counts = np.bincount(labels, minlength=N_COMPONENTS)
        totals = np.zeros_like(mu)
        np.add.at(totals, labels, X)
        precision = 1.0 + counts / VARIANCE
        cond_mean = (totals / VARIANCE) / precision[:, None]
        mu = cond_mean + rng.normal(size=mu.shape) / np.sqrt(precision)[:, None]
        if sweep >= burn_in:
            kept += 1
            sums += cond_mean
            outer += cond_mean[:, :, None] * cond_mean[:, None, :]
            conditional_var += 1.0 / precision
    mean = sums / kept
    covariance = outer / kept - mean[:, :, None] * mean[:, None, :]
    covariance += (conditional_var / kept)[:, None, None] * np.eye(N_FEATURES)
    return mean, covariance


def full_ep(X, init_means, n_sweeps=20, damping=0.5):
    """Sequential EP with one isotropic site per record and component (reference).

    Non-private, so it may skip an update whose cavity is improper, as EP
    implementations do.
    """
    n = X.shape[0]
    # Start: the sites share one record's worth of evidence at the initial
    # means (the estimator's start), so that the first sweep replaces it.
    site_precision = np.full((n, N_COMPONENTS), 1.0 / (n * VARIANCE))
    site_shift = np.broadcast_to(init_means / (n * VARIANCE), (n,) + init_means.shape).copy()
    precision = 1.0 + site_precision.sum(axis=0)
    shift = site_shift.sum(axis=0)
    for _ in range(n_sweeps):
        for i in range(n):
            cav_precision = precision - site_precision[i]
            if np.any(cav_precision <= 0):
                continue
            cav_shift = shift - site_shift[i]
            v = 1.0 / cav_precision
            m = cav_shift * v[:, None]
            x = X[i]
            distance = ((x - m) ** 2).sum(1)
            spread = VARIANCE + v
            logits = -0.5 * N_FEATURES * np.log(spread) - distance / (2 * spread)
            r = np.exp(logits - logsumexp(logits))
            gain = v / spread
            new_var = v - r * gain * v + r * (1 - r) * gain**2 * distance / N_FEATURES
            new_mean = m + (r * gain)[:, None] * (x - m)
            new_site_precision = 1.0 / new_var - cav_precision
            new_site_shift = new_mean / new_var[:, None] - cav_shift
            new_site_precision = (1 - damping) * site_precision[i] + damping * new_site_precision
            new_site_shift = (1 - damping) * site_shift[i] + damping * new_site_shift
            precision = cav_precision + new_site_precision
            shift = cav_shift + new_site_shift
            site_precision[i] = new_site_precision
            site_shift[i] = new_site_shift
    v = 1.0 / precision
    return shift * v[:, None], v


def initial_means(seed):
    """The estimator's data-independent start: uniform in the bounds."""
    rng = np.random.RandomState(seed)
    return BOUND * rng.uniform(-1.0, 1.0, size=(N_COMPONENTS, N_FEATURES))


def prior_means(seed):
    """A start drawn from the prior N(0, I) (the true means' distribution here)."""
    return np.random.RandomState(seed).normal(size=(N_COMPONENTS, N_FEATURES))


def dp_em(X, epsilon, seed, n_iter=DP_EM_ITERATIONS, start=None):
    """DP-EM (Park et al., 2017) for the known-variance mixture, on the engine."""
    n = X.shape[0]
    Z = X / BOUND
    s2 = VARIANCE / BOUND**2
    prior_precision = BOUND**2  # N(0, I) in the scaled units
    sensitivity = math.sqrt(1.0 + N_FEATURES)
    plan = plan_privacy(
        epsilon, DELTA, sample_rate=1.0, n_releases=n_iter,
        neighbouring_relation="substitution",
    )
    engine = PrivacyEngine(plan, owner="DP-EM")
    means = (initial_means(seed) if start is None else start(seed)) / BOUND
    for _ in range(n_iter):
        distance = ((Z[:, None, :] - means[None]) ** 2).sum(-1)
        logits = -distance / (2 * s2)
        r = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
        stats = np.concatenate([r[:, :, None], r[:, :, None] * Z[:, None, :]], axis=2)
        stats = clip_rows(stats.reshape(n, -1), sensitivity)
        (released,) = engine.release([stats.sum(axis=0)], [sensitivity])
        released = released.reshape(N_COMPONENTS, N_FEATURES + 1)
        counts = np.maximum(released[:, 0], 0.0)
        precision = prior_precision + counts / s2
        means = np.clip((released[:, 1:] / s2) / precision[:, None], -1.0, 1.0)
    return BOUND * means


def fit_sep(X, epsilon, seed, clip_norm=1.0, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DPSEPGaussianMixture(
            N_COMPONENTS,
            epsilon=epsilon,
            clip_norm=clip_norm,
            bounds_X=(-BOUND, BOUND),
            covariance=VARIANCE,
            mean_prior=0.0,
            mean_precision_prior=1.0,
            random_state=seed,
            **params,
        ).fit(X)


def align(means, reference):
    cost = ((means[:, None, :] - reference[None]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    order = np.empty(N_COMPONENTS, dtype=int)
    order[cols] = rows
    return order


def f_norms(means, covariances, ref_mean, ref_cov):
    order = align(means, ref_mean)
    f_mean = float(np.linalg.norm(means[order] - ref_mean))
    if covariances is None:
        return f_mean, float("nan")
    return f_mean, float(np.linalg.norm(covariances[order] - ref_cov))


def heldout(X_test, means, variance):
    return float(np.mean(logsumexp(log_joint(X_test, means, variance), axis=1)))


def table1(args):
    true_means, X, _ = make_data(1000, seed=0)
    t0 = time.perf_counter()
    ref_mean, ref_cov = gibbs_reference(X, true_means, n_sweeps=args.gibbs_sweeps)
    print(
        f"Gibbs reference: {args.gibbs_sweeps} sweeps in {time.perf_counter() - t0:.1f} s; "
        f"posterior std of each mean ~ {np.sqrt(np.diag(ref_cov[0])).mean():.4f}"
    )
    rows = {}

    def add(name, means, covariances):
        rows.setdefault(name, []).append(f_norms(means, covariances, ref_mean, ref_cov))

    eye = np.eye(N_FEATURES)
    for run in range(args.runs):
        m, v = full_ep(X, initial_means(run))
        add("EP (full, sequential)", m, v[:, None, None] * eye)
        sep = fit_sep(X, math.inf, run, clip_norm=None, max_iter=100, batch_size=None)
        add("SEP (eps=inf, full batch)", sep.means_, sep.means_covariance_)
        sep = fit_sep(X, math.inf, run, clip_norm=None, max_iter=100)
        add("SEP (eps=inf, ten batches)", sep.means_, sep.means_covariance_)
        for c in (10.0, 1.0, 0.3):
            sep = fit_sep(X, math.inf, run, clip_norm=c, max_iter=100, batch_size=None)
            add(f"SEP-clipped C={c:g}", sep.means_, sep.means_covariance_)
        for eps in (50, 10, 5, 1):
            add(f"DP-EM (eps={eps})", dp_em(X, eps, run), None)
        for eps in (50, 10, 5, 1):
            add(f"DP-EM prior start (eps={eps})", dp_em(X, eps, run, start=prior_means), None)
        for eps in (50, 10, 5, 1):
            sep = fit_sep(X, eps, run)
            add(f"DP-SEP (eps={eps})", sep.means_, sep.means_covariance_)
        from sklearn.mixture import GaussianMixture

        gm = GaussianMixture(N_COMPONENTS, covariance_type="spherical", random_state=run).fit(X)
        add("sklearn GaussianMixture (ML)", gm.means_, None)
    print(f"\nTable 1 (N = 1000, mean over {args.runs} runs; reference: Gibbs)")
    print(f"{'method':32s} {'F-norm mean':>12s} {'F-norm cov':>12s} {'average':>10s}")
    for name, values in rows.items():
        values = np.array(values)
        f_mean, f_cov = values.mean(axis=0)
        print(f"{name:32s} {f_mean:12.4f} {f_cov:12.4f} {(f_mean + f_cov) / 2:10.4f}")


def private(args):
    for n in args.sizes:
        true_means, X, X_test = make_data(n, seed=1)
        sweeps = args.gibbs_sweeps if n <= 10_000 else 600
        ref_mean, ref_cov = gibbs_reference(X, true_means, n_sweeps=sweeps, burn_in=100)
        truth = heldout(X_test, true_means, np.zeros(N_COMPONENTS))
        print(
            f"\nN = {n}: held-out log-likelihood at the true means {truth:.4f} "
            f"(Gibbs reference: {sweeps} sweeps)"
        )
        print(
            f"{'epsilon':>8s} {'method':>8s} {'F-norm mean (std)':>20s} "
            f"{'held-out LL (std)':>20s} {'s/fit':>6s}"
        )
        nonprivate = fit_sep(X, math.inf, 0, clip_norm=None, max_iter=100)
        print(
            f"{'inf':>8s} {'SEP':>8s} "
            f"{f_norms(nonprivate.means_, None, ref_mean, ref_cov)[0]:20.4f} "
            f"{nonprivate.score(X_test):20.4f}"
        )
        for eps in args.epsilons:
            results = {"DP-SEP": [], "DP-EM": [], "DP-EM-p": [], "dpl-KM": []}
            times = {name: [] for name in results}
            for run in range(args.runs):
                t0 = time.perf_counter()
                sep = fit_sep(X, eps, run)
                times["DP-SEP"].append(time.perf_counter() - t0)
                results["DP-SEP"].append(
                    (f_norms(sep.means_, None, ref_mean, ref_cov)[0], sep.score(X_test))
                )
                t0 = time.perf_counter()
                means = dp_em(X, eps, run)
                times["DP-EM"].append(time.perf_counter() - t0)
                results["DP-EM"].append(
                    (
                        f_norms(means, None, ref_mean, ref_cov)[0],
                        heldout(X_test, means, np.zeros(N_COMPONENTS)),
                    )
                )
                t0 = time.perf_counter()
                means = dp_em(X, eps, run, start=prior_means)
                times["DP-EM-p"].append(time.perf_counter() - t0)
                results["DP-EM-p"].append(
                    (
                        f_norms(means, None, ref_mean, ref_cov)[0],
                        heldout(X_test, means, np.zeros(N_COMPONENTS)),
                    )
                )
                try:
                    from diffprivlib.models import KMeans
                except ImportError:
                    continue
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    km = KMeans(
                        N_COMPONENTS, epsilon=eps, bounds=(-BOUND, BOUND), random_state=run
                    ).fit(X)
                times["dpl-KM"].append(time.perf_counter() - t0)
                centres = np.clip(km.cluster_centers_, -BOUND, BOUND)
                results["dpl-KM"].append(
                    (
                        f_norms(centres, None, ref_mean, ref_cov)[0],
                        heldout(X_test, centres, np.zeros(N_COMPONENTS)),
                    )
                )
            for name, values in results.items():
                if not values:
                    continue
                values = np.array(values)
                mean, std = values.mean(axis=0), values.std(axis=0)
                print(
                    f"{eps:8g} {name:>8s} {mean[0]:12.4f} ({std[0]:.4f}) "
                    f"{mean[1]:12.4f} ({std[1]:.4f}) {np.median(times[name]):6.2f}"
                )


def speed(args):
    from sklearn.mixture import GaussianMixture

    _, X, _ = make_data(100_000, seed=2, n_test=0)
    passes = 40  # the default; the one-time noise calibration is amortised
    sep_times, full_times, em_times = [], [], []
    fit_sep(X[:1000], 1.0, 0, max_iter=2)  # warm-up (numba's cache)
    for repeat in range(5):
        t0 = time.perf_counter()
        fit_sep(X, 1.0, repeat, max_iter=passes)
        sep_times.append((time.perf_counter() - t0) / passes)
        t0 = time.perf_counter()
        fit_sep(X, 1.0, repeat, max_iter=passes, batch_size=None)
        full_times.append((time.perf_counter() - t0) / passes)
        gm = GaussianMixture(
            N_COMPONENTS, covariance_type="spherical", max_iter=passes, tol=0.0,
            random_state=repeat, init_params="random_from_data",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            gm.fit(X)
        em_times.append((time.perf_counter() - t0) / gm.n_iter_)
    sep_s, full_s, em_s = np.median(sep_times), np.median(full_times), np.median(em_times)
    print(
        f"\nN = 100,000, d = 4, 4 components, one thread: scikit-learn "
        f"GaussianMixture (spherical) {em_s * 1e3:.1f} ms per EM iteration; DP-SEP "
        f"{sep_s * 1e3:.1f} ms per pass of ten updates (ratio {sep_s / em_s:.2f}), "
        f"{full_s * 1e3:.1f} ms per full-batch pass (ratio {full_s / em_s:.2f})"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sections = {"table1": table1, "private": private, "speed": speed}
    parser.add_argument(
        "sections", nargs="*", default=list(sections), help=", ".join(sections)
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 5.0, 10.0])
    parser.add_argument("--gibbs-sweeps", type=int, default=20_000)
    args = parser.parse_args()
    unknown = [name for name in args.sections if name not in sections]
    if unknown:
        parser.error(f"unknown section {', '.join(unknown)}")
    if args.gibbs_sweeps <= GIBBS_BURN_IN:
        parser.error(
            f"--gibbs-sweeps must exceed the reference's burn-in of {GIBBS_BURN_IN} "
            "sweeps"
        )
    import numba

    numba.set_num_threads(1)
    with threadpool_limits(1):
        for section in args.sections:
            sections[section](args)


if __name__ == "__main__":
    main()
