"""Child programs for the Ctrl-C checks (tests/test_progress.py, benchmarks/bench_progress.py).

Each case is a program run in a child process: it warms the compiled code on a small
problem (so that nothing is compiled during the timed call: a SIGINT that lands in
Numba's compiler is swallowed there), prints ``STARTED`` from the first long product of
the real call, and prints ``INTERRUPTED`` (exit code 130) when the KeyboardInterrupt
reaches it, or ``FINISHED`` if the call ran to its end. It handles SIGINT as a
program started from a terminal does, whatever its parent does. ``quiet`` passes
``progress=False`` only where the function has that argument, so that the benchmark can
also run a tree from before it.
"""

CHILD = """
import inspect, signal, sys, time
# A program started as a background job of a non-interactive shell (as CI's script starts
# a test suite with "&") inherits SIGINT ignored, and Python then installs no
# KeyboardInterrupt handler: Ctrl-C would be ignored for reasons of the parent's, not ours.
# Restore what a terminal gives.
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
import steindiag
rng = np.random.default_rng(0)
def quiet(function):  # progress=False where the tree has the argument (not before)
    return {{"progress": False}} if "progress" in inspect.signature(function).parameters else {{}}
{setup}
def marked(original):
    def product(*args, **kwargs):
        print("STARTED", flush=True)
        return original(*args, **kwargs)
    return product
{patch}
try:
    {call}
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(130)
print("FINISHED", flush=True)
"""

CASES = {
    # N = 40,000, d = 10: one product K_p w is 8e8 pairs (seconds).
    "stein_weights": dict(
        label="stein_weights (N = 40,000, d = 10: K_p w)",
        setup=("x = 1.15 * rng.standard_normal((4, 10_000, 10))\n"
               "small = x[:, :60]\nsteindiag.stein_weights(small, score=-small)"),
        patch=("import steindiag.engine.products as products\n"
               "products.kernel_matvec = marked(products.kernel_matvec)"),
        call="steindiag.stein_weights(x, score=-x, **quiet(steindiag.stein_weights))"),
    # The exact active set, matrix-free (N = 4000, d = 3: about 20 s in one compiled call,
    # run in a worker thread that checks a stop flag between blocks of points).
    "stein_weights_active_set": dict(
        label="stein_weights, active set (N = 4000, d = 3: the compiled solver)",
        setup=("x = 1.15 * rng.standard_normal((2, 2000, 3))\n"
               "small = x[:, :50]\nsteindiag.stein_weights(small, score=-small, "
               "method='active-set')"),
        patch=("import steindiag.methods.weights as module\n"
               "module.lawson_hanson = marked(module.lawson_hanson)"),
        call=("steindiag.stein_weights(x, score=-x, method='active-set', "
              "**quiet(steindiag.stein_weights))")),
    # 4 x 3000 draws, 1000 replicates: the bootstrap pass is about 1.5e11 flops.
    "ksd_test": dict(
        label="ksd_test (4 x 3000, d = 5, B = 1000: bootstrap pass)",
        setup=("x = 1.15 * rng.standard_normal((4, 3000, 5))\n"
               "small = x[:, :60]\nsteindiag.ksd_test(small, score=-small, rng=1, "
               "n_bootstrap=20)"),
        patch=("import steindiag.methods.ksd_test as module\n"
               "module.quadratic_forms = marked(module.quadratic_forms)"),
        call="steindiag.ksd_test(x, score=-x, rng=1, **quiet(steindiag.ksd_test))"),
    # 4 x 15,000 draws: the kernel sums are 1.8e9 pairs.
    "mmd": dict(
        label="mmd (4 x 15,000, d = 5: kernel sums)",
        setup=("x = rng.standard_normal((4, 15_000, 5))\n"
               "small = x[:, :60]\nsteindiag.mmd(small, n_permutations=10, rng=1)"),
        patch=("import steindiag.methods.mmd as module\n"
               "module.base_kernel_unit_sums = marked(module.base_kernel_unit_sums)"),
        call="steindiag.mmd(x, n_permutations=100, rng=1, **quiet(steindiag.mmd))"),
    "stein_thin": dict(
        label="stein_thin (N = 100,000, d = 10, 3000 points: greedy steps)",
        setup=("x = rng.standard_normal((4, 25_000, 10))\n"
               "small = x[:, :60]\nsteindiag.stein_thin(small, score=-small, n_selected=5, "
               "mode_search=False)"),
        patch=("import steindiag.methods.thinning as module\n"
               "module.products.greedy_thinning = marked(module.products.greedy_thinning)"),
        call=("steindiag.stein_thin(x, score=-x, n_selected=3000, mode_search=False, "
              "**quiet(steindiag.stein_thin))")),
    "diagnose": dict(
        label="diagnose (4 x 3000, d = 5: KSD tests first)",
        setup=("x = 1.15 * rng.standard_normal((4, 3000, 5))\n"
               "small = x[:, :200]\nsteindiag.diagnose(small, score=-small, rng=1, "
               "mode_search=False)"),
        patch=("import steindiag.methods.ksd_test as module\n"
               "module.quadratic_forms = marked(module.quadratic_forms)"),
        call=("steindiag.diagnose(x, score=-x, rng=1, mode_search=False, "
              "**quiet(steindiag.diagnose))")),
}


def child_program(name):
    """The program of case ``name``, ready for ``python -c``."""
    case = CASES[name]
    return CHILD.format(setup=case["setup"], patch=case["patch"], call=case["call"])
