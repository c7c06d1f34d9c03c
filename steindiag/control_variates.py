"""Public function ``control_variates``: posterior means with Stein control variates.

Data flow: input (arrays | DataArray | InferenceData | DataTree | Dataset) + score
source -> ``_control_variates_iv`` (every option checked) -> ``steindiag.inputs``
(draws and scores (chain, draw, d) in the unconstrained space) -> the quantities
summarised (the trace's variables in their own, constrained, space, aligned draw by
draw; user functions) -> ``methods.control_variates`` (cross-fitted regressions, one
factorisation per fold shared by every quantity) -> ``stats.mcse`` (ArviZ's MCSE of
the plain and adjusted values) -> labelled ``xarray.Dataset`` (dim ``label``).
"""

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag._validate import warn_user
from steindiag.engine.threads import single_threaded_blas
from steindiag.inputs import as_trace, is_labelled, read_input
from steindiag.inputs._jax import is_position_pytree
from steindiag.inputs._numpyro import is_numpyro_mcmc
from steindiag.inputs._labels import variable_labels
from steindiag.methods.control_variates import (
    KERNEL_GRID,
    RIDGE_GRID,
    fold_labels,
    kernel_cross_fit,
    n_coefficients,
    polynomial_design,
    ridge_cross_fit,
    transform_controls,
)
from steindiag.stats.mcse import mcse_mean

__all__ = ["control_variates"]

METHODS = ("auto", "polynomial1", "polynomial2", "regularised", "kernel")
# "auto" tries the kernel method only up to this many draws (its cost is cubic in N).
_AUTO_KERNEL_DRAWS = 1000


def _control_variates_iv(method, functions, n_folds, diagnosis, max_kernel_draws,
                         max_coefficients):
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}; got {method!r}.")
    for name, value, low in (("n_folds", n_folds, 2), ("max_kernel_draws", max_kernel_draws, 2),
                             ("max_coefficients", max_coefficients, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {value!r}.")
    if functions is None:
        functions = {}
    elif callable(functions) or isinstance(functions, xr.DataArray):
        name = getattr(functions, "name", None) or getattr(functions, "__name__", None) or "f"
        functions = {str(name): functions}
    elif not isinstance(functions, dict):
        raise TypeError(
            "functions must be None, a callable, an xarray.DataArray or a dict {name: "
            f"callable | DataArray | array}}; got {type(functions).__name__}."
        )
    for name, function in functions.items():
        if not isinstance(name, str):
            raise TypeError(f"functions' names must be strings; got {name!r}.")
        if not (callable(function) or isinstance(function, (xr.DataArray, np.ndarray, list))):
            raise TypeError(
                f"functions[{name!r}] must be a callable, an xarray.DataArray or an array of "
                f"per-draw values; got {type(function).__name__}."
            )
    verdict = None
    if diagnosis is not None:
        if not isinstance(diagnosis, xr.Dataset) or "verdict_pooled" not in diagnosis:
            raise TypeError(
                "diagnosis must be the result of steindiag.diagnose (a Dataset with "
                f"'verdict_pooled'); got {type(diagnosis).__name__}."
            )
        verdict = str(np.asarray(diagnosis["verdict_pooled"].values).item())
    return functions, verdict


# -- the quantities summarised ------------------------------------------------------------


def _trace_dataset(data, group, var_names, coords, chain, draw):
    """The trace's ``group`` (its own space), selected and aligned on the draws' (chain, draw)."""
    from steindiag.weights import _posterior_dataset, _select_vars

    dataset = _posterior_dataset(data, group)
    full = _select_vars(dataset, None, coords)
    selection = {}
    for dim, values in (("chain", chain), ("draw", draw)):
        if dim in full.coords:
            selection[dim] = values
    try:
        full = full.sel(selection)
    except (KeyError, IndexError) as err:
        raise ValueError(
            f"the trace's group {group!r} does not hold the (chain, draw) of the draws read: "
            f"{err}"
        ) from None
    return full, _select_vars(full, var_names, None)


def _trace_rows(dataset, n_chain, n_draw):
    labels, columns, owners = [], [], []
    for name, variable in dataset.data_vars.items():
        if "chain" not in variable.dims or "draw" not in variable.dims:
            continue
        if not (np.issubdtype(variable.dtype, np.number) or variable.dtype == bool):
            continue
        other = [dim for dim in variable.dims if dim not in ("chain", "draw")]
        values = variable.transpose("chain", "draw", *other).values
        columns.append(values.reshape(n_chain, n_draw, -1).astype(np.float64))
        labels.extend(variable_labels(name, variable, ("chain", "draw")))
        owners.extend([str(name)] * columns[-1].shape[2])
    return labels, columns, owners


def _plain(value):
    """A coordinate value as Python writes it (1, not np.int64(1))."""
    return value.item() if isinstance(value, np.generic) else value


def _function_values(name, function, argument, chain, draw):
    """Per-draw values of one user function, checked: shape (chain, draw)."""
    n_chain, n_draw = len(chain), len(draw)
    if callable(function):
        try:
            values = function(argument)
        except Exception as err:  # noqa: BLE001 - report which function failed
            raise ValueError(
                f"functions[{name!r}] raised {type(err).__name__}: {err}"
            ) from err
    else:
        values = function
    if isinstance(values, xr.DataArray):
        extra = [dim for dim in values.dims if dim not in ("chain", "draw")]
        if extra or set(values.dims) != {"chain", "draw"}:
            raise ValueError(
                f"functions[{name!r}] must give one value per draw, dims ('chain', 'draw'); "
                f"got dims {values.dims}."
            )
        for dim, expected in (("chain", chain), ("draw", draw)):
            if dim in values.coords and values.sizes[dim] != len(expected):
                raise ValueError(
                    f"functions[{name!r}] has {values.sizes[dim]} {dim}s; the draws have "
                    f"{len(expected)}."
                )
            if dim in values.coords and np.isin(expected, values[dim].values).all():
                values = values.sel({dim: expected})
        values = values.transpose("chain", "draw").values
    try:
        values = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"functions[{name!r}] must give numbers; got {type(values).__name__}."
        ) from None
    if n_chain == 1 and values.shape == (n_draw,):
        values = values[None, :]
    if values.shape != (n_chain, n_draw):
        raise ValueError(
            f"functions[{name!r}] must give one value per draw, shape (chain, draw) = "
            f"({n_chain}, {n_draw}); got shape {values.shape}."
        )
    bad = ~np.isfinite(values)
    if bad.any():
        c, t = np.argwhere(bad)[0]
        raise ValueError(
            f"functions[{name!r}] is not finite at {int(bad.sum())} draw(s), first "
            f"(chain={_plain(chain[c])!r}, draw={_plain(draw[t])!r}): {values[c, t]}."
        )
    return values


def _rows(data, prepared, functions, group, var_names, coords):
    """(labels, values (chain, draw, n_rows), owners: each row's trace variable or None)."""
    n_chain, n_draw = prepared.draws.shape[:2]
    if is_labelled(data):
        full, selected = _trace_dataset(data, group, var_names, coords, prepared.chain,
                                        prepared.draw)
        labels, columns, owners = _trace_rows(selected, n_chain, n_draw)
        argument = full
    else:
        if var_names is not None:
            raise TypeError("var_names applies to labelled traces only; data is an array.")
        labels, columns = list(prepared.parameter), [prepared.draws]
        owners = [None] * len(labels)
        argument = prepared.draws
    for name, function in functions.items():
        if name in labels:
            raise ValueError(f"functions[{name!r}] has the label of a variable; rename it.")
        columns.append(_function_values(name, function, argument, prepared.chain,
                                        prepared.draw)[:, :, None])
        labels.append(name)
        owners.append(None)
    if not labels:
        raise ValueError("nothing to summarise: no variable selected and no functions.")
    values = np.concatenate(columns, axis=2)
    bad = ~np.isfinite(values)
    if bad.any():
        c, t, k = np.argwhere(bad)[0]
        raise ValueError(
            f"the trace's values are not finite: {labels[k]} at (chain="
            f"{_plain(prepared.chain[c])!r}, draw={_plain(prepared.draw[t])!r}); select finite draws with "
            "coords= or var_names=."
        )
    return labels, values, owners


# -- function-specific control variates for constrained quantities ------------------------

# Elementwise transforms of PyMC with a closed-form inverse T (constrained = T(z)) and
# derivative dT/dz written through the constrained value f: (T(z), dT/dz given f).
_TRANSFORMS = {
    "log": (np.exp, lambda f: f),
    "logodds": (lambda z: 1.0 / (1.0 + np.exp(-z)), lambda f: f * (1.0 - f)),
}


def _attr_list(attrs, key):
    value = attrs.get(key)
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            return None
    return list(value) if isinstance(value, (list, tuple)) else None


def _transform_terms(owners, flat_values, plain_mean, draws, scores, parameter, attrs,
                     max_coefficients, labels):
    """Designs of their own for the rows that are T(z_k) of one unconstrained coordinate,
    T a log or logodds transform (f' = dT/dz_k in closed form).

    Each such row f gets, next to the polynomial family shared by every row,
    ``transform_controls`` of f with products (3d - 1 columns: f times the first-order
    and diagonal second-order fields, and f y_i e_k) for its mean, and the one column
    (f - m)^2 s_k + 2 (f - m) f' for its centred square; no other row sees them (in a
    design shared by all rows they made the other rows' error bars too small). Rows
    qualify in order while their designs hold at most ``max_coefficients`` columns in
    all (p + 3d - 1 and p + 1 each, p the second-order family's size), which bounds the
    extra factorisations.

    A row qualifies when its trace variable is a free variable whose value variable has
    that transform and as many elements (element i of one is element i of the other),
    and its values equal T(z_k) at every draw (relative 1e-6): the check, not the names,
    decides. Returns a list of (label, target columns, extra columns (N, q)): two per
    row, its mean's (column r of the targets) and its square's (column n_rows + r).
    """
    free = _attr_list(attrs, "free_variables")
    value_names = _attr_list(attrs, "value_variables")
    transforms = _attr_list(attrs, "transforms")
    if not free or not value_names or not transforms or not (
            len(free) == len(value_names) == len(transforms)):
        return []
    owner_of_column = [str(label).split("[", 1)[0] for label in parameter]
    n_rows = flat_values.shape[1]
    d = draws.shape[1]
    p = n_coefficients(d, 2, diagonal=n_coefficients(d, 2) > max_coefficients)
    budget = max_coefficients
    groups = []
    for name, value_name, transform in zip(free, value_names, transforms):
        if transform not in _TRANSFORMS:
            continue
        row_index = [r for r, owner in enumerate(owners) if owner == name]
        column_index = [k for k, owner in enumerate(owner_of_column) if owner == value_name]
        if not row_index or len(row_index) != len(column_index):
            continue
        inverse, derivative = _TRANSFORMS[transform]
        for r, k in zip(row_index, column_index):
            if 2 * p + 3 * d > budget:
                return groups
            f = flat_values[:, [r]]
            with np.errstate(over="ignore", invalid="ignore"):
                mapped = inverse(draws[:, k])
            if not np.allclose(mapped, f[:, 0], rtol=1e-6, atol=1e-300):
                continue
            df = derivative(f)
            centred = f - plain_mean[r]
            mean_block = transform_controls(f, df, draws, scores, [k], products=True)
            square_block = transform_controls(centred ** 2, 2.0 * centred * df, draws,
                                              scores, [k], products=False)
            if not (np.all(np.isfinite(mean_block)) and np.all(np.isfinite(square_block))):
                continue
            budget -= 2 * p + 3 * d
            groups += [(labels[r], [r], mean_block), (labels[r], [n_rows + r], square_block)]
    return groups


# -- the estimators, dispatched by name -------------------------------------------------------


def _polynomial(order, regularised):
    def run(values, draws, scores, folds, options):
        d = draws.shape[1]
        n_train = int(np.min([np.sum(folds != k) for k in np.unique(folds)]))
        diagonal = False
        if order == 2 and n_coefficients(d, 2) > options["max_coefficients"]:
            if not regularised:
                raise ValueError(
                    f"method='polynomial2' needs d(d+3)/2 = {n_coefficients(d, 2)} "
                    f"coefficients for d = {d}, more than max_coefficients = "
                    f"{options['max_coefficients']}; use method='regularised' (a diagonal "
                    "quadratic then) or raise max_coefficients."
                )
            diagonal = True
        p = n_coefficients(d, order, diagonal)
        if not regularised and p + 1 >= n_train:
            raise ValueError(
                f"method='polynomial{order}' fits {p} coefficients on {n_train} training "
                "draws per fold; it needs more draws than coefficients. Use "
                "method='regularised', or 'polynomial1'."
            )
        # Constrained rows' own designs: the shared columns plus theirs (least squares
        # only where they leave more draws than coefficients).
        groups = [group for group in options.get("transform_groups", [])
                  if regularised or p + group[2].shape[1] + 1 < n_train]
        controls = polynomial_design(draws, scores, order, diagonal=diagonal)
        if regularised:
            penalties = RIDGE_GRID if p + 1 >= n_train else np.concatenate([[0.0], RIDGE_GRID])
        else:
            penalties = (0.0,)
        shared = np.ones(values.shape[1], dtype=bool)
        for _, columns, _ in groups:
            shared[columns] = False
        designs = [(np.flatnonzero(shared), controls)] + [
            (np.asarray(columns), np.concatenate([controls, block], axis=1))
            for _, columns, block in groups]
        adjusted = np.empty_like(values)
        penalty = np.empty(values.shape[1])
        error = np.empty(values.shape[1])
        for columns, design in designs:
            if columns.size:
                own_penalties = penalties
                if regularised and p + design.shape[1] - controls.shape[1] + 1 >= n_train:
                    own_penalties = RIDGE_GRID
                adjusted[:, columns], penalty[columns], error[columns] = ridge_cross_fit(
                    values[:, columns], design, folds, penalties=own_penalties)
        basis = {1: "first-order polynomial", 2: "second-order polynomial"}[order]
        if diagonal:
            basis = "second-order polynomial, diagonal B"
        transform_terms = list(dict.fromkeys(label for label, _, _ in groups))
        if transform_terms:
            basis += "; constrained rows f = T(z_k): + their own columns (transform_terms)"
        info = {"basis": basis, "n_coefficients": p, "transform_terms": transform_terms}
        if regularised:
            info["penalty_rule"] = ("ridge, penalty per quantity by cross-validation over "
                                    "the folds, relative to the training size")
        return adjusted, penalty, error, info
    return run


def _kernel(values, draws, scores, folds, options):
    from steindiag.kernels.preconditioner import make_preconditioner

    n, d = draws.shape
    if n > options["max_kernel_draws"]:
        raise ValueError(
            f"method='kernel' holds dense Stein-kernel matrices of the draws (about "
            f"{3 * 8 * n * n / 1e9:.2g} GB for N = {n}); that is more than max_kernel_draws = "
            f"{options['max_kernel_draws']} draws. Thin the draws, raise max_kernel_draws, or "
            "use a polynomial method."
        )
    pre = make_preconditioner("standardize", draws, [str(k) for k in range(d)])
    x, sx = pre.to_kernel_coordinates(draws, scores)
    x -= x.mean(axis=0)
    n_train = int(np.min([np.sum(folds != k) for k in np.unique(folds)]))
    semi_exact = d + 1 < n_train // 2
    adjusted, penalty, error = kernel_cross_fit(values, x, sx, folds, pre.a,
                                                semi_exact=semi_exact, penalties=KERNEL_GRID)
    info = {"basis": "Stein kernel (IMQ, c = 1, beta = -1/2, standardized)"
                     + (" + first-order polynomial (semi-exact)" if semi_exact else ""),
            "n_coefficients": n_train + (d + 1 if semi_exact else 1),
            "transform_terms": [],
            "penalty_rule": "kernel ridge, penalty per quantity by cross-validation over the "
                            "folds, relative to the mean of the kernel's diagonal"}
    return adjusted, penalty, error, info


_ESTIMATORS = {
    "polynomial1": _polynomial(1, False),
    "polynomial2": _polynomial(2, False),
    "regularised": _polynomial(2, True),
    "kernel": _kernel,
}


def _auto_candidates(n, d, n_train, max_coefficients):
    candidates = ["polynomial1"]
    if n_coefficients(d, 2) <= max_coefficients and n_coefficients(d, 2) + 1 < n_train:
        candidates.append("polynomial2")
    candidates.append("regularised")
    if n <= _AUTO_KERNEL_DRAWS:
        candidates.append("kernel")
    return candidates


def _held_out_score(error, values):
    """Mean log of held-out error over plain variance, floored at 1e-12: lower is better.

    The floor makes fits exact to rounding tie (the simpler candidate, listed first, wins).
    """
    variance = values.var(axis=0)
    ok = variance > 0
    if not ok.any():
        return 0.0
    return float(np.mean(np.log(np.maximum(error[ok] / variance[ok], 1e-12))))


# -- the public function ------------------------------------------------------------------


def control_variates(data, model=None, *, score=None, functions=None, method="auto",
                     var_names=None, coords=None, group="posterior", sample_dims=None,
                     batched=True, space=None, n_folds=4, diagnosis=None,
                     max_coefficients=1000, max_kernel_draws=3000, compile_mode=None,
                     log_density=None):
    """Posterior means and sds with Stein control variates, next to ArviZ's plain ones.

    Parameters
    ----------
    data : array_like, xarray.DataArray, xarray.DataTree, arviz.InferenceData or xarray.Dataset
        Draws: a trace (``pm.sample`` output, its posterior Dataset), a DataArray, or an
        array of shape (chain, draw, d) or (draw, d), as in :func:`steindiag.ksd`.
    model : pymc.Model, optional
        The model that produced the trace; the scores are grad log p in its
        unconstrained space. Not needed for a trace with stored scores
        (:func:`steindiag.add_scores`, nutpie's ``store_gradient``).
    score : array_like, xarray.DataArray or callable, optional
        grad log p at each draw instead of ``model`` (as in :func:`steindiag.ksd`).
    functions : callable, xarray.DataArray or dict, optional
        Extra quantities, ``{name: f}``: a callable given the trace's ``group`` as an
        ``xarray.Dataset`` (aligned on the draws, every variable in its own space), or
        for an array ``data`` the draws (chain, draw, d), returning one value per draw
        (chain, draw); or the per-draw values as a DataArray with dims (chain, draw) or
        an array of that shape. A single callable or DataArray is named by its
        ``__name__`` / ``name``. E.g. ``{"P(tau < 1)": lambda post: post["tau"] < 1}``.
    method : {"auto", "polynomial1", "polynomial2", "regularised", "kernel"}, default "auto"
        ``"polynomial1"``: control variates a . s(x) (d coefficients).
        ``"polynomial2"``: tr(B) + (a + B x) . s(x), B symmetric (d(d+3)/2).
        ``"regularised"``: the second-order family with a ridge penalty chosen per
        quantity by cross-validation (a diagonal B when d(d+3)/2 > ``max_coefficients``),
        for when the coefficients approach the number of draws.
        ``"kernel"``: control functionals with the IMQ Stein kernel, semi-exact (with
        the first-order polynomial) when d + 1 < N_train / 2; holds dense kernel
        matrices, about 24 N^2 bytes (N = 3000: 0.2 GB), refused above
        ``max_kernel_draws``.
        ``"auto"``: the candidate with the smallest cross-validated error (held-out
        squared error relative to each quantity's variance, averaged in log scale);
        ``attrs["method"]`` says which (the kernel is a candidate up to 1000 draws,
        ``"polynomial2"`` when it is well determined).
    var_names, coords : optional
        The trace's variables to summarise (default every variable of ``group`` with
        both sample dims, deterministics included, as ``az.summary``), and a selection
        of draws (``coords={"draw": slice(500, None)}``), ArviZ conventions.
    group : str, default "posterior"
    sample_dims, batched, space, compile_mode, log_density : optional
        As in :func:`steindiag.ksd` (``data`` and ``model`` may be a numpyro ``MCMC``,
        ``data`` a JAX pytree of positions with a JAX ``log_density``: rows are then the
        MCMC's constrained sites, deterministic ones included, or the positions' leaves).
    n_folds : int, default 4
        Cross-fitting folds: with several chains, chain c is in fold c mod K (whole
        chains held out); with one chain, K contiguous blocks of draws.
    diagnosis : xarray.Dataset, optional
        The result of :func:`steindiag.diagnose` for the same draws. With a
        ``verdict_pooled`` of "does not fit", no improvement is claimed: a warning, and
        every row reports the plain estimate (``cv_applied`` False). Not computed here
        (it costs far more than the control variates).
    max_coefficients : int, default 1000
        Largest full second-order family (d(d+3)/2 coefficients, so d <= 43 by default),
        and the most columns in all of the constrained rows' own designs.
    max_kernel_draws : int, default 3000
        Largest N for ``method="kernel"``.

    Returns
    -------
    xarray.Dataset
        Dim ``label``: one row per quantity, labelled as ``az.summary`` labels them
        (``mu``, ``theta[Choate]``; ``x[0]`` for arrays) and then the ``functions``'
        names. Variables (label): ``mean``, ``sd``, ``mcse_mean`` (plain, as ArviZ
        computes them); ``mean_cv``, ``sd_cv``, ``mcse_mean_cv`` (control variates);
        ``variance_reduction`` = mcse_mean^2 / mcse_mean_cv^2; ``cv_applied`` (bool):
        False where the control variate did not lower the MCSE (or ``diagnosis`` says
        the draws do not fit), and the ``_cv`` columns then repeat the plain ones.
        ``.to_dataframe()`` gives the table. ``attrs``: ``method`` (the one used),
        ``method_requested``, ``basis``, ``n_coefficients``, ``transform_terms`` (the
        rows with a design of their own), ``n_folds``, ``fold_rule``, for ``"auto"``
        ``auto_candidates`` and ``auto_cv_scores``, sizes, the space and score source of
        the draws, and ``diagnosis_verdict`` when given.

    Notes
    -----
    For a vector field g whose boundary terms vanish, E_p[div g + g . s] = 0 with s
    = grad log p, so h = f - (div g + g . s) has the mean of f. With g = grad P for a
    polynomial P (Mira, Solgi & Imparato 2013) the control variates are
    s_j (first order) and, for P = x^T B x / 2, tr(B) + (B x) . s; the coefficients are
    the least-squares fit of f on them, through a thin SVD of the centred, scaled
    design (never the normal equations). For a Gaussian target, first order is exact
    for linear f and second order for quadratic f, from any sample.

    The identity needs the space in which p is smooth and positive on all of R^d:
    draws and scores are in the model's unconstrained space z, while the quantities
    are the trace's stored values, f(T(z)), draw by draw. A row that is T(z_k) of one
    coordinate (a PyMC log or logodds transform: positive scales, probabilities; checked
    against the values draw by draw) is far from the span of polynomials in z (tau =
    exp(z_k)); the polynomial methods give it a design of its own: the shared family plus
    the fields g = f e_i, f y_i e_i and f y_i e_k, y = z - mean (3d - 1 columns; div g +
    g . s uses f' = dT/dz_k in closed form), and (f - m)^2 e_k for its second moment. No
    other row sees those columns. attrs ``transform_terms`` lists the rows; they qualify
    in order while their designs hold at most ``max_coefficients`` columns in all. Other
    transforms get no columns of their own. Background: the documentation's background
    page, "Control variates".

    Error bars: the coefficients applied to a draw are fitted on the other folds
    (cross-fitting), h_i = f_i - c_(-k(i)) . psi_i, and ``mcse_mean_cv`` is ArviZ's
    ``mcse_mean`` (Geyer's initial monotone sequence on split chains) of h; so the fit
    does not make the error bar optimistic, and autocorrelation is accounted for.
    mean_cv = mean_i h_i. sd_cv = sqrt(E_cv[(f - m)^2] - (mean_cv - m)^2) with m the
    plain mean (no ddof correction). Choosing the penalty or method by the same
    folds, and falling back to the plain estimate where it is better, are selections
    on the data; both are among a few candidates. Control variates reduce variance;
    they do not remove bias: draws that do not come from p stay wrong (check with
    :func:`steindiag.diagnose`).

    Cost: polynomial methods, one SVD of an (N_train, p) matrix per fold shared by
    every quantity (and two more per row with ``transform_terms``), O(K N p min(N, p))
    time and O(N p) memory; the kernel method O(K N^3) time and O(N^2) memory.

    References
    ----------
    Mira, Solgi & Imparato (2013), Zero variance Markov chain Monte Carlo for Bayesian
    estimators, Stat. Comput.
    Oates, Girolami & Chopin (2017), Control functionals for Monte Carlo integration, JRSS-B.
    South, Oates, Mira & Drovandi (2023), Regularized zero-variance control variates,
    Bayesian Anal.
    South, Karvonen, Nemeth, Girolami & Oates (2022), Semi-exact control functionals from
    Sard's method, Biometrika.
    Vehtari, Gelman, Simpson, Carpenter & Buerkner (2021), Rank-normalization, folding,
    and localization: an improved R-hat, Bayesian Anal.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> rng = np.random.default_rng(0)
    >>> x = 2.0 + rng.standard_normal((4, 500, 3))   # N(2, I): the score is -(x - 2)
    >>> res = steindiag.control_variates(x, score=-(x - 2.0), method="polynomial1")
    >>> [round(float(v), 8) for v in res["mean_cv"]]  # exact for a linear f
    [2.0, 2.0, 2.0]
    >>> bool((res["variance_reduction"] > 1e6).all())
    True
    """
    functions, verdict = _control_variates_iv(method, functions, n_folds, diagnosis,
                                              max_kernel_draws, max_coefficients)
    data = as_trace(data, model)
    # var_names picks the rows of a trace (and of a numpyro MCMC's), not the parameters.
    rows_by_name = is_labelled(data) or is_numpyro_mcmc(data) or is_position_pytree(data)
    pending = read_input(
        data, model, score=score, batched=batched, group=group,
        var_names=None if rows_by_name else var_names, coords=coords,
        sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    data, model, score, log_density, sample_dims = pending.resolve(
        data, model, score, log_density, sample_dims)
    prepared = pending.with_scores()
    n_chain, n_draw, d = prepared.draws.shape
    if n_draw < 4:
        raise ValueError(f"control_variates needs at least 4 draws per chain; got {n_draw}.")
    labels, values, owners = _rows(data, prepared, functions, group, var_names, coords)
    n_rows = len(labels)
    n = n_chain * n_draw
    flat_values = values.reshape(n, n_rows)
    plain_mean = flat_values.mean(axis=0)
    # Each quantity f and its centred square (f - mean)^2: the second moment, hence sd.
    targets = np.concatenate([flat_values, (flat_values - plain_mean) ** 2], axis=1)
    draws = prepared.draws.reshape(n, d)
    scores = prepared.scores.reshape(n, d)
    folds = fold_labels(n_chain, n_draw, n_folds).reshape(n)
    n_folds_used = int(np.unique(folds).size)
    n_train = int(np.min([np.sum(folds != k) for k in np.unique(folds)]))
    groups = _transform_terms(owners, flat_values, plain_mean, draws, scores,
                              prepared.parameter, prepared.attrs, max_coefficients, labels)
    options = {"max_coefficients": max_coefficients, "max_kernel_draws": max_kernel_draws,
               "transform_groups": groups}

    attrs = {"method_requested": method}
    with single_threaded_blas():
        chosen, adjusted, info = _fit(method, targets, draws, scores, folds, options, n, d,
                                      n_train, max_coefficients, attrs)
    adjusted = adjusted.reshape(n_chain, n_draw, 2 * n_rows)
    plain = targets.reshape(n_chain, n_draw, 2 * n_rows)
    mcse_plain = mcse_mean(plain)
    mcse_cv = mcse_mean(adjusted)
    return _result(labels, flat_values, plain, adjusted, mcse_plain, mcse_cv, verdict, attrs,
                   chosen, info, prepared, n_folds_used)


def _fit(method, targets, draws, scores, folds, options, n, d, n_train, max_coefficients,
         attrs):
    """Run the method (or every candidate of "auto"): (name, adjusted values, info)."""
    if method == "auto":
        candidates = _auto_candidates(n, d, n_train, max_coefficients)
        results = {name: _ESTIMATORS[name](targets, draws, scores, folds, options)
                   for name in candidates}
        cv_scores = {name: _held_out_score(result[2], targets)
                     for name, result in results.items()}
        chosen = min(cv_scores, key=cv_scores.get)
        adjusted, penalty, _, info = results[chosen]
        attrs["auto_candidates"] = list(candidates)
        attrs["auto_cv_scores"] = [cv_scores[name] for name in candidates]
    else:
        chosen = method
        adjusted, penalty, _, info = _ESTIMATORS[method](targets, draws, scores, folds, options)
    return chosen, adjusted, info


def _result(labels, flat_values, plain, adjusted, mcse_plain, mcse_cv, verdict, attrs, chosen,
            info, prepared, n_folds_used):
    """The labelled Dataset, with the per-row fallback to the plain estimate."""
    n_chain, n_draw, d = prepared.draws.shape
    n = n_chain * n_draw
    n_rows = len(labels)
    plain_mean = flat_values.mean(axis=0)
    mean_adjusted = adjusted.reshape(n, -1).mean(axis=0)
    helps = np.isfinite(mcse_cv) & (mcse_cv < mcse_plain)
    if verdict == "does not fit":
        warn_user(
            "control_variates: the diagnosis says the draws do not fit the target "
            "(verdict_pooled = 'does not fit'); control variates reduce variance but do not "
            "remove bias, so no improvement is claimed and the plain estimates are reported."
        )
        helps[:] = False
    first = helps[:n_rows]
    second = helps[n_rows:]
    mean_cv = np.where(first, mean_adjusted[:n_rows], plain_mean)
    mcse_mean_cv = np.where(first, mcse_cv[:n_rows], mcse_plain[:n_rows])
    second_moment = np.where(second, mean_adjusted[n_rows:], plain[:, :, n_rows:].mean(axis=(0, 1)))
    variance_cv = second_moment - (mean_cv - plain_mean) ** 2
    sd_plain = np.std(flat_values, axis=0, ddof=1)
    sd_cv = np.where(variance_cv > 0, np.sqrt(np.maximum(variance_cv, 0.0)), sd_plain)
    sd_cv = np.where(first | second, sd_cv, sd_plain)
    with np.errstate(divide="ignore", invalid="ignore"):
        reduction = np.where(first, mcse_plain[:n_rows] ** 2 / mcse_mean_cv ** 2, 1.0)

    data_vars = {
        "mean": ("label", plain_mean, {"long_name": "posterior mean, plain MCMC average"}),
        "sd": ("label", sd_plain, {"long_name": "posterior sd, plain (ddof = 1)"}),
        "mcse_mean": ("label", mcse_plain[:n_rows],
                      {"long_name": "MCSE of the plain mean, as arviz.mcse(method='mean')"}),
        "mean_cv": ("label", mean_cv, {"long_name": "posterior mean, control variates"}),
        "sd_cv": ("label", sd_cv, {"long_name": "posterior sd, control variates"}),
        "mcse_mean_cv": ("label", mcse_mean_cv,
                         {"long_name": "MCSE of mean_cv: arviz's mcse_mean of the "
                                       "cross-fitted adjusted values"}),
        "variance_reduction": ("label", reduction,
                               {"long_name": "mcse_mean^2 / mcse_mean_cv^2"}),
        "cv_applied": ("label", first,
                       {"long_name": "whether mean_cv uses the control variate (else the "
                                     "plain mean: the control variate did not lower the MCSE)"}),
    }
    attrs.update({
        "method": chosen,
        **info,
        "n_folds": n_folds_used,
        "fold_rule": ("chain c in fold c mod n_folds" if n_chain >= 2
                      else "contiguous blocks of draws"),
        "fallback_rule": "plain estimate where the cross-fitted MCSE is not lower",
        "n_fallback": int(n_rows - first.sum()),
        "n_chain": n_chain,
        "n_draw": n_draw,
        "n_parameter": d,
        "parameters": list(prepared.parameter),
        **{key: value for key, value in prepared.attrs.items()
           if isinstance(value, (str, int, float))},
    })
    if verdict is not None:
        attrs["diagnosis_verdict"] = verdict
    return xr.Dataset(data_vars, coords={"label": ("label", np.asarray(labels, dtype=object))},
                      attrs=netcdf_attrs(attrs))
