"""Methods built on the Stein kernel's products (no xarray here).

- ``weights``: KSD-optimal weights' solvers, their certificate and memory checks;
- ``active_set``: the exact active-set solver of the weights' simplex QP;
- ``thinning``: greedy (and regularised) Stein thinning's selection;
- ``variational``: the SVGD iteration (AdaGrad steps, median bandwidth);
- ``estimation``: minimum-KSD estimation's objective, gradient and solvers.
"""
