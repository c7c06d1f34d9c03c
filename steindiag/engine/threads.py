"""Run a compiled pass on Numba's threads without ``parallel=True``.

The passes of the engine are split into tasks that a compiled worker runs with the GIL
released (``nogil=True``); ``on_threads`` calls the worker once per thread, each taking
tasks first, first + step, ... (a static round-robin partition, as a parallel Numba loop
would do).

Why not ``parallel=True``: Numba compiles a parallel function's loop body into a separate
library and links it, with everything it calls, into the caller again, and every link is
optimised and turned into machine code anew. For the engine's passes that was most of a
first call's compile time (``ksd``: about 6 of 9 CPU seconds); threads over one compiled
function pay it once. The passes run the same arithmetic in the same order, so results do
not change.
"""

import threading
from concurrent.futures import ThreadPoolExecutor, wait

import numba as nb
import numpy as np

__all__ = ["on_threads", "single_threaded_blas"]

_lock = threading.Lock()
_pool = None
_pool_size = 0


def _executor(size):
    """A process-wide pool of ``size`` threads (made again when the size changes)."""
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != size:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="steindiag")
            _pool_size = size
        return _pool


def on_threads(worker, *args):
    """Run ``worker(*args, first, step)`` for first = 0 .. step - 1, one call per thread.

    ``step`` is Numba's thread count (``numba.set_num_threads`` and ``NUMBA_NUM_THREADS``
    apply). The calling thread runs first = 0 and the pool's step - 1 threads the others,
    so a pass uses step threads in all (not step + 1, of which the caller would only wait:
    on 2 cores that extra thread cost a few ms on some 10 ms calls). Every worker has
    returned when this returns or raises. With one thread, or when called from one of the
    pool's own threads, the worker runs in the calling thread with step 1.
    """
    step = max(1, int(nb.get_num_threads()))
    if step == 1 or threading.current_thread().name.startswith("steindiag"):
        worker(*args, np.int64(0), np.int64(1))
        return
    pool = _executor(step - 1)
    futures = [pool.submit(worker, *args, np.int64(first), np.int64(step))
               for first in range(1, step)]
    try:
        worker(*args, np.int64(0), np.int64(step))
    finally:
        _wait_all(futures)
    for future in futures:
        future.result()


def _wait_all(futures):
    """Wait for every future, even through Ctrl-C (no worker is left writing to arrays)."""
    interrupt = None
    while True:
        try:
            wait(futures)
            break
        except KeyboardInterrupt as error:
            interrupt = error
    if interrupt is not None:
        raise interrupt


_controller = None


def single_threaded_blas():
    """A context manager that runs the loaded BLAS libraries on one thread.

    The passes call BLAS from each of their own threads, where BLAS's threads would only
    compete for the same cores. ``threadpoolctl.threadpool_limits`` finds the loaded
    libraries anew on every call (about 1.5 ms, read from /proc: 0.3 s of a 100-step SVGD
    run); one controller, made on first use, finds them once. Libraries loaded after that
    are not limited, which costs speed only (SciPy's BLAS, which Numba's ``np.dot``
    calls, is loaded before the controller is made).
    """
    global _controller
    with _lock:
        if _controller is None:
            import scipy.linalg.cython_blas  # noqa: F401  (load it before listing)
            from threadpoolctl import ThreadpoolController

            _controller = ThreadpoolController()
    return _controller.limit(limits=1, user_api="blas")
