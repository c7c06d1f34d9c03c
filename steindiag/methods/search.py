"""The missing-mass search as ``diagnose`` and the corrections run it, from a score source.

``run_search`` takes log p and the score from the input layer's score source (an object
with ``search_functions()`` and ``prior_starts(parameters, n, rng)``: see
``steindiag.inputs.ScoreSource``) and runs ``methods.missing_mass.search_missing_mass`` on
the prepared draws.
"""

from steindiag.methods.missing_mass import search_missing_mass

__all__ = ["N_PRIOR_STARTS", "NO_LOG_DENSITY", "SearchError", "run_search"]

# Prior draws used as starts of the mode search with a PyMC model.
N_PRIOR_STARTS = 32
NO_LOG_DENSITY = ("no log density: pass a PyMC model or log_density= (a callable on an "
                  "(n, d) batch)")


class SearchError(ValueError):
    """The missing-mass search could not run (log p or its arguments failed); the original
    error is its ``__cause__``."""


def run_search(prepared, source, kernel, pre, level, rng):
    """The missing-mass search at ``level``, or (None, why it was not run).

    With a PyMC model, prior draws start the search (a flat prior: the search widens the
    draws instead); a score given only as arrays: the search differentiates log p by
    finite differences (its summary says so).
    """
    log_p, score_fn = source.search_functions()
    if log_p is None:
        return None, NO_LOG_DENSITY
    # The whole vector's draws when the prepared ones are a selection of its coordinates.
    prepared = source.search_input(prepared)
    starts = source.prior_starts(prepared.canonical, N_PRIOR_STARTS, rng)
    try:
        result = search_missing_mass(prepared.draws, prepared.scores, log_density=log_p,
                                     score=score_fn, kernel=kernel, preconditioner=pre,
                                     rng=rng, alpha=level, starts=starts)
    except ValueError as err:
        raise SearchError(str(err)) from err
    skipped = getattr(result, "skipped", "")
    if skipped:
        return None, skipped
    return result, ""
