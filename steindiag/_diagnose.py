"""One call, one answer: ``diagnose``.

Data flow: input -> ``steindiag.inputs`` (draws read and scores evaluated once) ->
the pieces on those arrays: ``ksd_test`` (KSD test per chain and pooled, effective draws),
the i.i.d. floor from the Stein kernel's diagonal (O(N d)), ``mmd`` (agreement between
chains), ``inputs.sampler_warnings`` (divergences), ``methods.missing_mass`` (modes the
chains never visited, when log p is available) -> ``stats.verdict`` (the decision rules)
-> a labelled ``xarray.Dataset`` whose repr is a report.
"""

import numbers
import warnings

import numpy as np
import xarray as xr

from steindiag._ksd import _COMMON_PARAMETERS, ksd
from steindiag._mmd import mmd
from steindiag._validate import check_rng
from steindiag.engine.row_sums import stein_kernel_diagonal
from steindiag.gof import ksd_test
from steindiag.inputs import is_labelled, read_input, sampler_warnings, score_function
from steindiag.inputs._prepare import has_chain_dimension
from steindiag.inputs._trace import as_trace
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag.stats import verdict as rules
from steindiag.stats.ksd import ksd_iid

__all__ = ["diagnose", "Diagnosis"]

_ESTIMATORS = ("auto", "exact", "nystrom")
# Warnings of the pieces that the verdict reports itself (as "inconclusive" and its reason),
# or that diagnose has already given when it read the input (zero score columns).
_REPORTED = r"(ksd_test: chains|mmd: blocks|the score is exactly 0)"

# Parameters shared with ksd, without the engine's method/progress options and the
# estimator's (documented in diagnose's own words).
_PARAMETERS = (_COMMON_PARAMETERS.split("    method :")[0].rstrip() + "\n    space :"
               + _COMMON_PARAMETERS.split("    space :")[1].split("    estimator :")[0].rstrip())


class Diagnosis(xr.Dataset):
    """The ``xarray.Dataset`` returned by :func:`steindiag.diagnose`.

    ``print(result)`` shows the report (verdicts, evidence, what to do next); its repr
    shows the report above the Dataset.

    Everything else is the Dataset's: select, save (``to_netcdf``) and compute as with
    any Dataset (the report is kept in ``attrs["report"]``).
    """

    __slots__ = ()

    def _report(self):
        """The report written from the data (so a selection reports what it holds), or None."""
        try:
            return report(self)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None

    def __repr__(self):
        text = self._report()
        if text is None:
            return xr.Dataset.__repr__(self)
        return text + "\n\n" + xr.Dataset.__repr__(self)

    def __str__(self):
        # print(result): the report a person acts on; repr adds the Dataset below it.
        text = self._report()
        return xr.Dataset.__repr__(self) if text is None else text

    def _repr_html_(self):
        text = self._report()
        html = xr.Dataset._repr_html_(self)
        if text is None:
            return html
        from html import escape

        return f"<pre>{escape(text)}</pre>" + html


def _diagnose_iv(alpha, n_bootstrap, n_permutations, log_density, estimator, n_landmarks,
                 missing_mass, rng):
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1); got {alpha!r}.")
    for name, value in (("n_bootstrap", n_bootstrap), ("n_permutations", n_permutations)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be a positive integer; got {type(value).__name__}.")
        if value < 1:
            raise ValueError(f"{name} must be a positive integer; got {value}.")
    if log_density is not None and not callable(log_density):
        raise TypeError(
            "log_density must be a callable on an (n, d) batch of flat parameter vectors "
            f"returning (n,) values of log p up to a constant; got {type(log_density).__name__}."
        )
    if not isinstance(estimator, str) or estimator not in _ESTIMATORS:
        raise ValueError(f"estimator must be one of {list(_ESTIMATORS)}; got {estimator!r}.")
    if n_landmarks is not None and estimator != "nystrom":
        raise ValueError("n_landmarks applies only with estimator='nystrom'.")
    if not isinstance(missing_mass, (bool, np.bool_)):
        raise TypeError(f"missing_mass must be True or False; got {missing_mass!r}.")
    return float(alpha), n_bootstrap, n_permutations, check_rng(rng)


def _replicates(given, name, level):
    """Bootstrap replicates or permutations for tests read at ``level``.

    None: the smallest number, at least 1000, whose smallest p-value 1 / (1 + B) is at
    most level / 4 (so a clear rejection is not hidden by the grid of p-values). A number
    whose smallest p-value is above ``level`` could never reject: refused.
    """
    if given is None:
        return max(1000, int(np.ceil(4.0 / level)) - 1)
    if (1 + given) * level < 1:
        raise ValueError(
            f"{name}={given} is too small: its smallest p-value 1 / (1 + {name}) = "
            f"{1 / (1 + given):.2g} is above the level {level:.2g} at which each test is "
            f"read (alpha / number of tests), so no test could reject. Pass at least "
            f"{int(np.ceil(1 / level))}, or None for the default.")
    return int(given)


# "auto" leaves the exact pass when its estimated cost is above this many floating-point
# operations: the statistic and B bootstrap quadratic forms cost about N^2 (8 d + 20 + B + 1)
# flops for N draws (benchmarks/results/test.md: N = 20,000, d = 10, B = 1000 in 6.8 s at
# 62 GFLOP/s on 2 cores), so this is about a minute there (N of about 57,000 at d = 10).
_EXACT_BUDGET_FLOPS = 3.6e12
# The MMD test between chains is O(N^2 d) too (4 chains x 5,000 draws, 4e8 pairs: 0.6 s):
# above this many pairs of draws, each chain is thinned (every k-th draw, keeping its order).
_MMD_BUDGET_PAIRS = 4.0e9


def _exact_test_flops(n_draws, d, n_bootstrap):
    """Estimated floating-point operations of the exact KSD test on ``n_draws`` draws."""
    return float(n_draws) ** 2 * (8.0 * d + 20.0 + n_bootstrap + 1.0)


def _choose_estimator(estimator, n_landmarks, n_draws, d, n_bootstrap):
    """The KSD estimator of the test: the one place where exact or Nystrom is chosen.

    "auto" is the exact pass unless its estimated cost (:func:`_exact_test_flops`) is above
    ``_EXACT_BUDGET_FLOPS``; then the Nystrom estimator at its default number of landmarks
    (O(N m (d + B)) instead of O(N^2 (d + B))). Returns the keyword arguments for
    ``ksd_test`` and a sentence for the report (empty for the exact pass chosen by "auto").
    """
    if estimator == "auto":
        flops = _exact_test_flops(n_draws, d, n_bootstrap)
        if flops <= _EXACT_BUDGET_FLOPS:
            return {"estimator": "exact"}, ""
        return {"estimator": "nystrom"}, (
            f"KSD test with the Nystrom estimator: the exact pass on {n_draws} draws would "
            f"cost about {flops:.2g} flops (estimator='exact' forces it)")
    if estimator == "nystrom":
        return {"estimator": "nystrom", "n_landmarks": n_landmarks}, (
            "KSD test with the Nystrom estimator (estimator='nystrom')")
    return {"estimator": estimator}, ""


def _mmd_stride(n_chain, n_draw):
    """Every how many draws each chain is read for the MMD test (1: all of them)."""
    n_total = n_chain * n_draw
    return max(1, int(np.ceil(n_total / np.sqrt(_MMD_BUDGET_PAIRS))))


def _log_density_function(log_density, model, batched, mode):
    """log p as a batched callable (n, d) -> (n,), or None; non-finite values as -inf."""
    if log_density is not None:
        def evaluate(points):
            if batched:
                values = np.asarray(log_density(points.copy()), dtype=np.float64)
            else:
                values = np.array([log_density(row.copy()) for row in points],
                                  dtype=np.float64)
            return values.reshape(-1)
        return evaluate
    if model is not None:
        from steindiag.inputs._pymc_functions import model_functions

        return model_functions(model, mode=mode)[0]
    return None


def _search(prepared, model, score, log_density, batched, kernel, pre, level, rng, mode):
    """The missing-mass search, or (None, why it was not run)."""
    log_p = _log_density_function(log_density, model, batched, mode)
    if log_p is None:
        return None, ("no log density: pass a PyMC model or log_density= (a callable on an "
                      "(n, d) batch)")
    if log_density is None and score is None:
        from steindiag.inputs._pymc_functions import model_functions

        # Both from one compiled function, which keeps its last evaluation: log p and
        # then the score at the same point (as the optimiser asks) cost one evaluation.
        log_p, score_fn = model_functions(model, mode=mode)
    else:
        score_fn = score_function(score, model, batched=batched, mode=mode)
    if score_fn is None:
        return None, ("the score is an array, so it cannot be evaluated at new points: pass "
                      "score= as a callable")
    from steindiag.methods.missing_mass import search_missing_mass

    starts = None
    if model is not None and log_density is None:
        from steindiag.inputs._pymc_prior import prior_starts

        try:
            starts = prior_starts(model, list(prepared.parameter), _N_PRIOR_STARTS, rng)
        except ValueError:
            starts = None  # a flat prior: the search widens the draws instead
    result = search_missing_mass(prepared.draws, prepared.scores, log_density=log_p,
                                 score=score_fn, kernel=kernel, preconditioner=pre, rng=rng,
                                 alpha=level, starts=starts)
    return result, ""


# Prior draws used as starts of the mode search with a PyMC model.
_N_PRIOR_STARTS = 32


def diagnose(data, model=None, *, score=None, log_density=None, rng=None, alpha=0.05,
             n_bootstrap=None, n_permutations=None, missing_mass=True, batched=True,
             kernel="imq", c=None, beta=None, preconditioner="standardize",
             group="posterior", var_names=None, coords=None, sample_dims=None, space=None,
             estimator="auto", n_landmarks=None, client=None, compile_mode=None):
    """Can these draws be trusted? A verdict per chain and pooled, with its evidence.

    Parameters
    ----------
{params}
    log_density : callable, optional
        log p up to a constant, on an (n, d) batch of flat parameter vectors (a (d,)
        vector with ``batched=False``), in the space of the score. With it (or with a
        PyMC ``model``, whose log p is used), the draws are searched for modes of p they
        never visited; without either, the search is not run and a "fits" says so.
    rng : int, numpy.random.Generator or None
        Source of the bootstrap signs, the permutations and the search's starts.
    alpha : float, default 0.05
        Family-wise level: the probability that draws from p get "does not fit" (in the
        pooled verdict or any chain's) is at most alpha, up to the tests' own
        approximations (see Notes).
    n_bootstrap : int, optional
        Bootstrap replicates of the KSD test (``ksd_test``). Default: at least 1000, and
        enough for the smallest p-value, 1 / (1 + n_bootstrap), to be a quarter of the
        level each test is read at (alpha / number of tests); a number whose smallest
        p-value is above that level is refused.
    n_permutations : int, optional
        Permutations of the MMD test between chains (``mmd``); default and limit as for
        ``n_bootstrap``.
    missing_mass : bool, default True
        Search for unvisited modes when log p is available (it costs optimiser runs: a
        few thousand log p and score evaluations at single points).
    estimator : {{"auto", "exact", "nystrom"}}, default "auto"
        KSD estimator of the test (see :func:`ksd_test`). "auto": the exact pass unless its
        estimated cost, about N^2 (8 d + 20 + n_bootstrap) floating-point operations for
        N draws, is above 3.6e12 (about a minute on 2 cores; N of about 57,000 at d = 10);
        then the Nystrom estimator at its default number of landmarks, which the report
        says; the KSD shown is then that of :func:`ksd` with ``estimator="nystrom"``
        (closer to the exact value than the test's statistic). Above 4e9 pairs of draws, the MMD test between chains reads every k-th draw
        of each chain (also reported).
    n_landmarks : int, optional
        Landmarks for ``estimator="nystrom"`` (as in :func:`ksd_test`).

    Returns
    -------
    Diagnosis (an xarray.Dataset)
        ``verdict`` (chain) and ``verdict_pooled`` (): each "fits", "does not fit" or
        "inconclusive"; ``reason`` (chain) and ``reason_pooled`` (): why, in words.
        Evidence: ``ksd`` and ``ksd_iid`` (chain), ``ksd_pooled`` and ``ksd_iid_pooled``
        (): KSD and the i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N), as :func:`ksd`;
        ``pvalue``, ``pvalue_reliable``, ``effective_draws`` (chain) and their
        ``_pooled`` () counterparts: the KSD goodness-of-fit test; ``mmd_pvalue``
        (chain, chain_other): the MMD test between every pair of chains (NaN on the
        diagonal, and everywhere for one chain); ``divergences`` (chain), when the trace
        has sampler statistics; ``missing_mass_found`` and ``missing_mass_pvalue`` (),
        when the search ran (its method and summary in ``attrs``).
        ``attrs``: ``alpha``, ``n_tests``, ``test_level`` (alpha / n_tests), the kernel
        and preconditioner, and ``report``, the text printed by ``print(result)``.

    Notes
    -----
    The verdict combines tests of the null "the draws are from p": the KSD test of every
    chain and of all chains pooled (wild bootstrap), the MMD test of every pair of
    chains (draws of one target have one distribution), and, with log p, the search for
    modes no draw visited. With m tests, each is read at level alpha / m (Bonferroni),
    so the chance that draws from p get any "does not fit" is at most alpha. "does not
    fit" when a test rejects with a p-value that can be trusted; "inconclusive" when a
    p-value that would decide cannot be trusted (too few effective draws: the bootstrap's
    sign chain is expected to flip fewer than 10 times in a chain, or the MMD test has
    fewer than 10 blocks per chain), or when the sampler reported divergent transitions
    and no test rejected (divergences mark regions the sampler could not explore, which
    the draws cannot speak for); "fits" otherwise. KSD / floor is reported as a
    description only: the floor is computed at the draws, so draws far from p raise
    their own floor and a ratio near 1 is no evidence of fit (see the Background page,
    "From numbers to a verdict").

    The tests' levels are approximate (the wild bootstrap's level is exact only as N
    grows; the search's p-value rests on Laplace masses), and "fits" means no test found
    a difference, not that there is none: KSD is nearly blind to the weights of
    well-separated modes the chains all visited.

    Cost: scores are evaluated once. One tiled pass for the KSD test, O(N^2 (d + B))
    time for N draws and B bootstrap replicates; one O(N^2 d) pass for the MMD
    (kernel sums between blocks) and O(P U^2) for P permutations of U blocks; the floor
    is O(N d). The search runs L-BFGS from 40 starts (32 overdispersed, 8 draws): with a
    PyMC model, typically a few thousand evaluations of log p and the score at single
    points. Memory O(N B) for the bootstrap weights; no N x N matrix is stored.

    References
    ----------
    Chwialkowski, Strathmann & Gretton (2016), A kernel test of goodness of fit, ICML.
    Gretton et al. (2012), A kernel two-sample test, JMLR.
    Liu, Duncan & Gandy (2023), Using perturbation to improve goodness-of-fit tests based
    on kernelized Stein discrepancy, ICML.
    Wenliang & Kanagawa (2020), Blindness of score-based methods to isolated components
    and mixing proportions.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((4, 500, 2))           # exact draws of N(0, I)
    >>> res = steindiag.diagnose(x, score=lambda x: -x,
    ...                          log_density=lambda x: -0.5 * (x**2).sum(axis=1), rng=1)
    >>> str(res["verdict_pooled"].values)
    'fits'
    >>> y = 1.5 * x                                    # too wide
    >>> str(steindiag.diagnose(y, score=-y, rng=1)["verdict_pooled"].values)
    'does not fit'
    """
    alpha, n_bootstrap, n_permutations, rng = _diagnose_iv(
        alpha, n_bootstrap, n_permutations, log_density, estimator, n_landmarks, missing_mass,
        rng)
    kernel = make_kernel(kernel, c, beta)
    check_preconditioner(preconditioner)
    data = as_trace(data, model)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
    )
    has_chain_dim = has_chain_dimension(data, sample_dims)
    n_chain, n_draw, d = pending.draws.shape
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    # The search needs log p and a score it can evaluate at new points.
    search_possible = (bool(missing_mass) and (log_density is not None or model is not None)
                       and (callable(score) or (score is None and model is not None)))
    n_tests = rules.n_tests(n_chain, search_possible)
    level = alpha / n_tests
    n_bootstrap = _replicates(n_bootstrap, "n_bootstrap", level)
    n_permutations = _replicates(n_permutations, "n_permutations", level)
    prepared = pending.with_scores()
    draws, scores = prepared.draws, prepared.scores

    estimator_options, estimator_note = _choose_estimator(estimator, n_landmarks,
                                                          n_chain * n_draw, d, n_bootstrap)
    # The pieces run on the arrays: the scores are not evaluated again.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_REPORTED, category=UserWarning)
        test = ksd_test(draws, score=scores, sample_dims=("chain", "draw"),
                        bootstrap="wild" if has_chain_dim else "iid",
                        n_bootstrap=n_bootstrap, rng=rng, kernel=kernel,
                        preconditioner=preconditioner, client=client,
                        **estimator_options)
        mmd_pvalue = np.full((n_chain, n_chain), np.nan)
        mmd_reliable = np.ones((n_chain, n_chain), dtype=bool)
        mmd_stride = _mmd_stride(n_chain, n_draw)
        if n_chain > 1:
            between = mmd(draws[:, ::mmd_stride], sample_dims=("chain", "draw"),
                          n_permutations=n_permutations, rng=rng, kernel=kernel,
                          preconditioner=preconditioner)
            mmd_pvalue = between["pvalue"].values
            mmd_reliable = between["pvalue_reliable"].values

    # The i.i.d. floor from the Stein kernel's diagonal, O(N d).
    _, scores_k = pre.to_kernel_coordinates(draws, scores)
    diagonal = stein_kernel_diagonal(np.einsum("cnk,cnk->cn", scores_k, scores_k),
                                     kernel.numba_kind, kernel.numba_params, pre.trace_a)
    floor = ksd_iid(diagonal.sum(axis=1), n_draw)
    floor_pooled = ksd_iid(diagonal.sum(), n_chain * n_draw)
    if estimator_options["estimator"] == "nystrom":
        # The value the report shows is ksd's (base-kernel landmarks, exact neighbouring
        # pairs): the test's Stein-kernel features can be lower (Background page,
        # "Nystrom KSD"); one more O(N m d) pass.
        values = ksd(draws, score=scores, sample_dims=("chain", "draw"), kernel=kernel,
                     preconditioner=preconditioner, client=client, rng=rng,
                     **estimator_options)
        ksd_chain = values["ksd"].values
        ksd_pooled = float(values["ksd_pooled"])
    else:
        ksd_chain = np.sqrt(np.maximum(test["statistic"].values, 0.0) / n_draw)
        ksd_pooled = np.sqrt(max(float(test["statistic_pooled"]), 0.0) / (n_chain * n_draw))

    found = None
    if is_labelled(data):
        found = sampler_warnings(data, group=group, chain=prepared.chain, draw=prepared.draw,
                                 sample_dims=("chain", "draw") if sample_dims is None
                                 else tuple(sample_dims))
    divergences = None if found is None else found.divergences

    search, not_run = None, "missing_mass=False"
    if missing_mass:
        search, not_run = _search(prepared, model, score, log_density, batched, kernel, pre,
                                  level, rng, compile_mode)
    search_run = search is not None
    missing_found = bool(search_run and search.found)
    missing_summary = search.summary if search_run else ""

    pvalue, reliable = test["pvalue"].values, test["pvalue_reliable"].values
    effective = test["effective_draws"].values
    verdicts, reasons = rules.chain_verdicts(
        pvalue=pvalue, reliable=reliable, effective_draws=effective, level=level,
        mmd_pvalue=mmd_pvalue, mmd_reliable=mmd_reliable, divergences=divergences,
        missing_found=missing_found, missing_summary=missing_summary,
        labels=prepared.chain.tolist())
    if not search_run:
        reasons = np.array([r + " (conditional: no search for unvisited mass)"
                            if v == rules.FITS else r for v, r in zip(verdicts, reasons)])
    verdict_pooled, reason_pooled = rules.pooled_verdict(
        pvalue=float(test["pvalue_pooled"]), reliable=bool(test["pvalue_reliable_pooled"]),
        effective_draws=float(test["effective_draws_pooled"]), level=level,
        chain_pvalue=pvalue, chain_reliable=reliable, mmd_pvalue=mmd_pvalue,
        mmd_reliable=mmd_reliable, divergences=divergences, missing_found=missing_found,
        missing_summary=missing_summary, missing_run=search_run,
        missing_not_run_reason=not_run, labels=prepared.chain.tolist())

    chain = prepared.chain
    data_vars = {
        "verdict": (("chain",), verdicts, {"long_name": "verdict of each chain"}),
        "verdict_pooled": ((), verdict_pooled, {"long_name": "verdict, all chains"}),
        "reason": (("chain",), reasons, {"long_name": "why, each chain"}),
        "reason_pooled": ((), reason_pooled, {"long_name": "why, all chains"}),
        "ksd": (("chain",), ksd_chain, {"long_name": "KSD of each chain"}),
        "ksd_pooled": ((), ksd_pooled, {"long_name": "KSD of all chains pooled"}),
        "ksd_iid": (("chain",), floor, {"long_name": "i.i.d. floor at the draws, each chain"}),
        "ksd_iid_pooled": ((), floor_pooled, {"long_name": "i.i.d. floor at the draws, pooled"}),
        "pvalue": (("chain",), pvalue, {"long_name": "KSD test p-value, each chain"}),
        "pvalue_pooled": ((), float(test["pvalue_pooled"]),
                          {"long_name": "KSD test p-value, pooled"}),
        "pvalue_reliable": (("chain",), reliable,
                            {"long_name": "whether the KSD p-value can be trusted"}),
        "pvalue_reliable_pooled": ((), bool(test["pvalue_reliable_pooled"]),
                                   {"long_name": "whether the pooled p-value can be trusted"}),
        "effective_draws": (("chain",), effective,
                            {"long_name": "effective number of draws, draw / tau"}),
        "effective_draws_pooled": ((), float(test["effective_draws_pooled"]),
                                   {"long_name": "effective number of draws, all chains"}),
        "mmd_pvalue": (("chain", "chain_other"), mmd_pvalue,
                       {"long_name": "MMD test p-value between chains"}),
    }
    if divergences is not None:
        data_vars["divergences"] = (("chain",), divergences,
                                    {"long_name": "divergent transitions",
                                     "source": found.source})
    attrs = {
        "alpha": alpha,
        "n_tests": n_tests,
        "test_level": level,
        "multiple_testing": "Bonferroni: each test at alpha / n_tests",
        "missing_mass_search": search.method if search_run else f"not run: {not_run}",
        **{k: v for k, v in test.attrs.items() if k not in ("space", "score_source")},
        "parameters": list(prepared.parameter),
        **prepared.attrs,
    }
    if estimator_note:
        attrs["estimator_note"] = estimator_note
    if n_chain > 1 and mmd_stride > 1:
        attrs["mmd_note"] = (f"MMD test between chains on every {mmd_stride}-th draw of each "
                             "chain (its cost is quadratic in the draws)")
    if search_run:
        data_vars["missing_mass_found"] = ((), missing_found,
                                           {"long_name": "unvisited mass found"})
        data_vars["missing_mass_pvalue"] = ((), float(search.pvalue),
                                            {"long_name": "p-value of the search"})
        attrs["missing_mass_summary"] = search.summary
        attrs["n_log_density"] = int(search.n_log_density)
    coords = {"chain": ("chain", chain), "chain_other": ("chain_other", chain)}
    result = Diagnosis(data_vars, coords=coords, attrs=attrs)
    result.attrs["report"] = report(result)
    return result


def _next_step(verdict, reason):
    if verdict == rules.FITS:
        return "use the draws; KSD / floor and the tests found nothing to act on."
    if "divergent" in reason:
        return ("reparameterise (e.g. non-centred) or raise target_accept until the "
                "divergences are gone, then diagnose again.")
    if "effective draws" in reason or "autocorrelated" in reason:
        return "run longer chains (or a better-tuned sampler) and diagnose again."
    if "unvisited mass" in reason:
        return ("the chains missed a mode: start chains from overdispersed points or use a "
                "sampler that moves between modes (tempering); weights and thinning cannot "
                "create mass where no draw is.")
    if "disagree" in reason or "differs" in reason:
        return "the chains sampled different regions: run longer, from dispersed starts."
    return ("the draws are not from the target: check the sampler (step size, bias, a "
            "bug), the model, and that the draws and the score belong together.")


def report(result):
    """The text of ``print(diagnose(...))``: verdicts, evidence, what to do next."""
    lines = [f"steindiag.diagnose: {result['verdict_pooled'].item().upper()}",
             f"  why: {result['reason_pooled'].item()}",
             f"  next: {_next_step(result['verdict_pooled'].item(), result['reason_pooled'].item())}",
             "",
             f"  {'chain':>8} {'verdict':>13} {'KSD':>9} {'floor':>9} {'p':>7} "
             f"{'reliable':>8} {'eff. draws':>10}" + (" divergences" if "divergences"
                                                      in result else "")]
    for k, ch in enumerate(result["chain"].values):
        row = (f"  {str(ch):>8} {result['verdict'].values[k]:>13} "
               f"{result['ksd'].values[k]:9.3g} {result['ksd_iid'].values[k]:9.3g} "
               f"{result['pvalue'].values[k]:7.3g} {str(bool(result['pvalue_reliable'].values[k])):>8} "
               f"{result['effective_draws'].values[k]:10.0f}")
        if "divergences" in result:
            row += f" {int(result['divergences'].values[k]):11d}"
        lines.append(row)
    lines.append(
        f"  {'pooled':>8} {result['verdict_pooled'].item():>13} "
        f"{result['ksd_pooled'].item():9.3g} {result['ksd_iid_pooled'].item():9.3g} "
        f"{result['pvalue_pooled'].item():7.3g} "
        f"{str(bool(result['pvalue_reliable_pooled'].item())):>8} "
        f"{result['effective_draws_pooled'].item():10.0f}")
    lines.append("")
    mmd_p = result["mmd_pvalue"].values
    if mmd_p.shape[0] > 1:
        off = mmd_p[~np.eye(mmd_p.shape[0], dtype=bool)]
        lines.append("  chains agree (MMD): smallest p = "
                     + (f"{np.nanmin(off):.3g}" if np.isfinite(off).any() else "not computed"))
    if "missing_mass_found" in result:
        lines.append(f"  unvisited mass ({result.attrs['missing_mass_search']}): "
                     f"{result.attrs['missing_mass_summary']}")
    else:
        lines.append(f"  unvisited mass: search {result.attrs['missing_mass_search']}")
    for note in ("estimator_note", "mmd_note"):
        if note in result.attrs:
            lines.append(f"  {result.attrs[note]}")
    lines.append(f"  each test at level {result.attrs['test_level']:.2g} = alpha "
                 f"{result.attrs['alpha']:g} / {result.attrs['n_tests']} tests (Bonferroni); "
                 "KSD / floor is a description, not the verdict.")
    pooled_reason = result["reason_pooled"].item()
    bad = [(str(ch), v, r) for ch, v, r in zip(result["chain"].values, result["verdict"].values,
                                               result["reason"].values)
           if v != rules.FITS and r not in pooled_reason and pooled_reason not in r]
    for ch, v, r in bad[:8]:
        lines.append(f"  chain {ch}: {v}: {r}")
    return "\n".join(lines)


diagnose.__doc__ = diagnose.__doc__.format(params=_PARAMETERS)
