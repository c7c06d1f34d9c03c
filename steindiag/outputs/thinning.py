"""Labelled results of ``stein_thin``: the thinned draws in the input's own type, and
:class:`SteinThinning`."""

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag._containers import apply_layout, container_kind
from steindiag.outputs.ksd import kernel_attrs

__all__ = ["SteinThinning", "thinned_container", "thinned_array", "thinning_attrs"]


_LAYOUT_NOTE = (
    "a set of selected points laid out as one chain, not a Markov chain: R-hat, ESS and "
    "MCSE do not apply (arviz.summary reports R-hat as NaN for one chain)"
)


@dataclass(kw_only=True, repr=False)
class SteinThinning:
    """Result of :func:`stein_thin` with ``return_info=True``.

    Attributes
    ----------
    thinned : same type as the input
        The selected draws (what ``stein_thin`` returns by default).
    chain, draw : ndarray (n_selected,)
        Chain and draw coordinate values of the selected draws, in selection order
        (a draw may be selected more than once).
    index : ndarray of int (n_selected,)
        Positions in the pooled draws that were thinned (after any ``coords``
        selection), ``chain_position * n_draw + draw_position``.
    ksd : float
        KSD (sqrt of the V-statistic) of the thinned set, same kernel and preconditioner.
    ksd_path : ndarray (n_selected,)
        KSD of the first t selected points, t = 1 .. n_selected.
    attrs : dict
        Kernel, preconditioner and thinning settings, and the checks of
        :func:`stein_thin` (``stein_thinning_correction_warnings`` etc.).
    """

    thinned: object
    chain: np.ndarray
    draw: np.ndarray
    index: np.ndarray
    ksd: float
    ksd_path: np.ndarray
    attrs: dict = field(default_factory=dict)

    def __repr__(self):
        attrs = self.attrs
        n_source = (attrs.get("stein_thinning_source_n_chain", 0)
                    * attrs.get("stein_thinning_source_n_draw", 0))
        unique = np.unique(self.index).size
        lines = [
            f"SteinThinning: {self.index.size} points ({unique} distinct) of {n_source} "
            f"draws, {attrs.get('stein_thinning', 'greedy')} rule; KSD {self.ksd:.4g}",
            f"  thinned: {type(self.thinned).__name__} (one 'chain' of selected points, not "
            "a Markov chain); also chain, draw, index, ksd_path, attrs",
        ]
        warned = attrs.get("stein_thinning_correction_warnings", "")
        if warned:
            lines.append(f"  cannot be trusted: {warned}")
        return "\n".join(lines)


def _take_points(dataset, chain_label, draw_label, sample_dims):
    """The draws at the given (chain, draw) coordinate values, as one chain.

    Selection is by label, so that it stays right when ``coords=`` selected a subset of
    the draws before thinning (positions would then refer to the subset).
    """
    chain_dim, draw_dim = sample_dims
    if draw_dim in dataset.dims and chain_dim not in dataset.dims and not np.any(chain_label):
        # One sample dim (sample_dims=("draw",)): the input layer treats it as one chain.
        dataset = dataset.expand_dims({chain_dim: [0]})
    if chain_dim not in dataset.dims or draw_dim not in dataset.dims:
        return dataset
    m = len(chain_label)
    indexers = {}
    for dim, labels in ((chain_dim, chain_label), (draw_dim, draw_label)):
        if dim in dataset.indexes:
            positions = dataset.indexes[dim].get_indexer(labels)
        else:  # no coordinate: the input layer labelled the dim by position
            positions = np.asarray(labels, dtype=np.int64)
        if np.any(positions < 0) or np.any(positions >= dataset.sizes[dim]):
            raise ValueError(f"selected {dim} values are missing from a group of the trace.")
        indexers[dim] = xr.DataArray(positions, dims="__thinned__")
    picked = dataset.isel(indexers)
    renames = {name: f"source_{name}" for name in (chain_dim, draw_dim) if name in picked.coords}
    picked = picked.rename_vars(renames).rename_dims({"__thinned__": draw_dim})
    picked = picked.assign_coords({draw_dim: np.arange(m)}).expand_dims({chain_dim: [0]})
    return picked.transpose(chain_dim, draw_dim, ...)


def thinned_container(data, chain_label, draw_label, sample_dims, group, attrs):
    kind = container_kind(data)
    if kind == "dataarray":
        name = data.name if data.name is not None else "x"
        picked = _take_points(data.to_dataset(name=name), chain_label, draw_label, sample_dims)
        out = picked[name]
        out.attrs = {**data.attrs, **attrs}
        return out.rename(data.name)

    def take(dataset, name=None):
        out = _take_points(dataset, chain_label, draw_label, sample_dims)
        if name == group:
            out.attrs = {**dataset.attrs, **attrs}
        return out

    if kind == "dataset":
        return take(data, group)
    if kind == "datatree":
        nodes = {}
        for node in data.subtree:
            path = node.path
            name = path.strip("/") or None
            nodes[path] = take(node.to_dataset(inherit=False), name)
        return xr.DataTree.from_dict(nodes, name=data.name)
    if kind == "inferencedata":
        import arviz as az

        return az.InferenceData(**{name: take(getattr(data, name), name) for name in data.groups()})
    raise TypeError(f"cannot thin data of type {type(data).__name__}.")


def thinned_array(array, layout, chain_pos, draw_pos):
    """The selected draws of an array, in its own layout: (1, m, d) if it has a chain axis,
    else (m, d), or (m,) for a 1-D array (``layout``: its sample dims, or None)."""
    thinned = apply_layout(array, layout)[chain_pos, draw_pos]     # (n_selected, d)
    if array.ndim == 1:
        return thinned[:, 0]
    if layout not in (None, ("draw",)) or array.ndim == 3:
        return thinned[None]                   # a chain axis in, (1, n_selected, d) out
    return thinned


def thinning_attrs(settings, checks, ksd, prepared, pre, kernel):
    """The attrs of the thinned draws (netCDF-safe)."""
    n_chain, n_draw = prepared.draws.shape[:2]
    attrs = {
        **settings,
        "stein_thinning_layout": _LAYOUT_NOTE,
        **{f"stein_thinning_{key}": value for key, value in checks.attrs().items()},
        "stein_thinning_ksd": float(ksd),
        "stein_thinning_source_n_chain": n_chain,
        "stein_thinning_source_n_draw": n_draw,
    }
    for key, value in kernel_attrs(prepared, pre, kernel).items():
        if key not in ("n_chain", "n_draw"):
            attrs[f"stein_thinning_{key}"] = value
    return netcdf_attrs(attrs)
