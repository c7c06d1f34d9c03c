"""Reading and writing xarray / ArviZ containers: groups, selections, sample dims.

Shared by the input layer (which reads draws from traces) and the output layer (which
writes results back into them); xarray only (ArviZ's ``InferenceData`` is recognised by
its type name and read through its own attributes, never imported here).
"""

import numpy as np
import xarray as xr

__all__ = ["COMPANION_GROUPS", "NUTPIE_DRAW", "NUTPIE_GRADIENT", "STORED_LABEL", "STORED_MARK",
           "is_labelled", "container_kind", "group_names", "get_group", "picks_one", "select",
           "check_not_empty", "with_sample_dims", "coordinate", "aligned", "group_dataset",
           "select_vars", "ARRAY_LAYOUTS", "layout_key", "array_sample_dims", "apply_layout"]


def is_labelled(data):
    """True for xarray / ArviZ containers (DataArray included), which the trace reader takes."""
    module = type(data).__module__ or ""
    return module.startswith(("xarray", "arviz", "datatree"))


# group -> (group of stored unconstrained values, group of sampler statistics)
COMPANION_GROUPS = {
    "posterior": ("unconstrained_posterior", "sample_stats"),
    "warmup_posterior": ("warmup_unconstrained_posterior", "warmup_sample_stats"),
}


# nutpie (store_unconstrained=True / store_gradient=True) writes these to sample_stats.
NUTPIE_DRAW, NUTPIE_GRADIENT = "unconstrained_draw", "gradient"


# steindiag.add_scores writes nutpie's layout, plus the labels steindiag gives the value
# variables (a coordinate along the parameter dim) and its provenance (the gradient's attrs).
STORED_LABEL = "parameter_label"


STORED_MARK = "steindiag_add_scores"


def container_kind(data):
    if isinstance(data, xr.DataArray):
        return "dataarray"
    if isinstance(data, xr.Dataset):
        return "dataset"
    if isinstance(data, xr.DataTree):
        return "datatree"
    if type(data).__name__ == "InferenceData" and hasattr(data, "groups"):
        return "inferencedata"
    return None


def group_names(data):
    kind = container_kind(data)
    if kind == "datatree":
        return list(data.children)
    if kind == "inferencedata":
        return list(data.groups())
    return []


def get_group(data, name):
    """The group ``name`` of ``data`` as an ``xarray.Dataset``, or None if absent."""
    kind = container_kind(data)
    if kind == "datatree":
        return data[name].to_dataset() if name in data.children else None
    if kind == "inferencedata":
        return getattr(data, name) if name in data.groups() else None
    return None


def picks_one(value):
    """Whether a ``.sel`` indexer picks one value and drops its dimension (a scalar)."""
    return not isinstance(value, slice) and np.ndim(value) == 0


def select(dataset, coords, what, *, strict=False):
    """``dataset.sel(coords)`` on the dims it has (``strict``: every dim must exist)."""
    if not coords:
        return dataset
    unknown = [dim for dim in coords if dim not in dataset.dims]
    if strict and unknown:
        raise ValueError(
            f"coords names dimension(s) {unknown} that {what} does not have; its dimensions "
            f"are {list(dataset.dims)}."
        )
    selection = {dim: values for dim, values in coords.items() if dim in dataset.dims}
    try:
        return dataset.sel(selection)
    except (KeyError, ValueError, IndexError) as err:
        raise ValueError(f"coords={coords!r} could not be selected from {what}: {err}") from err


def check_not_empty(dataset, sample_dims, coords, what):
    """At least one variable (and, given ``sample_dims``, one draw of each), after ``coords``."""
    if not dataset.data_vars:
        raise ValueError(
            f"{what} has no variables: there are no draws to read. Pass the trace's group "
            "that holds the draws (group=, e.g. 'posterior') or a Dataset with at least one "
            "variable."
        )
    if sample_dims is None:
        return
    empty = {dim: dataset.sizes[dim] for dim in sample_dims if dataset.sizes[dim] == 0}
    if empty:
        selected = (f"coords={coords!r} selects no {', no '.join(empty)}"
                    if coords else f"{what} has no {', no '.join(empty)}")
        raise ValueError(
            f"{selected}: there are no draws to read (sizes after the selection: "
            f"{ {dim: dataset.sizes[dim] for dim in sample_dims} }). Select at least one "
            "chain and a few draws (e.g. coords={'draw': slice(500, None)} keeps the draws "
            "from 500 on; labels, not positions)."
        )


def with_sample_dims(dataset, sample_dims, what):
    """Dataset with (chain_dim, draw_dim); a missing chain dim (one sample dim) is added."""
    missing = [dim for dim in sample_dims if dim not in dataset.dims]
    if missing:
        raise ValueError(
            f"{what} has no dimension(s) {missing} (sample_dims={list(sample_dims)}); its "
            f"dimensions are {list(dataset.dims)}. Pass sample_dims= naming the chain and "
            "draw dimensions."
        )
    if len(sample_dims) == 1:
        dataset = dataset.expand_dims(chain=[0])
        return dataset, ("chain", sample_dims[0])
    return dataset, tuple(sample_dims)


def coordinate(dataset, dim):
    if dim in dataset.coords:
        return np.asarray(dataset[dim].values)
    return np.arange(dataset.sizes[dim])


def aligned(dataset, reference_chain, reference_draw, sample_dims, what):
    """``dataset`` restricted to the reference chain/draw coordinates (error if absent)."""
    chain_dim, draw_dim = sample_dims
    for dim, wanted in ((chain_dim, reference_chain), (draw_dim, reference_draw)):
        if dim not in dataset.dims:
            raise ValueError(f"{what} has no {dim!r} dimension; its dims are {list(dataset.dims)}.")
        if dim in dataset.coords:
            have = dataset[dim].values
            if len(have) == len(wanted) and np.array_equal(have, wanted):
                continue
            try:
                dataset = dataset.sel({dim: wanted})
            except KeyError as err:
                raise ValueError(
                    f"{what} does not cover the {dim} coordinates of the draws: {err}"
                ) from err
        elif dataset.sizes[dim] != len(wanted):
            raise ValueError(
                f"{what} has {dataset.sizes[dim]} entries along {dim!r}; the draws have "
                f"{len(wanted)}."
            )
    return dataset


def group_dataset(data, group):
    """The ``group`` of an InferenceData / DataTree (read with xarray), or a Dataset itself."""
    if isinstance(data, xr.DataArray):
        return data.to_dataset(name=data.name if data.name is not None else "x")
    kind = container_kind(data)
    if kind == "dataset":
        return data
    if kind == "datatree" and not data.children and data.has_data:
        return data.to_dataset()   # a single group's node, e.g. ``idata.posterior``
    if kind is None:
        raise TypeError(
            "data must be an array, an xarray.Dataset, an xarray.DataTree or an "
            f"arviz.InferenceData; got {type(data).__name__}."
        )
    dataset = get_group(data, group)
    if dataset is None:
        raise ValueError(f"data has no group {group!r}; its groups are {group_names(data)}.")
    return dataset


def select_vars(dataset, var_names, coords):
    if var_names is not None:
        names = [var_names] if isinstance(var_names, str) else list(var_names)
        missing = [name for name in names if name not in dataset.data_vars]
        if missing:
            raise ValueError(
                f"var_names {missing} are not variables of the trace; it has "
                f"{list(dataset.data_vars)}."
            )
        dataset = dataset[names]
    if coords is not None:
        if not isinstance(coords, dict):
            raise TypeError(f"coords must be a dict; got {type(coords).__name__}.")
        dataset = select(dataset, coords, "the trace")
    return dataset


# -- arrays: the meaning of their leading axes ------------------------------------------

# For arrays, sample_dims names the leading axes; the next axis (if any) is the parameter.
# value: {ndim: function giving the (chain, draw, d) view}
ARRAY_LAYOUTS = {
    ("chain", "draw"): {3: lambda a: a, 2: lambda a: a[:, :, None]},
    ("draw", "chain"): {3: lambda a: a.transpose(1, 0, 2), 2: lambda a: a.T[:, :, None]},
    ("draw",): {2: lambda a: a[None], 1: lambda a: a[None, :, None]},
}


def layout_key(sample_dims, message):
    """``sample_dims`` (a name or a sequence of names) as a key of ``ARRAY_LAYOUTS``.

    ValueError(``message`` followed by the value given) when it is none of them.
    """
    if isinstance(sample_dims, str):
        sample_dims = (sample_dims,)
    try:
        sample_dims = tuple(sample_dims)
    except TypeError:
        sample_dims = None
    if sample_dims not in ARRAY_LAYOUTS:
        raise ValueError(f"{message} Got sample_dims={sample_dims!r}.")
    return sample_dims


def array_sample_dims(sample_dims):
    """``sample_dims`` of an array as a key of ``ARRAY_LAYOUTS`` (or None); ValueError else."""
    if sample_dims is None:
        return None
    return layout_key(
        sample_dims,
        "for an array, sample_dims names its leading axes: ('chain', 'draw'), "
        "('draw', 'chain') (emcee's get_chain()) or ('draw',) (one chain); the axis "
        "after them, if any, holds the parameters.")


def apply_layout(array, sample_dims):
    """The (chain, draw, d) view of an array already checked by ``array_layout``."""
    if sample_dims is None:
        return array[None] if array.ndim == 2 else array
    return ARRAY_LAYOUTS[sample_dims][array.ndim](array)
