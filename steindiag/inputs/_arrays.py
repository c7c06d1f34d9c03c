"""Arrays as input: the layout of their axes (``sample_dims``) and their score source.

Data flow::

    array (chain, draw, d) | (draw, chain, d) | (draw, d) | ... , sample_dims
      -> float64 (chain, draw, d) view of the draws, labels x[0], x[1], ...
    + score: array of the same shape | callable on (n, d) or (d,) -> (chain, draw, d)
"""

import numpy as np

from steindiag._containers import ARRAY_LAYOUTS, apply_layout, array_sample_dims
from steindiag._validate import (as_draws_array, evaluate_score_callable, real_array,
                                 warn_if_low_precision, warn_user)
from steindiag.inputs._labels import array_labels

__all__ = ["array_layout", "raw_array", "read_array_draws", "check_array_score", "array_scores"]

_ARRAY_SHAPES = {
    ("chain", "draw"): "(chain, draw, d) or (chain, draw) for d = 1",
    ("draw", "chain"): "(draw, chain, d) or (draw, chain) for d = 1",
    ("draw",): "(draw, d) or (draw,) for d = 1",
}


def array_layout(array, sample_dims, name):
    """View of a NumPy array as (chain, draw, d), as its ``sample_dims`` say.

    ``sample_dims=None``: (chain, draw, d), or (draw, d) for one chain. Refuses a 2-D
    array with no more rows than columns (it reads as fewer draws than parameters, as a
    (chain, draw) array of a one-parameter target would), and warns for more chains than
    draws per chain (emcee's get_chain() is (draw, walker, d)): explicit ``sample_dims``
    settle both.
    """
    if sample_dims is None:
        if array.ndim == 1:
            raise ValueError(
                f"{name} has shape {array.shape}: for one chain of a one-parameter target "
                "pass sample_dims=('draw',) (or a (draw, 1) array)."
            )
        if array.ndim == 2 and 0 < array.shape[0] <= array.shape[1]:
            raise ValueError(
                f"{name} has shape {array.shape}: a 2-D array is read as (draw, d), here "
                f"{array.shape[0]} draws of {array.shape[1]} parameters. If it is (chain, "
                "draw) of a one-parameter target, pass sample_dims=('chain', 'draw') (or "
                f"{name}[..., None], shape (chain, draw, 1)); if it really is (draw, d), "
                "pass sample_dims=('draw',)."
            )
        if array.ndim == 3 and array.shape[0] > array.shape[1] >= 2:
            warn_user(
                f"{name} has shape {array.shape}, read as (chain, draw, d): {array.shape[0]} "
                f"chains of {array.shape[1]} draws each. If it is (draw, chain, d), as "
                "emcee's get_chain() returns (step, walker, d), pass sample_dims=('draw', "
                "'chain') or swap the axes with np.swapaxes(x, 0, 1); if these are chains, "
                "pass sample_dims=('chain', 'draw') to say so."
            )
    elif array.ndim not in ARRAY_LAYOUTS[sample_dims]:
        raise ValueError(
            f"{name} must have shape {_ARRAY_SHAPES[sample_dims]} with "
            f"sample_dims={sample_dims}; got shape {array.shape}."
        )
    return apply_layout(array, sample_dims)


def raw_array(value, name):
    """``np.asarray(value)``, with a TypeError naming ``name`` if NumPy cannot take it."""
    try:
        array = np.asarray(value)
    except Exception as err:  # noqa: BLE001 - anything numpy cannot take
        raise TypeError(f"{name} must be array-like; got {type(value).__name__}.") from err
    if isinstance(value, np.ma.MaskedArray) or np.iscomplexobj(array):
        real_array(value, name)   # masked entries or complex values: refused, named
    return array


def read_array_draws(data, sample_dims):
    """(raw array, layout key, float64 (chain, draw, d) draws, labels) of an array."""
    layout = array_sample_dims(sample_dims)
    raw = raw_array(data, "data")
    draws = as_draws_array(array_layout(raw, layout, "data"), "data")
    return raw, layout, draws, array_labels(draws.shape[2])


def check_array_score(score, raw):
    """An array ``score`` must have the shape of ``data``: checked before any evaluation."""
    if score is None or callable(score):
        return
    raw_score = raw_array(score, "score")
    if raw_score.shape != raw.shape:
        raise ValueError(
            f"score must have the same shape as data; got score {raw_score.shape} and "
            f"data {raw.shape}."
        )


def array_scores(score, raw, layout, draws, batched):
    """(scores (chain, draw, d), source) of a callable or an array ``score``."""
    if callable(score):
        return evaluate_score_callable(score, draws, batched=batched), "callable"
    raw_score = raw_array(score, "score")
    scores = as_draws_array(apply_layout(raw_score, layout), "score")
    warn_if_low_precision(raw_score.dtype, "score")
    return scores, "arrays"
