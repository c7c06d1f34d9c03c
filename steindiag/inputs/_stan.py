"""Stan as input: a pystan 3 fit with its model, or a CmdStanPy fit with a BridgeStan model.

Data flow::

    fit (pystan Fit | CmdStanPy CmdStanMCMC) + model (stan.build(...) | bridgestan.StanModel)
      -> constrained draws of the parameters, (chain, draw), coords on chain/draw only
      -> each draw to Stan's unconstrained space by the model itself
         (pystan: unconstrain_pars; BridgeStan: param_unconstrain)
      -> scores: grad log p with the log-Jacobian of the transforms (pystan:
         grad_log_prob; BridgeStan: log_density_gradient(jacobian=True)); log p the
         same way (log_prob(adjust_transform=True); log_density(jacobian=True))
      -> labels as ArviZ labels Stan's parameters (``theta[0]``, ``Omega[0, 1]``) and the
         fit's divergences (``divergent__``) for diagnose

Neither library is imported: the objects are used through their documented methods
(pystan 3: ``Fit[name]``, ``Model.unconstrain_pars``, ``grad_log_prob``, ``log_prob``,
``constrain_pars``; BridgeStan: ``StanModel.param_names``, ``param_unc_names``,
``param_unconstrain``, ``log_density_gradient``, ``log_density``; CmdStanPy:
``CmdStanMCMC.draws(concat_chains=False)`` and ``column_names``). Each model call is
one draw (pystan: an HTTP request to httpstan, about 5 ms).
"""

import numpy as np
import xarray as xr

from steindiag._types import Origin, PendingInput, SteinInput
from steindiag._validate import check_finite
from steindiag.inputs._functions import ScoreSource
from steindiag.inputs._labels import ElementLabel
from steindiag.inputs._sampler import SamplerWarnings

__all__ = ["is_stan_input", "read_stan"]


def _module(obj):
    return type(obj).__module__ or ""


def _is_pystan_fit(data):
    return (_module(data).startswith("stan") and type(data).__name__ == "Fit"
            and hasattr(data, "param_names"))


def _is_pystan_model(model):
    return (_module(model).startswith("stan") and hasattr(model, "unconstrain_pars")
            and hasattr(model, "grad_log_prob"))


def _is_cmdstanpy_fit(data):
    # CmdStanPy's CmdStanMCMC, or any object with its two methods used here.
    if _module(data).startswith("cmdstanpy"):
        return type(data).__name__ == "CmdStanMCMC"
    return hasattr(data, "draws") and hasattr(data, "column_names") and hasattr(
        data, "chains")


def _is_bridgestan_model(model):
    return hasattr(model, "param_unconstrain") and hasattr(model, "log_density_gradient")


def is_stan_input(data, model=None):
    """Whether ``data`` is a pystan fit or a CmdStanPy fit (``model``: their Stan model)."""
    if _is_pystan_fit(data):
        return True
    if _module(data).startswith("cmdstanpy"):
        return _is_cmdstanpy_fit(data)
    return _is_bridgestan_model(model) and _is_cmdstanpy_fit(data)


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------


def _bridgestan_missing():
    from importlib.util import find_spec

    return find_spec("bridgestan") is None


def _read_stan_iv(data, model, score, var_names, sample_dims, space):
    if _is_pystan_fit(data) and not _is_pystan_model(model):
        raise TypeError(
            "data is a pystan Fit, which holds constrained draws only; Stan's unconstrained "
            "space and its score come from the model that sampled it: pass it as model, "
            "steindiag.ksd(fit, posterior) with posterior = stan.build(program, data=data) "
            f"(the object whose .sample() gave the fit); got model={type(model).__name__}.")
    if not _is_pystan_fit(data) and not _is_bridgestan_model(model):
        missing = (" bridgestan is not installed: pip install bridgestan (it compiles the "
                   "model with Stan's C++ sources, downloaded on first use)."
                   if _bridgestan_missing() else "")
        raise TypeError(
            "data is a CmdStanPy fit, which holds constrained draws only; Stan's "
            "unconstrained space and its score come from a BridgeStan model of the same "
            "program and data: model = bridgestan.StanModel(stan_file, data=data_file), then "
            f"steindiag.ksd(fit, model); got model={type(model).__name__}.{missing}")
    if score is not None:
        raise TypeError(
            "score is given by the Stan model (grad log p with the log-Jacobian of the "
            "transforms); pass score=None with a Stan fit and its model.")
    if var_names is not None:
        raise ValueError(
            f"var_names={var_names!r} cannot be used with a Stan model: its log density is of "
            "all the parameters together, so the draws are all of them, in Stan's order.")
    if sample_dims is not None:
        raise ValueError(
            "sample_dims does not apply to a Stan fit (its chains and draws are known); "
            f"got {sample_dims!r}. Select with coords={{'draw': slice(500, None)}}.")
    if space not in (None, "unconstrained"):
        raise ValueError(
            "with a Stan model the draws and scores are in Stan's unconstrained space; "
            f"space={space!r} cannot be used (pass None or 'unconstrained').")


def _selection(coords, n_chain, n_draw):
    """(chain indices, draw indices) that ``coords`` keeps (labels 0..n-1 on both dims)."""
    chain, draw = np.arange(n_chain), np.arange(n_draw)
    if not coords:
        return chain, draw
    other = [dim for dim in coords if dim not in ("chain", "draw")]
    if other:
        raise ValueError(
            f"coords selects along {other}; with a Stan model the draws are whole "
            "unconstrained vectors, so only 'chain' and 'draw' can be selected.")
    grid = xr.Dataset(coords={"chain": chain, "draw": draw})
    for dim, value in coords.items():
        if not isinstance(value, slice) and np.ndim(value) == 0:
            raise ValueError(
                f"coords={{{dim!r}: {value!r}}} selects a single {dim} and drops the "
                f"dimension; pass a list: coords={{{dim!r}: [{value!r}]}}.")
    try:
        grid = grid.sel(dict(coords))
    except (KeyError, ValueError, IndexError) as err:
        raise ValueError(f"coords={dict(coords)!r} could not be selected: {err}") from err
    if grid.sizes["chain"] == 0 or grid.sizes["draw"] == 0:
        raise ValueError(f"coords={dict(coords)!r} selects no draws.")
    return np.asarray(grid["chain"].values), np.asarray(grid["draw"].values)


def _arviz_label(stan_name):
    """Stan's flat name ("theta.1", "Omega.2.1") as ArviZ labels it ("theta[0]", "Omega[1, 0]").

    Parts that are not indices are kept: a complex parameter's "z.real", "z.imag" (Stan's
    and BridgeStan's names) are "z[real]", "z[imag]". The label remembers its dims as
    ArviZ names them without ``dims=`` (``Omega_dim_0``, ...), for a ``labeller``.
    """
    name, *index = stan_name.split(".")
    entries = [int(i) - 1 if i.isdigit() else i for i in index]
    dims = [f"{name}_dim_{axis}" for axis in range(len(entries))]
    positions = [entry if isinstance(entry, int) else int(entry == "imag") for entry in entries]
    text = f"{name}[{', '.join(str(entry) for entry in entries)}]" if entries else name
    return ElementLabel(text, name, dict(zip(dims, entries)), dict(zip(dims, positions)))


def _cmdstanpy_column(stan_name):
    """Stan's flat name as CmdStanPy names the fit's column ("theta.1" -> "theta[1]").

    CmdStan's CSV header and BridgeStan's ``param_names`` use Stan's names ("theta.1",
    "Omega.2.1", "z.real", tuples "x:1"); CmdStanPy (``column_names``) rewrites them as its
    ``munge_varname`` does: "theta[1]", "Omega[2,1]", "z[real]", "x.1".
    """
    parts = stan_name.split(":")
    for k, part in enumerate(parts):
        if "." in part:
            name, *index = part.split(".")
            parts[k] = f"{name}[{','.join(index)}]"
    return ".".join(parts)


# --------------------------------------------------------------------------------------
# the two sources of constrained draws and model functions
# --------------------------------------------------------------------------------------


class _Pystan:
    """pystan 3: Fit + stan.model.Model."""

    library = "pystan"

    def __init__(self, fit, model):
        self.fit, self.model = fit, model
        saved = fit[fit.param_names[0]].shape[-1] // fit.num_chains if fit.param_names else 0
        self.n_chain = fit.num_chains
        # With save_warmup the warm-up draws come first: keep the sampling draws.
        self.n_saved, self.n_draw = saved, -(-fit.num_samples // fit.num_thin)

    def constrained(self, chain, draw):
        """{name: (chain, draw, *shape)} of every stored variable (Stan takes what it needs)."""
        first = self.n_saved - self.n_draw
        out = {}
        for name, shape in zip(self.fit.param_names, self.fit.dims):
            # fit[name] is (*shape, draw * chain), chains interleaved (draw-major).
            values = self.fit[name].reshape(*shape, self.n_saved, self.n_chain)
            values = np.moveaxis(values, (-1, -2), (0, 1))[:, first:]
            out[name] = values[np.ix_(chain, draw)]
        return out

    def unconstrain(self, values, c, t):
        return self.model.unconstrain_pars({name: value[c, t].tolist()
                                            for name, value in values.items()})

    def score(self, z):
        return self.model.grad_log_prob(list(map(float, z)))

    def log_density(self, z):
        return self.model.log_prob(list(map(float, z)), adjust_transform=True)

    def labels(self, z):
        n_parameter = len(self.model.constrain_pars(list(map(float, z)), include_tparams=False,
                                                    include_gqs=False))
        if n_parameter == len(z):
            # Every transform keeps the size (bounds, ordered): Stan's parameters come first
            # in constrained_param_names, in the order of the unconstrained vector.
            return [_arviz_label(name) for name in self.fit.constrained_param_names[:len(z)]], ""
        return [f"unconstrained[{k}]" for k in range(len(z))], (
            "positions: some transform changes the size (simplex, covariance, ...), and "
            "pystan does not name the unconstrained coordinates")

    def divergent(self):
        if "divergent__" not in self.fit.sample_and_sampler_param_names:
            return None
        flags = np.asarray(self.fit["divergent__"]).reshape(self.n_saved, self.n_chain).T
        return flags[:, self.n_saved - self.n_draw:], "fit['divergent__'] (pystan)"


class _BridgeStan:
    """CmdStanPy fit (constrained draws) + BridgeStan model (the unconstrained space)."""

    library = "CmdStanPy + BridgeStan"

    def __init__(self, fit, model):
        self.fit, self.model = fit, model
        self.columns = list(fit.column_names)
        self.draws = np.asarray(fit.draws(concat_chains=False), dtype=np.float64)
        self.n_draw, self.n_chain = self.draws.shape[:2]
        names = list(model.param_names())
        # BridgeStan names "theta.1" what CmdStanPy's column_names call "theta[1]" (CmdStan's
        # CSV header has "theta.1"): either spelling is matched.
        found = {name: name if name in self.columns else _cmdstanpy_column(name)
                 for name in names}
        missing = [name for name, column in found.items() if column not in self.columns]
        if missing:
            raise ValueError(
                f"the CmdStanPy fit has no column(s) {[found[n] for n in missing[:6]]} of "
                f"the BridgeStan model's parameters {missing[:6]} (its columns: "
                f"{self.columns[:10]}): the model and the fit are not of the same program.")
        self.index = [self.columns.index(found[name]) for name in names]

    def constrained(self, chain, draw):
        return np.moveaxis(self.draws[:, :, self.index], 0, 1)[np.ix_(chain, draw)]

    def unconstrain(self, values, c, t):
        return self.model.param_unconstrain(np.ascontiguousarray(values[c, t]))

    # BridgeStan hands arrays to C through ctypes: float64 and C-contiguous, or it raises
    # ctypes.ArgumentError (a row of a Fortran-ordered (n, d) array is not contiguous).
    def score(self, z):
        return self.model.log_density_gradient(np.ascontiguousarray(z, dtype=np.float64),
                                               jacobian=True)[1]

    def log_density(self, z):
        return self.model.log_density(np.ascontiguousarray(z, dtype=np.float64),
                                      jacobian=True)

    def labels(self, z):
        return [_arviz_label(name) for name in self.model.param_unc_names()], ""

    def divergent(self):
        if "divergent__" not in self.columns:
            return None
        flags = self.draws[:, :, self.columns.index("divergent__")].T
        return flags, "fit column 'divergent__' (CmdStanPy)"


# --------------------------------------------------------------------------------------
# the reader
# --------------------------------------------------------------------------------------


def read_stan(data, model=None, *, score=None, batched=True, var_names=None, coords=None,
              sample_dims=None, space=None, need_score=True):
    """Draws of a Stan fit in Stan's unconstrained space (a ``PendingInput``).

    ``data`` is a pystan 3 ``Fit`` with ``model`` its ``stan.build(...)`` object, or a
    CmdStanPy ``CmdStanMCMC`` with ``model`` a ``bridgestan.StanModel`` of the same program
    and data. ``coords`` selects chains and draws (``{"draw": slice(100, None)}``).
    """
    _read_stan_iv(data, model, score, var_names, sample_dims, space)
    source = _Pystan(data, model) if _is_pystan_fit(data) else _BridgeStan(data, model)
    chain, draw = _selection(coords, source.n_chain, source.n_draw)
    values = source.constrained(chain, draw)
    draws = np.array([[np.asarray(source.unconstrain(values, c, t), dtype=np.float64)
                       for t in range(len(draw))] for c in range(len(chain))])
    if not np.isfinite(draws).all():
        raise ValueError(
            "some draws have no finite unconstrained value (a draw on the boundary of a "
            "parameter's support); drop them with coords=.")
    n_chain, n_draw, d = draws.shape
    labels, label_note = source.labels(draws[0, 0])
    attrs = {"space": "unconstrained", "sampler": source.library,
             "log_density": "Stan's log density with the log-Jacobian of the transforms"}
    if label_note:
        attrs["parameter_labels"] = label_note
    found = source.divergent()
    warnings_found = None
    if found is not None:
        flags, where = found
        flags = np.asarray(flags)[np.ix_(chain, draw)] != 0
        warnings_found = SamplerWarnings(divergences=flags.sum(axis=1).astype(np.int64),
                                         n_draw=n_draw, source=where, diverging=flags)

    def log_density(points):
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        return np.array([source.log_density(z) for z in points], dtype=np.float64)

    def score_function(points):
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        return np.array([np.asarray(source.score(z), dtype=np.float64) for z in points])

    def complete():
        scores = score_function(draws.reshape(-1, d)).reshape(draws.shape)
        check_finite(scores, "scores (Stan's gradient)", chain, draw)
        return SteinInput(draws=draws, scores=scores, chain=chain, draw=draw,
                          parameter=list(labels), attrs={**attrs, "score_source": "stan"})

    return PendingInput(draws=draws, chain=chain, draw=draw, parameter=list(labels),
                        attrs=attrs, complete=complete,
                        source=ScoreSource(score=score_function, log_density=log_density),
                        origin=Origin(data=draws),
                        read_sampler_warnings=lambda: warnings_found)
