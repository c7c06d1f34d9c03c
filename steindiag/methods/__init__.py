"""Array level: the methods, on prepared draws and scores (chain, draw, d).

NumPy in, NumPy or small dataclasses out. Nothing here reads input or labels results,
and nothing imports xarray, pandas, PyMC, ArviZ, JAX or matplotlib (``.importlinter``).

- ``ksd``: KSD of prepared draws from the engine's one pass or the Nystrom estimator;
- ``nystrom``: the ``estimator=`` option's checks and the Nystrom branch of the KSD passes;
- ``ksd_test``: the KSD test's bootstrap plan and its statistics, per chain and pooled;
- ``mmd``: MMD between chains or two samples, and its block-permutation tests;
- ``agreement``: the test that all chains agree, streamed for many blocks (O(N d + U^2));
- ``evidence``: ``diagnose``'s evidence: max-T KSD tests, the chains' agreement, stuck chains;
- ``missing_mass``: the search for probability mass the draws never visited, in steps:
  ``missing_mass_modes`` (the starts and their ascents), ``missing_mass_visits`` (were the
  modes found visited), ``missing_mass_perturbed`` (the widened draws' starts) and
  ``missing_mass_result`` (the result and its summary);
- ``search``: that search run from a score source, as ``diagnose`` and the corrections run it;
- ``corrections``: the checks behind ``CorrectionWarning`` (divergences, unvisited mass, KSD);
- ``weights``: the KSD weights QP's solvers (active set, Frank-Wolfe, piqp), one certificate;
- ``active_set``: the exact active-set solver of the weights QP (Lawson-Hanson, NNLS form);
- ``thinning``: greedy (and regularised) Stein thinning's selection;
- ``variational``: the SVGD iteration (AdaGrad steps, median bandwidth);
- ``control_variates``: Stein control variates' designs and cross-fitted regressions;
- ``cv_estimate``: control-variate means and sds: the estimators by name, ``"auto"``'s choice;
- ``estimation``: minimum-KSD estimation's objective, gradient and solvers.
"""
