"""Benchmark of stein_weights over d x N, from the default install and with piqp.

Usage::

    python benchmarks/bench_weights.py                          # the grid below
    python benchmarks/bench_weights.py --d 1 2 --sizes 1000 10000 --repeats 3
    python benchmarks/bench_weights.py --timeout 900 --piqp     # also method="dense"

Draws: 4 chains of unadjusted Langevin (step 0.5) on the target N(0, I_d), scored
against that target: the textbook biased sampler (the stationary variance is 4/3, not
1), so the weights have work to do, and for small d the kernel matrix is nearly
singular (the case where QP solvers stall). Preconditioner "standardize".

Each case runs in its own process (a fresh import, Numba's cache warm from a first
tiny call) with a time limit, so that one slow case cannot stall the grid: a case over
the limit is reported as such. Reported: the median wall time of ``--repeats`` runs
(one run from N = 10^4 on), the method "auto" chose, the KSD with uniform and with
optimal weights, the i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N) (the KSD of an exact
sample of that size), the certified relative duality gap, and, for comparison in the same
run, the optional interior-point solver piqp (``method="dense"``, only where its 32 N^2
bytes fit; ``--piqp``). "default install" means piqp cannot be imported in the child.
The machines are shared and noisy: read ratios, not absolute times.
"""

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    args = json.loads(sys.argv[1])
    if not args["piqp"]:
        sys.modules["piqp"] = None  # the default install: no optional QP solver
    import steindiag
    from steindiag.weights import SteinWeightsError

    def ula(n_chain, n_draw, d, step=0.5, seed=0):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n_chain, d))
        out = np.empty((n_chain, n_draw, d))
        for t in range(200 + n_draw):
            x = (1 - step) * x + np.sqrt(2 * step) * rng.standard_normal(x.shape)
            if t >= 200:
                out[:, t - 200] = x
        return out

    warm = ula(1, 60, args["d"])
    steindiag.stein_weights(warm, score=-warm, method=args["method"])
    x = ula(4, args["n"] // 4, args["d"])
    times, w = [], None
    for _ in range(args["repeats"]):
        start = time.perf_counter()
        try:
            w = steindiag.stein_weights(x, score=-x, method=args["method"])
        except (SteinWeightsError, MemoryError) as err:
            print(json.dumps({"error": str(err)[:160]}))
            sys.exit(0)
        times.append(time.perf_counter() - start)
    p = w.values.reshape(-1) / w.values.sum()
    flat = x.reshape(-1, args["d"])
    mean = p @ flat
    var_w = float(((flat - mean) ** 2 * p[:, None]).sum(axis=0).mean())
    print(json.dumps({
        "times": times, "method": w.attrs["method"], "status": w.attrs["solver_status"],
        "ksd_uniform": float(w.attrs["ksd_uniform"]),
        "ksd_weighted": float(w.attrs["ksd_weighted"]),
        "ksd_iid": float(w.attrs["ksd_iid"]),
        "rel_gap": float(w.attrs["relative_duality_gap"]),
        "var_uniform": float(flat.var(axis=0).mean()), "var_weighted": var_w,
    }))
    """
)


def run_case(n, d, method, piqp, repeats, timeout):
    args = {"n": n, "d": d, "method": method, "piqp": piqp, "repeats": repeats}
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over the {timeout:.0f} s limit"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:160]}
    return json.loads(lines[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, nargs="+", default=[1, 2, 3, 10, 50])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per case below N = 10^4 (one run from 10^4 on)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--piqp", action="store_true",
                        help="also time method='dense' (piqp) where it fits (N <= 4000)")
    args = parser.parse_args(argv)
    print(f"{'d':>3} {'N':>7} {'install':>8} {'method':>12} {'median s':>9} "
          f"{'KSD unif.':>10} {'KSD weighted':>12} {'KSD iid':>9} {'rel. gap':>9} {'var unif.':>9} "
          f"{'var wtd.':>9}  status")
    for d in args.d:
        for n in args.sizes:
            repeats = args.repeats if n < 10_000 else 1
            cases = [("default", "auto", False)]
            if args.piqp and n <= 4000:
                cases.append(("piqp", "dense", True))
            for install, method, piqp in cases:
                result = run_case(n, d, method, piqp, repeats, args.timeout)
                if "error" in result:
                    print(f"{d:>3} {n:>7} {install:>8} {method:>12}  failed: {result['error']}",
                          flush=True)
                    continue
                print(f"{d:>3} {n:>7} {install:>8} {result['method']:>12} "
                      f"{statistics.median(result['times']):>9.2f} "
                      f"{result['ksd_uniform']:>10.4g} {result['ksd_weighted']:>12.4g} "
                      f"{result['ksd_iid']:>9.3g} "
                      f"{result['rel_gap']:>9.1e} {result['var_uniform']:>9.4f} "
                      f"{result['var_weighted']:>9.4f}  {result['status']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
