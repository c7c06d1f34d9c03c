"""The chains' KSD tests of ``diagnose`` taken apart on valid chains (issue 36.4).

``diagnose`` reads the KSD tests of every chain as one family: each chain's plain and damped
statistics (and, with d >= 2, the same under the sample covariance) share their bootstrap
signs and are read together by max-T (each statistic standardised by the mean and standard
deviation of its own replicates; Westfall & Young 1993). This script runs ``diagnose`` as the
calibration benchmark does (same configurations, same data and diagnose seeds:
``bench_calibration.seeds_for``), keeps the family's statistics and replicates, and reads them
in other ways, to see where false alarms come from:

- the family as ``diagnose`` reads it (max-T over every member and chain);
- max-T over the plain statistics only, over the damped ones only;
- Bonferroni over the members and chains (each member's own bootstrap p-value);
- min-P (Westfall & Young with each member's own bootstrap p-values instead of standardised
  statistics: balanced when the members' null distributions differ in shape);
- each chain's unadjusted p-value, plain and damped, at several levels.

It also counts the pooled test and the test of agreement at their level, and the run's
verdict. Usage (from the repository's root):

    python benchmarks/bench_ksd_family.py --config t3copula-d1-rho-0.5-4x500 --reps 3000 --workers 2

Results: printed, and with ``--markdown`` appended to benchmarks/results/ksd_family.md.
"""

import argparse
import concurrent.futures
import datetime
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_calibration as bc  # noqa: E402  (its configurations and seeds)

RESULTS = REPO / "benchmarks" / "results" / "ksd_family.md"


def run(task):
    """One run: the family's (statistic, replicates) per member, pooled and agreement p."""
    import steindiag
    from steindiag.methods import evidence

    name, rep = task
    captured = []
    original = evidence.combined_pvalues

    def spy(tests):
        members = evidence._family(tests)
        captured.append({"names": [m[0] for m in members],
                         "chain": [m[1].copy() for m in members],
                         "pooled": [np.asarray(m[2]).copy() for m in members],
                         "reliable": tests.plan.reliable.copy(), "lag": int(tests.plan.lag)})
        return original(tests)

    evidence.combined_pvalues = spy
    try:
        data_seed, diagnose_seed = bc.seeds_for(name, rep)
        chains = bc.CONFIGURATIONS[name].make(rng=np.random.default_rng(data_seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = steindiag.diagnose(chains.draws, score=chains.score,
                                        log_density=chains.log_density, rng=diagnose_seed)
    finally:
        evidence.combined_pvalues = original
    record = captured[-1]
    record["level"] = float(result.attrs["test_level"])
    record["agreement"] = float(result["agreement_pvalue"].values)
    record["verdict"] = str(result["verdict_pooled"].values)
    return record


def readings(record):
    """{reading: smallest adjusted p-value over the chains} of one run, and the chains'
    unadjusted p-values {member: (chain,)}."""
    from steindiag.stats.bootstrap import bootstrap_pvalue, max_statistic_pvalues

    stats = [c[:, 0] for c in record["chain"]]
    reps = [c[:, 1:] for c in record["chain"]]
    reliable = record["reliable"]
    if not reliable.any():
        raise ValueError("no chain's KSD test is trusted in this run (fewer than 20 blocks per "
                         "chain): pick a configuration with longer chains")

    def max_t(members):
        adjusted = max_statistic_pvalues(np.concatenate([stats[k] for k in members]),
                                         np.concatenate([reps[k] for k in members]),
                                         np.tile(reliable, len(members)))
        return float(np.nanmin(adjusted))

    own = [bootstrap_pvalue(r, s) for s, r in zip(stats, reps)]
    # min-P: every replicate's p-value within its own member's replicates.
    observed = np.concatenate([p[reliable] for p in own])
    replicate_p = []
    for r in reps:
        for row in r[reliable]:
            order = np.sort(row)
            replicate_p.append((row.size - np.searchsorted(order, row, side="left")) / row.size)
    smallest = np.min(replicate_p, axis=0)
    min_p = (1.0 + np.sum(smallest[None, :] <= observed[:, None], axis=1)) / (1.0 + smallest.size)
    n_members = len(stats) * int(reliable.sum())
    out = {"max-T, every member (diagnose)": max_t(range(len(stats))),
           "max-T, plain only": max_t([0]),
           "Bonferroni, every member": min(1.0, n_members * float(observed.min())),
           "min-P, every member": float(min_p.min())}
    damped = [k for k, name in enumerate(record["names"]) if name.endswith("damped")]
    if damped:
        out["max-T, damped only"] = max_t(damped)
    unadjusted = {name: own[k][reliable] for k, name in enumerate(record["names"])}
    pooled = [bootstrap_pvalue(p[1:], np.asarray(p[0])) for p in record["pooled"]]
    out["pooled (max-T over members)"] = float(max_statistic_pvalues(
        np.array([float(p[0]) for p in record["pooled"]]),
        np.stack([p[1:] for p in record["pooled"]]), np.ones(len(pooled), dtype=bool)).min())
    out["agreement (MMD)"] = record["agreement"]
    return out, unadjusted


def interval(k, n):
    """"k/n = r % [low, high]" with the 95 % Clopper-Pearson interval (two decimals)."""
    low, high = bc.clopper_pearson(k, n)
    return f"{k}/{n} = {100 * k / n:.2f} % [{100 * low:.1f}, {100 * high:.1f}]"


def tables(name, records):
    level = records[0]["level"]
    rows = [readings(r) for r in records]
    n = len(records)
    lines = [f"Configuration `{name}`, {n} runs, each test read at {level:g} (alpha 0.05 over "
             f"{round(0.05 / level)} tests); median lag {np.median([r['lag'] for r in records]):g}.",
             "", "| reading | p <= level | p <= 0.05 |", "|---|---|---|"]
    for key in rows[0][0]:
        values = np.array([row[0].get(key, np.nan) for row in rows])
        lines.append(f"| {key} | {interval(int(np.sum(values <= level)), n)} | "
                     f"{interval(int(np.sum(values <= 0.05)), n)} |")
    verdicts = sum(r["verdict"] == "does not fit" for r in records)
    lines += ["", f"Run's verdict \"does not fit\" (family-wise): {interval(verdicts, n)}.", "",
              "Each chain's unadjusted p-value (chains whose test is trusted):", "",
              "| member | " + " | ".join(f"p <= {a:g}" for a in (level / 4, level, 0.05, 0.1))
              + " |", "|---|---|---|---|---|"]
    for member in rows[0][1]:
        values = np.concatenate([row[1][member] for row in rows])
        lines.append(f"| {member} | " + " | ".join(
            interval(int(np.sum(values <= a)), values.size)
            for a in (level / 4, level, 0.05, 0.1)) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", default=["t3copula-d1-rho-0.5-4x500"],
                        help="calibration configurations (see bench_calibration.py --list)")
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--markdown", action="store_true",
                        help=f"append the tables to {RESULTS.relative_to(REPO)}")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    sections = []
    for name in args.config:
        tasks = [(name, rep) for rep in range(args.reps)]
        if args.workers > 1:
            with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
                records = list(pool.map(run, tasks, chunksize=20))
        else:
            records = [run(task) for task in tasks]
        text = tables(name, records)
        print(text, flush=True)
        sections.append(text)
    if args.markdown:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        command = "python benchmarks/bench_ksd_family.py " + " ".join(sys.argv[1:])
        with open(RESULTS, "a") as out:
            out.write(f"\n## {stamp}, steindiag at {commit}\n\nCommand: `{command}`\n\n"
                      + "\n\n".join(sections) + "\n")


if __name__ == "__main__":
    main()
