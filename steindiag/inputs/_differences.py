"""Central finite differences of a log density: checking a score, or deriving one.

A sampler that keeps its log density (emcee's ``log_prob_fn``) gives an independent
source of truth for a score: grad log p by central differences, in float64, with a step
per coordinate scaled to the draws' spread. Used to check a user's score on a few draws
(a wrong order of the parameters or a wrong gradient is caught before any KSD), and, when
no score is given, to derive one, only where the differences are accurate enough.

Error of the central difference with step h: h^2 |f'''| / 6 (truncation) plus about
eps |f| / h (rounding); with h = eps^(1/3) x scale both are of order eps^(2/3) relative
to the score's size 1 / scale. The error is estimated at the draws by comparing the steps
h and 2 h (their difference is 3 times the truncation error of step h, plus rounding).
"""

import numpy as np

__all__ = ["difference_steps", "central_differences", "difference_error", "check_score",
           "DERIVED_TOLERANCE"]

_EPS = np.finfo(np.float64).eps
# A derived score is used only if its estimated error, relative to the score's typical
# size (1 / the draws' spread), is below this at every checked draw.
DERIVED_TOLERANCE = 1e-4
# A given score agrees with the differences if within this, relative to the same size,
# plus 10 times the differences' own estimated error.
_CHECK_TOLERANCE = 1e-4


def difference_steps(draws):
    """Step per coordinate: eps^(1/3) x the spread (sd) of that coordinate over the draws."""
    flat = draws.reshape(-1, draws.shape[-1])
    scale = flat.std(axis=0)
    scale = np.where(scale > 0, scale, np.maximum(np.abs(flat).max(axis=0), 1.0) * 1e-3)
    return _EPS ** (1.0 / 3.0) * scale, scale


def central_differences(log_density, points, steps):
    """(n, d) central differences of a batched ``log_density`` ((m, d) -> (m,)) at points.

    2 d evaluations per point, all in one batch of 2 n d points.
    """
    n, d = points.shape
    shifted = np.repeat(points[None, None], 2, axis=0).repeat(d, axis=1)  # (2, d, n, d)
    for k in range(d):
        shifted[0, k, :, k] += steps[k]
        shifted[1, k, :, k] -= steps[k]
    values = np.asarray(log_density(shifted.reshape(-1, d)), dtype=np.float64)
    values = values.reshape(2, d, n)
    # The step actually taken (x + h - x is not h in floating point).
    taken = (shifted[0, np.arange(d), :, np.arange(d)] - shifted[1, np.arange(d), :,
                                                                 np.arange(d)])  # (d, n)
    return ((values[0] - values[1]) / taken).T


def difference_error(log_density, points, steps):
    """(differences with step h, estimated absolute error of each), both (n, d)."""
    fine = central_differences(log_density, points, steps)
    coarse = central_differences(log_density, points, 2.0 * steps)
    return fine, np.abs(coarse - fine) / 3.0 + 4.0 * _EPS * np.abs(fine)


def check_score(score_values, log_density, points, steps, scale, labels, what):
    """Raise ValueError if a score disagrees with central differences of log p.

    ``score_values`` (n, d) at ``points``; ``scale`` (d,) the draws' spread, so that
    1 / scale is the typical size of a score; ``labels`` name the columns.
    """
    expected, error = difference_error(log_density, points, steps)
    allowed = _CHECK_TOLERANCE / scale + 10.0 * error
    bad = np.abs(score_values - expected) > allowed
    if not bad.any():
        return
    columns = np.flatnonzero(bad.any(axis=0))
    row = int(np.flatnonzero(bad.any(axis=1))[0])
    shown = ", ".join(f"{labels[k]}: score {score_values[row, k]:.6g}, differences "
                      f"{expected[row, k]:.6g}" for k in columns[:6])
    raise ValueError(
        f"score does not match central finite differences of {what} at {bad.any(axis=1).sum()}"
        f" of {len(points)} checked draws, for parameter(s) "
        f"{[labels[k] for k in columns[:10]]}; at the first such draw: {shown}. The "
        "score must be grad log p of the same log density, in the order of the draws' "
        "columns: check the order of the parameters (var_names) and the gradient itself."
    )
