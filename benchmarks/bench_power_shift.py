"""Smallest mean shift the KSD test detects 80 % of the time: the constant of diagnose's
power statement.

For n independent draws of N(delta e_1, I_d) tested against N(0, I_d) (the test of
``diagnose``: plain and damped statistics and, for d >= 2, the sample covariance, read by
max-T, at level 0.05 / 4), the rejection rate rises with n delta^2 (a local alternative:
the statistic's non-centrality is proportional to n delta^2). So the shift detected 80 %
of the time is delta_80 = kappa(d) / sqrt(n), and this script measures kappa(d): for each
d and n it finds the delta with 80 % rejections on a grid (R runs per point) and reports
kappa = delta_80 sqrt(n). MCMC draws enter through their effective number, n = N / tau.

Run: PYTHONPATH=$PWD python benchmarks/bench_power_shift.py [--reps 40]
Writes benchmarks/results/power_shift.md.
"""

import argparse
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np

import steindiag

RESULTS = Path(__file__).parent / "results" / "power_shift.md"


def rejection_rate(d, n, delta, reps, seed):
    rejected = 0
    for rep in range(reps):
        rng = np.random.default_rng([seed, rep])
        draws = rng.standard_normal((4, n // 4, d))
        draws[..., 0] += delta
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = steindiag.diagnose(draws, score=-draws, mode_search=False, rng=rng,
                                     n_permutations=1000)
        # The KSD test's part of the verdict: the pooled test (the shift is in every chain).
        rejected += res["pvalue_pooled"].item() <= 0.05 / 4
    return rejected / reps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    rows = []
    for d in (1, 2, 10, 50):
        for n in (200, 800):
            grid = np.array([0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8, 1.2])
            start = time.perf_counter()
            rates = []
            for delta in grid:
                rate = rejection_rate(d, n, delta, args.reps, seed=1000 * d + n)
                rates.append(rate)
                if rate >= 0.95:
                    break
            rates = np.array(rates)
            grid = grid[: rates.size]
            # delta_80 by linear interpolation between the grid points around 80 %.
            above = np.flatnonzero(rates >= 0.8)
            if above.size == 0:
                delta80 = np.nan
            elif above[0] == 0:
                delta80 = grid[0]
            else:
                k = above[0]
                delta80 = grid[k - 1] + (0.8 - rates[k - 1]) * (grid[k] - grid[k - 1]) / (
                    rates[k] - rates[k - 1])
            rows.append((d, n, delta80, delta80 * np.sqrt(n),
                         ", ".join(f"{g:g}: {r:.2f}" for g, r in zip(grid, rates)),
                         time.perf_counter() - start))
            print(rows[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [f"# Mean shift detected 80 % of the time (commit {commit}, {args.reps} runs a point)",
             "", "N(delta e_1, I_d) against N(0, I_d), 4 chains of independent draws, n in all; "
             "diagnose's pooled KSD test at 0.05 / 4.", "",
             "| d | n | delta_80 | kappa = delta_80 sqrt(n) | rejection rate by delta | s |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {d} | {n} | {x:.3f} | {k:.2f} | {g} | {t:.0f} |" for d, n, x, k, g, t in rows]
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
