"""Methods built on the Stein kernel's products, at the array level (no xarray here).

Modules: ``ksd`` (KSD of prepared draws), ``nystrom`` (the ``estimator=`` option and the
Nyström branch), ``ksd_test`` (the KSD test's bootstrap plan and statistics), ``mmd`` (MMD
between chains or samples, its permutation tests), ``evidence`` (what ``diagnose`` gathers
for its verdict), ``search`` (the missing-mass search run from a score source),
``missing_mass`` (the search for unvisited mass) and its steps ``missing_mass_modes``,
``missing_mass_visits``, ``missing_mass_perturbed`` and ``missing_mass_result``,
``corrections`` (the checks behind the corrections' warnings), ``weights`` (the KSD
weights' solvers, certificate and memory checks) and ``active_set`` (its exact solver),
``thinning`` (greedy and regularised Stein thinning's selection), ``variational`` (the
SVGD iteration), ``control_variates`` (Stein control variates' cross-fitted regressions)
and ``cv_estimate`` (their estimates of posterior means and sds), ``estimation``
(minimum-KSD estimation's objective, gradient and solvers).
"""
