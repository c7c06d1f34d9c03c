"""Public function ``control_variates``: posterior means with Stein control variates.

Data flow: input (arrays | DataArray | InferenceData | DataTree | Dataset) + score
source -> ``_control_variates_iv`` (every option checked) -> ``inputs.read_input``
(draws and scores (chain, draw, d) in the unconstrained space) -> ``inputs._columns.read_rows``
(the quantities summarised: the trace's variables in their own, constrained, space,
aligned draw by draw; user functions) -> ``methods.cv_estimate`` (cross-fitted
regressions, one factorisation per fold shared by every quantity; ArviZ's MCSE of the
plain and adjusted values) -> ``outputs.control_variates`` (a Dataset along ``label``).
"""

import numpy as np
import xarray as xr

from steindiag._containers import is_labelled
from steindiag._docs import fill_doc
from steindiag._validate import check_choice, check_int, warn_user
from steindiag.inputs import as_trace, derived_score, read_input
from steindiag.inputs._columns import read_rows
from steindiag.methods.cv_estimate import METHODS, estimate
from steindiag.outputs.control_variates import NOT_FITTING_MESSAGE, cv_dataset, premise_message

__all__ = ["control_variates"]


def _control_variates_iv(method, functions, n_folds, diagnosis, max_kernel_draws,
                         max_coefficients):
    check_choice(method, "method", METHODS)
    for name, value, low in (("n_folds", n_folds, 2), ("max_kernel_draws", max_kernel_draws, 2),
                             ("max_coefficients", max_coefficients, 1)):
        check_int(value, name, minimum=low)
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


@fill_doc
def control_variates(data, model=None, *, score=None, functions=None, method="auto",
                     var_names=None, coords=None, group="posterior", sample_dims=None,
                     filter_vars=None, labeller=None, batched=True, space=None, n_folds=4, diagnosis=None,
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
        (chain, draw); or the per-draw values as a DataArray with dims (chain, draw),
        matched to the draws by its chain and draw coordinates (refused when it does not
        hold the draws read), or an array of that shape. A single callable or DataArray
        is named by its ``__name__`` / ``name``. E.g.
        ``{"P(tau < 1)": lambda post: post["tau"] < 1}``.
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
        squared error relative to each quantity's variance, averaged in log scale),
        among those that can fit (least squares only with more training draws per fold
        than coefficients);
        ``attrs["method"]`` says which (the kernel is a candidate up to 1000 draws,
        ``"polynomial2"`` when it is well determined).
    var_names, filter_vars, coords : optional
        The trace's variables to summarise (default every variable of ``group`` with
        both sample dims, deterministics included, as ``az.summary``), and a selection
        of draws (``coords={"draw": slice(500, None)}``), ArviZ conventions (``~``
        excludes; ``filter_vars`` "like" or "regex"; as in :func:`steindiag.ksd`).
    {labeller}
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
        False where the control variate did not lower the MCSE, everywhere when the
        premise checks fail or ``diagnosis`` says the draws do not fit, and the ``_cv``
        columns then repeat the plain ones; ``cv_status`` says which ("applied", "no
        gain", "premise failed", "diagnosis: does not fit"); ``shift_z``: the fitted
        shift mean_cv - mean over the MCSE of the cross-fitted control variate (a
        premise check; NaN where not tested), ``shift_in_mcse``: the same shift over
        the plain ``mcse_mean``. ``.to_dataframe()`` gives the table. ``attrs``:
        ``premise_check`` ("passed" or "failed"), ``premise_failed`` (the failed tests
        with their z and threshold), ``premise_rule``, ``premise_level``,
        ``premise_n_tests``, ``premise_worst_ratio`` (largest ``|z|`` / threshold),
        ``stein_check_worst`` and ``stein_check_max_abs_z``; ``method`` (the one used),
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

    Premise checks: the control variates are only as good as the identity they rest
    on; with a score that does not belong to the draws (a missing log-Jacobian, a wrong
    model) or draws that do not come from p (a variational approximation), the
    regression returns the score's answer with a tiny error bar. Two kinds of zero-mean
    quantities are tested, each by z = mean / MCSE: the identity on the draws for g =
    e_j, y_j e_j and y_j^2 e_j (columns s_j, 1 + y_j s_j, 2 y_j + y_j^2 s_j, y = x -
    mean), and each applied row's shift mean_cv - mean = -mean(psi), psi the
    cross-fitted control variate (mean zero on each held-out fold). Bonferroni over
    the 3d + rows tests at family-wise level 0.001, with a Cornish-Fisher allowance for
    the skewness of a mean of few draws; when any fails, a warning names the tests and
    every row reports the plain estimate. False-alarm rates and power are measured in
    ``benchmarks/results/control_variates.md``.

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
    >>> bool((res["variance_reduction"] > 1e6).all()), res.attrs["premise_check"]
    (True, 'passed')
    """
    functions, verdict = _control_variates_iv(method, functions, n_folds, diagnosis,
                                              max_kernel_draws, max_coefficients)
    data, model = as_trace(data, model)
    # var_names picks the rows of a trace (and of a numpyro MCMC's), not the parameters.
    rows_by_name = is_labelled(data) or derived_score(data) in ("numpyro", "jax")
    pending = read_input(
        data, model, score=score, batched=batched, group=group,
        var_names=None if rows_by_name else var_names,
        filter_vars=None if rows_by_name else filter_vars, coords=coords,
        sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density, labeller=labeller,
    )
    prepared = pending.with_scores()
    if prepared.draws.shape[1] < 4:
        raise ValueError("control_variates needs at least 4 draws per chain; got "
                         f"{prepared.draws.shape[1]}.")
    labels, values, owners = read_rows(pending.origin, prepared, functions, var_names,
                                       filter_vars, labeller)
    result = estimate(values, owners, labels, prepared, method=method, n_folds=n_folds,
                      max_coefficients=max_coefficients, max_kernel_draws=max_kernel_draws,
                      trusted=verdict != "does not fit")
    if verdict == "does not fit":
        warn_user(NOT_FITTING_MESSAGE)
    elif premise_message(result):
        warn_user(premise_message(result))
    return cv_dataset(result, labels, prepared, verdict)
