"""Size of the Nyström wild-bootstrap test on AR(1) chains, with and without the lag correction.

Three ways to build ksd_test's statistic and its bootstrap replicates from the same
landmarks and the same weights (engine level, so that only the matrix differs):

- ``consistent``: statistic and replicates both with the exact lag pairs (what
  ``ksd_test(estimator="nystrom")`` does);
- ``statistic_only``: the statistic with the exact lag pairs, the replicates without;
- ``uncorrected``: neither (the estimator before the lag correction).

Rejection rates at level 0.05 over R replicate data sets (the null holds: AR(1) chains with
exact N(0, I) marginals); binomial standard error sqrt(0.05 0.95 / R). Accuracy numbers
only: they do not depend on the machine's load.

    PYTHONPATH=$PWD python benchmarks/bench_nystrom_size.py --d 5 --reps 200
"""

import argparse
import json

import numpy as np

from steindiag.engine.nystrom import choose_landmarks, default_exact_lags, default_n_landmarks
from steindiag.engine.nystrom import nystrom_quadratic_forms
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.stats.autocorrelation import integrated_autocorrelation_time
from steindiag.stats.bootstrap import bootstrap_pvalue, flip_probability


def ar1(rng, n_draw, d, rho):
    x = np.empty((1, n_draw, d))
    x[:, 0] = rng.standard_normal(d)
    for t in range(1, n_draw):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(d)
    return x


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--d", type=int, default=5)
    parser.add_argument("--n-draw", type=int, default=2000)
    parser.add_argument("--rho", type=float, default=0.7)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--n-bootstrap", type=int, default=200)
    args = parser.parse_args()
    kernel = make_kernel("imq", None, None)
    rejections = {"consistent": 0, "statistic_only": 0, "uncorrected": 0}
    lags = []
    for rep in range(args.reps):
        rng = np.random.default_rng(rep)
        x = ar1(rng, args.n_draw, args.d, args.rho)
        s = -x
        names = [f"x{k}" for k in range(args.d)]
        pre = make_preconditioner("standardize", x[0], names)
        land = choose_landmarks(x, s, pre, kernel, default_n_landmarks(args.n_draw), rng)
        tau = integrated_autocorrelation_time(np.concatenate([x[0], s[0]], axis=1)).max()
        flip = np.array([flip_probability(tau)])
        forms = {}
        for n_lags in (0, default_exact_lags(x)):
            land.n_lags = n_lags
            per_chain, _ = nystrom_quadratic_forms(x, s, pre, land, "wild",
                                                   np.random.default_rng(10**6 + rep),
                                                   args.n_bootstrap, flip)
            forms[n_lags] = per_chain[0]
        lags.append(land.n_lags)
        with_lags, without = forms[land.n_lags], forms[0]
        p = {"consistent": bootstrap_pvalue(with_lags[1:], with_lags[:1])[0],
             "statistic_only": bootstrap_pvalue(without[1:], with_lags[:1])[0],
             "uncorrected": bootstrap_pvalue(without[1:], without[:1])[0]}
        for key, value in p.items():
            rejections[key] += value <= 0.05
    se = np.sqrt(0.05 * 0.95 / args.reps)
    print(json.dumps({**vars(args), "binomial_se": se, "median_lags": float(np.median(lags)),
                      **{k: v / args.reps for k, v in rejections.items()}}))


if __name__ == "__main__":
    main()
