"""Where the Stein-kernel passes run: this process (default) or a cluster.

``resolve_backend(client)`` turns the public ``client=`` argument into the ``backend``
of ``steindiag.engine.local.stein_row_sums`` (None: this process's Numba threads). Cluster
engines live in submodules that are imported only when asked for, so that their
optional dependencies are never needed otherwise: ``steindiag.engine.dask`` (extra
``steindiag[dask]``).
"""

__all__ = ["resolve_backend"]


def resolve_backend(client):
    """None for ``client=None``; otherwise a validated backend for that client.

    Raises ImportError (naming the extra to install) when dask.distributed is missing,
    TypeError when ``client`` is not a ``distributed.Client``, ValueError when it is
    closed or its cluster has no workers.
    """
    if client is None:
        return None
    from steindiag.engine.dask import DaskBackend

    return DaskBackend.from_client(client)
