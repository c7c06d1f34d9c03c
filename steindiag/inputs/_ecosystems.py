"""Samplers' own objects as input: which reader takes them (emcee, pystan, CmdStanPy).

``read_input`` asks :func:`read_ecosystem` first; it returns None for every other input,
so the array and trace readers are untouched. Each reader lives in its own module and
imports nothing of its library: the objects are used through their own methods.
"""

from steindiag.inputs._emcee import is_emcee_sampler, read_emcee
from steindiag.inputs._stan import is_stan_input, read_stan

import numpy as np

__all__ = ["read_ecosystem", "is_ecosystem_input", "as_plain_sources"]


def is_ecosystem_input(data, model=None):
    """Whether ``data`` (with ``model``) is a sampler object one of the readers takes."""
    return is_emcee_sampler(data) or is_stan_input(data, model)


def read_ecosystem(data, model=None, **options):
    """The ``PendingInput`` of a sampler object, or None if ``data`` is not one.

    ``options`` are ``read_input``'s (score, batched, group, var_names, coords,
    sample_dims, space, need_score, compile_mode).
    """
    if is_emcee_sampler(data):
        reader = read_emcee
    elif is_stan_input(data, model):
        reader = read_stan
    else:
        return None
    if options.pop("compile_mode", None) is not None:
        raise TypeError("compile_mode applies to PyMC models only; data is a "
                        f"{type(data).__module__}.{type(data).__name__}.")
    if options.pop("group", "posterior") != "posterior":
        raise ValueError(f"group applies to traces; data is a {type(data).__name__}.")
    return reader(data, model, **options)


def as_plain_sources(pending, data, model, score, log_density, batched):
    """For a sampler's own object, the sources the rest of a function reads.

    Functions that evaluate the score or log p again (corrections, thinning, SVGD), or
    label their output from ``data``, take the draws as a (chain, draw, d) array and the
    sampler's own log p and score as batched callables; other input is returned as is.

    Returns
    -------
    data, model, score, log_density, batched
    """
    if pending.log_density is None:
        return data, model, score, log_density, batched
    if log_density is None:
        log_density = pending.log_density
    elif callable(log_density) and not batched:
        given = log_density
        log_density = lambda points: np.array([given(row) for row in points])  # noqa: E731
    return pending.draws, None, pending.score_function, log_density, True
