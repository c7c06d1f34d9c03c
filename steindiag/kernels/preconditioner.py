"""Preconditioners: the kernel's length scales, fixed once from the pooled draws.

Every choice ends as a :class:`Preconditioner` that maps draws and scores to
*kernel coordinates* where ``A = Lambda^{-1}`` is diagonal (see the Background page of the docs):

- ``"identity"``: A = I.
- ``"standardize"`` (default): change of variables z = x / scale, s_z = s * scale with a
  robust pooled scale per coordinate, then A = I. Rescaling any parameter leaves the
  KSD unchanged (the scales move with it). The Stein kernel is a statement about the
  density of z, which is p up to a constant Jacobian, so this is exactly the KSD of
  the rescaled problem.
- ``"med"``: Lambda = med^2 I, med the median pairwise Euclidean distance of (at most
  1000 evenly spaced) pooled draws (Riabiz et al. 2022; as in stein-thinning).
- ``"sclmed"``: Lambda = med^2 / log(min(N, 1000)) I.
- ``"smpcov"``: Lambda = the pooled sample covariance.
- an array: 0-d (Lambda = value * I), 1-D (diagonal of Lambda) or 2-D (full SPD Lambda).

A full Lambda = V diag(lam) V^T is handled by the orthogonal rotation x -> V^T x,
s -> V^T s, which leaves every dot product, and so k_p, unchanged.
"""

from dataclasses import dataclass

import numpy as np
from scipy.spatial.distance import pdist

from steindiag._validate import LOG10_HEADROOM

__all__ = ["Preconditioner", "make_preconditioner", "PRECONDITIONERS"]

# Consistency factor making the median absolute deviation estimate the sd of a normal.
_MAD_TO_SD = 1.482602218505602
_MEDIAN_SUBSAMPLE = 1000


@dataclass(kw_only=True)
class Preconditioner:
    """A preconditioner resolved from the pooled draws.

    Attributes
    ----------
    name : str
        ``"identity"``, ``"standardize"``, ``"med"``, ``"sclmed"``, ``"smpcov"`` or ``"array"``.
    scale : ndarray (d,) or None
        Per-coordinate scales of the ``"standardize"`` change of variables.
    lambda_matrix : ndarray (d, d)
        Lambda actually used, in the coordinates after standardisation (if any).
    rotation : ndarray (d, d) or None
        Orthogonal V with Lambda = V diag(1 / a) V^T, or None when Lambda is diagonal.
    a : ndarray (d,)
        Diagonal of A = Lambda^{-1} in kernel coordinates.
    isotropic : bool
        Whether A = a[0] I.
    """

    name: str
    scale: np.ndarray | None
    lambda_matrix: np.ndarray
    rotation: np.ndarray | None
    a: np.ndarray
    isotropic: bool
    parameter: list | None = None

    @property
    def trace_a(self):
        """tr(A), invariant under the rotation."""
        return float(np.sum(self.a))

    def to_kernel_coordinates(self, draws, scores):
        """Map (..., d) draws and scores to kernel coordinates (new float64 arrays)."""
        if self.scale is not None:
            draws = draws / self.scale
            scores = scores * self.scale
        self._check_scores(scores)
        if self.rotation is not None:
            draws = draws @ self.rotation
            scores = scores @ self.rotation
        # Always copies (np.array, not np.asarray): callers centre the result in place, and
        # the identity map must not hand them the user's arrays.
        return np.array(draws, dtype=np.float64), np.array(scores, dtype=np.float64)

    def _check_scores(self, scores):
        """Refuse scores whose products in the Stein kernel leave float64 (O(N d) reads).

        The kernel holds s(x)^T s(y) and s^T A (x - y) in kernel coordinates (the rotation
        keeps norms): the largest |s_k| there must stay below 10^(LOG10_HEADROOM / 2).
        """
        scores = np.asarray(scores)
        if scores.size == 0:
            return
        d = scores.shape[-1]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            largest = np.max(np.abs(scores.reshape(-1, d)), axis=0)
            log_norm = np.log10(np.sqrt(d) * np.max(np.where(np.isnan(largest), 0.0, largest)))
        if not log_norm > LOG10_HEADROOM / 2:
            return
        worst = int(np.nanargmax(largest))
        name = self.parameter[worst] if self.parameter is not None else f"x[{worst}]"
        where = (f" (the score times the scale the preconditioner divides {name!r} by, "
                 f"{self.scale[worst]:.3g})" if self.scale is not None else "")
        raise ValueError(
            f"score: |grad log p| reaches {largest[worst]:.3g} in the Stein kernel's "
            f"coordinates for {name!r}{where}; the kernel multiplies scores together, so this "
            f"(about 1e{2 * log_norm:.0f}, above 1e{LOG10_HEADROOM:.0f}) overflows float64 and "
            "KSD would be inf or NaN. Draws this far from where the score puts p's mass do "
            "not fit p; if they should, the draws and the score disagree in units, space "
            "(space=) or order of the parameters (var_names=). Use "
            "preconditioner='standardize' (the default), or rescale the parameters."
        )

    def attrs(self):
        """netCDF-friendly attributes recording what was used."""
        out = {"preconditioner": self.name}
        if self.scale is not None:
            out["standardize_scale"] = self.scale.copy()
        if self.isotropic and self.rotation is None:
            out["preconditioner_lambda"] = float(1.0 / self.a[0])
            out["preconditioner_lambda_layout"] = "scalar times identity"
        elif self.rotation is None:
            out["preconditioner_lambda"] = 1.0 / self.a
            out["preconditioner_lambda_layout"] = "diagonal"
        else:
            out["preconditioner_lambda"] = self.lambda_matrix.ravel()
            out["preconditioner_lambda_layout"] = "full, row-major (d, d)"
        return out


def _pooled_median_distance(pooled):
    n = pooled.shape[0]
    if n > _MEDIAN_SUBSAMPLE:
        pooled = pooled[np.linspace(0, n - 1, _MEDIAN_SUBSAMPLE, dtype=int)]
    med = float(np.median(pdist(pooled)))
    if not med > 0:
        raise ValueError(
            "preconditioner: the median pairwise distance of the draws is 0 (too few "
            "distinct draws); use preconditioner='standardize' or pass an array."
        )
    return med


def _from_lambda(name, lambda_matrix, scale=None):
    """Build the Preconditioner for an SPD Lambda (already validated)."""
    d = lambda_matrix.shape[0]
    off_diagonal = lambda_matrix - np.diag(np.diag(lambda_matrix))
    if not np.any(off_diagonal):
        a = 1.0 / np.diag(lambda_matrix)
        rotation = None
    else:
        eigenvalues, rotation = np.linalg.eigh(lambda_matrix)
        a = 1.0 / eigenvalues
    isotropic = bool(np.all(a == a[0])) and d > 0
    return Preconditioner(
        name=name,
        scale=scale,
        lambda_matrix=lambda_matrix,
        rotation=rotation,
        a=np.ascontiguousarray(a, dtype=np.float64),
        isotropic=isotropic,
    )


def _identity(pooled, parameter):
    d = pooled.shape[1]
    return _from_lambda("identity", np.eye(d))


# Values copied at once by the median of 'standardize' (8 MB).
_MEDIAN_BLOCK = 2**20


def _standardize(pooled, parameter):
    n, d = pooled.shape
    # A few columns at a time: the medians copy at most max(N, 2^20) values, not the
    # (N, d) draws twice (this preconditioner is the default, also of the Nystrom
    # estimator at 10^7 draws, whose memory budget is twice the draws and scores); small
    # inputs take all columns in one call (a call per column cost 1.8 ms at d = 14).
    width = max(1, _MEDIAN_BLOCK // max(n, 1))
    scale = np.empty(d)
    for k0 in range(0, d, width):
        block = np.array(pooled[:, k0 : k0 + width], dtype=np.float64)
        block -= np.median(block, axis=0)
        np.abs(block, out=block)
        scale[k0 : k0 + width] = _MAD_TO_SD * np.median(block, axis=0)
    fallback = ~(scale > 0)
    if np.any(fallback):
        # More than half the draws share one value (e.g. a sticky chain): use the sd.
        scale[fallback] = np.std(pooled[:, fallback], axis=0)
    zero = ~(scale > 0)
    if np.any(zero):
        names = [parameter[k] for k in np.flatnonzero(zero)]
        raise ValueError(
            "preconditioner='standardize': these coordinates are constant over all draws, "
            f"so they have no scale: {names}. A parameter that never moves means the sampler "
            "is stuck; KSD cannot be computed for it."
        )
    return _from_lambda("standardize", np.eye(d), scale=scale)


def _med(pooled, parameter):
    med = _pooled_median_distance(pooled)
    return _from_lambda("med", med**2 * np.eye(pooled.shape[1]))


def _sclmed(pooled, parameter):
    med = _pooled_median_distance(pooled)
    n = pooled.shape[0]
    return _from_lambda(
        "sclmed", med**2 / np.log(min(n, _MEDIAN_SUBSAMPLE)) * np.eye(pooled.shape[1])
    )


def _smpcov(pooled, parameter):
    cov = np.atleast_2d(np.cov(pooled, rowvar=False))
    return _from_lambda("smpcov", _check_spd(cov, "preconditioner='smpcov' (sample covariance)"))


PRECONDITIONERS = {
    "identity": _identity,
    "standardize": _standardize,
    "med": _med,
    "sclmed": _sclmed,
    "smpcov": _smpcov,
}


def _check_spd(matrix, what):
    if not np.allclose(matrix, matrix.T, rtol=1e-10, atol=0.0):
        raise ValueError(f"{what} must be symmetric.")
    matrix = 0.5 * (matrix + matrix.T)
    eigenvalues = np.linalg.eigvalsh(matrix)
    if not eigenvalues[0] > 1e-12 * max(eigenvalues[-1], np.finfo(float).tiny):
        raise ValueError(
            f"{what} must be symmetric positive definite; its smallest eigenvalue is "
            f"{eigenvalues[0]:.3g} (largest {eigenvalues[-1]:.3g})."
        )
    return matrix


def make_preconditioner(preconditioner, pooled_draws, parameter):
    """Resolve ``preconditioner`` once from the pooled (N, d) draws.

    Parameters
    ----------
    preconditioner : str or array_like
        A name from ``PRECONDITIONERS`` or a Lambda (0-d, 1-D diagonal or 2-D SPD).
    pooled_draws : ndarray (N, d)
    parameter : list of str
        Labels of the d coordinates (for error messages).

    Raises
    ------
    ValueError
        Also when tr(A) or (x - y)^T A (x - y) over the draws would leave float64's
        headroom (``steindiag._validate.LOG10_HEADROOM``): the kernel's sums would be
        inf or NaN.
    """
    pre = _resolve(preconditioner, pooled_draws, parameter)
    _check_kernel_scale(pre, preconditioner, pooled_draws, parameter)
    pre.parameter = None if parameter is None else list(parameter)
    return pre


def _check_kernel_scale(pre, preconditioner, pooled_draws, parameter):
    """tr(A) and the largest (x - y)^T A (x - y) of the draws within float64's headroom.

    O(N d) reads, no copy: for a diagonal A the largest t is sum_k a_k range_k^2 (ranges
    in kernel coordinates); with a rotation, max(a) sum_k range_k^2 bounds it.
    """
    limit = 10.0**LOG10_HEADROOM
    name = (f"preconditioner={preconditioner!r}" if isinstance(preconditioner, str)
            else "preconditioner (Lambda array)")
    with np.errstate(over="ignore", invalid="ignore"):
        trace_a = float(np.sum(pre.a))
        if not (np.isfinite(trace_a) and trace_a <= limit):
            raise ValueError(
                f"{name}: tr(Lambda^-1) = {trace_a:.3g} (Lambda's smallest "
                f"eigenvalue {1.0 / float(np.max(pre.a)):.3g}); the Stein kernel holds "
                f"tr(Lambda^-1), which must stay below {limit:.0e} in float64. Lambda is the "
                "kernel's squared length scale: give it the order of the draws' variances, "
                "or use preconditioner='standardize' (the default)."
            )
        if pooled_draws.size == 0:
            return
        spread = np.max(pooled_draws, axis=0) - np.min(pooled_draws, axis=0)
        if pre.scale is not None:
            spread = spread / pre.scale
        if pre.rotation is None:
            per_parameter = pre.a * spread**2
        else:
            per_parameter = float(np.max(pre.a)) * spread**2
        t_max = float(np.sum(per_parameter))
    if not (np.isfinite(t_max) and t_max <= limit):
        worst = int(np.argmax(np.where(np.isfinite(per_parameter), per_parameter, np.inf)))
        raise ValueError(
            f"{name}: the draws span {spread[worst]:.3g} in the kernel's "
            f"coordinates along {parameter[worst]!r}, so (x - y)^T Lambda^-1 (x - y) reaches "
            f"{t_max:.3g}, beyond the {limit:.0e} float64 leaves the Stein kernel; its sums "
            "would be inf or NaN. Use preconditioner='standardize' (the default, which "
            "divides each parameter by its spread), a Lambda of the order of the draws' "
            "variances, or rescale the parameters."
        )


def _name_or_lambda(preconditioner):
    """A preconditioner's name (one of ``PRECONDITIONERS``) or its Lambda as a float array."""
    if isinstance(preconditioner, str):
        if preconditioner not in PRECONDITIONERS:
            raise ValueError(
                f"preconditioner must be one of {sorted(PRECONDITIONERS)} or an array "
                f"(Lambda); got {preconditioner!r}."
            )
        return preconditioner
    try:
        return np.asarray(preconditioner, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            "preconditioner must be a string or an array of floats (Lambda); got "
            f"{type(preconditioner).__name__}."
        ) from None


def _resolve(preconditioner, pooled_draws, parameter):
    lam = _name_or_lambda(preconditioner)
    if isinstance(lam, str):
        return PRECONDITIONERS[lam](pooled_draws, parameter)
    d = pooled_draws.shape[1]
    if not np.all(np.isfinite(lam)):
        raise ValueError("preconditioner array must be finite.")
    if lam.ndim == 0:
        if not lam > 0:
            raise ValueError(f"preconditioner scalar Lambda must be > 0; got {float(lam)}.")
        return _from_lambda("array", float(lam) * np.eye(d))
    if lam.ndim == 1:
        if lam.shape != (d,):
            raise ValueError(
                f"preconditioner 1-D array (diagonal of Lambda) must have shape ({d},); "
                f"got {lam.shape}."
            )
        if not np.all(lam > 0):
            raise ValueError("preconditioner 1-D array (diagonal of Lambda) must be > 0.")
        return _from_lambda("array", np.diag(lam))
    if lam.ndim == 2:
        if lam.shape != (d, d):
            raise ValueError(
                f"preconditioner 2-D array (Lambda) must have shape ({d}, {d}); got {lam.shape}."
            )
        return _from_lambda("array", _check_spd(lam, "preconditioner 2-D array (Lambda)"))
    raise ValueError(
        f"preconditioner array must be 0-D, 1-D or 2-D; got {lam.ndim} dimensions."
    )


def check_preconditioner(preconditioner):
    """Check ``preconditioner`` before any draw is read or score evaluated.

    A name must be in ``PRECONDITIONERS``; an array must be a finite 0-d, 1-D or 2-D
    Lambda (positive; a 2-D one symmetric positive definite). Its size is checked
    against the number of parameters by :func:`make_preconditioner`, once the draws
    are read (before any score is evaluated).
    """
    lam = _name_or_lambda(preconditioner)
    if isinstance(lam, str):
        return
    if lam.ndim > 2:
        raise ValueError(
            f"preconditioner array must be 0-D, 1-D or 2-D; got {lam.ndim} dimensions."
        )
    if lam.ndim == 2 and lam.shape[0] != lam.shape[1]:
        raise ValueError(f"preconditioner 2-D array (Lambda) must be square; got {lam.shape}.")
    # The checks that need no draws: make_preconditioner with d = the array's own size.
    d = 1 if lam.ndim == 0 else lam.shape[0]
    if d == 0:
        raise ValueError("preconditioner array must not be empty.")
    make_preconditioner(lam, np.zeros((2, d)), [f"x[{k}]" for k in range(d)])
