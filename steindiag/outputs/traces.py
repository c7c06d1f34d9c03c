"""Results written back into the caller's trace: scores stored in its sampler statistics.

``with_stored_scores`` writes nutpie's layout (``unconstrained_draw`` and ``gradient``
with dims (chain, draw, unconstrained_parameter)) plus steindiag's labels, which every
function reads back (``inputs._trace_model``).
"""

import numpy as np
import xarray as xr

from steindiag._containers import STORED_LABEL, container_kind, get_group

__all__ = ["STATS_GROUPS", "PARAMETER_DIM", "with_group", "with_stored_scores"]

STATS_GROUPS = {"posterior": "sample_stats", "warmup_posterior": "warmup_sample_stats"}
PARAMETER_DIM = "unconstrained_parameter"


def with_group(trace, name, dataset):
    """A copy of ``trace`` (same type) whose group ``name`` is ``dataset``."""
    if container_kind(trace) == "datatree":
        nodes = {node.path: node.to_dataset(inherit=False) for node in trace.subtree}
        nodes[f"/{name}"] = dataset
        return xr.DataTree.from_dict(nodes, name=trace.name)
    import arviz as az

    groups = {group: getattr(trace, group) for group in trace.groups()}
    groups[name] = dataset
    return az.InferenceData(**groups)


def with_stored_scores(trace, group, prepared, scores, unconstrained_labels, attrs):
    """``trace`` with the unconstrained draws of ``prepared`` and their ``scores`` in the
    sampler statistics group of ``group`` (nutpie's layout, plus steindiag's labels)."""
    dims = ("chain", "draw", PARAMETER_DIM)
    stored = xr.Dataset(
        {
            "unconstrained_draw": (dims, prepared.draws, {"space": "unconstrained"}),
            "gradient": (dims, scores, attrs),
        },
        coords={"chain": prepared.chain, "draw": prepared.draw,
                PARAMETER_DIM: unconstrained_labels,
                STORED_LABEL: (PARAMETER_DIM, np.asarray(prepared.canonical, dtype=str))},
    )
    stats_name = STATS_GROUPS[group]
    stats = get_group(trace, stats_name)
    if stats is None:
        stats = stored
    else:
        stale = [name for name in (*stored.data_vars, STORED_LABEL, PARAMETER_DIM)
                 if name in stats.variables]
        stats = stats.drop_vars(stale).merge(stored, join="left", compat="override")
    return with_group(trace, stats_name, stats)
