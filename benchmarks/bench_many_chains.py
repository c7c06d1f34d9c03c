"""Many chains: ``diagnose`` against ``ksd_test`` in time and peak memory (issue 35, point 3).

For each layout (chains x draws, d = 10) valid AR(1) chains on N(0, I) are drawn
(``tests/valid_chains.py``; ``--tau`` sets their autocorrelation time, 1: independent
draws, the layout with the most blocks for the test of agreement), and each function
runs on them in a fresh process, alternating, ``--repeats`` times:

    steindiag.diagnose(draws, score=score, mode_search=False, rng=seed)   # its defaults
    steindiag.ksd_test(draws, score=score, rng=seed)                      # its defaults

Each process first warms up (the same function on a small input that takes the same
compiled paths), then times the call alone. Peak memory is the process's maximum resident
set size as ``/usr/bin/time -v`` reports it ("Maximum resident set size"), which counts the
interpreter, the libraries and the draws too; the table also gives the call's own share,
that peak minus the resident size just before the call (``/proc/self/status`` VmRSS). The
bounds of the issue: ``diagnose`` at most 3x the time and 2x the peak memory of
``ksd_test`` on the same draws (ratios of medians).

Run:  python benchmarks/bench_many_chains.py [--repeats 3] [--tau 1 3] [--layouts 1000x60 ...]
      python benchmarks/bench_many_chains.py --code REF ...   # steindiag as committed at REF
Appends a dated section to benchmarks/results/many_chains.md (``--no-markdown``: print only).
The machine is shared: compare the columns of one run, not across runs.
"""

import argparse
import datetime
import json
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "many_chains.md"
LAYOUTS = ("1000x60", "300x200", "100x600")
FUNCTIONS = ("diagnose", "ksd_test")

CHILD = r"""
import json, sys, time, warnings
sys.path.insert(0, {tests!r})
import numpy as np
import steindiag
import valid_chains as vc

function, n_chain, n_draw, dim, tau, seed = {arguments!r}


def rss(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024


def call(draws, score, seed, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if function == "diagnose":
            return steindiag.diagnose(draws, score=score, mode_search=False, rng=seed,
                                      **options)
        return steindiag.ksd_test(draws, score=score, rng=seed, **options)


rng = np.random.default_rng(seed)
rho = float(vc.rho_for_tau(tau))
# Warm-up: the compiled paths of the timed call, on small inputs (many short chains, so
# that the test of agreement takes its streamed path; both KSD estimators).
small = vc.ar1_chains(300, 20, dim, rho, rng=np.random.default_rng(0))
call(small.draws, small.score, 0)
if function == "diagnose":
    call(small.draws[:20], small.score, 0, estimator="nystrom")
chains = vc.ar1_chains(n_chain, n_draw, dim, rho, rng=rng)
before = rss("VmRSS")
start = time.perf_counter()
result = call(chains.draws, chains.score, seed)
seconds = time.perf_counter() - start
verdict = str(result["verdict_pooled"].values) if function == "diagnose" else ""
print(json.dumps({{"seconds": seconds, "rss_before": before, "hwm": rss("VmHWM"),
                  "verdict": verdict}}))
"""


def run_child(function, n_chain, n_draw, dim, tau, seed, python, code):
    script = CHILD.format(tests=str(REPO / "tests"),
                          arguments=(function, n_chain, n_draw, dim, tau, seed))
    env = {"PYTHONPATH": str(code), "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["/usr/bin/time", "-v", python, "-c", script], capture_output=True,
                          text=True, env=env, cwd=str(code))
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-30:]}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    row["peak"] = int(peak.group(1)) * 1024
    return row


def prepare_code(reference):
    """A folder holding steindiag as committed at ``reference`` (or the working tree)."""
    if reference is None:
        return REPO, subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                    capture_output=True, text=True).stdout.strip()
    folder = Path(tempfile.mkdtemp(prefix="steindiag-code-"))
    archive = subprocess.run(["git", "archive", reference, "steindiag"], cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", reference], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    return folder, commit


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS))
    parser.add_argument("--tau", nargs="+", type=float, default=[1.0])
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--functions", nargs="+", choices=FUNCTIONS, default=list(FUNCTIONS))
    parser.add_argument("--code", default=None, metavar="REF")
    parser.add_argument("--no-markdown", action="store_true")
    args = parser.parse_args()
    code, commit = prepare_code(args.code)
    lines = ["| layout | tau | function | runs | median s | peak GiB (median) | call's "
             "own GiB | diagnose / ksd_test time | diagnose / ksd_test peak | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for layout in args.layouts:
        n_chain, n_draw = (int(v) for v in layout.split("x"))
        for tau in args.tau:
            rows = {name: [] for name in args.functions}
            for repeat in range(args.repeats):
                for name in args.functions:
                    rows[name].append(run_child(name, n_chain, n_draw, args.dim, tau,
                                                1000 + repeat, sys.executable, code))
            summary = {}
            for name in args.functions:
                good = [r for r in rows[name] if "error" not in r]
                if good:
                    summary[name] = (
                        statistics.median(r["seconds"] for r in good),
                        statistics.median(r["peak"] for r in good) / 2**30,
                        statistics.median(r["peak"] - r["rss_before"] for r in good) / 2**30,
                        ", ".join(sorted({r["verdict"] for r in good if r["verdict"]})),
                        len(good))
            ratio = ["", ""]
            if "diagnose" in summary and "ksd_test" in summary:
                ratio = [f"{summary['diagnose'][0] / summary['ksd_test'][0]:.2f}",
                         f"{summary['diagnose'][1] / summary['ksd_test'][1]:.2f}"]
            for name in args.functions:
                if name not in summary:
                    error = next(r["error"] for r in rows[name] if "error" in r)
                    lines.append(f"| {layout} | {tau:g} | {name} | 0 of {len(rows[name])} | "
                                 f"failed: {error[-1][:150]} | | | | | |")
                else:
                    seconds, peak, own, verdicts, count = summary[name]
                    shown = ratio if name == "diagnose" else ["", ""]
                    lines.append(f"| {layout} | {tau:g} | {name} | {count} of "
                                 f"{len(rows[name])} | {seconds:.1f} | {peak:.2f} | {own:.2f} | "
                                 f"{shown[0]} | {shown[1]} | {verdicts} |")
                print(lines[-1], flush=True)
    if args.no_markdown:
        return
    command = "python benchmarks/bench_many_chains.py " + shlex.join(sys.argv[1:])
    header = [
        f"## {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, steindiag at "
        f"{commit}" + (f" (exported from git, --code {args.code})" if args.code else ""),
        "",
        f"Command: `{command}` (from the repository's root). Python "
        f"{platform.python_version()}; 2 cores shared with other jobs. Peak: maximum resident "
        "set size of the process (`/usr/bin/time -v`); the call's own: that peak minus the "
        "resident size just before the call.",
        "",
    ]
    if not RESULTS.exists():
        RESULTS.write_text("# Many chains: `diagnose` against `ksd_test`, time and peak memory\n\n"
                           "Written by `benchmarks/bench_many_chains.py` (see its docstring).\n\n")
    with RESULTS.open("a") as handle:
        handle.write("\n".join(header + lines) + "\n\n")


if __name__ == "__main__":
    main()
