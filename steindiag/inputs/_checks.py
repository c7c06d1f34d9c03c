"""Checks of the input layer shared by its readers (no reader is imported here).

``check_space`` and ``check_compile_mode`` run before anything is read;
``check_score_scale`` and ``warn_zero_score_columns`` once the scores are known (the
reading step runs them in ``PendingInput.with_scores``).
"""

import numpy as np

from steindiag._validate import LOG10_HEADROOM, warn_user

__all__ = ["SPACES", "check_space", "check_compile_mode",
           "check_score_scale", "warn_zero_score_columns", "where_not_finite"]

SPACES = ("unconstrained", "constrained")


def check_space(space, model):
    """``space`` is None, "unconstrained" or "constrained"; a PyMC model fixes it."""
    if space is None:
        return
    if not isinstance(space, str) or space not in SPACES:
        raise ValueError(f"space must be None, 'unconstrained' or 'constrained'; got {space!r}.")
    if model is not None and space != "unconstrained":
        raise ValueError(
            "with model=, draws and scores are in the model's unconstrained space (its value "
            f"variables); space={space!r} cannot be combined with a model."
        )


# PyTensor backends that need a package of their own: mode name -> module.
_BACKEND_MODULES = {"JAX": "jax", "PYTORCH": "torch", "MLX": "mlx"}


def check_compile_mode(compile_mode, model):
    """``compile_mode`` is None, a PyTensor mode name or a ``Mode``; it needs ``model``.

    Refused without ``model``: nothing is compiled then, and silently ignoring the
    option would hide a script that does not do what it says. PyTensor is imported
    only when ``compile_mode`` is given (it is given with a PyMC model).
    """
    if compile_mode is None:
        return
    if model is None:
        raise TypeError(
            "compile_mode chooses how a PyMC model's score graph is compiled and needs "
            f"model=; no model was passed (compile_mode={compile_mode!r}). Drop "
            "compile_mode, or pass the model."
        )
    from pytensor.compile.mode import Mode, get_mode

    if isinstance(compile_mode, Mode):
        return
    if not isinstance(compile_mode, str):
        raise TypeError(
            "compile_mode must be a PyTensor mode name (e.g. 'CVM', 'NUMBA', 'JAX', "
            f"'FAST_RUN', 'FAST_COMPILE') or a pytensor Mode; got {compile_mode!r}."
        )
    try:
        get_mode(compile_mode)
    except ValueError:
        from pytensor.compile.mode import predefined_modes

        names = sorted({*predefined_modes, "FAST_RUN"})
        raise ValueError(
            f"compile_mode must name a PyTensor mode, one of {names} (or be a pytensor "
            f"Mode); got {compile_mode!r}."
        ) from None
    module = _BACKEND_MODULES.get(compile_mode.upper())
    if module is not None:
        from importlib.util import find_spec

        if find_spec(module) is None:
            raise ValueError(
                f"compile_mode={compile_mode!r} needs the {module!r} package, which is not "
                "installed; install it or choose another mode (e.g. 'CVM' or 'NUMBA')."
            )


def check_score_scale(prepared):
    """Refuse scores that, times the draws' spread, overflow the Stein kernel's products.

    The default preconditioner divides each parameter by its spread and multiplies its
    score by it, and the kernel then multiplies scores together: |score| x spread (a
    product that does not depend on the parameter's units) must stay below
    10^(LOG10_HEADROOM / 2). O(N d), logs only (no overflow warnings). The product in the
    preconditioner actually used is checked again where the kernel's coordinates are
    made (``Preconditioner.to_kernel_coordinates``).
    """
    d = prepared.draws.shape[2]
    flat_draws = prepared.draws.reshape(-1, d)
    largest_score = np.max(np.abs(prepared.scores.reshape(-1, d)), axis=0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        spread = np.max(flat_draws, axis=0) - np.min(flat_draws, axis=0)
        log_product = np.log10(largest_score) + np.log10(spread)
    log_product = np.where(np.isnan(log_product), -np.inf, log_product)
    worst = int(np.argmax(log_product))
    if log_product[worst] <= LOG10_HEADROOM / 2:
        return
    raise ValueError(
        f"score: |grad log p| reaches {largest_score[worst]:.3g} for {prepared.parameter[worst]!r}, "
        f"whose draws span {spread[worst]:.3g}; the Stein kernel multiplies the score by the "
        f"draws' scale and then scores together, so this (about 1e{log_product[worst]:.0f}, "
        f"above 1e{LOG10_HEADROOM / 2:.0f}) overflows float64 and KSD would be inf or NaN. "
        "Draws this far from where the score puts p's mass do not fit p; if they should, "
        "the draws and the score disagree in units, space (space=) or order of the "
        "parameters (var_names=). Rescale the parameters so that draws and scores are of "
        "moderate size."
    )


def warn_zero_score_columns(prepared):
    """Warn about parameters whose score is exactly 0 at every draw while the draws vary.

    No proper density is flat along a coordinate; such a column is almost always a
    deterministic quantity (numpyro.deterministic, a PyMC Deterministic, a Stan
    generated quantity) flattened into the draws, and it inflates KSD.
    """
    d = prepared.draws.shape[2]
    zero = np.all(prepared.scores.reshape(-1, d) == 0.0, axis=0)
    if not zero.any():
        return
    flat = prepared.draws.reshape(-1, d)
    varies = flat.max(axis=0) > flat.min(axis=0)
    columns = np.flatnonzero(zero & varies)
    if columns.size == 0:
        return
    names = [prepared.parameter[k] for k in columns[:10]]
    more = f" and {columns.size - 10} more" if columns.size > 10 else ""
    warn_user(
        f"the score is exactly 0 at every draw for {columns.size} of {d} parameter(s), "
        f"{names}{more}, while their draws vary: log p does not depend on them, so they are "
        "not parameters of the target. This is usually a deterministic quantity "
        "(numpyro.deterministic, a PyMC Deterministic, a Stan transformed parameter or "
        "generated quantity) flattened into the draws; it inflates KSD. Leave it out "
        "(var_names= for a trace; keep only the sampled sites when flattening). If the "
        "target really is flat there (a uniform prior with no likelihood term for them, "
        "e.g. a box), KSD cannot test it: the Stein identity needs a density that is "
        "smooth and positive on all of R^d, and a box has edges; sample in unconstrained "
        "coordinates (a logit transform, its log-Jacobian in log p) instead."
    )


def where_not_finite(array, chain, draw, labels, what, hint):
    bad = ~np.isfinite(array)
    if not bad.any():
        return
    bad_draw = bad.any(axis=2)
    chain_idx, draw_idx = np.nonzero(bad_draw)
    where = ", ".join(
        f"(chain={chain[c].item()!r}, draw={draw[t].item()!r})"
        for c, t in zip(chain_idx[:5], draw_idx[:5])
    )
    more = f" and {len(chain_idx) - 5} more" if len(chain_idx) > 5 else ""
    per_parameter = bad.sum(axis=(0, 1))
    columns = [
        f"{labels[k]}: {int(per_parameter[k])}" for k in np.flatnonzero(per_parameter)[:10]
    ]
    raise ValueError(
        f"{what} are not finite at {len(chain_idx)} of {bad_draw.size} draws: {where}{more}. "
        f"Non-finite entries per parameter: {', '.join(columns)}. {hint}"
    )
