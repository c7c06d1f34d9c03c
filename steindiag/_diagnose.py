"""One call, one answer: ``diagnose``.

Data flow: input -> ``inputs.read_input`` (draws read and scores evaluated once) -> the
evidence on those arrays (``methods.evidence``: the KSD tests of every chain and pooled,
the MMD test that all chains agree, stuck chains; ``methods.ksd``: KSD and its i.i.d.
floor; the sampler's divergences; ``methods.search``: modes the chains never visited,
when log p is available) -> ``stats.verdict`` (the decision rules) ->
``outputs.diagnosis`` (a labelled ``xarray.Dataset`` whose repr is a report).
"""

import numpy as np

from steindiag._docs import fill_doc
from steindiag._validate import (check_callable, check_choice, check_int, check_probability,
                                 check_rng, renamed_arguments, warn_user)
from steindiag.engine.dask import resolve_backend
from steindiag.engine.progress import check_progress
from steindiag.inputs import read_input
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import check_preconditioner
from steindiag.methods import evidence as pieces
from steindiag.methods.corrections import MODE_SEARCH_OPTIONS, MODE_SEARCH_TAKES
from steindiag.methods.search import NO_LOG_DENSITY, SearchError
from steindiag.outputs.diagnosis import Diagnosis, diagnosis_attrs, diagnosis_dataset
from steindiag.outputs.mmd import constant_message
from steindiag.stats import verdict as rules

__all__ = ["diagnose", "Diagnosis"]

_ESTIMATORS = ("auto", "exact", "nystrom")


def _diagnose_iv(alpha, n_bootstrap, n_permutations, log_density, estimator, n_landmarks,
                 mode_search, rng):
    alpha = check_probability(alpha, "alpha")
    n_bootstrap = check_int(n_bootstrap, "n_bootstrap", minimum=1, allow_none=True)
    n_permutations = check_int(n_permutations, "n_permutations", minimum=1, allow_none=True)
    check_callable(log_density, "log_density", "a callable on an (n, d) batch of flat "
                   "parameter vectors returning (n,) values of log p up to a constant")
    check_choice(estimator, "estimator", _ESTIMATORS)
    if n_landmarks is not None and estimator != "nystrom":
        raise ValueError("n_landmarks applies only with estimator='nystrom'.")
    mode_search = check_choice(mode_search, "mode_search", MODE_SEARCH_OPTIONS)
    return alpha, n_bootstrap, n_permutations, mode_search, check_rng(rng)


def _selection_note(attrs, gathered):
    """The report's sentence on a selection of the parameters ("" without one)."""
    if "stein_coordinates" not in attrs:
        return ""
    search = ("; the search for unvisited mass ran on every coordinate (log p is the whole "
              "model's)" if gathered.search is not None else "")
    coordinates = attrs["stein_coordinates"].removeprefix("selected ")
    return (f"selection: the check covers only the selected parameters "
            f"{', '.join(attrs['selected_variables'])} ({coordinates} coordinates), given "
            f"the others ({', '.join(attrs['left_out_variables'])}) as drawn: their score is "
            "the joint score's components at each draw, so errors in the others show only "
            f"through it{search}")


@fill_doc
@renamed_arguments(missing_mass=("mode_search", MODE_SEARCH_TAKES))
def diagnose(data, model=None, *, score=None, log_density=None, rng=None, alpha=0.05,
             n_bootstrap=None, n_permutations=None, mode_search="auto", batched=True,
             kernel="imq", c=None, beta=None, preconditioner="standardize",
             group="posterior", var_names=None, coords=None, sample_dims=None, space=None,
             filter_vars=None, labeller=None,
             estimator="auto", n_landmarks=None, client=None, compile_mode=None,
             progress=None):
    """Can these draws be trusted? A verdict per chain and pooled, with its evidence.

    Parameters
    ----------
    {input_entries}
    {kernel_entries}
    {trace_entries}
    {space}
    {client}
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
    mode_search : {"auto", True, False}, default "auto"
        Search for modes the chains never visited: ``"auto"`` when log p is available,
        ``True`` always (an error without log p), ``False`` never. It costs optimiser
        runs: a few thousand log p and score evaluations at single points.
    estimator : {"auto", "exact", "nystrom"}, default "auto"
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
        agree (NaN for one chain), and ``agreement_min_pvalue`` (), the smallest p-value
        it can attain; ``stuck`` (chain): the chain barely moves (or never moved);
        ``statistic`` (chain; ``_pooled`` ()) names the statistic of the KSD test family
        behind each verdict, ``statistic_ksd``, ``statistic_floor`` and
        ``statistic_pvalue`` its value (on the KSD scale), its floor and its own p-value.
        Where the evidence points, with a ``parameter`` dimension: ``chain_shift`` (chain,
        parameter), each chain's mean against the other chains' in standard errors;
        ``score_location_z``, ``score_spread`` and ``score_spread_z`` (chain, parameter;
        ``_pooled`` (parameter)), the Stein moments (mean score, 0 for draws of p;
        -mean((x - mean x) s), 1 for draws of p) and their distance from those values in
        standard errors. ``reason_code`` (chain; ``_pooled`` ()): what decided, one of
        ``steindiag.stats.verdict.REASONS``.
        ``divergences`` (chain), when the trace has sampler statistics, with
        ``divergence_shift`` (parameter: the divergent draws' mean minus the others', in
        standard errors, when the flags of the draws are stored) and ``acceptance_rate``
        (chain: the mean acceptance statistic the sampler recorded, when it did);
        ``missing_mass_found`` and ``missing_mass_pvalue`` (), when the search ran (its
        method and summary in ``attrs``).
        ``attrs``: ``alpha``, ``n_tests``, ``test_level`` (alpha / n_tests),
        ``thinning_lag`` and ``kept_draws`` (the KSD test read blocks of thinning_lag
        draws, kept_draws blocks per chain), ``ksd_statistics`` (the preconditioners and
        statistics of the KSD test's max-T family), ``draws_needed`` (about how many draws per chain would
        give the test enough nearly independent draws), ``detectable_shift`` (the mean
        shift, in posterior standard deviations, that the test detects 80 % of the time
        with these effective draws, for a roughly Gaussian posterior: how strong a "fits"
        is), the kernel and preconditioner, ``parameterisation`` ("centred",
        "non-centred" or "unknown", with a PyMC model and sampler statistics) and
        ``centred_variables``, and ``report``, the text printed by ``print(result)``.

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
    scores' coordinates, the same alternated in sign (antithetic chains) and the draws'
    folded ranks: draws L apart are nearly independent (for an AR(1) chain,
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

    Before any test, the Stein moments of each chain (see the Background page, "Where
    the evidence points") find chains that cannot be draws of p whatever a test says: a
    chain whose spread moment is at most 0.01 in every parameter barely moves (its spread
    is a tenth of the scale the target's curvature sets where it sits, or less), and one
    whose spread moment reaches 100 in some parameter spreads ten times wider than p
    allows there (prior draws). Both are "does not fit" by name, and the tests run on the
    other chains. When the test of agreement rejects, each chain's mean is compared with
    the other chains' in standard errors, parameter by parameter (Bonferroni over the
    cells): a chain that differs is "does not fit", and the report names it and its
    parameters; when a KSD test rejects, the report names the parameters whose Stein
    moments are off. A test whose smallest attainable p-value (for the permutation test,
    max(1 / (1 + P), 1 / M) with M distinct arrangements of the blocks) exceeds the level
    decides nothing: its verdict is never "fits".

    "does not fit" when a chain barely moves or spreads far wider than p, or a test
    rejects with a p-value that can be trusted; "inconclusive" when a p-value that would decide cannot be trusted (fewer
    than 20 blocks in a chain, or fewer than 3 blocks per chain or 20 in all for the
    test of agreement; the report says about how many draws would decide), or when
    the sampler reported divergent transitions and no test rejected (divergences mark
    regions the sampler could not explore, which the draws cannot speak for; unless they
    are few and sit nowhere in particular, below); "fits" otherwise.

    Divergences in context: a run of a PyMC model that holds no centred hierarchy, whose
    divergences are few (at most 2 per 1000 draws in every chain), sit nowhere in
    particular (no parameter's divergent draws stand out from the others: z_k =
    (mean_div - mean_rest) / sqrt(var_rest / m + MCSE^2) for the m divergent draws, read
    at 5 % with Bonferroni over the d parameters) and pass every test gets "fits", the divergences named in the reason (code "few_divergences"); see
    the Background page, "Divergences in context", for the rule's measured rates. The
    report says where the divergences sit, and its advice uses what the run did: the
    recorded mean acceptance (NUTS tunes its step size to bring it near target_accept,
    which PyMC does not store) and, with a PyMC model, whether some free variable's
    scale depends on another free variable (a centred hierarchy, the usual cause of a
    funnel).

    KSD / floor is reported as a description only: the floor is computed at
    the draws, so draws far from p raise their own floor and a ratio near 1 is no
    evidence of fit (see the Background page, "From numbers to a verdict").

    "fits" means no test found a difference, not that there is none: KSD is nearly blind
    to the weights of well-separated modes the chains all visited, and few effective
    draws give the tests little power.

    Cost: scores are evaluated once. One O(N^2 d) pass for the KSD values; the test on
    the n kept draws, O(n^2 (d + B)) for B bootstrap replicates; one O(N^2 d) pass for
    the MMD's block sums and O(P U^2) for P relabellings of U blocks (above 1024 blocks,
    many short chains: a quarter of the pairs, at most 2048 units of merged blocks, and
    O(P (U + U^2 / C)) for the relabellings; see :func:`mmd`); the search runs L-BFGS
    from overdispersed starts: with a PyMC model, typically a few thousand evaluations of
    log p and the score at single points. Memory O(n B) for the bootstrap weights (in
    passes of 1 GiB above that) and the (chain, B) replicates; no N x N matrix is
    stored. KSD tests that would not fit in the memory available are refused before
    they start (``MemoryError``, with the size they would need and what to change). On
    1000 x 60, 300 x 200 and 100 x 600 draws (d = 10), ``diagnose`` takes less time and
    less memory than ``ksd_test`` with its defaults (benchmarks/results/many_chains.md).

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
    alpha, n_bootstrap, n_permutations, mode_search, rng = _diagnose_iv(
        alpha, n_bootstrap, n_permutations, log_density, estimator, n_landmarks, mode_search,
        rng)
    check_progress(progress)
    kernel = make_kernel(kernel, c, beta)
    check_preconditioner(preconditioner)
    backend = resolve_backend(client)
    pending = read_input(data, model, score=score, batched=batched, group=group,
                         var_names=var_names, coords=coords, sample_dims=sample_dims,
                         filter_vars=filter_vars, labeller=labeller,
                         space=space, compile_mode=compile_mode, log_density=log_density)
    n_chain, n_draw, d = pending.draws.shape
    pre = pieces.draws_preconditioner(preconditioner, pending.draws, pending.parameter)
    search_possible = mode_search is not False and pending.source.has_log_density()
    if mode_search is True and not search_possible:
        raise ValueError(f"diagnose: mode_search=True needs log p at new points; "
                         f"{NO_LOG_DENSITY}.")
    n_tests = rules.n_tests(1 if pending.ensemble else n_chain, search_possible)
    level = alpha / n_tests
    n_bootstrap = pieces.replicates(n_bootstrap, "n_bootstrap", level, alpha, n_tests)
    n_permutations = pieces.replicates(n_permutations, "n_permutations", level, alpha, n_tests)
    prepared = pending.with_scores()

    estimator_options, estimator_note = pieces.choose_estimator(
        estimator, n_landmarks, n_chain * n_draw, d, n_bootstrap)
    try:
        gathered = pieces.gather(
            prepared, pre, preconditioner, kernel, has_chains=pending.has_chains,
            ensemble=pending.ensemble, n_bootstrap=n_bootstrap, n_permutations=n_permutations,
            estimator_options=estimator_options, rng=rng, search=mode_search is not False,
            source=pending.source, level=level, backend=backend, progress=progress)
    except SearchError as err:
        raise ValueError(f"diagnose: the search for unvisited mass failed: {err} Pass "
                         "mode_search=False to diagnose without it.") from err.__cause__
    if gathered.agreement.constant:
        warn_user(constant_message(gathered.agreement.constant))
    found = pending.sampler_warnings()
    evidence = pieces.collect(gathered, n_draw=n_draw, level=level, found=found,
                              draws=prepared.draws, labels=prepared.chain.tolist())
    chain = prepared.chain
    if pending.ensemble:
        evidence, chain = pieces.as_one_chain(evidence), np.array(["ensemble"])
    verdicts = rules.chain_verdicts(evidence, level, conditional=gathered.search is None)
    attrs = diagnosis_attrs(
        alpha=alpha, n_tests=n_tests, level=level, evidence=evidence, d=d, gathered=gathered,
        kernel=kernel, pre=pre, n_bootstrap=n_bootstrap, prepared=prepared, ensemble=pending.ensemble,
        notes={"estimator_note": estimator_note,
               "selection_note": _selection_note(prepared.attrs, gathered)})
    return diagnosis_dataset(
        verdicts=verdicts, evidence=evidence, pooled=rules.pooled_verdict(evidence, level),
        per_chain=pieces.chain_values(gathered, n_draw, pending.ensemble), chain=chain,
        parameters=prepared.parameter, gathered=gathered, found=found, attrs=attrs)
