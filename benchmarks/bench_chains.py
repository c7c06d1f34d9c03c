"""Many short chains vs few long ones: the same N draws, split into more and more chains.

emcee's 32-64 walkers, or thousands of parallel JAX chains, give many chains of few
draws. The pooled pass costs N^2 / 2 pairs however the draws are split; this script
checks that the time does not depend on the split. For each split it times the engine
as shipped ("now") and with the many-chains layout switched off ("per-chain": the
layout used below ``engine.local._MANY_CHAINS`` chains), in the same process, alternating,
and reports medians and the largest relative difference of the row sums.

Run:  python benchmarks/bench_chains.py [--n 24000] [--repeats 3]
The machines are shared and noisy: compare the columns of one run, not across runs.
"""

import argparse
import time

import numpy as np

import steindiag.engine.local as engine
from steindiag.engine.local import stein_row_sums
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.kernels import IMQ

SHIPPED = dict(engine._MANY_CHAINS)
PER_CHAIN = {name: 10**12 for name in SHIPPED}


def run(draws, scores, pre, layout):
    engine._MANY_CHAINS = layout
    start = time.perf_counter()
    sums = stein_row_sums(draws, scores, kernel=IMQ(), preconditioner=pre)
    return time.perf_counter() - start, sums


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=24000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"N = {args.n} pooled draws; median of {args.repeats} runs\n")
    print("| d | chains x draws | per-chain layout | now | per-chain / now | max rel. diff |")
    print("|---|---|---|---|---|---|")
    for d in (2, 10):
        flat = np.random.default_rng(0).standard_normal((args.n, d))
        pre = make_preconditioner("standardize", flat, [f"x[{k}]" for k in range(d)])
        for n_chain in (1, 4, 16, 64, 250, 1000, 2000):
            n_draw = args.n // n_chain
            draws = flat[: n_chain * n_draw].reshape(n_chain, n_draw, d)
            scores = -draws
            times = {"per-chain": [], "now": []}
            for layout in (PER_CHAIN, SHIPPED):          # compile and warm up
                run(draws, scores, pre, layout)
            for _ in range(args.repeats):
                for name, layout in (("per-chain", PER_CHAIN), ("now", SHIPPED)):
                    times[name].append(run(draws, scores, pre, layout)[0])
            _, old = run(draws, scores, pre, PER_CHAIN)
            _, new = run(draws, scores, pre, SHIPPED)
            diff = max(np.max(np.abs(old.row_all - new.row_all)) / np.max(np.abs(old.row_all)),
                       np.max(np.abs(old.row_same - new.row_same))
                       / np.max(np.abs(old.row_same)))
            before, after = np.median(times["per-chain"]), np.median(times["now"])
            print(f"| {d} | {n_chain} x {n_draw} | {before:.2f} s | {after:.2f} s | "
                  f"{before / after:.2f} | {diff:.0e} |", flush=True)
    engine._MANY_CHAINS = SHIPPED


if __name__ == "__main__":
    main()
