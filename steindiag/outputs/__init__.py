"""Output layer: labelled results from the methods' arrays, and results written back.

Every module turns one function's array results into what users get: a Dataset or
DataArray with dims, coords and netCDF-safe attrs, a result dataclass, the draws in the
caller's own container, or a report. None of them reads input or runs a method.

- ``ksd``: the Datasets of ``ksd`` and ``ksd_path``, and the attrs every KSD result carries;
- ``ksd_test``: the Dataset of ``ksd_test`` (statistics, p-values, the bootstrap plan);
- ``mmd``: the DataArray of ``mmd`` (MMD^2, the p-values as its coordinates);
- ``diagnosis``: :class:`Diagnosis`, the labelled result of ``diagnose``;
- ``report``: the report it prints, the advice chosen by the pooled reason's code;
- ``weights``: the DataArray of ``stein_weights`` and the table of ``weighted_summary``;
- ``thinning``: the thinned draws in the input's own type, and ``SteinThinning``;
- ``variational``: the moved draws in the input's type, and ``SteinVariational``;
- ``control_variates``: the Dataset of ``control_variates``, along ``label``;
- ``estimation``: ``MinKSDFit``, the result of ``min_ksd_fit``;
- ``traces``: scores written into a trace's sampler statistics (``add_scores``).
"""
