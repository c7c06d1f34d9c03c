"""The input layer's one reading step: data + score source -> ``PendingInput``.

Every public function reads its input here, once, so that every argument is checked
before anything expensive is done::

    read_input(...)           validate every input argument; the first reader whose test
                              accepts the input reads its draws (and labels them) ->
                              PendingInput: draws, labels, origin, score source; no score
    the caller's checks       that need the draws (the preconditioner resolved from them,
                              sizes)
    pending.with_scores()     evaluate or load the scores, check their scale -> SteinInput

The readers, in the order they are asked (``_READERS``): a sampler's own object (emcee's
``EnsembleSampler``, a pystan or CmdStanPy fit with its model), a numpyro ``MCMC``, JAX
positions or a JAX log density, a labelled container (``_trace``), and plain arrays. Each
lives in a module of its own and imports no other reader, nor this module.
"""

import numpy as np

from steindiag._containers import array_sample_dims, is_labelled
from steindiag._types import Origin, PendingInput, SteinInput
from steindiag._validate import check_bool, check_finite, check_labeller
from steindiag.inputs._arrays import array_scores, check_array_score, read_array_draws
from steindiag.inputs._checks import (check_compile_mode, check_score_scale, check_space,
                                     warn_zero_score_columns)
from steindiag.inputs._emcee import is_emcee_sampler, is_ensemble, read_emcee
from steindiag.inputs._functions import ScoreSource
from steindiag.inputs._jax import is_jax_input, read_jax
from steindiag.inputs._labels import display_labels
from steindiag.inputs._numpyro import is_numpyro_mcmc, read_numpyro
from steindiag.inputs._sampler import sampler_warnings
from steindiag.inputs._selection import resolve_var_names
from steindiag.inputs._space import SpaceNotKnown
from steindiag.inputs._stan import is_stan_input, read_stan
from steindiag.inputs._trace import read_labelled
from steindiag.inputs._trace_model import as_trace

__all__ = ["read_input", "derived_score"]


def _read_sampler(reader):
    """A sampler's own object (emcee, Stan): its draws as an array, its own log p and score.

    A ``log_density`` of the user's replaces the sampler's (as a batched callable).
    """
    def read(data, model, *, compile_mode, group, log_density, batched, **options):
        if compile_mode is not None:
            raise TypeError("compile_mode applies to PyMC models only; data is a "
                            f"{type(data).__module__}.{type(data).__name__}.")
        if group != "posterior":
            raise ValueError(f"group applies to traces; data is a {type(data).__name__}.")
        pending = reader(data, model, batched=batched, **options)
        if log_density is not None:
            given = log_density
            pending.source.log_density = given if batched else (
                lambda points: np.array([given(row) for row in points]))
        pending.origin.sample_dims = options["sample_dims"]
        return pending
    return read


def _read_labelled(data, model, *, score, log_density, batched, group, var_names, coords,
                   sample_dims, space, need_score, compile_mode):
    pending = read_labelled(data, model, score=score, batched=batched, group=group,
                            var_names=var_names, coords=coords, sample_dims=sample_dims,
                            space=space, need_score=need_score, compile_mode=compile_mode)
    pending.source = ScoreSource(score=score, log_density=log_density, batched=batched,
                                 model=model, compile_mode=compile_mode,
                                 selection=pending.selection)
    if sample_dims is None:
        sample_dims = ("chain", "draw")
    pending.origin = Origin(data=data, group=group, coords=coords, labelled=True,
                            sample_dims=(sample_dims,) if isinstance(sample_dims, str)
                            else tuple(sample_dims))
    return pending


def _array_input_iv(model, score, var_names, coords, sample_dims, need_score):
    """The arguments of an array input, all checked before the array is read."""
    if model is not None:
        raise TypeError(
            "model can only be used with a trace (InferenceData, DataTree, Dataset or "
            "DataArray); for arrays pass score= (an array or a callable)."
        )
    for name, value in (("var_names", var_names), ("coords", coords)):
        if value is not None:
            raise TypeError(f"{name} applies to labelled traces only; data is an array.")
    layout = array_sample_dims(sample_dims)
    if score is None and need_score:
        raise TypeError(
            "score is required when data is an array: pass an array of grad log p at each "
            "draw (same shape as data) or a callable mapping (n, d) draws to (n, d) scores."
        )
    if score is not None and not callable(score) and isinstance(score, (str, bytes, dict)):
        raise TypeError(
            "score must be an array of grad log p at each draw (same shape as data) or a "
            f"callable; got {type(score).__name__}."
        )
    return layout


def _read_arrays(data, model, *, score, log_density, batched, group, var_names, coords,
                 sample_dims, space, need_score, compile_mode):
    check_space(space, model)
    check_compile_mode(compile_mode, model)
    layout = _array_input_iv(model, score, var_names, coords, sample_dims, need_score)
    raw, layout, draws, labels = read_array_draws(data, layout)
    check_finite(draws, "data")
    check_array_score(score, raw)
    attrs = {"space": "as given" if space is None else space}
    chain, draw = np.arange(draws.shape[0]), np.arange(draws.shape[1])

    def complete():
        scores, source = array_scores(score, raw, layout, draws, batched)
        check_finite(scores, "score")
        return SteinInput(draws=draws, scores=scores, chain=chain, draw=draw,
                          parameter=list(labels), attrs={**attrs, "score_source": source})

    return PendingInput(
        draws=draws, chain=chain, draw=draw, parameter=labels, attrs=attrs, complete=complete,
        source=ScoreSource(score=score, log_density=log_density, batched=batched),
        origin=Origin(data=data, group=group, sample_dims=sample_dims))


def _is_numpyro(data, model, score, log_density):
    return is_numpyro_mcmc(data) or is_numpyro_mcmc(model)


def _is_jax(data, model, score, log_density):
    return is_jax_input(data, model, score, log_density, is_labelled(data))


def _labelled(data, model, score, log_density):
    return is_labelled(data)


def _anything(data, model, score, log_density):
    return True


# (test, reader): the first reader whose test accepts (data, model, score, log_density).
_READERS = (
    (lambda data, *_: is_emcee_sampler(data), _read_sampler(read_emcee)),
    (lambda data, model, *_: is_stan_input(data, model), _read_sampler(read_stan)),
    (_is_numpyro, read_numpyro),
    (_is_jax, read_jax),
    (_labelled, _read_labelled),
    (_anything, _read_arrays),
)


def derived_score(data, model=None, score=None, log_density=None):
    """Whether the reader of this input derives the score itself: "numpyro" (a numpyro
    MCMC, as ``data`` or ``model``) or "jax" (JAX positions or a JAX log density: both by
    ``jax.grad``), "sampler" (emcee, Stan: the sampler's own functions) or None (the
    user's score, or a PyMC model's)."""
    if _is_numpyro(data, model, score, log_density):
        return "numpyro"
    if _is_jax(data, model, score, log_density):
        return "jax"
    if is_emcee_sampler(data) or is_stan_input(data, model):
        return "sampler"
    return None


def _has_chains(origin):
    """Whether the draws come as chains (a trace, a sampler, an array whose sample_dims or
    shape has a chain axis): the wild bootstrap applies; otherwise one sample of
    independent draws."""
    if origin.labelled:
        return True
    if origin.sample_dims is not None:
        return "chain" in array_sample_dims(origin.sample_dims)
    return np.ndim(origin.data) != 2


def _relabelled(pending, labeller):
    """``pending`` showing ``labeller``'s labels, its canonical ones kept for matching;
    its ``complete`` gives a ``SteinInput`` labelled the same way."""
    canonical, shown = display_labels(pending.parameter, labeller)
    pending.parameter, pending.canonical = shown, canonical
    complete = pending.complete

    def relabelled():
        prepared = complete()
        prepared.parameter, prepared.canonical = list(shown), list(canonical)
        return prepared

    pending.complete = relabelled
    return pending


def _checked_scores(complete):
    def with_scores():
        prepared = complete()
        check_score_scale(prepared)
        warn_zero_score_columns(prepared)
        return prepared
    return with_scores


def read_input(data, model=None, *, score=None, batched=True, group="posterior",
               var_names=None, coords=None, sample_dims=None, space=None, need_score=True,
               compile_mode=None, log_density=None, takes_space=True, filter_vars=None,
               labeller=None):
    """Validate every input argument and read the draws; no score is evaluated.

    Parameters are those of :func:`steindiag.ksd` (``compile_mode``: the PyTensor mode
    of a model's graphs). ``need_score=False``: the caller uses the draws only
    (``mmd``), so no score source is required. A numpyro ``MCMC`` (as ``data``, or as
    ``model`` with its trace), positions given as a JAX pytree, or a JAX
    ``log_density`` with no ``score`` are read with JAX, which derives the score by
    ``jax.grad``; a sampler's own object (emcee, Stan) brings its own log p and score.
    ``takes_space=False``: the caller has no ``space=`` argument, so no message advises
    one. ``var_names`` and ``filter_vars`` follow ArviZ (``~`` excludes; "like",
    "regex"), resolved here once to the names they select
    (:mod:`steindiag.inputs._selection`). ``labeller`` (ArviZ's) makes the labels the
    results show; the canonical ones stay in ``canonical`` (:mod:`steindiag.inputs._labels`).

    Returns
    -------
    PendingInput
        The draws, their labels and coordinates; ``source``, the score source every later
        step evaluates at new points (``ScoreSource``); ``origin``, the container results
        are written back into; ``has_chains`` and ``ensemble``; and ``with_scores()``,
        which evaluates the scores and returns the ``SteinInput``.
    """
    batched = check_bool(batched, "batched")
    check_labeller(labeller)
    data, model = as_trace(data, model)
    var_names = resolve_var_names(data, group, var_names, filter_vars)
    reader = next(read for accepts, read in _READERS if accepts(data, model, score, log_density))
    try:
        pending = reader(data, model, score=score, log_density=log_density, batched=batched,
                         group=group, var_names=var_names, coords=coords,
                         sample_dims=sample_dims, space=space, need_score=need_score,
                         compile_mode=compile_mode)
    except SpaceNotKnown as err:
        if takes_space:
            raise
        raise ValueError(err.without_space) from None
    pending = _relabelled(pending, labeller)
    origin = pending.origin
    pending.has_chains = _has_chains(origin)
    pending.ensemble = is_ensemble(origin.data, origin.sample_dims, pending.attrs)
    pending.complete = _checked_scores(pending.complete)
    if pending.read_sampler_warnings is None and origin.labelled:
        pending.read_sampler_warnings = lambda: sampler_warnings(
            origin.data, group=origin.group, chain=pending.chain, draw=pending.draw,
            sample_dims=origin.sample_dims, model=getattr(pending.source, "model", None))
    return pending
