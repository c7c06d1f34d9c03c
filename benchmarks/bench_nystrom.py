"""Exact and Nyström KSD side by side: time, value, relative error vs m, peak memory.

Runs each measurement in a fresh subprocess (peak memory = ru_maxrss of that process,
minus nothing: the draws and scores are part of it) and writes
benchmarks/results/nystrom.md. The machine is shared (2 cores, other engineers' jobs):
times are medians of ``--repeat`` runs and vary by tens of percent.

    PYTHONPATH=$PWD python benchmarks/bench_nystrom.py accuracy   # N = 20,000, exact vs m
    PYTHONPATH=$PWD python benchmarks/bench_nystrom.py large      # N = 10^6 and 10^7, d = 10
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def _ar1(rng, n_chain, n_draw, d, rho):
    x = np.empty((n_chain, n_draw, d))
    x[:, 0] = rng.standard_normal((n_chain, d))
    scale = np.sqrt(1.0 - rho**2)
    for t in range(1, n_draw):
        x[:, t] = rho * x[:, t - 1] + scale * rng.standard_normal((n_chain, d))
    return x


def sample(case, n_total, d, seed, n_chain=4):
    """Draws of N(0, I_d) targets: exact ("iid"), AR(1) chains rho = 0.7, or shifted by 0.3."""
    rng = np.random.default_rng(seed)
    n_draw = n_total // n_chain
    if case == "iid":
        return rng.standard_normal((n_chain, n_draw, d))
    if case == "ar1":
        return _ar1(rng, n_chain, n_draw, d, 0.7)
    if case == "biased":
        return rng.standard_normal((n_chain, n_draw, d)) + 0.3
    raise ValueError(case)


def _child(spec):
    """One measurement in this process; prints a JSON line."""
    import steindiag

    x = sample(spec["case"], spec["n"], spec["d"], spec["seed"])
    score = -x
    kwargs = {"estimator": spec["estimator"]}
    if spec["estimator"] == "nystrom":
        kwargs.update(rng=spec["seed"] + 1, n_landmarks=spec.get("m"))
    # Warm up the compiled code on a small problem (compile time is not the estimator's).
    small = x[:, :64]
    if spec["what"] == "ksd":
        steindiag.ksd(small, score=-small, **{**kwargs, "n_landmarks": None} if
                      spec["estimator"] == "nystrom" else kwargs)
    else:
        steindiag.ksd_test(small, score=-small, n_bootstrap=10, **{**kwargs, "n_landmarks": 32}
                           if spec["estimator"] == "nystrom" else kwargs)
    # This machine's matrix-product speed right now (shared, loaded): the yardstick for
    # the times below (the features cost 2 N m r flops in such products).
    a, b = np.random.rand(500, 500), np.random.rand(500, 4096)
    t0 = time.perf_counter()
    for _ in range(5):
        a @ b
    gemm_gflops = 5 * 2 * 500 * 500 * 4096 / (time.perf_counter() - t0) / 1e9
    del a, b
    load_before = os.getloadavg()[0]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if spec["what"] == "ksd":
        res = steindiag.ksd(x, score=score, **kwargs)
        value = float(res["ksd_pooled"]) ** 2
        floor = float(res["ksd_iid_pooled"]) ** 2
    else:
        res = steindiag.ksd_test(x, score=score, n_bootstrap=spec["B"], rng=spec["seed"] + 1,
                                 **{k: v for k, v in kwargs.items() if k != "rng"})
        value = float(res["statistic_pooled"])
        floor = float(res["pvalue_pooled"])
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({**spec, "seconds": seconds, "gemm_gflops": gemm_gflops,
                      "load_before": load_before, "load_after": os.getloadavg()[0], "value": value, "floor_or_p": floor,
                      "peak_bytes": peak, "warm_peak_bytes": base * 1024,
                      "data_bytes": 2 * x.nbytes,
                      "m_used": res.attrs.get("n_landmarks"),
                      "n_exact_lags": res.attrs.get("n_exact_lags")}))


def run(spec, timeout=3600):
    out = subprocess.run([sys.executable, __file__, "child", json.dumps(spec)],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rows(name):
    try:
        with open(f"benchmarks/results/nystrom_{name}.jsonl") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def report():
    """Tables of the measured rows (markdown), printed for benchmarks/results/nystrom.md."""
    print("| d | sample | exact KSD^2 | i.i.d. floor | m | L | Nyström KSD^2 | relative error "
          "| Nyström s | exact s | dgemm GFLOP/s | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    acc = _rows("accuracy")
    exact = {(r["d"], r["case"]): r for r in acc if r["estimator"] == "exact"}
    for r in acc:
        if r["estimator"] != "nystrom":
            continue
        e = exact[(r["d"], r["case"])]
        print(f"| {r['d']} | {r['case']} | {e['value']:.4g} | {e['floor_or_p']:.4g} "
              f"| {r['m_used']}{' (default)' if r.get('m') is None else ''} "
              f"| {r.get('n_exact_lags')} "
              f"| {r['value']:.4g} | {100 * r['rel_error']:+.1f} % | {r['seconds']:.1f} "
              f"| {e['seconds']:.1f} | {r.get('gemm_gflops', float('nan')):.1f} "
              f"| {r.get('load_before', float('nan')):.0f} |")
    print()
    print("| N | call | m | seconds | peak RSS MB | RSS before call MB | draws+scores MB "
          "| (peak - before + data) / data | value | dgemm GFLOP/s | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in _rows("large"):
        attributable = (r["peak_bytes"] - r["warm_peak_bytes"] + r["data_bytes"]) / r["data_bytes"]
        call = "ksd" if r["what"] == "ksd" else f"ksd_test B={r['B']}"
        print(f"| {r['n']:.0e} | {call} | {r['m_used']} | {r['seconds']:.0f} "
              f"| {r['peak_bytes'] / 1e6:.0f} | {r['warm_peak_bytes'] / 1e6:.0f} "
              f"| {r['data_bytes'] / 1e6:.0f} | {attributable:.2f} | {r['value']:.4g} "
              f"| {r.get('gemm_gflops', float('nan')):.1f} "
              f"| {r.get('load_before', float('nan')):.0f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["accuracy", "large", "child", "report"])
    parser.add_argument("spec", nargs="?")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cases", default="5:iid,5:ar1,5:biased,50:iid,50:ar1,50:biased",
                        help="d:case pairs for accuracy mode")
    parser.add_argument("--ms", default="default,200,1000,2000",
                        help="landmark counts for accuracy mode ('default': the default m)")
    parser.add_argument("--sizes", default="1e6:ksd,1e6:test,1e7:ksd",
                        help="N:what pairs for large mode")
    args = parser.parse_args()
    if args.mode == "child":
        _child(json.loads(args.spec))
        return
    if args.mode == "report":
        report()
        return
    rows = []
    if args.mode == "accuracy":
        ms = [None if m == "default" else int(m) for m in args.ms.split(",")]
        for item in args.cases.split(","):
            d, case = int(item.split(":")[0]), item.split(":")[1]
            exact = run({"what": "ksd", "estimator": "exact", "case": case, "n": 20000,
                         "d": d, "seed": 0})
            rows.append(exact)
            print(json.dumps(exact), flush=True)
            for m in ms:
                r = run({"what": "ksd", "estimator": "nystrom", "case": case, "n": 20000,
                         "d": d, "seed": 0, "m": m})
                r["rel_error"] = r["value"] / exact["value"] - 1.0
                rows.append(r)
                print(json.dumps(r), flush=True)
    else:
        for item in args.sizes.split(","):
            n, what = int(float(item.split(":")[0])), item.split(":")[1]
            spec = {"what": what, "n": n, **({"B": 1000} if what == "test" else {})}
            times = []
            for _ in range(args.repeat):
                r = run({**spec, "estimator": "nystrom", "case": "iid", "d": 10, "seed": 0})
                times.append(r["seconds"])
            r["seconds_median"] = float(np.median(times))
            rows.append(r)
            print(json.dumps(r), flush=True)
    with open(f"benchmarks/results/nystrom_{args.mode}.jsonl", "a") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
