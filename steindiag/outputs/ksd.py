"""Labelled results of ``ksd`` and ``ksd_path``, and the attrs every KSD result carries."""

import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag.stats.ksd import ksd_iid, ksd_v, path_points

__all__ = ["kernel_attrs", "ksd_dataset", "ksd_path_dataset"]


def kernel_attrs(prepared, pre, kernel):
    """Attributes that reproduce a result: kernel, parameters, preconditioner, sizes, source.

    ``kernel`` is the kernel's label (accepted back as ``kernel=``); the IMQ adds ``c`` and
    ``beta``.
    """
    n_chain, n_draw, d = prepared.draws.shape
    return {
        **kernel.attrs(),
        "stein_operator": "Langevin",
        **pre.attrs(),
        "n_chain": n_chain,
        "n_draw": n_draw,
        "n_parameter": d,
        "parameters": list(prepared.parameter),
        **prepared.attrs,
    }


def ksd_dataset(values, chain, attrs):
    """The Dataset of :func:`steindiag.ksd` from ``methods.ksd.KSDValues``."""
    data_vars = {
        "ksd": (("chain",), values.ksd,
                {"long_name": "KSD of each chain (sqrt of V-statistic)"}),
        "ksd_pooled": ((), values.ksd_pooled,
                       {"long_name": "KSD of all chains pooled (sqrt of V-statistic)"}),
        "ksd_iid": (("chain",), values.ksd_iid,
                    {"long_name": "i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N), each chain"}),
        "ksd_iid_pooled": ((), values.ksd_iid_pooled, {"long_name": "i.i.d. floor, pooled"}),
        "ksd2_u": (("chain",), values.ksd2_u,
                   {"long_name": "unbiased U-statistic of KSD^2, each chain (may be < 0)"}),
        "ksd2_u_pooled": ((), values.ksd2_u_pooled,
                          {"long_name": "unbiased U-statistic of KSD^2, pooled (may be < 0)"}),
    }
    coords = {"chain": xr.Variable(("chain",), chain)}
    return xr.Dataset(data_vars, coords=coords, attrs=netcdf_attrs(attrs))


def ksd_path_dataset(sums, chain, n_draw, n_points, attrs):
    """The Dataset of :func:`steindiag.ksd_path` from ``methods.ksd.stein_sums``' sums."""
    n_chain = len(chain)
    points = path_points(n_draw, n_points)
    index = points - 1
    per_chain, pooled, diag_chain, diag_pooled = sums
    data_vars = {
        "ksd": (("chain", "n"), ksd_v(per_chain[:, index], points),
                {"long_name": "running KSD of each chain"}),
        "ksd_pooled": (("n",), ksd_v(pooled[index], n_chain * points),
                       {"long_name": "running KSD of all chains pooled"}),
        "ksd_iid": (("chain", "n"), ksd_iid(diag_chain[:, index], points),
                    {"long_name": "running i.i.d. floor of each chain"}),
        "ksd_iid_pooled": (("n",), ksd_iid(diag_pooled[index], n_chain * points),
                           {"long_name": "running i.i.d. floor, pooled"}),
    }
    coords = {
        "chain": ("chain", chain),
        "n": ("n", points, {"long_name": "draws per chain"}),
    }
    return xr.Dataset(data_vars, coords=coords, attrs=netcdf_attrs(attrs))
