"""How far the thinned bootstrap's variance falls short of the statistic's, by offsets read.

The thinned KSD test gives every block of L consecutive draws one random sign and averages
the V-statistics of every L-th draw over the first m offsets of each block. When all L
offsets are read, the last draws of block b and the first of block b + 1 are consecutive,
so the terms of block pairs (b, b') and (b + 1, b' + 1) are correlated, which independent
signs do not reproduce. This measures, for a kernel whose feature map is known (the linear
kernel x . y, degenerate under N(0, I)), Var(statistic) / E[bootstrap variance] on
stationary Gaussian AR(1) chains, for m = L (all offsets) and fewer; the off-diagonal part
of the statistic is compared with 2 sum_{b != b'} H_bb'^2, its variance under the signs.

Run: python benchmarks/bench_thinned_variance.py [--reps 20000]
"""

import argparse

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20000)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=90)
    args = parser.parse_args()
    rho, d, n_block = args.rho, args.dim, args.blocks
    tau = (1 + rho) / (1 - rho)
    lag = 1 + int(np.floor(5 * (tau - 1)))
    reads = sorted({lag, lag - int(np.floor(tau - 1)), lag - int(np.floor(2 * (tau - 1)))},
                   reverse=True)
    rng = np.random.default_rng(1)
    n = lag * n_block
    batch = 50
    stats = {m: ([], []) for m in reads}
    for _ in range(args.reps // batch):
        noise = rng.standard_normal((batch, n, d))
        x = np.empty_like(noise)
        x[:, 0] = noise[:, 0]
        for t in range(1, n):
            x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * noise[:, t]
        for m in reads:
            blocks = x.reshape(batch, n_block, lag, d)[:, :, :m]
            H = np.einsum("rbod,rcod->rbc", blocks, blocks) / m
            off_diagonal = H.sum(axis=(1, 2)) - np.einsum("rbb->r", H)
            H2 = H**2
            stats[m][0].append(off_diagonal)
            stats[m][1].append(2 * (H2.sum(axis=(1, 2)) - np.einsum("rbb->r", H2)))
    print(f"AR(1) rho = {rho} (tau = {tau:.3g}), d = {d}, {n_block} blocks of L = {lag} draws, "
          f"{args.reps} runs (the same chains for every m)")
    print("| offsets read m | Var(statistic) / E[bootstrap variance] |")
    print("|---|---|")
    for m in reads:
        values, boot = (np.concatenate(v) for v in stats[m])
        print(f"| {m} of {lag} | {values.var() / boot.mean():.3f} |")


if __name__ == "__main__":
    main()
