"""The search's result: its dataclasses and its one sentence for a user.
"""
from dataclasses import dataclass, field

import numpy as np

__all__ = ["MissingMass", "MissingMassDetails", "MODE_SEARCH", "PERTURBED", "SCORE",
           "FINITE_DIFFERENCES", "skipped_result", "summary"]

# The method (``MissingMass.method``) and the gradient used (``details.gradient``).
MODE_SEARCH = "mode search"
PERTURBED = "perturbed KSD test (Liu, Duncan & Gandy 2023)"
SCORE = "score"
FINITE_DIFFERENCES = "finite differences of log_density"


@dataclass(kw_only=True)
class MissingMassDetails:
    """What the mode search found.

    Attributes
    ----------
    modes : ndarray (mode, d)
        Distinct local maxima of log p found, highest log p first.
    log_density : ndarray (mode,)
        log p at each mode (up to the same constant as ``log_density``).
    log_mass : ndarray (mode,)
        Laplace approximation of the log mass near each mode:
        log p(m) + (d/2) log(2 pi) - (1/2) log det H, with H = -Hessian of log p at m.
    relative_mass : ndarray (mode,)
        exp(log_mass) normalised over the modes found (sums to 1).
    visits : ndarray of int (mode, chain)
        Draws of each chain inside each mode's central (50 %) Laplace ellipsoid.
    within_chain : ndarray of bool (mode, chain)
        Whether the mode lies within the range of each chain's draws: its Mahalanobis
        distance from the chain's mean, in the chain's own covariance, is at most the
        99th percentile of the chain's draws' distances.
    joined : ndarray of bool (mode,)
        Whether short p-invariant chains started at the mode joined the draws (see
        Notes of :func:`search_missing_mass`); False for modes visited by the other
        rules (no chains run) and for candidates beyond the first 16.
    joined_share : ndarray (mode,)
        Share of the short chains' kept points within the draws' range; NaN where no
        chains ran.
    visited : ndarray of bool (mode,)
        Whether the mode lies within the range of some chain, or the chains together
        put at least a tenth of the draws p would put in its central ellipsoid
        (relative mass x number of draws / 2) there, or short chains started at it
        joined the draws.
    unvisited_mass : float
        Share of p's mass in the modes not visited: the smaller of the sum of
        ``relative_mass`` over them and their Laplace mass against the mass of the
        region the draws cover plus theirs (``log_mass_draws``).
    log_mass_draws : float
        Reciprocal importance sampling estimate of the log of p's unnormalised mass
        over the region the draws cover (same constant as ``log_mass``); NaN when not
        needed (every mode visited).
    effective_draws : float
        Effective number of draws, sum over chains of draw / tau (tau: integrated
        autocorrelation time, largest over the coordinates).
    n_starts : int
        Optimiser runs.
    n_rejected : int
        Distinct end points that were not local maxima (Hessian not negative definite,
        not stationary, non-finite log p) and runs that failed.
    starts : str
        Where the starts came from ("given" or "widened draws and broad starts").
    start_distance : ndarray (start,)
        Distance of each start from the draws' mean in draw standard deviations (root
        mean square over coordinates of (x_k - mean_k) / sd_k).
    gradient : str
        What the optimiser and the short chains used as the gradient of log p:
        "score" or "finite differences of log_density".
    n_score : int
        Score evaluations made (points); 0 with finite differences.
    n_short_chains : int
        Short chains run (all candidate modes together).
    short_chain_acceptance : float
        Share of accepted MALA proposals after the warm-up; NaN when no chain ran.
    n_failed : int
        Points at which log_density (or the score) raised inside the model; counted as
        log p = -inf there.
    failure : str
        The first such error, "Type: message" ("" when none).
    skipped : str
        Why the search was not run ("" when it ran).
    statistic : float
        Perturbed KSD test only: the statistic, sum over jump scales (and the
        unperturbed draws) of N KSD^2_V, pooled over chains; NaN for the mode search.
    acceptance : float
        Perturbed KSD test only: the share of accepted mode jumps; NaN otherwise.
    """

    modes: np.ndarray
    log_density: np.ndarray
    log_mass: np.ndarray
    relative_mass: np.ndarray
    visits: np.ndarray
    within_chain: np.ndarray
    visited: np.ndarray
    unvisited_mass: float
    effective_draws: float
    n_starts: int
    n_rejected: int
    starts: str
    n_score: int
    log_mass_draws: float = np.nan
    joined: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    joined_share: np.ndarray = field(default_factory=lambda: np.zeros(0))
    start_distance: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gradient: str = SCORE
    n_short_chains: int = 0
    short_chain_acceptance: float = np.nan
    n_failed: int = 0
    failure: str = ""
    skipped: str = ""
    statistic: float = np.nan
    acceptance: float = np.nan


@dataclass(kw_only=True)
class MissingMass:
    """Result of :func:`search_missing_mass`.

    Attributes
    ----------
    found : bool
        Mass the draws never visited was detected at level ``alpha``.
    pvalue : float
        Approximate p-value: the probability that ``effective_draws`` draws from p
        would miss the unvisited modes as badly as the chains did,
        (1 - unvisited_mass / 2)^effective_draws when no draw is near them.
        1 when every mode found was visited; NaN when the search was skipped.
    method : str
        The method used ("mode search").
    summary : str
        One sentence for a user (what was searched, what was found, and notes: the
        gradient used, points where log p raised, why the search was skipped).
    n_log_density : int
        log p evaluations made (points), for the cost accounting.
    skipped : str
        Why the search was not run ("" when it ran); ``found`` is then False.
    details : MissingMassDetails
    """

    found: bool
    pvalue: float
    method: str
    summary: str
    n_log_density: int
    skipped: str = ""
    details: MissingMassDetails = field(repr=False)


def summary(details, found, pvalue, method):
    """The result's sentence: what was searched and found (by ``method``), then notes."""
    sentence = _perturbed_summary if method == "perturbed ksd" else _mode_search_summary
    return sentence(details, found, pvalue) + _notes(details)


def skipped_result(d, n_chain, gradient, reason):
    """The result of a search not run (``reason``): nothing found, p-value NaN."""
    details = MissingMassDetails(
        modes=np.zeros((0, d)), log_density=np.zeros(0), log_mass=np.zeros(0),
        relative_mass=np.zeros(0), visits=np.zeros((0, n_chain), dtype=np.int64),
        within_chain=np.zeros((0, n_chain), dtype=bool), visited=np.zeros(0, dtype=bool),
        unvisited_mass=0.0, effective_draws=np.nan, n_starts=0, n_rejected=0, starts="",
        n_score=0, gradient=gradient, skipped=reason)
    return MissingMass(found=False, pvalue=np.nan, method=MODE_SEARCH,
                       summary=reason + ".", n_log_density=0, skipped=reason,
                       details=details)


def _format_point(point, digits=3):
    shown = ", ".join(f"{value:.{digits}g}" for value in point[:6])
    return f"({shown}{', ...' if point.shape[0] > 6 else ''})"


def _searched(details):
    """What was searched, one clause."""
    if details.start_distance.size:
        far = (f"; a median of {np.median(details.start_distance):.2g} and up to "
               f"{np.max(details.start_distance):.2g} draw standard deviations from the "
               "draws' mean")
    else:
        far = ""
    return f"{details.n_starts} starts ({details.starts}{far})"


def _mode_search_summary(details, found, pvalue):
    n_modes = details.modes.shape[0]
    searched = _searched(details)
    if n_modes == 0:
        return (f"the mode search from {searched} found no local maximum of log p (every "
                "run ended on a saddle, a flat direction or a density that grows without "
                "bound, as in a funnel's neck); nothing can be said about unvisited mass.")
    unvisited = np.flatnonzero(~details.visited)
    n_joined = int(details.joined.sum())
    joined = (f"; short chains started at {n_joined} of them that the chains' range did "
              "not cover joined the draws" if n_joined else "")
    if unvisited.size == 0:
        return (f"every mode found ({n_modes}) was visited by the chains{joined}; searched "
                f"from {searched}.")
    largest = unvisited[np.argmax(details.relative_mass[unvisited])]
    where = _format_point(details.modes[largest])
    share = details.relative_mass[largest]
    stayed = (f"; short p-invariant chains started there stayed apart from the draws "
              f"({details.joined_share[largest]:.0%} of their points within the draws' "
              "range)" if np.isfinite(details.joined_share[largest]) else "")
    if found:
        return (f"a mode at x = {where} with log p = {details.log_density[largest]:.4g} and "
                f"about {share:.0%} of the mass (Laplace approximation) was never visited by "
                f"the chains (p = {pvalue:.2g}){stayed}; the draws miss part of the target; "
                f"searched from {searched}.")
    return (f"{unvisited.size} mode(s) were not visited, the largest at x = {where}, but "
            f"with about {share:.2g} of the mass, which {details.effective_draws:.0f} "
            f"effective draws can miss by chance (p = {pvalue:.2g}); searched from "
            f"{searched}.")


def _perturbed_summary(details, found, pvalue):
    n_modes = details.modes.shape[0]
    if n_modes < 2:
        return (f"the perturbed KSD test found {n_modes} mode(s), so it had no jumps to make "
                f"and is the plain KSD test (p = {pvalue:.2g}).")
    if found:
        return (f"draws moved between the {n_modes} modes found by p-invariant jumps no "
                f"longer fit p (perturbed KSD test, p = {pvalue:.2g}): the chains hold the "
                "modes in the wrong proportions or miss one.")
    return (f"draws moved between the {n_modes} modes found by p-invariant jumps still fit "
            f"p (perturbed KSD test, p = {pvalue:.2g}).")


def _notes(details):
    notes = []
    if details.gradient == FINITE_DIFFERENCES:
        notes.append("gradient of log p by central finite differences of log_density "
                     "(no score callable)")
    if details.n_failed:
        notes.append(f"log p raised at {details.n_failed} point(s) ({details.failure}); "
                     "counted as -inf")
    return "".join(f" Note: {note}." for note in notes)
