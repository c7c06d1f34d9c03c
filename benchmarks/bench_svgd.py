"""Time per SVGD step (stein_variational) and of its kernel sum, fused vs BLAS path.

Run:  python benchmarks/bench_svgd.py [--quick]

Target N(0, I_d) (a cheap score, so the step is the kernel sum, the median bandwidth and
the AdaGrad update). For each (N, d): the kernel sum alone on both paths (best of a few
calls, all threads), and the time of one step of ``stein_variational`` (method "auto")
without the KSD of the particles and with it (``ksd_every=1``, the default), from
differences of whole runs. Writes a Markdown table to stdout.
"""

import argparse
import time

import numba
import numpy as np

from steindiag.engine import svgd as _svgd_kernels
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
    print("| N | d | kernel sum fused | kernel sum BLAS | SVGD step | step with KSD |")
    print("|---|---|---|---|---|---|")
    for n, d in sizes:
        x = rng.standard_normal((n, d))
        h = 2.0 * d / np.log(n + 1.0)  # about the median bandwidth of these points
        repeats = 3 if n <= 1000 else 2
        timings = {}
        for method in ("fused", "gemm"):
            _svgd_kernels.kernel_vector_sums(x[:64], -x[:64], 1.0 / h,
                                              kind=_svgd_kernels.RBF, method=method,
                                              combine=True)
            timings[method] = best_of(lambda: _svgd_kernels.kernel_vector_sums(
                x, -x, 1.0 / h, kind=_svgd_kernels.RBF, method=method, combine=True),
                repeats)
        extra = 10 if n <= 1000 else 2
        stein_variational(x[:64], score=lambda z: -z, n_steps=2)

        def run(n_steps, ksd_every):
            start = time.perf_counter()
            stein_variational(x, score=lambda z: -z, n_steps=n_steps, ksd_every=ksd_every)
            return time.perf_counter() - start

        # Differences of whole runs, so that the steps run exactly as in use (one thread
        # below 2000 particles): one step and two KSD passes cancel.
        base = run(1, 1)
        step = (run(1 + extra, 1 + extra) - base) / extra
        step_with_ksd = (run(1 + extra, 1) - base) / extra
        print(f"| {n} | {d} | {timings['fused']:.3g} s | {timings['gemm']:.3g} s | "
              f"{step:.3g} s | {step_with_ksd:.3g} s |", flush=True)


if __name__ == "__main__":
    main()
