"""Many parallel JAX chains given with only ``log_density=``: reading, scoring, testing.

A BlackJAX MALA run of 1000 chains x 60 draws (d = 10, N(0, diag(s^2)), s from 0.5 to 2,
step 0.2, chains vmapped inside lax.scan: a (draw, chain, 10) state history) is passed
as blackjax returns it, with ``sample_dims=("draw", "chain")`` and the log density only
(issue 29). Measured:

1. Reading and scoring (``read_input(...).with_scores()``: the positions read and
   labelled, ``jax.jit(jax.vmap(jax.grad))`` on chunks): time and peak memory of the
   1000 x 60 state history against the same 60,000 draws given as one chain (1 x
   60,000), each in a fresh process (peak RSS from ``resource``; the MALA run is done
   once, before, and its positions loaded from a .npy file).
2. ``diagnose`` against ``ksd_test`` (its defaults) on the same draws and input, in one
   process after a warm-up, alternating; medians of ``--repeats`` runs each.

Run:  python benchmarks/bench_many_chains_jax.py [--repeats 3] [--skip-read]
The machines are shared: compare the columns of one run, not across runs.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SCALES = np.linspace(0.5, 2.0, 10)
N_CHAIN, N_DRAW, D = 1000, 60, 10


def mala_positions(path):
    """Run MALA (float64) and save the (draw, chain, 10) positions to ``path``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import blackjax
    import jax.numpy as jnp

    scales = jnp.asarray(SCALES)

    def log_density(position):
        return -0.5 * jnp.sum((position["x"] / scales) ** 2)

    mala = blackjax.mala(log_density, step_size=0.2)
    keys = jax.random.split(jax.random.PRNGKey(0), N_CHAIN)
    init = jax.vmap(lambda k: mala.init({"x": jax.random.normal(k, (D,)) * scales}))(keys)
    step = jax.vmap(mala.step)

    def one_step(state, key):
        state, _ = step(jax.random.split(key, N_CHAIN), state)
        return state, state.position

    _, positions = jax.lax.scan(one_step, init, jax.random.split(jax.random.PRNGKey(1), N_DRAW))
    np.save(path, np.asarray(positions["x"]))


READ_SCRIPT = """
import json, resource, sys, time
import numpy as np
import jax.numpy as jnp
from steindiag.inputs import read_input

x = np.load(sys.argv[1])                       # (draw, chain, 10)
layout = sys.argv[2]
scales = jnp.asarray(np.linspace(0.5, 2.0, 10))

def log_density(position):
    return -0.5 * jnp.sum((position["x"] / scales) ** 2)

if layout == "chains":
    data, dims = {"x": x}, ("draw", "chain")
else:                                          # the same draws as one long chain
    data, dims = {"x": np.swapaxes(x, 0, 1).reshape(1, -1, x.shape[2])}, ("chain", "draw")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
prepared = read_input(data, log_density=log_density, sample_dims=dims).with_scores()
seconds = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_mib": after / 1024,
                  "added_mib": (after - before) / 1024, "shape": prepared.draws.shape}))
"""


def read_and_score(path, layout, repeats):
    rows = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", READ_SCRIPT, str(path), layout],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def tests(path, repeats):
    import warnings

    import jax.numpy as jnp

    import steindiag

    x = np.load(path)
    scales = jnp.asarray(SCALES)

    def log_density(position):
        return -0.5 * jnp.sum((position["x"] / scales) ** 2)

    options = {"log_density": log_density, "sample_dims": ("draw", "chain")}
    calls = {
        "diagnose": lambda seed: steindiag.diagnose({"x": x}, rng=seed, **options),
        "ksd_test": lambda seed: steindiag.ksd_test({"x": x}, rng=seed, **options),
    }
    times = {name: [] for name in calls}
    results = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # 60 draws: ksd_test says they are short
        # Warm-up (numba and jit compilation) on the first 50 chains.
        steindiag.diagnose({"x": x[:, :50]}, rng=0, **options)
        steindiag.ksd_test({"x": x[:, :50]}, rng=0, **options)
        for seed in range(1, repeats + 1):
            for name, call in calls.items():
                start = time.perf_counter()
                results[name] = call(seed)
                times[name].append(time.perf_counter() - start)
                print(f"  run {seed}: {name} {times[name][-1]:.1f} s", flush=True)
    return times, results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-read", action="store_true",
                        help="time diagnose and ksd_test only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "positions.npy"
        mala_positions(path)
        print(f"MALA: {N_CHAIN} chains x {N_DRAW} draws, d = {D}; medians of "
              f"{args.repeats} runs\n")
        layouts = () if args.skip_read else (
            ("chains", "1000 x 60 state history, sample_dims=('draw', 'chain')"),
            ("one", "1 x 60000 (same draws, one chain)"))
        print("| input | read + score | peak RSS | RSS added by the call |")
        print("|---|---|---|---|")
        for layout, label in layouts:
            rows = read_and_score(path, layout, args.repeats)
            print(f"| {label} | {np.median([r['seconds'] for r in rows]):.2f} s | "
                  f"{np.median([r['peak_mib'] for r in rows]):.0f} MiB | "
                  f"{np.median([r['added_mib'] for r in rows]):.0f} MiB |")
        times, results = tests(path, args.repeats)
        print("\n| call | median | runs |")
        print("|---|---|---|")
        for name, values in times.items():
            print(f"| {name} | {np.median(values):.1f} s | "
                  f"{', '.join(f'{v:.1f}' for v in values)} s |")
        ratio = np.median(times["diagnose"]) / np.median(times["ksd_test"])
        print(f"\ndiagnose / ksd_test: {ratio:.2f}")
        print(f"diagnose verdict: {results['diagnose']['verdict_pooled'].values}; "
              f"ksd_test pooled p: {float(results['ksd_test']['pvalue_pooled']):.3g}")


if __name__ == "__main__":
    main()
