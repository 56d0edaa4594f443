"""clip_rows: rows on the sphere against rows inside, and its kernel against numpy.

Run from the project root (with the package installed, or ``PYTHONPATH=.``)::

    python benchmarks/bench_clip_rows.py

1. Rows normalised to exactly the bound (LIBSVM's a1a, any L2-normalised
   data) are too close to the sphere for the float test to certify, so they
   are scaled; rows at 0.999 of the bound are certified and returned as they
   are. Prints the median time of each over 21 runs and their ratio.
2. ``clip_rows`` (its numba kernel, one pass per row) against the numpy path
   it replaced above the subnormal bound (the finiteness check over the whole
   array, the norms, masks and the scaling of the rows outside), on the same
   rows, half of them outside the ball: medians over 21 runs in this process
   and their ratio. The 256 x 1102 case is one batch of DPSEPRegressor's
   network updates on protein (50 hidden units, 9 inputs: 551 weights, a
   precision and a gradient entry each).
"""

import time

import numpy as np

from skprivfact import mechanisms
from skprivfact.mechanisms import clip_rows


def numpy_clip_rows(X, max_norm):
    """The numpy path: copy, finiteness check over the array, masked scaling."""
    return mechanisms._clip_rows_inplace(
        mechanisms._as_finite_float_array(X, "X"), max_norm
    )


def median_time(function, repeats=21):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    for n_samples, n_features in [(20_000, 123), (100_000, 50), (2_000, 1_000)]:
        on_sphere = rng.normal(size=(n_samples, n_features))
        on_sphere /= np.linalg.norm(on_sphere, axis=1, keepdims=True)
        inside = on_sphere * 0.999
        t_sphere = median_time(lambda: clip_rows(on_sphere, 1.0))
        t_inside = median_time(lambda: clip_rows(inside, 1.0))
        print(
            f"{n_samples} x {n_features}: on the sphere {t_sphere * 1e3:.1f} ms, "
            f"inside {t_inside * 1e3:.1f} ms, ratio {t_sphere / t_inside:.2f}"
        )
    print("clip_rows (kernel) against the numpy path, half the rows outside:")
    for n_samples, n_features in [(256, 1102), (1024, 1102), (20_000, 123)]:
        X = rng.normal(size=(n_samples, n_features))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        X *= rng.choice([0.5, 2.0], size=(n_samples, 1))
        clip_rows(X, 1.0)  # compiled before timing
        t_kernel = median_time(lambda: clip_rows(X, 1.0))
        t_numpy = median_time(lambda: numpy_clip_rows(X, 1.0))
        print(
            f"{n_samples} x {n_features}: kernel {t_kernel * 1e3:.3f} ms, "
            f"numpy {t_numpy * 1e3:.3f} ms, ratio numpy / kernel "
            f"{t_numpy / t_kernel:.2f}"
        )
