"""Benchmark of stein_weights (dense QP vs matrix-free Frank-Wolfe) and stein_thin.

Usage::

    python benchmarks/bench_weights.py                    # N = 1e3, 3e3, 1e4 at d = 10
    python benchmarks/bench_weights.py --large            # also N = 1e5 (Frank-Wolfe only)
    python benchmarks/bench_weights.py --sizes 1000 --repeats 5 --d 4

Draws: N i.i.d. draws of N(0.3, I_d) scored against the target N(0, I_d) (a biased
sample, so the weights have work to do), one chain, preconditioner "standardize".
Prints the median wall time of ``--repeats`` runs (after one warm-up call that
compiles the Numba kernels), the iterations, the certified relative duality gap, and
how far apart the two methods' optimal KSD^2 are. The dense method holds about
32 N^2 bytes (N = 1e4: 3.2 GB) and is skipped above ``--dense-max``. Times are noisy on
shared machines: each step of Frank-Wolfe runs on one thread (see
steindiag._stein_products.PARALLEL_MIN_N), the K_p w products use every thread.
"""

import argparse
import statistics
import sys
import time

import numpy as np

from steindiag.thinning import stein_thin
from steindiag.weights import stein_weights


def biased_sample(n, d, seed=0):
    x = np.random.default_rng(seed).standard_normal((1, n, d)) + 0.3
    return x, -x


def timed(function, repeats):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument("--dense-max", type=int, default=10000,
                        help="largest N for the dense QP (timed once above 3000)")
    parser.add_argument("--large", action="store_true", help="add N = 1e5, Frank-Wolfe only")
    parser.add_argument("--thin", type=int, default=1000,
                        help="points selected by stein_thin at the largest size (0: skip)")
    args = parser.parse_args(argv)

    warm_x, warm_s = biased_sample(200, args.d)
    stein_weights(warm_x, score=warm_s, method="frank-wolfe", tol=1e-4)
    try:
        stein_weights(warm_x, score=warm_s, method="dense")
        has_dense = True
    except ImportError:
        has_dense = False
    stein_thin(warm_x, score=warm_s, n_points=5)

    sizes = list(args.sizes) + ([100_000] if args.large else [])
    print(f"d = {args.d}, tol = {args.tol:g}, median of {args.repeats} runs "
          f"(one run above N = 3000); times in seconds")
    print(f"{'N':>7} {'method':>12} {'median':>9} {'min':>9} {'iterations':>10} "
          f"{'rel. gap':>9} {'KSD uniform':>12} {'KSD weighted':>13}")
    for n in sizes:
        x, s = biased_sample(n, args.d)
        repeats = args.repeats if n <= 3000 else 1
        objectives = {}
        methods = ["frank-wolfe"] + (["dense"] if has_dense and n <= args.dense_max else [])
        for method in methods:
            median, best, w = timed(
                lambda: stein_weights(x, score=s, method=method, tol=args.tol), repeats
            )
            objectives[method] = w.attrs["ksd_weighted"] ** 2
            print(f"{n:>7} {method:>12} {median:>9.2f} {best:>9.2f} {w.attrs['iterations']:>10} "
                  f"{w.attrs['relative_duality_gap']:>9.1e} {w.attrs['ksd_uniform']:>12.6f} "
                  f"{w.attrs['ksd_weighted']:>13.6f}", flush=True)
        if len(objectives) == 2:
            rel = abs(objectives["dense"] - objectives["frank-wolfe"]) / objectives["dense"]
            print(f"{n:>7} {'agreement':>12} |f_dense - f_fw| / f_dense = {rel:.1e}", flush=True)
    if args.thin:
        n = max(sizes)
        x, s = biased_sample(n, args.d)
        median, best, _ = timed(lambda: stein_thin(x, score=s, n_points=args.thin), 1)
        print(f"stein_thin N = {n}, n_points = {args.thin}: {median:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
