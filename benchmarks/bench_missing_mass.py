"""Power and size of the missing-mass search on the Gaussian-mixture experiment of Liu,
Duncan & Gandy (2023), next to steindiag's plain KSD test.

Usage::

    python benchmarks/bench_missing_mass.py                 # delta sweep, d = 1
    python benchmarks/bench_missing_mass.py --reps 10 --deltas 6 --dims 10
    python benchmarks/bench_missing_mass.py --reps 100 --deltas 6 --size-only
    python benchmarks/bench_missing_mass.py --reps 40 --issue

The experiment (their ``sh_scripts/run_bimodal.sh`` and ``experiments.py``, model
"bimodal", k = 1): target p = 0.5 N(0, I_d) + 0.5 N(delta e_1, I_d); the sample is n
i.i.d. draws of the left component only (their ``ratio_s = 1``, the alternative) or of p
itself (``ratio_s = 0.5``, the null, for the size); alpha = 0.05; their n = 1000 in the
power-against-delta figure. Reported per (d, delta): rejection rates of

- ``mode search``: :func:`steindiag.methods.missing_mass.search_missing_mass` with its
  defaults (widened draws as starts), one chain of n draws;
- ``perturbed KSD``: the same function with ``method="perturbed ksd"``: the modes of
  the search, 9 p-invariant Metropolis-Hastings mode-jump steps for each jump scale
  (0.5, 0.75, 1.25, 1.5), the KSD statistics of the draws and of the four perturbed
  samples summed and tested with one wild bootstrap (their spKSD, with a coarser grid
  of jump scales: they sum over 21 in [0.5, 1.5]);
- ``KSD test``: :func:`steindiag.ksd_test` on the same draws (i.i.d. Rademacher
  bootstrap, 500 replicates, IMQ kernel, preconditioner "standardize");
- ``either``: rejection by either at level alpha / 2 (Bonferroni: what a caller that
  runs both, as ``diagnose`` does, can claim at level alpha);

with the binomial standard error, the median number of log-density evaluations and the
median wall time of the search. The machine is shared (2 cores, several users): times
are indicative only.
"""

import argparse
import statistics
import time

import numpy as np
from scipy.special import logsumexp

import steindiag
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.methods.missing_mass import search_missing_mass


def mixture(delta, d):
    means = np.zeros((2, d))
    means[1, 0] = delta

    def log_p(x):
        diffs = x[:, None, :] - means[None]
        return logsumexp(-0.5 * (diffs ** 2).sum(axis=2), axis=1) + np.log(0.5)

    def score(x):
        diffs = x[:, None, :] - means[None]
        logs = -0.5 * (diffs ** 2).sum(axis=2)
        weights = np.exp(logs - logsumexp(logs, axis=1, keepdims=True))
        return -np.einsum("nk,nkd->nd", weights, diffs)

    return means, log_p, score


def one_run(rng, delta, d, n, null, alpha):
    means, log_p, score = mixture(delta, d)
    component = rng.integers(2, size=n) if null else np.zeros(n, dtype=int)
    draws = (means[component] + rng.normal(size=(n, d)))[None]
    start = time.perf_counter()
    search = search_missing_mass(draws, None, log_density=log_p, score=score, kernel=None,
                                 preconditioner=None, rng=rng, alpha=alpha)
    seconds = time.perf_counter() - start
    scores = score(draws[0])[None]
    pre = make_preconditioner("standardize", draws[0], [f"x[{k}]" for k in range(d)])
    start = time.perf_counter()
    perturbed = search_missing_mass(draws, scores, log_density=log_p, score=score,
                                    kernel=make_kernel("imq"), preconditioner=pre, rng=rng,
                                    alpha=alpha, method="perturbed ksd")
    perturbed_seconds = time.perf_counter() - start
    test = steindiag.ksd_test(draws, score=scores, bootstrap="iid",
                              n_bootstrap=500, rng=rng, pooled=False)
    ksd_p = float(test["pvalue"].values[0])
    return {
        "search": search.pvalue < alpha,
        "perturbed": perturbed.pvalue < alpha,
        "perturbed_n_log_density": perturbed.n_log_density,
        "perturbed_seconds": perturbed_seconds,
        "ksd": ksd_p < alpha,
        "either": (search.pvalue < alpha / 2) or (ksd_p < alpha / 2),
        "n_log_density": search.n_log_density,
        "seconds": seconds,
    }


def issue_case(rng, reps, alpha):
    """Issue 20's case: 0.5 N(-4, 1) + 0.5 N(4, 1), 4 chains x 500 draws, left mode only
    (power) or the whole mixture (size); ksd_test with its default wild bootstrap."""
    means, log_p, score = mixture(8.0, 1)
    means = means - 4.0
    shifted_log_p = lambda x: log_p(x + 4.0)   # noqa: E731  (mixture at 0 and 8, moved)
    shifted_score = lambda x: score(x + 4.0)   # noqa: E731
    print("\nIssue 20: 0.5 N(-4, 1) + 0.5 N(4, 1), 4 chains x 500 i.i.d. draws, "
          f"{reps} repetitions\n")
    print("| sample | mode search | perturbed KSD | ksd_test (wild, pooled) |")
    print("|---|---|---|---|")
    for null in (False, True):
        flags = {"search": [], "perturbed": [], "ksd": []}
        for _ in range(reps):
            component = rng.integers(2, size=(4, 500)) if null else np.zeros((4, 500), int)
            draws = means[component] + rng.normal(size=(4, 500, 1))
            scores = shifted_score(draws.reshape(-1, 1)).reshape(draws.shape)
            pre = make_preconditioner("standardize", draws.reshape(-1, 1), ["x"])
            for key, method in (("search", "mode search"), ("perturbed", "perturbed ksd")):
                res = search_missing_mass(draws, scores, log_density=shifted_log_p,
                                          score=shifted_score, kernel=make_kernel("imq"),
                                          preconditioner=pre, rng=rng, alpha=alpha,
                                          method=method)
                flags[key].append(res.found)
            test = steindiag.ksd_test(draws, score=scores, n_bootstrap=500, rng=rng)
            flags["ksd"].append(float(test["pvalue_pooled"]) < alpha)
        print(f"| {'whole mixture (size)' if null else 'left mode only (power)'} "
              f"| {rate(flags['search'])} | {rate(flags['perturbed'])} "
              f"| {rate(flags['ksd'])} |", flush=True)


def rate(flags):
    p = float(np.mean(flags))
    return f"{p:.2f} ({np.sqrt(max(p * (1 - p), 1e-12) / len(flags)):.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--deltas", type=float, nargs="+",
                        default=[0, 2, 4, 6, 8, 12])
    parser.add_argument("--dims", type=int, nargs="+", default=[1])
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=2023)
    parser.add_argument("--issue", action="store_true",
                        help="only issue 20's case (4 chains x 500 draws, modes at -4, 4)")
    parser.add_argument("--size-only", action="store_true",
                        help="only the samples of p (the size), e.g. with more --reps")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    one_run(rng, 6.0, 1, 200, False, args.alpha)  # warm-up: Numba compilation
    if args.issue:
        issue_case(rng, args.reps, args.alpha)
        return
    print(f"n = {args.n}, {args.reps} repetitions per cell, alpha = {args.alpha}; "
          "rates with binomial standard errors in brackets\n")
    print("| d | delta | sample | mode search | perturbed KSD | KSD test "
          "| search or KSD (alpha/2 each) | log p evals: search, perturbed (median) "
          "| time, s: search, perturbed (median) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in args.dims:
        for delta in args.deltas:
            for null in ((True,) if args.size_only else (False, True)):
                runs = [one_run(rng, delta, d, args.n, null, args.alpha)
                        for _ in range(args.reps)]
                print(f"| {d} | {delta:g} | {'p (size)' if null else 'left mode (power)'} "
                      f"| {rate([r['search'] for r in runs])} "
                      f"| {rate([r['perturbed'] for r in runs])} "
                      f"| {rate([r['ksd'] for r in runs])} "
                      f"| {rate([r['either'] for r in runs])} "
                      f"| {statistics.median(r['n_log_density'] for r in runs):.0f}, "
                      f"{statistics.median(r['perturbed_n_log_density'] for r in runs):.0f} "
                      f"| {statistics.median(r['seconds'] for r in runs):.2f}, "
                      f"{statistics.median(r['perturbed_seconds'] for r in runs):.2f} |",
                      flush=True)


if __name__ == "__main__":
    main()
