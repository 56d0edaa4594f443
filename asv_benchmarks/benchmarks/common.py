"""Shared timing settings and base classes for the benchmarks.

A simplified version of scikit-learn's ``asv_benchmarks/benchmarks/common.py``:
data and estimators are built in ``setup`` (numba kernels compile there too),
so the timed bodies measure the work alone.
"""

import timeit
from abc import ABC, abstractmethod


class Benchmark(ABC):
    """Timing settings shared by every benchmark class."""

    timer = timeit.default_timer  # wall time
    processes = 1
    timeout = 300
    warmup_time = 0.5
    # (min_repeat, max_repeat, max_time in seconds)
    repeat = (3, 20, 10.0)


class Transformer(ABC):
    """Time and peak memory of ``transform`` for a fitted transformer.

    Subclasses define ``params``/``param_names`` as asv expects and
    ``make_data`` and ``make_estimator``, both taking the parameter values.
    """

    @abstractmethod
    def make_data(self, *params):
        """Return the input matrix ``X``."""

    @abstractmethod
    def make_estimator(self, *params):
        """Return an unfitted estimator."""

    def setup(self, *params):
        self.X = self.make_data(*params)
        self.estimator = self.make_estimator(*params).fit(self.X)
        # First call outside the timing: JIT compilation and lazy imports.
        self.estimator.transform(self.X)

    def time_fit(self, *params):
        self.estimator.fit(self.X)

    def time_transform(self, *params):
        self.estimator.transform(self.X)

    def peakmem_transform(self, *params):
        self.estimator.transform(self.X)
