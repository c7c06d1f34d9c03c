"""A trace's variables and a score given as arrays, as (chain, draw, d) float64 arrays.

Step of :func:`steindiag.inputs._trace.read_trace`: the variables flattened into labelled
columns (:mod:`steindiag.inputs._labels`); a score callable evaluated on them, a score
array, DataArray or Dataset aligned with them (chain and draw coordinates, columns).
"""

import numpy as np
import xarray as xr

from steindiag._containers import aligned, with_sample_dims
from steindiag._validate import evaluate_score_callable, warn_if_low_precision
from steindiag.inputs._labels import variable_labels

__all__ = ["flatten_dataset", "user_scores", "dataarray_as_dataset"]


def dataarray_as_dataset(data, score):
    """A DataArray of draws as a one-variable Dataset, and its score in the same form.

    A score array of the DataArray's shape, or a score DataArray with its dims, is
    read as that variable's score (so its elements get the same labels).
    """
    name = data.name if data.name is not None else "x"
    if isinstance(score, (np.ndarray, list, tuple)) and np.shape(score) == data.shape:
        score = data.copy(data=np.asarray(score))
    if isinstance(score, xr.DataArray) and set(score.dims) == set(data.dims):
        score = score.to_dataset(name=name)
    return data.to_dataset(name=name), score


def _as_float_block(data_array, sample_dims, name, what):
    """(chain, draw, k) float64 block of one variable."""
    missing = [dim for dim in sample_dims if dim not in data_array.dims]
    if missing:
        raise ValueError(
            f"variable {name!r} of {what} has no dimension(s) {missing}; its dims are "
            f"{list(data_array.dims)}."
        )
    data_array = data_array.transpose(*sample_dims, ...)
    values = np.asarray(data_array.values)
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise TypeError(f"variable {name!r} of {what} must be numeric; got dtype {values.dtype}.")
    n_chain, n_draw = values.shape[:2]
    return values.astype(np.float64).reshape(n_chain, n_draw, -1)


def flatten_dataset(dataset, names, sample_dims, what):
    """Concatenate ``names`` of ``dataset`` into (chain, draw, d) with labels."""
    missing = [name for name in names if name not in dataset.data_vars]
    if missing:
        raise ValueError(
            f"{what} has no variable(s) {missing}; it has {list(dataset.data_vars)}."
        )
    blocks, labels = [], []
    for name in names:
        blocks.append(_as_float_block(dataset[name], sample_dims, name, what))
        labels.extend(variable_labels(name, dataset[name], sample_dims))
    return np.concatenate(blocks, axis=2), labels


def user_scores(score, draws, labels, names, chain, draw, sample_dims, *, batched, chunk_size):
    """Scores from a callable, an array, a DataArray or a Dataset (aligned on chain/draw)."""
    n_chain, n_draw, d = draws.shape
    if callable(score):
        kwargs = {} if chunk_size is None else {"chunk_size": int(chunk_size)}
        return evaluate_score_callable(score, draws, batched=batched, **kwargs), "callable"
    if isinstance(score, (xr.Dataset, xr.DataArray)):
        is_dataset = isinstance(score, xr.Dataset)
        dataset = score if is_dataset else score.to_dataset(name="__score__")
        dataset, pair = with_sample_dims(dataset, sample_dims, "score")
        dataset = aligned(dataset, chain, draw, pair, "score")
        for variable in dataset.data_vars.values():
            warn_if_low_precision(variable.dtype, "score")
        if is_dataset:
            scores, _ = flatten_dataset(dataset, names, pair, "score")
        else:
            scores = _data_array_scores(dataset["__score__"], pair, labels)
        if scores.shape != draws.shape:
            raise ValueError(
                f"score has shape {scores.shape} (chain, draw, d) after alignment; the draws "
                f"have shape {draws.shape} with parameters {labels[:6]}"
                f"{'...' if len(labels) > 6 else ''}."
            )
        return scores, "arrays"
    values = np.asarray(score)
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise TypeError(f"score must hold real numbers; got dtype {values.dtype}.")
    warn_if_low_precision(values.dtype, "score")
    if values.shape != draws.shape:
        raise ValueError(
            f"score array must have the shape of the draws, (chain, draw, d) = {draws.shape}; "
            f"got {values.shape}."
        )
    return values.astype(np.float64), "arrays"


def _data_array_scores(score, pair, labels):
    """(chain, draw, d) values of a score DataArray with dims (chain, draw[, parameter])."""
    other = [dim for dim in score.dims if dim not in pair]
    if len(other) > 1:
        raise ValueError(
            f"score DataArray must have dims ({pair[0]}, {pair[1]}, parameter); got "
            f"{list(score.dims)}."
        )
    if not other:
        return np.asarray(score.transpose(*pair).values, dtype=np.float64)[:, :, None]
    [parameter_dim] = other
    if parameter_dim in score.coords:
        have = [str(v) for v in score[parameter_dim].values]
        if sorted(have) == sorted(labels) and have != list(labels):
            # The parameter labels say which column is which: follow them.
            score = score.isel({parameter_dim: [have.index(label) for label in labels]})
    return np.asarray(score.transpose(*pair, parameter_dim).values, dtype=np.float64)
