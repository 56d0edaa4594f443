"""Time to compute epsilon for 10,000 steps: skprivfact against dp-accounting.

Both accountants run in this process on the same settings; each timing builds
a fresh accountant and clears skprivfact's per-(sigma, q) cache, so the RDP
series are computed every time. Prints the median time of each and their ratio.

    python asv_benchmarks/bench_accounting.py
"""

import logging
import statistics
import time

from skprivfact import accounting

try:
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant
except ImportError as exc:  # pragma: no cover
    raise SystemExit("This benchmark needs dp-accounting: pip install '.[test]'") from exc

logging.getLogger("absl").setLevel(logging.ERROR)

STEPS = 10_000
DELTA = 1e-5
SETTINGS = [(1.1, 0.01), (0.8, 0.001), (2.0, 0.1), (5.0, 0.05), (0.6, 0.01)]
REPEATS = 7


def ours(noise_multiplier, sample_rate):
    accounting._cached_rdp_one_step.cache_clear()
    accountant = accounting.RDPAccountant()
    return accountant.compose(noise_multiplier, sample_rate, STEPS).get_epsilon(DELTA)


def reference(noise_multiplier, sample_rate):
    accountant = rdp_privacy_accountant.RdpAccountant()
    event = dp_event.PoissonSampledDpEvent(sample_rate, dp_event.GaussianDpEvent(noise_multiplier))
    return accountant.compose(event, STEPS).get_epsilon(DELTA)


def median_seconds(function, *args):
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        function(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    ours(1.0, 0.01), reference(1.0, 0.01)  # warm up imports and caches of scipy
    print(f"epsilon after {STEPS} steps at delta={DELTA}, median of {REPEATS} runs")
    print(f"{'sigma':>6} {'q':>6} {'eps ours':>10} {'eps ref':>10} {'ours s':>9} {'ref s':>9} {'ref/ours':>9}")
    ratios = []
    for noise_multiplier, sample_rate in SETTINGS:
        t_ours = median_seconds(ours, noise_multiplier, sample_rate)
        t_ref = median_seconds(reference, noise_multiplier, sample_rate)
        ratios.append(t_ref / t_ours)
        print(
            f"{noise_multiplier:6.2f} {sample_rate:6.3f} {ours(noise_multiplier, sample_rate):10.4f} "
            f"{reference(noise_multiplier, sample_rate):10.4f} {t_ours:9.4f} {t_ref:9.4f} {t_ref / t_ours:9.2f}"
        )
    print(f"median speed ratio (dp-accounting time / skprivfact time): {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
