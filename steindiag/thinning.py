"""Stein thinning: ``stein_thin`` selects the draws whose empirical measure has the lowest KSD.

Data flow: input -> ``inputs.read_input`` (read once) -> one preconditioner from the pooled
draws -> scores -> ``methods.thinning.stein_thinning`` (one kernel row per selected point,
O(N) memory; regularised: a Laplacian correction and a log p penalty) ->
``methods.corrections.check_correction`` -> ``outputs.thinning`` (the thinned draws in
the input's own type).
"""

import numpy as np

from steindiag._containers import array_sample_dims
from steindiag._docs import fill_doc
from steindiag._validate import check_bool, check_int, check_real, check_rng, renamed_arguments
from steindiag.engine.progress import check_progress
from steindiag.inputs import check_log_density, read_input
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag.methods.corrections import (MODE_SEARCH_TAKES, THINNING_SPREAD_WORDS,
                                           check_correction, check_mode_search)
from steindiag.methods.thinning import stein_thinning
from steindiag.outputs.thinning import (SteinThinning, thinned_array, thinned_container,
                                        thinning_attrs)

__all__ = ["stein_thin", "SteinThinning"]


def _thin_iv(n_selected, regularized, strength, log_density, return_info):
    check_int(n_selected, "n_selected", minimum=1)
    check_bool(regularized, "regularized")
    check_bool(return_info, "return_info")
    check_real(strength, "strength", low=0.0, allow_none=True)
    if not regularized and strength is not None:
        raise ValueError("strength applies only with regularized=True.")
    if log_density is not None and not callable(log_density):
        try:
            np.asarray(log_density, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                "log_density must be a callable or an array of log p at each draw; got "
                f"{type(log_density).__name__}."
            ) from None


def _regularized_sources_iv(source, n_chain, n_draw):
    """Regularised thinning evaluates log p and the score: their sources, once read (a
    numpyro MCMC or a JAX log density gives both as callables), before any score is."""
    if source.log_density is None and source.model is None:
        raise ValueError(
            "regularized=True needs log p at each draw: pass log_density= (a callable "
            "on the flat parameter vector, or an array of shape (chain, draw)) or a "
            "PyMC model."
        )
    if not callable(source.score) and (source.score is not None or source.model is None):
        raise ValueError(
            "regularized=True needs the score as a callable (or a PyMC model) to "
            "compute the Laplacian correction by finite differences; got score as "
            f"{'an array' if source.score is not None else 'None'}."
        )
    check_log_density(source.log_density, n_chain, n_draw)


@fill_doc
@renamed_arguments(n_points=("n_selected", "the number of draws to select"),
                   missing_mass=("mode_search", MODE_SEARCH_TAKES))
def stein_thin(data, model=None, *, n_selected, score=None, batched=True, kernel="imq", c=None,
               beta=None, preconditioner="standardize", group="posterior", var_names=None,
               filter_vars=None, labeller=None,
               coords=None, sample_dims=None, space=None, regularized=False, log_density=None,
               strength=None, return_info=False, mode_search="auto", rng=None,
               compile_mode=None, progress=None):
    """Select ``n_selected`` draws that greedily minimise the KSD (Stein thinning).

    Parameters
    ----------
    data : array_like, xarray.DataArray, xarray.DataTree, arviz.InferenceData or xarray.Dataset
        Draws: an array (chain, draw, d) or (draw, d), a DataArray of one variable
        (sample dims and parameter dims), or a trace.
    model : pymc.Model, optional
        The model that produced the trace (scores, and log p if ``regularized``).
    compile_mode : str or pytensor.compile.mode.Mode, optional
        With ``model``: the PyTensor mode of the model's graphs (as in
        :func:`steindiag.ksd`).
    n_selected : int
        Number of points to select, 1 <= n_selected <= number of draws (chains pooled).
        Points may be selected more than once.
    score : array_like or callable, optional
        grad log p at each draw instead of ``model`` (as in :func:`steindiag.ksd`).
        ``regularized=True`` needs it as a callable (or ``model``) for the Laplacian.
    batched : bool, default True
        Whether ``score`` and ``log_density`` callables take an (n, d) batch.
    kernel, c, beta, preconditioner, group, var_names, filter_vars, coords, sample_dims, space
        As in :func:`steindiag.ksd` (default: the IMQ kernel, c = 1, beta = -1/2); the
        preconditioner is fixed once from all pooled draws. An array's result is
        (1, n_selected, d) if it has a chain axis, else (n_selected, d), or (n_selected,)
        for a 1-D array.
    {labeller}
    regularized : bool, default False
        Use the regularised rule of Benard, Staber & Da Veiga (2023).
    log_density : callable or array_like, optional
        log p (up to a constant) at each draw for ``regularized=True``: a callable on
        the flat parameter vector ((n, d) -> (n,) if ``batched``), or an array of shape
        (chain, draw). Default: from ``model`` (``model.logp(jacobian=True)``, or a
        numpyro ``MCMC``'s potential energy). A callable is also what the missing-mass
        search evaluates (see ``mode_search``), with or without ``regularized``. With no
        ``score``: a JAX-traceable log p of one position (the flat (d,) vector, or a
        pytree like the positions), whose ``jax.grad`` is the score.
    strength : float, optional
        lambda >= 0 of the entropic term -lambda t log p(x_i); default 1 / n_selected
        (Benard et al. 2023). Larger values pull the selection to high-density regions.
    return_info : bool, default False
        Return a :class:`SteinThinning` (thinned data, indices, KSD path) instead of
        the thinned data alone.
    mode_search : {"auto", True, False} or a missing-mass search result, default "auto"
        Whether to look for mass the chains never visited, as in
        :func:`steindiag.stein_weights` (``"auto"``: when log p and the score can be
        evaluated at new points, i.e. a PyMC model or callables).
    rng : numpy.random.Generator or int, optional
        Randomness of the missing-mass search (None: fresh entropy).
    progress : bool or None, default None
        Progress bar of the greedy selection on stderr (tqdm if installed). None: only
        when interactive and the selection is expected to take more than a few seconds.
        Ctrl-C stops it between steps of about 0.25 s of work; no thread is left
        running.

    Returns
    -------
    Same type as ``data`` (or :class:`SteinThinning` if ``return_info``)
        A trace (InferenceData, DataTree or Dataset) keeps every group; groups with
        both sample dims hold the selected draws as one chain (``chain = [0]``,
        ``draw = 0 .. n_selected - 1``) with coordinates ``source_chain`` and
        ``source_draw`` (dim ``draw``) naming where each came from; the ``group``'s
        attrs add ``stein_thinning_ksd`` and the kernel and thinning settings. A
        DataArray gives a DataArray of the selected draws in the same form. An
        array returns an array of the selected draws, shape (1, n_selected, d) for a
        (chain, draw, d) input and (n_selected, d) for a (draw, d) input.

        The selected points are a set, not a Markov chain: they are laid out as one
        "chain" so that every tool can read them, but R-hat, ESS and MCSE assume a
        chain (``arviz.summary`` reports R-hat as NaN for one chain, and its ESS
        treats the selection order as time). Read their means, sds and quantiles; the
        group's attrs say so (``stein_thinning_layout``). The attrs also record the
        checks (``stein_thinning_correction_warnings``,
        ``stein_thinning_sampler_divergences``, ``stein_thinning_missing_mass``,
        ``stein_thinning_ksd_far_threshold``, ``stein_thinning_spread_variance_ratio``
        (the thinned points' variance over the one the target's curvature implies, per
        parameter), ... as in :func:`steindiag.stein_weights`).

    Warns
    -----
    CorrectionWarning (a UserWarning)
        The thinned points cannot be trusted: divergent transitions in the trace's
        ``sample_stats``, unvisited mass found, the KSD of the thinned points far
        above the floor of as many exact independent draws, or thinned points narrower
        than the target in some parameter (defined as in :func:`steindiag.stein_weights`).
        Narrower draws: no selection can widen them (the message names
        :func:`stein_variational`). The message names the cause and the parameters.

    Raises
    ------
    ValueError
        ``n_selected`` <= 0 or larger than the number of draws; ``regularized=True``
        without log p or without a score function.

    Notes
    -----
    Thinning selects among the draws: like weights, it cannot put mass where the
    sampler never went. On centred eight schools (4 x 1000 NUTS draws with
    divergences; benchmarks/bench_corrections.py) 200 thinned points hold no draw with tau <
    1 (truth: P(tau < 1) = 0.20; the draws: 0.05) and have mean tau 8.3 (regularised: 6.4)
    against 3.6 in a long non-centred run and 4.1 in the draws.

    Greedy thinning of few points for many parameters also narrows draws of the right
    spread (points near the mode lower the KSD most): measured on exact N(0, I_d) draws
    in benchmarks/results/corrections_limits.md. This is recorded, not warned about
    (it happens in most runs with d >= 10 and a tenth of the draws selected):
    ``stein_thinning_spread_lost`` names the parameters whose thinned points are clearly
    narrower than the target while the draws are not; select more points, or weight all
    the draws with :func:`steindiag.stein_weights`, when the spread matters.

    Riabiz et al. (2022): pi_1 = argmin_i k_p(x_i, x_i) and

        pi_t = argmin_i [ k_p(x_i, x_i) + 2 sum_(j<t) k_p(x_(pi_j), x_i) ],

    i.e. each step adds the draw that most decreases the KSD of the selected set.
    Running sums make it O(N n_selected) kernel evaluations and O(N) memory.
    Ties go to the first draw in (chain, draw) order.

    Regularised (Benard et al. 2023), against the known pathology (plain thinning
    over-selects draws with small ``|score|``, e.g. near modes, and gets mixture weights
    wrong):

        pi_t = argmin_i [ k_p(x_i, x_i) + L(x_i) + 2 sum_(j<t) k_p(x_(pi_j), x_i)
                          - lambda t log p(x_i) ],

    with the Laplacian correction L(x) = k(x, x) sum_k (d^2 log p / dz_k^2)^+ in the
    kernel coordinates z (z = x for ``preconditioner="identity"``; k(x, x) = c^(2 beta)
    for the IMQ, 1 for the other kernels; the paper's Delta^+ log p for c = 1), computed
    by central differences of the score (2 d score evaluations per draw), and
    lambda = ``strength``.

    References
    ----------
    Riabiz, Chen, Cockayne, Swietach, Niederer, Mackey & Oates (2022), Optimal thinning
    of MCMC output, JRSS-B 84(4).
    Benard, Staber & Da Veiga (2023), Kernel Stein discrepancy thinning: a theoretical
    perspective of pathologies and a practical fix with regularization, NeurIPS.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 500, 2))
    >>> steindiag.stein_thin(x, score=-x, n_selected=20).shape
    (1, 20, 2)
    >>> info = steindiag.stein_thin(x, score=-x, n_selected=20, return_info=True)
    >>> info.ksd_path.shape, bool(info.ksd > 0)
    ((20,), True)
    """
    kernel = make_kernel(kernel, c, beta)
    _thin_iv(n_selected, regularized, strength, log_density, return_info)
    check_mode_search(mode_search)
    rng = check_rng(rng)
    check_progress(progress)
    check_preconditioner(preconditioner)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        filter_vars=filter_vars, labeller=labeller,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    n_chain, n_draw, d = pending.draws.shape
    if n_selected > n_chain * n_draw:
        raise ValueError(
            f"n_selected must be at most the number of draws ({n_chain} chains x {n_draw} "
            f"draws = {n_chain * n_draw}); got n_selected={n_selected}.")
    if regularized:
        _regularized_sources_iv(pending.source, n_chain, n_draw)
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    prepared = pending.with_scores()
    log_p = score_fn = None
    if regularized:
        log_p = pending.source.log_density_values(prepared.draws, prepared.chain,
                                                  prepared.draw).reshape(-1)
        score_fn = pending.source.score_function()
    selected, ksd_path, selected_points, settings = stein_thinning(
        prepared, pre, kernel, n_selected, regularized=regularized, strength=strength,
        log_p=log_p, score_fn=score_fn, progress=progress)
    checks = check_correction(
        pending=pending, prepared=prepared, kernel=kernel, preconditioner=pre,
        mode_search=mode_search, rng=rng,
        ksd_checks=[(selected_points, float(ksd_path[-1]), "thinned points'")],
        spread_weights=np.bincount(selected, minlength=n_chain * n_draw).reshape(n_chain, n_draw),
        spread_words=THINNING_SPREAD_WORDS)
    attrs = thinning_attrs(settings, checks, ksd_path[-1], prepared, pre, kernel)
    chain_pos, draw_pos = np.divmod(selected, n_draw)
    chain, draw = np.asarray(prepared.chain)[chain_pos], np.asarray(prepared.draw)[draw_pos]
    origin = pending.origin
    thinned = (thinned_container(origin.data, chain, draw, origin.trace_dims, origin.group,
                                 attrs) if origin.labelled else
               thinned_array(np.asarray(origin.data), array_sample_dims(origin.sample_dims),
                             chain_pos, draw_pos))
    checks.warn("stein_thin")
    if not return_info:
        return thinned
    return SteinThinning(thinned=thinned, chain=chain, draw=draw, index=selected,
                         ksd=float(ksd_path[-1]), ksd_path=ksd_path, attrs=attrs)
