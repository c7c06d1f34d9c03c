"""Time per SVGD step (stein_variational) and of its kernel sum, fused vs BLAS path.

Run:  python benchmarks/bench_svgd.py [--quick]

Target N(0, I_d) (a cheap score, so the step is the kernel sum, the median bandwidth and
the AdaGrad update). For each (N, d): the kernel sum alone on both paths (best of a few
calls), and a whole step of ``stein_variational`` with the KSD of the particles computed
only at the start and the end (``ksd_every = n_steps``), and the KSD pass alone (what
``ksd_every=1`` adds to each step). Writes a Markdown table to stdout.
"""

import argparse
import time

import numba
import numpy as np

from steindiag import _svgd_kernels
from steindiag._engine import stein_row_sums
from steindiag._preconditioner import make_preconditioner
from steindiag.variational import stein_variational


def best_of(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="N = 1000 only")
    args = parser.parse_args()
    sizes = [(1000, 2), (1000, 50), (10000, 2), (10000, 50)]
    if args.quick:
        sizes = sizes[:2]
    rng = np.random.default_rng(0)
    print(f"threads: {numba.get_num_threads()}")
    print("| N | d | kernel sum fused | kernel sum BLAS | SVGD step (auto) | KSD pass |")
    print("|---|---|---|---|---|---|")
    for n, d in sizes:
        x = rng.standard_normal((n, d))
        h = 1.0 / d
        repeats = 3 if n <= 1000 else 2
        timings = {}
        for method in ("fused", "gemm"):
            _svgd_kernels.kernel_vector_sums(x[:64], -x[:64], 1.0 / h,
                                              kind=_svgd_kernels.RBF, method=method,
                                              combine=True)
            timings[method] = best_of(lambda: _svgd_kernels.kernel_vector_sums(
                x, -x, 1.0 / h, kind=_svgd_kernels.RBF, method=method, combine=True),
                repeats)
        n_steps = 5 if n <= 1000 else 2
        stein_variational(x[:64], score=lambda z: -z, n_steps=2)
        start = time.perf_counter()
        stein_variational(x, score=lambda z: -z, n_steps=n_steps, ksd_every=n_steps)
        total = time.perf_counter() - start
        pre = make_preconditioner("standardize", x, [str(k) for k in range(d)])
        ksd_time = best_of(lambda: stein_row_sums(x[None], -x[None], c=1.0, beta=-0.5,
                                                  preconditioner=pre), repeats)
        # The run computes the KSD twice (start and end): take those out of the step.
        step = (total - 2 * ksd_time) / n_steps
        print(f"| {n} | {d} | {timings['fused']:.3g} s | {timings['gemm']:.3g} s | "
              f"{step:.3g} s | {ksd_time:.3g} s |", flush=True)


if __name__ == "__main__":
    main()
