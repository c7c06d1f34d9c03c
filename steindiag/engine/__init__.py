"""Where the Stein-kernel passes run: this process (default) or a cluster.

``steindiag.engine.dask.resolve_backend(client)`` turns the public ``client=`` argument
into the ``backend`` of ``steindiag.engine.local.stein_row_sums`` (None: this process's
Numba threads). A cluster engine imports its optional dependency only when a client is
given: ``steindiag.engine.dask`` (extra ``steindiag[dask]``). Nothing here imports xarray
or PyMC, and the Numba kernels validate no input.

- ``local``: Stein-kernel row sums of (chain, draw, d) arrays, fused or BLAS (``gemm``) path;
- ``row_sums``: the Numba row-sum passes behind ``local`` (and the Stein kernel's diagonal);
- ``products``: Numba products with the Stein kernel matrix (K_p w, rows, greedy thinning);
- ``multi_products``: Numba quadratic forms with many weight vectors, base-kernel block sums;
- ``forms``: quadratic forms and K_p W for many right-hand sides, here or on a cluster;
- ``permutations``: Numba within-group sums under relabellings (the test of agreement);
- ``nystrom``: Nystrom features of the Stein kernel at landmarks (``ksd_test``'s estimator);
- ``nystrom_base``: Nystrom through the base kernel's landmarks (``ksd``, ``ksd_path``);
- ``svgd``: Numba kernel sums with a vector-valued result (the SVGD direction);
- ``threads``: a compiled pass run on Numba's threads, and BLAS held to one thread;
- ``progress``: progress bars and Ctrl-C between the chunks of a long pass;
- ``memory``: the memory available to this process, and refusals of larger requests;
- ``dask``: the same passes as tasks on a dask.distributed cluster (``client=``).
"""
