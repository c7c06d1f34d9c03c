"""NumPy-only statistics on the engine's sums: no Numba, xarray or PyMC here.

- ``ksd``: V- and U-statistics, the i.i.d. floor and the running path from row sums;
- ``mmd``: MMD^2 and block-permutation p-values from kernel sums between blocks;
- ``bootstrap``: the KSD test's bootstrap weights (wild, i.i.d., multinomial) and p-values;
- ``autocorrelation``: integrated autocorrelation times for the bootstraps and tests;
- ``damping``: the window of the score-damped (diffusion) Stein operator;
- ``mcse``: Monte Carlo standard error of a mean, as ArviZ computes it;
- ``weighted``: weighted moments, quantiles, intervals and Kish ESS (``weighted_summary``);
- ``verdict``: ``diagnose``'s decision rules and its reason codes (``REASONS``).
"""
