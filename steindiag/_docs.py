"""Shared entries of the public functions' numpydoc ``Parameters`` sections.

A docstring names the shared entries it uses by a line holding only ``{name}``
(indented as a parameter); :func:`fill_doc` puts the entry's text there. No docstring
is cut from another: each entry below is one parameter, written once.
"""

import re

__all__ = ["PARAMETERS", "fill_doc"]

_PLACEHOLDER = re.compile(r"^    \{([a-z_]+)\}$", re.MULTILINE)

PARAMETERS = {
    "data": """\
    data : array_like, xarray or ArviZ container, numpyro MCMC or pytree of positions
        Draws. An array of shape (chain, draw, d), or (draw, d) for one chain (other
        layouts with ``sample_dims``); a DataArray of one variable with the sample dims
        and any parameter dims (e.g. (chain, draw, school)); or a trace
        (``arviz.InferenceData``, ``xarray.DataTree``: ``pm.sample`` output; or its
        posterior ``xarray.Dataset``). Parameters are labelled as ArviZ labels them:
        ``theta[a]`` by coordinate value where the dim has a coordinate, ``theta[0]``
        by position otherwise, ``x[0]``, ``x[1]``, ... for arrays. Samplers' own
        objects too (see the user guide's recipes): a numpyro ``MCMC`` after
        ``.run(...)`` (its latent sites in numpyro's unconstrained space, scores from its
        potential energy: no ``score`` needed); positions as a JAX pytree (a dict of
        (chain, draw, ...) arrays, or a blackjax state history with
        ``sample_dims=("draw", "chain")``) with a JAX ``log_density``; an
        ``emcee.EnsembleSampler`` after ``run_mcmc`` (walkers as chains, steps as draws;
        log p is its ``log_prob_fn``, which checks ``score`` at a few draws, or gives the
        score by central differences when none is passed); a pystan 3 fit with its
        ``stan.build`` object as ``model``; a CmdStanPy fit with a
        ``bridgestan.StanModel`` as ``model`` (Stan's unconstrained space, scores and
        divergences from the model and fit).""",
    "model": """\
    model : pymc.Model, numpyro MCMC or Stan model, optional
        The model that produced the trace: scores are grad log p in its unconstrained
        space (value variables, ``model.logp(jacobian=True)``). Not needed for a trace
        that stores them (:func:`steindiag.add_scores`, nutpie's ``store_gradient``).
        A numpyro ``MCMC`` with its trace (``az.from_numpyro(mcmc)``): the trace's
        latent sites, mapped to numpyro's unconstrained space. For a Stan fit, the Stan
        model (pystan's ``stan.build(...)`` result, or a ``bridgestan.StanModel`` for a
        CmdStanPy fit).""",
    "compile_mode": """\
    compile_mode : str or pytensor.compile.mode.Mode, optional
        With ``model``: how PyTensor compiles the model's graphs (the score, and the
        map of stored constrained values to the unconstrained space): a mode name,
        e.g. ``"CVM"`` (the C backend), ``"NUMBA"``, ``"JAX"``, ``"FAST_RUN"``,
        ``"FAST_COMPILE"``, or a ``Mode`` object. Default: ``"CVM"`` when a C++
        compiler is available, else ``"NUMBA"``. The numbers do not depend on it (to
        rounding); the compile and run times do. An error without ``model``.""",
    "score": """\
    score : array_like, xarray.DataArray, xarray.Dataset or callable, optional
        grad log p at each draw instead of ``model``: an array of the same shape as the
        draws (for a DataArray ``data``: its shape, or a DataArray with its dims), a
        Dataset (or a trace group) of the draws' variables, or a callable on the flat
        (unconstrained) parameter vector. A labelled score is matched to the draws by
        label ((chain, draw) coordinates, variable names, coordinate values), never by
        position; labels that differ are refused. Real numbers only: complex values and
        masked entries are refused.""",
    "batched": """\
    batched : bool, default True
        Whether a ``score`` callable takes an (n, d) batch (True) or one (d,) draw.""",
    "kernel": """\
    kernel : {"imq", "gaussian", "matern32", "matern52"} or kernel object, default "imq"
        Base kernel k(x, y) = f(t), t = (x-y)^T A (x-y), A = Lambda^-1:
        ``"imq"`` (c^2 + t)^beta; ``"gaussian"`` exp(-t/2); ``"matern32"``
        (1 + sqrt(3t)) exp(-sqrt(3t)); ``"matern52"`` (1 + sqrt(5t) + 5t/3)
        exp(-sqrt(5t)); or an object of :mod:`steindiag.kernels`. The length scale of
        every kernel is the preconditioner's. Only the IMQ (beta in (-1, 0)) detects
        non-convergence in every dimension: with the Gaussian or a Matern kernel, KSD
        can go to 0 for draws that drift away in d >= 3 (Gorham & Mackey 2017; see the
        Background page).""",
    "c": """\
    c : float, optional
        IMQ offset, c > 0 (default 1.0). Only with ``kernel="imq"``.""",
    "beta": """\
    beta : float, optional
        IMQ exponent, -1 < beta < 0 (default -0.5). Only with ``kernel="imq"``.""",
    "preconditioner": """\
    preconditioner : str or array_like, default "standardize"
        ``"standardize"`` (robust per-coordinate scale; invariant to rescaling a
        parameter), ``"identity"``, ``"med"``, ``"sclmed"``, ``"smpcov"``, or Lambda as
        an array (0-d scalar, 1-D diagonal, 2-D SPD). Fixed once from the pooled draws.""",
    "group": """\
    group : str, default "posterior"
        Group of a trace holding the draws.""",
    "selection": """\
    var_names : str or list of str, optional
        The trace's variables to read, in this order (default: all of ``group``). As in
        ArviZ, a name starting with ``~`` excludes that variable (``["~tau"]``: every
        variable but ``tau``); names and exclusions cannot be mixed. With a PyMC
        ``model``, the free variables selected are checked with their components of
        the whole model's score, evaluated at every draw (deterministics are passed
        over; see the Background page, "A selection of the parameters").
    filter_vars : {None, "like", "regex"}, default None
        As in ArviZ: None, ``var_names`` are exact names; ``"like"``, substrings of the
        names; ``"regex"``, regular expressions (``re.search``). Patterns keep the
        trace's order; one that matches nothing is an error.
    coords : dict, optional
        Selection of the trace's draws and elements (``Dataset.sel``), e.g.
        ``{"draw": slice(500, None)}``.""",
    "labeller": """\
    labeller : ArviZ labeller, optional
        How results label each parameter, as in ``az.summary``: ``labeller.make_label_flat
        (var_name, sel, isel)`` of each element (``arviz_base.labels`` on ArviZ 1.x,
        ``arviz.labels`` on 0.x: ``BaseLabeller``, ``MapLabeller(var_name_map=...,
        coord_map=..., dim_map=...)``, ``DimCoordLabeller``, ``IdxLabeller``,
        ``NoVarLabeller``). Default None: ``BaseLabeller``'s ``theta[Choate]``. Only the
        labels shown change; stored scores, a model's layout and ``other`` are still
        matched by steindiag's own labels. An array's columns are variable ``x`` with dim
        ``x_dim_0`` (as ArviZ reads an array); labels read back from a nutpie trace's
        flat labels or from ``add_scores`` name their dims ``<var>_dim_<k>``. A labeller
        that gives two parameters the same label is an error.""",
    "sample_dims": """\
    sample_dims : sequence of str, optional
        For a trace, the names of the chain and draw dimensions (default ("chain",
        "draw")). For an array, the meaning of its leading axes: ("chain", "draw"),
        ("draw", "chain") (emcee's ``get_chain()``) or ("draw",) (one chain); the axis
        after them, if any, holds the parameters, so a 2-D array with
        ``sample_dims=("chain", "draw")`` is (chain, draw) of a one-parameter target.
        Without it an array is (chain, draw, d) or (draw, d); a 2-D array with no more
        rows than columns is refused and a 3-D one with more chains than draws warns
        (both are often another layout): pass ``sample_dims`` to settle it.""",
    "method": """\
    method : {"auto", "fused", "gemm"}, default "auto"
        Engine path; all give the same numbers (to rounding).""",
    "progress": """\
    progress : bool or None, default None
        Progress bar on stderr (tqdm if installed). None: only when interactive and the
        pass is expected to take more than a few seconds (otherwise a long pass is
        reported to the "steindiag" logger at INFO level). Ctrl-C stops the pass between
        chunks of about 0.25 s; no thread is left running.""",
    "space": """\
    space : {"unconstrained", "constrained"}, optional
        With ``score`` and no ``model``: the space the draws are in, in which ``score``
        is grad log p. ``"unconstrained"``: coordinates on all of R^d (a sampler's
        unconstrained space, log-Jacobian included in log p); ``"constrained"``: the
        model's own variables (the Stein identity then needs a density that is smooth
        and positive on all of R^d; a bounded variable biases KSD, see the Background
        page). Recorded in ``attrs["space"]`` ("as given" when None). Required for a
        trace written by a library that transforms its variables (ArviZ's
        ``inference_library`` attribute: numpyro, Stan, PyMC without ``model``, ...), whose
        stored values are constrained while the usual scores are not.""",
    "client": """\
    client : distributed.Client, optional
        Run the O(N^2 d) pass on the workers of a dask.distributed cluster (optional
        dependency: ``pip install 'steindiag[dask]'``); None (default) runs it on this
        machine's cores. The prepared draws and scores are sent once to every worker and
        blocks of rows run there as single-threaded tasks with the same kernels, so the
        numbers are the same (to rounding); only O(N) sums come back. Start workers with
        one thread each, as many as cores. See the user guide, "Beyond one machine".""",
    "estimator": """\
    estimator : {"exact", "nystrom"}, default "exact"
        ``"exact"``: every pair of draws, O(N^2 d) time. ``"nystrom"``: the Stein
        features projected onto the base kernel at m landmarks (m d functions), time
        linear in N, with k_p(x_i, x_i) and the pairs of draws of one chain at most L
        apart kept exact (L about twice the autocorrelation time, at most 50; ``attrs
        ["n_exact_lags"]``); for 10^5 draws and more (measured error and cost: user
        guide, "Many draws: the Nyström estimator"; the maths: Background page,
        "Nyström KSD"). It can miss a small part of a discrepancy that the landmarks
        do not resolve. ``ksd_test`` projects onto the Stein kernel at the landmarks
        (m functions, the short features its bootstrap needs) and keeps only the
        diagonal exact: its statistic can be lower than N times the KSD^2 of ``ksd``.""",
    "n_landmarks": """\
    n_landmarks : int, optional
        Landmarks m for ``estimator="nystrom"`` (1 <= m <= N): default 4 sqrt(N) clipped
        to [200, 500] (and to N). More landmarks: closer to the exact value, cost
        growing as N m d (and N m^2 for ``ksd_path`` and ``ksd_test``).""",
    "rng": """\
    rng : int, numpy.random.Generator or None
        Source of the landmarks (``numpy.random.default_rng(rng)``), drawn uniformly
        without replacement from the pooled draws (``attrs["landmark_index"]`` records
        them), and of the windows of draws sampled for the exact pairs' projected
        values when N is large. Unused by ``estimator="exact"``.""",
    "log_density_jax": """\
    log_density : callable, optional
        With no ``score``: a JAX-traceable log p (up to a constant) of one position,
        the flat (d,) vector for an array, a pytree like the positions for a pytree;
        the score is ``jax.grad`` of it (``jax.jit(jax.vmap(...))``, float64, on chunks
        of 1024 draws). An error if JAX cannot trace it.""",
    "log_density_checks": """\
    log_density : callable, optional
        log p up to a constant on the flat parameter vector, (n, d) -> (n,) (or (d,) ->
        scalar if ``batched=False``), in the space of the scores; used only by the
        missing-mass search. Default: from ``model`` (a PyMC model or a numpyro
        ``MCMC``) when one is given. With no ``score``: a JAX-traceable log p of one
        position (the flat (d,) vector, or a pytree like the positions), whose
        ``jax.grad`` is the score.""",
    "mode_search_checks": """\
    mode_search : {"auto", True, False} or a missing-mass search result, default "auto"
        Whether to look for mass the chains never visited (a mode, a region behind
        divergences). ``"auto"``: search when log p can be evaluated at new points
        (``log_density=`` or a PyMC model) and the score too (a callable or a model);
        otherwise not, and the attrs say why. ``True``: search, or raise if it cannot
        run. ``False``: skip. A result of the search done already (an object with a
        boolean ``found`` and a ``summary``, as
        ``steindiag.methods.missing_mass.search_missing_mass`` returns) is used as it is.
        Cost: the search's log-density and score evaluations (reported in the attrs as
        ``missing_mass_n_log_density``); with a PyMC model each is one batched graph call.""",
    "rng_checks": """\
    rng : numpy.random.Generator or int, optional
        Randomness of the missing-mass search (None: fresh entropy).""",
}


# Groups of entries that every function reading draws documents in this order.
GROUPS = {
    "input_entries": ("data", "model", "compile_mode", "score", "batched"),
    "kernel_entries": ("kernel", "c", "beta", "preconditioner"),
    "trace_entries": ("group", "selection", "labeller", "sample_dims"),
}
PARAMETERS.update({name: "\n".join(PARAMETERS[key] for key in keys)
                   for name, keys in GROUPS.items()})


def fill_doc(function):
    """Decorator: each line ``    {name}`` of ``function``'s docstring becomes ``PARAMETERS[name]``.

    An unknown name is an error at import time (a typo would otherwise print as is).
    """
    def entry(match):
        name = match.group(1)
        if name not in PARAMETERS:
            raise KeyError(f"{function.__qualname__}'s docstring names no shared entry {name!r}.")
        return PARAMETERS[name]

    function.__doc__ = _PLACEHOLDER.sub(entry, function.__doc__)
    return function
