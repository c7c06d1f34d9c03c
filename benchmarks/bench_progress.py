"""Progress and Ctrl-C (issue 29, point 7): time to stop after SIGINT, and the cost of
splitting the passes into interruptible calls (two source trees, taking turns).

Usage::

    python benchmarks/bench_progress.py stop --tree .           # Ctrl-C stop times
    python benchmarks/bench_progress.py speed --trees OLD NEW --rounds 5

``stop``: for each long function, a child process (imported from ``--tree``) warms its
compiled code on a small problem, prints a marker when the long compiled product starts,
gets SIGINT 0.5 s (and 3 s: ``--delays``) later, and reports when KeyboardInterrupt reached it; the
time from the signal to that report is the stop time (``--repeats`` runs each).

``speed``: each case runs in a fresh process of one tree, then of the other, and so on
for ``--rounds`` rounds (taking turns, the first alternating, so that the load of a
shared machine falls on both alike); each process reports the median of ``--repeats`` timed calls after a
warm-up. Reported: the median over rounds of each tree and their ratio.
"""

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

# The child programs of ``stop`` are the tests' (tests/ctrlc_cases.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import ctrlc_cases  # noqa: E402

SPEED_CHILD = """
import json, sys, time
import numpy as np
import steindiag
from steindiag.engine.products import KernelPoints
from steindiag.engine.local import stein_row_sums
from steindiag.engine import svgd
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import make_preconditioner
case, repeats = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)

def timed(call):
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))

def points(n, d):
    x = rng.standard_normal((n, d))
    pre = make_preconditioner("standardize", x, None)
    return x, pre, KernelPoints(x, -x, pre, make_kernel())

if case.startswith("row_sums"):
    d = int(case.split("d=")[1])
    x = rng.standard_normal((1, 20_000, d))
    pre = make_preconditioner("standardize", x[0], None)
    seconds = timed(lambda: stein_row_sums(x, -x, kernel=make_kernel(), preconditioner=pre))
elif case == "matvec":
    _, _, p = points(20_000, 10)
    w = np.full(p.n, 1 / p.n)
    seconds = timed(lambda: p.matvec(w))
elif case == "ksd_test":
    x = 1.1 * rng.standard_normal((4, 1500, 5))
    seconds = timed(lambda: steindiag.ksd_test(x, score=-x, rng=1, n_bootstrap=1000))
elif case == "mmd":
    x = rng.standard_normal((4, 10_000, 5))
    seconds = timed(lambda: steindiag.mmd(x))
elif case == "stein_weights":
    x = 1.15 * rng.standard_normal((4, 1500, 10))
    seconds = timed(lambda: steindiag.stein_weights(x, score=-x))
elif case == "stein_thin":
    x = rng.standard_normal((4, 12_500, 10))
    seconds = timed(lambda: steindiag.stein_thin(x, score=-x, n_selected=500,
                                                 mode_search=False))
elif case == "vector_sums":
    x = rng.standard_normal((20_000, 10))
    seconds = timed(lambda: svgd.kernel_vector_sums(x, -x, np.ones(10), kind=svgd.IMQ))
print(json.dumps({"seconds": seconds, "file": steindiag.__file__}))
"""

SPEED_CASES = ["row_sums d=2", "row_sums d=10", "matvec", "ksd_test", "mmd", "stein_weights",
               "stein_thin", "vector_sums"]


def _env(tree):
    return dict(os.environ, PYTHONPATH=os.path.abspath(tree))


# ``python -c`` puts the current directory first on sys.path: a child started from inside
# one tree would import that tree whatever PYTHONPATH says. Children start elsewhere.
_CWD = tempfile.gettempdir()


def _reader(stream, out):
    for line in stream:
        out.put((time.monotonic(), line.strip()))
    out.put((time.monotonic(), None))


def stop_time(tree, name, delay):
    code = textwrap.dedent(ctrlc_cases.child_program(name))
    child = subprocess.Popen([sys.executable, "-c", code], env=_env(tree), text=True,
                             cwd=_CWD, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines = queue.Queue()
    threading.Thread(target=_reader, args=(child.stdout, lines), daemon=True).start()
    try:
        _, line = lines.get(timeout=900)
        if line != "STARTED":
            return None
        time.sleep(delay)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        arrived, line = lines.get(timeout=900)
        return arrived - sent if line == "INTERRUPTED" else None
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def speed(tree, case, repeats):
    out = subprocess.run([sys.executable, "-c", SPEED_CHILD, case, str(repeats)],
                         env=_env(tree), cwd=_CWD, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["file"].startswith(os.path.abspath(tree)):
        raise RuntimeError(f"the child imported {result['file']}, not the tree {tree}")
    return result["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("stop", "speed"))
    parser.add_argument("--tree", default=".")
    parser.add_argument("--trees", nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", nargs="*")
    parser.add_argument("--delays", nargs="*", type=float, default=[0.5, 3.0])
    args = parser.parse_args()
    if args.what == "stop":
        print("| function (long product) | delay (s) | stop times (s) | median (s) |")
        print("|---|---:|---|---:|")
        for name, case in ctrlc_cases.CASES.items():
            if args.cases and not any(c in case["label"] for c in args.cases):
                continue
            for delay in args.delays:
                times = [stop_time(args.tree, name, delay) for _ in range(args.repeats)]
                shown = ", ".join("-" if t is None else f"{t:.2f}" for t in times)
                valid = [t for t in times if t is not None]
                median = f"{statistics.median(valid):.2f}" if valid else "-"
                print(f"| {case['label']} | {delay:g} | {shown} | {median} |", flush=True)
        return
    old, new = args.trees
    print("| case | old (s) | new (s) | new / old | rounds |")
    print("|---|---:|---:|---:|---:|")
    for case in args.cases or SPEED_CASES:
        times = {old: [], new: []}
        for round_ in range(args.rounds):
            # Taking turns, the first of each round alternating.
            for tree in ((old, new) if round_ % 2 == 0 else (new, old)):
                times[tree].append(speed(tree, case, args.repeats))
        a, b = statistics.median(times[old]), statistics.median(times[new])
        print(f"| {case} | {a:.3f} | {b:.3f} | {b / a:.3f} | {args.rounds} |", flush=True)


if __name__ == "__main__":
    main()
