"""Cold start: each public function's first call in a fresh process with an empty Numba cache.

Every case runs in its own subprocess, with ``NUMBA_CACHE_DIR`` pointing at a new, empty
temporary directory (Numba's ``cache=True`` then reads and writes only there: nothing
is loaded from ``steindiag/**/__pycache__``; the script checks this by listing the
index files the child wrote). Inputs as a new user would pass them: 4 chains x 500
draws of N(0, I_d) plus 0.1, d = 10 (and d = 2 for ``stein_weights``), a score callable
(``score=lambda x: -x``) or the score array; no PyMC.

Reported per case, median of ``--repeats`` processes (default 3):

- wall: seconds of the call itself (import of steindiag and data set-up excluded);
- cpu: CPU seconds of the call (all threads of the child, getrusage(RUSAGE_SELF));
- process cpu: CPU seconds of the whole child (getrusage(RUSAGE_CHILDREN) in the parent:
  interpreter start, imports, compile, run).

The machine is shared (2 cores, several engineers): wall time varies with the load,
while most of a first call is single-threaded compilation, whose CPU time is the more
stable figure.

Run:  python benchmarks/bench_cold_start.py [--repeats 3] [--only ksd,mmd]
      [--out benchmarks/results/cold_start.md]

Cached speed (``--warm``): the same calls after a first call that compiled them (warm
cache), wall seconds, median of ``--warm-repeats`` calls per process, also on larger
inputs (``LARGE_CASES``); with
``--base PATH`` (another checkout, e.g. ``git worktree add --detach /tmp/base main``) the
processes alternate between PATH and this repository, so that a change is compared
with what it replaced in the same run:

      python benchmarks/bench_cold_start.py --warm --base /tmp/base [--repeats 3]
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numba

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent

LIMITS = {"ksd": 6.0}
DEFAULT_LIMIT = 15.0
TOTAL_LIMIT = 60.0

_SETUP = """
import numpy as np
rng = np.random.default_rng(0)
x10 = 0.1 + rng.standard_normal((4, 500, 10))
x2 = 0.1 + rng.standard_normal((4, 500, 2))
score = lambda x: -x
"""

# name -> the call (after _SETUP and `import steindiag`).
CASES = {
    "ksd": "steindiag.ksd(x10, score=score)",
    "ksd_path": "steindiag.ksd_path(x10, score=score)",
    "ksd_test": "steindiag.ksd_test(x10, score=score, rng=0)",
    "mmd": "steindiag.mmd(x10)",
    "stein_weights d=10": "steindiag.stein_weights(x10, score=-x10)",
    "stein_weights d=2": "steindiag.stein_weights(x2, score=-x2)",
    "stein_thin": "steindiag.stein_thin(x10, score=score, n_selected=100)",
    "stein_variational": "steindiag.stein_variational(x10, score=score, n_steps=100)",
    "min_ksd_fit": ("steindiag.min_ksd_fit(x10.reshape(-1, 10), "
                    "lambda x, theta: -(x - theta), np.zeros(10), linear=True)"),
}

# Larger inputs for --warm only (where the passes, not Python, take the time).
_LARGE_SETUP = """
y2 = rng.standard_normal((1, 5000, 2))
y10 = rng.standard_normal((1, 5000, 10))
z10 = 0.1 + rng.standard_normal((4, 5000, 10))
"""
LARGE_CASES = {
    "ksd N=5000 d=2": "steindiag.ksd(y2, score=-y2, preconditioner='identity')",
    "ksd N=5000 d=10": "steindiag.ksd(y10, score=-y10, preconditioner='identity')",
    "stein_thin N=20000": "steindiag.stein_thin(z10, score=-z10, n_selected=1000)",
    "min_ksd_fit N=4000": ("steindiag.min_ksd_fit(z10[:, :1000].reshape(-1, 10), "
                            "lambda x, theta: -(x - theta), np.zeros(10), linear=True)"),
}

_CHILD = """
import json, os, resource, sys, time
start = time.perf_counter()
import steindiag
import_s = time.perf_counter() - start
{setup}
wall0 = time.perf_counter()
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
{call}
cpu1 = resource.getrusage(resource.RUSAGE_SELF)
wall = time.perf_counter() - wall0
cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
print("RESULT " + json.dumps({{"wall": wall, "cpu": cpu, "import": import_s}}))
"""

_WARM_CHILD = """
import json, statistics, time
import steindiag
{setup}
{call}
walls = []
for _ in range({repeats}):
    start = time.perf_counter()
    {call}
    walls.append(time.perf_counter() - start)
print("RESULT " + json.dumps({{"wall": statistics.median(walls)}}))
"""


def run_warm(call, python, repo, repeats):
    """Median wall seconds of ``repeats`` calls after a first (compiling) call."""
    env = dict(os.environ, PYTHONPATH=str(repo), MPLBACKEND="Agg")
    code = _WARM_CHILD.format(setup=_SETUP + _LARGE_SETUP, call=call, repeats=repeats)
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True,
                          cwd=repo, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{call} failed:\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])["wall"]


def main_warm(args, names):
    """Cached speed: this repository vs ``--base``, alternating processes."""
    sides = [("new", REPO)] + ([("base", Path(args.base).resolve())] if args.base else [])
    print(f"cached calls, median of {args.warm_repeats} calls per process, "
          f"{args.repeats} processes per side (load {os.getloadavg()[0]:.1f})")
    for name in names:
        walls = {side: [] for side, _ in sides}
        for _ in range(args.repeats):
            for side, repo in sides:
                walls[side].append(run_warm({**CASES, **LARGE_CASES}[name], args.python, repo,
                                            args.warm_repeats))
        text = "  ".join(f"{side} {statistics.median(w) * 1e3:8.1f} ms "
                         f"({', '.join(f'{x * 1e3:.1f}' for x in w)})"
                         for side, w in walls.items())
        print(f"{name:20s} {text}", flush=True)
    print(f"(load {os.getloadavg()[0]:.1f} at the end)")


def run_case(call, python):
    """One fresh process with an empty Numba cache: (wall, cpu, process cpu, import)."""
    with tempfile.TemporaryDirectory(prefix="steindiag-cold-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(REPO),
                   MPLBACKEND="Agg")
        code = _CHILD.format(setup=textwrap.indent(_SETUP, ""), call=call)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True,
                              cwd=REPO, timeout=900)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RuntimeError(f"{call} failed:\n{proc.stderr[-3000:]}")
        written = sum(1 for p in Path(cache).rglob("*.nbi"))
        if written == 0:
            raise RuntimeError("Numba wrote no index into NUMBA_CACHE_DIR: the cache was "
                               "read from elsewhere, so the call was not cold.")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT "):])
    result["process_cpu"] = ((after.ru_utime + after.ru_stime)
                             - (before.ru_utime + before.ru_stime))
    result["cache_entries"] = written
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=None,
                        help="comma-separated case names (default: all)")
    parser.add_argument("--out", default=None, help="write a markdown table here")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--warm", action="store_true",
                        help="time cached calls instead (see the module docstring)")
    parser.add_argument("--warm-repeats", type=int, default=5)
    parser.add_argument("--base", default=None,
                        help="with --warm: another checkout to compare with")
    args = parser.parse_args()
    names = list(CASES) if args.only is None else [n.strip() for n in args.only.split(",")]
    if args.warm:
        main_warm(args, names if args.only else names + list(LARGE_CASES))
        return
    rows = []
    for name in names:
        runs = [run_case(CASES[name], args.python) for _ in range(args.repeats)]
        row = {key: statistics.median(r[key] for r in runs)
               for key in ("wall", "cpu", "process_cpu", "import")}
        row["name"] = name
        row["walls"] = [r["wall"] for r in runs]
        row["entries"] = runs[0]["cache_entries"]
        rows.append(row)
        print(f"{name:20s} wall {row['wall']:6.1f} s  cpu {row['cpu']:6.1f} s  "
              f"process cpu {row['process_cpu']:6.1f} s  import {row['import']:.1f} s  "
              f"(walls {', '.join(f'{w:.1f}' for w in row['walls'])}; "
              f"{row['entries']} cache indexes)", flush=True)
    total_wall = sum(r["wall"] for r in rows)
    total_cpu = sum(r["cpu"] for r in rows)
    print(f"{'sum':20s} wall {total_wall:6.1f} s  cpu {total_cpu:6.1f} s")
    if args.out:
        load = os.getloadavg()
        lines = [
            "# Cold start: first call in a fresh process, empty Numba cache",
            "",
            f"`python benchmarks/bench_cold_start.py` on {platform.node() or 'this machine'}: "
            f"{os.cpu_count()} cores shared with other work (load average "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end), Python "
            f"{platform.python_version()}, Numba {numba.__version__}. "
            f"Inputs: 4 chains x 500 draws, d = 10 (d = 2 where said), a score callable or "
            f"array, no PyMC. Median of {args.repeats} fresh processes per function, each "
            "with its own empty `NUMBA_CACHE_DIR`.",
            "",
            "wall: seconds of the call (import excluded); cpu: CPU seconds of the call (all "
            "threads); process cpu: the whole child process (interpreter, imports, call). "
            "Limits (issue 21): `ksd` <= 6 s, every other function <= 15 s, sum <= 60 s.",
            "",
            "| first call | wall (s) | cpu (s) | process cpu (s) | limit (s) | walls of the runs |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            limit = LIMITS.get(r["name"], DEFAULT_LIMIT)
            lines.append(f"| `{r['name']}` | {r['wall']:.1f} | {r['cpu']:.1f} | "
                         f"{r['process_cpu']:.1f} | {limit:g} | "
                         f"{', '.join(f'{w:.1f}' for w in r['walls'])} |")
        lines.append(f"| sum | {total_wall:.1f} | {total_cpu:.1f} | "
                     f"{sum(r['process_cpu'] for r in rows):.1f} | {TOTAL_LIMIT:g} | |")
        lines.append("")
        Path(args.out).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
