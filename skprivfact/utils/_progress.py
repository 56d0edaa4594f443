"""One progress format for every skprivfact estimator.

An estimator with a ``verbose`` parameter builds one :class:`Progress` per
phase of its fit and calls :meth:`Progress.update` after each iteration::

    progress = Progress(self.max_iter, verbose=self.verbose, desc="CAVI")
    for iteration in range(1, self.max_iter + 1):
        ...
        progress.update(iteration, objective=objective, epsilon_spent=spent)
    progress.close()

``verbose`` is read as scikit-learn does: 0 (or False) is silent; 1 prints a
line about every tenth of the iterations and the last one; 2 or more prints
every update; ``"bar"`` draws a tqdm progress bar (the ``progress`` extra),
falling back to the lines of ``verbose=1`` when tqdm is not installed. A line
reads::

    CAVI: iteration 40 of 200, objective -0.912345, epsilon spent 0.52 of 1,
    elapsed 3.1 s, ETA 12.4 s

(on one line), the objective and epsilon fields only when given, epsilon as
"of <budget>" when the estimator has a budget; the central-DP estimators count
passes ("pass 3 of 40"). The ETA extrapolates the time per iteration measured
since the first update, so one-off work up to it (compiling numba kernels, a
warm start) does not inflate it, and is "?" at the first update; an estimator
that may stop early (a tolerance) gets an upper bound.
"""

import math
import sys
import time

__all__ = ["Progress", "SolverLineRelay", "format_seconds"]


def format_seconds(seconds):
    """Seconds as "4.2 s", "3 min 05 s" or "2 h 03 min".

    Parameters
    ----------
    seconds : float
        A duration.

    Returns
    -------
    text : str

    Examples
    --------
    >>> from skprivfact.utils._progress import format_seconds
    >>> format_seconds(4.23), format_seconds(185), format_seconds(7380)
    ('4.2 s', '3 min 05 s', '2 h 03 min')
    """
    if not math.isfinite(seconds):
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Progress of one iterative phase, as lines or a tqdm bar.

    Parameters
    ----------
    total : int
        The number of iterations planned (``max_iter``).
    verbose : int, bool or "bar", default=0
        0 silent, 1 a line about every tenth of ``total``, 2 or more a line
        per update, "bar" a tqdm bar (lines when tqdm is absent).
    desc : str, default=""
        Name of the phase, printed before each line.
    epsilon_budget : float, default=None
        The estimator's privacy budget, printed after the epsilon spent.
    stream : file-like, default=None
        Where lines and the bar go; None means ``sys.stdout``.
    objective_name : str, default="objective"
        What the objective printed is (for example "perplexity").
    unit : str, default="iteration"
        What is counted (for example "pass").

    Examples
    --------
    >>> import io
    >>> from skprivfact.utils._progress import Progress
    >>> out = io.StringIO()
    >>> progress = Progress(4, verbose=2, desc="demo", epsilon_budget=1.0, stream=out)
    >>> for i in range(1, 5):
    ...     progress.update(i, objective=-1.0 / i, epsilon_spent=0.25 * i)
    >>> progress.close()
    >>> print(out.getvalue().splitlines()[-1].split(", elapsed")[0])
    demo: iteration 4 of 4, objective -0.25, epsilon spent 1 of 1
    """

    def __init__(
        self,
        total,
        *,
        verbose=0,
        desc="",
        epsilon_budget=None,
        stream=None,
        objective_name="objective",
        unit="iteration",
    ):
        self.total = int(total)
        self.objective_name = objective_name
        self.unit = unit
        self.verbose = verbose
        self.desc = desc
        self.epsilon_budget = epsilon_budget
        self.stream = stream
        self._bar = None
        self._first = None
        self._first_step = None
        self._start = time.perf_counter()
        self._last_printed = 0
        if verbose == "bar":
            try:
                from tqdm.auto import tqdm
            except ImportError:
                self.verbose = 1
            else:
                self._bar = tqdm(total=self.total, desc=desc or None, file=stream,
                                 leave=True)
        self._every = 1 if self.verbose == "bar" or (
            self.verbose is not True and self.verbose >= 2
        ) else max(1, self.total // 10)

    @property
    def enabled(self):
        """Whether anything is shown."""
        return self.verbose not in (0, False, None)

    def eta(self, iteration, now=None):
        """Seconds left to reach ``total``, from the rate since the first update.

        Unknown (NaN, printed "?") at the first update while more remain: its
        time holds one-off work (compiling, a warm start) that the later
        iterations do not repeat.
        """
        now = time.perf_counter() if now is None else now
        if iteration >= self.total:
            return 0.0
        if self._first is None or iteration <= self._first[0]:
            return math.nan
        per_iteration = (now - self._first[1]) / (iteration - self._first[0])
        return per_iteration * (self.total - iteration)

    def line(
        self,
        iteration,
        objective=None,
        epsilon_spent=None,
        now=None,
        *,
        step=None,
        eta=None,
        timing=True,
    ):
        """The progress line for ``iteration`` (without printing it).

        ``step`` (a text such as "release 4 of 40") says how far into the
        iteration the line is; ``eta`` (seconds) replaces the estimate from
        whole iterations; ``timing=False`` leaves out the elapsed time and the
        ETA (a line about one step taken on its own, as by ``partial_fit``).
        """
        now = time.perf_counter() if now is None else now
        position = f"{self.unit} {iteration} of {self.total}"
        parts = [position if step is None else f"{position} ({step})"]
        if objective is not None:
            parts.append(f"{self.objective_name} {objective:.6g}")
        if epsilon_spent is not None:
            spent = f"epsilon spent {epsilon_spent:.3g}"
            if self.epsilon_budget is not None:
                spent += f" of {self.epsilon_budget:.3g}"
            parts.append(spent)
        if timing:
            parts.append(f"elapsed {format_seconds(now - self._start)}")
            if eta is None:
                eta = self.eta(iteration, now)
            parts.append(f"ETA {format_seconds(eta)}")
        prefix = f"{self.desc}: " if self.desc else ""
        return prefix + ", ".join(parts)

    def update(self, iteration, *, objective=None, epsilon_spent=None):
        """Record that ``iteration`` (1-based) is done; show it if due.

        ``objective`` and ``epsilon_spent`` may be callables without
        arguments, evaluated only when they are shown (an epsilon from a
        privacy loss distribution, or an objective that needs a pass over a
        batch, costs more than the iteration when nothing is printed).
        """
        now = time.perf_counter()
        if self._first is None:
            self._first = (iteration, now)
        if not self.enabled:
            return
        if callable(objective):
            objective = objective() if self._due(iteration) else None
        if callable(epsilon_spent):
            epsilon_spent = epsilon_spent() if self._due(iteration) else None
        if self._bar is not None:
            self._bar.update(iteration - self._bar.n)
            postfix = {}
            if objective is not None:
                postfix[self.objective_name] = f"{objective:.6g}"
            if epsilon_spent is not None:
                postfix["epsilon"] = f"{epsilon_spent:.3g}"
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            return
        if self._due(iteration):
            stream = sys.stdout if self.stream is None else self.stream
            print(self.line(iteration, objective, epsilon_spent, now), file=stream,
                  flush=True)
            self._last_printed = iteration

    def update_within(self, iteration, step, n_steps, *, epsilon_spent=None, step_unit="release"):
        """Record that ``step`` of the ``n_steps`` of ``iteration`` are done.

        With ``verbose >= 2`` (lines, not a bar) and at least 10 steps per
        iteration, a line about every tenth of them, before the iteration's
        own line: a long pass (a private DPLDA fit's default is one) shows
        its progress. With ``verbose=1`` and fewer than ten iterations, lines
        within them too, so that the fit prints about ten in all.
        ``epsilon_spent`` may be a callable, as in :meth:`update`.
        """
        if self._bar is not None or not self.enabled:
            return
        lines_per_iteration = (
            10 if self.verbose is not True and self.verbose >= 2 else 10 // self.total
        )
        if (
            lines_per_iteration < 2
            or n_steps < lines_per_iteration
            or step >= n_steps
            or step % max(1, n_steps // lines_per_iteration)
        ):
            return
        now = time.perf_counter()
        done = iteration - 1 + step / n_steps
        if self._first_step is None:
            self._first_step = (done, now)
            eta = math.nan
        else:
            rate = (now - self._first_step[1]) / (done - self._first_step[0])
            eta = rate * (self.total - done)
        if callable(epsilon_spent):
            epsilon_spent = epsilon_spent()
        line = self.line(
            iteration,
            epsilon_spent=epsilon_spent,
            now=now,
            step=f"{step_unit} {step} of {n_steps}",
            eta=eta,
        )
        stream = sys.stdout if self.stream is None else self.stream
        print(line, file=stream, flush=True)

    def _due(self, iteration):
        """Whether ``iteration`` is shown (as a line, or as the bar's postfix)."""
        if self._bar is not None:
            return iteration % max(1, self.total // 100) == 0 or iteration >= self.total
        return (
            iteration % self._every == 0
            or iteration >= self.total
            or iteration == self._first[0]
        )

    def close(self):
        """Close the bar, if any."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class SolverLineRelay:
    """A text stream that turns a solver's own progress prints into :class:`Progress` lines.

    For solvers that print their progress rather than report it (PrivatePoissonMF's
    CAVI and Gibbs loops print with ``print``): used as the target of
    :func:`contextlib.redirect_stdout` around the solver call. Each printed
    line matching ``pattern`` (a compiled regex with the named groups
    ``iteration`` and ``objective``, and optionally ``phase`` to tell chains
    apart) becomes an update of the :class:`Progress` that
    ``make_progress(phase)`` returns (built once per phase); other lines go
    to ``stream`` unchanged.

    Parameters
    ----------
    pattern : re.Pattern
        The solver's line format.
    make_progress : callable
        ``make_progress(phase)`` returns the :class:`Progress` of a phase
        (``phase`` is None without that group).
    stream : file-like, default=None
        Where other lines go; None means the ``sys.stdout`` in effect when
        the relay was built.
    """

    def __init__(self, pattern, make_progress, stream=None):
        self.pattern = pattern
        self.make_progress = make_progress
        self.stream = sys.stdout if stream is None else stream
        self.progress = {}
        self._pending = ""

    def write(self, text):
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._relay(line)
        return len(text)

    def flush(self):
        self.stream.flush()

    def _relay(self, line):
        match = self.pattern.search(line)
        if match is None:
            print(line, file=self.stream)
            return
        groups = match.groupdict()
        phase = groups.get("phase")
        if phase not in self.progress:
            self.progress[phase] = self.make_progress(phase)
        self.progress[phase].update(int(groups["iteration"]),
                                    objective=float(groups["objective"]))

    def close(self):
        """Relay a last unfinished line and close every phase's progress."""
        if self._pending:
            self._relay(self._pending)
            self._pending = ""
        for progress in self.progress.values():
            progress.close()
