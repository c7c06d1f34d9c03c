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
from steindiag.engine.progress import check_progress
from steindiag._mmd import mmd
from steindiag._validate import check_rng
from steindiag.gof import ksd_test
from steindiag.inputs import is_labelled, read_input, sampler_warnings, score_function
from steindiag.inputs._prepare import has_chain_dimension
from steindiag.inputs._emcee import is_ensemble
from steindiag.inputs._trace import as_trace
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag.stats import verdict as rules
from steindiag.stats.bootstrap import (MIN_POOLED_BLOCKS, MIN_THINNED_DRAWS,
                                       max_statistic_pvalues)

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

    Everything else is the Dataset's: select, save (``to_netcdf``, ``to_zarr``) and
    compute as with any Dataset (the report is kept in ``attrs["report"]``). Its attrs are
    stored as netCDF can hold them (lists as JSON strings, bools as 0/1: see
    ``steindiag._attrs``), so every engine writes it; :meth:`from_dataset` (or
    ``Diagnosis(dataset)``) turns a reopened file back into a Diagnosis, which prints the
    same report.
    """

    __slots__ = ()

    def __init__(self, data_vars=None, coords=None, attrs=None):
        if isinstance(data_vars, xr.Dataset):
            # Diagnosis(xr.open_dataset(path)): the Dataset's variables, coords and attrs.
            if coords is not None:
                raise TypeError("Diagnosis(dataset) takes no coords=: they come from the "
                                "dataset.")
            dataset = data_vars
            data_vars = {name: var.variable for name, var in dataset.data_vars.items()}
            coords = {name: var.variable for name, var in dataset.coords.items()}
            attrs = dict(dataset.attrs) if attrs is None else attrs
        from steindiag._attrs import netcdf_attrs

        super().__init__(data_vars, coords,
                         None if attrs is None else netcdf_attrs(attrs))

    @classmethod
    def from_dataset(cls, dataset):
        """A saved :func:`steindiag.diagnose` result, reopened, as a Diagnosis.

        Parameters
        ----------
        dataset : xarray.Dataset
            What ``xr.open_dataset(path)`` (any engine) or ``xr.open_zarr(path)`` gives
            for a file written by ``diagnose(...).to_netcdf(path)`` or ``.to_zarr(path)``.

        Returns
        -------
        Diagnosis
            The same variables, coords and attrs; ``print`` shows the report of the
            original result.

        Examples
        --------
        >>> import os, tempfile, numpy as np, xarray as xr, steindiag
        >>> x = np.random.default_rng(0).standard_normal((2, 300, 2))
        >>> res = steindiag.diagnose(x, score=-x, rng=1)
        >>> path = os.path.join(tempfile.mkdtemp(), "diagnosis.nc")
        >>> res.to_netcdf(path)
        >>> with xr.open_dataset(path) as saved:
        ...     back = steindiag.Diagnosis.from_dataset(saved)
        ...     same = str(back) == str(res)
        >>> same
        True
        """
        if not isinstance(dataset, xr.Dataset):
            raise TypeError("Diagnosis.from_dataset: dataset must be an xarray.Dataset (as "
                            "xr.open_dataset gives); got "
                            f"{type(dataset).__name__}.")
        missing = [name for name in ("verdict", "verdict_pooled", "reason_pooled")
                   if name not in dataset.data_vars]
        missing += [name for name in ("test_level", "alpha", "n_tests", "thinning_lag")
                    if name not in dataset.attrs]
        if missing:
            raise ValueError("Diagnosis.from_dataset: dataset is not a saved diagnose "
                             f"result: it lacks {', '.join(missing)}.")
        return cls(dataset)

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


# The default number of replicates (or relabellings) is refused above this: an alpha so
# small that resolving p-values at alpha / n_tests would need more is a mistake.
_MAX_REPLICATES = 100_000


def _replicates(given, name, level, alpha, n_tests):
    """Bootstrap replicates or relabellings for tests read at ``level``.

    None: the smallest number, at least 1000, whose smallest p-value 1 / (1 + B) is at
    most level / 4 (so a clear rejection is not hidden by the grid of p-values); above
    ``_MAX_REPLICATES``, refused (alpha is too small for a resampling test). A number
    whose smallest p-value is above ``level`` could never reject: refused.
    """
    if given is None:
        needed = max(1000, int(np.ceil(4.0 / level)) - 1)
        if needed > _MAX_REPLICATES:
            smallest = 4.0 * n_tests / (_MAX_REPLICATES + 1)
            raise ValueError(
                f"alpha={alpha:g} is too small: with {n_tests} tests each is read at "
                f"{level:.2g}, and resolving p-values that small would take {needed} "
                f"bootstrap replicates and relabellings (more than {_MAX_REPLICATES}). "
                f"Pass alpha >= {smallest:.2g}, or n_bootstrap= and n_permutations= "
                "explicitly.")
        return needed
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
        # None for a score given as an array: the search then uses finite differences of
        # log p (its summary says so).
        score_fn = score_function(score, model, batched=batched, mode=mode)
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
    skipped = getattr(result, "skipped", "")
    if skipped:
        return None, skipped
    return result, ""


# Prior draws used as starts of the mode search with a PyMC model.
_N_PRIOR_STARTS = 32


# The KSD test also reads the draws with the sample covariance as the kernel's metric (its
# statistic joins the max-T family) when the default preconditioner is used, d is at most
# this, and there are at least 10 draws per parameter: under-dispersed draws of strongly
# correlated posteriors are invisible to per-coordinate scales (benchmarks/results/
# calibration.md: draws of N(0, S), condition number 1e4, shrunk 0.8: 0 of 10 caught with
# "standardize" alone, 10 of 10 with "smpcov").
_COVARIANCE_MAX_D = 200


def _ksd_test_evidence(prepared, has_chain_dim, n_bootstrap, rng, kernel, preconditioner,
                       client, estimator_options, progress):
    """The KSD tests of every chain and pooled, on nearly independent draws (``ksd_test``
    with the thinned bootstrap: blocks of L draws, L about five autocorrelation times),
    plain and damped; with the default preconditioner also under the sample covariance.
    All with the same bootstrap signs (one integer seed), so that max-T reads them as one
    family. Returns (tests, note)."""
    exact = estimator_options["estimator"] == "exact"
    seed = int(rng.integers(2**63 - 1))
    options = dict(score=prepared.scores, sample_dims=("chain", "draw"),
                   bootstrap="thinned" if has_chain_dim else "iid", n_bootstrap=n_bootstrap,
                   kernel=kernel, client=client, progress=progress, **estimator_options)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_REPORTED, category=UserWarning)
        tests = [ksd_test(prepared.draws, preconditioner=preconditioner, damped=exact,
                          rng=seed, **options)]
        n_chain, n_draw, d = prepared.draws.shape
        note = ""
        if (exact and isinstance(preconditioner, str) and preconditioner == "standardize"
                and 2 <= d <= _COVARIANCE_MAX_D and n_chain * n_draw >= 10 * d):
            try:
                tests.append(ksd_test(prepared.draws, preconditioner="smpcov", rng=seed,
                                      **options))
            except ValueError as err:   # a singular sample covariance
                note = f"no KSD test under the sample covariance ({str(err).splitlines()[0]})"
    return tests, note


def _combined_pvalues(tests):
    """(chain p-values, pooled p-value) of the KSD tests, every statistic of every test
    (plain, damped; each preconditioner) read together by max-T (Westfall & Young): the
    chains' statistics are one family, the pooled ones another; replicate b of every
    statistic shares its bootstrap signs. A chain whose test cannot be trusted takes no
    part (its own p-value is kept)."""
    reliable = tests[0]["pvalue_reliable"].values
    names = [(t, k) for t in tests for k in ("", "_damped") if f"statistic{k}" in t]
    statistic = np.concatenate([t[f"statistic{k}"].values for t, k in names])
    replicates = np.concatenate([t[f"bootstrap_statistic{k}"].values for t, k in names])
    chain = tests[0]["pvalue"].values
    if reliable.any():
        adjusted = max_statistic_pvalues(statistic, replicates, np.tile(reliable, len(names)))
        chain = np.where(reliable, np.nanmin(adjusted.reshape(len(names), -1), axis=0), chain)
    pooled = max_statistic_pvalues(
        np.array([float(t[f"statistic{k}_pooled"]) for t, k in names]),
        np.stack([t[f"bootstrap_statistic{k}_pooled"].values for t, k in names]),
        np.ones(len(names), dtype=bool))
    return chain, float(pooled.min())


def _agreement_evidence(draws, n_permutations, rng, kernel, preconditioner, progress):
    """(p-value, reliable, note) of the MMD test that all chains agree; NaN for one chain.

    Above ``_MMD_BUDGET_PAIRS`` pairs of draws, each chain is read every k-th draw.
    """
    n_chain, n_draw, _ = draws.shape
    if n_chain < 2:
        return np.nan, True, ""
    stride = _mmd_stride(n_chain, n_draw)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_REPORTED, category=UserWarning)
        between = mmd(draws[:, ::stride], sample_dims=("chain", "draw"),
                      n_permutations=n_permutations, rng=rng, test="all", kernel=kernel,
                      preconditioner=preconditioner, progress=progress)
    note = (f"MMD test of agreement on every {stride}-th draw of each chain (its cost is "
            "quadratic in the draws)" if stride > 1 else "")
    pvalue = float(between["pvalue"])
    return pvalue, bool(between["pvalue_reliable"]) and np.isfinite(pvalue), note


def _as_one_chain(evidence, test, values, draws):
    """An ensemble's walkers read as one chain: (evidence, chain labels, per-chain values).

    The walkers of an ensemble sampler (emcee) are not independent chains: each move of a
    walker uses the others. The ensemble is one Markov chain, whose state is every walker
    at one step; its stationary law is p for every walker independently (Goodman & Weare
    2010), so the walkers at one step are independent draws of p, and steps L apart
    (L about five autocorrelation times of the walkers' mean autocorrelation, as emcee
    estimates it) nearly independent of each other. The pooled KSD test reads exactly
    that (every L-th step of every walker, one independent sign each): it is the
    ensemble's test. Per-walker tests (a few blocks each) and the MMD test of agreement
    among walkers (exchangeable by construction) are not run.
    """
    from dataclasses import replace

    stuck = bool(evidence.stuck.all())
    one = replace(
        evidence, pvalue=np.array([evidence.pvalue_pooled]),
        reliable=np.array([evidence.reliable_pooled]), min_kept_draws=MIN_POOLED_BLOCKS,
        agreement_pvalue=np.nan, agreement_reliable=True, divergences=None,
        stuck=np.array([stuck]), labels=["ensemble"])
    per_chain = {
        "ksd": np.array([float(values["ksd_pooled"])]),
        "ksd_iid": np.array([float(values["ksd_iid_pooled"])]),
        "pvalue_unadjusted": np.array([float(test["pvalue_pooled"])]),
        "effective_draws": np.array([float(test["effective_draws_pooled"])])}
    return one, np.array(["ensemble"]), per_chain


def _stuck_chains(draws):
    """(chain,) bool: chains whose draws are all the same point."""
    return np.all(draws.max(axis=1) == draws.min(axis=1), axis=-1)


def diagnose(data, model=None, *, score=None, log_density=None, rng=None, alpha=0.05,
             n_bootstrap=None, n_permutations=None, missing_mass=True, batched=True,
             kernel="imq", c=None, beta=None, preconditioner="standardize",
             group="posterior", var_names=None, coords=None, sample_dims=None, space=None,
             estimator="auto", n_landmarks=None, client=None, compile_mode=None,
             progress=None):
    """Can these draws be trusted? A verdict per chain and pooled, with its evidence.

    Parameters
    ----------
{params}
    log_density : callable, optional
        log p up to a constant, on an (n, d) batch of flat parameter vectors (a (d,)
        vector with ``batched=False``), in the space of the score. With it (or with a
        PyMC ``model`` or a numpyro ``MCMC``, whose log p is used), the draws are searched
        for modes of p they never visited; without either, the search is not run and a
        "fits" says so. With no ``score``: a JAX-traceable log p of one position (the
        flat (d,) vector, or a pytree like the positions), whose ``jax.grad`` is the
        score.
    rng : int, numpy.random.Generator or None
        Source of the thinning offsets, the bootstrap signs, the permutations and the
        search's starts.
    alpha : float, default 0.05
        Family-wise level: the probability that draws from p get "does not fit" (in the
        pooled verdict or any chain's) is at most alpha, up to the tests' own
        approximations (see Notes; measured levels: benchmarks/results/calibration.md).
    n_bootstrap : int, optional
        Bootstrap replicates of the KSD test (``ksd_test``). Default: at least 1000, and
        enough for the smallest p-value, 1 / (1 + n_bootstrap), to be a quarter of the
        level each test is read at (alpha / number of tests); a number whose smallest
        p-value is above that level is refused, and so is an alpha so small that the
        default would exceed 100,000 replicates.
    n_permutations : int, optional
        Relabellings of the MMD test of agreement between chains (``mmd`` with
        ``test="all"``); default and limits as for ``n_bootstrap``.
    missing_mass : bool, default True
        Search for unvisited modes when log p is available (it costs optimiser runs: a
        few thousand log p and score evaluations at single points).
    estimator : {{"auto", "exact", "nystrom"}}, default "auto"
        KSD estimator of the test (see :func:`ksd_test`). "auto": the exact pass unless its
        estimated cost, about N^2 (8 d + 20 + n_bootstrap) floating-point operations for
        N draws, is above 3.6e12 (about a minute on 2 cores; N of about 57,000 at d = 10);
        then the Nystrom estimator at its default number of landmarks, which the report
        says. Above 4e9 pairs of draws, the MMD test of agreement reads every k-th draw
        of each chain (also reported).
    n_landmarks : int, optional
        Landmarks for ``estimator="nystrom"`` (as in :func:`ksd_test`).
    progress : bool or None, default None
        One progress bar on stderr (tqdm if installed) for each long stage, labelled by
        its stage: the KSD tests' bootstrap passes, the MMD test's kernel sums and
        permutations, the KSD pass. None: a stage shows its bar only when interactive and
        the stage is expected to take more than a few seconds. Ctrl-C stops any stage
        within about a second; no thread is left running.

    Returns
    -------
    Diagnosis (an xarray.Dataset)
        ``verdict`` (chain) and ``verdict_pooled`` (): each "fits", "does not fit" or
        "inconclusive"; ``reason`` (chain) and ``reason_pooled`` (): why, in words.
        Evidence: ``ksd`` and ``ksd_iid`` (chain), ``ksd_pooled`` and ``ksd_iid_pooled``
        (): KSD of all the draws and the i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N), as
        :func:`ksd`; ``pvalue``, ``pvalue_reliable``, ``effective_draws`` (chain) and
        their ``_pooled`` () counterparts: the KSD goodness-of-fit test;
        ``agreement_pvalue`` and ``agreement_reliable`` (): the MMD test that all chains
        agree (NaN for one chain); ``stuck`` (chain): every draw the same point;
        ``divergences`` (chain), when the trace has sampler statistics;
        ``missing_mass_found`` and ``missing_mass_pvalue`` (), when the search ran (its
        method and summary in ``attrs``).
        ``attrs``: ``alpha``, ``n_tests``, ``test_level`` (alpha / n_tests),
        ``thinning_lag`` and ``kept_draws`` (the KSD test read blocks of thinning_lag
        draws, kept_draws blocks per chain), ``ksd_statistics`` (the preconditioners and
        statistics of the KSD test's max-T family), ``draws_needed`` (about how many draws per chain would
        give the test enough nearly independent draws), ``detectable_shift`` (the mean
        shift, in posterior standard deviations, that the test detects 80 % of the time
        with these effective draws, for a roughly Gaussian posterior: how strong a "fits"
        is), the kernel and preconditioner, and ``report``, the text printed by
        ``print(result)``.

    Notes
    -----
    The verdict combines tests of the null "the draws are from p": the KSD tests of the
    chains, the KSD test of all chains pooled, one MMD test that all chains agree (draws
    of one target have one distribution), and, with log p, the search for modes no draw
    visited. The chains' KSD tests form one family, read through max-T adjusted
    p-values (Westfall & Young 1993: each chain's statistic, standardised by its own
    bootstrap replicates, against the largest standardised replicate over the chains),
    so there are at most 4 tests whatever the number of chains, each read at level
    alpha / 4 (Bonferroni), and the chance that draws from p get any "does not fit" is
    at most alpha.

    The KSD test reads the chains in blocks of L = 1 + floor(5 (tau - 1)) draws, tau the
    largest autocorrelation time of the chains' mean autocorrelation over the draws' and
    scores' coordinates: draws L apart are nearly independent (for an AR(1) chain,
    correlated at most 0.001), so its statistic, the mean over the L offsets of the
    V-statistic of every L-th draw, has its null distribution from independent signs,
    one per block. Three statistics share those signs and are read together by max-T:
    the plain one, a score-damped one (the diffusion Stein operator with a Gaussian
    window around the draws' median, which keeps its power when a few draws have huge
    scores, as prior draws of a funnel do), and, with the default preconditioner and d
    <= 200, the plain one under the sample covariance (which sees under-dispersed draws
    of strongly correlated posteriors). The wild bootstrap with a sign chain, used
    before, rejected valid chains up to twice its level in the tail where the tests are
    read, and left most chains with tau >= 6 "inconclusive". The MMD test of agreement
    relabels every other block of about 5 tau draws among the chains (the blocks used
    are a block apart, so nearly independent). Measured levels and power on valid and
    biased samplers: benchmarks/results/calibration.md.

    An ensemble (an ``emcee.EnsembleSampler``, an ``az.from_emcee`` trace, or an array
    given with ``sample_dims=("draw", "chain")``, the layout of emcee's ``get_chain()``)
    is read as one chain: its walkers are not independent chains (each move of a walker
    uses the others). The ensemble's state, every walker at one step, is one Markov chain
    whose stationary law makes the walkers at one step independent draws of p (Goodman &
    Weare 2010), so the pooled KSD test (every L-th step of every walker, L from the
    walkers' mean autocorrelation, as emcee estimates it) is the ensemble's test; the
    result has one chain, "ensemble", and no per-walker tests and no test of agreement
    among walkers are run (to test independent chains stored as (draw, chain, d), swap
    the axes and pass ``sample_dims=("chain", "draw")``). Measured on healthy emcee runs
    of Gaussian targets: benchmarks/results/emcee_ensemble.md.

    The report ends with how strong a "fits" is: the shift of the mean, in posterior
    standard deviations, that the test detects 80 % of the time with the pooled
    effective draws, kappa(d) / sqrt(ESS) (kappa from 4.0 at d = 1 to 8.4 at d = 50,
    measured on Gaussian targets by benchmarks/bench_power_shift.py).

    "does not fit" when a chain never moved or a test rejects with a p-value that can be
    trusted; "inconclusive" when a p-value that would decide cannot be trusted (fewer
    than 20 blocks in a chain, or fewer than 3 blocks per chain or 20 in all for the
    test of agreement; the report says about how many draws would decide), or when
    the sampler reported divergent transitions and no test rejected (divergences mark
    regions the sampler could not explore, which the draws cannot speak for); "fits"
    otherwise. KSD / floor is reported as a description only: the floor is computed at
    the draws, so draws far from p raise their own floor and a ratio near 1 is no
    evidence of fit (see the Background page, "From numbers to a verdict").

    "fits" means no test found a difference, not that there is none: KSD is nearly blind
    to the weights of well-separated modes the chains all visited, and few effective
    draws give the tests little power.

    Cost: scores are evaluated once. One O(N^2 d) pass for the KSD values; the test on
    the n kept draws, O(n^2 (d + B)) for B bootstrap replicates; one O(N^2 d) pass for
    the MMD's block sums and O(P U^2) for P relabellings of U blocks; the search runs
    L-BFGS from overdispersed starts: with a PyMC model, typically a few thousand
    evaluations of log p and the score at single points. Memory O(n B) for the bootstrap
    weights; no N x N matrix is stored.

    References
    ----------
    Chwialkowski, Strathmann & Gretton (2016), A kernel test of goodness of fit, ICML.
    Gretton et al. (2012), A kernel two-sample test, JMLR.
    Liu, Duncan & Gandy (2023), Using perturbation to improve goodness-of-fit tests based
    on kernelized Stein discrepancy, ICML.
    Wenliang & Kanagawa (2020), Blindness of score-based methods to isolated components
    and mixing proportions.
    Westfall & Young (1993), Resampling-Based Multiple Testing, Wiley.
    Goodman & Weare (2010), Ensemble samplers with affine invariance, Commun. Appl.
    Math. Comput. Sci. 5(1).

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
    # 1. Validate and read the input once.
    alpha, n_bootstrap, n_permutations, rng = _diagnose_iv(
        alpha, n_bootstrap, n_permutations, log_density, estimator, n_landmarks, missing_mass,
        rng)
    check_progress(progress)
    kernel = make_kernel(kernel, c, beta)
    check_preconditioner(preconditioner)
    data = as_trace(data, model)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    # A numpyro MCMC or a JAX log density: its trace, score and log p from here on.
    data, model, score, log_density, sample_dims = pending.resolve(
        data, model, score, log_density, sample_dims)
    has_chain_dim = has_chain_dimension(data, sample_dims)
    if log_density is None and pending.log_density is not None:
        # A sampler's own object (emcee's log_prob_fn, a Stan model's log_prob): its log p.
        log_density, score, model = pending.log_density, pending.score_function, None
        batched = True
    ensemble = is_ensemble(data, sample_dims, pending.attrs)
    n_chain, n_draw, d = pending.draws.shape
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    # The search needs log p (the gradient, when the score is an array, from finite
    # differences of log p).
    search_possible = bool(missing_mass) and (log_density is not None or model is not None)
    n_tests = rules.n_tests(1 if ensemble else n_chain, search_possible)
    level = alpha / n_tests
    n_bootstrap = _replicates(n_bootstrap, "n_bootstrap", level, alpha, n_tests)
    n_permutations = _replicates(n_permutations, "n_permutations", level, alpha, n_tests)
    prepared = pending.with_scores()
    draws, scores = prepared.draws, prepared.scores

    # 2. Gather the evidence; the pieces run on the arrays (no score is evaluated again).
    estimator_options, estimator_note = _choose_estimator(estimator, n_landmarks,
                                                          n_chain * n_draw, d, n_bootstrap)
    tests, covariance_note = _ksd_test_evidence(prepared, has_chain_dim, n_bootstrap, rng,
                                                kernel, preconditioner, client,
                                                estimator_options, progress)
    test = tests[0]
    agreement_p, agreement_ok, mmd_note = (np.nan, True, "") if ensemble else (
        _agreement_evidence(draws, n_permutations, rng, kernel, preconditioner, progress))
    values = ksd(draws, score=scores, sample_dims=("chain", "draw"), kernel=kernel,
                 preconditioner=preconditioner, client=client, rng=rng, progress=progress,
                 **estimator_options)
    found = pending.sampler_warnings
    if is_labelled(data):
        found = sampler_warnings(data, group=group, chain=prepared.chain, draw=prepared.draw,
                                 sample_dims=("chain", "draw") if sample_dims is None
                                 else tuple(sample_dims))
    divergences = None if found is None else found.divergences
    search, not_run = None, "missing_mass=False"
    if missing_mass:
        try:
            search, not_run = _search(prepared, model, score, log_density, batched, kernel,
                                      pre, level, rng, compile_mode)
        except ValueError as err:
            raise ValueError(
                f"diagnose: the search for unvisited mass (missing_mass=True) failed: {err} "
                "Pass missing_mass=False to diagnose without it.") from err

    # 3. Decide (stats.verdict holds the rules).
    chain_pvalue, pooled_pvalue = _combined_pvalues(tests)
    reliable = test["pvalue_reliable"].values
    evidence = rules.Evidence(
        pvalue=chain_pvalue, reliable=reliable, pvalue_pooled=pooled_pvalue,
        reliable_pooled=bool(test["pvalue_reliable_pooled"]),
        kept_draws=int(test.attrs["n_draw_tested"]),
        thinning_lag=int(test.attrs["thinning_lag"]), min_kept_draws=MIN_THINNED_DRAWS,
        n_draw=n_draw, effective_draws_pooled=float(test["effective_draws_pooled"]),
        agreement_pvalue=agreement_p, agreement_reliable=agreement_ok,
        divergences=divergences, stuck=_stuck_chains(draws),
        missing_found=bool(search is not None and search.found),
        missing_run=search is not None,
        missing_summary=search.summary if search is not None else "",
        missing_not_run_reason=not_run, labels=prepared.chain.tolist())
    chain, per_chain = prepared.chain, {
        "ksd": values["ksd"].values, "ksd_iid": values["ksd_iid"].values,
        "pvalue_unadjusted": test["pvalue"].values,
        "effective_draws": test["effective_draws"].values}
    if ensemble:
        evidence, chain, per_chain = _as_one_chain(evidence, test, values, draws)
    verdicts, reasons = rules.chain_verdicts(evidence, level)
    if search is None:
        reasons = np.array([r + " (conditional: no search for unvisited mass)"
                            if v == rules.FITS else r for v, r in zip(verdicts, reasons)])
    verdict_pooled, reason_pooled = rules.pooled_verdict(evidence, level)

    # 4. Label and report.
    data_vars = {
        "verdict": (("chain",), verdicts, {"long_name": "verdict of each chain"}),
        "verdict_pooled": ((), verdict_pooled, {"long_name": "verdict, all chains"}),
        "reason": (("chain",), reasons, {"long_name": "why, each chain"}),
        "reason_pooled": ((), reason_pooled, {"long_name": "why, all chains"}),
        "ksd": (("chain",), per_chain["ksd"], {"long_name": "KSD of each chain"}),
        "ksd_pooled": ((), float(values["ksd_pooled"]),
                       {"long_name": "KSD of all chains pooled"}),
        "ksd_iid": (("chain",), per_chain["ksd_iid"],
                    {"long_name": "i.i.d. floor at the draws, each chain"}),
        "ksd_iid_pooled": ((), float(values["ksd_iid_pooled"]),
                           {"long_name": "i.i.d. floor at the draws, pooled"}),
        "pvalue": (("chain",), evidence.pvalue, {
            "long_name": "KSD test p-value, each chain, adjusted for the family of the "
                         "chains' tests (max-T)"}),
        "pvalue_unadjusted": (("chain",), per_chain["pvalue_unadjusted"],
                              {"long_name": "KSD test p-value of the chain on its own"}),
        "pvalue_pooled": ((), evidence.pvalue_pooled,
                          {"long_name": "KSD test p-value, pooled"}),
        "pvalue_reliable": (("chain",), evidence.reliable,
                            {"long_name": "whether the KSD p-value can be trusted"}),
        "pvalue_reliable_pooled": ((), evidence.reliable_pooled,
                                   {"long_name": "whether the pooled p-value can be trusted"}),
        "effective_draws": (("chain",), per_chain["effective_draws"],
                            {"long_name": "effective number of draws, draw / tau"}),
        "effective_draws_pooled": ((), evidence.effective_draws_pooled,
                                   {"long_name": "effective number of draws, all chains"}),
        "agreement_pvalue": ((), agreement_p,
                             {"long_name": "p-value of the MMD test that all chains agree"}),
        "agreement_reliable": ((), agreement_ok, {
            "long_name": "whether the p-value of the test of agreement can be trusted"}),
        "stuck": (("chain",), evidence.stuck,
                  {"long_name": "every draw of the chain is the same point"}),
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
        "thinning_lag": evidence.thinning_lag,
        "kept_draws": evidence.kept_draws,
        "draws_needed": rules.more_draws_needed(evidence),
        "detectable_shift": rules.detectable_shift(evidence.effective_draws_pooled, d),
        "missing_mass_search": search.method if search is not None else f"not run: {not_run}",
        **{k: v for k, v in test.attrs.items()
           if k not in ("space", "score_source", "thinning_lag", "n_draw_tested")},
        "parameters": list(prepared.parameter),
        **prepared.attrs,
    }
    attrs["ksd_statistics"] = ", ".join(
        f"{t.attrs['preconditioner']}{' (plain, damped)' if 'statistic_damped' in t else ''}"
        for t in tests)
    if ensemble:
        attrs["ensemble_note"] = (
            f"ensemble of {n_chain} walkers x {n_draw} steps read as one chain (walkers "
            f"are not independent chains): one KSD test on every {evidence.thinning_lag}-th "
            "step of every walker; no per-walker tests, no test of agreement among walkers")
    if estimator_note:
        attrs["estimator_note"] = estimator_note
    if covariance_note:
        attrs["covariance_note"] = covariance_note
    if mmd_note:
        attrs["mmd_note"] = mmd_note
    if search is not None:
        data_vars["missing_mass_found"] = ((), evidence.missing_found,
                                           {"long_name": "unvisited mass found"})
        data_vars["missing_mass_pvalue"] = ((), float(search.pvalue),
                                            {"long_name": "p-value of the search"})
        attrs["missing_mass_summary"] = search.summary
        attrs["n_log_density"] = int(search.n_log_density)
    result = Diagnosis(data_vars, coords={"chain": ("chain", chain)}, attrs=attrs)
    result.attrs["report"] = report(result)
    return result


def _next_step(verdict, reason):
    if verdict == rules.FITS:
        return "use the draws; KSD / floor and the tests found nothing to act on."
    if "divergent" in reason:
        return ("reparameterise (e.g. non-centred) or raise target_accept until the "
                "divergences are gone, then diagnose again.")
    if ("effective draws" in reason or "autocorrelated" in reason
            or "independent draws" in reason):
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
    level = result.attrs["test_level"]
    if result.sizes["chain"] > 1:
        p_agree = float(result["agreement_pvalue"])
        if not np.isfinite(p_agree) or not bool(result["agreement_reliable"]):
            said = "not decided (too few blocks of draws per chain)"
        elif p_agree <= level:
            said = f"no: the MMD test of agreement rejects (p = {p_agree:.2g} <= {level:.2g})"
        else:
            said = f"yes, as far as the MMD test of agreement sees (p = {p_agree:.2g})"
        lines.append(f"  chains agree: {said}")
    lines.append(f"  KSD test on blocks of {result.attrs['thinning_lag']} draws "
                 f"({result.attrs['kept_draws']} per chain; draws "
                 f"{result.attrs['thinning_lag']} apart are nearly independent); statistics: "
                 f"{result.attrs.get('ksd_statistics', '')}")
    if "detectable_shift" in result.attrs:
        lines.append(f"  power: with {result['effective_draws_pooled'].item():.0f} effective "
                     f"draws, a shift of the mean by about "
                     f"{result.attrs['detectable_shift']:.2g} posterior sd is detected 80 % "
                     "of the time (roughly Gaussian posterior); smaller errors can pass")
    if "missing_mass_found" in result:
        lines.append(f"  unvisited mass ({result.attrs['missing_mass_search']}): "
                     f"{result.attrs['missing_mass_summary']}")
    else:
        lines.append(f"  unvisited mass: search {result.attrs['missing_mass_search']}")
    for note in ("ensemble_note", "estimator_note", "mmd_note"):
        if note in result.attrs:
            lines.append(f"  {result.attrs[note]}")
    lines.append(f"  each test at level {level:.2g} = alpha "
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
