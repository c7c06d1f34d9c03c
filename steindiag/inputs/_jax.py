"""JAX log densities as score sources; positions given as JAX pytrees (BlackJAX).

Data flow::

    positions: array (chain, draw, d) | pytree of (chain, draw, ...) leaves | blackjax
               state history (.position), (draw, chain, ...) with sample_dims=("draw", "chain")
    + log_density: a JAX-traceable function of ONE position (a pytree like the positions,
      or the flat (d,) vector for an array), log p up to a constant
      -> xarray.Dataset of the positions (one variable per leaf, named by its path)
      -> read as any trace (labels: ``mu``, ``theta[0]``, ...; see ``_labels``)
      -> JaxTarget: flat (n, d) -> scores (n, d) and log p (n,), by
         jax.jit(jax.vmap(jax.grad(...))) in float64, on chunks of a fixed number of draws

JAX is imported only here (and in ``_numpyro``), only when such an input is given. Every
JAX call runs with 64-bit types enabled for the call (``jax.enable_x64``): JAX's float32
default carries about 7 digits, too few to check a score (see ``warn_if_low_precision``).
"""

from collections.abc import Mapping
from contextlib import contextmanager

import numpy as np
import xarray as xr

from steindiag._containers import is_labelled, layout_key
from steindiag._types import Origin
from steindiag.inputs._arrays import read_array_draws
from steindiag.inputs._functions import ScoreSource
from steindiag.inputs._trace import read_labelled

__all__ = ["JaxTarget", "is_jax_input", "is_position_pytree", "read_jax", "derived_input",
           "require_jax", "x64", "in_chunks", "split_blocks", "check_no_compile_mode"]

# Draws per evaluation of a JAX function: memory O(CHUNK x the function's intermediates).
# Inputs are padded to a whole chunk (or to SMALL_CHUNK for the few points of a search),
# so each function is compiled once per chunk size, whatever the number of draws.
CHUNK = 1024
SMALL_CHUNK = 16


def _module(value):
    return type(value).__module__ or ""


def is_position_pytree(data):
    """Positions as a pytree: a dict of arrays, or a sampler state with ``.position``."""
    module = _module(data)
    if module.startswith(("xarray", "arviz", "datatree", "numpy", "pandas")):
        return False
    if isinstance(data, Mapping):
        return True
    return hasattr(data, "position") and module.startswith(("blackjax", "jax"))


def is_jax_input(data, model, score, log_density, labelled):
    """Whether the input is JAX positions or an array with a JAX log density (not numpyro).

    ``labelled``: whether ``data`` is an xarray / ArviZ container. Decided from types and
    arguments only; nothing is imported.
    """
    if is_position_pytree(data):
        return True
    return score is None and callable(log_density) and model is None and not labelled


@contextmanager
def x64():
    """64-bit types in JAX for the duration of the block (the caller's setting after)."""
    import jax

    enable = getattr(jax, "enable_x64", None)
    if enable is None:
        from jax.experimental import enable_x64 as enable
    with enable(True):
        yield


def _jax_leaves(position):
    """[(name, leaf)] of a pytree in JAX's flattening order; names from the key paths."""
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path(position)
    named = []
    for path, leaf in flat:
        parts = []
        for key in path:
            for attribute in ("key", "name", "idx"):
                if hasattr(key, attribute):
                    parts.append(str(getattr(key, attribute)))
                    break
        named.append((".".join(parts) or "x", leaf))
    return named


class JaxTarget:
    """grad log p and log p of a JAX log density, evaluated on flat parameter vectors.

    Parameters
    ----------
    log_density : callable
        JAX-traceable, one position -> scalar log p (up to a constant).
    unravel : callable
        Flat (d,) vector -> the position ``log_density`` takes (identity for a flat one).
    d : int
        Length of the flat vector.
    name : str
        How errors name the function (``"log_density"``, ``"numpyro's potential_energy"``).

    Notes
    -----
    ``score`` and ``log_density`` take an (n, d) batch (or one (d,) vector) of float64 and
    return (n, d) and (n,) (or (d,) and a float). Each is ``jax.jit(jax.vmap(...))`` of
    ``jax.grad`` / the function itself, traced with 64-bit types, evaluated on chunks of
    ``CHUNK`` draws (``SMALL_CHUNK`` for at most that many), the last one padded: memory
    O(CHUNK x the function's intermediates), one compilation per chunk size.
    """

    def __init__(self, log_density, unravel, d, *, name="log_density"):
        import jax

        def flat_log_density(flat):
            return log_density(unravel(flat))

        self.d = int(d)
        self.name = name
        self._grad = jax.jit(jax.vmap(jax.grad(flat_log_density)))
        self._value = jax.jit(jax.vmap(flat_log_density))

    def _evaluate(self, function, points):
        points = np.asarray(points, dtype=np.float64)
        flat = points.reshape(-1, self.d)
        n = flat.shape[0]
        out = in_chunks(function, flat, n, SMALL_CHUNK if n <= SMALL_CHUNK else CHUNK)
        return out[0] if points.ndim == 1 else out

    def score(self, points):
        """grad log p at an (n, d) batch (or one (d,) vector)."""
        return self._evaluate(self._grad, points)

    def log_density(self, points):
        """log p at an (n, d) batch, shape (n,) (or a float for one (d,) vector)."""
        return self._evaluate(self._value, points)


def in_chunks(function, inputs, n, size=CHUNK):
    """``function`` (a ``jax.jit`` of a ``jax.vmap``) on the ``n`` rows of ``inputs`` (an
    array, or a dict of arrays), ``size`` rows at a time with 64-bit types, the last chunk
    padded with copies of its last row (one compilation per size); its outputs (an array,
    or a dict of arrays) as float64, concatenated."""
    def rows_of(value, start, rows):
        block = value[start:start + size]
        return block if rows == size else np.concatenate(
            [block, np.repeat(block[-1:], size - rows, axis=0)])

    pieces = []
    with x64():
        for start in range(0, n, size):
            rows = min(size, n - start)
            out = function({name: rows_of(value, start, rows) for name, value in inputs.items()}
                           if isinstance(inputs, dict) else rows_of(inputs, start, rows))
            pieces.append({name: np.asarray(value, dtype=np.float64)[:rows]
                           for name, value in out.items()} if isinstance(out, dict)
                          else np.asarray(out, dtype=np.float64)[:rows])
    if pieces and isinstance(pieces[0], dict):
        return {name: np.concatenate([piece[name] for piece in pieces]) for name in pieces[0]}
    return np.concatenate(pieces) if pieces else np.empty((0,))


def split_blocks(shapes):
    """flat (d,) vector -> its consecutive blocks, reshaped to ``shapes`` (C order)."""
    bounds = np.cumsum([0, *(int(np.prod(shape, dtype=np.int64)) for shape in shapes)])
    return lambda flat: [flat[bounds[k]:bounds[k + 1]].reshape(shape)
                         for k, shape in enumerate(shapes)]


def check_traceable(log_density, example, name="log_density"):
    """Refuse a log density that JAX cannot trace, or whose value is not a scalar.

    ``jax.eval_shape`` traces it once on ``example`` (one position) without computing.
    """
    import jax

    try:
        with x64():
            out = jax.eval_shape(log_density, example)
    except Exception as err:  # noqa: BLE001 - any failure to trace is the user's function
        raise TypeError(
            f"{name} is not JAX-traceable ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}): with no score= given, the "
            "score is derived from it by jax.grad, which needs a function written with "
            "jax.numpy (no NumPy or SciPy calls, no float() of its argument). Pass score= "
            "(a callable or an array of grad log p at each draw) as well, or write "
            f"{name} with jax.numpy."
        ) from err
    if getattr(out, "shape", None) != ():
        raise ValueError(
            f"{name} must map one position to a scalar log p (it is vectorised with "
            f"jax.vmap); it returned shape {getattr(out, 'shape', None)} for one position. "
            "Write it for a single draw, not a batch."
        )


# --------------------------------------------------------------------------------------
# positions as a pytree
# --------------------------------------------------------------------------------------


def _pytree_sample_dims(sample_dims):
    """sample_dims of a pytree: ('chain', 'draw') (default), ('draw', 'chain') or ('draw',)."""
    if sample_dims is None:
        return ("chain", "draw")
    return layout_key(
        sample_dims,
        "for positions given as a pytree, sample_dims names the leading axes of every "
        "leaf: ('chain', 'draw') (default), ('draw', 'chain') (a blackjax state history "
        "of chains run with jax.vmap inside jax.lax.scan) or ('draw',) (one chain);")


def positions_dataset(data, sample_dims):
    """(Dataset of the leaves with dims (chain, draw, ...), leaf names, treedef, shapes).

    The Dataset keeps each leaf's values in the layout given (a transpose is a view); its
    sample dims are named "chain" and "draw" whatever their order.
    """
    import jax

    position = data.position if hasattr(data, "position") and not isinstance(data, Mapping) \
        else data
    named = _jax_leaves(position)
    if not named:
        raise ValueError("data is a pytree with no leaves: there are no draws to read.")
    n_lead = len(sample_dims)
    variables, shapes, lead = {}, [], None
    for name, leaf in named:
        values = np.asarray(leaf)
        if values.ndim < n_lead:
            raise ValueError(
                f"leaf {name!r} of the positions has shape {values.shape}, fewer axes than "
                f"sample_dims={sample_dims} names."
            )
        if lead is None:
            lead = (name, values.shape[:n_lead])
        elif values.shape[:n_lead] != lead[1]:
            raise ValueError(
                f"the leaves of the positions disagree in their leading {sample_dims} axes: "
                f"{lead[0]!r} has {lead[1]}, {name!r} has {values.shape[:n_lead]} (shapes "
                f"{[np.shape(leaf) for _, leaf in named]}). Every leaf must hold the same "
                "draws: pass sample_dims= for the layout (('draw', 'chain') for a blackjax "
                "state history of vmapped chains)."
            )
        if name in variables:
            raise ValueError(f"two leaves of the positions are both named {name!r}.")
        shape = values.shape[n_lead:]
        dims = (*sample_dims, *(f"{name}_dim_{k}" for k in range(len(shape))))
        variables[name] = (dims, values)
        shapes.append(shape)
    _, treedef = jax.tree_util.tree_flatten(position)
    dataset = xr.Dataset(variables)
    for dim in sample_dims:
        dataset = dataset.assign_coords({dim: np.arange(dataset.sizes[dim])})
    return dataset, [name for name, _ in named], treedef, shapes


def pytree_unravel(treedef, shapes):
    """Flat (d,) vector -> the pytree (leaves in JAX's flattening order, C order each)."""
    import jax

    split = split_blocks(shapes)
    return lambda flat: jax.tree_util.tree_unflatten(treedef, split(flat))


# --------------------------------------------------------------------------------------
# the entry point
# --------------------------------------------------------------------------------------


def check_no_compile_mode(compile_mode):
    """compile_mode is PyTensor's: refused for the inputs JAX compiles."""
    if compile_mode is not None:
        raise TypeError(
            "compile_mode chooses how a PyMC model's graph is compiled; with a numpyro MCMC "
            "or a JAX log density nothing is compiled by PyTensor (JAX compiles with "
            f"jax.jit). Drop compile_mode (got {compile_mode!r})."
        )


def _jax_input_iv(data, model, score, log_density, var_names, coords, compile_mode,
                  is_pytree):
    check_no_compile_mode(compile_mode)
    if is_pytree:
        if score is not None:
            raise TypeError(
                "data is a pytree of positions: the score is derived from log_density= by "
                "jax.grad, so score= must be None; for a score of your own, pass the draws "
                "as a (chain, draw, d) array."
            )
        if var_names is not None:
            raise TypeError(
                "var_names cannot be used with positions given as a pytree: the log density "
                f"takes the whole position; got var_names={var_names!r}."
            )
    if log_density is not None and not callable(log_density):
        raise TypeError(
            "log_density must be a JAX-traceable function of one position (a pytree like "
            "the positions, or the flat parameter vector of an array); got "
            f"{type(log_density).__name__}."
        )


def _check_sample_coords(coords, sample_dims, what):
    """With a JAX log density, coords may select along the sample dims only."""
    other = [dim for dim in (coords or {}) if dim not in sample_dims]
    if other:
        raise ValueError(
            f"coords selects along {other}, but the score of {what} is the gradient with "
            "respect to the whole position, so every element must be kept: coords can "
            f"select along {list(sample_dims)} only (e.g. coords={{'draw': slice(100, "
            "None)}})."
        )


def require_jax():
    """Import JAX, or say what this input needs."""
    try:
        import jax  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "this input (a pytree of positions, a log_density with no score=, or a numpyro "
            "MCMC) is read with JAX, which is not installed: pip install jax (or "
            "steindiag's 'ecosystems' extra), or pass the draws as an array with score=."
        ) from err


def derived_input(pending, *, target, container, source, attrs, group, coords, sample_dims):
    """``pending`` with the score source the reader derived (a ``JaxTarget``, or None when
    no score is needed) and the container its draws came from (a labelled trace, whose
    sample dims are then ("chain", "draw"), or the array given)."""
    complete = pending.complete

    def with_source():
        prepared = complete()
        prepared.attrs = {**prepared.attrs, **attrs, "score_source": source}
        return prepared

    pending.attrs = {**pending.attrs, **attrs}
    pending.complete = with_source
    pending.source = ScoreSource() if target is None else ScoreSource(
        score=target.score, log_density=target.log_density, batched=True,
        constrain=getattr(target, "constrain", None))
    labelled = is_labelled(container)
    pending.origin = Origin(data=container, group=group, coords=coords,
                            sample_dims=("chain", "draw") if labelled else sample_dims,
                            labelled=labelled)
    return pending


def read_jax(data, model, *, score, log_density, group, var_names, coords, sample_dims,
             space, need_score, compile_mode, batched=True):
    """The ``PendingInput`` of JAX pytree positions, or of an array with a JAX log density."""
    require_jax()
    is_pytree = is_position_pytree(data)
    _jax_input_iv(data, model, score, log_density, var_names, coords, compile_mode, is_pytree)
    if model is not None:
        raise TypeError(
            "model must be a pymc.Model or a numpyro MCMC; with a JAX log density, pass "
            f"log_density= alone (got model of type {type(model).__name__})."
        )
    if space is not None and space not in ("unconstrained", "constrained"):
        raise ValueError(f"space must be None, 'unconstrained' or 'constrained'; got {space!r}.")
    if is_pytree:
        layout = _pytree_sample_dims(sample_dims)
        _check_sample_coords(coords, layout, "positions given as a pytree")
        dataset, names, treedef, shapes = positions_dataset(data, layout)
        unravel = pytree_unravel(treedef, shapes)
        d = int(sum(np.prod(shape, dtype=np.int64) for shape in shapes))
        trace_dims = ("chain", "draw") if len(layout) == 2 else ("draw",)
        container = dataset if len(layout) == 2 else dataset.expand_dims(chain=[0])
        example = unravel(np.zeros(d))
    else:
        if var_names is not None or coords is not None:
            raise TypeError("var_names and coords apply to labelled traces only; data is an "
                            "array.")
        _, layout, draws, labels = read_array_draws(data, sample_dims)
        n_chain, n_draw, d = draws.shape
        dataset = xr.Dataset(
            {"x": (("chain", "draw", "x_dim_0"), draws)},
            coords={"chain": np.arange(n_chain), "draw": np.arange(n_draw)},
        )
        names, trace_dims, container = ["x"], ("chain", "draw"), data
        unravel = _identity
        example = np.zeros(d)
    if log_density is None:
        if need_score:
            raise TypeError(
                "positions given as a pytree need log_density= (a JAX-traceable function "
                "of one position): the score is derived from it by jax.grad."
            )
        target = None
    else:
        check_traceable(log_density, example)
        target = JaxTarget(log_density, unravel, d)
    pending = read_labelled(
        dataset, None, score=None if target is None else target.score, group=group,
        coords=coords, var_names=names, sample_dims=trace_dims, space=space,
        need_score=need_score,
    )
    if not is_pytree:
        pending.parameter = list(labels)
    attrs = {"score_from": "jax.grad of log_density"} if target is not None else {}
    return derived_input(pending, target=target, container=container, source="jax",
                         attrs=attrs, group=group, coords=coords, sample_dims=sample_dims)


def _identity(flat):
    return flat
