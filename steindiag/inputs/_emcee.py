"""emcee's ``EnsembleSampler`` as input: walkers and steps, ``log_prob_fn``, one call.

Data flow::

    sampler (after run_mcmc), score (callable | None), var_names, coords
      -> the walkers' draws as a Dataset (chain = walker, draw = step), labelled as
         ``az.from_emcee`` labels them (var_0, var_1, ... or the sampler's
         ``parameter_names``) and read by the trace reader (coords, var_names)
      -> a score callable checked on a few draws against central differences of
         ``log_prob_fn`` (sampler.compute_log_prob), or, with no score, the score
         derived by those differences when they are accurate enough
      -> PendingInput with log p (for diagnose's search) and ``attrs["ensemble"]``

emcee has no transforms: the draws are the coordinates ``log_prob_fn`` takes. Walkers
of one ensemble are not independent chains (each move uses the other walkers), so
:func:`steindiag.diagnose` reads an ensemble as one chain (see :func:`is_ensemble`).
emcee itself is never imported: the sampler is used through its own methods.
"""

import numpy as np
import xarray as xr

from steindiag._types import Origin, PendingInput
from steindiag._validate import warn_user
from steindiag.inputs._differences import (DERIVED_TOLERANCE, central_differences, check_score,
                                           difference_error, difference_steps)
from steindiag.inputs._functions import ScoreSource
from steindiag.inputs._trace import read_trace

__all__ = ["is_emcee_sampler", "read_emcee", "is_ensemble", "N_CHECKED_DRAWS"]

# Draws at which a given score is checked (and a derived one's accuracy estimated).
N_CHECKED_DRAWS = 8


def is_emcee_sampler(data):
    """True for an ``emcee.EnsembleSampler`` (checked by module and methods, not imported)."""
    module = type(data).__module__ or ""
    return (module.startswith("emcee") and hasattr(data, "get_chain")
            and hasattr(data, "compute_log_prob"))


def is_ensemble(data, sample_dims, attrs):
    """Whether the input's chains are the walkers of one ensemble (emcee).

    An ``EnsembleSampler`` (the reader marks ``attrs["ensemble"]``), a trace written by
    ``az.from_emcee`` (``inference_library`` "emcee"), or an array given with
    ``sample_dims=("draw", "chain")``, the layout of emcee's ``get_chain()``.
    """
    if attrs.get("ensemble"):
        return True
    module = type(data).__module__ or ""
    if module.startswith(("xarray", "arviz", "datatree")):
        for source in (getattr(data, "attrs", None) or {},
                       getattr(getattr(data, "posterior", None), "attrs", None) or {}):
            if str(source.get("inference_library", "")).lower() == "emcee":
                return True
        return False
    if sample_dims is None or isinstance(sample_dims, str):
        return False
    return tuple(sample_dims) == ("draw", "chain")


def _names(sampler):
    """{name: column indices} of the sampler's parameters, in column order."""
    named = getattr(sampler, "parameter_names", None)
    if getattr(sampler, "params_are_named", False) and named:
        columns = {name: np.atleast_1d(np.arange(sampler.ndim)[index]).tolist()
                   for name, index in dict(named).items()}
        return dict(sorted(columns.items(), key=lambda item: item[1][0])), True
    # az.from_emcee's default names.
    return {f"var_{k}": [k] for k in range(sampler.ndim)}, False


def _read_emcee_iv(sampler, model, score, var_names, sample_dims, space):
    if model is not None:
        raise TypeError(
            "data is an emcee EnsembleSampler, whose log_prob_fn is the log density: "
            f"model must be None; got {type(model).__name__}.")
    if sample_dims is not None:
        raise ValueError(
            "data is an emcee EnsembleSampler: its walkers and steps are the chain and draw "
            f"dimensions, so sample_dims must be None; got {sample_dims!r}. Select steps "
            "with coords={'draw': slice(burn_in, None)}.")
    if score is not None and not callable(score):
        raise TypeError(
            "with an emcee EnsembleSampler, score must be a callable on the flat parameter "
            "vector (log_prob_fn's order) or None (derived from log_prob_fn by finite "
            f"differences); got {type(score).__name__}.")
    if space not in (None, "unconstrained"):
        raise ValueError(
            "emcee has no transforms: the draws are the coordinates log_prob_fn takes, and "
            f"the score is grad log_prob_fn in them; space={space!r} does not apply (pass "
            "None).")
    if getattr(sampler, "iteration", 0) < 1:
        raise ValueError(
            "the emcee EnsembleSampler holds no steps: call sampler.run_mcmc(...) first.")
    names, named = _names(sampler)
    if var_names is None:
        return names, list(names)
    var_names = [var_names] if isinstance(var_names, str) else list(var_names)
    if sorted(var_names) == sorted(names):
        return names, var_names      # all the sampler's parameters, in the order given
    if not named and len(var_names) == sampler.ndim and len(set(var_names)) == len(var_names):
        # Names for the columns, in column order, as az.from_emcee(var_names=...) takes.
        return {name: [k] for k, name in enumerate(var_names)}, var_names
    raise ValueError(
        f"var_names={var_names} does not name the sampler's parameters {list(names)}: "
        "log_prob_fn is the density of all of them together, so var_names must list every "
        "one (in the order the score takes them)"
        + ("" if named else f", or give {sampler.ndim} new names in column order") + ".")


def read_emcee(sampler, model=None, *, score=None, batched=True, var_names=None,
               coords=None, sample_dims=None, space=None, need_score=True):
    """The draws of an emcee ``EnsembleSampler`` (a ``PendingInput``); arguments as ``ksd``.

    Walkers are the chains, steps the draws (``coords={"draw": slice(1000, None)}``
    discards a burn-in). ``var_names`` lists all the sampler's parameters in the order the
    score takes them (the sampler's ``parameter_names``, else ``var_0``, ``var_1``, ...),
    or, for a sampler without ``parameter_names``, names its columns in order as
    ``az.from_emcee(var_names=...)`` does.
    """
    columns, order = _read_emcee_iv(sampler, model, score, var_names, sample_dims, space)
    chain = np.asarray(sampler.get_chain(), dtype=np.float64)          # (step, walker, d)
    n_step, n_walker, d = chain.shape
    posterior = xr.Dataset(
        {name: (("chain", "draw"), chain[:, :, index[0]].T) if len(index) == 1
         else (("chain", "draw", f"{name}_dim_0"), np.moveaxis(chain[:, :, index], 0, 1))
         for name, index in columns.items()},
        coords={"chain": np.arange(n_walker), "draw": np.arange(n_step)},
        attrs={"inference_library": "emcee"})
    # The draws' columns, in the sampler's column numbering.
    permutation = np.concatenate([columns[name] for name in order])

    def log_density(points):
        """log_prob_fn at (n, d) points in the draws' column order."""
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        in_sampler_order = np.empty_like(points)
        in_sampler_order[:, permutation] = points
        values, _ = sampler.compute_log_prob(in_sampler_order)
        return np.asarray(values, dtype=np.float64)

    # The trace reader selects (coords), orders (var_names) and labels the draws; the
    # score is bound below, once the draws are known.
    holder = {}
    trace = read_trace(posterior, score=lambda x: holder["score"](x), batched=True,
                       var_names=order, coords=coords, space=space, need_score=need_score)
    draws = trace.draws
    steps, scale = difference_steps(draws)
    flat = draws.reshape(-1, d)
    checked = flat[np.unique(np.linspace(0, len(flat) - 1, N_CHECKED_DRAWS).astype(int))]
    attrs = {**trace.attrs, "space": "as given (emcee: log_prob_fn's coordinates)",
             "ensemble": f"emcee.EnsembleSampler, {n_walker} walkers",
             "log_density": "sampler.log_prob_fn"}
    attrs.pop("variables", None)
    if score is not None:
        given = _evaluate(score, checked, batched)
        try:
            check_score(given, log_density, checked, steps, scale, trace.parameter,
                        "the sampler's log_prob_fn")
        except ValueError as first:
            if np.array_equal(permutation, np.arange(d)):
                raise
            in_sampler_order = np.empty_like(checked)
            in_sampler_order[:, permutation] = checked
            again = _evaluate(score, in_sampler_order, batched)[:, permutation]
            try:
                check_score(again, log_density, checked, steps, scale, trace.parameter,
                            "the sampler's log_prob_fn")
            except ValueError:
                raise first from None
            raise ValueError(_order_hint(
                f"var_names={list(order)} orders the draws' columns, but the score takes "
                f"its vector in log_prob_fn's order {list(columns)}: it matches central "
                "differences of log_prob_fn there and not in the order given. "
            )) from None
        holder["score"] = (score if batched else
                           lambda x: np.array([np.asarray(score(row), dtype=np.float64)
                                               for row in x]))
        attrs["score_check"] = (f"checked against central differences of log_prob_fn at "
                                f"{len(checked)} draws")
    elif need_score:
        holder["score"] = _derived_score(log_density, checked, steps, scale, trace.parameter)
        attrs["score_from"] = ("central finite differences of log_prob_fn (float64, step "
                               "eps^(1/3) x each parameter's spread)")

    def complete():
        prepared = trace.with_scores()
        prepared.attrs = {**attrs, "score_source": "callable" if score is not None
                          else "finite differences of log_prob_fn"}
        return prepared

    return PendingInput(draws=draws, chain=trace.chain, draw=trace.draw,
                        parameter=trace.parameter, attrs=attrs, complete=complete,
                        source=ScoreSource(score=lambda points: holder["score"](
                            np.atleast_2d(points)), log_density=log_density),
                        origin=Origin(data=draws))


def _evaluate(score, points, batched):
    """A score callable at (n, d) points, as float64 (n, d)."""
    if batched:
        values = np.asarray(score(points.copy()), dtype=np.float64)
    else:
        values = np.array([np.asarray(score(row.copy()), dtype=np.float64) for row in points])
    if values.shape != points.shape:
        raise ValueError(
            f"score returned shape {values.shape} for {len(points)} draws of "
            f"{points.shape[1]} parameters (batched={batched}); expected {points.shape}.")
    return values


def _order_hint(cause):
    return (f"score does not match the draws' order: {cause}Pass var_names in "
            "log_prob_fn's order (or None), or a score that takes the order of var_names.")


def _derived_score(log_density, checked, steps, scale, labels):
    """grad log p by central differences, if accurate enough at the checked draws."""
    _, error = difference_error(log_density, checked, steps)
    relative = error * scale            # error relative to the score's size 1 / scale
    worst = int(np.argmax(relative.max(axis=0)))
    if not np.all(relative <= DERIVED_TOLERANCE):
        raise ValueError(
            "no score was given, and central finite differences of the sampler's "
            "log_prob_fn are not accurate enough to stand in for one: their estimated "
            f"error reaches {relative.max():.2g} of the score's size for {labels[worst]!r} "
            f"(allowed {DERIVED_TOLERANCE:g}); log_prob_fn may be computed in float32, be "
            "noisy, or be non-smooth. Pass score= (a callable returning grad log p of an "
            "(n, d) batch, e.g. jax.vmap(jax.grad(log_prob)) with x64 enabled).")
    warn_user(
        "no score was given: grad log p is derived from the emcee sampler's log_prob_fn by "
        f"central finite differences (2 d = {2 * len(steps)} evaluations of log_prob_fn per "
        f"draw; estimated error at most {relative.max():.1g} of the score's size at "
        f"{len(checked)} checked draws). Pass score= for an exact gradient.")

    def score(points):
        return central_differences(log_density, np.asarray(points, dtype=np.float64), steps)

    return score
