"""Engine benchmark: steindiag vs stein-thinning (PyPI) vs plain NumPy, same run.

Reports, for N (pooled draws, one chain) in {5k, 20k, 50k} and d in {2, 10, 50, 200}:
wall time (median of several runs), pairs/s, GFLOP/s at 8d + 20 flops a pair (the docs' background page
section 4), the fraction of a float64 NumPy matmul peak measured in this run, the
running-curve / single-value time ratio, extra peak memory, and speed-ups over the
peers. Also the first-call time (cold compile and warm cache) in fresh processes and
extra memory at N = 1e5, d = 50.

Run:  python benchmarks/bench_engine.py [--quick] [--out benchmarks/results/engine.md]
The machines are shared and noisy: every figure is a median of several runs.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numba
import numpy as np

import steindiag
from steindiag.engine.local import _FUSED_MAX_D

ROOT = Path(__file__).resolve().parent


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def let_blas_threads_park(seconds=0.3):
    """Wait until OpenBLAS's threads stop spinning after the last multi-threaded call.

    After each call OpenBLAS's threads spin on the other cores for about 0.1 s before
    they sleep; a pass timed in that window shares its cores with them (N = 5000, d = 2:
    23-27 ms right after a NumPy matmul, 13-18 ms 0.1-0.5 s later, 12 ms in a process
    of its own). The matmul peak and the NumPy peer run just before the engine is timed.
    """
    time.sleep(seconds)


def matmul_peak(repeats=5, size=2500):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, size, size))
    a @ b
    return 2 * size**3 / median_time(lambda: a @ b, repeats) / 1e9


def _rss_reset():
    """Reset the peak-RSS high-water mark (Linux) and return the current RSS in bytes."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _status("VmRSS")


def _status(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


def extra_peak_memory(fn):
    """Peak RSS above the RSS before ``fn`` (bytes), or None where unsupported."""
    base = _rss_reset()
    fn()
    peak = _status("VmHWM")
    return None if base is None or peak is None else max(peak - base, 0)


def numpy_ksd_v(x, s, block=512):
    """Plain-NumPy V-statistic (A = I, c = 1, beta = -1/2), row blocks of the kernel matrix."""
    n, d = x.shape
    total = 0.0
    for i0 in range(0, n, block):
        xi, si = x[i0 : i0 + block], s[i0 : i0 + block]
        u = xi[:, None, :] - x[None, :, :]
        q = 1.0 + np.einsum("ijk,ijk->ij", u, u)
        uds = np.einsum("ijk,ijk->ij", u, si[:, None, :] - s[None, :, :])
        ss = si @ s.T
        # the docs' background page with A = I, c = 1, beta = -1/2 (u^T A^2 u = q - 1).
        total += np.sum(-3.0 * q**-2.5 * (q - 1.0) + q**-1.5 * (d + uds) + q**-0.5 * ss)
    return np.sqrt(total) / n


def stein_thinning_path(x, s):
    """stein-thinning's running KSD (stein_thinning.stein.ksd), identity preconditioner."""
    from stein_thinning.kernel import make_imq
    from stein_thinning.stein import ksd

    vfk0 = make_imq(x, "id")

    def integrand(i, j):
        return vfk0(x[i], x[j], s[i], s[j])

    return ksd(integrand, x.shape[0])


def tile_gemm_gflops(d, tile_rows=512, repeats=400):
    """GFLOP/s of the BLAS products alone, as the engine runs them: one single-threaded
    (tile_rows x d) @ (d x tile_rows) product per Numba worker, all workers at once.
    This is the ceiling of the BLAS-tiled path at that d."""
    import numba as nb
    from threadpoolctl import threadpool_limits

    @nb.njit(parallel=True)
    def products(panels, count):
        checksum = np.zeros(panels.shape[0])
        for worker in nb.prange(panels.shape[0]):
            for _ in range(count):
                gram = np.dot(panels[worker], panels[(worker + 1) % panels.shape[0]].T)
                checksum[worker] += gram[0, 0]
        return checksum

    workers = numba.get_num_threads()
    panels = np.random.default_rng(1).standard_normal((workers, tile_rows, d))
    with threadpool_limits(limits=1, user_api="blas"):
        products(panels, 2)
        seconds = median_time(lambda: products(panels, repeats), 3)
    return workers * repeats * 2 * tile_rows**2 * d / seconds / 1e9


def first_call_times():
    """Seconds for import + first ksd in a fresh process: cold (empty cache) and warm."""
    code = textwrap.dedent(
        """
        import time; t = time.perf_counter()
        import numpy as np, steindiag
        x = np.random.default_rng(0).standard_normal((2, 300, 3))
        steindiag.ksd(x, score=-x); steindiag.ksd(x, score=-x, method="gemm")
        print(time.perf_counter() - t)
        """
    )
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("cold", "warm"):
            result = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                    capture_output=True, text=True)
            out[label] = float(result.stdout.strip().splitlines()[-1])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (smoke test)")
    parser.add_argument("--out", default=str(ROOT / "results" / "engine.md"))
    args = parser.parse_args()

    sizes = [5_000, 20_000, 50_000] if not args.quick else [2_000, 5_000]
    dims = [2, 10, 50, 200] if not args.quick else [2, 50]
    try:
        import stein_thinning  # noqa: F401
        have_st = True
    except ImportError:
        have_st = False
        print("stein-thinning not installed (pip install stein-thinning): peer column skipped")

    rng = np.random.default_rng(0)
    warm = rng.standard_normal((1, 300, 3))
    steindiag.ksd(warm, score=-warm)
    steindiag.ksd(warm, score=-warm, method="gemm")
    peak = matmul_peak()
    print(f"float64 matmul peak (NumPy, {numba.get_num_threads()} threads): {peak:.1f} GFLOP/s")
    rows = []
    for n in sizes:
        for d in dims:
            x = rng.standard_normal((n, d))
            s = -x + 0.1 * rng.standard_normal((n, d))
            repeats = 5 if n <= 5_000 else (3 if n <= 20_000 else 1)

            def single():
                return steindiag.ksd(x, score=s, preconditioner="identity")

            def path():
                return steindiag.ksd_path(x, score=s, preconditioner="identity")

            single()  # warm-up at this size (page faults, CPU frequency), not timed
            let_blas_threads_park()
            t_single = median_time(single, repeats)
            t_path = median_time(path, repeats)
            mem = extra_peak_memory(single)
            pairs = n * (n - 1) / 2
            gflops = pairs * (8 * d + 20) / t_single / 1e9
            row = {
                "N": n, "d": d, "time_s": t_single, "pairs_per_s": pairs / t_single,
                "gflops": gflops, "peak_fraction": gflops / peak,
                "path_over_single": t_path / t_single,
                "extra_mem_mb": None if mem is None else mem / 1e6,
            }
            # Peers on what they can do in reasonable time (each is O(N^2 d) in Python/NumPy).
            if n * n * d <= 5_000**2 * 200 or (n <= 20_000 and d <= 10):
                t_np = median_time(lambda: numpy_ksd_v(x, s), 1)
                row["numpy_s"] = t_np
                row["speedup_vs_numpy"] = t_np / t_single
                ref = numpy_ksd_v(x, s)
                row["agrees_with_numpy"] = bool(np.isclose(ref, single()["ksd"].item(),
                                                           rtol=1e-10))
            if have_st and (n <= 5_000 or (n <= 20_000 and d <= 10)):
                t_st = median_time(lambda: stein_thinning_path(x, s), 1)
                row["stein_thinning_s"] = t_st
                row["speedup_vs_stein_thinning"] = t_st / t_path
            rows.append(row)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                              for k, v in row.items()}), flush=True)

    big = {}
    if not args.quick:
        x = rng.standard_normal((100_000, 50))
        s = -x  # allocated before the measurement: only the engine's own memory counts
        big["extra_mem_mb_N1e5_d50"] = extra_peak_memory(
            lambda: steindiag.ksd(x, score=s, preconditioner="identity")) / 1e6
        big["input_mb_N1e5_d50"] = 2 * x.nbytes / 1e6
    first = first_call_times()
    gemm = {d: tile_gemm_gflops(d) for d in dims if d > _FUSED_MAX_D}
    write_report(args.out, peak, rows, big, first, gemm)


def write_report(path, peak, rows, big, first, gemm):
    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    lines = [
        "# Engine benchmark",
        "",
        f"Command: `python benchmarks/bench_engine.py` · {time.strftime('%Y-%m-%d')} · "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"numba {numba.__version__}, numpy {np.__version__}, steindiag {steindiag.__version__}",
        "",
        f"NumPy float64 matmul peak measured in the same run: **{peak:.1f} GFLOP/s**.",
        "Times are medians of 5 (N = 5k), 3 (20k) or 1 (50k) runs; one chain, "
        "`preconditioner=\"identity\"`; GFLOP/s counts 8d + 20 flops a pair. "
        "Peers: `stein_thinning.stein.ksd` (its running KSD, compared with our `ksd_path`) "
        "and a row-blocked plain-NumPy V-statistic (compared with `ksd`).",
        "",
        "| N | d | time (s) | pairs/s | GFLOP/s | % of matmul peak | path / single | "
        "extra MB | vs NumPy | vs stein-thinning |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['N']:,} | {r['d']} | {r['time_s']:.3f} | {r['pairs_per_s']:.2e} | "
            f"{r['gflops']:.1f} | {100 * r['peak_fraction']:.0f}% | {r['path_over_single']:.2f} | "
            f"{fmt(r['extra_mem_mb'], '.0f')} | "
            f"{fmt(r.get('speedup_vs_numpy'), '.0f')}x | "
            f"{fmt(r.get('speedup_vs_stein_thinning'), '.0f')}x |".replace("-x", "-")
        )
    lines += ["", f"First call (import + compile or cache load), fresh process: cold cache "
                  f"{first['cold']:.1f} s, warm cache {first['warm']:.1f} s."]
    for d, gflops in gemm.items():
        lines.append(
            f"Ceiling of the BLAS-tiled path at d = {d}: its single-threaded 512 x {d} x 512 "
            f"products alone run at {gflops:.1f} GFLOP/s ({100 * gflops / peak:.0f}% of the peak)."
        )
    if big:
        lines.append(
            f"Extra peak memory at N = 100,000, d = 50: {big['extra_mem_mb_N1e5_d50']:.0f} MB "
            f"(the draws and scores themselves: {big['input_mb_N1e5_d50']:.0f} MB)."
        )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
