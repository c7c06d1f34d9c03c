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
  draws exceed with probability at most 1 % (``ksd_null_threshold``);
- corrected draws narrower than the target (``check_spread``): in some parameter the
  weighted (or thinned) draws keep clearly less variance than the target's curvature
  implies (``stats.stein_moments.curvature_spread``). Weights cannot add spread the
  draws lack; ``stein_variational`` moves the draws instead.
"""

import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np

from steindiag._attrs import decode_list
from steindiag._types import CorrectionWarning
from steindiag._words import listing, plural
from steindiag.methods.search import run_search
from steindiag.stats.stein_moments import curvature_spread, implied_variance, stein_moments

__all__ = ["CorrectionChecks", "check_correction", "check_spread", "ksd_null_threshold",
           "MODE_SEARCH_OPTIONS", "MODE_SEARCH_TAKES", "check_mode_search",
           "summary_reasons", "summary_message", "SPREAD_RATIO", "SPREAD_Z",
           "THINNING_SPREAD_WORDS"]

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

# Corrected draws narrower than the target: a parameter whose corrected variance is at
# most SPREAD_RATIO of the one the target's curvature implies, SPREAD_Z standard errors
# below 1 (``check_spread``). Chosen by measurement (benchmarks/bench_correction_limits.py,
# results in benchmarks/results/corrections_limits.md): no warning in any of the valid runs
# (exact draws, healthy NUTS, small-step unadjusted Langevin, over-dispersed draws that
# weights fix), a warning on draws shrunk towards their mean and on mean-field ADVI.
SPREAD_RATIO = 0.75
SPREAD_Z = 4.0
# More parameters than this: the variance the curvature implies is not computed (the
# d x d Stein matrix, O(N d^2) time); the diagonal Stein spread moment is used instead.
_SPREAD_MAX_MATRIX = 1000
# Fewer effective draws than this (Kish ESS of the weights, or of the selection): the
# spread is not checked (too few points to estimate a variance and its error).
_SPREAD_MIN_ESS = 20
# Parameters named in the message (the rest are counted).
_SPREAD_NAMED = 3
_SVGD_HINT = "stein_variational moves the draws"
# stein_thin's words for check_spread. Thinned points narrower than draws of the right
# spread are recorded (``stein_thinning_spread_lost``) but not warned about: greedy
# thinning of a tenth of the draws does that to most valid runs with d >= 10 (measured:
# exact draws in d = 10, 77 %; d = 23, 100 %; healthy NUTS on a logistic model with
# d = 23, 91 %; benchmarks/results/corrections_limits.md): as a warning it would be noise.
THINNING_SPREAD_WORDS = {"label": "in the thinned points", "before": "in all the draws",
                         "lost": None}


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
    spread : dict
        Per parameter (aligned with ``parameters``), from :func:`check_spread`: the
        corrected draws' variance over the one the target's curvature implies
        (``spread_variance_ratio``, its ``_z``), the same for the draws as given
        (``spread_variance_ratio_draws``, its ``_z``), the corrected Stein spread moment
        (``spread_moment``, its ``_z``), and the parameters found narrower than the
        target (``spread_under_dispersed``: as given too; ``spread_lost``: only once
        corrected). Empty if unchecked.
    """

    reasons: list = field(default_factory=list)
    divergences: int = -1
    missing_mass: str = "not searched"
    missing_mass_detail: str = ""
    missing_mass_n_log_density: int = 0
    ksd_far_threshold: float = float("nan")
    ksd_far_above_floor: bool = False
    spread: dict = field(default_factory=dict)

    @property
    def cannot_represent(self):
        """Whether a cause fired that moving the draws (SVGD) could address: corrected
        draws narrower than the target, or a corrected KSD far above its floor."""
        return bool(self.ksd_far_above_floor or self.spread.get("spread_under_dispersed"))

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
            **self.spread,
        }

    def warn(self, what, stacklevel=3):
        """One CorrectionWarning naming every cause, if any fired."""
        if self.reasons:
            warnings.warn(f"{what} cannot be trusted here: " + "; ".join(self.reasons)
                          + ". " + closing(self.cannot_represent), CorrectionWarning,
                          stacklevel=stacklevel)


def closing(cannot_represent, subject="Weights and thinning"):
    """The sentence that ends a correction's warning: what weights and thinning cannot
    do, and (``cannot_represent``) the tool that moves the draws."""
    if not cannot_represent:
        return (f"{subject} only redistribute mass among the visited draws; they "
                "cannot put mass where the sampler never went.")
    return (f"{subject} only redistribute mass among the visited draws: they cannot put "
            "mass where the sampler never went, nor add spread the draws lack; "
            f"{_SVGD_HINT} (steindiag.stein_variational), or sample with a method that "
            "reaches the target.")


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


def _named(names, values, order):
    """', and b 0.5, c 0.6 and 2 more parameters': the flagged parameters after the first."""
    others = [f"{names[k]} {values[k]:.2g}" for k in order[1:_SPREAD_NAMED]]
    if len(order) > _SPREAD_NAMED:
        others.append(plural(len(order) - _SPREAD_NAMED, "more parameter"))
    return f", and {listing(others)}" if others else ""


def _narrow(ratio, ratio_z, moment, moment_z, active):
    """Parameters narrower than the target: the variance ratio (or, where it is undefined,
    the diagonal spread moment) at most SPREAD_RATIO and SPREAD_Z standard errors below 1;
    returns (bool (d,), the values used, their z)."""
    undefined = ~np.isfinite(ratio)
    used, used_z = np.where(undefined, moment, ratio), np.where(undefined, moment_z, ratio_z)
    with np.errstate(invalid="ignore"):
        return active & (used <= SPREAD_RATIO) & (used_z <= -SPREAD_Z), used, used_z


def check_spread(prepared, weights, *, label="after weighting", before="before weighting",
                 lost="the weights concentrate on draws near the mode"):
    """Whether the corrected draws are narrower than the target, per parameter.

    ``weights`` (chain, draw): the correction's weights, or how often thinning selected
    each draw (normalised over all draws). For each parameter, the variance over the one
    the target's curvature implies (``stats.stein_moments.curvature_spread``: 1 for draws
    of p) with its standard error, of the corrected draws and of the draws as given; where
    the Stein matrix is singular (or there are more than ``_SPREAD_MAX_MATRIX``
    parameters), the diagonal Stein spread moment instead. A parameter is
    narrow when its value is at most ``SPREAD_RATIO`` and ``SPREAD_Z`` standard errors
    below 1. Narrow both corrected and as given: the draws lack spread that no weights
    can add (``spread_under_dispersed``, the advice names ``stein_variational``); narrow
    only once corrected: the correction lost spread the draws have (``spread_lost``,
    explained by ``lost``; ``lost=None``: recorded, no sentence). Fewer than ``_SPREAD_MIN_ESS`` effective draws (Kish ESS):
    not checked (NaN). Returns (the per-parameter record for the attrs, the reasons'
    sentences). Time O(N d^2).
    """
    draws, scores = prepared.draws, prepared.scores
    d = draws.shape[2]
    weights = np.asarray(weights, dtype=np.float64)
    if np.sum(weights) ** 2 < _SPREAD_MIN_ESS * np.sum(weights**2):
        nan = np.full(d, np.nan)
        return {"spread_variance_ratio": nan, "spread_variance_ratio_z": nan,
                "spread_variance_ratio_draws": nan, "spread_variance_ratio_draws_z": nan,
                "spread_moment": nan, "spread_moment_z": nan, "spread_under_dispersed": [],
                "spread_lost": []}, []
    moments = stein_moments(draws, scores, pooled=True, weights=weights)
    given_moments = stein_moments(draws, scores, pooled=True)
    active = ~moments.constant_score
    columns = np.flatnonzero(active)
    ratio, ratio_z, given, given_z = (np.full(d, np.nan) for _ in range(4))
    if 0 < columns.size <= _SPREAD_MAX_MATRIX:
        draws, scores = draws[..., columns], scores[..., columns]
        implied = implied_variance(draws, scores)
        after = curvature_spread(draws, scores, weights, implied=implied)
        ratio[columns], ratio_z[columns] = after.ratio, after.ratio_z
        as_given = curvature_spread(draws, scores, implied=implied)
        given[columns], given_z[columns] = as_given.ratio, as_given.ratio_z
    narrow, used, used_z = _narrow(ratio, ratio_z, moments.spread[0], moments.spread_z[0],
                                   active)
    narrow_given, used_given, _ = _narrow(given, given_z, given_moments.spread[0],
                                          given_moments.spread_z[0], active)
    names = [str(name) for name in prepared.parameter]
    by_ratio = np.argsort(used, kind="stable")
    lacking = [k for k in by_ratio if narrow[k] and narrow_given[k]]
    lost_here = [k for k in by_ratio if narrow[k] and not narrow_given[k]]
    record = {
        "spread_variance_ratio": ratio, "spread_variance_ratio_z": ratio_z,
        "spread_variance_ratio_draws": given, "spread_variance_ratio_draws_z": given_z,
        "spread_moment": moments.spread[0], "spread_moment_z": moments.spread_z[0],
        "spread_under_dispersed": [names[k] for k in lacking],
        "spread_lost": [names[k] for k in lost_here],
    }
    reasons = []
    for order, ending in ((lacking, "so the draws are narrower than the target and no "
                           "reweighting or selection of them can widen them"),
                          (lost_here, f"so the correction lost spread the draws have ({lost})")):
        if not order or (order is lost_here and lost is None):
            continue
        first = order[0]
        what = ("variance the target's curvature implies" if np.isfinite(ratio[first])
                else "Stein spread moment of draws of the target")
        reasons.append(
            f"{label}, {names[first]} has {used[first]:.2g} of the {what} (z = "
            f"{used_z[first]:.1f}; 1 for draws of the target; {used_given[first]:.2g} "
            f"{before}){_named(names, used, order)}, {ending} (per parameter: the "
            "result's spread_variance_ratio attrs)")
    return record, reasons


def check_correction(*, pending, prepared, kernel, preconditioner, mode_search, rng=None,
                     ksd_checks=(), spread_weights=None, spread_words=None):
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
    spread_weights : ndarray (chain, draw), optional
        The correction's weights (or selection counts) for :func:`check_spread`;
        ``spread_words``: its ``label``, ``before`` and ``lost`` (dict), if not the
        weights'.
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
    if spread_weights is not None:
        checks.spread, reasons = check_spread(prepared, spread_weights,
                                              **(spread_words or {}))
        checks.reasons.extend(reasons)
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
    names = decode_list(recorded.get("parameters", ""))
    ratio = np.asarray(recorded.get("spread_variance_ratio", []), dtype=np.float64)
    moment = np.asarray(recorded.get("spread_moment", []), dtype=np.float64)
    for key, ending in (("spread_under_dispersed", "narrower than the target"),
                        ("spread_lost", "narrower than the draws themselves")):
        narrow = decode_list(recorded.get(key, ""))
        if not narrow:
            continue
        values = []
        for name in narrow[:_SPREAD_NAMED]:
            k = names.index(name) if name in names else -1
            value = ratio[k] if 0 <= k < ratio.size and np.isfinite(ratio[k]) else (
                moment[k] if 0 <= k < moment.size else np.nan)
            values.append(f"{name} {value:.2g}")
        if len(narrow) > _SPREAD_NAMED:
            values.append(plural(len(narrow) - _SPREAD_NAMED, "more parameter"))
        reasons.append(
            f"the weights record weighted draws {ending} (the weighted variance over the one "
            f"the target's curvature implies: {listing(values)}, in the space the weights "
            "were computed in; the weights' spread_variance_ratio attrs)"
        )
    return reasons


def summary_message(reasons, recorded):
    """The warning of a weighted summary that cannot be trusted (``reasons``)."""
    cannot_represent = bool(recorded.get("ksd_far_above_floor")) or bool(
        decode_list(recorded.get("spread_under_dispersed", "")))
    return ("weighted_summary cannot be trusted here: " + "; ".join(reasons) + ". "
            + closing(cannot_represent, "Weights"))
