"""A trace's variables and a score given as arrays, as (chain, draw, d) float64 arrays.

Step of :func:`steindiag.inputs._trace.read_trace`: the variables flattened into labelled
columns (:mod:`steindiag.inputs._labels`); a score callable evaluated on them, a score
array, DataArray or Dataset aligned with them (chain and draw coordinates, columns).
"""

import numpy as np
import xarray as xr

from steindiag._containers import aligned, with_sample_dims
from steindiag._validate import evaluate_score_callable, real_array, warn_if_low_precision
from steindiag.inputs._labels import variable_labels

__all__ = ["flatten_dataset", "user_scores", "dataarray_as_dataset", "score_variables",
           "group_score"]


def dataarray_as_dataset(data, score):
    """A DataArray of draws as a one-variable Dataset, and its score in the same form.

    A score array of the DataArray's shape, or a score DataArray with its dims, is
    read as that variable's score (so its elements get the same labels).
    """
    name = data.name if data.name is not None else "x"
    if isinstance(score, (np.ndarray, list, tuple)) and np.shape(score) == data.shape:
        real_array(score, "score")   # complex, masked: refused
        score = data.copy(data=np.asarray(score))
    if isinstance(score, xr.DataArray) and set(score.dims) == set(data.dims):
        score = score.to_dataset(name=name)
    return data.to_dataset(name=name), score


def group_score(score):
    """A trace group given as the score (a DataTree node, ``idata.posterior`` on ArviZ
    1.x) as the Dataset it holds; any other score as it is."""
    if isinstance(score, xr.DataTree) and not score.children and score.has_data:
        return score.to_dataset()
    return score


def score_variables(score, dataset):
    """The variables a score Dataset gives grad log p of: all must be the draws'."""
    names, have = list(score.data_vars), list(dataset.data_vars)
    missing = [name for name in names if name not in have]
    if missing:
        raise ValueError(
            f"the score's variables do not match the draws': the score has {names}, the "
            f"draws have {have} ({missing} not among them). A score Dataset holds grad "
            "log p of each variable of the draws under the variable's name."
        )
    return names


def _as_float_block(data_array, sample_dims, name, what):
    """(chain, draw, k) float64 block of one variable."""
    missing = [dim for dim in sample_dims if dim not in data_array.dims]
    if missing:
        raise ValueError(
            f"variable {name!r} of {what} has no dimension(s) {missing}; its dims are "
            f"{list(data_array.dims)}."
        )
    data_array = data_array.transpose(*sample_dims, ...)
    values = real_array(data_array.values, f"variable {name!r} of {what}")
    n_chain, n_draw = values.shape[:2]
    return values.reshape(n_chain, n_draw, -1)


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


def _plain_values(values):
    return [value.item() if isinstance(value, np.generic) else value for value in values]


def _matched_variable(score, name, draws, pair):
    """The score of one variable, its dims and labels matched to the draws' variable.

    Dims in the draws' order (by name); along a dim labelled in both, the score's
    entries taken by label (a score in another order is reordered); labels that differ
    are refused with both lists. A dim the score does not label is read by position.
    """
    mine = [dim for dim in score.dims if dim not in pair]
    theirs = [dim for dim in draws.dims if dim not in pair]
    if mine == theirs or (sorted(mine) == sorted(theirs) and len(set(mine)) == len(mine)):
        score = score.transpose(*pair, *theirs)
    elif any(dim in score.coords for dim in mine) or score.shape[2:] != draws.shape[2:]:
        raise ValueError(
            f"the score of {name!r} has dims {mine}; the draws' {name!r} has dims {theirs}: "
            "a labelled score must have the draws' dims."
        )
    else:
        return score   # unlabelled, same shape: by position
    for dim in theirs:
        if dim not in score.coords or dim not in draws.coords:
            continue
        have, want = _plain_values(score[dim].values), _plain_values(draws[dim].values)
        if have == want:
            continue
        if sorted(map(str, have)) != sorted(map(str, want)) or len(set(map(str, have))) != len(have):
            raise ValueError(
                f"the score's labels of {name!r} along {dim!r} do not match the draws': the "
                f"score has {have}, the draws have {want}. A labelled score is matched to "
                "the draws by label, never by position."
            )
        have = [str(value) for value in have]
        score = score.isel({dim: [have.index(str(value)) for value in want]})
    return score


def _matched_dataset(dataset, names, pair, reference, labels):
    """A score Dataset's variables ``names`` matched to the draws' (``reference``)."""
    missing = [name for name in names if name not in dataset.data_vars]
    if missing:
        raise ValueError(
            f"the score's variables do not match the draws': the draws are {list(names)}, "
            f"the score has {list(dataset.data_vars)} (no {missing}). A score Dataset holds "
            "grad log p of each variable of the draws under the variable's name."
        )
    if reference is None:
        return dataset
    # A new Dataset (assign would align the matched variables back to the score's order).
    return xr.Dataset({
        name: _matched_variable(dataset[name], name, reference[name], pair)
        if name in reference.data_vars else dataset[name] for name in names})
def user_scores(score, draws, labels, names, chain, draw, sample_dims, *, batched, chunk_size,
                reference=None):
    """Scores from a callable, an array, a DataArray or a Dataset, matched to the draws.

    A labelled score is aligned on the draws' (chain, draw) coordinates and, variable by
    variable, on the labels of their other dims (``reference``: the Dataset the draws
    were read from, sample dims ``sample_dims``); labels that differ are refused.
    """
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
            dataset = _matched_dataset(dataset, names, pair, reference, labels)
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
    values = real_array(score, "score")
    warn_if_low_precision(np.asarray(score).dtype, "score")
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
        return real_array(score.transpose(*pair).values, "score")[:, :, None]
    [parameter_dim] = other
    if parameter_dim in score.coords:
        have = [str(v) for v in score[parameter_dim].values]
        if sorted(have) == sorted(labels) and len(set(have)) == len(have):
            # The parameter labels say which column is which: follow them.
            score = score.isel({parameter_dim: [have.index(label) for label in labels]})
        elif have != [str(k) for k in range(len(have))]:   # positions label nothing
            raise ValueError(
                f"the score's parameter labels do not match the draws': the score has "
                f"{have}, the draws have {list(labels)}. A labelled score is matched to "
                "the draws by label, never by position."
            )
    return real_array(score.transpose(*pair, parameter_dim).values, "score")
