"""Checks that the draws are in the space the caller says: constrained columns named so.

A trace read with ``space="unconstrained"`` (or a sampler's coordinates taken as given)
should hold unconstrained coordinates; a column that is strictly positive in every draw
(or inside (0, 1)) while its name says it is a scale (``sigma``, ``tau``, ...) or a
probability (``p``, ``prob``, ...) is almost surely stored constrained: its score, taken
in the unconstrained space, does not belong to it, and KSD is then large on a healthy run.
The check warns before anything is computed; it only reads the draws (O(N d)).

A trace written by a sampler library that transforms its variables (ArviZ's
``inference_library`` attribute) stores constrained values: with a user's score and no
model, the space must then be said (``check_trace_space``).
"""

import re

import numpy as np

from steindiag._validate import warn_user

__all__ = ["warn_constrained_columns", "warn_constrained_variables", "is_untransformed",
           "check_trace_space", "score_failure_hint"]

# Libraries whose stored draws are the sampler's own coordinates (no transforms): the
# draws of their traces are taken as given with a score and no ``space``.
_UNTRANSFORMED_LIBRARIES = ("emcee",)

# Name parts that say "a positive quantity" and "a probability"; parts that say the
# column is already unconstrained (a log or logit of one) silence both.
_POSITIVE = {"sigma", "tau", "scale", "sd", "std", "stdev", "stddev", "variance",
             "precision", "rate", "lambda", "lam", "kappa", "nu", "concentration",
             "dispersion"}
_UNIT = {"p", "prob", "probs", "probability", "pi", "frac", "fraction", "proportion"}
_UNCONSTRAINED = {"log", "logit", "logodds", "unc", "unconstrained", "raw", "z", "interval",
                  "lowerbound", "upperbound"}


def _name_parts(name):
    return {part for part in re.split(r"[^a-z0-9]+", name.lower()) if part}


def _kind(name):
    """"positive", "unit" or None: what the variable's name says it is."""
    parts = _name_parts(name)
    if parts & _UNCONSTRAINED or name.endswith("__"):
        return None
    if parts & _UNIT:
        return "unit"
    if parts & _POSITIVE:
        return "positive"
    return None


def warn_constrained_columns(names, columns, draws, space, labels):
    """Warn when columns named as constrained quantities look stored constrained.

    Parameters
    ----------
    names : list of str
        Variable names, one per block of columns.
    columns : list of array of int
        The draws' columns of each variable.
    draws : ndarray (chain, draw, d)
    space : str
        What the caller said the draws are ("unconstrained" or "as given ...").
    labels : list of str
        The columns' labels.
    """
    flat = draws.reshape(-1, draws.shape[-1])
    low, high = flat.min(axis=0), flat.max(axis=0)
    found = []
    for name, index in zip(names, columns):
        kind = _kind(name)
        if kind is None or len(index) == 0:
            continue
        index = np.asarray(index)
        positive = bool(np.all(low[index] > 0))
        if kind == "unit" and positive and np.all(high[index] < 1):
            found.append((name, "inside (0, 1)", "a probability", "logit"))
        elif kind == "positive" and positive and flat.shape[0] >= 20:
            found.append((name, "strictly positive", "a positive quantity", "log"))
    if not found:
        return
    said = ", ".join(f"{name!r} is {where} in every draw" for name, where, _, _ in found)
    fixes = ", ".join(f"{name!r} (its {transform})" for name, _, _, transform in found)
    if space.startswith("as given"):
        # A sampler without transforms (emcee): its coordinates are the stored values.
        warn_user(
            f"the draws are the sampler's own coordinates (no transforms), but {said}: a "
            "log density that is -inf outside a bound is not smooth and positive on all "
            "of R^d, which KSD needs, and its score near the bound does not describe the "
            f"draws. Sample the unconstrained coordinates instead, {fixes}, with the "
            "log-Jacobian of the transform added to the log density.")
        return
    warn_user(
        f"the draws are said to be {space!r}, but {said}, as {found[0][2]} stored "
        "constrained would be: a score taken in the unconstrained space does not belong to "
        "constrained values, and KSD is then large on a healthy run. If the trace stores "
        f"constrained values, pass their unconstrained images instead, {fixes} (or the "
        "sampler's own object: numpyro's MCMC, emcee's sampler, a Stan fit with its "
        "model), or say space='constrained' if the score is grad log p of the stored "
        "values themselves.")


def score_failure_hint(var_names, labels, chose_all):
    """What to add to a score's failure when every variable of the trace was passed to it."""
    if not chose_all:
        return ""
    return (f" The draws passed to the score were every variable of the trace, "
            f"{var_names} ({len(labels)} columns): if some are deterministic quantities "
            "(numpyro.deterministic, Stan's transformed parameters or generated quantities) "
            "or not parameters of the score, select the parameters with var_names=.")


def _inference_library(data, posterior):
    """The library that wrote the trace (ArviZ's ``inference_library`` attribute), or None."""
    for attrs in (posterior.attrs, getattr(data, "attrs", None) or {}):
        library = attrs.get("inference_library")
        if library:
            return str(library)
    return None


def is_untransformed(data, posterior):
    """Whether the trace was written by a library without transforms (emcee)."""
    library = _inference_library(data, posterior)
    return library is not None and library.lower() in _UNTRANSFORMED_LIBRARIES


def warn_constrained_variables(posterior, var_names, pair, draws, space, labels):
    """``warn_constrained_columns`` for the variables ``var_names`` of a trace."""
    columns, start = [], 0
    for name in var_names:
        size = int(np.prod([posterior[name].sizes[dim] for dim in posterior[name].dims
                            if dim not in pair]))
        columns.append(np.arange(start, start + size))
        start += size
    warn_constrained_columns(var_names, columns, draws, space, labels)


class SpaceNotKnown(ValueError):
    """The space of a sampler's stored draws cannot be told; ``without_space`` is the
    advice for a function that takes no ``space=`` (it moves the draws with the score)."""

    def __init__(self, message, library, group_label):
        super().__init__(message)
        self.without_space = (
            f"the trace's {group_label} was written by {library} (attrs"
            f"['inference_library']) and score= is given without a model: {library} stores "
            "constrained values (e.g. sigma > 0) while the usual scores are in the "
            "unconstrained space, and this function moves the draws with the score, so "
            "both must be in one space it can tell. Pass the sampler's own object instead "
            "(numpyro's MCMC as data, a Stan fit with its model), the unconstrained draws "
            "as an array with their score, or for a PyMC trace the model.")


def check_trace_space(data, posterior, space, group_label):
    """Refuse to guess the space of a sampler's stored draws against a user's score."""
    library = _inference_library(data, posterior)
    if space is not None or library is None or library.lower() in _UNTRANSFORMED_LIBRARIES:
        return
    raise SpaceNotKnown(
        f"the trace's {group_label} was written by {library} (attrs['inference_library']) "
        "and score= is given without a model, so steindiag cannot tell which space the "
        f"draws and the score are in. {library} stores constrained values (e.g. sigma > 0), "
        "while the usual scores (numpyro's potential_energy, Stan's grad_log_prob or "
        "log_density_gradient, a PyMC model's value variables) are in the unconstrained "
        "space; mixing the two gives a plausible but wrong KSD. Either pass the "
        "unconstrained draws as an array with their score (the user guide's recipes for "
        "numpyro and Stan do this), or say what the trace holds: space='unconstrained' if "
        "the stored variables are unconstrained coordinates and the score (log-Jacobian "
        "included) is in them, space='constrained' if the score is grad log p of the stored "
        "values themselves (valid only for a density smooth and positive on all of R^d). "
        "For a PyMC trace, pass the model instead.", library, group_label,
    )
