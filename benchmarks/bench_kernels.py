"""Base-kernel benchmark: the engine's speed for each base kernel (IMQ, Gaussian, Matern).

Times ``steindiag.ksd`` (one O(N^2 d) pass over the lower triangle) for every base kernel
on both engine paths ("fused" per-pair loop, "gemm" BLAS-tiled), with the isotropic
identity preconditioner and a full one (``"smpcov"``). Reports the median wall time of
several runs, pairs/s and GFLOP/s at 8d + 20 flops a pair (the flop count of the IMQ
kernel, used for every kernel so that the columns compare speeds).

Run:  python benchmarks/bench_kernels.py [--kernels imq gaussian ...] [--repeats 7]
                                         [--out benchmarks/results/kernels.md]
The machine is shared and noisy: every figure is a median, and the IMQ rows are the ones
to compare with benchmarks/results/engine.md.
"""

import argparse
import inspect
import json
import os
import platform
import time
from pathlib import Path

import numba
import numpy as np

import steindiag

ROOT = Path(__file__).resolve().parent
KERNELS = ("imq", "gaussian", "matern32", "matern52")
# (N, d, method, preconditioner)
CASES = [
    (20_000, 2, "fused", "identity"),
    (20_000, 10, "fused", "identity"),
    (20_000, 10, "gemm", "identity"),
    (20_000, 50, "gemm", "identity"),
    (20_000, 10, "gemm", "smpcov"),
]


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), float(np.min(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=None, help="write a Markdown table here")
    args = parser.parse_args()
    takes_kernel = "kernel" in inspect.signature(steindiag.ksd).parameters
    if not takes_kernel and args.kernels != ["imq"]:
        parser.error("this steindiag has no kernel= argument: use --kernels imq")

    rng = np.random.default_rng(0)
    rows = []
    for n, d, method, preconditioner in CASES:
        x = rng.standard_normal((n, d))
        s = -x + 0.1 * rng.standard_normal((n, d))
        for kernel in args.kernels:
            options = {"kernel": kernel} if takes_kernel else {}

            def single():
                return steindiag.ksd(x, score=s, preconditioner=preconditioner,
                                     method=method, progress=False, **options)

            single()  # compile / warm-up, not timed
            t_median, t_min = median_time(single, args.repeats)
            pairs = n * (n - 1) / 2
            row = {"kernel": kernel, "N": n, "d": d, "method": method,
                   "preconditioner": preconditioner, "time_s": t_median, "min_s": t_min,
                   "pairs_per_s": pairs / t_median,
                   "gflops": pairs * (8 * d + 20) / t_median / 1e9}
            rows.append(row)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                              for k, v in row.items()}), flush=True)
    if args.out:
        write_report(args.out, rows, args.repeats)


def write_report(path, rows, repeats):
    lines = [
        "# Base-kernel benchmark",
        "",
        f"Command: `python benchmarks/bench_kernels.py` · {time.strftime('%Y-%m-%d')} · "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"numba {numba.__version__}, numpy {np.__version__}, steindiag {steindiag.__version__}",
        "",
        f"`steindiag.ksd` on one chain, median of {repeats} runs (min in brackets); "
        "GFLOP/s at 8d + 20 flops a pair for every kernel.",
        "",
        "| kernel | N | d | method | preconditioner | time (s) | pairs/s | GFLOP/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {r['N']:,} | {r['d']} | {r['method']} | {r['preconditioner']} | "
            f"{r['time_s']:.3f} ({r['min_s']:.3f}) | {r['pairs_per_s']:.2e} | {r['gflops']:.1f} |"
        )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
