"""CPU time of each estimator's first fit from a cold numba cache, and warm.

Every case runs in a fresh interpreter whose ``NUMBA_CACHE_DIR`` is a new
empty directory (a cold cache: every kernel compiles), then again in a fresh
interpreter on the cache the first one wrote (a warm cache: kernels load from
disk). Each interpreter reports the CPU time (user + system, all threads) of
``import skprivfact``, of the first fit and of a second, identical fit in the
same process (no compilation at all). Medians over ``--repeat`` runs.

Usage::

    python benchmarks/bench_first_fit.py [--repeat 3] [--cases cavi_private,...]
    python benchmarks/bench_first_fit.py --demo   # wall time of the demo, cold

Run it with the tree to measure first on the path (``PYTHONPATH=.``).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
    "geometric": (
        "from skprivfact import GeometricPrivatizer\n"
        "X = rng.poisson(3.0, size=(300, 200))\n"
        "make = lambda: GeometricPrivatizer(epsilon=1.0, random_state=0)\n"
        "fit = lambda est: est.fit_transform(X)\n"
    ),
    "cavi_private": (
        "from skprivfact import PrivatePoissonMF\n"
        "from skprivfact.datasets import make_poisson_factorization\n"
        "_, X, _, _ = make_poisson_factorization(600, 300, 5, factor_shape=0.3,"
        " epsilon=1.0, random_state=0)\n"
        "make = lambda: PrivatePoissonMF(5, epsilon=1.0, random_state=0)\n"
        "fit = lambda est: est.fit_transform(X)\n"
    ),
    "cavi_clean": (
        "from skprivfact import PrivatePoissonMF\n"
        "from skprivfact.datasets import make_poisson_factorization\n"
        "X, _, _, _ = make_poisson_factorization(600, 300, 5, factor_shape=0.3,"
        " random_state=0)\n"
        "make = lambda: PrivatePoissonMF(5, random_state=0)\n"
        "fit = lambda est: est.fit_transform(X)\n"
    ),
    "mcmc_private": (
        "from skprivfact import PrivatePoissonMF\n"
        "from skprivfact.datasets import make_poisson_factorization\n"
        "_, X, _, _ = make_poisson_factorization(600, 300, 5, factor_shape=0.3,"
        " epsilon=1.0, random_state=0)\n"
        "make = lambda: PrivatePoissonMF(5, epsilon=1.0, solver='mcmc', n_burn_in=50,"
        " n_kept_samples=50, random_state=0)\n"
        "fit = lambda est: est.fit_transform(X)\n"
    ),
    "dplda": (
        "from skprivfact import DPLDA\n"
        "X = rng.poisson(0.5, size=(2000, 300))\n"
        "make = lambda: DPLDA(5, batch_size=500, doc_length=100, random_state=0)\n"
        "fit = lambda est: est.fit(X)\n"
    ),
    "dpsep_linear": (
        "from skprivfact import DPSEPRegressor\n"
        "X = rng.uniform(size=(2000, 8)); y = X @ rng.normal(size=8)\n"
        "make = lambda: DPSEPRegressor(bounds_X=(0, 1), bounds_y=(-8, 8),"
        " random_state=0)\n"
        "fit = lambda est: est.fit(X, y)\n"
    ),
    "dpsep_mlp": (
        "from skprivfact import DPSEPRegressor\n"
        "X = rng.uniform(size=(2000, 8)); y = X @ rng.normal(size=8)\n"
        "make = lambda: DPSEPRegressor(model='mlp', bounds_X=(0, 1), bounds_y=(-8, 8),"
        " max_iter=5, random_state=0)\n"
        "fit = lambda est: est.fit(X, y)\n"
    ),
    "dplogreg": (
        "from skprivfact import DPBayesLogReg\n"
        "X = rng.normal(size=(2000, 8)); y = (X[:, 0] > 0).astype(int)\n"
        "make = lambda: DPBayesLogReg(data_norm=3.0, random_state=0)\n"
        "fit = lambda est: est.fit(X, y)\n"
    ),
}

_CHILD = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np
t0 = time.process_time()
import skprivfact
t_import = time.process_time() - t0
rng = np.random.default_rng(0)
{setup}
t0 = time.process_time(); fit(make()); t_first = time.process_time() - t0
t0 = time.process_time(); fit(make()); t_second = time.process_time() - t0
print(json.dumps({{"import": t_import, "first": t_first, "second": t_second}}))
"""


def _run(code, cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _cases(args):
    print(f"{'case':14} {'cache':5} {'import':>7} {'first fit':>9} {'second':>7}  "
          "(CPU seconds, medians)")
    names = args.cases.split(",") if args.cases else list(CASES)
    for name in names:
        code = _CHILD.format(setup=CASES[name])
        runs = {"cold": [], "warm": []}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as cache_dir:
                runs["cold"].append(_run(code, cache_dir))
                runs["warm"].append(_run(code, cache_dir))
        for state, results in runs.items():
            med = {key: statistics.median(r[key] for r in results) for key in results[0]}
            print(f"{name:14} {state:5} {med['import']:7.2f} {med['first']:9.2f} "
                  f"{med['second']:7.2f}", flush=True)


def _demo(args):
    walls = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as cache_dir:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "skprivfact", "--figure",
                            os.path.join(cache_dir, "figure.png")], env=env, check=True,
                           capture_output=True)
            walls.append(time.perf_counter() - start)
    print(f"demo from a cold cache: median {statistics.median(walls):.1f} s wall "
          f"over {len(walls)} runs ({', '.join(f'{w:.1f}' for w in walls)})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default=None,
                        help=f"comma-separated subset of {', '.join(CASES)}")
    parser.add_argument("--demo", action="store_true",
                        help="time the demo (python -m skprivfact) instead")
    args = parser.parse_args()
    unknown = set(args.cases.split(",")) - set(CASES) if args.cases else set()
    if unknown:
        parser.error(f"unknown cases {', '.join(sorted(unknown))}")
    _demo(args) if args.demo else _cases(args)


if __name__ == "__main__":
    main()
