"""When a correction cannot be trusted: the checks behind the warnings of the corrections.

``stein_weights``, ``weighted_summary`` and ``stein_thin`` only redistribute mass among
the draws the sampler visited (weights on the simplex, a subset of the draws): a region
the chains never reached gets no mass, and the corrected estimate can move away from the
truth while its own KSD falls. Three causes are checked here, each named in a
:class:`CorrectionWarning` and recorded in the result's attrs (see the Background page of
the docs):

- divergent transitions in the trace's ``sample_stats`` or the sampler's own record (the
  sampler failed to enter part of the posterior);
- unvisited mass found by the missing-mass search (``steindiag.methods.missing_mass``),
  run when a log density is at hand, or a search result passed by the caller;
- a corrected KSD that stays far above its floor: above the level that N exact i.i.d.
  draws exceed with probability at most 1 % (``ksd_null_threshold``).
"""

import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np

from steindiag._types import CorrectionWarning
from steindiag._words import plural
from steindiag.methods.search import run_search

__all__ = ["CorrectionChecks", "check_correction", "ksd_null_threshold", "MODE_SEARCH_OPTIONS", "MODE_SEARCH_TAKES",
           "check_mode_search", "summary_reasons"]

# Level of the "far above the floor" check: an exact i.i.d. sample of the same size
# exceeds the threshold with probability at most this (whatever the null's shape).
FAR_ALPHA = 0.01

# Rows of the Stein kernel matrix used to estimate the null variance (evenly spaced
# draws; n_rows * N kernel evaluations, n_rows * N * 8 bytes).
_NULL_ROWS = 256

MODE_SEARCH_OPTIONS = ("auto", True, False)
MODE_SEARCH_TAKES = ("'auto', True or False: search for modes the chains never visited when log "
                     "p is available, always, never")

# Level of the missing-mass search (its ``alpha``): mass is "found" at p < 0.05.
SEARCH_LEVEL = 0.05


@dataclass(kw_only=True)
class CorrectionChecks:
    """What the checks found; ``reasons`` is empty when none fired.

    Attributes
    ----------
    reasons : list of str
        One sentence per cause found.
    divergences : int
        Divergent transitions in the draws used (-1: the trace records none, or the
        input is not a trace).
    missing_mass : str
        ``"found"``, ``"not found"`` or ``"not searched"``.
    missing_mass_detail : str
        The search's one-sentence summary, or why it was not run.
    missing_mass_n_log_density : int
        Log-density evaluations the search made (0 if not run here).
    ksd_far_threshold : float
        KSD above which the corrected draws are "far above the floor" (nan if unchecked).
    ksd_far_above_floor : bool
    """

    reasons: list = field(default_factory=list)
    divergences: int = -1
    missing_mass: str = "not searched"
    missing_mass_detail: str = ""
    missing_mass_n_log_density: int = 0
    ksd_far_threshold: float = float("nan")
    ksd_far_above_floor: bool = False

    def attrs(self):
        """netCDF-safe attrs (str, int, float) recording the checks."""
        return {
            "correction_warnings": " | ".join(self.reasons),
            "sampler_divergences": int(self.divergences),
            "missing_mass": self.missing_mass,
            "missing_mass_detail": self.missing_mass_detail,
            "missing_mass_n_log_density": int(self.missing_mass_n_log_density),
            "ksd_far_threshold": float(self.ksd_far_threshold),
            "ksd_far_above_floor": int(bool(self.ksd_far_above_floor)),
        }

    def warn(self, what, stacklevel=3):
        """One CorrectionWarning naming every cause, if any fired."""
        if self.reasons:
            warnings.warn(
                f"{what} cannot be trusted here: " + "; ".join(self.reasons) + ". Weights "
                "and thinning only redistribute mass among the visited draws; they cannot "
                "put mass where the sampler never went.",
                CorrectionWarning,
                stacklevel=stacklevel,
            )


def check_mode_search(mode_search):
    """``mode_search`` of a correction: "auto", True, False, or a search result."""
    if isinstance(mode_search, (str, bool, np.bool_)):
        if mode_search not in MODE_SEARCH_OPTIONS:
            raise ValueError(
                f"mode_search must be 'auto', True, False or a missing-mass search result; "
                f"got {mode_search!r}."
            )
        return
    if not isinstance(getattr(mode_search, "found", None), (bool, np.bool_)):
        raise TypeError(
            "mode_search must be 'auto', True, False or a missing-mass search result (an "
            f"object with a boolean 'found'); got {type(mode_search).__name__}."
        )


def ksd_null_threshold(points, alpha=FAR_ALPHA, n_rows=_NULL_ROWS):
    """KSD that N exact i.i.d. draws of p exceed with probability at most ``alpha``.

    For i.i.d. draws of p the V-statistic KSD^2 = N^-2 sum_ij k_p(x_i, x_j) has mean
    m = mean_i k_p(x_i, x_i) / N (the squared floor) and variance
    [2 N (N - 1) E k_p(x, y)^2 + N Var k_p(x, x)] / N^4 (the off-diagonal terms are a
    degenerate U-statistic, uncorrelated with the diagonal). Cantelli's inequality gives
    P(KSD^2 >= m + sigma sqrt((1 - alpha) / alpha)) <= alpha for any distribution with
    that variance. The moments are estimated at the points (like the floor itself),
    E k_p(x, y)^2 from ``n_rows`` evenly spaced rows: n_rows * N kernel evaluations.
    """
    n = points.n
    diagonal = points.diagonal
    floor2 = float(diagonal.mean()) / n
    if n < 2:
        return float(np.sqrt(floor2))
    index = np.unique(np.linspace(0, n - 1, min(n, n_rows)).astype(np.int64))
    rows = points.rows(index)
    rows[np.arange(index.size), index] = 0.0
    off_diagonal_m2 = float(np.sum(rows * rows)) / (index.size * (n - 1.0))
    variance = (2.0 * (n - 1.0) * off_diagonal_m2 + float(diagonal.var())) / n**3
    threshold2 = floor2 + np.sqrt((1.0 - alpha) / alpha) * np.sqrt(variance)
    return float(np.sqrt(threshold2))


def check_correction(*, pending, prepared, kernel, preconditioner, mode_search, rng=None,
                     ksd_checks=()):
    """Run the checks of a correction; returns :class:`CorrectionChecks`.

    Parameters
    ----------
    pending : PendingInput
        The input as read: the sampler's divergences for the draws used, and the score
        source (log p and the score at new points, for the search).
    prepared : SteinInput of the draws used
    kernel, preconditioner : what the correction's KSD used
    mode_search : "auto", True, False, or a search result (with ``found``, ``summary``)
        "auto": search when a log density is at hand (a callable, or a PyMC model) and
        the score can be evaluated at new points; True: search or raise.
    rng : numpy Generator for the search
    ksd_checks : iterable of (KernelPoints, corrected KSD, label)
        Each corrected KSD is compared with ``ksd_null_threshold`` of its points.
    """
    checks = CorrectionChecks()
    try:
        found = pending.sampler_warnings()
    except (TypeError, ValueError, KeyError):
        found = None
    if found is not None:
        checks.divergences = found.total
        if found.total > 0:
            per_chain = ", ".join(str(int(k)) for k in found.divergences)
            checks.reasons.append(
                f"the sampler reported {plural(found.total, 'divergent transition')} (per chain: "
                f"{per_chain}; {found.source}), so the chains missed part of the posterior"
            )
    # The missing-mass search.
    result = None
    search = isinstance(mode_search, (str, bool, np.bool_))
    if search and not mode_search:
        checks.missing_mass_detail = "not searched: mode_search=False"
    elif search:
        if not pending.source.has_log_density():
            why = ("no log density: pass log_density= (a callable on the flat parameter "
                   "vector) or a PyMC model")
            if mode_search != "auto":
                raise ValueError(f"mode_search=True needs log p at new points; {why}.")
            checks.missing_mass_detail = f"not searched: {why}"
        else:
            try:
                result, why = run_search(prepared, pending.source, kernel, preconditioner,
                                         SEARCH_LEVEL, rng)
            except (ValueError, ArithmeticError, RuntimeError) as err:
                # log p failing at a point the search tried (PyMC's ParameterValueError in
                # a funnel's neck, an overflow) must not lose the correction's result.
                if mode_search != "auto":
                    raise
                message = str(err).splitlines()[0] if str(err) else ""
                result, why = None, f"the search failed ({type(err).__name__}: {message})"
                warnings.warn(
                    f"the missing-mass search failed and was skipped ({type(err).__name__}: "
                    f"{message}); the correction's other "
                    "checks ran. Pass mode_search=False to skip the search.",
                    UserWarning,
                    stacklevel=4,
                )
            if result is None:
                if mode_search != "auto":
                    raise ValueError(f"mode_search=True: the search cannot run: {why}.")
                checks.missing_mass_detail = f"not searched: {why}"
            else:
                checks.missing_mass_n_log_density = int(getattr(result, "n_log_density", 0))
    else:
        result = mode_search
    if result is not None:
        checks.missing_mass = "found" if bool(result.found) else "not found"
        checks.missing_mass_detail = str(getattr(result, "summary", ""))
        if result.found:
            checks.reasons.append(
                "the missing-mass search found mass the chains never visited ("
                + (checks.missing_mass_detail.rstrip(".") or getattr(result, "method", "search"))
                + ")"
            )
    for points, corrected_ksd, label in ksd_checks:
        threshold = ksd_null_threshold(points)
        checks.ksd_far_threshold = float(np.fmax(checks.ksd_far_threshold, threshold))
        if isinstance(corrected_ksd, numbers.Real) and corrected_ksd > threshold:
            checks.ksd_far_above_floor = True
            floor = float(np.sqrt(points.diagonal.mean() / points.n))
            checks.reasons.append(
                f"the {label} KSD {corrected_ksd:.3g} stays far above its i.i.d. floor "
                f"{floor:.3g} (above {threshold:.3g}, which exact independent draws of the "
                f"same size exceed with probability at most {FAR_ALPHA:.0%}), so no "
                "reweighting of these draws fits the target"
            )
    return checks


def summary_reasons(found, recorded):
    """Causes not to trust a weighted summary: the sampler's divergences (``found``, or
    None), and what the weights recorded in their attrs (``recorded``)."""
    reasons = []
    if found is not None and found.total > 0:
        reasons.append(
            f"the sampler reported {plural(found.total, 'divergent transition')} "
            f"({found.source}), "
            "so the chains missed part of the posterior"
        )
    if recorded.get("missing_mass") == "found":
        reasons.append("the weights record mass the chains never visited ("
                       f"{recorded.get('missing_mass_detail', '')})")
    if recorded.get("ksd_far_above_floor"):
        reasons.append(
            f"the weights' KSD {recorded.get('ksd_weighted', float('nan')):.3g} stays far above "
            f"its floor (threshold {recorded.get('ksd_far_threshold', float('nan')):.3g})"
        )
    return reasons
