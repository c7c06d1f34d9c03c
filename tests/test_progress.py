"""progress= and Ctrl-C in every long public function (issue 29, point 7).

Truth: ``progress`` only shows a bar, so the numbers with ``progress=True`` must be the
very numbers of ``progress=False`` (bitwise: the passes run the same arithmetic in the
same order, only split into calls); a bad value is refused as ``ksd`` refuses it; and a
Ctrl-C (SIGINT) sent while a long compiled product runs raises KeyboardInterrupt within
2 s (the user guide promises about a quarter of a second of work per call).
"""

import logging
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import steindiag
import steindiag.engine.progress

sys.path.insert(0, os.path.dirname(__file__))
import ctrlc_cases  # noqa: E402

# The root that holds the steindiag imported here, so that the child processes import it
# too, wherever the tests run from.
_ROOT = str(Path(steindiag.__file__).resolve().parents[1])


@pytest.fixture
def many_calls(monkeypatch):
    """Split every pass into many small calls (as a long run would be split)."""
    monkeypatch.setattr(steindiag.engine.progress, "CONSERVATIVE_FLOPS", 1e5)
    monkeypatch.setattr(steindiag.engine.progress, "ONE_THREAD_FLOPS", 1e5)


def _draws(seed=0, n_chain=4, n_draw=300, d=3):
    rng = np.random.default_rng(seed)
    x = 1.1 * rng.standard_normal((n_chain, n_draw, d))
    x[..., 0] += 0.3 * np.cumsum(rng.standard_normal((n_chain, n_draw)), axis=1) / 20
    return x


def _fit(progress):
    rng = np.random.default_rng(5)
    data = rng.normal(0.3, 1.2, size=(400, 1))
    fit = steindiag.min_ksd_fit(data, lambda x, t: -(x - t[0]) * np.exp(-2 * t[1]),
                                np.array([0.0, 0.0]), progress=progress)
    return [fit.estimate.values, fit.covariance.values, fit.ksd2_u]


def _fit_linear(progress):
    rng = np.random.default_rng(6)
    data = rng.normal(0.3, 1.0, size=(400, 1))
    fit = steindiag.min_ksd_fit(data, lambda x, t: t[0] - x, np.array([0.0]), linear=True,
                                progress=progress)
    return [fit.estimate.values, fit.covariance.values, fit.ksd2_u]


def _floats(dataset):
    return [v.values for v in dataset.data_vars.values() if v.dtype.kind == "f"]


def _mmd(progress, **options):
    result = steindiag.mmd(_X, n_permutations=99, block_length=10, rng=2, progress=progress,
                           **options)
    return [result.values, result.pvalue.values]


_X = _draws()
# name -> call(progress) -> the numbers of the result
_CALLS = {
    "ksd_test": lambda p: _floats(steindiag.ksd_test(_X, score=-_X, rng=1, n_bootstrap=99,
                                                     progress=p)),
    "ksd_test thinned": lambda p: _floats(steindiag.ksd_test(
        _X, score=-_X, rng=1, n_bootstrap=99, bootstrap="thinned", damped=True, progress=p)),
    "mmd": lambda p: _mmd(p),
    "mmd all": lambda p: _mmd(p, test="all"),
    "mmd two samples": lambda p: _mmd(p, other=_X[:, ::-1] + 0.1),
    "stein_thin": lambda p: [steindiag.stein_thin(_X, score=-_X, n_selected=50,
                                                  mode_search=False, progress=p)],
    "diagnose": lambda p: _floats(steindiag.diagnose(_X, score=-_X, rng=3,
                                                     mode_search=False, progress=p)),
    "min_ksd_fit": _fit,
    "min_ksd_fit linear": _fit_linear,
    "stein_weights": lambda p: [steindiag.stein_weights(_X[:, :100], score=-_X[:, :100],
                                                        progress=p).values],
    "ksd": lambda p: _floats(steindiag.ksd(_X, score=-_X, progress=p)),
}


@pytest.mark.parametrize("name", list(_CALLS))
def test_progress_true_gives_the_same_numbers(name, many_calls, capsys):
    call = _CALLS[name]
    quiet = call(False)
    shown = call(True)
    # Truth: a bar changes no number (the same passes, only split into calls).
    assert len(quiet) == len(shown)
    for a, b in zip(quiet, shown):
        np.testing.assert_array_equal(a, b)
    if name != "stein_weights":  # its bars are for solves expected to be long
        assert capsys.readouterr().err  # the bar was drawn on stderr


@pytest.mark.parametrize("name", list(_CALLS))
@pytest.mark.parametrize("bad", ["yes", 2, [True]])
def test_bad_progress_is_refused(name, bad):
    call = _CALLS[name]
    # Truth: ksd's own rule (None, True or False), with the argument named.
    with pytest.raises(TypeError, match="progress must be None, True or False"):
        call(bad)


def test_stein_thin_in_many_calls_selects_as_in_one(monkeypatch):
    # Truth: the selection in one call (no splitting): each call ends with the objective
    # updated for its last point, so the next call's first choice is the loop's.
    x = _draws(seed=7, n_draw=500)
    whole = steindiag.stein_thin(x, score=-x, n_selected=120, mode_search=False,
                                 return_info=True)
    monkeypatch.setattr(steindiag.engine.progress, "ONE_THREAD_FLOPS", 1e4)  # one thread
    calls = []
    original = steindiag.engine.progress.run_in_passes

    def counted(compute, *args, **kwargs):
        def spy(lo, hi):
            calls.append((lo, hi))
            compute(lo, hi)
        return original(spy, *args, **kwargs)

    monkeypatch.setattr(steindiag.engine.products, "run_in_passes", counted)
    split = steindiag.stein_thin(x, score=-x, n_selected=120, mode_search=False,
                                 return_info=True)
    assert len(calls) > 10
    np.testing.assert_array_equal(split.index, whole.index)
    np.testing.assert_array_equal(split.ksd_path, whole.ksd_path)


# -- Ctrl-C -------------------------------------------------------------------------------

# The child programs: tests/ctrlc_cases.py (shared with benchmarks/bench_progress.py).
_CASES = ("stein_weights", "stein_weights_active_set", "ksd_test", "mmd")


def _lines(stream, out):
    for line in stream:
        out.put((time.monotonic(), line.strip()))
    out.put((time.monotonic(), None))


def _next_line(lines, timeout):
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return time.monotonic(), None


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
@pytest.mark.parametrize("name", _CASES)
def test_ctrl_c_stops_a_long_product_within_two_seconds(name):
    code = ctrlc_cases.child_program(name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
    # (``-c`` puts the working directory first on sys.path: start in _ROOT.)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=_ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()
    threading.Thread(target=_lines, args=(child.stdout, lines), daemon=True).start()
    try:
        # Generous: import, warm-up (a cold Numba cache compiles) and input on a loaded
        # machine.
        _, line = _next_line(lines, timeout=600)
        assert line == "STARTED", (line, child.stderr.read() if line is None else "")
        time.sleep(0.3)  # well inside the product (seconds long even on a fast machine)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        # Generous, so that a slow stop fails on its time below, not as a missing line.
        arrived, line = _next_line(lines, timeout=60.0)
        assert line == "INTERRUPTED", line
        # Truth: the promise of the user guide (about 0.25 s of work between checks),
        # with room for a loaded 2-core machine.
        assert arrived - sent < 2.0, f"{name}: stopped {arrived - sent:.2f} s after Ctrl-C"
        assert child.wait(timeout=60) == 130
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ksd_test_in_narrow_pieces_agrees_with_wide_ones(monkeypatch):
    # Truth: the unsplit forms (one piece per tile at this size); narrower pieces only
    # reorder the additions of the same products, so rounding alone may differ.
    x = _draws(seed=8, n_draw=1500)
    wide = steindiag.ksd_test(x, score=-x, rng=4, n_bootstrap=199)
    monkeypatch.setattr(steindiag.engine.progress, "ONE_THREAD_FLOPS", 1e7)  # 512 columns
    narrow = steindiag.ksd_test(x, score=-x, rng=4, n_bootstrap=199)
    for name in ("statistic", "bootstrap_statistic", "statistic_pooled",
                 "bootstrap_statistic_pooled"):
        np.testing.assert_allclose(narrow[name].values, wide[name].values, rtol=1e-12)
    np.testing.assert_array_equal(narrow["pvalue"].values, wide["pvalue"].values)


def test_progress_true_without_stderr_draws_nothing_and_leaves_no_lock(monkeypatch):
    # Issue 35: with sys.stderr None (pythonw, some services) progress=True raised tqdm's
    # AttributeError and left its lock held, so a later bar in another thread blocked.
    # Truth: the numbers of progress=False; then a bar in another thread still finishes.
    many = _CALLS["ksd"]
    expected = many(False)
    monkeypatch.setattr(sys, "stderr", None)
    got = many(True)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)
    monkeypatch.undo()
    done = []
    worker = threading.Thread(target=lambda: done.append(many(True)))
    worker.start()
    worker.join(timeout=60)
    assert done, "a progress bar in another thread blocked"


def test_long_work_is_logged_when_no_bar_is_shown(monkeypatch, caplog):
    # Issue 35: ksd of many draws printed nothing for minutes when not interactive.
    # Truth: the documented rule: when no bar is shown and the work is expected to take
    # more than a few seconds, INFO records of the "steindiag" logger say it started and
    # ended (here every pass "takes long": the threshold is set to 0 s).
    monkeypatch.setattr(steindiag.engine.progress, "_AUTO_SECONDS", 0.0)
    monkeypatch.setattr(steindiag.engine.progress, "_interactive", lambda: False)
    with caplog.at_level(logging.INFO, logger="steindiag"):
        steindiag.ksd(_X, score=-_X)
    messages = [r.getMessage() for r in caplog.records if r.name == "steindiag"]
    assert any("started" in m for m in messages) and any("done in" in m for m in messages)
    caplog.clear()
    # Not at INFO: nothing is logged (and no bar is drawn).
    with caplog.at_level(logging.WARNING, logger="steindiag"):
        steindiag.ksd(_X, score=-_X)
    assert not [r for r in caplog.records if r.name == "steindiag"]


def test_long_compilation_is_announced(monkeypatch, capsys, caplog):
    # Issue 37: a first call on a new PyMC model compiled for up to a minute in silence.
    # Truth: the documented rule of compile_notice: a block longer than its threshold is
    # announced (a line on stderr where a bar would show, INFO records where a pass
    # would log), with its duration at the end; a shorter block, or progress=False,
    # says nothing.
    notice = steindiag.engine.progress.compile_notice
    with notice(True, "the test graph", after=0.05):
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert "steindiag: compiling the test graph ..." in err
    assert "steindiag: compiled the test graph in" in err
    for progress in (True, False):
        with notice(progress, "the test graph", after=5.0):
            pass
    with notice(False, "the test graph", after=0.0):
        time.sleep(0.1)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(steindiag.engine.progress, "_interactive", lambda: False)
    with caplog.at_level(logging.INFO, logger="steindiag"):
        with notice(None, "the test graph", after=0.05):
            time.sleep(0.3)
    messages = [r.getMessage() for r in caplog.records if r.name == "steindiag"]
    assert messages[0] == "compiling the test graph ..."
    assert messages[1].startswith("compiled the test graph in")
    assert capsys.readouterr().err == ""
