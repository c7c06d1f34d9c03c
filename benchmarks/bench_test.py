"""Benchmark of ksd_test (the bootstrap's many-right-hand-side pass) and mmd.

Usage::

    python benchmarks/bench_test.py                       # N = 2e4, d = 10, B = 1000
    python benchmarks/bench_test.py --n 5000 --b 200 --dense 1000 2000

Draws: one chain of N i.i.d. N(0, I_d) draws scored against N(0, I_d), preconditioner
"standardize". Reported, each after a warm-up call that compiles the Numba kernels:

- ``ksd_test`` wall time (wild bootstrap, B replicates, per chain and pooled: with one
  chain the pooled forms are the chain's own), and the time of the tiled pass alone;
- its arithmetic rate: the pass multiplies tiles of K_p by the (N, B + 1) weights
  (N^2 (B + 1) flops for the lower triangle counted once per pair and both orders) and
  evaluates about N^2 / 2 kernel pairs at ~8d + 20 flops each;
- the BLAS matmul peak of this machine in the same process (float64, 2048^3), for scale;
- the dense approach at smaller N: build K_p (``KernelPoints.matrix``, 8 N^2 bytes),
  then diag(W^T K_p W) with one BLAS product; and B separate K_p w products, timed for a
  few columns and scaled to B;
- ``mmd`` between 4 chains of N / 4 draws with 1000 block permutations.

Times are noisy on shared machines; numbers are medians of ``--repeats`` runs.
"""

import argparse
import resource
import statistics
import time

import numba
import numpy as np

import steindiag
from steindiag.engine import forms
from steindiag.stats import bootstrap
from steindiag.engine import products as _stein_products
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.kernels import IMQ


def timed(function, repeats):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def pass_flops(n, d, n_rhs):
    """Flops of the tiled pass: products N^2 (B + 1) and ~N^2 / 2 pairs at 8d + 20."""
    return n * n * n_rhs + 0.5 * n * n * (8 * d + 20)


def matmul_peak(repeats):
    a = np.random.default_rng(0).standard_normal((2048, 2048))
    np.dot(a, a)
    seconds, _ = timed(lambda: np.dot(a, a), repeats)
    return 2 * 2048**3 / seconds / 1e9


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--b", type=int, default=1000)
    parser.add_argument("--dense", type=int, nargs="*", default=[2000, 5000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    n, d, n_boot = args.n, args.d, args.b
    print(f"threads: {numba.get_num_threads()}; N = {n}, d = {d}, B = {n_boot}")
    peak = matmul_peak(args.repeats)
    print(f"BLAS matmul peak (2048^3, float64): {peak:.1f} GFLOP/s")

    warm = np.random.default_rng(1).standard_normal((1, 600, d))
    steindiag.ksd_test(warm, score=-warm, n_bootstrap=20, rng=0)
    steindiag.mmd(warm.reshape(3, 200, d), n_permutations=10, block_length=20, rng=0)
    pre_warm = make_preconditioner("standardize", warm[0], [str(k) for k in range(d)])
    warm_points = _stein_products.KernelPoints(warm[0], -warm[0], pre_warm, IMQ())
    warm_points.matrix()
    warm_points.matvec(np.ones(600))

    x = np.random.default_rng(2).standard_normal((1, n, d))
    rss_before = peak_rss_mb()
    seconds, res = timed(lambda: steindiag.ksd_test(x, score=-x, n_bootstrap=n_boot, rng=3),
                         args.repeats)
    rss_after = peak_rss_mb()
    pre = make_preconditioner("standardize", x[0], [str(k) for k in range(d)])
    weights = bootstrap.bootstrap_weights("wild", np.random.default_rng(3), 1, n, n_boot,
                                     res["flip_probability"].values)
    pass_seconds, _ = timed(lambda: forms.quadratic_forms(x, -x, pre, IMQ(), weights, True),
                            args.repeats)
    rate = pass_flops(n, d, n_boot + 1) / pass_seconds / 1e9
    print("\n| what | N | time | GFLOP/s (% of matmul peak) |")
    print("|---|---|---|---|")
    print(f"| ksd_test, wild, B = {n_boot} (whole call) | {n} | {seconds:.2f} s | - |")
    print(f"| tiled pass alone (w^T K_p w, B + 1 columns) | {n} | {pass_seconds:.2f} s | "
          f"{rate:.0f} ({100 * rate / peak:.0f}%) |")
    print(f"\npeak RSS {rss_before:.0f} MB before, {rss_after:.0f} MB after ksd_test "
          f"(weights alone: {8 * n * (n_boot + 1) / 1e6:.0f} MB; K_p would be "
          f"{8 * n * n / 1e6:.0f} MB)")

    print("\n| N | tiled pass | dense K_p + one GEMM | B separate K_p w (scaled) "
          "| speed-up vs dense |")
    print("|---|---|---|---|---|")
    for n_small in args.dense:
        xs = x[:, :n_small]
        pre_s = make_preconditioner("standardize", xs[0], [str(k) for k in range(d)])
        w_s = np.ascontiguousarray(weights[:n_small])
        tiled, tiled_forms = timed(
            lambda: forms.quadratic_forms(xs, -xs, pre_s, IMQ(), w_s, True), args.repeats)
        points = _stein_products.KernelPoints(xs[0], -xs[0], pre_s, IMQ())

        def dense():
            K = points.matrix()
            return np.einsum("nb,nb->b", w_s, K @ w_s)

        dense_seconds, dense_forms = timed(dense, args.repeats)
        np.testing.assert_allclose(tiled_forms[1], dense_forms, rtol=1e-8,
                                   atol=1e-10 * np.abs(dense_forms).max())
        columns = 5
        one_by_one, _ = timed(lambda: [points.matvec(w_s[:, b]) for b in range(columns)], 1)
        scaled = one_by_one / columns * (n_boot + 1)
        print(f"| {n_small} | {tiled:.2f} s | {dense_seconds:.2f} s | {scaled:.1f} s | "
              f"{dense_seconds / tiled:.2f}x |")

    chains = x.reshape(4, n // 4, d)
    mmd_seconds, res_mmd = timed(lambda: steindiag.mmd(chains, n_permutations=1000, rng=0),
                                 args.repeats)
    print(f"\nmmd, 4 chains x {n // 4} draws, d = {d}, 1000 block permutations "
          f"(block length {res_mmd.attrs['block_length']}): {mmd_seconds:.2f} s")


if __name__ == "__main__":
    main()
