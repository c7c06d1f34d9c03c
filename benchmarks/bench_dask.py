"""dask.distributed engine benchmark: ksd(..., client=) against the local engine, same run.

IMQ kernel, BLAS path (``method="gemm"``), d = 10, one chain, ``preconditioner="identity"``
(as benchmarks/bench_engine.py), exact N(0, I) draws with score -x. Reports, for each
configuration: wall time of the ``ksd`` call (scatter and reassembly included; the
cluster is started and its kernels loaded before), GFLOP/s at 8d + 20 flops a pair and
N^2 / 2 pairs, speed-up per added worker, peak RSS per worker process (VmHWM, reset
before the call), CPU seconds used (all worker processes, or this process for the local
engine; a measure the other programs on a shared machine do not change much), and the
relative difference of the KSD value from the local engine's.

Two phases, each in its own LocalCluster(s) of single-threaded worker processes:
- speed-up: N = --n-small (default 2e5) with 1 and 2 workers and the local engine
  (medians of --repeats runs);
- large: N = --n-large (default 1e6) once with 2 workers, and once with the local
  engine unless --skip-local-large.

Run:  python benchmarks/bench_dask.py [--n-small 200000] [--n-large 1000000] [--repeats 3]
      [--out benchmarks/results/dask.md]
Writes a Markdown table to --out and the raw rows to --out + ".json"; each measurement is
also printed as a JSON line when it finishes (partial results survive an interrupted run). The machine is shared and noisy: medians, and load noted in the output.
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np

import steindiag

ROOT = Path(__file__).resolve().parent
D = 10
FLOPS_PER_PAIR = 8 * D + 20


def _reset_peak_rss():
    """On a worker: reset the peak-RSS mark (Linux), return the current RSS in bytes."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return _status("VmRSS")


def _peak_rss():
    return _status("VmHWM")


def _cpu_seconds():
    """CPU time of this process, all threads (user + system)."""
    return time.process_time()


def _status(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


def _data(n):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, n, D))
    return x, -x


def _run(x, s, client):
    return steindiag.ksd(x, score=s, method="gemm", preconditioner="identity", progress=False,
                         client=client)


def _gflops(n, seconds):
    return FLOPS_PER_PAIR * n * n / 2 / seconds / 1e9


def _measure(n, client, repeats, reference=None):
    """Median time of ksd on (1, n, D) draws; peak RSS per worker; difference from reference."""
    x, s = _data(n)
    times, peaks, cpu = [], [], []
    result = None
    for _ in range(repeats):
        if client is not None:
            client.run(_reset_peak_rss)
            cpu_before = sum(client.run(_cpu_seconds).values())
        else:
            cpu_before = _cpu_seconds()
        start = time.perf_counter()
        result = _run(x, s, client)
        times.append(time.perf_counter() - start)
        if client is not None:
            peaks.append(max(client.run(_peak_rss).values()))
            cpu.append(sum(client.run(_cpu_seconds).values()) - cpu_before)
        else:
            cpu.append(_cpu_seconds() - cpu_before)
    seconds = float(np.median(times))
    row = {
        "n": n,
        "workers": 0 if client is None else len(client.nthreads()),
        "seconds": seconds,
        "times": times,
        "gflops": _gflops(n, seconds),
        "cpu_seconds": float(np.median(cpu)),
        "gflops_per_cpu_second": _gflops(n, float(np.median(cpu))),
        "peak_worker_mb": (max(peaks) / 2**20) if peaks else None,
        "ksd": float(result["ksd"][0]),
        "load": os.getloadavg()[0],
    }
    if reference is not None:
        row["rel_diff"] = abs(row["ksd"] - reference) / reference
    print(json.dumps(row), flush=True)
    return row


def _cluster(n_workers):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                           dashboard_address=":0")
    client = Client(cluster)
    _run(*_data(2000), client)  # load the kernels (Numba cache) on every worker
    return cluster, client


def markdown(header, rows):
    """The results as a Markdown table, with the speed-ups per added worker."""
    lines = [header, "",
             "| N | engine | time (s) | runs | GFLOP/s | CPU s | GFLOP per CPU s | "
             "peak RSS per worker (MB) | KSD rel. diff. vs local | load (1 min) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        engine = "local (Numba threads)" if row["workers"] == 0 else (
            f"dask, {row['workers']} worker(s) x 1 thread")
        peak = "-" if row["peak_worker_mb"] is None else f"{row['peak_worker_mb']:.0f}"
        diff = "-" if "rel_diff" not in row else f"{row['rel_diff']:.1e}"
        lines.append(
            f"| {row['n']:,} | {engine} | {row['seconds']:.1f} | {len(row['times'])} | "
            f"{row['gflops']:.1f} | {row['cpu_seconds']:.0f} | {row['gflops_per_cpu_second']:.1f} "
            f"| {peak} | {diff} | {row['load']:.1f} |")
    lines.append("")
    for n in sorted({row["n"] for row in rows}):
        by_workers = {row["workers"]: row["seconds"] for row in rows if row["n"] == n}
        if 1 in by_workers and 2 in by_workers:
            lines.append(f"Speed-up from 1 to 2 workers at N = {n:,}: "
                         f"{by_workers[1] / by_workers[2]:.2f}x (wall time).")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-small", type=int, default=200_000)
    parser.add_argument("--n-large", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-local-large", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "results" / "dask.md"))
    args = parser.parse_args()
    import distributed

    _run(*_data(2000), None)  # compile or load the kernels here too
    rows = []
    local_small = _measure(args.n_small, None, args.repeats)
    rows.append(local_small)
    for n_workers in (1, 2):
        cluster, client = _cluster(n_workers)
        try:
            rows.append(_measure(args.n_small, client, args.repeats, local_small["ksd"]))
            if n_workers == 2 and args.n_large:
                large = _measure(args.n_large, client, 1)
                rows.append(large)
        finally:
            client.close()
            cluster.close()
    if args.n_large and not args.skip_local_large:
        local_large = _measure(args.n_large, None, 1)
        rows.append(local_large)
        large["rel_diff"] = abs(large["ksd"] - local_large["ksd"]) / local_large["ksd"]
    command = " ".join(["python benchmarks/bench_dask.py", *sys.argv[1:]])
    header = (
        f"Command: `{command}` · {time.strftime('%Y-%m-%d')} · "
        f"{platform.machine()}, {os.cpu_count()} cores, numba {numba.__version__}, numpy "
        f"{np.__version__}, distributed {distributed.__version__}, steindiag "
        f"{steindiag.__version__}"
    )
    Path(args.out + ".json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    Path(args.out).write_text(markdown(header, rows))
    print(markdown(header, rows))


if __name__ == "__main__":
    main()
