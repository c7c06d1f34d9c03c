"""The search's second step: the modes of p, by L-BFGS from overdispersed starts.

``Counted`` evaluates log p and its gradient at batches of points for every step of the
search, counting them and turning the model's failures at a point into log p = -inf.
"""
import numpy as np

from steindiag.engine.threads import single_threaded_blas
from steindiag.methods.missing_mass_result import FINITE_DIFFERENCES, SCORE

__all__ = ["Counted", "check_at_draws", "draws_spread", "starting_points", "find_modes",
           "mahalanobis_sq"]

# End points closer than this (Mahalanobis distance in the Hessian's metric) are one mode.
_MERGE_DISTANCE = 1.0
# An end point is a mode only if a Newton step from it would raise log p by less than
# this (it is stationary up to the optimiser's tolerance).
_MAX_RISE = 0.05
# Central-difference steps, relative to the draws' spread per coordinate: for the
# Hessian (differences of the gradient) and for the gradient (differences of log p).
_FD_STEP = 1e-4
_FD_GRADIENT_STEP = 1e-5
# Points per call of log_density when many are needed at once (finite-difference
# Hessians): at most this many float64 numbers (16 MB) per batch.
_MAX_BATCH_NUMBERS = 2 ** 21

# Errors that are never "log p failed at this point": the user or the machine stopping.
_FATAL = (MemoryError, KeyboardInterrupt, SystemExit, GeneratorExit)


class Counted:
    """log p and its gradient at batches of points: counted, guarded, shape-checked.

    An exception inside ``log_density`` or ``score`` (other than MemoryError and the
    like) is the model failing at a point: the batch is retried point by point and the
    points that still raise get log p = -inf and a NaN gradient; ``n_failed`` counts
    them and ``failure`` keeps the first error. Without a score callable, the gradient
    is the central difference of log p (one batched call on the 2 d shifted points of
    every point, with the points themselves).
    """

    def __init__(self, log_density, score, spread):
        self._log_density = log_density
        self._score = score
        self.d = spread.shape[0]
        self.steps = _FD_GRADIENT_STEP * spread   # finite-difference steps per coordinate
        self.n_log_density = 0
        self.n_score = 0
        self.n_failed = 0
        self.failure = ""
        self.gradient_kind = SCORE if score is not None else FINITE_DIFFERENCES

    def _note(self, err):
        self.n_failed += 1
        if not self.failure:
            message = str(err).strip().splitlines()
            self.failure = f"{type(err).__name__}: {message[0] if message else ''}".strip()

    def _call(self, function, name, points, shapes):
        """``function(points)`` checked against ``shapes``; raising batches point by point."""
        try:
            values = function(points.copy())
        except _FATAL:
            raise
        except Exception as err:  # noqa: BLE001  (the model's error at some point)
            if points.shape[0] == 1:
                self._note(err)
                return None
            return [self._call(function, name, row[None], shapes) for row in points]
        values = np.asarray(values, dtype=np.float64)
        n = points.shape[0]
        if values.shape not in shapes(n):
            raise ValueError(
                f"{name} returned an array of shape {values.shape} for a batch of points "
                f"of shape {points.shape}; expected {shapes(n)[0]}: {name} must be batched, "
                f"(n, d) -> {'(n,)' if name == 'log_density' else '(n, d)'}."
            )
        return values

    def log_density(self, points):
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, self.d)
        n, out = points.shape[0], np.empty(points.shape[0])
        chunk = max(1, _MAX_BATCH_NUMBERS // self.d)
        for begin in range(0, n, chunk):
            block = points[begin:begin + chunk]
            self.n_log_density += block.shape[0]
            values = self._call(self._log_density, "log_density", block,
                                lambda k: ((k,), (k, 1)) if k > 1 else ((1,), (1, 1), ()))
            if isinstance(values, list):
                values = np.array([-np.inf if v is None else float(np.ravel(v)[0])
                                   for v in values])
            elif values is None:
                values = np.array([-np.inf])
            out[begin:begin + block.shape[0]] = values.reshape(-1)
        if np.any(out == np.inf):
            # +inf is no density value (log p = -inf is outside the support): refused, not
            # read as -inf, which would hide an overflow or a sign error.
            at = points[int(np.argmax(out == np.inf))]
            raise ValueError(
                f"log_density returned +inf at the point {np.array2string(at, precision=4)}; "
                "a log density is finite, or -inf outside the support. Check log_density "
                "there (an overflow or a sign error).")
        out[np.isnan(out)] = -np.inf
        return out

    def score(self, points):
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, self.d)
        self.n_score += points.shape[0]
        values = self._call(self._score, "score", points,
                            lambda k: ((k, self.d),) if k > 1 else ((1, self.d), (self.d,)))
        if isinstance(values, list):
            values = np.array([np.full(self.d, np.nan) if v is None else np.ravel(v)
                               for v in values])
        elif values is None:
            values = np.full((1, self.d), np.nan)
        return values.reshape(points.shape)

    def value_and_gradient(self, points):
        """(log p (n,), gradient (n, d)) at ``points``."""
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, self.d)
        if self._score is not None:
            return self.log_density(points), self.score(points)
        n, d = points.shape
        shifts = np.diag(self.steps)
        shifted = np.concatenate([points[:, None, :], points[:, None, :] + shifts,
                                  points[:, None, :] - shifts], axis=1)   # (n, 2d + 1, d)
        values = self.log_density(shifted.reshape(-1, d)).reshape(n, 2 * d + 1)
        with np.errstate(invalid="ignore"):
            gradient = (values[:, 1:d + 1] - values[:, d + 1:]) / (2.0 * self.steps)
        gradient[~np.isfinite(gradient)] = np.nan
        return values[:, 0], gradient

    def gradient(self, points):
        return self.value_and_gradient(points)[1]


def check_at_draws(counted, flat, rng):
    """log p (and the gradient) at a few draws: a batch of 2 or more points, so a
    log_density that returns one number per batch is caught, and a log_density that
    raises at every draw is a bug, raised here."""
    picks = flat[rng.choice(flat.shape[0], size=min(4, flat.shape[0]), replace=False)]
    if picks.shape[0] < 2:
        picks = np.concatenate([picks, picks])
    failed_before = counted.n_failed
    values = counted.log_density(picks)
    if counted.n_failed - failed_before == picks.shape[0]:
        raise ValueError(f"log_density raised at every draw tried ({counted.failure}); "
                         "a log density must be finite where the draws are.")
    if not np.any(np.isfinite(values)):
        raise ValueError("log_density is not finite at any of the draws tried; it must be "
                         "finite where the draws are.")
    if counted.gradient_kind == SCORE:
        counted.score(picks)


def draws_spread(flat):
    """Per-coordinate sd of the draws, zeros and NaNs replaced by the median (or 1)."""
    spread = flat.std(axis=0)
    good = spread > 0
    spread[~good] = np.median(spread[good]) if good.any() else 1.0
    return spread


def starting_points(flat, rng, starts, n_starts, n_draw_starts, widen, spread):
    """Overdispersed starts plus a few draws (so the visited modes are found too).

    Half the overdispersed starts are widened draws, mean + f (x - mean); the other
    half are broad, mean + f * max(sd_k, median sd) * z_k with z standard normal: far in
    every direction, also those along which the draws barely vary.
    """
    picks = flat[rng.choice(flat.shape[0], size=min(n_draw_starts, flat.shape[0]),
                            replace=False)]
    if starts is not None:
        return np.concatenate([starts, picks]), "given"
    centre = flat.mean(axis=0)
    n_widened = n_starts // 2
    n_broad = n_starts - n_widened
    chosen = flat[rng.choice(flat.shape[0], size=n_widened,
                             replace=n_widened > flat.shape[0])]
    factors = np.resize(widen, n_widened)[:, None]
    widened = centre + factors * (chosen - centre)
    floored = np.maximum(spread, np.median(spread))
    broad = centre + np.resize(widen, n_broad)[:, None] * floored \
        * rng.standard_normal((n_broad, flat.shape[1]))
    return (np.concatenate([widened, broad, picks]), "widened draws and broad starts")


def _maximise(counted, start, max_iterations):
    """L-BFGS on -log p from ``start``: end point, or None if log p is not finite there."""

    def objective(x):
        value, gradient = counted.value_and_gradient(x[None])
        value, gradient = value[0], gradient[0]
        if not np.isfinite(value) or not np.all(np.isfinite(gradient)):
            # Outside where log p is finite: a large value the line search backs off from.
            return np.inf, np.zeros_like(x)
        return -value, -gradient

    # scipy.optimize is imported here, as in methods.estimation: it takes longer to import
    # than the rest of steindiag's dependencies, and only a search needs it.
    from scipy import optimize

    # One BLAS thread: L-BFGS-B's small dense products only lose time to thread start-up.
    with np.errstate(all="ignore"), single_threaded_blas():
        result = optimize.minimize(objective, start, jac=True, method="L-BFGS-B",
                                   options={"maxiter": max_iterations})
    if not np.isfinite(result.fun) or not np.all(np.isfinite(result.x)):
        return None
    return result.x, -float(result.fun), -np.asarray(result.jac, dtype=np.float64)


def _hessian(counted, point, scale):
    """-Hessian of log p at ``point`` by central differences of the gradient.

    2 d gradients: 2 d scores, or 2 d (2 d + 1) log p values with finite differences.
    """
    d = point.shape[0]
    steps = _FD_STEP * scale
    shifts = np.diag(steps)
    gradients = counted.gradient(np.concatenate([point + shifts, point - shifts]))
    jacobian = (gradients[:d] - gradients[d:]) / (2.0 * steps[:, None])  # row k: d s / d x_k
    return -0.5 * (jacobian + jacobian.T)


def _as_mode(counted, point, gradient, scale):
    """(precision H, log det H) at a local maximum, or None.

    None for a saddle or a flat direction (H not positive definite), non-finite values,
    or a point that is not stationary: half the Newton decrement, s^T H^-1 s / 2 (the
    rise of log p a Newton step would still make), above ``_MAX_RISE`` (an optimiser
    that ran out of iterations, or climbs a density that grows without bound, as in
    the neck of a funnel).
    """
    precision = _hessian(counted, point, scale)
    if not np.all(np.isfinite(precision)) or not np.all(np.isfinite(gradient)):
        return None
    try:
        factor = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError:
        return None
    whitened = np.linalg.solve(factor, gradient)
    if 0.5 * whitened @ whitened > _MAX_RISE:
        return None
    log_det = 2.0 * np.sum(np.log(np.diag(factor)))
    return precision, log_det


def mahalanobis_sq(points, centre, precision):
    diff = points - centre
    return np.einsum("ij,jk,ik->i", diff, precision, diff)


def find_modes(counted, points, spread, max_iterations):
    """(modes, n_rejected): L-BFGS from every start; the end points, highest log p
    first, merged into local maxima (dicts: point, log_density, precision, log_mass)."""
    ends = []
    for start in points:
        end = _maximise(counted, start, max_iterations)
        if end is not None:
            ends.append(end)
    ends.sort(key=lambda item: -item[1])
    modes, n_rejected = [], len(points) - len(ends)
    for point, value, gradient in ends:
        if any(mahalanobis_sq(point[None], mode["point"], mode["precision"])[0]
               < _MERGE_DISTANCE ** 2 for mode in modes):
            continue
        local = _as_mode(counted, point, gradient, spread)
        if local is None:
            n_rejected += 1
            continue
        precision, log_det = local
        modes.append({"point": point, "log_density": value, "precision": precision,
                      "log_mass": value + 0.5 * counted.d * np.log(2 * np.pi) - 0.5 * log_det})
    return modes, n_rejected
