"""Compilation of skprivfact's numba kernels made visible.

numba compiles a kernel on its first call with a new signature, unless the
on-disk cache (``cache=True``) already holds it; the first fit of an estimator
on a cold cache can spend tens of seconds there. A listener on numba's
``numba:compile`` event, installed when skprivfact is imported, prints one
line to stderr the first time one of skprivfact's kernels compiles in a
process, and keeps the total compilation time, which :func:`compile_seconds`
returns (the demo reports it apart from the fitting time).

Cache hits fire no compilation event: a warm cache prints nothing.
"""

import sys
import threading
import time

from numba.core import event

__all__ = ["compile_seconds", "install_compile_listener"]

NOTICE = (
    "skprivfact: compiling numba kernels on first use (once: they are cached "
    "on disk for later runs) ..."
)


class _CompileListener(event.Listener):
    """Counts the wall time of outermost compilations; notices the first one."""

    def __init__(self, stream=None):
        self.stream = stream
        self.total_seconds = 0.0
        self.noticed = False
        self._depth = 0
        self._start = 0.0
        self._lock = threading.Lock()

    def on_start(self, ev):
        with self._lock:
            if self._depth == 0:
                self._start = time.perf_counter()
            self._depth += 1
            if not self.noticed and _is_ours(ev):
                self.noticed = True
                stream = sys.stderr if self.stream is None else self.stream
                sys.stdout.flush()  # keep the notice after what was printed before
                print(NOTICE, file=stream, flush=True)

    def on_end(self, ev):
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self.total_seconds += time.perf_counter() - self._start


def _is_ours(ev):
    dispatcher = (ev.data or {}).get("dispatcher")
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
    return module.split(".")[0] == "skprivfact"


_LISTENER = _CompileListener()


def install_compile_listener():
    """Register the process-wide listener (idempotent)."""
    if not getattr(install_compile_listener, "_done", False):
        event.register("numba:compile", _LISTENER)
        install_compile_listener._done = True


def compile_seconds():
    """Wall seconds spent compiling numba kernels so far in this process.

    Returns
    -------
    seconds : float
        Total over outermost compilations (a kernel compiled while compiling
        its caller counts once), of any package's kernels.

    Examples
    --------
    >>> from skprivfact.utils._numba import compile_seconds
    >>> compile_seconds() >= 0.0
    True
    """
    return _LISTENER.total_seconds
