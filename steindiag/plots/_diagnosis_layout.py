"""What plot_diagnosis draws, as plain arrays (the same for both drawing paths): rows,
labels and verdict colours of the chains, the tests' p-values and the level, and the
optional attribution."""

import textwrap
from dataclasses import dataclass

import numpy as np
import xarray as xr

from steindiag.plots._common import _chain_labels, _parameter_label, _verdict_color

_KSD_TITLE = "KSD (dot) against its i.i.d. floor (bar)"
_ATTRIBUTION_TITLE = "where the evidence points (|z|, chain x parameter)"


def _pvalue_title(level):
    return f"p-values (dot) against the level {level:.2g} (dashed)"


@dataclass
class _Layout:
    """What the figure shows, as plain arrays (the same for both drawing paths)."""

    rows: np.ndarray            # y of the chains (top to bottom), then pooled at 0
    labels: list                # y tick labels: "chain 0: fits", ..., "pooled: fits"
    colors: list                # verdict colour per row
    ksd: np.ndarray
    floor: np.ndarray
    test_rows: np.ndarray       # y of the p-value rows (chains, pooled, agreement, search)
    test_labels: list
    pvalue: np.ndarray
    reliable: np.ndarray
    test_colors: list
    level: float
    title: str
    parameters: list = None     # attribution columns, if any
    attribution: np.ndarray = None


def _is_diagnosis(value):
    return isinstance(value, xr.Dataset) and "verdict" in value.data_vars


def _check_diagnosis(result):
    missing = [name for name in ("verdict", "verdict_pooled", "reason_pooled", "ksd",
                                 "ksd_iid", "ksd_pooled", "ksd_iid_pooled", "pvalue",
                                 "pvalue_pooled", "pvalue_reliable", "pvalue_reliable_pooled")
               if name not in result.data_vars]
    if missing or "test_level" not in result.attrs:
        raise ValueError("plot_diagnosis needs the result of steindiag.diagnose (or a saved "
                         "one reopened); it lacks "
                         f"{', '.join(missing + ([] if 'test_level' in result.attrs else ['attrs test_level']))}.")
    if "attribution" in result.data_vars and set(result["attribution"].dims) != {
            "chain", "parameter"}:
        raise ValueError("the optional variable attribution must have dims (chain, "
                         f"parameter); got {result['attribution'].dims}.")


def _layout(result, labeller, relabel):
    n_chain = result.sizes["chain"]
    chains = result["chain"].values
    verdicts = [str(v) for v in result["verdict"].values]
    pooled = str(result["verdict_pooled"].item())
    names = _chain_labels(chains, labeller)
    rows = np.append(np.arange(n_chain, 0, -1, dtype=np.float64) + 0.5, 0.0)
    labels = [f"{name}: {v}" for name, v in zip(names, verdicts)] + [f"pooled: {pooled}"]
    colors = [_verdict_color(v) for v in verdicts + [pooled]]
    level = float(result.attrs["test_level"])
    test_labels, pvalue = list(labels), list(result["pvalue"].values) + [
        float(result["pvalue_pooled"])]
    reliable = list(np.asarray(result["pvalue_reliable"].values, dtype=bool)) + [
        bool(result["pvalue_reliable_pooled"])]
    test_colors = list(colors)
    extra = []
    if n_chain > 1 and "agreement_pvalue" in result and np.isfinite(
            float(result["agreement_pvalue"])):
        p = float(result["agreement_pvalue"])
        extra.append(("chains agree (MMD)", p, bool(result.get("agreement_reliable", True)),
                      p <= level))
    if "missing_mass_pvalue" in result and np.isfinite(float(result["missing_mass_pvalue"])):
        extra.append(("unvisited mass", float(result["missing_mass_pvalue"]), True,
                      bool(result["missing_mass_found"])))
    # The other tests are evidence, not verdicts: vermilion when they reject, else grey.
    for label, p, ok, rejected in extra:
        test_labels.append(label)
        pvalue.append(p)
        reliable.append(ok)
        test_colors.append(_verdict_color("does not fit") if rejected else "#777777")
    test_rows = np.append(rows, -1.0 - np.arange(len(extra)))
    reason = str(result["reason_pooled"].item())
    title = textwrap.fill(f"{pooled.upper()}: {reason}", width=110)
    layout = _Layout(rows=rows, labels=labels, colors=colors,
                     ksd=np.append(result["ksd"].values, float(result["ksd_pooled"])),
                     floor=np.append(result["ksd_iid"].values, float(result["ksd_iid_pooled"])),
                     test_rows=test_rows, test_labels=test_labels,
                     pvalue=np.asarray(pvalue, dtype=np.float64),
                     reliable=np.asarray(reliable, dtype=bool), test_colors=test_colors,
                     level=level, title=title)
    attribution = _attribution(result)
    if attribution is not None:
        layout.parameters = [_parameter_label(p, relabel)
                             for p in attribution["parameter"].values]
        layout.attribution = np.asarray(attribution.values, dtype=np.float64)
    return layout


# diagnose's evidence by chain and parameter, each in standard errors: a chain's mean
# against the other chains', and its Stein moments against their values for draws of p.
_EVIDENCE_Z = ("chain_shift", "score_location_z", "score_spread_z")


def _attribution(result):
    """(chain, parameter) values for the third panel: the variable ``attribution`` when
    the result holds one, else the largest |z| of diagnose's evidence by chain and
    parameter (``_EVIDENCE_Z``), or None."""
    if "attribution" in result.data_vars:
        return result["attribution"].transpose("chain", "parameter")
    found = [abs(result[name].transpose("chain", "parameter")).fillna(0.0)
             for name in _EVIDENCE_Z if name in result.data_vars]
    if not found:
        return None
    largest = found[0]
    for other in found[1:]:
        largest = np.maximum(largest, other)
    return largest


def _x_limits(values, pad_low=1.5, pad_high=2.2):
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values) & (values > 0)]
    if values.size == 0:
        return 0.1, 10.0
    return values.min() / pad_low, values.max() * pad_high


def _p_limits(layout):
    low = min(np.nanmin(np.where(layout.pvalue > 0, layout.pvalue, np.nan)), layout.level)
    return max(low / 3.0, 1e-6), 1.6


def _attribution_sizes(values, largest):
    scale = np.nanmax(np.abs(values)) if np.any(np.isfinite(values)) else 1.0
    scale = scale if scale > 0 else 1.0
    return largest * np.abs(np.nan_to_num(values)) / scale
