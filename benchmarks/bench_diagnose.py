"""Cost of ``steindiag.diagnose`` against the pieces it is made of.

Usage::

    python benchmarks/bench_diagnose.py                  # 4 x 1000 draws, d = 10, 3 repeats
    python benchmarks/bench_diagnose.py --draws 500 --repeats 2

Target: the non-centred eight-schools model (d = 10 unconstrained parameters: mu,
tau_log__, theta_tilde[0..7]), sampled once with NUTS (4 chains, ``--draws`` each, cores=1).
Reported, each a median of ``--repeats`` runs after a warm-up call that compiles the Numba
kernels and the PyTensor functions:

- ``diagnose(trace, model)``: the whole verdict (scores once; KSD test with B = 1000
  bootstrap replicates; MMD between the 6 pairs of chains with 1000 block permutations;
  the floor; divergences; the mode search from 32 prior draws and 8 draws);
- ``ksd_test(trace, model)``: the same KSD test on its own (B = 1000);
- the extra density evaluations the search makes: as many evaluations of log p and of
  the score at single points as ``diagnose`` reports in ``attrs["n_log_density"]``, one
  call per point as L-BFGS makes them;
- ``mmd(trace, n_permutations=1000)`` for reference.

Goal (issue 20): diagnose within 3x of ksd_test plus the extra density evaluations.
The machine is shared (2 cores, several jobs): times are noisy; the ratios come from the
same run.
"""

import argparse
import statistics
import time
import warnings

import numpy as np

import steindiag

Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def timed(function, repeats):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import pymc as pm
    from steindiag.inputs._pymc_functions import model_functions

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta_tilde = pm.Normal("theta_tilde", 0.0, 1.0, shape=8)
        pm.Normal("y", mu + tau * theta_tilde, SIGMA, observed=Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = pm.sample(model=model, draws=args.draws, tune=1000, chains=4, cores=1,
                          random_seed=1, progressbar=False, target_accept=0.95,
                          compute_convergence_checks=False)

    # Warm-up: Numba kernels and PyTensor functions compiled once.
    steindiag.diagnose(trace, model, rng=0)
    t_diagnose, res = timed(lambda: steindiag.diagnose(trace, model, rng=0), args.repeats)
    t_test, _ = timed(lambda: steindiag.ksd_test(trace, model, rng=0), args.repeats)
    t_mmd, _ = timed(lambda: steindiag.mmd(trace, model=model, n_permutations=1000, rng=0),
                     args.repeats)

    n_points = int(res.attrs["n_log_density"])
    log_density, score = model_functions(model)
    points = np.random.default_rng(0).standard_normal((n_points, 10))

    def single_point_evaluations():
        for row in points:
            log_density(row[None])
            score(row[None])

    log_density(points[:1]), score(points[:1])
    t_extra, _ = timed(single_point_evaluations, args.repeats)

    budget = 3.0 * (t_test + t_extra)
    n_total = 4 * args.draws
    print(f"# diagnose cost, 4 x {args.draws} draws (N = {n_total}), d = 10, "
          f"non-centred eight schools, {args.repeats} repeats (medians)\n")
    print("| step | seconds |")
    print("|---|---|")
    print(f"| diagnose(trace, model) | {t_diagnose:.2f} |")
    print(f"| ksd_test(trace, model), B = 1000 | {t_test:.2f} |")
    print(f"| {n_points} log p + score evaluations at single points | {t_extra:.2f} |")
    print(f"| mmd(trace, n_permutations=1000), for reference | {t_mmd:.2f} |")
    print()
    print(f"diagnose / (ksd_test + extra evaluations) = {t_diagnose / (t_test + t_extra):.2f} "
          f"(goal <= 3; budget {budget:.2f} s); verdict: {res['verdict_pooled'].item()}")


if __name__ == "__main__":
    main()
