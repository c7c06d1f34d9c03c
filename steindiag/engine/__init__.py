"""Where the Stein-kernel passes run: this process (default) or a cluster.

``steindiag.engine.dask.resolve_backend(client)`` turns the public ``client=`` argument
into the ``backend`` of ``steindiag.engine.local.stein_row_sums`` (None: this process's
Numba threads). A cluster engine imports its optional dependency only when a client is
given: ``steindiag.engine.dask`` (extra ``steindiag[dask]``).
"""
