"""A trace's own variables as columns, for the summaries (``weighted_summary``,
``control_variates``): every numeric element, in its own (constrained) space, labelled as
ArviZ labels it; and weights of the draws read against the trace's (chain, draw).
"""

from dataclasses import dataclass

import numpy as np
import xarray as xr

from steindiag._containers import aligned, group_dataset, is_labelled, select_vars
from steindiag._validate import check_labeller, real_array
from steindiag.inputs._arrays import read_array_draws
from steindiag.inputs._labels import display_labels, variable_labels
from steindiag.inputs._numpyro import as_numpyro_trace
from steindiag.inputs._sampler import sampler_warnings
from steindiag.inputs._selection import selected_names
from steindiag.inputs._trace_model import as_trace

__all__ = ["Columns", "trace_columns", "read_columns", "read_weights", "read_rows"]


def trace_columns(dataset, sample_dims):
    """(labels, blocks of (chain, draw, k) float64 values, owners) of every numeric variable
    of ``dataset`` with both sample dims (the others are skipped); ``owners`` names each
    column's variable."""
    chain_dim, draw_dim = sample_dims
    labels, columns, owners = [], [], []
    for name, variable in dataset.data_vars.items():
        if chain_dim not in variable.dims or draw_dim not in variable.dims:
            continue
        if not (np.issubdtype(variable.dtype, np.number) or variable.dtype == bool):
            continue
        other = [dim for dim in variable.dims if dim not in (chain_dim, draw_dim)]
        values = variable.transpose(chain_dim, draw_dim, *other).values
        columns.append(values.reshape(values.shape[0], values.shape[1], -1).astype(np.float64))
        labels.extend(variable_labels(name, variable, sample_dims))
        owners.extend([str(name)] * columns[-1].shape[2])
    return labels, columns, owners


@dataclass(kw_only=True)
class Columns:
    """The columns read: ``labels`` (a labeller's, if given), ``values`` (chain, draw, k),
    the trace's ``chain`` and ``draw`` coordinate values (None for an array), its
    sampler's divergences and steindiag's own labels (``canonical``)."""

    labels: list
    values: np.ndarray
    chain: np.ndarray = None
    draw: np.ndarray = None
    read_sampler_warnings: object = None
    canonical: list = None

    def sampler_warnings(self):
        return None if self.read_sampler_warnings is None else self.read_sampler_warnings()


def read_columns(data, *, group="posterior", var_names=None, coords=None, sample_dims=None,
                 filter_vars=None, labeller=None):
    """The :class:`Columns` of a trace's ``group`` (a run numpyro ``MCMC``: its trace) or of
    an array (column by column, ``x[k]``, its axes read as ``sample_dims`` says);
    ``var_names`` and ``filter_vars`` as ArviZ reads them, labels as ``labeller`` makes
    them (:func:`steindiag.inputs._labels.display_labels`)."""
    check_labeller(labeller)
    data = as_numpyro_trace(as_trace(data)[0])   # a numpyro MCMC: its constrained draws
    if not is_labelled(data):
        for name, value in (("var_names", var_names), ("coords", coords)):
            if value is not None:
                raise TypeError(f"{name} applies to labelled traces only; data is an array.")
        # The same reading of an array's axes as the other functions (sample_dims).
        _, _, values, labels = read_array_draws(data, sample_dims)
        canonical, shown = display_labels(labels, labeller)
        return Columns(labels=shown, values=values, canonical=canonical)
    sample_dims = ("chain", "draw") if sample_dims is None else tuple(sample_dims)
    if len(sample_dims) != 2:
        raise ValueError(f"sample_dims must name two dims (chain, draw); got {sample_dims}.")
    dataset = group_dataset(data, group)
    dataset = select_vars(dataset, selected_names(var_names, filter_vars, dataset.data_vars,
                                                  f"the trace's group {group!r}"), coords)
    labels, blocks, _ = trace_columns(dataset, sample_dims)
    if not blocks:
        raise ValueError(
            f"no numeric variable with dims {sample_dims} in the trace's group {group!r}."
        )
    chain_dim, draw_dim = sample_dims
    chain = dataset[chain_dim].values if chain_dim in dataset.coords else None
    draw = dataset[draw_dim].values if draw_dim in dataset.coords else None
    canonical, shown = display_labels(labels, labeller)
    return Columns(labels=shown, canonical=canonical, values=np.concatenate(blocks, axis=2),
                   chain=chain, draw=draw, read_sampler_warnings=lambda: sampler_warnings(
                       data, group=group, chain=chain, draw=draw, sample_dims=sample_dims))


def read_weights(weights, shape, chain_values=None, draw_values=None):
    """Weights of the (chain, draw) draws of ``shape``, checked and normalised to sum 1.

    A DataArray is matched to the trace by its (chain, draw) coordinates, which must be
    the trace's; an array must have the shape (a vector: one chain).
    """
    n_chain, n_draw = shape
    if isinstance(weights, xr.DataArray):
        if set(weights.dims) != {"chain", "draw"}:
            raise ValueError(f"weights must have dims ('chain', 'draw'); got {weights.dims}.")
        if chain_values is not None and "chain" in weights.coords and "draw" in weights.coords:
            if (weights.sizes["chain"] != n_chain or weights.sizes["draw"] != n_draw
                    or not np.array_equal(weights["chain"].values, chain_values)
                    or not np.array_equal(weights["draw"].values, draw_values)):
                raise ValueError(
                    f"weights do not match the trace: weights have chain "
                    f"{weights.sizes['chain']} x draw {weights.sizes['draw']} (coordinates "
                    f"must match too), the trace has chain {n_chain} x draw {n_draw}."
                )
        values = weights.transpose("chain", "draw").values
    else:
        values = real_array(weights, "weights")
        if values.ndim == 1 and n_chain == 1:
            values = values[None, :]
    values = real_array(values, "weights")
    if values.shape != (n_chain, n_draw):
        raise ValueError(
            f"weights do not match the trace: weights have shape {values.shape}, the draws "
            f"have (chain, draw) = ({n_chain}, {n_draw})."
        )
    if not np.all(np.isfinite(values)):
        raise ValueError("weights must be finite.")
    if np.any(values < 0):
        raise ValueError(f"weights must be >= 0; the smallest is {values.min():.3g}.")
    total = values.sum()
    if not total > 0:
        raise ValueError("weights must not all be zero.")
    return values / total


def _plain(value):
    """A coordinate value as Python writes it (1, not np.int64(1))."""
    return value.item() if isinstance(value, np.generic) else value


def _trace_dataset(data, group, var_names, filter_vars, coords, chain, draw):
    """The trace's ``group`` (its own space), selected and aligned on the draws' (chain, draw)."""
    dataset = group_dataset(data, group)
    full = select_vars(dataset, None, coords)
    selection = {}
    for dim, values in (("chain", chain), ("draw", draw)):
        if dim in full.coords:
            selection[dim] = values
    try:
        full = full.sel(selection)
    except (KeyError, IndexError) as err:
        raise ValueError(
            f"the trace's group {group!r} does not hold the (chain, draw) of the draws read: "
            f"{err}"
        ) from None
    return full, select_vars(full, selected_names(var_names, filter_vars, full.data_vars,
                                                  f"the trace's group {group!r}"), None)


def _function_values(name, function, argument, chain, draw):
    """Per-draw values of one user function, checked: shape (chain, draw)."""
    n_chain, n_draw = len(chain), len(draw)
    if callable(function):
        try:
            values = function(argument)
        except Exception as err:  # noqa: BLE001 - report which function failed
            raise ValueError(
                f"functions[{name!r}] raised {type(err).__name__}: {err}"
            ) from err
    else:
        values = function
    if isinstance(values, xr.DataArray):
        extra = [dim for dim in values.dims if dim not in ("chain", "draw")]
        if extra or set(values.dims) != {"chain", "draw"}:
            raise ValueError(
                f"functions[{name!r}] must give one value per draw, dims ('chain', 'draw'); "
                f"got dims {values.dims}."
            )
        # Matched by coordinates, like a score DataArray: a DataArray of other draws is
        # refused, never used by position.
        values = aligned(values.to_dataset(name="__f__"), chain, draw, ("chain", "draw"),
                         f"functions[{name!r}]")["__f__"]
        values = values.transpose("chain", "draw").values
    values = real_array(values, f"functions[{name!r}]", allow_bool=True)   # not complex
    if n_chain == 1 and values.shape == (n_draw,):
        values = values[None, :]
    if values.shape != (n_chain, n_draw):
        raise ValueError(
            f"functions[{name!r}] must give one value per draw, shape (chain, draw) = "
            f"({n_chain}, {n_draw}); got shape {values.shape}."
        )
    bad = ~np.isfinite(values)
    if bad.any():
        c, t = np.argwhere(bad)[0]
        raise ValueError(
            f"functions[{name!r}] is not finite at {int(bad.sum())} draw(s), first "
            f"(chain={_plain(chain[c])!r}, draw={_plain(draw[t])!r}): {values[c, t]}."
        )
    return values


def read_rows(origin, prepared, functions, var_names, filter_vars=None, labeller=None):
    """The quantities a summary of the draws reads: (labels, values (chain, draw, n_rows),
    owners: each row's trace variable or None); a trace's rows labelled by ``labeller``
    (the draws' columns are already).

    A trace's variables in their own (constrained) space, aligned draw by draw on the
    (chain, draw) of the draws read (``var_names`` selects them), else the draws' columns;
    then each of ``functions`` ({name: callable | DataArray | array}), a callable taking
    the trace's group (or the draws' array).
    """
    n_chain, n_draw = prepared.draws.shape[:2]
    if origin.labelled:
        full, selected = _trace_dataset(origin.data, origin.group, var_names, filter_vars,
                                        origin.coords, prepared.chain, prepared.draw)
        labels, columns, owners = trace_columns(selected, ("chain", "draw"))
        labels = display_labels(labels, labeller)[1]
        argument = full
    else:
        if var_names is not None:
            raise TypeError("var_names applies to labelled traces only; data is an array.")
        labels, columns = list(prepared.parameter), [prepared.draws]
        owners = [None] * len(labels)
        argument = prepared.draws
    for name, function in functions.items():
        if name in labels:
            raise ValueError(f"functions[{name!r}] has the label of a variable; rename it.")
        columns.append(_function_values(name, function, argument, prepared.chain,
                                        prepared.draw)[:, :, None])
        labels.append(name)
        owners.append(None)
    if not labels:
        raise ValueError("nothing to summarise: no variable selected and no functions.")
    values = np.concatenate(columns, axis=2)
    bad = ~np.isfinite(values)
    if bad.any():
        c, t, k = np.argwhere(bad)[0]
        raise ValueError(
            f"the trace's values are not finite: {labels[k]} at (chain="
            f"{_plain(prepared.chain[c])!r}, draw={_plain(prepared.draw[t])!r}); select finite draws with "
            "coords= or var_names=."
        )
    return labels, values, owners
