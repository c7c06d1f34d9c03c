"""Labelled result of ``stein_variational``: the moved draws in the input's type, and
:class:`SteinVariational` with the KSD of every recorded step."""

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from steindiag._attrs import provenance
from steindiag._containers import (container_kind, get_group, group_dataset, group_names, select,
                                   with_sample_dims)
from steindiag._validate import warn_user
from steindiag.methods.variational import (ADAGRAD_ALPHA, ADAGRAD_FUDGE, ADAM_BETA1,
                                           ADAM_BETA2, ADAM_FUDGE)

__all__ = ["SteinVariational", "KERNEL_FORMULAS", "moved_container", "settings_attrs",
           "svgd_result", "not_improved_message"]


KERNEL_FORMULAS = {
    "rbf": "k(x, y) = exp(-|x - y|^2 / h)",
    "imq": "k(x, y) = (1 + |x - y|^2 / h)^(-1/2)",
}
# Groups of a trace that do not depend on the posterior draws: kept as they are.
_KEPT_GROUPS = ("observed_data", "constant_data", "prior", "prior_predictive")
_COORDINATES_NAMES = {"hessian": "whitened by the estimated average Hessian",
                      "standardize": "standardised", "identity": "as given"}
_STEP_RULE_CONSTANTS = {
    "adam": {"svgd_adam_beta1": ADAM_BETA1, "svgd_adam_beta2": ADAM_BETA2,
             "svgd_adam_fudge": ADAM_FUDGE},
    "adagrad": {"svgd_adagrad_alpha": ADAGRAD_ALPHA, "svgd_adagrad_fudge": ADAGRAD_FUDGE},
}


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
        stop = {"converged": "stopped: converged", "max_steps": "stopped: maximum reached"}
        lines = [
            f"SteinVariational: {attrs.get('svgd_n_particles', '?')} particles x "
            f"{len(attrs.get('parameters', []))} parameters, {attrs.get('svgd_steps_run', '?')} "
            f"of at most {attrs.get('svgd_n_steps', '?')} SVGD steps "
            f"({stop.get(attrs.get('svgd_stop_reason'), '?')}; kernel "
            f"{attrs.get('svgd_kernel', '?')}, {attrs.get('svgd_step_rule', '?')} step "
            f"{attrs.get('svgd_step_size', float('nan')):g}, preconditioner "
            f"{attrs.get('svgd_preconditioner_used', '?')})",
            f"  KSD {self.ksd_initial:.4g} -> {self.ksd_final:.4g} ({verdict}; particles of "
            f"step {attrs.get('svgd_returned_step', '?')}, keep={attrs.get('svgd_keep', '?')!r});"
            f" i.i.d. floor {float(self.ksd_iid.values[-1]):.4g}",
            f"  draws: {type(self.draws).__name__}; also ksd, ksd_iid, bandwidth (step), attrs",
        ]
        return "\n".join(lines)


def _netcdf(value):
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    return value


def _posterior_for_output(data, group, coords, sample_dims):
    """The group as the input layer saw it: selected by coords, with (chain, draw) dims."""
    posterior = select(group_dataset(data, group), coords, f"group {group!r}")
    return with_sample_dims(posterior, sample_dims, f"group {group!r}")


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


def moved_container(data, source, moved, prepared, *, group, coords, sample_dims, attrs):
    """The moved draws in the input's container: its ``group`` holds them, in its own
    space (``source.constrained_variables`` maps them back for a model or a numpyro
    target; otherwise the variables read are the draws), with the groups that do not
    depend on the draws kept (``_KEPT_GROUPS``)."""
    if isinstance(data, xr.DataArray):
        # One variable: moved as the one-variable Dataset the input layer read.
        name = data.name if data.name is not None else "x"
        moved_set = moved_container(data.to_dataset(name=name), source, moved, prepared,
                                    group=group, coords=coords, sample_dims=sample_dims,
                                    attrs=attrs)
        out = moved_set[name]
        out.attrs = {**data.attrs, **moved_set.attrs}
        return out.rename(data.name)
    if sample_dims is None:
        sample_dims = ("chain", "draw")
    elif isinstance(sample_dims, str):
        sample_dims = (sample_dims,)
    posterior, pair = _posterior_for_output(data, group, coords, tuple(sample_dims))
    mapped = source.constrained_variables(posterior, pair, moved)
    variables, dropped = (_array_posterior(posterior, pair, moved, prepared) if mapped is None
                          else mapped)
    if dropped:
        why = ("free variables or deterministics of the model" if mapped is not None
               else "among var_names")
        warn_user(
            f"posterior variables {dropped} were not moved by SVGD (they are not {why}); "
            "they are left out of the result, whose draws no longer match theirs.")
    new = xr.Dataset(variables, attrs={**posterior.attrs, **attrs})
    new.attrs["stein_variational_dropped_variables"] = list(dropped)
    if len(sample_dims) == 1:
        new = new.isel({pair[0]: 0}, drop=True)
    kind = container_kind(data)
    if kind == "dataset":
        return new
    if kind == "datatree" and not data.children:
        return xr.DataTree(new, name=data.name)
    groups = group_names(data)
    kept = {name: get_group(data, name) for name in groups if name in _KEPT_GROUPS}
    dropped_groups = [name for name in groups if name not in _KEPT_GROUPS and name != group]
    new.attrs["stein_variational_dropped_groups"] = dropped_groups
    if kind == "datatree":
        nodes = {"/": xr.Dataset(attrs=dict(data.attrs)), f"/{group}": new}
        nodes.update({f"/{name}": dataset for name, dataset in kept.items()})
        return xr.DataTree.from_dict(nodes, name=data.name)
    import arviz as az

    return az.InferenceData(**{group: new, **kept})


def settings_attrs(*, svgd_kernel, bandwidth, n_steps, step_size, step_rule, step_decay,
                   preconditioner, tol, patience, ksd_every):
    """The ``svgd_*`` attrs of a call's options (netCDF-safe values)."""
    return {
        "svgd_kernel": svgd_kernel, "svgd_kernel_formula": KERNEL_FORMULAS[svgd_kernel],
        "svgd_bandwidth": bandwidth if isinstance(bandwidth, str) else float(bandwidth),
        "svgd_n_steps": int(n_steps), "svgd_step_size": float(step_size),
        "svgd_step_rule": step_rule,
        "svgd_step_decay": "none" if step_decay is None else float(step_decay),
        **_STEP_RULE_CONSTANTS[step_rule],
        "svgd_preconditioner": preconditioner,
        "svgd_tol": "none" if tol is None else float(tol), "svgd_patience": int(patience),
        "svgd_ksd_every": int(ksd_every)}


def svgd_result(run, origin, source, prepared, settings, keep, ksd_pre):
    """:class:`SteinVariational` of a run (``settings``: the ``svgd_*`` attrs of the
    call's options, ``keep`` its choice of particles)."""
    ksd_values = run.ksd
    ksd_attrs = {"kernel": "IMQ", "stein_operator": "Langevin", "c": 1.0, "beta": -0.5,
                 **ksd_pre.attrs(), "preconditioner_fixed_from": "initial draws"}
    steps = run.record
    ksd = xr.DataArray(np.asarray(ksd_values), dims=("step",), coords={"step": steps},
                       name="ksd", attrs={"long_name": "KSD of the particles", **ksd_attrs})
    ksd_iid = xr.DataArray(np.asarray(run.ksd_iid), dims=("step",), coords={"step": steps},
                           name="ksd_iid",
                           attrs={"long_name": "i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N)"})
    coordinates = run.coordinates
    bandwidth = xr.DataArray(
        run.bandwidths, dims=("step",), coords={"step": np.arange(run.steps_run)},
        name="bandwidth",
        attrs={"long_name": "SVGD kernel bandwidth h",
               "coordinates": _COORDINATES_NAMES[coordinates.kind]},
    )
    attrs = {
        **settings,
        "svgd_preconditioner_used": coordinates.kind,
        "svgd_scale": np.asarray(coordinates.scale, dtype=float),
        "svgd_steps_run": run.steps_run,
        "svgd_stop_reason": run.stop_reason,
        "svgd_backtracks": run.backtracks,
        "svgd_n_particles": int(run.moved.shape[0]),
        "svgd_ksd_initial": float(ksd_values[0]),
        "svgd_ksd_final": run.ksd_returned,
        "svgd_ksd_last_step": float(ksd_values[-1]),
        "svgd_keep": keep,
        "svgd_returned_step": run.returned_step,
        "ksd_initial": float(ksd_values[0]),
        "ksd_final": run.ksd_returned,
        "ksd_last_step": float(ksd_values[-1]),
        "improved": int(run.ksd_returned < ksd_values[0]),
        "parameters": list(prepared.parameter),
        **provenance(prepared.attrs),
    }
    moved = run.moved.reshape(prepared.draws.shape)
    if origin.labelled:
        container_attrs = {f"stein_variational_{key.removeprefix('svgd_')}": _netcdf(value)
                           for key, value in attrs.items() if key.startswith("svgd_")}
        container_attrs["stein_variational_space"] = attrs["space"]
        draws = moved_container(origin.data, source, moved, prepared, group=origin.group,
                                coords=origin.coords, sample_dims=origin.sample_dims,
                                attrs=container_attrs)
    else:
        draws = moved.reshape(np.shape(origin.data))
    return SteinVariational(draws=draws, ksd=ksd, ksd_iid=ksd_iid, bandwidth=bandwidth,
                            attrs=attrs)


def not_improved_message(run, keep):
    """The warning when SVGD did not lower the particles' KSD, or "" when it did."""
    ksd_values, returned, n_steps = run.ksd, run.ksd_returned, run.steps_run
    if keep == "best" and run.returned_step == 0:
        return (f"stein_variational did not lower the KSD of the particles at any recorded "
                f"step (initial {ksd_values[0]:.4g}, after {n_steps} steps "
                f"{ksd_values[-1]:.4g}, lowest {min(ksd_values):.4g}): the draws given are "
                "returned unchanged. Try a smaller step_size (see result.ksd).")
    if not returned < ksd_values[0]:
        lowest = int(np.argmin(ksd_values))
        return (f"stein_variational raised the KSD of the particles from {ksd_values[0]:.4g} "
                f"to {returned:.4g} in {n_steps} steps: the particles returned fit the "
                f"target worse than the draws given (lowest KSD {ksd_values[lowest]:.4g} at "
                f"step {int(run.record[lowest])}). Keep the draws given, use keep='best', or "
                "try a smaller step_size, fewer steps or svgd_kernel='imq' (see result.ksd).")
    return ""
