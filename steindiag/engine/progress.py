"""Progress and Ctrl-C for long kernel passes (no dependency: tqdm is used if installed).

A compiled pass holds the interpreter until it returns, so neither a bar nor Ctrl-C can
act inside it. Every long pass therefore runs through ``run_in_passes``: as a sequence of
calls over ranges of its own independent units of work (rows, tiles, tasks), each about
``CHUNK_SECONDS`` long; between two calls the bar advances and a KeyboardInterrupt is
raised. The arithmetic of each unit does not depend on the ranges, so the results are the
same, bit for bit, as from one call over all units.
"""

import contextlib
import logging
import sys
import threading
import time

import numpy as np

__all__ = ["CHUNK_SECONDS", "CONSERVATIVE_FLOPS", "ONE_THREAD_FLOPS", "check_progress",
           "compile_notice", "make_progress", "progress_bar", "run_in_passes", "run_stoppable"]

# Show a bar automatically only for passes expected to take longer than this (seconds).
_AUTO_SECONDS = 5.0
# A pass runs in calls of about this many seconds (at a conservative 10 GFLOP/s), so that
# the bar moves and Ctrl-C is honoured between them. One call costs a few tens of
# microseconds of thread dispatch: about 1e-4 of a 0.25 s call.
CHUNK_SECONDS = 0.25
CONSERVATIVE_FLOPS = 1e10
# The same for a pass that runs on one thread (the sequential solvers often do): measured
# 0.75 GFLOP/s for greedy thinning on one thread of 2 shared cores at load 12.
ONE_THREAD_FLOPS = CONSERVATIVE_FLOPS / 4


class _TextBar:
    """A one-line progress bar on stderr, for terminals without tqdm."""

    def __init__(self, total, desc, unit):
        self.total = total
        self.done = 0
        self.desc = desc
        self.unit = unit
        self.start = time.perf_counter()

    def update(self, amount):
        self.done += amount
        elapsed = time.perf_counter() - self.start
        if self.total is None:  # an unknown total: a counter
            sys.stderr.write(f"\r{self.desc}: {self.done} {self.unit}s {elapsed:6.1f} s")
            sys.stderr.flush()
            return
        fraction = self.done / self.total if self.total else 1.0
        bar = "#" * int(30 * min(fraction, 1.0))
        sys.stderr.write(f"\r{self.desc}: [{bar:<30}] {100 * fraction:5.1f}% {elapsed:6.1f} s")
        sys.stderr.flush()

    def close(self):
        sys.stderr.write("\n")
        sys.stderr.flush()


_LOG = logging.getLogger("steindiag")
# A pass reported to the log (no bar shown) logs its progress at most this often (seconds).
_LOG_SECONDS = 30.0


class _LogBar:
    """Progress of a long pass as INFO records of the "steindiag" logger, for runs where
    no bar is shown (not interactive): a start line, a line at most every
    ``_LOG_SECONDS``, an end line. Silent unless the user's logging shows INFO."""

    def __init__(self, total, desc, unit, expected_seconds):
        self.total, self.desc, self.unit = total, desc, unit
        self.done = 0
        self.start = self.last = time.perf_counter()
        _LOG.info("%s: started, about %.0f s expected", desc, expected_seconds)

    def update(self, amount):
        self.done += amount
        now = time.perf_counter()
        if now - self.last >= _LOG_SECONDS:
            self.last = now
            share = (f"{100 * self.done / self.total:.0f} %" if self.total
                     else f"{self.done} {self.unit}s")
            _LOG.info("%s: %s after %.0f s", self.desc, share, now - self.start)

    def close(self):
        _LOG.info("%s: done in %.1f s", self.desc, time.perf_counter() - self.start)


def _interactive():
    if "ipykernel" in sys.modules:
        return True
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def check_progress(progress):
    """Raise TypeError unless ``progress`` is None, True or False (the public argument)."""
    if progress not in (None, True, False):
        raise TypeError(f"progress must be None, True or False; got {progress!r}.")
    return progress


def make_progress(progress, total, expected_seconds, desc="Stein kernel pass", unit="pair"):
    """A bar with ``update(n)``/``close()``, or None.

    ``progress`` is True (always), False (never) or None (only when interactive and the
    pass is expected to take more than a few seconds). ``total`` None: a counter of
    ``unit`` (the amount of work is not known ahead).
    """
    long = expected_seconds > _AUTO_SECONDS
    if progress is None:
        progress = _interactive() and long
        if not progress and long and _LOG.isEnabledFor(logging.INFO):
            return _LogBar(total, desc, unit, expected_seconds)
    if not progress or sys.stderr is None:   # no stderr (pythonw, some services): no bar
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _TextBar(total, desc, unit)
    try:
        return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False)
    except (AttributeError, OSError, ValueError):   # a stderr tqdm cannot write to
        return _TextBar(total, desc, unit)


@contextlib.contextmanager
def progress_bar(progress, total, expected_seconds, desc="Stein kernel pass", unit="pair"):
    """``make_progress`` as a context manager: yields the bar (or None), closes it at exit."""
    bar = make_progress(progress, total, expected_seconds, desc=desc, unit=unit)
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


# A compilation that has run this long is announced (seconds).
_COMPILE_NOTICE_SECONDS = 1.0


@contextlib.contextmanager
def compile_notice(progress, what, after=_COMPILE_NOTICE_SECONDS):
    """Say "compiling <what>" once the block has run ``after`` seconds, and when it ended.

    Where progress is shown: a line on stderr when a bar would be (``progress`` True, or
    None when interactive), else INFO records of the "steindiag" logger (as a pass's
    progress without a bar); nothing with ``progress=False``. A compilation cannot report
    its own progress, so a timer thread writes the line while it runs: a block that ends
    sooner says nothing.
    """
    to_stderr = progress is True or (progress is None and _interactive())
    to_log = (not to_stderr and progress is not False
              and _LOG.isEnabledFor(logging.INFO))
    if not (to_log or (to_stderr and sys.stderr is not None)):
        yield
        return
    start = time.perf_counter()
    said = threading.Event()

    def say(message):
        if to_stderr:
            sys.stderr.write(f"steindiag: {message}\n")
            sys.stderr.flush()
        else:
            _LOG.info("%s", message)

    def announce():
        said.set()
        say(f"compiling {what} ...")

    timer = threading.Timer(after, announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
        if said.is_set():
            say(f"compiled {what} in {time.perf_counter() - start:.1f} s")


def run_in_passes(compute, work, flops_per_work, *, min_units=1, bar=None, serial=False):
    """Call ``compute(lo, hi)`` over consecutive ranges of units of about equal work.

    Parameters
    ----------
    compute : callable (lo, hi) -> None
        Does units lo .. hi - 1 of a pass (a compiled call); units must be independent
        of how they are grouped into calls.
    work : ndarray (n_units,)
        The work of each unit (pairs of points, or any count), for the split and the bar.
    flops_per_work : float
        Flops per unit of ``work``, for the time estimate.
    min_units : int
        Fewest units in a call (so that every thread gets balanced work in each call).
    bar : object with ``update(n)``, optional
        Advanced by each call's work.
    serial : bool
        The pass runs on one thread (``ONE_THREAD_FLOPS`` for the time estimate).

    Ranges hold about ``CHUNK_SECONDS`` of work each. A KeyboardInterrupt (Ctrl-C) is
    raised between calls: every thread has finished its part of the call by then (see
    ``engine.threads.on_threads``) and the partial result is discarded by the caller.
    """
    work = np.asarray(work, dtype=np.float64)
    n_units = work.shape[0]
    if n_units == 0:
        return
    cumulative = np.concatenate([[0.0], np.cumsum(work)])
    total = cumulative[-1]
    expected = total * flops_per_work / (ONE_THREAD_FLOPS if serial else CONSERVATIVE_FLOPS)
    n_chunks = int(min(max(1, np.ceil(expected / CHUNK_SECONDS)),
                       max(1, n_units // (2 * max(1, min_units)))))
    bounds = np.searchsorted(cumulative, np.linspace(0.0, total, n_chunks + 1)[1:-1])
    bounds = np.unique(np.concatenate([[0], np.clip(bounds, 1, n_units - 1), [n_units]]))
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        compute(int(lo), int(hi))
        if bar is not None:
            bar.update(int(round(cumulative[hi] - cumulative[lo])))


def run_stoppable(solve):
    """``solve(stop)`` in a worker thread, so that Ctrl-C reaches the caller meanwhile.

    For a compiled solver that cannot be split into passes (its state lives inside one
    call: the active set's support and factor): it must release the GIL (``nogil``) and
    return soon after ``stop[0]`` (an int8 (1,) array) is set. The calling thread waits
    in slices of 0.1 s; on KeyboardInterrupt it sets ``stop``, waits for the solver to
    return (one block of its work) and raises. Exceptions of ``solve`` are re-raised
    here.
    """
    stop = np.zeros(1, dtype=np.int8)
    outcome = {}

    def work():
        try:
            outcome["value"] = solve(stop)
        except BaseException as err:   # noqa: BLE001 (re-raised in the caller's thread)
            outcome["error"] = err

    worker = threading.Thread(target=work, name="steindiag-solver", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        stop[0] = 1
        worker.join()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
