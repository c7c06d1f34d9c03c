"""Power and size of the missing-mass search on the Gaussian-mixture experiment of Liu,
Duncan & Gandy (2023), next to steindiag's plain KSD test.

Usage::

    python benchmarks/bench_missing_mass.py                 # delta sweep, d = 1
    python benchmarks/bench_missing_mass.py --reps 10 --deltas 6 --dims 10
    python benchmarks/bench_missing_mass.py --reps 100 --deltas 6 --size-only
    python benchmarks/bench_missing_mass.py --reps 40 --issue
    python benchmarks/bench_missing_mass.py --hierarchical 12 20 12   # radon, 8 schools, logit
    python benchmarks/bench_missing_mass.py --reps 40 --separated   # power, incl. off-axis
    python benchmarks/bench_missing_mass.py --large                 # d = 5000, N = 200

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
import os
import statistics
import sys
import time
import warnings

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


def hierarchical(counts, seed0):
    """False alarms on healthy NUTS runs of non-centred hierarchical PyMC models.

    4 chains x 500 draws after 500 tuning steps (PyMC's NUTS, one core); the search as
    ``diagnose`` runs it (32 prior draws as starts, the model's score) and with its own
    starts (widened draws and broad starts). The models are in
    ``tests/hierarchical_models.py``. (Finite differences on radon are left out: through
    PyMC's combined log p and score graph, one run took 34 s with 16 starts.)
    """
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    import arviz as az
    import hierarchical_models as hm

    from steindiag.inputs import read_input
    from steindiag.inputs._pymc_functions import model_functions
    from steindiag.inputs._pymc_prior import prior_starts

    builders = {"radon (d = 89)": hm.radon_model, "eight schools (d = 10)":
                hm.eight_schools_model, "logistic (d = 53)": hm.logistic_model}
    print("\n| model | run | search | false alarms | median time, s | max time, s "
          "| median log p evals | NUTS: max R-hat, divergences |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, build), n_runs in zip(builders.items(), counts):
        model = build()
        log_p, score = model_functions(model)
        rows = {"prior starts, score": [], "own starts, score": []}
        rhat_max, divergent = 0.0, 0
        for run in range(n_runs):
            seed = seed0 + run
            idata = hm.sample(model, seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rhat_max = max(rhat_max, float(az.rhat(idata).to_array().max()))
            divergent += int(idata.sample_stats["diverging"].sum())
            prepared = read_input(idata, model)
            draws = prepared.draws
            log_p(draws[0, :2])   # compiled before the clock starts
            starts = prior_starts(model, list(prepared.parameter), 32, seed)
            for label in rows:
                start = time.perf_counter()
                res = search_missing_mass(
                    draws, None, log_density=log_p,
                    score=None if "finite" in label else score, kernel=None,
                    preconditioner=None, rng=seed, starts=starts if "prior" in label else None)
                rows[label].append((res.found, time.perf_counter() - start, res.n_log_density,
                                    res.summary))
                if res.found:
                    print(f"<!-- {name}, seed {seed}, {label}: {res.summary} -->", flush=True)
        for label, results in rows.items():
            found = [r[0] for r in results]
            times = [r[1] for r in results]
            print(f"| {name} | {len(found)} | {label} | {sum(found)} of {len(found)} "
                  f"| {statistics.median(times):.2f} | {max(times):.2f} "
                  f"| {statistics.median(r[2] for r in results):.0f} "
                  f"| {rhat_max:.3f}, {divergent} |", flush=True)


def off_axis(d=10):
    """Draws N(0, Sigma), Sigma = I - (1 - 0.05^2) u u^T with u a fixed unit vector off
    the coordinate axes: the draws' sd along u is 0.05. Target: the equal mixture of
    N(0, Sigma) and N(3 u, Sigma): its second mode lies 60 draw-sds away along the
    direction in which the draws vary least."""
    u = np.ones(d) / np.sqrt(d)
    u[0] = -u[0]
    cov = np.eye(d) - (1 - 0.05 ** 2) * np.outer(u, u)
    means = np.stack([np.zeros(d), 3.0 * u])
    precision = np.linalg.inv(cov)

    def parts(x):
        diffs = x[:, None, :] - means[None]
        return diffs, -0.5 * np.einsum("nkd,de,nke->nk", diffs, precision, diffs)

    def log_p(x):
        return logsumexp(parts(x)[1], axis=1)

    def score(x):
        diffs, logs = parts(x)
        weights = np.exp(logs - logsumexp(logs, axis=1, keepdims=True))
        return -np.einsum("nk,nkd,de->ne", weights, diffs, precision)

    return means, cov, log_p, score


def separated(rng, reps, alpha):
    """Power on one mode of two (4 chains x 500 i.i.d. draws of the left component), with
    the score and with finite differences of log p."""
    cases = {}
    _, lp1, sc1 = mixture(8.0, 1)
    cases["0.5 N(-4, 1) + 0.5 N(4, 1), d = 1"] = (
        lambda r: r.normal(-4.0, 1.0, size=(4, 500, 1)),
        lambda x: lp1(x + 4.0), lambda x: sc1(x + 4.0))
    _, lp10, sc10 = mixture(6.0, 10)
    cases["0.5 N(0, I) + 0.5 N(6 e_1, I), d = 10"] = (
        lambda r: r.normal(size=(4, 500, 10)), lp10, sc10)
    _, cov, lpo, sco = off_axis()
    chol = np.linalg.cholesky(cov)
    cases["off-axis: second mode 60 draw-sds along the draws' thinnest direction, d = 10"] = (
        lambda r: r.normal(size=(4, 500, 10)) @ chol.T, lpo, sco)
    print("\n| target (draws: first mode only) | gradient | power | median time, s |")
    print("|---|---|---|---|")
    for name, (make, log_p, score) in cases.items():
        for gradient in ("score", "finite differences"):
            found, times = [], []
            for _ in range(reps):
                draws = make(rng)
                start = time.perf_counter()
                res = search_missing_mass(draws, None, log_density=log_p,
                                          score=score if gradient == "score" else None,
                                          kernel=None, preconditioner=None, rng=rng,
                                          alpha=alpha)
                times.append(time.perf_counter() - start)
                found.append(res.found)
            print(f"| {name} | {gradient} | {sum(found)} of {reps} "
                  f"| {statistics.median(times):.2f} |", flush=True)


def large():
    """d = 5000, N = 200 (4 x 50): skipped, and how long the answer takes."""
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(4, 50, 5000))
    start = time.perf_counter()
    res = search_missing_mass(draws, None, log_density=lambda x: -0.5 * (x ** 2).sum(1),
                              score=lambda x: -x, kernel=None, preconditioner=None, rng=0)
    print(f"\nd = 5000, N = 200: {time.perf_counter() - start:.3f} s; found = {res.found}; "
          f"skipped: {res.skipped}")


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
    parser.add_argument("--hierarchical", type=int, nargs=3, default=None,
                        metavar=("RADON", "EIGHT", "LOGIT"),
                        help="healthy NUTS runs per hierarchical model (false alarms)")
    parser.add_argument("--separated", action="store_true",
                        help="power on separated-mode targets, incl. an off-axis mode")
    parser.add_argument("--large", action="store_true", help="d = 5000, N = 200")
    parser.add_argument("--size-only", action="store_true",
                        help="only the samples of p (the size), e.g. with more --reps")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.hierarchical:
        hierarchical(args.hierarchical, args.seed)
        return
    if args.separated:
        separated(rng, args.reps, args.alpha)
        return
    if args.large:
        large()
        return
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
