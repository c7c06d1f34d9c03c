"""Stein variational gradient descent (SVGD): move draws towards the target.

Data flow: input (arrays | InferenceData | DataTree | Dataset) -> ``SteinInput``
(``steindiag.inputs``: draws in the space where the score is defined, for a PyMC model
the unconstrained one) -> optional per-coordinate standardisation fixed from the initial
draws -> ``methods.variational.svgd_loop``, repeating: score at the particles (PyMC
batched graph or the callable), median bandwidth, ``engine.svgd.kernel_vector_sums``
(O(N^2 d), O(N d) memory), AdaGrad step, KSD of the particles
(``engine.local.stein_row_sums``) -> the moved draws in the input's type, with the KSD
of every step, as a :class:`SteinVariational`.
"""

import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from steindiag._corrections import CorrectionWarning
from steindiag.engine import svgd as _svgd_kernels
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.engine.progress import make_progress
from steindiag.inputs import as_trace, is_labelled, read_input, score_function
from steindiag.inputs._ecosystems import as_plain_sources, is_ecosystem_input
from steindiag.inputs._jax import is_jax_input
from steindiag.inputs._labels import provenance
from steindiag.methods.variational import (
    ADAGRAD_ALPHA, ADAGRAD_FUDGE, step_sizes, svgd_loop, threads_for,
)

__all__ = ["stein_variational", "SteinVariational"]

_KERNELS = {"rbf": _svgd_kernels.RBF, "imq": _svgd_kernels.IMQ}
_KERNEL_FORMULAS = {
    "rbf": "k(x, y) = exp(-|x - y|^2 / h)",
    "imq": "k(x, y) = (1 + |x - y|^2 / h)^(-1/2)",
}
# Groups of a trace that do not depend on the posterior draws: kept as they are.
_KEPT_GROUPS = ("observed_data", "constant_data", "prior", "prior_predictive")
# Rough cost of one pair of the SVGD sum and of the KSD pass, for the progress bar.
_CONSERVATIVE_FLOPS = 1e10


@dataclass(kw_only=True, repr=False)
class SteinVariational:
    """Result of :func:`stein_variational`.

    Attributes
    ----------
    draws : same type as the input
        The moved draws: an array of the input's shape, or a trace of the input's type
        whose ``group`` holds them (see :func:`stein_variational`, Returns).
    ksd : xarray.DataArray (step)
        KSD (sqrt of the V-statistic, all particles pooled) of the particles before the
        first step (``step = 0``) and after the steps given by the coordinate ``step``.
        IMQ Stein kernel with ``c = 1``, ``beta = -1/2`` and the preconditioner fixed
        from the initial draws (attrs), as :func:`steindiag.ksd` reports it.
    ksd_iid : xarray.DataArray (step)
        The i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N) at the same steps: what N exact
        independent draws would reach. SVGD particles interact and can go below it.
    bandwidth : xarray.DataArray (step)
        Kernel bandwidth h used by each update (``step`` = 0 .. n_steps - 1), in the
        coordinates SVGD works in (standardised ones if ``standardize=True``).
    attrs : dict
        Settings (kernel, step size, AdaGrad constants, scales, space, sizes) and
        ``ksd_initial``, ``ksd_final``, ``improved`` (1 if the final KSD is below the
        initial one, else 0).

    ``ksd_initial``, ``ksd_final`` and ``improved`` are also properties. Printing the
    result gives a short summary.
    """

    draws: object
    ksd: xr.DataArray
    ksd_iid: xr.DataArray
    bandwidth: xr.DataArray
    attrs: dict = field(default_factory=dict)

    @property
    def ksd_initial(self):
        """KSD of the draws given (step 0)."""
        return float(self.ksd.values[0])

    @property
    def ksd_final(self):
        """KSD of the particles returned (the best recorded step with ``keep="best"``)."""
        return float(self.attrs.get("ksd_final", self.ksd.values[-1]))

    @property
    def improved(self):
        """True if SVGD lowered the KSD of the particles."""
        return self.ksd_final < self.ksd_initial

    def __repr__(self):
        attrs = self.attrs
        verdict = ("lower than the draws given" if self.improved
                   else "NOT lower than the draws given: the particles fit worse")
        decay = attrs.get("svgd_step_decay", "none")
        lines = [
            f"SteinVariational: {attrs.get('svgd_n_particles', '?')} particles x "
            f"{len(attrs.get('parameters', []))} parameters, {attrs.get('svgd_n_steps', '?')} "
            f"SVGD steps (kernel {attrs.get('svgd_kernel', '?')}, step size "
            f"{attrs.get('svgd_step_size', float('nan')):g}, step decay {decay})",
            f"  KSD {self.ksd_initial:.4g} -> {self.ksd_final:.4g} ({verdict}; particles of "
            f"step {attrs.get('svgd_returned_step', '?')}, keep={attrs.get('svgd_keep', '?')!r});"
            f" i.i.d. floor {float(self.ksd_iid.values[-1]):.4g}",
            f"  draws: {type(self.draws).__name__}; also ksd, ksd_iid, bandwidth (step), attrs",
        ]
        return "\n".join(lines)


def _svgd_iv(score, n_steps, step_size, kernel, bandwidth, standardize, ksd_every, method,
             progress, step_decay=None, keep="best"):
    if score is not None and not callable(score):
        raise TypeError(
            "score must be a callable (or None with a PyMC model): SVGD moves the draws, so "
            "the score is evaluated again at every step and an array of scores at the "
            f"initial draws cannot be used; got {type(score).__name__}."
        )
    for name, value, low in (("n_steps", n_steps, 1), ("ksd_every", ksd_every, 1)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer; got {type(value).__name__}.")
        if value < low:
            raise ValueError(f"{name} must be >= {low}; got {name}={value}.")
    if isinstance(step_size, bool) or not isinstance(step_size, numbers.Real):
        raise TypeError(f"step_size must be a real number; got {type(step_size).__name__}.")
    if not (np.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be a finite number > 0; got step_size={step_size}.")
    if step_decay is not None:
        if isinstance(step_decay, bool) or not isinstance(step_decay, numbers.Real):
            raise TypeError(
                f"step_decay must be None or a real number >= 1; got {type(step_decay).__name__}."
            )
        if not (np.isfinite(step_decay) and step_decay >= 1):
            raise ValueError(f"step_decay must be None or a finite number >= 1; got {step_decay}.")
    if kernel not in _KERNELS:
        raise ValueError(f"kernel must be one of {sorted(_KERNELS)}; got {kernel!r}.")
    if keep not in ("best", "last"):
        raise ValueError(f"keep must be 'best' or 'last'; got {keep!r}.")
    if isinstance(bandwidth, str):
        if bandwidth != "median":
            raise ValueError(
                f"bandwidth must be 'median' or a number > 0; got {bandwidth!r}."
            )
    elif isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real):
        raise TypeError(
            f"bandwidth must be 'median' or a number > 0; got {type(bandwidth).__name__}."
        )
    elif not (np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be 'median' or a finite number > 0; got {bandwidth}.")
    if not isinstance(standardize, (bool, np.bool_)):
        raise TypeError(f"standardize must be True or False; got {standardize!r}.")
    if method not in ("auto", *_svgd_kernels.METHODS):
        raise ValueError(
            f"method must be one of {['auto', *_svgd_kernels.METHODS]}; got {method!r}."
        )
    if progress not in (None, True, False):
        raise TypeError(f"progress must be None, True or False; got {progress!r}.")


# -- output in the input's type ---------------------------------------------------------


def _netcdf(value):
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    return value


def _posterior_for_output(data, group, coords, sample_dims):
    """The group as the input layer saw it: selected by coords, with (chain, draw) dims."""
    from steindiag.inputs._trace import _container_kind, _get_group, _select, _with_sample_dims

    kind = _container_kind(data)
    if kind == "dataset":
        posterior = data
    elif kind == "datatree" and not data.children and data.has_data:
        posterior = data.to_dataset()
    else:
        posterior = _get_group(data, group)
    posterior = _select(posterior, coords, f"group {group!r}")
    return _with_sample_dims(posterior, sample_dims, f"group {group!r}")


def _model_posterior(model, posterior, pair, moved, prepared):
    """Constrained free variables, deterministics and value variables at the moved draws."""
    from steindiag.inputs import _pymc
    from steindiag.inputs._pymc_values import constrained_values

    layout = _pymc.model_layout(model)
    n_chain, n_draw, d = moved.shape
    flat = moved.reshape(-1, d)
    free = {var.name: var for var in layout}
    deterministics = {det.name for det in model.deterministics}
    wanted, kept, dropped = [], {}, []
    for name in posterior.data_vars:
        array = posterior[name].transpose(*pair, ...)
        if name in free or name in deterministics:
            dims = None
            source = free[name].rv if name in free else next(
                det for det in model.deterministics if det.name == name)
            if _pymc._is_xtensor(source):
                dims = tuple(array.dims[2:])
            wanted.append((name, tuple(array.shape[2:]), dims))
            kept[name] = array
        elif name not in {var.value_name for var in layout}:
            dropped.append(name)
    values = constrained_values(model, layout, flat, wanted)
    out = {}
    for name, array in kept.items():
        out[name] = array.copy(data=values[name].reshape(n_chain, n_draw, *array.shape[2:]))
    # The value variables: the draws SVGD moved, as pm.sample(include_transformed=True)
    # stores them; steindiag.ksd reads them from here.
    start = 0
    for var in layout:
        block = flat[:, start : start + var.size].reshape(n_chain, n_draw, *var.value_shape)
        start += var.size
        if var.transform_op is None and var.name in out:
            continue
        if var.name in out and tuple(out[var.name].shape[2:]) == tuple(var.value_shape):
            dims = out[var.name].dims
            coords = {dim: out[var.name][dim] for dim in dims if dim in out[var.name].coords}
        else:
            dims = (*pair, *[f"{var.value_name}_dim_{i}" for i in range(len(var.value_shape))])
            coords = {dim: posterior[dim] for dim in pair if dim in posterior.coords}
        out[var.value_name] = xr.DataArray(block, dims=dims, coords=coords)
    return out, dropped


def _array_posterior(posterior, pair, moved, prepared):
    """The variables SVGD moved (``var_names`` order), written back in their shapes."""
    names = prepared.attrs.get("variables", list(posterior.data_vars))
    n_chain, n_draw, _ = moved.shape
    out, start = {}, 0
    for name in names:
        array = posterior[name].transpose(*pair, ...)
        width = int(np.prod(array.shape[2:], dtype=np.int64))
        block = moved[:, :, start : start + width]
        start += width
        out[name] = array.copy(data=block.reshape(n_chain, n_draw, *array.shape[2:]))
    dropped = [name for name in posterior.data_vars if name not in out]
    return out, dropped


def _constrained_posterior(posterior, pair, moved, constrain):
    """The variables of ``posterior`` at the moved draws, from ``constrain`` ((n, d) ->
    {name: (n, ...)}: a numpyro model's latent and deterministic sites, by its own
    transforms); the others are dropped."""
    n_chain, n_draw, d = moved.shape
    values = constrain(moved.reshape(-1, d))
    out, dropped = {}, []
    for name in posterior.data_vars:
        array = posterior[name].transpose(*pair, ...)
        if name in values and tuple(values[name].shape[1:]) == tuple(array.shape[2:]):
            out[name] = array.copy(data=values[name].reshape(n_chain, n_draw, *array.shape[2:]))
        else:
            dropped.append(name)
    return out, dropped


def _moved_container(data, model, moved, prepared, *, group, coords, sample_dims, attrs,
                     constrain=None):
    from steindiag.inputs._trace import _container_kind, _group_names, _get_group

    if isinstance(data, xr.DataArray):
        # One variable: moved as the one-variable Dataset the input layer read.
        name = data.name if data.name is not None else "x"
        moved_set = _moved_container(data.to_dataset(name=name), model, moved, prepared,
                                     group=group, coords=coords, sample_dims=sample_dims,
                                     attrs=attrs, constrain=constrain)
        out = moved_set[name]
        out.attrs = {**data.attrs, **moved_set.attrs}
        return out.rename(data.name)
    if sample_dims is None:
        sample_dims = ("chain", "draw")
    elif isinstance(sample_dims, str):
        sample_dims = (sample_dims,)
    posterior, pair = _posterior_for_output(data, group, coords, tuple(sample_dims))
    if model is not None:
        variables, dropped = _model_posterior(model, posterior, pair, moved, prepared)
    elif constrain is not None:
        variables, dropped = _constrained_posterior(posterior, pair, moved, constrain)
    else:
        variables, dropped = _array_posterior(posterior, pair, moved, prepared)
    if dropped:
        why = ("free variables or deterministics of the model"
               if model is not None or constrain is not None else "among var_names")
        warnings.warn(
            f"posterior variables {dropped} were not moved by SVGD (they are not {why}); "
            "they are left out of the result, whose draws no longer match theirs.",
            UserWarning,
            stacklevel=3,
        )
    new = xr.Dataset(variables, attrs={**posterior.attrs, **attrs})
    new.attrs["stein_variational_dropped_variables"] = list(dropped)
    if len(sample_dims) == 1:
        new = new.isel({pair[0]: 0}, drop=True)
    kind = _container_kind(data)
    if kind == "dataset":
        return new
    if kind == "datatree" and not data.children:
        return xr.DataTree(new, name=data.name)
    groups = _group_names(data)
    kept = {name: _get_group(data, name) for name in groups if name in _KEPT_GROUPS}
    dropped_groups = [name for name in groups if name not in _KEPT_GROUPS and name != group]
    new.attrs["stein_variational_dropped_groups"] = dropped_groups
    if kind == "datatree":
        nodes = {"/": xr.Dataset(attrs=dict(data.attrs)), f"/{group}": new}
        nodes.update({f"/{name}": dataset for name, dataset in kept.items()})
        return xr.DataTree.from_dict(nodes, name=data.name)
    import arviz as az

    return az.InferenceData(**{group: new, **kept})


_SVGD_PARAMETERS = """\
    data : array_like, xarray.DataTree, arviz.InferenceData, xarray.Dataset, or a sampler's object
        Initial draws (particles): an array (chain, draw, d) or (draw, d), or a trace
        (e.g. from ADVI, Pathfinder, unadjusted Langevin or SGLD), or a sampler's own
        object read as :func:`steindiag.ksd` reads it (a numpyro ``MCMC`` after
        ``.run``, positions given as a JAX pytree with ``log_density=``, an emcee
        ``EnsembleSampler``, a Stan fit with its model). All draws of all chains form
        one set of N = chain * draw interacting particles.
    model : pymc.Model or numpyro MCMC, optional
        The model of the trace: particles move in its unconstrained space (value
        variables) along grad of ``model.logp(jacobian=True)``, evaluated at every step
        by the model's batched score graph. A numpyro ``MCMC`` with its ArviZ trace:
        the score of numpyro's potential, by ``jax.grad``.
    compile_mode : str or pytensor.compile.mode.Mode, optional
        With ``model``: the PyTensor mode of the model's score graph (as in
        :func:`steindiag.ksd`).
    score : callable, optional
        grad log p instead of ``model``: a callable on the flat parameter vector (the
        space of the draws as given), evaluated at every step. An array of scores is
        an error: the draws move.
    log_density : callable, optional
        A JAX-traceable log p of one position (a flat vector, or a pytree shaped like
        the leaves of ``data``), with ``score=None`` and no model: the score is derived
        as ``jax.jit(jax.vmap(jax.grad(log_density)))`` in float64, as in
        :func:`steindiag.ksd`. Read for nothing else.
    n_steps : int, default 500
        Number of SVGD updates.
    step_size : float, default 0.01
        AdaGrad step size epsilon (see Notes) of the first step: about the distance a
        particle moves per step in each coordinate, in units of that coordinate's spread
        when ``standardize`` (the default), in the draws' own units otherwise.
    step_decay : float or None, default 10
        Anneal the step size geometrically, from ``step_size`` at the first step to
        ``step_size / step_decay`` at the last (None: constant). Late steps then move the
        particles less, so they settle instead of jittering at the scale of the step.
    keep : {"best", "last"}, default "best"
        Which particles to return: those of the recorded step (see ``ksd_every``) with
        the lowest KSD, the draws given included (step 0), or those after the last step.
        ``"best"`` never returns particles with a higher KSD than the draws given.
    kernel : {"rbf", "imq"}, default "imq"
        Base kernel of the update: ``"rbf"`` ``exp(-|x - y|^2 / h)`` (Liu & Wang 2016),
        ``"imq"`` ``(1 + |x - y|^2 / h)^(-1/2)``, which decays slowly and keeps pulling
        particles that are far from the others.
    bandwidth : "median" or float, default "median"
        h. ``"median"``: recomputed at every step as med^2 / log(N + 1), med^2 the
        median squared distance between distinct particles (as in the reference
        implementation, whose median also counts each particle's zero distance to
        itself; over the pairs of 500 evenly spaced particles when N > 500).
        A number: fixed h, in the coordinates SVGD works in.
    standardize : bool, default True
        Run SVGD in the coordinates z = x / scale, scale a robust spread of each
        coordinate of the initial draws (1.4826 times the median absolute deviation, as
        the ``"standardize"`` preconditioner of :func:`steindiag.ksd`), fixed for the
        whole run. The bandwidth and step size then do not depend on the units of each
        parameter. ``False`` runs the reference algorithm on x itself.
    ksd_every : int, default 1
        Compute the KSD of the particles every this many steps (and always after the
        last one); each costs about half an SVGD step.
    batched : bool, default True
        Whether a ``score`` callable takes an (n, d) batch (True) or one (d,) draw.
    group, var_names, coords, sample_dims
        As in :func:`steindiag.ksd`.
    method : {"auto", "fused", "gemm"}, default "auto"
        Path of the kernel sum: the same numbers to rounding.
    progress : bool or None, default None
        Progress bar on stderr (tqdm if installed). None: only when interactive and the
        run is expected to take more than a few seconds. Ctrl-C stops between steps, and
        within a step between calls of about 0.25 s of work."""


def stein_variational(data, model=None, *, score=None, n_steps=500, step_size=0.01,
                      kernel="imq", bandwidth="median", standardize=True, ksd_every=1,
                      batched=True, group="posterior", var_names=None, coords=None,
                      sample_dims=None, method="auto", progress=None, step_decay=10.0,
                      keep="best", compile_mode=None, log_density=None):
    """Move draws towards the target with Stein variational gradient descent (SVGD).

    Parameters
    ----------
{params}

    Returns
    -------
    SteinVariational
        ``draws``: the moved draws, of the input's type:

        - an array: the same shape as ``data``;
        - a trace (InferenceData, DataTree, Dataset): ``group`` is replaced by the moved
          draws with the same chain and draw coordinates (after ``coords``). With a
          PyMC ``model`` it holds, as ``pm.sample(idata_kwargs={{"include_transformed":
          True}})`` would, every free variable in its constrained space and the
          deterministics the trace holds, recomputed at the moved draws, plus the value
          variables (e.g.
          ``sigma_log__``): the unconstrained draws SVGD moved, which
          :func:`steindiag.ksd` reads back. Without a model, the moved variables
          (``var_names``) in their own shapes. Posterior variables that were not
          moved are dropped with a warning. Groups that do not depend on the draws
          (observed_data, constant_data, prior, prior_predictive) are kept; the others
          (sample_stats, log_likelihood, posterior_predictive, ...) describe the old
          draws and are dropped. The group's attrs record the SVGD settings, the KSD
          before and after, and what was dropped.

        ``ksd``, ``ksd_iid`` (step): the KSD curve and its i.i.d. floor; ``bandwidth``
        (step); ``attrs``; ``ksd_initial``, ``ksd_final`` (of the particles returned)
        and ``improved``. The chain and draw labels are kept for bookkeeping only:
        after SVGD the particles of one "chain" are not a Markov chain, and per-chain
        diagnostics (R-hat, ESS, per-chain KSD) no longer mean anything; read the pooled
        values.

    Raises
    ------
    TypeError
        ``score`` is an array (the draws move); no score source (``score``, a model, a
        JAX ``log_density`` or a sampler's object); ``log_density`` with a score or a
        model; wrong argument types.
    ValueError
        Invalid settings; particles or scores that become non-finite (a step size too
        large); most particles at one point with ``bandwidth="median"``.

    Warns
    -----
    CorrectionWarning (a UserWarning)
        When the final KSD is not below the initial one: the particles returned fit the
        target worse than the draws given (the warning names the step with the lowest
        KSD). The particles of the last step are returned all the same.
    UserWarning
        When posterior variables that SVGD did not move are dropped.

    Notes
    -----
    Liu & Wang (2016): the direction in the unit ball of the kernel's RKHS that
    decreases ``KL(q || p)`` fastest, estimated with the particles x_1..x_N, is

        phi(x_i) = (1/N) sum_j [ k(x_j, x_i) s(x_j) + grad_(x_j) k(x_j, x_i) ],

    s = grad log p: the first term pulls particles to high density, the second pushes
    them apart. The step is AdaGrad with momentum as in the reference implementation:
    G_0 = phi_0^2, G_t = alpha G_(t-1) + (1 - alpha) phi_t^2 (alpha = 0.9), and

        x_(t+1) = x_t + epsilon phi_t / (1e-6 + sqrt(G_t)),

    elementwise, so each coordinate moves by about ``step_size`` per step however large
    phi is. Each step costs one score evaluation at N particles and O(N^2 d) time for
    the kernel sum (plus about half that for the KSD), with O(N d) memory: the N x N
    kernel matrix is not stored (the median bandwidth uses the pairs of at most 500
    evenly spaced particles, 1 MB). See the Background page of the docs.

    The result is a set of particles, not independent draws: with N particles the
    error of a moment is often below the Monte Carlo error of N exact draws, but the
    bandwidth heuristic tends to under-disperse particles in high dimension (tens of
    parameters with a few hundred particles). Compare the KSD with its floor.

    Defaults: with epsilon_t = epsilon step_decay^(-t / (n_steps - 1)), the IMQ kernel,
    epsilon = 0.01, step_decay = 10 and 500 steps were chosen from measurements
    (``benchmarks/bench_svgd.py --tuning``, results in
    ``benchmarks/results/svgd_tuning.md``) on two PyMC cases of 1000 particles:
    {tuning} The former defaults (Gaussian kernel, constant step 0.01) raised the KSD on
    both. SVGD does not always help (radon, d = 89, gains little): the KSD is recorded at
    every step and ``keep="best"`` returns the particles with the lowest one, with a
    :class:`~steindiag.CorrectionWarning` when no step improved on the draws given.

    References
    ----------
    Liu, Q. & Wang, D. (2016), Stein variational gradient descent: a general purpose
    Bayesian inference algorithm, NeurIPS.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> rng = np.random.default_rng(0)
    >>> x = 0.5 + 2.0 * rng.standard_normal((200, 2))   # far from the N(0, I) target
    >>> res = steindiag.stein_variational(x, score=lambda z: -z, n_steps=300, step_size=0.05)
    >>> res.draws.shape, bool(res.ksd[-1] < res.ksd[0])
    ((200, 2), True)
    >>> bool(np.all(np.abs(res.draws.mean(axis=0)) < 0.1))
    True
    """
    _svgd_iv(score, n_steps, step_size, kernel, bandwidth, standardize, ksd_every, method,
             progress, step_decay, keep)
    jax_input = is_jax_input(data, model, score, log_density, is_labelled(data))
    if log_density is not None and not jax_input:
        raise TypeError(
            "stein_variational reads log_density= only to derive the score by jax.grad (a "
            "JAX-traceable log density, with score=None and no model): SVGD itself needs "
            "the score alone.")
    if score is None and model is None and not (jax_input or is_ecosystem_input(data)):
        raise TypeError(
            "SVGD evaluates the score at every step: pass score= (a callable), a PyMC "
            "model with a trace, a JAX log_density=, or a sampler's own object (numpyro "
            "MCMC, emcee, Stan) (gradients stored in a trace, e.g. by nutpie, are valid "
            "only at the stored draws)."
        )
    data = as_trace(data, model)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, compile_mode=compile_mode,
        log_density=log_density,
    )
    data, model, score, _, batched = as_plain_sources(pending, data, model, score, None,
                                                      batched)
    # A numpyro MCMC or a JAX log density: its trace and derived score from here on (a
    # batched function of flat vectors, evaluated at the particles at every step).
    if pending.container is not None:
        batched = True
    data, model, score, _, sample_dims = pending.resolve(data, model, score, log_density,
                                                         sample_dims)
    n_chain, n_draw, d = pending.draws.shape
    n = n_chain * n_draw
    try:
        ksd_pre = make_preconditioner("standardize", pending.draws.reshape(n, d),
                                      pending.parameter)
    except ValueError as err:
        raise ValueError(
            f"stein_variational needs initial draws that vary in every coordinate (their "
            f"spread fixes the scale of the KSD kernel and, with standardize=True, of the "
            f"SVGD step): {err}"
        ) from err
    prepared = pending.with_scores()
    score_fn = score_function(score, model, batched=batched, mode=compile_mode)
    draws = prepared.draws.reshape(n, d).copy()
    if prepared.attrs.get("score_source") == "nutpie":
        scores = score_fn(draws)
    else:
        scores = prepared.scores.reshape(n, d).copy()
    if standardize:
        scale = ksd_pre.scale
    else:
        scale = np.ones(d)

    record = sorted({*range(0, n_steps + 1, ksd_every), n_steps})
    pairs_per_step = n * n + n * n / 2 * len(record) / n_steps
    expected = n_steps * pairs_per_step * (8 * d + 30) / _CONSERVATIVE_FLOPS
    bar = make_progress(progress, n_steps * pairs_per_step, expected, desc="SVGD")
    try:
        with threads_for(n):
            particles, ksd_values, iid_values, bandwidths, best_step, best = svgd_loop(
                draws / scale, scores * scale, score_fn, scale, ksd_pre, n_steps=n_steps,
                step_size=step_sizes(step_size, step_decay, n_steps), kind=_KERNELS[kernel], bandwidth=bandwidth,
                method=method, record=record, bar=bar, pairs_per_step=pairs_per_step,
            )
    finally:
        if bar is not None:
            bar.close()

    record = np.asarray(record)
    returned_step = best_step if keep == "best" else n_steps
    if keep == "best":
        particles = best
    moved = (particles * scale).reshape(n_chain, n_draw, d)
    ksd_returned = float(ksd_values[list(record).index(returned_step)])
    ksd_attrs = {
        "kernel": "IMQ", "stein_operator": "Langevin", "c": 1.0, "beta": -0.5,
        **ksd_pre.attrs(),
        "preconditioner_fixed_from": "initial draws",
    }
    steps = record
    ksd = xr.DataArray(np.asarray(ksd_values), dims=("step",), coords={"step": steps},
                       name="ksd", attrs={"long_name": "KSD of the particles", **ksd_attrs})
    ksd_iid = xr.DataArray(np.asarray(iid_values), dims=("step",), coords={"step": steps},
                           name="ksd_iid",
                           attrs={"long_name": "i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N)"})
    bandwidth_da = xr.DataArray(
        bandwidths, dims=("step",), coords={"step": np.arange(n_steps)}, name="bandwidth",
        attrs={"long_name": "SVGD kernel bandwidth h",
               "coordinates": "standardised" if standardize else "as given"},
    )
    attrs = {
        "svgd_kernel": kernel,
        "svgd_kernel_formula": _KERNEL_FORMULAS[kernel],
        "svgd_bandwidth": bandwidth if isinstance(bandwidth, str) else float(bandwidth),
        "svgd_n_steps": int(n_steps),
        "svgd_step_size": float(step_size),
        "svgd_step_decay": "none" if step_decay is None else float(step_decay),
        "svgd_adagrad_alpha": ADAGRAD_ALPHA,
        "svgd_adagrad_fudge": ADAGRAD_FUDGE,
        "svgd_standardize": int(bool(standardize)),
        "svgd_scale": np.asarray(scale, dtype=float),
        "svgd_n_particles": int(n),
        "svgd_ksd_initial": float(ksd_values[0]),
        "svgd_ksd_final": ksd_returned,
        "svgd_ksd_last_step": float(ksd_values[-1]),
        "svgd_keep": keep,
        "svgd_returned_step": int(returned_step),
        "ksd_initial": float(ksd_values[0]),
        "ksd_final": ksd_returned,
        "ksd_last_step": float(ksd_values[-1]),
        "improved": int(ksd_returned < ksd_values[0]),
        "parameters": list(prepared.parameter),
        **provenance(prepared.attrs),
    }
    if is_labelled(data):
        container_attrs = {f"stein_variational_{key.removeprefix('svgd_')}": _netcdf(value)
                           for key, value in attrs.items() if key.startswith("svgd_")}
        container_attrs["stein_variational_space"] = attrs["space"]
        result_draws = _moved_container(
            data, model, moved, prepared, group=group, coords=coords,
            sample_dims=sample_dims, attrs=container_attrs,
            constrain=getattr(pending.target, "constrain", None),
        )
    else:
        result_draws = moved.reshape(np.shape(data))
    if keep == "best" and returned_step == 0:
        warnings.warn(
            f"stein_variational did not lower the KSD of the particles at any recorded step "
            f"(initial {ksd_values[0]:.4g}, after {n_steps} steps {ksd_values[-1]:.4g}, "
            f"lowest {min(ksd_values):.4g}): the draws given are returned unchanged. Try a "
            "smaller step_size or a larger step_decay (see result.ksd).",
            CorrectionWarning,
            stacklevel=2,
        )
    elif not ksd_returned < ksd_values[0]:
        lowest = int(np.argmin(ksd_values))
        warnings.warn(
            f"stein_variational raised the KSD of the particles from {ksd_values[0]:.4g} "
            f"to {ksd_returned:.4g} in {n_steps} steps: the particles returned fit the "
            f"target worse than the draws given (lowest KSD {ksd_values[lowest]:.4g} at step "
            f"{int(steps[lowest])}). Keep the draws given, use keep='best', or try a "
            "smaller step_size, step_decay=, fewer steps or kernel='imq' (see result.ksd).",
            CorrectionWarning,
            stacklevel=2,
        )
    return SteinVariational(draws=result_draws, ksd=ksd, ksd_iid=ksd_iid,
                            bandwidth=bandwidth_da, attrs=attrs)


_TUNING = (
    "ADVI draws of the varying-intercept radon model (d = 89): KSD 0.477 -> 0.452 (the "
    "lowest, at step 42; 0.466 after step 500); every 4th draw of a divergent centred "
    "eight-schools NUTS run (d = 10): 0.402 -> 0.220."
)

stein_variational.__doc__ = stein_variational.__doc__.format(params=_SVGD_PARAMETERS,
                                                             tuning=_TUNING)
