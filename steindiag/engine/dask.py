"""The engine's passes on a dask.distributed cluster (optional extra ``steindiag[dask]``).

Data flow, for one pass of ``steindiag.engine.local`` (row sums, fused or BLAS path, and the
same-chain pass for many chains) or of the test's quadratic forms:

    client: the local engine's preparation (kernel coordinates, centring and BLAS
        panels, time-major layout for many chains), unchanged
      -> ``client.scatter(..., broadcast=True)``: one copy of the prepared arrays on
         every worker, sent once per pass
      -> one task per block of rows (row draws, row tiles or chains) of about equal
         work: the same Numba kernel as the local engine, on that block against all
         earlier columns, single-threaded (Numba and BLAS), returning the block's
         O(rows) sums
      -> client: the O(N) row sums (or the test's per-tile forms) put back in place.

Each row's sum is computed by one task, in the same order as in the local engine, so the
numbers are the local engine's to rounding (measured: equal, or a few units in the last
place where a SIMD loop meets its arrays at another alignment). No N x N array is formed
anywhere. Memory per worker: one copy of the prepared arrays (2-3
N d doubles for the row sums; for ``ksd_test`` also the (N, 1 + B) bootstrap weights),
plus O(N) per running task.

``distributed`` is imported only when a client is given; workers import this module to
run the tasks (module-level functions, pickled by reference).
"""

import threading
from dataclasses import dataclass

import numpy as np

from steindiag.engine import local as _engine
from steindiag.engine import row_sums as _kernels
from steindiag.engine.multi_products import stein_quadratic_forms
from steindiag.engine.progress import make_progress
from steindiag.engine.threads import single_threaded_blas

__all__ = ["DaskBackend", "resolve_backend"]

# Work per task, in flops (8 d + 20 per pair): about 1-5 s on one core, so that progress
# and Ctrl-C are honoured between tasks and the scheduler's overhead (about 1 ms a task)
# stays negligible.
_TASK_FLOPS = 1e10
# At least this many tasks per worker thread, so that the last tasks balance the load.
_TASKS_PER_THREAD = 4

_INSTALL = "pip install 'steindiag[dask]'"

# Numba's "workqueue" threading layer must not be entered by two threads at once (a
# worker with several threads); the others ("omp", "tbb") may.
_LAUNCH_LOCK = threading.Lock()
# Byte alignment required of the arrays a worker receives (that of NumPy's allocations).
_ALIGNMENT = 16


def _distributed():
    try:
        import distributed
    except ImportError as err:
        raise ImportError(
            "client= runs the Stein-kernel passes on a dask.distributed cluster, which needs "
            f"the optional dependency dask[distributed]: {_INSTALL}."
        ) from err
    return distributed


@dataclass(kw_only=True)
class Operands:
    """What every worker holds for one pass (scattered once, broadcast to all workers).

    Attributes
    ----------
    kernel : str
        Which Numba kernel the tasks run: ``"fused"``, ``"gemm"``, ``"same_chain"`` or
        ``"quadratic"``.
    arrays : dict of str to ndarray
        Its array operands: ``draws_t``, ``scores_t`` (chain, d, draw) for the fused
        loops; ``panels``, ``norm_q``, ``norm_a2``, ``ys`` (``engine.local.GemmPanels``) for
        the BLAS path; and for the quadratic forms also ``weights`` (N, B) and the row
        tiles ``tile_start``, ``tile_stop``, ``tile_chain_start``.
    a : ndarray (d,)
        Diagonal of A in kernel coordinates.
    isotropic : bool
    trace_a : float
    kind : tuple
        The base kernel's Numba token (``BaseKernel.numba_kind``).
    params : ndarray
        The base kernel's parameters for Numba (``BaseKernel.numba_params``).
    options : dict
        Integers and flags of the kernel: ``n_draw``, ``tile``, ``scale_q`` (BLAS path),
        ``cross`` (quadratic forms).
    """

    kernel: str
    arrays: dict
    a: np.ndarray
    isotropic: bool
    trace_a: float
    kind: tuple
    params: np.ndarray
    options: dict

    def __reduce__(self):
        # Rebuilt on each worker through ``_aligned_operands`` (see there).
        return _aligned_operands, (self.kernel, self.arrays, self.a, self.isotropic,
                                   self.trace_a, self.kind, self.params, self.options)


def _aligned(array):
    """``array`` itself if aligned and writeable, else an aligned, writeable copy."""
    if array.ctypes.data % _ALIGNMENT or not array.flags.writeable:
        return np.array(array, copy=True)
    return array


def _aligned_operands(kernel, arrays, a, isotropic, trace_a, kind, params, options):
    """Operands with every array aligned: runs once per worker, when the scatter arrives.

    distributed may hand over an array at any byte offset of its network buffer (seen:
    4 bytes off an 8-byte boundary, read-only), which makes the kernels' SIMD loads and
    BLAS products several times slower (measured 7 s vs 1.1 s for one block at N = 2e4,
    d = 10) and gives Numba a new signature to compile. Costs one copy of such arrays.
    """
    return Operands(kernel=kernel, arrays={name: _aligned(value) for name, value in arrays.items()},
                    a=_aligned(a), isotropic=isotropic, trace_a=trace_a, kind=kind,
                    params=_aligned(params),
                    options=options)


def _kernel_call(ops, lo, hi):
    """Run ``ops.kernel`` on rows lo..hi-1 (its units) and return that block's outputs.

    The one place this module calls Numba kernels: a change of a kernel's signature is
    a change here only. Outputs span all rows (the kernels index them absolutely) but
    only the block's are written and returned; untouched pages of ``np.empty`` cost no
    memory.
    """
    arr, opts = ops.arrays, ops.options
    if ops.kernel == "fused":
        shape = arr["draws_t"].shape[0], arr["draws_t"].shape[2]
        row_same, row_all = np.empty(shape), np.empty(shape)
        _kernels.lower_row_sums(arr["draws_t"], arr["scores_t"], ops.a, ops.isotropic, ops.kind,
                                ops.params, ops.trace_a, row_same, row_all, lo, hi)
        return row_same[:, lo:hi].copy(), row_all[:, lo:hi].copy()
    if ops.kernel == "gemm":
        tile = opts["tile"]
        shape = arr["panels"].shape[2], arr["panels"].shape[0] * tile
        row_same, row_all = np.empty(shape), np.empty(shape)
        _kernels.lower_row_sums_gemm(arr["panels"], arr["norm_q"], arr["norm_a2"], arr["ys"],
                                     opts["n_draw"], ops.isotropic, opts["scale_q"], ops.kind,
                                     ops.params, ops.trace_a, row_same, row_all, lo, hi)
        return row_same[:, lo * tile : hi * tile].copy(), row_all[:, lo * tile : hi * tile].copy()
    if ops.kernel == "same_chain":
        row_same = np.empty((arr["draws_t"].shape[0], arr["draws_t"].shape[2]))
        _kernels.same_chain_row_sums(arr["draws_t"], arr["scores_t"], ops.a, ops.isotropic,
                                     ops.kind, ops.params, ops.trace_a, row_same, lo, hi)
        return row_same[lo:hi].copy()
    if ops.kernel == "quadratic":
        out = np.empty((hi - lo, 2, arr["weights"].shape[1]))
        stein_quadratic_forms(arr["draws_t"], arr["scores_t"], ops.a, ops.isotropic, ops.kind,
                              ops.params, ops.trace_a, arr["weights"], arr["tile_start"][lo:hi],
                              arr["tile_stop"][lo:hi], arr["tile_chain_start"][lo:hi],
                              opts["cross"], out)
        return out
    raise ValueError(f"unknown kernel {ops.kernel!r}")


def _needs_launch_lock():
    import numba

    try:
        return numba.threading_layer() == "workqueue"
    except ValueError:  # no parallel kernel has run in this process yet
        return True


def single_threaded(function, *args):
    """On a worker: ``function(*args)`` with Numba and BLAS limited to the task's thread."""
    import numba

    previous = numba.get_num_threads()
    lock = _LAUNCH_LOCK if _needs_launch_lock() else None
    if lock is not None:
        lock.acquire()
    try:
        numba.set_num_threads(1)
        with single_threaded_blas():
            return function(*args)
    finally:
        numba.set_num_threads(previous)
        if lock is not None:
            lock.release()


def _block_task(ops, lo, hi):
    """On a worker: one block, with Numba and BLAS limited to the task's thread."""
    return single_threaded(_kernel_call, ops, lo, hi)


def equal_work_blocks(costs, n_blocks):
    """Bounds (n + 1 at most) of contiguous blocks of units with about equal total cost."""
    cumulative = np.concatenate([[0.0], np.cumsum(costs, dtype=np.float64)])
    targets = np.linspace(0.0, cumulative[-1], n_blocks + 1)
    bounds = np.searchsorted(cumulative, targets, side="left")
    bounds[0], bounds[-1] = 0, len(costs)
    return np.unique(bounds)


@dataclass(kw_only=True)
class DaskBackend:
    """Runs the engine's passes on the workers of a ``distributed.Client``.

    The ``backend`` of ``steindiag.engine.local.stein_row_sums``: ``methods`` and
    ``same_chain_sums`` have the local functions' signatures and results. Build it with
    ``DaskBackend.from_client`` (which validates the client).

    Attributes
    ----------
    client : distributed.Client
    """

    client: object

    @classmethod
    def from_client(cls, client):
        """Validate ``client``: a running ``distributed.Client`` whose cluster has workers."""
        distributed = _distributed()
        if not isinstance(client, distributed.Client):
            raise TypeError(
                "client must be None or a dask.distributed.Client (for example "
                "distributed.Client(n_workers=2, threads_per_worker=1), or "
                f"distributed.get_client() inside a dask context); got {type(client).__name__}."
            )
        if client.status != "running":
            raise ValueError(
                f"client must be a running dask.distributed.Client; got status {client.status!r} "
                "(closed?)."
            )
        if not client.nthreads():
            raise ValueError(
                "client's cluster has no workers: start some (cluster.scale(n)) or wait for "
                "them (client.wait_for_workers(n)) before calling."
            )
        return cls(client=client)

    @property
    def methods(self):
        return {"fused": self.row_sums_fused, "gemm": self.row_sums_gemm}

    def _n_blocks(self, n_units, total_flops):
        n_threads = sum(self.client.nthreads().values())
        wanted = max(_TASKS_PER_THREAD * n_threads, int(np.ceil(total_flops / _TASK_FLOPS)))
        return int(max(1, min(n_units, wanted)))

    def _run(self, ops, costs, flops_per_unit_cost, place, progress):
        """Scatter ``ops``, run one task per block of about equal cost, ``place`` each result.

        ``costs`` (units,) are the pairs of each unit; ``place(lo, hi, result)`` stores a
        block's result on the client. Remaining tasks are cancelled and the scattered
        arrays released on error or Ctrl-C.
        """
        distributed = _distributed()
        costs = np.asarray(costs, dtype=np.float64)
        total = float(costs.sum())
        bounds = equal_work_blocks(costs, self._n_blocks(costs.size,
                                                         total * flops_per_unit_cost))
        bar = make_progress(progress, total, total * flops_per_unit_cost
                            / _engine._CONSERVATIVE_FLOPS)
        ops_future = self.client.scatter(ops, broadcast=True, hash=False)
        futures = {}
        try:
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                future = self.client.submit(_block_task, ops_future, int(lo), int(hi),
                                            pure=False)
                futures[future] = (int(lo), int(hi))
            for future, result in distributed.as_completed(list(futures), with_results=True):
                lo, hi = futures[future]
                place(lo, hi, result)
                if bar is not None:
                    bar.update(float(costs[lo:hi].sum()))
        finally:
            self.client.cancel(list(futures))
            ops_future.release()
            if bar is not None:
                bar.close()

    @staticmethod
    def _operands(kernel, arrays, pre, base, **options):
        return Operands(kernel=kernel, arrays=arrays, a=np.asarray(pre.a, dtype=np.float64),
                        isotropic=bool(pre.isotropic), trace_a=float(pre.trace_a),
                        kind=base.numba_kind,
                        params=np.asarray(base.numba_params, dtype=np.float64),
                        options=options)

    def row_sums_fused(self, draws, scores, pre, base, progress=None):
        """``engine.local._row_sums_fused`` on the workers: blocks of draw indices."""
        n_chain, n_draw, d = draws.shape
        draws_t, scores_t = _engine._transposed(pre, draws, scores)
        ops = self._operands("fused", {"draws_t": draws_t, "scores_t": scores_t}, pre, base)
        del draws_t, scores_t
        row_same = np.empty((n_chain, n_draw))
        row_all = np.empty((n_chain, n_draw))

        def place(lo, hi, result):
            row_same[:, lo:hi], row_all[:, lo:hi] = result

        # Row t (every chain) has n_chain^2 t + n_chain (n_chain - 1) / 2 earlier pairs.
        t = np.arange(n_draw, dtype=np.float64)
        costs = n_chain**2 * t + n_chain * (n_chain - 1) / 2
        self._run(ops, costs, 8 * d + 20, place, progress)
        return row_same, row_all

    def row_sums_gemm(self, draws, scores, pre, base, progress=None, tile_rows=None):
        """``engine.local._row_sums_gemm`` on the workers: blocks of row tiles."""
        n_chain, n_draw, d = draws.shape
        layout = _engine.gemm_panels(draws, scores, pre, tile_rows)
        tile, n_tiles = layout.tile, layout.n_tiles
        ops = self._operands(
            "gemm",
            {"panels": layout.panels, "norm_q": layout.norm_q, "norm_a2": layout.norm_a2,
             "ys": layout.ys},
            pre, base, n_draw=n_draw, tile=tile, scale_q=layout.scale_q,
        )
        del layout
        row_same = np.empty((n_chain, n_tiles * tile))
        row_all = np.empty((n_chain, n_tiles * tile))

        def place(lo, hi, result):
            row_same[:, lo * tile : hi * tile], row_all[:, lo * tile : hi * tile] = result

        # Row tile i: tile rows of every chain against (i + 1) column tiles.
        costs = (np.arange(n_tiles, dtype=np.float64) + 1.0) * (n_chain * tile) ** 2
        self._run(ops, costs, 8 * d + 20, place, progress)
        return row_same[:, :n_draw], row_all[:, :n_draw]

    def same_chain_sums(self, draws, scores, pre, base):
        """``engine.local._same_chain_sums`` on the workers: blocks of chains."""
        n_chain, n_draw, d = draws.shape
        draws_t, scores_t = _engine._transposed(pre, draws, scores)
        ops = self._operands("same_chain", {"draws_t": draws_t, "scores_t": scores_t}, pre,
                             base)
        del draws_t, scores_t
        row_same = np.empty((n_chain, n_draw))

        def place(lo, hi, result):
            row_same[lo:hi] = result

        costs = np.full(n_chain, n_draw * (n_draw - 1) / 2)
        self._run(ops, costs, 8 * d + 20, place, progress=False)
        return row_same

    def quadratic_form_tiles(self, draws_t, scores_t, pre, base, weights, tile_start,
                             tile_stop, tile_chain_start, cross):
        """``engine.multi_products.stein_quadratic_forms`` on the workers: blocks of row tiles.

        Same arguments as the kernel (draws and scores (1, d, N) in kernel coordinates,
        weights (N, B)); returns its ``out`` (n_tiles, 2, B).
        """
        n_tiles = tile_start.shape[0]
        n_rhs = weights.shape[1]
        ops = self._operands(
            "quadratic",
            {"draws_t": draws_t, "scores_t": scores_t, "weights": weights,
             "tile_start": tile_start, "tile_stop": tile_stop,
             "tile_chain_start": tile_chain_start},
            pre, base, cross=bool(cross),
        )
        out = np.empty((n_tiles, 2, n_rhs))

        def place(lo, hi, result):
            out[lo:hi] = result

        # Tile t: its rows against the earlier points of its chain, itself and, if
        # cross, all points of earlier chains.
        rows = (tile_stop - tile_start).astype(np.float64)
        columns = tile_stop - (0 if cross else tile_chain_start)
        costs = rows * columns
        d = draws_t.shape[1]
        self._run(ops, costs, 8 * d + 20 + 2 * n_rhs, place, progress=False)
        return out


def resolve_backend(client):
    """None for ``client=None``; otherwise a validated backend for that client.

    Raises ImportError (naming the extra to install) when dask.distributed is missing,
    TypeError when ``client`` is not a ``distributed.Client``, ValueError when it is
    closed or its cluster has no workers.
    """
    if client is None:
        return None
    return DaskBackend.from_client(client)
