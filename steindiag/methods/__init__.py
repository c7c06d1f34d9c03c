"""Methods built on the Stein kernel's products, at the array level (no xarray here).

- ``ksd``: KSD of prepared draws (the engine's one pass, or Nyström);
- ``nystrom``: the ``estimator=`` option and the Nyström branch;
- ``ksd_test``: the KSD test's bootstrap plan and statistics;
- ``mmd``: MMD between chains or samples, and its permutation tests;
- ``evidence``: the evidence ``diagnose`` gathers for its verdict;
- ``search``: the missing-mass search run from a score source;
- ``missing_mass``: the search for unvisited mass (its options, its steps in turn), with
  ``missing_mass_modes`` (log p at batches of points, starts, L-BFGS, modes),
  ``missing_mass_visits`` (visits, short chains, p-value), ``missing_mass_perturbed``
  (the perturbed KSD test) and ``missing_mass_result`` (the result, its summary);
- ``corrections``: the checks behind the corrections' warnings;
- ``weights``: KSD-optimal weights' solvers, their certificate and memory checks;
- ``active_set``: the exact active-set solver of the weights' simplex QP;
- ``thinning``: greedy (and regularised) Stein thinning's selection;
- ``variational``: the SVGD iteration (AdaGrad steps, median bandwidth);
- ``control_variates``: Stein control variates' cross-fitted regressions;
- ``cv_estimate``: control-variate estimates of posterior means and sds;
- ``estimation``: minimum-KSD estimation's objective, gradient and solvers.
"""
