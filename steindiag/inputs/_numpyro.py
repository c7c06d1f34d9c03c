"""numpyro: an ``MCMC`` object after ``.run(...)`` (or its ArviZ trace with ``model=mcmc``).

Data flow::

    mcmc (after run) | az.from_numpyro(mcmc) with model=mcmc
      -> the model's latent sample sites (never deterministic or observed sites), their
         constrained values (mcmc.get_samples, or the trace's posterior group)
      -> numpyro's own transforms (numpyro.infer.util.unconstrain_fn): unconstrained
         values, one xarray variable per site, dims as ArviZ names them (plate names)
      -> read as any trace (labels ``mu``, ``theta[0]``, or the trace's coordinates)
      -> scores and log p from -potential_energy (log p of the unconstrained vector,
         log-Jacobian included) by jax.jit(jax.vmap(jax.grad(...))) in float64
      + the divergences (mcmc.get_extra_fields()['diverging']) in a ``sample_stats`` group

numpyro and JAX are imported only here, only when an ``MCMC`` is given.
"""

import warnings

import numpy as np
import xarray as xr

from steindiag._containers import container_kind, get_group, group_names
from steindiag.inputs._jax import (JaxTarget, check_no_compile_mode, derived_input, in_chunks,
                                   require_jax, split_blocks, x64)
from steindiag.inputs._trace import read_labelled

__all__ = ["is_numpyro_mcmc", "read_numpyro", "numpyro_trace", "as_numpyro_trace"]


def is_numpyro_mcmc(value):
    """True for a ``numpyro.infer.MCMC`` (decided from its type; nothing imported)."""
    module = type(value).__module__ or ""
    return module.startswith("numpyro") and type(value).__name__ == "MCMC"


def _mcmc_iv(mcmc):
    """The model, its arguments and the samples of a run ``MCMC``; errors say what to do."""
    if getattr(mcmc, "_states", None) is None:
        raise ValueError(
            "the numpyro MCMC has not been run: it holds no draws. Call "
            "mcmc.run(rng_key, *model_args) first, then pass the MCMC."
        )
    model = getattr(mcmc.sampler, "model", None)
    if model is None:
        raise TypeError(
            f"the numpyro MCMC's sampler ({type(mcmc.sampler).__name__}) was built from a "
            "potential_fn, not a model, so its sites and transforms are unknown. Pass the "
            "unconstrained draws as a (chain, draw, d) array with log_density= (a JAX "
            "function of one draw) instead."
        )
    args = tuple(getattr(mcmc, "_args", ()) or ())
    kwargs = dict(getattr(mcmc, "_kwargs", {}) or {})
    return model, args, kwargs


def _model_sites(model, args, kwargs, samples):
    """The model's sites (numpyro's trace), run once at the first draw."""
    from numpyro.handlers import seed, substitute, trace

    first = {name: np.asarray(value)[0, 0] for name, value in samples.items()}
    with x64():
        return trace(substitute(seed(model, 0), data=first)).get_trace(*args, **kwargs)


def _latent_sites(sites, samples):
    """{name: site} of the latent sample sites, in the order of ``samples`` (ArviZ's)."""
    latent = {name: site for name, site in sites.items()
              if site["type"] == "sample" and not site["is_observed"]
              and not site.get("infer", {}).get("is_auxiliary", False)}
    discrete = [name for name, site in latent.items()
                if getattr(site["fn"], "support", None) is not None
                and site["fn"].support.is_discrete]
    if discrete:
        raise ValueError(
            f"the numpyro model has discrete latent site(s) {discrete}: they have no score "
            "(grad log p), so KSD does not apply to them. Marginalise them out (numpyro's "
            "enumeration) or pass the continuous draws as an array with their score."
        )
    missing = [name for name in latent if name not in samples]
    if missing:
        raise ValueError(
            f"the MCMC's samples have no values for the latent site(s) {missing} (they were "
            "left out of the collected fields); the score needs every latent site."
        )
    order = [name for name in samples if name in latent]
    return {name: latent[name] for name in order}


def _site_dims(name, site, shape):
    """Dims of a site's per-draw ``shape`` as ArviZ's from_numpyro names them.

    A batch axis inside a named plate takes the plate's name; any other axis
    ``{name}_dim_{k}``.
    """
    dims = [f"{name}_dim_{k}" for k in range(len(shape))]
    for frame in site.get("cond_indep_stack", ()):
        axis = len(shape) + frame.dim - site["fn"].event_dim
        if 0 <= axis < len(shape) and frame.size == shape[axis] and frame.name:
            dims[axis] = frame.name
    return dims


def numpyro_trace(mcmc, samples, sites):
    """An ``xarray.DataTree`` of a run MCMC, as ``az.from_numpyro`` lays it out.

    ``posterior``: every sample and deterministic site of ``mcmc.get_samples``
    (constrained), dims named by plates; ``sample_stats``: ``diverging`` when collected.
    Used for the results that follow the input's type and for the sampler's warnings.
    """
    posterior = {}
    for name, value in samples.items():
        values = np.asarray(value)
        site = sites.get(name)
        shape = values.shape[2:]
        dims = (_site_dims(name, site, shape) if site is not None and "fn" in site
                else [f"{name}_dim_{k}" for k in range(len(shape))])
        posterior[name] = (("chain", "draw", *dims), values)
    n_chain, n_draw = next(iter(posterior.values()))[1].shape[:2]
    coords = {"chain": np.arange(n_chain), "draw": np.arange(n_draw)}
    attrs = {"inference_library": "numpyro"}
    groups = {"posterior": xr.Dataset(posterior, coords=coords, attrs=attrs)}
    extra = mcmc.get_extra_fields(group_by_chain=True)
    if "diverging" in extra:
        groups["sample_stats"] = xr.Dataset(
            {"diverging": (("chain", "draw"), np.asarray(extra["diverging"], dtype=bool))},
            coords=coords, attrs=attrs)
    return xr.DataTree.from_dict(groups)


def as_numpyro_trace(data):
    """A run numpyro MCMC as its ``numpyro_trace``; any other ``data`` as it is.

    For the functions that read a trace's constrained values, not its scores
    (``weighted_summary``).
    """
    if not is_numpyro_mcmc(data):
        return data
    model, args, kwargs = _mcmc_iv(data)
    samples = data.get_samples(group_by_chain=True)
    return numpyro_trace(data, samples, _model_sites(model, args, kwargs, samples))


def _trace_posterior(trace, group, mcmc_samples):
    """The constrained draws to read: the trace's ``group`` (with ``model=mcmc``)."""
    kind = container_kind(trace)
    if kind == "dataset":
        return trace
    if kind == "datatree" and not trace.children and trace.has_data:
        return trace.to_dataset()
    if kind is None:
        raise TypeError(
            "with model= a numpyro MCMC, data must be its trace (az.from_numpyro(mcmc): an "
            "InferenceData or DataTree, or its posterior Dataset), or the MCMC itself; got "
            f"{type(trace).__name__}."
        )
    posterior = get_group(trace, group)
    if posterior is None:
        raise ValueError(f"data has no group {group!r}; its groups are {group_names(trace)}.")
    return posterior


def _unconstrain(model, args, kwargs, constrained, n):
    """Unconstrained values {name: (n, ...)} of constrained (n, ...) values, in chunks."""
    import jax
    from numpyro.infer.util import unconstrain_fn

    with x64():
        transform = jax.jit(jax.vmap(lambda params: unconstrain_fn(model, args, kwargs,
                                                                   params)))
    return in_chunks(transform, constrained, n)


def read_numpyro(data, model, *, score, log_density, group, var_names, coords, sample_dims,
                 space, need_score, compile_mode, batched=True):
    """The ``PendingInput`` of a run numpyro MCMC (``data``, or ``model`` with its trace)."""
    require_jax()
    if score is not None or log_density is not None:
        raise TypeError(
            "with a numpyro MCMC, the score and log p come from the model's "
            "potential_energy: score= and log_density= must be None (got "
            f"{'score' if score is not None else 'log_density'})."
        )
    check_no_compile_mode(compile_mode)
    mcmc = data if is_numpyro_mcmc(data) else model
    if is_numpyro_mcmc(data) and model is not None:
        raise TypeError(
            "data is a numpyro MCMC, which carries its own model: model must be None (got "
            f"{type(model).__name__})."
        )
    if var_names is not None:
        raise ValueError(
            "var_names cannot be used with a numpyro MCMC: the score (numpyro's "
            "potential_energy) involves all latent sites together; got "
            f"var_names={var_names!r}."
        )
    if space not in (None, "unconstrained"):
        raise ValueError(
            "with a numpyro MCMC, draws and scores are in numpyro's unconstrained space "
            f"(its transforms, log-Jacobian included); space={space!r} cannot be used."
        )
    if sample_dims is not None and tuple(np.atleast_1d(sample_dims)) != ("chain", "draw"):
        raise ValueError(
            "a numpyro MCMC's draws are (chain, draw, ...): sample_dims must be None or "
            f"('chain', 'draw'); got {sample_dims!r}."
        )
    numpyro_model, args, kwargs = _mcmc_iv(mcmc)
    samples = mcmc.get_samples(group_by_chain=True)
    all_sites = _model_sites(numpyro_model, args, kwargs, samples)
    sites = _latent_sites(all_sites, samples)
    if is_numpyro_mcmc(data):
        container = numpyro_trace(mcmc, samples, all_sites)
        posterior = container["posterior"].to_dataset()
    else:
        container = data
        posterior = _trace_posterior(data, group, samples)
    absent = [name for name in sites if name not in posterior.data_vars]
    if absent:
        raise ValueError(
            f"the trace has no values for the numpyro model's latent site(s) {absent}; it "
            f"has {list(posterior.data_vars)}. Is it the trace of this MCMC?"
        )
    other = [dim for dim in (coords or {}) if dim not in ("chain", "draw")]
    if other:
        raise ValueError(
            f"coords selects along {other}, but the score of a numpyro model involves "
            "every element of every latent site: coords can select along ['chain', "
            "'draw'] only (e.g. coords={'draw': slice(100, None)})."
        )
    unconstrained = _unconstrained_dataset(numpyro_model, args, kwargs, sites, posterior)
    names = list(sites)
    shapes = [unconstrained[name].shape[2:] for name in names]
    target = None
    if need_score:
        target = JaxTarget(_log_density(numpyro_model, args, kwargs, names, shapes),
                           _identity, int(sum(int(np.prod(s, dtype=np.int64)) for s in shapes)),
                           name="numpyro's potential_energy")
        # Methods that move the draws (SVGD) give back the sites' constrained values.
        target.constrain = _constrain_function(numpyro_model, args, kwargs, names, shapes)
    with warnings.catch_warnings():
        # The values were mapped to the unconstrained space here, by numpyro's own
        # transforms: a site named like a scale (sigma) whose log is positive in every
        # draw is not a constrained value stored by mistake.
        warnings.filterwarnings("ignore", message="the draws are said to be 'unconstrained'",
                                category=UserWarning)
        pending = read_labelled(
            unconstrained, None, score=None if target is None else target.score,
            group=group, var_names=names, coords=coords, sample_dims=("chain", "draw"),
            space="unconstrained", need_score=need_score,
        )
    transforms = [_transform_name(site) for site in sites.values()]
    attrs = {"latent_sites": names, "transforms": transforms,
             "log_density": "-potential_energy (numpyro, log-Jacobian included)",
             "unconstrained_from": "numpyro.infer.util.unconstrain_fn"}
    return derived_input(pending, target=target, container=container, source="numpyro",
                         attrs=attrs, group=group, coords=coords, sample_dims=sample_dims)


def _transform_name(site):
    from numpyro.distributions.transforms import biject_to

    try:
        return type(biject_to(site["fn"].support)).__name__
    except NotImplementedError:
        return "none"


def _unconstrained_dataset(model, args, kwargs, sites, posterior):
    """Dataset of the latent sites' unconstrained values, (chain, draw, ...) each.

    A site whose unconstrained value keeps the constrained shape keeps the trace's dims
    and coordinates (labels ``theta[Choate]``); one whose shape changes (a simplex has
    one entry fewer) gets positional dims ``{name}_unconstrained_dim_{k}``.
    """
    constrained, shapes = {}, {}
    for name in sites:
        values = posterior[name].transpose("chain", "draw", ...)
        shapes[name] = values.shape
        constrained[name] = np.asarray(values.values).reshape(-1, *values.shape[2:])
    n_chain, n_draw = next(iter(shapes.values()))[:2]
    unconstrained = _unconstrain(model, args, kwargs, constrained, n_chain * n_draw)
    variables, coords = {}, {"chain": posterior["chain"].values if "chain" in posterior.coords
                             else np.arange(n_chain),
                             "draw": posterior["draw"].values if "draw" in posterior.coords
                             else np.arange(n_draw)}
    for name in sites:
        values = unconstrained[name].reshape(n_chain, n_draw, *unconstrained[name].shape[1:])
        stored = posterior[name].transpose("chain", "draw", ...)
        if values.shape == stored.shape:
            dims = stored.dims
            for dim in dims[2:]:
                if dim in stored.coords:
                    coords[dim] = stored[dim].values
        else:
            dims = ("chain", "draw",
                    *(f"{name}_unconstrained_dim_{k}" for k in range(values.ndim - 2)))
        variables[name] = (dims, values)
    return xr.Dataset(variables, coords=coords)


def _unflatten(names, shapes):
    """flat vector -> {site: its block, reshaped}: sites in ``names`` order, C order."""
    split = split_blocks(shapes)
    return lambda flat: dict(zip(names, split(flat)))


def _log_density(model, args, kwargs, names, shapes):
    """log p of the flat unconstrained vector: -potential_energy, sites in ``names`` order."""
    from numpyro.infer.util import potential_energy

    unflatten = _unflatten(names, shapes)

    def log_density(flat):
        return -potential_energy(model, args, kwargs, unflatten(flat))

    return log_density


def _constrain_function(model, args, kwargs, names, shapes):
    """(n, d) flat unconstrained vectors -> {site: constrained values (n, ...)}: the latent
    sites and the deterministic ones, by numpyro's own transforms (``constrain_fn``)."""
    import jax
    from numpyro.infer.util import constrain_fn

    unflatten = _unflatten(names, shapes)

    def one(flat):
        return constrain_fn(model, args, kwargs, unflatten(flat), return_deterministic=True)

    transform = []

    def constrain(points):
        points = np.asarray(points, dtype=np.float64)
        with x64():
            if not transform:
                transform.append(jax.jit(jax.vmap(one)))
        return in_chunks(transform[0], points, points.shape[0])

    return constrain


def _identity(flat):
    return flat
