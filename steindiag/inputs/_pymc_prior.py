"""PyMC: prior draws as overdispersed starting points, in the unconstrained flat layout.

The search for unvisited mass (``steindiag.methods.missing_mass``) starts optimisers
from points spread more widely than the posterior; for a PyMC model the prior is the
natural choice. Prior draws of every free variable (``pymc.draw``) are mapped to the
value variables' unconstrained space with the model's forward transforms
(``_pymc_values.unconstrained_values``) and flattened in the layout steindiag uses for the
trace (``_pymc.model_layout`` order, each value variable in C order).

Imported lazily (only when a PyMC model is passed).
"""

import numpy as np

from steindiag._validate import check_int, check_rng
from steindiag.inputs import _pymc
from steindiag.inputs._labels import element_labels
from steindiag.inputs._pymc_values import unconstrained_values

__all__ = ["prior_starts"]

# Prior draws are drawn again (at most this many rounds) when some of them have no
# finite unconstrained value (a draw on the boundary of its support) or are off the
# support of their transform (pm.draw ignores the ordered transform's constraint).
_MAX_ROUNDS = 5

# A few dozen prior draws: the Python linker needs no C compilation (cold start).
_DRAW_MODE = "FAST_COMPILE"


def _layout_labels(model, layout):
    """Labels of the flat vector from the model alone (its coordinates, else positions)."""
    coords = getattr(model, "coords", None) or {}
    labels = []
    for var in layout:
        if tuple(var.value_shape) != tuple(var.shape) or var.dims is None:
            labels.extend(element_labels(var.value_name, var.value_shape))
        else:
            labels.extend(element_labels(var.value_name, var.value_shape, var.dims,
                                         {dim: np.asarray(values) for dim, values
                                          in coords.items() if values is not None}))
    return labels


def _check_parameter(parameter, layout, labels):
    """``parameter`` must name the flat layout's columns, in its order."""
    if parameter is None:
        return
    parameter = [str(name) for name in parameter]
    if parameter == labels:
        return
    # Labels built from the trace can carry other coordinate values than the model's;
    # the value variable each column belongs to must still match, column by column.
    owners = [var.value_name for var in layout for _ in range(var.size)]
    same_length = len(parameter) == len(owners)
    if same_length and all(name == owner or name.startswith(owner + "[")
                           for name, owner in zip(parameter, owners)):
        return
    raise ValueError(
        f"parameter does not match the model's unconstrained layout: expected {len(labels)} "
        f"columns {labels[:6]}{' ...' if len(labels) > 6 else ''}; got {len(parameter)} "
        f"{parameter[:6]}{' ...' if len(parameter) > 6 else ''}. Pass the parameter labels "
        "of draws read from this model."
    )


def prior_starts(model, parameter, n, rng):
    """Prior draws of ``model``'s free variables as flat unconstrained points.

    Parameters
    ----------
    model : pymc.Model
    parameter : list of str or None
        Labels of the flat columns the points must follow (the ``parameter`` of the
        draws read from this model, e.g. ``["mu", "tau_log__", "theta[0]", ...]``).
        Checked against the model's layout; None skips the check.
    n : int
        Number of points.
    rng : int, numpy.random.Generator or None
        Seed of the prior draws (``pymc.draw(random_seed=...)``).

    Returns
    -------
    ndarray of float64, shape (n, d)
        Value variables in ``model_layout`` order, each flattened in C order: the space
        and layout of the draws steindiag reads for this model. Every entry is finite.

    Raises
    ------
    TypeError
        If ``model`` is not a PyMC model or ``n`` not an integer.
    ValueError
        If ``parameter`` does not match the layout, if the model has a free variable
        that cannot be drawn from its prior (``pm.Flat``, ``pm.HalfFlat``; pass starts
        of your own or none), or if fewer than ``n`` of ``5 n`` prior draws have a
        finite unconstrained value in the support of every transform.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from steindiag.inputs._pymc_prior import prior_starts
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 10)
    ...     sigma = pm.HalfNormal("sigma", 1)
    >>> x = prior_starts(model, ["mu", "sigma_log__"], 5, rng=0)
    >>> x.shape, bool(np.isfinite(x).all())
    ((5, 2), True)
    """
    n = check_int(n, "n", minimum=1)
    layout = _pymc.model_layout(model)
    _check_parameter(parameter, layout, _layout_labels(model, layout))
    rng = check_rng(rng)
    import pymc as pm

    kept, have = [], 0
    for _ in range(_MAX_ROUNDS):
        try:
            values = pm.draw([var.rv for var in layout], draws=int(n), random_seed=rng,
                             mode=_DRAW_MODE)
        except NotImplementedError as error:
            raise ValueError(
                "the model's prior cannot be drawn from (a pm.Flat or pm.HalfFlat free "
                f"variable?): {error}. Give starts of your own or let the search widen the "
                "draws."
            ) from error
        arrays = [np.asarray(value).reshape(int(n), *var.shape)
                  for value, var in zip(values, layout)]
        flat, outside = unconstrained_values(model, layout, arrays,
                                             ["constrained"] * len(layout))
        # Off the support (e.g. an unsorted draw of an ordered variable): no valid start.
        good = np.all(np.isfinite(flat), axis=1)
        for bad in outside.values():
            good &= ~bad
        flat = flat[good]
        kept.append(flat)
        have += flat.shape[0]
        if have >= n:
            break
    flat = np.concatenate(kept)[: int(n)]
    if flat.shape[0] < n:
        raise ValueError(
            f"only {flat.shape[0]} of {_MAX_ROUNDS * n} prior draws have a finite "
            "unconstrained value; give starts of your own or let the search widen the draws."
        )
    return np.ascontiguousarray(flat, dtype=np.float64)
