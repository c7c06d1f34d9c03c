"""Labelled results of ``stein_weights`` (a DataArray) and ``weighted_summary`` (a table)."""

import numpy as np
import pandas as pd
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag._validate import check_probability
from steindiag.methods.weights import relative_gap, solver_label
from steindiag.outputs.ksd import kernel_attrs

__all__ = ["interval_defaults", "weights_dataarray", "summary_frame"]


def interval_defaults(ci_prob, ci_kind):
    """ArviZ's default interval of ``arviz.summary`` (read at run time) and its column names.

    ArviZ 1.x: ``rcParams["stats.ci_kind"]`` ("eti") at ``rcParams["stats.ci_prob"]``
    (0.89), columns ``eti89_lb``, ``eti89_ub``. ArviZ 0.x: the HDI at
    ``rcParams["stats.ci_prob"]`` (0.94), columns ``hdi_3%``, ``hdi_97%``. Without ArviZ,
    the 1.x defaults.
    """
    try:
        import arviz

        rc = arviz.rcParams
        keys = set(rc.keys())
    except ImportError:
        rc, keys = {}, set()
    new_style = "stats.ci_kind" in keys or not keys
    if ci_kind is None:
        ci_kind = rc["stats.ci_kind"] if "stats.ci_kind" in keys else ("eti" if not keys else "hdi")
    if ci_kind not in ("hdi", "eti"):
        raise ValueError(f"ci_kind must be 'hdi' or 'eti'; got {ci_kind!r}.")
    if ci_prob is None:
        ci_prob = next((rc[key] for key in ("stats.ci_prob", "stats.hdi_prob") if key in keys),
                       0.89)
    ci_prob = check_probability(ci_prob, "ci_prob")
    if new_style:
        percent = int(ci_prob * 100)
        names = (f"{ci_kind}{percent}_lb", f"{ci_kind}{percent}_ub")
    else:
        alpha = 1.0 - ci_prob
        names = (f"{ci_kind}_{100 * alpha / 2:g}%", f"{ci_kind}_{100 * (1 - alpha / 2):g}%")
    return ci_prob, ci_kind, names


def weights_dataarray(solutions, methods, prepared, pre, kernel, *, per_chain, tol, checks):
    """The DataArray of :func:`steindiag.stein_weights` (one solution per problem)."""
    n_chain, n_draw = prepared.draws.shape[:2]
    weights = np.stack([s.weights for s in solutions]).reshape(n_chain, n_draw)
    used_methods = sorted(set(methods), key=methods.index)
    per_problem = {
        "ksd_uniform": [np.sqrt(max(s.ksd2_uniform, 0.0)) for s in solutions],
        "ksd_weighted": [np.sqrt(max(s.ksd2, 0.0)) for s in solutions],
        "duality_gap": [s.gap for s in solutions],
        "relative_duality_gap": [relative_gap(s.gap, s.ksd2) for s in solutions],
        "rounding_floor": [s.floor for s in solutions],
        "ksd_iid": [s.ksd_iid for s in solutions],
        "converged": [int(s.converged) for s in solutions],
        "iterations": [s.iterations for s in solutions],
        "solver_status": [s.status for s in solutions],
    }
    pooled = weights / weights.sum()
    attrs = {
        "long_name": "KSD-optimal weight of each draw",
        "method": "; ".join(used_methods),
        "solver": solver_label(used_methods),
        "normalised_over": "each chain" if per_chain else "all draws",
        "tol": tol,
        "kish_ess": float(1.0 / np.sum(pooled**2)),
        **kernel_attrs(prepared, pre, kernel),
        **checks.attrs(),
    }
    coords = {"chain": prepared.chain, "draw": prepared.draw}
    if per_chain:
        per_problem["kish_ess"] = [float(1.0 / np.sum(s.weights**2)) for s in solutions]
        del attrs["kish_ess"]
        for name, values in per_problem.items():
            coords[name] = ("chain", np.asarray(values))
    else:
        attrs.update({name: values[0] for name, values in per_problem.items()})
    return xr.DataArray(weights, dims=("chain", "draw"), coords=coords,
                        name="stein_weight", attrs=netcdf_attrs(attrs))


def summary_frame(summary, labels, interval_names, probabilities, *, n_draws, ci_prob,
                  ci_kind, reasons):
    """The table of :func:`steindiag.weighted_summary` (``stats.weighted.WeightedSummary``)."""
    table = {"mean": summary.mean, "sd": summary.sd}
    table[interval_names[0]], table[interval_names[1]] = summary.interval
    table["mcse_mean"] = summary.mcse_mean
    if probabilities is not None:
        for p, row in zip(probabilities, summary.quantiles):
            table[f"q{100 * p:g}%"] = row
    table["ess_kish"] = np.full(len(labels), summary.kish_ess)
    frame = pd.DataFrame(table, index=labels)
    frame.attrs["kish_ess"] = summary.kish_ess
    frame.attrs["n_draws"] = n_draws
    frame.attrs["ci_prob"] = ci_prob
    frame.attrs["ci_kind"] = ci_kind
    frame.attrs["correction_warnings"] = " | ".join(reasons)
    return frame
