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
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np

__all__ = ["on_threads"]

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
    apply). With one thread, or when called from one of the pool's own threads, the worker
    runs in the calling thread with step 1.
    """
    step = max(1, int(nb.get_num_threads()))
    if step == 1 or threading.current_thread().name.startswith("steindiag"):
        worker(*args, np.int64(0), np.int64(1))
        return
    pool = _executor(step)
    futures = [pool.submit(worker, *args, np.int64(first), np.int64(step))
               for first in range(step)]
    for future in futures:
        future.result()
