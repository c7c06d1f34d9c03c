"""Score and log-density sources as functions, for methods that evaluate them at new points.

Regularised Stein thinning differentiates the score by central differences and needs
log p at every draw; SVGD evaluates the score at the moved particles at every step. The
source is the same as for the draws: a user callable, or a PyMC model's batched graphs
(``_pymc.model_scores`` / ``_pymc.model_log_density``: one vectorised graph evaluated on
chunks of draws, never a Python call per draw).
"""

import numpy as np

from steindiag._validate import check_finite, evaluate_score_callable

__all__ = ["score_function", "log_density_values", "check_log_density"]


def score_function(score, model, *, batched=True, mode=None):
    """A function (n, d) -> (n, d) evaluating grad log p, or None (an array score).

    ``score`` (a callable) takes precedence over ``model``; with neither, None.
    """
    if callable(score):
        def evaluate(flat):
            return evaluate_score_callable(score, flat[None], batched=batched)[0]
        return evaluate
    if score is None and model is not None:
        from steindiag.inputs._pymc import model_layout, model_scores

        layout = model_layout(model)
        return lambda flat: model_scores(model, layout, flat, mode=mode)
    return None


def check_log_density(log_density, n_chain, n_draw):
    """An array ``log_density`` must have shape (chain, draw) (or (chain * draw,)).

    Checked as soon as the draws are read, before any score is evaluated.
    """
    if log_density is None or callable(log_density):
        return
    values = np.asarray(log_density, dtype=np.float64)
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
        from steindiag.inputs._pymc import model_layout, model_log_density

        values = model_log_density(model, model_layout(model), flat, mode=mode)
    elif callable(log_density):
        if batched:
            values = np.asarray(log_density(flat.copy()), dtype=np.float64)
        else:
            values = np.array([log_density(row.copy()) for row in flat], dtype=np.float64)
        if values.shape not in ((flat.shape[0],), (flat.shape[0], 1)):
            raise ValueError(
                f"log_density returned shape {values.shape} for {flat.shape[0]} draws; "
                f"expected ({flat.shape[0]},)."
            )
    else:
        check_log_density(log_density, n_chain, n_draw)
        values = np.asarray(log_density, dtype=np.float64)
    values = values.reshape(n_chain, n_draw)
    check_finite(values[:, :, None], "log_density", chain, draw)
    return values
