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
3. One update's sum of DPSEPRegressor's network at the weight means, batches
   of 256 and 1024 rows of 9 inputs (protein's shape, 50 hidden units): the
   fused kernel ``mlp_clipped_mean_site_sum`` (sites, clip and sum one row at
   a time) against the unfused path it replaced (``mlp_mean_sites`` on the
   batch's rows, the precision block weighted, the finiteness mask,
   ``clip_rows``, ``sum(axis=0)``), which gives the same bits: medians over
   21 runs in this process and their ratio.
"""

import time

import numpy as np

from skprivfact import mechanisms
from skprivfact._pbp_kernels import mlp_clipped_mean_site_sum, mlp_mean_sites
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
    print("network update sum at the means (fused kernel) against the unfused path:")
    n_inputs, n_hidden, n_rows = 9, 50, 45_730
    n_weights = n_hidden * (n_inputs + 1) + n_hidden + 1
    weight_mean = rng.normal(size=n_weights)
    X = rng.uniform(-1, 1, size=(n_rows, n_inputs))
    y = rng.uniform(-1, 1, size=n_rows)
    arguments = mechanisms._row_clip_arguments(2 * n_weights, 1.0)

    def unfused(rows):
        sites = mlp_mean_sites(X[rows], y[rows], weight_mean, n_hidden, 0.05)
        sites[:, :n_weights] *= 0.01
        sites[~np.isfinite(sites).all(axis=1)] = 0.0
        return clip_rows(sites, 1.0).sum(axis=0)

    def fused(rows):
        return mlp_clipped_mean_site_sum(
            X, y, rows, weight_mean, n_hidden, 0.05, 0.01, *arguments
        )

    for batch_size in (256, 1024):
        rows = np.sort(rng.choice(n_rows, batch_size, replace=False))
        assert np.array_equal(fused(rows), unfused(rows))  # compiled, and the same bits
        t_fused = median_time(lambda rows=rows: fused(rows))
        t_unfused = median_time(lambda rows=rows: unfused(rows))
        print(
            f"batch {batch_size}: fused {t_fused * 1e3:.3f} ms, unfused "
            f"{t_unfused * 1e3:.3f} ms, ratio unfused / fused {t_unfused / t_fused:.2f}"
        )
