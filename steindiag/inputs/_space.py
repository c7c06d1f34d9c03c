"""Checks that the draws are in the space the caller says: constrained columns named so.

A trace read with ``space="unconstrained"`` (or a sampler's coordinates taken as given)
should hold unconstrained coordinates; a column that is strictly positive in every draw
(or inside (0, 1)) while its name says it is a scale (``sigma``, ``tau``, ...) or a
probability (``p``, ``prob``, ...) is almost surely stored constrained: its score, taken
in the unconstrained space, does not belong to it, and KSD is then large on a healthy run.
The check warns before anything is computed; it only reads the draws (O(N d)).
"""

import re

import numpy as np

from steindiag._validate import warn_user

__all__ = ["warn_constrained_columns", "score_failure_hint"]

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
