"""PrivatePoissonMF at scale: seconds per sweep and peak memory per entry.

Usage::

    python benchmarks/bench_poisson_mf_scale.py [--sizes 1e6 1e7 1e8]
        [--shapes 1000x10000 ...] [--streamed-1e9]
        [--modes memory streamed dask nmf] [--components 20] [--sweeps 3]
        [--estimator-fits] [--partial-fit] [--workdir /tmp/skprivfact_scale]
        [--nmf-max-entries 1e7]

Synthetic rank-K counts (gamma(0.3, 1) factors) privatized at epsilon/N = 1,
generated a block of rows at a time into an int16 file on disk, for the
shapes 1000 x 1000 (1e6 entries), 10,000 x 1000 (1e7), 20,000 x 5000 (1e8)
and 100,000 x 10,000 (1e9, with ``--streamed-1e9``: streamed only). Every
configuration runs in a fresh process, which reports its peak resident
memory (VmHWM, reset after the input is loaded) beyond what it held before
the fit, per entry:

- memory: the int16 matrix read into memory, then fitted;
- streamed: the same file as a ``numpy.memmap``, read block by block in
  every sweep (its file pages count as resident while mapped, so the
  anonymous memory, RssAnon, is reported as well);
- dask: a ``dask.distributed`` LocalCluster with 2 single-threaded worker
  processes, the rows loaded from the file by the workers in chunks;
  the peak is that of the driver plus both workers, and the communication
  per sweep is the payload of the arrays sent to and from the workers;
- nmf: scikit-learn's NMF(beta_loss="kullback-leibler", solver="mu") on the
  counts clipped at 0 (float64), where it fits (1e6 and 1e7 by default).

Seconds per sweep is the median CPU time of the private CAVI sweeps (a
sweep without the objective's evaluation; the Dask driver's wall time for
dask, whose work runs in the workers, with the workers' CPU time per sweep
beside it), after a naive warm start of the same
number of sweeps; NMF's is the CPU time of an iteration (the difference
between the median fits of ``3 * sweeps`` and ``sweeps`` iterations, over
``2 * sweeps``, so that the fit's fixed costs are left out). For the
streamed 1e9 run the MAE of the fitted rates against the true ones on 10^5
random entries is printed, with the MAE of a constant (the median rate) for
scale. Run it with nothing else busy on the machine: at 1e9 entries it
writes a 2 GB file and takes about ten minutes.

``--estimator-fits`` measures whole ``PrivatePoissonMF.fit`` calls (10 naive
and 10 private sweeps) on 8000 x 4000 rank-20 counts and on PBMC (K = 10),
privatized at epsilon/N = 1 and given as int64 and as int16: peak memory
beyond the loaded input, CPU per sweep. ``--partial-fit`` compares one pass
of ``partial_fit`` over 10^7 entries with the batch fit on held-out rows
(``heldout_loglik``).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SHAPES = {
    "1e6": (1000, 1000),
    "1e7": (10_000, 1000),
    "1e8": (20_000, 5000),
    "1e9": (100_000, 10_000),
}
EPSILON = 1.0
FACTOR_SHAPE = 0.3
GENERATE_ROWS = 2000


def status(key):
    """A field of /proc/self/status in bytes."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak():
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def factors(shape, n_components, seed=0):
    rng = np.random.default_rng(seed)
    n_rows, n_cols = shape
    theta = rng.gamma(FACTOR_SHAPE, 1.0, size=(n_rows, n_components))
    phi = rng.gamma(FACTOR_SHAPE, 1.0, size=(n_components, n_cols))
    return theta, phi


def generate(path, shape, n_components):
    """Write the privatized counts, int16, a block of rows at a time."""
    from skprivfact.mechanisms import two_sided_geometric

    if path.exists() and path.stat().st_size == 2 * shape[0] * shape[1]:
        return
    theta, phi = factors(shape, n_components)
    out = np.memmap(path, dtype=np.int16, mode="w+", shape=shape)
    for block, start in enumerate(range(0, shape[0], GENERATE_ROWS)):
        stop = min(start + GENERATE_ROWS, shape[0])
        rng = np.random.default_rng([1, block])
        counts = rng.poisson(theta[start:stop] @ phi)
        counts += two_sided_geometric(
            EPSILON, 1, size=counts.shape, random_state=np.random.RandomState(block)
        )
        if np.abs(counts).max() > np.iinfo(np.int16).max:
            raise ValueError("counts beyond int16; lower the factors' scale")
        out[start:stop] = counts
    out.flush()
    del out


def _load_rows(path, shape, start, stop):
    data = np.memmap(path, dtype=np.int16, mode="r", shape=shape)
    return np.array(data[start:stop])


def timed_sweeps(cavi):
    """Record the CPU and wall time of each call of the sweep function."""
    original = cavi._sweep_totals
    calls = []

    def wrapper(source, alpha, *args, **kwargs):
        cpu, wall = time.process_time(), time.perf_counter()
        result = original(source, alpha, *args, **kwargs)
        calls.append(
            (alpha is not None, time.process_time() - cpu, time.perf_counter() - wall)
        )
        return result

    cavi._sweep_totals = wrapper
    return calls


def child(config):
    """One configuration, in this fresh process: prints a JSON line."""
    from skprivfact.poisson_mf import PrivatePoissonMF, _cavi
    from skprivfact.poisson_mf._blocks import InMemoryRowBlocks

    shape, K, sweeps, mode = (
        config["shape"],
        config["K"],
        config["sweeps"],
        config["mode"],
    )
    path = Path(config["path"])
    n_entries = shape[0] * shape[1]
    alpha = math.exp(-EPSILON)
    prior = (np.full(K, 0.1), np.ones(K))
    # compile on a small block first, outside the measurement
    small = np.array(np.memmap(path, dtype=np.int16, mode="r", shape=shape)[:20, :50])
    read_only = small.copy()
    read_only.flags.writeable = False  # a read-only memmap's blocks
    start = [
        np.random.default_rng(0).uniform(1, 2, size=s)
        for s in [(20, K), (20, K), (K, 50), (K, 50)]
    ]
    for counts in (small, read_only):
        for a in (None, alpha):
            _cavi.fit_cavi(
                counts,
                a,
                *[s.copy() for s in start],
                theta_prior=prior,
                phi_prior=prior,
                max_iter=2,
                evaluate_every=1,
            )
    out = {"mode": mode, "shape": shape, "K": K}
    if mode == "nmf":
        from sklearn.decomposition import NMF

        X = np.maximum(np.fromfile(path, dtype=np.int16).reshape(shape), 0)
        reset_peak()
        base = status("VmRSS")
        # A fit's fixed costs (the float64 copy, the start, the divergence at
        # the start and at the end) are not an iteration's: the CPU time per
        # iteration is the difference between the median fits of 3 * sweeps
        # and of sweeps iterations, over 2 * sweeps, after a fit that is not
        # timed (the first touches fresh memory pages).
        cpu_seconds = {sweeps: [], 3 * sweeps: []}
        for n_iterations in [1] + 3 * [sweeps, 3 * sweeps]:
            cpu = time.process_time()
            NMF(
                K,
                beta_loss="kullback-leibler",
                solver="mu",
                init="random",
                max_iter=n_iterations,
                tol=0,
                random_state=0,
            ).fit(X)
            if n_iterations in cpu_seconds:
                cpu_seconds[n_iterations].append(time.process_time() - cpu)
        medians = [np.median(cpu_seconds[n]) for n in (sweeps, 3 * sweeps)]
        out["s_per_sweep"] = (medians[1] - medians[0]) / (2 * sweeps)
        out["peak_bytes_per_entry"] = (status("VmHWM") - base) / n_entries
        print(json.dumps(out))
        return
    client = cluster = None
    if mode == "memory":
        X = np.fromfile(path, dtype=np.int16).reshape(shape)
    elif mode == "streamed":
        X = np.memmap(path, dtype=np.int16, mode="r", shape=shape)
    else:
        import dask
        import dask.array as da
        from distributed import Client, LocalCluster

        from skprivfact.poisson_mf._dask import DaskRowBlocks

        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            memory_limit=0,
        )
        client = Client(cluster)
        # at least 8 chunks (4 a worker), at most 16 M entries (32 MB) each
        rows = max(1, min(1 << 24, n_entries // 8) // shape[1])
        chunks = [
            da.from_delayed(
                dask.delayed(_load_rows)(str(path), shape, s, min(s + rows, shape[0])),
                shape=(min(s + rows, shape[0]) - s, shape[1]),
                dtype=np.int16,
            )
            for s in range(0, shape[0], rows)
        ]
        X = DaskRowBlocks(da.concatenate(chunks, axis=0), client)
        client.run(reset_peak)
        worker_base = client.run(status, "VmRSS")
    calls = timed_sweeps(_cavi)
    # the estimator's random start, scaled to the mean clipped count
    source = X if mode == "dask" else InMemoryRowBlocks(X)
    total = sum(source.map(_cavi.block_sum, (), True))
    theta_shape, theta_rate, phi_shape, phi_rate = PrivatePoissonMF(K)._init_factors(
        shape, total, np.random.RandomState(0)
    )
    reset_peak()
    base = status("VmRSS")
    base_anon = status("RssAnon")
    wall = time.perf_counter()
    naive = _cavi.fit_cavi(
        X,
        None,
        theta_shape,
        theta_rate,
        phi_shape,
        phi_rate,
        theta_prior=prior,
        phi_prior=prior,
        max_iter=sweeps,
        evaluate_every=sweeps,
    )
    if mode == "dask":
        sent, received = X.bytes_sent, X.bytes_received
    if mode == "dask":
        worker_cpu = client.run(time.process_time)
    result = _cavi.fit_cavi(
        X,
        alpha,
        naive["theta_shape"],
        naive["theta_rate"],
        naive["phi_shape"],
        naive["phi_rate"],
        theta_prior=prior,
        phi_prior=prior,
        max_iter=sweeps,
        evaluate_every=sweeps,
    )
    out["total_s"] = time.perf_counter() - wall
    private = [c for c in calls if c[0]]
    column = 1 if mode != "dask" else 2
    out["s_per_sweep"] = float(np.median([c[column] for c in private]))
    out["naive_s_per_sweep"] = float(np.median([c[column] for c in calls if not c[0]]))
    peak = status("VmHWM") - base
    if mode == "streamed":
        out["anon_now_bytes_per_entry"] = (status("RssAnon") - base_anon) / n_entries
    if mode == "dask":
        # the workers hold the compact chunks (2 bytes an entry) from before
        worker_peaks = client.run(status, "VmHWM")
        worker_extra = [worker_peaks[w] - worker_base[w] for w in worker_peaks]
        out["worker_peak_bytes"] = sorted(worker_extra)
        peak += sum(worker_extra)
        # the private sweeps and their one objective evaluation
        worker_cpu_after = client.run(time.process_time)
        # the workers' CPU time of the private sweeps, their objective included
        out["worker_cpu_per_sweep"] = (
            sum(worker_cpu_after[w] - worker_cpu[w] for w in worker_cpu) / sweeps
        )
        out["sent_bytes_per_sweep"] = (X.bytes_sent - sent) / sweeps
        out["received_bytes_per_sweep"] = (X.bytes_received - received) / sweeps
    out["peak_bytes_per_entry"] = peak / n_entries
    if config.get("mae"):
        theta, phi = factors(shape, K)
        rng = np.random.default_rng(2)
        rows = rng.integers(0, shape[0], 100_000)
        cols = rng.integers(0, shape[1], 100_000)
        truth = np.einsum("ik,ki->i", theta[rows], phi[:, cols])
        fitted_theta = result["theta_shape"] / result["theta_rate"]
        fitted_phi = result["phi_shape"] / result["phi_rate"]
        estimate = np.einsum("ik,ki->i", fitted_theta[rows], fitted_phi[:, cols])
        out["mae_rates"] = float(np.abs(estimate - truth).mean())
        out["mae_constant"] = float(np.abs(truth - np.median(truth)).mean())
        out["mean_rate"] = float(truth.mean())
    if client is not None:
        client.close()
        cluster.close()
    print(json.dumps(out))


def estimator_child(config):
    """A whole PrivatePoissonMF.fit on a saved matrix: peak beyond the loaded
    input and CPU per private and naive sweep (fit_cavi's calls timed)."""
    from skprivfact.poisson_mf import PrivatePoissonMF, _estimator

    X = np.load(config["path"])
    K = config["K"]
    # the shapes given: the sweeps of one fit are measured, not the search
    # of "auto" shapes (one fit per candidate on 90% of the rows)
    kwargs = {
        "epsilon": EPSILON,
        "max_iter": config["sweeps"],
        "tol": 0,
        "evaluate_every": 5,
        "random_state": 0,
        "factor_prior_shape": 0.1,
        "component_prior_shape": 0.1,
    }
    PrivatePoissonMF(K, **{**kwargs, "max_iter": 6}).fit(
        np.ascontiguousarray(X[:50, :40])
    )
    calls = []
    original = _estimator.fit_cavi

    def timed(*args, **kw):
        cpu = time.process_time()
        result = original(*args, **kw)
        calls.append((args[1] is not None, result["n_iter"], time.process_time() - cpu))
        return result

    _estimator.fit_cavi = timed
    reset_peak()
    base = status("VmRSS")
    PrivatePoissonMF(K, **kwargs).fit(X)
    peak = status("VmHWM") - base
    # the first private and the first naive call: the fit's sweeps (the
    # count-scale pass over the rows comes after them)
    private = next(c for c in calls if c[0])
    naive = next(c for c in calls if not c[0])
    print(
        json.dumps(
            {
                "peak_bytes_per_entry": peak / X.size,
                "private_cpu_per_sweep": private[2] / private[1],
                "naive_cpu_per_sweep": naive[2] / naive[1],
            }
        )
    )


def estimator_fits(workdir, sweeps):
    """Peak memory and CPU per sweep of PrivatePoissonMF.fit on 8000 x 4000
    (rank 20, factor shape 0.1) and on PBMC (K = 10) privatized at
    epsilon/N = 1, given as int64 and as int16."""
    import scipy.sparse as sp

    from skprivfact.datasets import get_data_home, make_poisson_factorization
    from skprivfact.mechanisms import two_sided_geometric

    problems = []
    _, noisy, _, _ = make_poisson_factorization(
        8000, 4000, 20, factor_shape=0.1, epsilon=EPSILON, random_state=0
    )
    problems.append(("8000 x 4000", 20, np.asarray(noisy, dtype=np.int64)))
    pbmc = get_data_home() / "pbmc_facs" / "counts_csr.npz"
    if pbmc.exists():
        counts = sp.load_npz(pbmc).toarray().astype(np.int64)
        counts += two_sided_geometric(
            EPSILON, 1, size=counts.shape, random_state=0
        ).astype(np.int64)
        problems.append((f"PBMC {counts.shape[0]} x {counts.shape[1]}", 10, counts))
    print(
        "PrivatePoissonMF.fit (naive start and private CAVI, "
        f"{sweeps} sweeps each), peak beyond the loaded input:"
    )
    for name, K, matrix in problems:
        for dtype in (np.int64, np.int16):
            path = workdir / f"fit_input_{dtype.__name__}.npy"
            np.save(path, matrix.astype(dtype))
            out = run({"estimator": True, "path": str(path), "K": K, "sweeps": sweeps})
            if out is None:
                print(f"  {name} {dtype.__name__}: failed")
                continue
            # this library compacts int64 input to int16 (2 bytes an entry)
            compact = " (any copy of the input included)" if dtype is np.int64 else ""
            print(
                f"  {name}, K = {K}, {dtype.__name__} input: peak "
                f"{out['peak_bytes_per_entry']:.2f} B/entry{compact}; CPU per "
                f"private sweep {out['private_cpu_per_sweep']:.3f} s, per naive "
                f"sweep {out['naive_cpu_per_sweep']:.3f} s",
                flush=True,
            )
            path.unlink()


def partial_fit_check(n_rows=10_000, n_cols=1000, n_components=10, block=1000):
    """Held-out clean log-likelihood after one pass of partial_fit over
    n_rows x n_cols entries in blocks of ``block`` rows, against the batch fit."""
    from skprivfact.datasets import make_poisson_factorization
    from skprivfact.poisson_mf import PrivatePoissonMF, heldout_loglik

    X, X_noisy, _, _ = make_poisson_factorization(
        n_rows + 500,
        n_cols,
        n_components,
        factor_shape=FACTOR_SHAPE,
        epsilon=EPSILON,
        random_state=0,
    )
    train, test = slice(0, n_rows), slice(n_rows, None)
    cpu = time.process_time()
    # the online algorithm against the batch one at the same priors
    shapes = {"factor_prior_shape": 0.1, "component_prior_shape": 0.1}
    batch = PrivatePoissonMF(n_components, epsilon=EPSILON, random_state=0, **shapes)
    batch.fit(X_noisy[train])
    batch_cpu = time.process_time() - cpu
    batch_score = heldout_loglik(batch, X_noisy[test], X[test])
    cpu = time.process_time()
    online = PrivatePoissonMF(n_components, epsilon=EPSILON, random_state=0, **shapes)
    scores = []
    for start in range(0, n_rows, block):
        online.partial_fit(X_noisy[start : start + block])
        if start == 0 or start + block >= n_rows:
            scores.append(heldout_loglik(online, X_noisy[test], X[test]))
    online_cpu = time.process_time() - cpu
    gap = (batch_score - scores[-1]) / abs(batch_score)
    print(
        f"partial_fit, one pass over {n_rows} x {n_cols} = {n_rows * n_cols:.0e} entries "
        f"in blocks of {block} rows, rank {n_components}: held-out clean log-likelihood "
        f"per entry {scores[0]:.4f} after the first block, {scores[-1]:.4f} after the "
        f"pass ({online_cpu:.0f} s CPU with the scoring); batch fit {batch_score:.4f} "
        f"({batch_cpu:.0f} s CPU); the pass is {100 * gap:.2f}% below the batch fit"
    )


def run(config):
    env = dict(
        os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1"
    )
    process = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(config)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        print(process.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        nargs="*",
        default=["1e6", "1e7", "1e8"],
        choices=["1e6", "1e7", "1e8"],
    )
    parser.add_argument(
        "--shapes",
        nargs="+",
        default=[],
        help="further shapes ROWSxCOLUMNS (for example 1000x10000), run after --sizes",
    )
    parser.add_argument("--streamed-1e9", action="store_true")
    parser.add_argument(
        "--estimator-fits",
        action="store_true",
        help="also measure PrivatePoissonMF.fit on 8000 x 4000 and PBMC",
    )
    parser.add_argument(
        "--partial-fit",
        action="store_true",
        help="also compare one pass of partial_fit over 1e7 entries with the batch fit",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["memory", "streamed", "dask", "nmf"],
        choices=["memory", "streamed", "dask", "nmf"],
    )
    parser.add_argument("--components", type=int, default=20)
    parser.add_argument("--sweeps", type=int, default=3)
    parser.add_argument("--nmf-max-entries", type=float, default=1e7)
    parser.add_argument("--workdir", default="/tmp/skprivfact_scale")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        config = json.loads(args.child)
        (estimator_child if config.get("estimator") else child)(config)
        return
    if args.sweeps < 3:
        # The first private sweep compiles its kernels: the median of three
        # or more leaves it out.
        parser.error("--sweeps must be at least 3")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    K = args.components
    print(
        f"rank {K}, epsilon/N = {EPSILON}, {args.sweeps} naive + {args.sweeps} private "
        "sweeps per configuration; s/sweep is the median private sweep; peak is "
        "bytes per entry beyond the process's memory before the fit"
    )
    print(
        f"{'entries':>8} {'shape':>16} {'mode':>9} {'s/sweep':>8} "
        f"{'peak B/entry':>12}  notes"
    )
    shapes = dict(SHAPES)
    for text in args.shapes:
        shapes[text] = tuple(int(n) for n in text.split("x"))
    jobs = [(size, mode) for size in [*args.sizes, *args.shapes] for mode in args.modes]
    if args.streamed_1e9:
        jobs.append(("1e9", "streamed"))
    for size, mode in jobs:
        shape = shapes[size]
        if mode == "nmf" and shape[0] * shape[1] > args.nmf_max_entries:
            continue
        path = workdir / f"noisy_{shape[0]}x{shape[1]}_k{K}.int16"
        start = time.perf_counter()
        generate(path, shape, K)
        generated = time.perf_counter() - start
        config = {
            "shape": shape,
            "K": K,
            "sweeps": args.sweeps,
            "mode": mode,
            "path": str(path),
            "mae": size == "1e9",
        }
        out = run(config)
        if out is None:
            print(f"{size:>8} {shape!s:>16} {mode:>9}   failed")
            continue
        notes = []
        if "sent_bytes_per_sweep" in out:
            notes.append(
                f"sent {out['sent_bytes_per_sweep'] / 1e6:.1f} MB/sweep, "
                f"received {out['received_bytes_per_sweep'] / 1e6:.1f} MB/sweep"
            )
        if "worker_cpu_per_sweep" in out:
            notes.append(
                f"workers' CPU {out['worker_cpu_per_sweep']:.2f} s/sweep with the "
                "objective's share"
            )
        if "anon_now_bytes_per_entry" in out:
            notes.append(
                f"anonymous after fit {out['anon_now_bytes_per_entry']:.2f} B/entry"
            )
        if "mae_rates" in out:
            notes.append(
                f"MAE of rates {out['mae_rates']:.4f} (constant "
                f"{out['mae_constant']:.4f}, mean rate {out['mean_rate']:.3f}), "
                f"generated in {generated:.0f} s, fit {out['total_s']:.0f} s"
            )
        if "naive_s_per_sweep" in out:
            notes.append(f"naive sweep {out['naive_s_per_sweep']:.2f} s")
        print(
            f"{size:>8} {tuple(shape)!s:>16} {mode:>9} {out['s_per_sweep']:8.3f} "
            f"{out['peak_bytes_per_entry']:12.2f}  {'; '.join(notes)}",
            flush=True,
        )
    if args.estimator_fits:
        estimator_fits(workdir, 10)
    if args.partial_fit:
        partial_fit_check()


if __name__ == "__main__":
    main()
