"""Greedy Stein thinning (see the docs' background page), plain and regularised.

Data flow: input -> ``steindiag.inputs.read_input`` (every argument checked, draws read)
-> one preconditioner from the pooled draws -> scores (``SteinInput``) -> ``KernelPoints``
-> ``methods.thinning.greedy_select`` (one kernel row per selected point, O(N) memory)
-> the selected draws of the input, in the input's own type, with the selected
(chain, draw) recorded and the KSD of the result.
"""

import numbers
from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag._corrections import check_correction, check_missing_mass_option
from steindiag._validate import check_rng
from steindiag.engine.products import KernelPoints
from steindiag._ksd import kernel_attrs
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag.inputs import (as_trace, is_labelled, log_density_values, read_input,
                              score_function)
from steindiag.inputs._arrays import apply_layout, array_sample_dims
from steindiag.inputs._ecosystems import as_plain_sources, is_ecosystem_input
from steindiag.inputs._functions import check_log_density
from steindiag.kernels import make_kernel
from steindiag.methods.thinning import greedy_select, laplacian_correction, prefix_ksd
from steindiag.engine.progress import CONSERVATIVE_FLOPS, check_progress, progress_bar

__all__ = ["stein_thin", "SteinThinning"]


@dataclass(kw_only=True, repr=False)
class SteinThinning:
    """Result of :func:`stein_thin` with ``return_info=True``.

    Attributes
    ----------
    thinned : same type as the input
        The selected draws (what ``stein_thin`` returns by default).
    chain, draw : ndarray (n_points,)
        Chain and draw coordinate values of the selected draws, in selection order
        (a draw may be selected more than once).
    index : ndarray of int (n_points,)
        Positions in the pooled draws that were thinned (after any ``coords``
        selection), ``chain_position * n_draw + draw_position``.
    ksd : float
        KSD (sqrt of the V-statistic) of the thinned set, same kernel and preconditioner.
    ksd_path : ndarray (n_points,)
        KSD of the first t selected points, t = 1 .. n_points.
    attrs : dict
        Kernel, preconditioner and thinning settings, and the checks of
        :func:`stein_thin` (``stein_thinning_correction_warnings`` etc.).
    """

    thinned: object
    chain: np.ndarray
    draw: np.ndarray
    index: np.ndarray
    ksd: float
    ksd_path: np.ndarray
    attrs: dict = field(default_factory=dict)

    def __repr__(self):
        attrs = self.attrs
        n_source = (attrs.get("stein_thinning_source_n_chain", 0)
                    * attrs.get("stein_thinning_source_n_draw", 0))
        unique = np.unique(self.index).size
        lines = [
            f"SteinThinning: {self.index.size} points ({unique} distinct) of {n_source} "
            f"draws, {attrs.get('stein_thinning', 'greedy')} rule; KSD {self.ksd:.4g}",
            f"  thinned: {type(self.thinned).__name__} (one 'chain' of selected points, not "
            "a Markov chain); also chain, draw, index, ksd_path, attrs",
        ]
        warned = attrs.get("stein_thinning_correction_warnings", "")
        if warned:
            lines.append(f"  cannot be trusted: {warned}")
        return "\n".join(lines)


def _thin_iv(n_points, regularized, strength, log_density, return_info, score, model):
    if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)):
        raise TypeError(f"n_points must be an integer; got {type(n_points).__name__}.")
    if n_points <= 0:
        raise ValueError(f"n_points must be >= 1; got n_points={n_points}.")
    for name, value in (("regularized", regularized), ("return_info", return_info)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False; got {value!r}.")
    if strength is not None:
        if isinstance(strength, bool) or not isinstance(strength, numbers.Real):
            raise TypeError(f"strength must be None or a real number; got {type(strength).__name__}.")
        if not (np.isfinite(strength) and strength >= 0):
            raise ValueError(f"strength must be a finite number >= 0; got strength={strength}.")
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


def _regularized_sources_iv(regularized, log_density, score, model):
    """Regularised thinning evaluates log p and the score: their sources, once resolved.

    Called after the input layer has resolved them (a numpyro MCMC or a JAX log density
    gives both as callables), before any score is evaluated.
    """
    if regularized:
        if log_density is None and model is None:
            raise ValueError(
                "regularized=True needs log p at each draw: pass log_density= (a callable "
                "on the flat parameter vector, or an array of shape (chain, draw)) or a "
                "PyMC model."
            )
        if not callable(score) and (score is not None or model is None):
            raise ValueError(
                "regularized=True needs the score as a callable (or a PyMC model) to "
                "compute the Laplacian correction by finite differences; got score as "
                f"{'an array' if score is not None else 'None'}."
            )


# -- output in the input's type ---------------------------------------------------------


def _take_points(dataset, chain_label, draw_label, sample_dims):
    """The draws at the given (chain, draw) coordinate values, as one chain.

    Selection is by label, so that it stays right when ``coords=`` selected a subset of
    the draws before thinning (positions would then refer to the subset).
    """
    chain_dim, draw_dim = sample_dims
    if draw_dim in dataset.dims and chain_dim not in dataset.dims and not np.any(chain_label):
        # One sample dim (sample_dims=("draw",)): the input layer treats it as one chain.
        dataset = dataset.expand_dims({chain_dim: [0]})
    if chain_dim not in dataset.dims or draw_dim not in dataset.dims:
        return dataset
    m = len(chain_label)
    indexers = {}
    for dim, labels in ((chain_dim, chain_label), (draw_dim, draw_label)):
        if dim in dataset.indexes:
            positions = dataset.indexes[dim].get_indexer(labels)
        else:  # no coordinate: the input layer labelled the dim by position
            positions = np.asarray(labels, dtype=np.int64)
        if np.any(positions < 0) or np.any(positions >= dataset.sizes[dim]):
            raise ValueError(f"selected {dim} values are missing from a group of the trace.")
        indexers[dim] = xr.DataArray(positions, dims="__thinned__")
    picked = dataset.isel(indexers)
    renames = {name: f"source_{name}" for name in (chain_dim, draw_dim) if name in picked.coords}
    picked = picked.rename_vars(renames).rename_dims({"__thinned__": draw_dim})
    picked = picked.assign_coords({draw_dim: np.arange(m)}).expand_dims({chain_dim: [0]})
    return picked.transpose(chain_dim, draw_dim, ...)


def _thinned_container(data, chain_label, draw_label, sample_dims, group, attrs):
    from steindiag.inputs._trace import _container_kind

    kind = _container_kind(data)
    if kind == "dataarray":
        name = data.name if data.name is not None else "x"
        picked = _take_points(data.to_dataset(name=name), chain_label, draw_label, sample_dims)
        out = picked[name]
        out.attrs = {**data.attrs, **attrs}
        return out.rename(data.name)

    def take(dataset, name=None):
        out = _take_points(dataset, chain_label, draw_label, sample_dims)
        if name == group:
            out.attrs = {**dataset.attrs, **attrs}
        return out

    if kind == "dataset":
        return take(data, group)
    if kind == "datatree":
        nodes = {}
        for node in data.subtree:
            path = node.path
            name = path.strip("/") or None
            nodes[path] = take(node.to_dataset(inherit=False), name)
        return xr.DataTree.from_dict(nodes, name=data.name)
    if kind == "inferencedata":
        import arviz as az

        return az.InferenceData(**{name: take(getattr(data, name), name) for name in data.groups()})
    raise TypeError(f"cannot thin data of type {type(data).__name__}.")


_THIN_PARAMETERS = """\
    data : array_like, xarray.DataArray, xarray.DataTree, arviz.InferenceData or xarray.Dataset
        Draws: an array (chain, draw, d) or (draw, d), a DataArray of one variable
        (sample dims and parameter dims), or a trace.
    model : pymc.Model, optional
        The model that produced the trace (scores, and log p if ``regularized``).
    compile_mode : str or pytensor.compile.mode.Mode, optional
        With ``model``: the PyTensor mode of the model's graphs (as in
        :func:`steindiag.ksd`).
    n_points : int
        Number of points to select, 1 <= n_points <= number of draws (chains pooled).
        Points may be selected more than once.
    score : array_like or callable, optional
        grad log p at each draw instead of ``model`` (as in :func:`steindiag.ksd`).
        ``regularized=True`` needs it as a callable (or ``model``) for the Laplacian.
    batched : bool, default True
        Whether ``score`` and ``log_density`` callables take an (n, d) batch.
    kernel, c, beta, preconditioner, group, var_names, coords, sample_dims, space
        As in :func:`steindiag.ksd` (default: the IMQ kernel, c = 1, beta = -1/2); the
        preconditioner is fixed once from all pooled draws. An array's result is
        (1, n_points, d) if it has a chain axis, else (n_points, d), or (n_points,)
        for a 1-D array.
    regularized : bool, default False
        Use the regularised rule of Benard, Staber & Da Veiga (2023).
    log_density : callable or array_like, optional
        log p (up to a constant) at each draw for ``regularized=True``: a callable on
        the flat parameter vector ((n, d) -> (n,) if ``batched``), or an array of shape
        (chain, draw). Default: from ``model`` (``model.logp(jacobian=True)``, or a
        numpyro ``MCMC``'s potential energy). A callable is also what the missing-mass
        search evaluates (see ``missing_mass``), with or without ``regularized``. With no
        ``score``: a JAX-traceable log p of one position (the flat (d,) vector, or a
        pytree like the positions), whose ``jax.grad`` is the score.
    strength : float, optional
        lambda >= 0 of the entropic term -lambda t log p(x_i); default 1 / n_points
        (Benard et al. 2023). Larger values pull the selection to high-density regions.
    return_info : bool, default False
        Return a :class:`SteinThinning` (thinned data, indices, KSD path) instead of
        the thinned data alone.
    missing_mass : {"auto", True, False} or a missing-mass search result, default "auto"
        Whether to look for mass the chains never visited, as in
        :func:`steindiag.stein_weights` (``"auto"``: when log p and the score can be
        evaluated at new points, i.e. a PyMC model or callables).
    rng : numpy.random.Generator or int, optional
        Randomness of the missing-mass search (None: fresh entropy).
    progress : bool or None, default None
        Progress bar of the greedy selection on stderr (tqdm if installed). None: only
        when interactive and the selection is expected to take more than a few seconds.
        Ctrl-C stops it between steps of about 0.25 s of work; no thread is left
        running."""


def stein_thin(data, model=None, *, n_points, score=None, batched=True, kernel="imq", c=None,
               beta=None, preconditioner="standardize", group="posterior", var_names=None,
               coords=None, sample_dims=None, space=None, regularized=False, log_density=None,
               strength=None, return_info=False, missing_mass="auto", rng=None,
               compile_mode=None, progress=None):
    """Select ``n_points`` draws that greedily minimise the KSD (Stein thinning).

    Parameters
    ----------
{params}

    Returns
    -------
    Same type as ``data`` (or :class:`SteinThinning` if ``return_info``)
        A trace (InferenceData, DataTree or Dataset) keeps every group; groups with
        both sample dims hold the selected draws as one chain (``chain = [0]``,
        ``draw = 0 .. n_points - 1``) with coordinates ``source_chain`` and
        ``source_draw`` (dim ``draw``) naming where each came from; the ``group``'s
        attrs add ``stein_thinning_ksd`` and the kernel and thinning settings. A
        DataArray gives a DataArray of the selected draws in the same form. An
        array returns an array of the selected draws, shape (1, n_points, d) for a
        (chain, draw, d) input and (n_points, d) for a (draw, d) input.

        The selected points are a set, not a Markov chain: they are laid out as one
        "chain" so that every tool can read them, but R-hat, ESS and MCSE assume a
        chain (``arviz.summary`` reports R-hat as NaN for one chain, and its ESS
        treats the selection order as time). Read their means, sds and quantiles; the
        group's attrs say so (``stein_thinning_layout``). The attrs also record the
        checks (``stein_thinning_correction_warnings``,
        ``stein_thinning_sampler_divergences``, ``stein_thinning_missing_mass``,
        ``stein_thinning_ksd_far_threshold``, ... as in :func:`steindiag.stein_weights`).

    Warns
    -----
    CorrectionWarning (a UserWarning)
        The thinned points cannot be trusted: divergent transitions in the trace's
        ``sample_stats``, unvisited mass found, or the KSD of the thinned points far
        above the floor of as many exact independent draws (defined as in
        :func:`steindiag.stein_weights`). The message names the cause.

    Raises
    ------
    ValueError
        ``n_points`` <= 0 or larger than the number of draws; ``regularized=True``
        without log p or without a score function.

    Notes
    -----
    Thinning selects among the draws: like weights, it cannot put mass where the
    sampler never went. On centred eight schools (4 x 1000 NUTS draws with
    divergences; benchmarks/bench_corrections.py) {eight_schools}

    Riabiz et al. (2022): pi_1 = argmin_i k_p(x_i, x_i) and

        pi_t = argmin_i [ k_p(x_i, x_i) + 2 sum_(j<t) k_p(x_(pi_j), x_i) ],

    i.e. each step adds the draw that most decreases the KSD of the selected set.
    Running sums make it O(N n_points) kernel evaluations and O(N) memory.
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
    >>> steindiag.stein_thin(x, score=-x, n_points=20).shape
    (1, 20, 2)
    >>> info = steindiag.stein_thin(x, score=-x, n_points=20, return_info=True)
    >>> info.ksd_path.shape, bool(info.ksd > 0)
    ((20,), True)
    """
    kernel = make_kernel(kernel, c, beta)
    # A sampler's own object (emcee, Stan) brings its log p and score, as a model does.
    _thin_iv(n_points, regularized, strength, log_density, return_info, score,
             data if model is None and is_ecosystem_input(data) else model)
    check_missing_mass_option(missing_mass)
    rng = check_rng(rng)
    check_progress(progress)
    check_preconditioner(preconditioner)
    data = as_trace(data, model)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    data, model, score, log_density, batched = as_plain_sources(
        pending, data, model, score, log_density, batched)
    # A numpyro MCMC or a JAX log density: its trace, score and log p from here on.
    data, model, score, log_density, sample_dims = pending.resolve(
        data, model, score, log_density, sample_dims)
    _regularized_sources_iv(regularized, log_density, score, model)
    n_chain, n_draw, d = pending.draws.shape
    n_total = n_chain * n_draw
    if n_points > n_total:
        raise ValueError(
            f"n_points must be at most the number of draws ({n_chain} chains x {n_draw} "
            f"draws = {n_total}); got n_points={n_points}."
        )
    if regularized:
        check_log_density(log_density, n_chain, n_draw)
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    prepared = pending.with_scores()
    draws_flat = prepared.draws.reshape(-1, d)
    scores_flat = prepared.scores.reshape(-1, d)
    points = KernelPoints(draws_flat, scores_flat, pre, kernel)
    objective = points.diagonal.copy()
    step_penalty = np.zeros(n_total)
    thinning_attrs = {"stein_thinning": "regularized" if regularized else "greedy",
                      "stein_thinning_n_points": int(n_points)}
    if regularized:
        lam = 1.0 / n_points if strength is None else float(strength)
        mode = compile_mode
        log_p = log_density_values(log_density, model, prepared.draws, batched=batched,
                                   chain=prepared.chain, draw=prepared.draw,
                                   mode=mode).reshape(-1)
        score_fn = score_function(score, model, batched=batched, mode=mode)
        laplacian = laplacian_correction(score_fn, draws_flat, pre, kernel)
        objective += laplacian - lam * log_p
        step_penalty = -lam * log_p
        thinning_attrs["stein_thinning_strength"] = lam
    pairs = n_points * n_total
    with progress_bar(progress, n_points, pairs * (8 * d + 22) / CONSERVATIVE_FLOPS,
                      desc="stein_thin (greedy selection)", unit="point") as bar:
        selected = greedy_select(points, objective, step_penalty, n_points, bar)
    chain_pos, draw_pos = np.divmod(selected, n_draw)
    # KSD of every prefix of the selection, with the same kernel and preconditioner.
    selected_points = points.subset(selected)
    ksd_path = prefix_ksd(selected_points)
    checks = check_correction(
        data=data, group=group, sample_dims=sample_dims, prepared=prepared, model=model,
        score=score, log_density=log_density if callable(log_density) else None,
        batched=batched, kernel=kernel, preconditioner=pre,
        missing_mass=missing_mass, rng=rng, compile_mode=compile_mode,
        ksd_checks=[(selected_points, float(ksd_path[-1]), "thinned points'")],
    )
    attrs = {
        **thinning_attrs,
        "stein_thinning_layout": _LAYOUT_NOTE,
        **{f"stein_thinning_{key}": value for key, value in checks.attrs().items()},
        "stein_thinning_ksd": float(ksd_path[-1]),
        "stein_thinning_source_n_chain": n_chain,
        "stein_thinning_source_n_draw": n_draw,
    }
    for key, value in kernel_attrs(prepared, pre, kernel).items():
        if key not in ("n_chain", "n_draw"):
            attrs[f"stein_thinning_{key}"] = value
    attrs = netcdf_attrs(attrs)
    if is_labelled(data):
        dims = ("chain", "draw") if sample_dims is None else tuple(sample_dims)
        if len(dims) == 1:
            dims = ("chain", dims[0])
        thinned = _thinned_container(
            data, np.asarray(prepared.chain)[chain_pos], np.asarray(prepared.draw)[draw_pos],
            dims, group, attrs,
        )
    else:
        array = np.asarray(data)
        layout = array_sample_dims(sample_dims)
        thinned = apply_layout(array, layout)[chain_pos, draw_pos]     # (n_points, d)
        if array.ndim == 1:
            thinned = thinned[:, 0]
        elif layout not in (None, ("draw",)) or array.ndim == 3:
            thinned = thinned[None]                   # a chain axis in, (1, n_points, d) out
    checks.warn("stein_thin")
    if not return_info:
        return thinned
    return SteinThinning(
        thinned=thinned,
        chain=np.asarray(prepared.chain)[chain_pos],
        draw=np.asarray(prepared.draw)[draw_pos],
        index=selected,
        ksd=float(ksd_path[-1]),
        ksd_path=ksd_path,
        attrs=attrs,
    )


_LAYOUT_NOTE = (
    "a set of selected points laid out as one chain, not a Markov chain: R-hat, ESS and "
    "MCSE do not apply (arviz.summary reports R-hat as NaN for one chain)"
)

_EIGHT_SCHOOLS = (
    "200 thinned points hold no draw with tau < 1 (truth: P(tau < 1) = 0.20; the draws: "
    "0.05) and have mean tau 8.3 (regularised: 6.4) against 3.6 in a long non-centred run "
    "and 4.1 in the draws."
)

stein_thin.__doc__ = stein_thin.__doc__.format(params=_THIN_PARAMETERS,
                                               eight_schools=_EIGHT_SCHOOLS)
