"""Parallel numba kernels that stay usable in forked children.

numba's default threading layer here is GNU OpenMP, which cannot survive a
fork: a child of a process whose OpenMP pool has run is killed at its first
parallel region ("fork() called from a process already using GNU OpenMP").
joblib's multiprocessing backend forks, so ``GridSearchCV(n_jobs=2)`` after a
fit in the same process would lose its workers. The other layers do not fit
either: workqueue aborts on concurrent calls from two threads (joblib's
threading backend), and tbb is an extra dependency. So every parallel kernel
also has a serial twin, compiled on first use, which a process forked after
the OpenMP pool started runs instead; loky's fresh processes and threads keep
the parallel kernels.

The twin also serves small problems. Every call of a parallel kernel ends at a
barrier, and on a machine whose cores are busy with other work one of the
threads is often descheduled for a whole time slice (milliseconds) before it
gets there: on 200 x 20 counts, a Gibbs chain of 1500 sweeps took 22 s with two
threads on a loaded machine and 1.2 s serially. Below ``MIN_PARALLEL_WORK``
elements in the largest array argument, a call's work is smaller than such a
stall and the serial twin runs.
"""

import functools
import os
import types

import numba
from numba import njit

_fork_state = {"forked_from_openmp": False, "at_fork": False}

# Size of the largest array argument (entries of the count matrix, in
# practice) from which a kernel call runs in parallel: at a few tenths of a
# microsecond per entry, about 20 ms of work, large next to a lost time slice.
MIN_PARALLEL_WORK = 2**17


def _layer_is_openmp():
    try:
        return numba.threading_layer() == "omp"
    except ValueError:  # no parallel region has run yet
        return False


def _before_fork():
    _fork_state["at_fork"] = _layer_is_openmp()


def _after_fork_in_child():
    _fork_state["forked_from_openmp"] |= _fork_state["at_fork"]


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def serial_only():
    """Whether parallel kernels must run serially in this process."""
    return _fork_state["forked_from_openmp"]


def _work(args):
    return max((getattr(arg, "size", 0) for arg in args), default=0)


def parallel_kernel(func):
    """``njit(cache=True, parallel=True)`` with a serial twin for forked children
    and small calls.

    The twin is a copy of the function under another qualified name, so the
    two compiled versions keep separate cache files.
    """
    parallel = njit(cache=True, parallel=True)(func)
    twin = types.FunctionType(func.__code__, func.__globals__, func.__name__ + "_serial",
                              func.__defaults__, func.__closure__)
    twin.__qualname__ = func.__qualname__ + "_serial"
    twin.__doc__ = func.__doc__
    serial = njit(cache=True)(twin)

    @functools.wraps(func)
    def dispatch(*args):
        if _fork_state["forked_from_openmp"] or _work(args) < MIN_PARALLEL_WORK:
            return serial(*args)
        return parallel(*args)

    dispatch.parallel = parallel
    dispatch.serial = serial
    return dispatch
