"""The score source: the target's score and log density as functions of new points.

Methods that move points or evaluate p away from the draws (the missing-mass search,
regularised Stein thinning, SVGD, the corrections' checks) take their functions from
one :class:`ScoreSource`, built once by the reading step: a user's callables or arrays,
a PyMC model's compiled log p and score (``_pymc.model_scores`` /
``_pymc.model_log_density``: the function ``pm.sample`` compiled, or a vectorised graph on
chunks of draws where compiling it pays), a JAX or
numpyro target's ``jax.grad``, or a sampler's own log p (emcee, Stan).
"""

from dataclasses import dataclass


from steindiag._containers import STORED_MARK
from steindiag._validate import check_finite, evaluate_score_callable, real_array
from steindiag._version import __version__
from steindiag.inputs import _pymc
from steindiag.inputs._pymc_functions import model_functions
from steindiag.inputs._pymc_prior import prior_starts
from steindiag.inputs._pymc_values import model_posterior
from steindiag.inputs._trace_model import nutpie_labels

__all__ = ["ScoreSource", "score_function", "log_density_values", "check_log_density"]


def score_function(score, model, *, batched=True, mode=None):
    """A function (n, d) -> (n, d) evaluating grad log p, or None (an array score).

    ``score`` (a callable) takes precedence over ``model``; with neither, None.
    """
    if callable(score):
        def evaluate(flat):
            return evaluate_score_callable(score, flat[None], batched=batched)[0]
        return evaluate
    if score is None and model is not None:
        layout = _pymc.model_layout(model)
        return lambda flat: _pymc.model_scores(model, layout, flat, mode=mode)
    return None


def check_log_density(log_density, n_chain, n_draw):
    """An array ``log_density`` must have shape (chain, draw) (or (chain * draw,)).

    Checked as soon as the draws are read, before any score is evaluated.
    """
    if log_density is None or callable(log_density):
        return
    values = real_array(log_density, "log_density")
    if values.shape != (n_chain, n_draw) and values.shape != (n_chain * n_draw,):
        raise ValueError(
            f"log_density array must have shape (chain, draw) = ({n_chain}, {n_draw}); "
            f"got {values.shape}."
        )


def log_density_values(log_density, model, draws, *, batched=True, chain=None, draw=None,
                       mode=None):
    """log p (chain, draw) at the (chain, draw, d) draws, from an array, a callable or a model.

    Parameters
    ----------
    log_density : callable, array_like or None
        A callable on the flat parameter vector ((n, d) -> (n,) if ``batched``, else
        (d,) -> scalar), or an array of shape (chain, draw). None: from ``model``.
    model : pymc.Model or None
        ``model.logp(jacobian=True)`` at the value variables, one batched graph.
    draws : ndarray (chain, draw, d)
    batched : bool
    chain, draw : ndarray, optional
        Coordinate values, to name non-finite draws in errors.
    mode : str, optional
        PyTensor compile mode for a model (default: as for the scores).

    Returns
    -------
    ndarray of float64, shape (chain, draw)
    """
    n_chain, n_draw, d = draws.shape
    flat = draws.reshape(-1, d)
    if log_density is None:
        if model is None:
            raise ValueError(
                "log p is needed at each draw: pass log_density= (a callable on the flat "
                "parameter vector, or an array of shape (chain, draw)) or a PyMC model."
            )
        values = _pymc.model_log_density(model, _pymc.model_layout(model), flat, mode=mode)
    elif callable(log_density):
        values = _call_log_density(log_density, flat, batched)
        if values.shape not in ((flat.shape[0],), (flat.shape[0], 1)):
            raise ValueError(
                f"log_density returned shape {values.shape} for {flat.shape[0]} draws; "
                f"expected ({flat.shape[0]},)."
            )
    else:
        check_log_density(log_density, n_chain, n_draw)
        values = real_array(log_density, "log_density")
    values = values.reshape(n_chain, n_draw)
    check_finite(values[:, :, None], "log_density", chain, draw)
    return values


def _call_log_density(log_density, points, batched):
    """A log-density callable at (n, d) ``points`` (copied: never modified), as float64."""
    if batched:
        return real_array(log_density(points.copy()), "the output of log_density")
    return real_array([log_density(row.copy()) for row in points], "the output of log_density")


def _batched_log_density(log_density, batched):
    """A log-density callable as (n, d) -> (n,) float64 (points copied: never modified)."""
    return lambda points: _call_log_density(log_density, points, batched).reshape(-1)


@dataclass(kw_only=True)
class ScoreSource:
    """What the reading step knows of p besides its scores at the draws.

    Attributes
    ----------
    score : callable, array or None
        The user's score (a callable, batched per ``batched``, or arrays at the draws),
        or the score the input layer derived (JAX, numpyro, a sampler: batched).
    log_density : callable, array or None
        log p up to a constant: a callable on the flat parameter vector, or an array of
        its values at the draws.
    batched : bool
        Whether the callables take an (n, d) batch (True) or one (d,) vector.
    model : pymc.Model or None
        A PyMC model, whose batched graphs give the score and log p where the user gave
        none.
    compile_mode : str, PyTensor Mode or None
        How the model's graphs are compiled.
    constrain : callable or None
        A numpyro target's map of flat unconstrained points to its sites' constrained
        values, (n, d) -> {site: (n, ...)}.
    selection : Selection or None
        The selected coordinates of the whole vector the score and log p take
        (``steindiag.inputs._selection``): functions at new points are refused (the
        selected score depends on the left-out parameters) and the missing-mass search
        runs on the whole draws.
    """

    score: object = None
    log_density: object = None
    batched: bool = True
    model: object = None
    compile_mode: object = None
    constrain: object = None
    selection: object = None

    def score_function(self):
        """grad log p as (n, d) -> (n, d), or None (scores given only as arrays)."""
        if self.selection is not None:
            raise self.selection.refuse("A method that moves the draws (SVGD, regularised "
                                        "Stein thinning)")
        return self._whole_score_function()

    def _whole_score_function(self):
        return score_function(self.score, self.model, batched=self.batched,
                              mode=self.compile_mode)

    def search_input(self, prepared):
        """The draws and scores the missing-mass search runs on: the whole vector's when
        the prepared draws are a selection of it (log p is the whole model's)."""
        return prepared if self.selection is None else self.selection.full

    def has_log_density(self):
        """Whether log p can be evaluated at new points (a callable, or a PyMC model)."""
        return callable(self.log_density) or self.model is not None

    def log_density_values(self, draws, chain=None, draw=None):
        """log p (chain, draw) at the draws (an array given, a callable, or the model)."""
        if self.selection is not None:
            raise self.selection.refuse("log p at the draws (regularised Stein thinning)")
        return log_density_values(self.log_density, self.model, draws, batched=self.batched,
                                  chain=chain, draw=draw, mode=self.compile_mode)

    def search_functions(self):
        """(log p, score) as batched callables for the missing-mass search, or (None, None).

        A model's log p and score come from one compiled function (it keeps its last
        evaluation: log p and then the score at the same point cost one evaluation); the
        score is None for scores given only as arrays (the search then differentiates
        log p by finite differences).
        """
        log_density = self.log_density if callable(self.log_density) else None
        if log_density is None and self.model is None:
            return None, None
        if log_density is None and self.score is None:
            return model_functions(self.model, mode=self.compile_mode)
        if log_density is None:
            log_p = model_functions(self.model, mode=self.compile_mode)[0]
        else:
            log_p = _batched_log_density(log_density, self.batched)
        return log_p, self._whole_score_function()

    def prior_starts(self, parameters, n, rng):
        """n prior draws of a PyMC model as starts of the search, or None (no model, a
        log density of the user's, or a flat prior)."""
        if self.model is None or callable(self.log_density):
            return None
        try:
            return prior_starts(self.model, list(parameters), n, rng)
        except ValueError:
            return None  # a flat prior: the search widens the draws instead

    def model_scores(self, draws, *, strategy="auto", chunk_size=None, progress=None):
        """A PyMC model's scores at the (chain, draw, d) draws, in one pass, for storing:
        (scores, labels of the unconstrained vector (nutpie's), attrs recording how)."""
        layout = _pymc.model_layout(self.model)
        mode = _pymc.default_compile_mode() if self.compile_mode is None else self.compile_mode
        n_chain, n_draw, d = draws.shape
        scores, chosen = _pymc.model_scores(
            self.model, layout, draws.reshape(-1, d), chunk_size=chunk_size, mode=mode,
            strategy=strategy, progress=progress, return_strategy=True,
        )
        attrs = {
            STORED_MARK: "unconstrained draws and grad log p of the model at them",
            "space": "unconstrained",
            "jacobian": "included",
            "log_density": "model.logp(jacobian=True)",
            "free_variables": [var.name for var in layout],
            "value_variables": [var.value_name for var in layout],
            "transforms": [var.transform for var in layout],
            "pytensor_mode": mode if isinstance(mode, str) else str(mode),
            "score_strategy": chosen,
            "steindiag_version": __version__,
        }
        return scores.reshape(n_chain, n_draw, d), nutpie_labels(layout), attrs

    def constrained_variables(self, posterior, pair, moved):
        """The trace's variables at moved unconstrained draws: (variables, left out), or
        None when no model or numpyro target can map them (the draws are the variables).

        ``posterior``: the trace's group as read (``pair`` its sample dims); ``moved``
        (chain, draw, d). A PyMC model gives its free variables, deterministics and value
        variables; a numpyro target its latent and deterministic sites.
        """
        if self.model is not None:
            return model_posterior(self.model, posterior, pair, moved)
        if self.constrain is None:
            return None
        n_chain, n_draw, d = moved.shape
        values = self.constrain(moved.reshape(-1, d))
        out, dropped = {}, []
        for name in posterior.data_vars:
            array = posterior[name].transpose(*pair, ...)
            if name in values and tuple(values[name].shape[1:]) == tuple(array.shape[2:]):
                out[name] = array.copy(
                    data=values[name].reshape(n_chain, n_draw, *array.shape[2:]))
            else:
                dropped.append(name)
        return out, dropped
