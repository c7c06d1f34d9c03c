"""Output layer: labelled results from the methods' arrays, and results written back.

Every module turns one function's array results into what users get: a Dataset or
DataArray with dims, coords and netCDF-safe attrs, a result dataclass, the draws in the
caller's own container, or a report. None of them reads input or computes statistics.

Modules: ``ksd`` (``ksd``, ``ksd_path``; the attrs every KSD result carries),
``ksd_test``, ``mmd``, ``diagnosis`` (:class:`Diagnosis`, its report and the advice chosen
from the reason's code), ``weights`` (``stein_weights``, ``weighted_summary``),
``thinning`` (the thinned draws in the input's type), ``variational`` (the moved draws),
``control_variates``, ``estimation`` (``min_ksd_fit``), ``traces`` (scores stored in a
trace's sampler statistics).
"""
