"""PyMC: batched log p and score callables of a model, for methods that move points.

``model_functions(model)`` returns two callables on flat unconstrained points, (n, d) ->
(n,) and (n, d) -> (n, d), built on the score pass of ``_pymc`` (log p and its gradient
are one compiled function, the one ``pm.sample`` compiled, or the batched graph where
that pays; compiled once per model and cached). The last evaluation is kept: log p and then the score at the same points (what an optimiser asks for) cost one
evaluation of the graph.

Imported lazily (only when a PyMC model is passed).
"""

import numpy as np

from steindiag.inputs import _pymc

__all__ = ["model_functions"]


def model_functions(model, layout=None, *, mode=None):
    """(log_density, score): batched callables of ``model.logp(jacobian=True)``.

    Parameters
    ----------
    model : pymc.Model
    layout : list of FreeVariable, optional
        ``_pymc.model_layout(model)`` (computed when None).
    mode : str, optional
        PyTensor compile mode (default: as for the scores).

    Returns
    -------
    log_density : callable
        (n, d) flat unconstrained points -> (n,) log p up to a constant.
    score : callable
        (n, d) -> (n, d) grad log p.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from steindiag.inputs._pymc_functions import model_functions
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    >>> log_density, score = model_functions(model)
    >>> score(np.array([[1.0], [2.0]])).ravel().tolist()
    [-1.0, -2.0]
    """
    layout = _pymc.model_layout(model) if layout is None else layout
    # One compiled function gives both outputs: keep the last evaluation, so that an
    # optimiser asking for log p and then the score at the same point pays once.
    last = {"points": None, "outputs": None}

    def evaluate(points):
        points = np.ascontiguousarray(points, dtype=np.float64)
        if last["points"] is None or not np.array_equal(last["points"], points):
            outputs = _pymc._scores_and_log_density(model, layout, points, None, mode)
            last["points"], last["outputs"] = points.copy(), outputs
        return last["outputs"]

    def log_density(points):
        return evaluate(points)[1][:, 0].copy()

    def score(points):
        return evaluate(points)[0].copy()

    return log_density, score
