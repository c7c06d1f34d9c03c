"""The MMD test that all chains agree, alone, as ``diagnose`` runs it: level and power.

Issue 35, point 3. ``diagnose`` on many chains spends most of its time in the KSD pieces;
the test of agreement is the piece the streamed path changed. This script runs that piece
alone, exactly as ``diagnose`` calls it (``methods.evidence.agreement_evidence``: the draws
as given, the default preconditioner, the IMQ kernel, 1000 relabellings: the default for
3 tests at alpha = 0.05), on the draws of ``bench_calibration.py``'s configurations (the
same generators and data seeds: rep r here is rep r there), so that it can afford many
more repetitions. ``--dense`` forces the dense path (all blocks relabelled one by one,
(P, U, U) sums) where it fits in memory, for a before/after comparison on the same draws.

Per configuration: the share of p-values at or below 0.0125 (the level of each of 4
tests), 0.0167 (3 tests) and 0.05, with 95 % Clopper-Pearson intervals; the units per
chain of the streamed test; the median time.

Run:  python benchmarks/bench_agreement_level.py --only ar1-d10-tau3-1000x60 ... --reps 500
      python benchmarks/bench_agreement_level.py --tables-only
Rows go to benchmarks/results/agreement_level.jsonl (resumed: (commit, path, configuration,
rep) already there are skipped); a run appends a section to the calibration results
(``--markdown``, default benchmarks/results/calibration.md).
"""

import argparse
import datetime
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))
import bench_calibration as calibration  # noqa: E402

JSONL = REPO / "benchmarks" / "results" / "agreement_level.jsonl"
LEVELS = (0.0125, 0.05 / 3, 0.05)
N_PERMUTATIONS = 1000


def run_one(name, rep, dense):
    import steindiag.methods.mmd as mmd_methods
    from steindiag.kernels import make_kernel
    from steindiag.kernels.preconditioner import make_preconditioner
    from steindiag.methods.evidence import agreement_evidence

    configuration = calibration.CONFIGURATIONS[name]
    data_seed, diagnose_seed = calibration.seeds_for(name, rep)
    draws = configuration.make(rng=np.random.default_rng(data_seed)).draws
    d = draws.shape[2]
    parameters = [f"x[{k}]" for k in range(d)]
    pre = make_preconditioner("standardize", draws.reshape(-1, d), parameters)
    saved = mmd_methods.DENSE_MAX_UNITS
    if dense:
        mmd_methods.DENSE_MAX_UNITS = 10**9
    try:
        start = time.perf_counter()
        result = agreement_evidence(draws, parameters, pre, "standardize", make_kernel("imq"),
                                    N_PERMUTATIONS, np.random.default_rng(diagnose_seed), False)
        seconds = time.perf_counter() - start
    finally:
        mmd_methods.DENSE_MAX_UNITS = saved
    return {"config": name, "rep": rep, "kind": configuration.kind, "pvalue": result.pvalue,
            "reliable": bool(result.reliable), "seconds": seconds,
            "path": "dense" if dense else "default", "data_seed": data_seed}


def commit_of():
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "steindiag"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


def read_rows():
    if not JSONL.exists():
        return []
    return [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()]


def table(rows, names, commit):
    lines = ["| configuration | path | runs | p <= 0.0125 | p <= 0.0167 | p <= 0.05 | "
             "reliable | median s |", "|---|---|---|---|---|---|---|---|"]
    for name in names:
        for path in ("default", "dense"):
            chosen = [r for r in rows if r["config"] == name and r["path"] == path
                      and r["commit"] == commit and r.get("pvalue") is not None]
            if not chosen:
                continue
            p = np.array([r["pvalue"] for r in chosen])
            cells = []
            for level in LEVELS:
                count = int(np.sum(p <= level + 1e-12))
                low, high = calibration.clopper_pearson(count, len(p))
                cells.append(f"{count}/{len(p)} = {100 * count / len(p):.1f} % "
                             f"[{100 * low:.1f}, {100 * high:.1f}]")
            reliable = np.mean([r["reliable"] for r in chosen])
            seconds = statistics.median(r["seconds"] for r in chosen)
            lines.append(f"| {name} | {path} | {len(p)} | " + " | ".join(cells)
                         + f" | {100 * reliable:.0f} % | {seconds:.1f} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", default=[])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--dense", action="store_true")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="stop starting new runs after this many seconds")
    parser.add_argument("--tables-only", action="store_true")
    parser.add_argument("--commit", default=None)
    parser.add_argument("--markdown", type=Path, default=calibration.MARKDOWN)
    parser.add_argument("--no-markdown", action="store_true")
    args = parser.parse_args()
    commit = args.commit or commit_of()
    names = calibration.select(args.only, list(calibration.CONFIGURATIONS)) if args.only else []
    started = time.perf_counter()
    if not args.tables_only:
        done = {(r["commit"], r["path"], r["config"], r["rep"]) for r in read_rows()}
        path = "dense" if args.dense else "default"
        for rep in range(args.reps):
            for name in names:
                if (commit, path, name, rep) in done:
                    continue
                if args.budget is not None and time.perf_counter() - started > args.budget:
                    break
                try:
                    row = run_one(name, rep, args.dense)
                except Exception as error:   # recorded
                    row = {"config": name, "rep": rep, "path": path,
                           "error": f"{type(error).__name__}: {str(error)[:300]}"}
                row["commit"] = commit
                with JSONL.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
    rows = read_rows()
    names = names or sorted({r["config"] for r in rows if r["commit"] == commit})
    lines = table(rows, names, commit)
    print("\n".join(lines))
    if args.no_markdown or args.tables_only:
        return
    command = "python benchmarks/bench_agreement_level.py " + shlex.join(sys.argv[1:])
    section = [
        f"## {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, the test of "
        f"agreement alone, steindiag at {commit}",
        "",
        f"Command: `{command}` (from the repository's root). Python "
        f"{platform.python_version()}; 2 cores shared with other jobs. "
        "`methods.evidence.agreement_evidence` as `diagnose` calls it (1000 relabellings), "
        "on the draws of `bench_calibration.py`'s configurations (same data seeds); path "
        "`dense`: the U x U path forced. Shares of p-values at or below each level, 95 % "
        "Clopper-Pearson intervals.",
        "",
    ] + lines + [""]
    with args.markdown.open("a") as handle:
        handle.write("\n".join(section) + "\n")


if __name__ == "__main__":
    main()
