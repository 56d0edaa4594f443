"""The privacy accountant: epsilon of a long training run, and calibration."""

from skprivfact import accounting
from skprivfact.accounting import RDPAccountant, calibrate_noise_multiplier

from .common import Benchmark

NOISE_MULTIPLIER = 1.1
SAMPLE_RATE = 0.01
STEPS = 10_000
DELTA = 1e-5


class AccountantSuite(Benchmark):
    """A DP-SGD-sized run: 10,000 steps at sampling rate 0.01."""

    # One call per setup: every timed call starts from an empty cache.
    number = 1

    def setup(self):
        # The accountant caches the one-step RDP per (noise multiplier,
        # sampling rate); a warm cache would hide the work being measured.
        accounting._cached_rdp_one_step.cache_clear()

    def time_get_epsilon(self):
        accountant = RDPAccountant()
        accountant.compose(NOISE_MULTIPLIER, sample_rate=SAMPLE_RATE, steps=STEPS)
        accountant.get_epsilon(DELTA)

    def time_compute_rdp(self):
        accounting.compute_rdp(NOISE_MULTIPLIER, sample_rate=SAMPLE_RATE, steps=STEPS)

    def time_calibrate(self):
        calibrate_noise_multiplier(1.0, DELTA, sample_rate=SAMPLE_RATE, steps=STEPS)

    def track_epsilon(self):
        return RDPAccountant().compose(NOISE_MULTIPLIER, SAMPLE_RATE, STEPS).get_epsilon(DELTA)

    track_epsilon.unit = "epsilon"
