"""The one entry point of the input layer: data + score source -> ``SteinInput``.

Every public function reads its input here, in three steps, so that every argument is
checked before anything expensive is done::

    1. read_input(...)        validate every input argument, then read the draws
                              (arrays: their layout; traces: _trace.read_trace) ->
                              PendingInput: draws, labels, coordinates; no score yet
    2. the caller's checks    that need the draws (the preconditioner resolved from
                              them, n_points <= N, the shape of a log_density array)
    3. .with_scores()         evaluate or load the scores -> SteinInput
"""

from dataclasses import dataclass

import numpy as np

from steindiag._types import SteinInput
from steindiag._validate import as_draws_array, check_finite, warn_user
from steindiag.inputs._arrays import array_sample_dims, array_scores, check_array_score
from steindiag.inputs._arrays import read_array_draws
from steindiag.inputs._trace import as_trace

__all__ = ["read_input", "prepare_input", "PendingInput", "is_labelled", "check_space",
           "check_compile_mode", "SPACES", "as_trace"]

SPACES = ("unconstrained", "constrained")


def is_labelled(data):
    """True for xarray / ArviZ containers (DataArray included), which the trace reader takes."""
    module = type(data).__module__ or ""
    return module.startswith(("xarray", "arviz", "datatree"))


def has_chain_dimension(data, sample_dims):
    """Whether the draws come as chains (a trace, or an array whose sample_dims or shape has
    a chain axis): the wild bootstrap applies; otherwise one sample of independent draws."""
    from steindiag.inputs._ecosystems import is_ecosystem_input

    if is_labelled(data) or is_ecosystem_input(data):
        return True
    if sample_dims is not None:
        return "chain" in array_sample_dims(sample_dims)
    return np.ndim(data) != 2


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


def _array_input_iv(model, score, batched, var_names, coords, sample_dims, need_score):
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


@dataclass(kw_only=True)
class PendingInput:
    """Draws read and checked, scores not yet evaluated (step 1 of the input layer).

    Attributes
    ----------
    draws : ndarray of float64, shape (chain, draw, d)
    chain, draw : ndarray
        Coordinate values of the sample dims.
    parameter : list of str
        One label per column of ``draws`` (see :mod:`steindiag.inputs._labels`).
    attrs : dict
        Provenance, as ``SteinInput.attrs`` (without ``score_source`` yet).
    log_density, score_function : callable or None
        For a sampler's own object (emcee, Stan): its log p, (n, d) -> (n,), and the
        score, (n, d) -> (n, d), for methods that evaluate them at new points.
    sampler_warnings : SamplerWarnings or None
        For a Stan fit: its divergences, for the draws read.
    """

    draws: np.ndarray
    chain: np.ndarray
    draw: np.ndarray
    parameter: list
    attrs: dict
    _complete: object = None
    # Read from a sampler's own object (emcee, Stan): log p and the score as batched
    # callables, (n, d) -> (n,) and (n, d) -> (n, d), in the draws' order, and the
    # sampler's divergences (SamplerWarnings).
    log_density: object = None
    score_function: object = None
    sampler_warnings: object = None
    # Set when the input layer derived the score itself (a numpyro MCMC, a JAX log
    # density: ``_jax``): its flat-vector functions and the labelled container of the draws.
    target: object = None
    container: object = None

    @property
    def n_draws(self):
        """Number of draws, all chains together."""
        return self.draws.shape[0] * self.draws.shape[1]

    def with_scores(self):
        """Evaluate or load the scores: the ``SteinInput``."""
        prepared = self._complete()
        check_score_scale(prepared)
        warn_zero_score_columns(prepared)
        return prepared

    def derived(self, *, target, container, source, attrs):
        """This input with the score source the input layer derived (``_jax``, ``_numpyro``).

        ``target``: an object whose ``score`` ((n, d) -> (n, d)) and ``log_density``
        ((n, d) -> (n,)) evaluate at new points (None when no score is needed);
        ``container``: the labelled trace (or array) later steps read as ``data``.
        """
        complete = self._complete

        def with_source():
            prepared = complete()
            prepared.attrs = {**prepared.attrs, **attrs, "score_source": source}
            return prepared

        self.attrs = {**self.attrs, **attrs}
        self._complete, self.target, self.container = with_source, target, container
        return self

    def resolve(self, data, model, score, log_density, sample_dims):
        """(data, model, score, log_density, sample_dims) for the caller's later steps.

        Unchanged, unless the input layer derived the score source: then the labelled
        container of the draws (with sample dims ``("chain", "draw")``), no model, and
        the derived score and log p as functions of flat (n, d) batches (or one (d,)
        vector), so that every later step (the missing-mass search, the Laplacian of
        regularised thinning, SVGD) evaluates the same functions.
        """
        if self.container is None:
            return data, model, score, log_density, sample_dims
        score = log_density = None
        if self.target is not None:
            score, log_density = self.target.score, self.target.log_density
        dims = ("chain", "draw") if is_labelled(self.container) else sample_dims
        return self.container, None, score, log_density, dims

    def draws_only(self):
        """A ``SteinInput`` whose scores are zeros, for callers that never read them (MMD)."""
        return SteinInput(draws=self.draws, scores=np.zeros_like(self.draws), chain=self.chain,
                          draw=self.draw, parameter=list(self.parameter),
                          attrs={**self.attrs, "score_source": "none"})


def read_input(data, model=None, *, score=None, batched=True, group="posterior",
               var_names=None, coords=None, sample_dims=None, space=None, need_score=True,
               compile_mode=None, log_density=None):
    """Validate every input argument and read the draws; no score is evaluated.

    Parameters are those of :func:`steindiag.ksd` (``compile_mode``: the PyTensor mode
    of a model's graphs, checked by :func:`check_compile_mode`). ``need_score=False``: the caller
    uses the draws only (``mmd``), so no score source is required. A numpyro ``MCMC``
    (as ``data``, or as ``model`` with its trace), positions given as a JAX pytree, or a
    JAX ``log_density`` with no ``score`` are read by :mod:`steindiag.inputs._jax`, which
    derives the score by ``jax.grad`` (see ``PendingInput.resolve``).

    Returns
    -------
    PendingInput
        Its ``with_scores()`` evaluates the scores and returns the ``SteinInput``.
    """
    if not isinstance(batched, (bool, np.bool_)):
        raise TypeError(f"batched must be True or False; got {batched!r}.")
    from steindiag.inputs._ecosystems import read_ecosystem

    pending = read_ecosystem(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space, need_score=need_score,
        compile_mode=compile_mode)
    if pending is not None:   # emcee's sampler, a Stan fit with its model
        return pending
    from steindiag.inputs._jax import is_jax_input

    if is_jax_input(data, model, score, log_density, is_labelled(data)):
        from steindiag.inputs._jax import read_jax_input

        return read_jax_input(
            data, model, score=score, log_density=log_density, group=group,
            var_names=var_names, coords=coords, sample_dims=sample_dims, space=space,
            need_score=need_score, compile_mode=compile_mode, read_input=read_input)
    check_space(space, model)
    check_compile_mode(compile_mode, model)
    data = as_trace(data, model)
    if is_labelled(data):
        from steindiag.inputs._trace import read_trace

        pending = read_trace(
            data, model, score=score, batched=batched, group=group, var_names=var_names,
            coords=coords, sample_dims=("chain", "draw") if sample_dims is None else sample_dims,
            space=space, need_score=need_score, compile_mode=compile_mode,
        )
        draws, chain, draw = pending.draws, pending.chain, pending.draw
        as_draws_array(draws, "data")
        check_finite(draws, "draws", chain, draw)

        def complete():
            prepared = pending.with_scores()
            check_finite(prepared.scores, "scores", prepared.chain, prepared.draw)
            return prepared

        return PendingInput(draws=draws, chain=chain, draw=draw, parameter=pending.parameter,
                            attrs=pending.attrs, _complete=complete)
    layout = _array_input_iv(model, score, batched, var_names, coords, sample_dims, need_score)
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

    return PendingInput(draws=draws, chain=chain, draw=draw, parameter=labels, attrs=attrs,
                        _complete=complete)


def prepare_input(data, model=None, *, score=None, batched=True, group="posterior",
                  var_names=None, coords=None, sample_dims=None, space=None,
                  compile_mode=None):
    """Turn any supported ``data`` + score source into a validated ``SteinInput``.

    ``read_input(...).with_scores()``: for callers with no check of their own between
    reading the draws and evaluating the scores.
    """
    return read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
    ).with_scores()


def check_score_scale(prepared):
    """Refuse scores that, times the draws' spread, overflow the Stein kernel's products.

    The kernel multiplies scores by the draws' scale (the default preconditioner divides
    each parameter by its spread and multiplies its score by it) and then scores together:
    |score| x spread must stay below 10^(LOG10_HEADROOM / 2). O(N d), logs only (no
    overflow warnings).
    """
    from steindiag._validate import LOG10_HEADROOM

    d = prepared.draws.shape[2]
    flat_draws = prepared.draws.reshape(-1, d)
    largest_score = np.max(np.abs(prepared.scores.reshape(-1, d)), axis=0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        spread = np.max(flat_draws, axis=0) - np.min(flat_draws, axis=0)
        log_product = np.log10(largest_score) + np.log10(np.maximum(spread, 1.0))
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
        "(var_names= for a trace; keep only the sampled sites when flattening)."
    )
