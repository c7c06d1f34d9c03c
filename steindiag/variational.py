"""Stein variational gradient descent (SVGD): ``stein_variational`` moves draws towards
the target.

Data flow: input -> ``inputs.read_input`` (read once: draws in the space where the score
is defined, for a PyMC model the unconstrained one) -> one preconditioner from the initial
draws (the KSD's metric and the standardisation) -> ``methods.variational.run_svgd``
(the coordinates SVGD runs in, from the draws and their scores; then repeating: score at
the particles, median bandwidth, ``engine.svgd.kernel_vector_sums``, O(N^2 d) time and
O(N d) memory, Adam's step, every ``ksd_every`` steps the KSD of the particles, which
decides backtracking and stopping) ->
``outputs.variational`` (the moved draws in the input's type, with the KSD of every step,
as a :class:`SteinVariational`).
"""

from steindiag._types import CorrectionWarning
from steindiag._docs import fill_doc
from steindiag._validate import (check_choice, check_int, check_real, check_rng,
                                 renamed_arguments, warn_user)
from steindiag.engine import svgd as _svgd_kernels
from steindiag.engine.progress import check_progress
from steindiag.inputs import derived_score, read_input
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.methods.variational import KERNELS, PRECONDITIONERS, STEP_RULES, run_svgd
from steindiag.outputs.variational import (SteinVariational, not_improved_message,
                                           settings_attrs, svgd_result)

__all__ = ["stein_variational", "SteinVariational"]


def _svgd_iv(score, n_steps, step_size, step_rule, step_decay, svgd_kernel,
             svgd_preconditioner, bandwidth, tol, patience, ksd_every, method, progress, keep,
             rng):
    if score is not None and not callable(score):
        raise TypeError(
            "score must be a callable (or None with a PyMC model): SVGD moves the draws, so "
            "the score is evaluated again at every step and an array of scores at the "
            f"initial draws cannot be used; got {type(score).__name__}."
        )
    check_int(n_steps, "n_steps", minimum=1)
    check_int(ksd_every, "ksd_every", minimum=1)
    check_real(step_size, "step_size", low=0.0, low_open=True)
    check_choice(step_rule, "step_rule", STEP_RULES)
    check_real(step_decay, "step_decay", low=1.0, allow_none=True)
    check_choice(svgd_kernel, "svgd_kernel", sorted(KERNELS))
    check_choice(svgd_preconditioner, "svgd_preconditioner", PRECONDITIONERS)
    check_real(tol, "tol", low=0.0, allow_none=True)
    check_int(patience, "patience", minimum=1)
    check_choice(keep, "keep", ("best", "last"))
    if isinstance(bandwidth, str):
        check_choice(bandwidth, "bandwidth", ("median",))
    else:
        check_real(bandwidth, "bandwidth", low=0.0, low_open=True)
    check_choice(method, "method", ["auto", *_svgd_kernels.METHODS])
    check_progress(progress)
    check_rng(rng)


def _score_source_iv(data, model, score, log_density):
    """SVGD evaluates the score at every step: a source that can do so."""
    derived = derived_score(data, model, score, log_density)
    if log_density is not None and derived not in ("numpyro", "jax"):
        raise TypeError(
            "stein_variational reads log_density= only to derive the score by jax.grad (a "
            "JAX-traceable log density, with score=None and no model): SVGD itself needs "
            "the score alone.")
    if score is None and model is None and derived is None:
        raise TypeError(
            "SVGD evaluates the score at every step: pass score= (a callable), a PyMC "
            "model with a trace, a JAX log_density=, or a sampler's own object (numpyro "
            "MCMC, emcee, Stan) (gradients stored in a trace, e.g. by nutpie, are valid "
            "only at the stored draws)."
        )


@fill_doc
@renamed_arguments(
    kernel=("svgd_kernel", "'rbf' or 'imq': the base kernel of the update"),
    standardize=("svgd_preconditioner", "'hessian', 'standardize' (the former "
                 "standardize=True) or 'identity' (standardize=False)"))
def stein_variational(data, model=None, *, score=None, n_steps=500, step_size=0.03,
                      step_rule="adam", step_decay=None, svgd_kernel="imq",
                      svgd_preconditioner="hessian", bandwidth="median", tol=0.01, patience=50,
                      ksd_every=10, batched=True, group="posterior", var_names=None,
                      filter_vars=None, labeller=None, coords=None, sample_dims=None, method="auto",
                      progress=None, keep="best", compile_mode=None, log_density=None,
                      rng=None):
    """Move draws towards the target with Stein variational gradient descent (SVGD).

    Parameters
    ----------
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
        The most SVGD updates to run; the run stops earlier when the KSD of the
        particles has stopped falling (``tol``, ``patience``).
    step_size : float, default 0.03
        epsilon of the step rule (see Notes): about the distance a particle moves per
        step in each coordinate SVGD works in (``svgd_preconditioner``), where the
        target's spread is about 1 with the default ``"hessian"``, and the initial
        draws' spread is 1 with ``"standardize"``; in the draws' own units with
        ``"identity"``. No tuning to the target's scale is needed.
    step_rule : {"adam", "adagrad"}, default "adam"
        ``"adam"``: Adam's step (Kingma & Ba 2015), whose steps shrink by themselves as
        the direction phi falls, with backtracking on the KSD record: when a recorded
        KSD is not the lowest so far, the particles go back to those with the lowest,
        Adam's averages restart and the step size is halved from then on.
        ``"adagrad"``: the reference implementation's AdaGrad with momentum (Liu & Wang
        2016), no backtracking; use it with ``step_decay`` (e.g. 10) and
        ``svgd_preconditioner="standardize"`` to run the former default algorithm.
    step_decay : float or None, default None
        Anneal the step size geometrically, from ``step_size`` at the first step to
        ``step_size / step_decay`` at step ``n_steps`` (None: constant).
    svgd_kernel : {"rbf", "imq"}, default "imq"
        Base kernel of the update: ``"rbf"`` ``exp(-|x - y|^2 / h)`` (Liu & Wang 2016),
        ``"imq"`` ``(1 + |x - y|^2 / h)^(-1/2)``, which decays slowly and keeps pulling
        particles that are far from the others.
    svgd_preconditioner : {"hessian", "standardize", "identity"}, default "hessian"
        The fixed coordinates SVGD runs in, in which the kernel is isotropic and the
        step is taken (the KSD record is unaffected). ``"standardize"``: z = x / scale,
        scale a robust spread of each coordinate of the initial draws (1.4826 times the
        median absolute deviation, as the ``"standardize"`` preconditioner of
        :func:`steindiag.ksd`). ``"hessian"``: z whitened by H, an estimate of the
        target's average Hessian (of -log p) from the initial draws and their scores
        (see Notes): a matrix-valued-kernel SVGD (Wang et al. 2019) in which a
        correlated or badly scaled target looks round, so that the particles spread
        along long directions as fast as along short ones. Falls back to
        ``"standardize"`` with N <= 2 (d + 1) draws (attrs ``svgd_preconditioner_used``).
        ``"identity"``: x itself.
    bandwidth : "median" or float, default "median"
        h. ``"median"``: recomputed at every step as med^2 / log(N + 1), med^2 the
        median squared distance between distinct particles (as in the reference
        implementation, whose median also counts each particle's zero distance to
        itself; over the pairs of 500 evenly spaced particles when N > 500).
        A number: fixed h, in the coordinates SVGD works in.
    tol, patience : float or None, default 0.01; int, default 50
        The stopping rule, checked at every recorded step t: stop when the lowest KSD
        recorded up to t is above (1 - ``tol``) times the lowest recorded up to step
        t - ``patience`` (it fell by less than a fraction ``tol`` over the last
        ``patience`` steps). ``tol=None``: run all ``n_steps``. The attrs
        ``svgd_stop_reason`` (``"converged"`` or ``"max_steps"``) and
        ``svgd_steps_run`` say why and when the run stopped.
    ksd_every : int, default 10
        Compute the KSD of the particles every this many steps (and at the last one):
        each costs about 0.3-0.7 of an SVGD step, so every tenth step adds under 7 %.
        The stopping rule, backtracking and ``keep="best"`` see only recorded steps.
    keep : {"best", "last"}, default "best"
        Which particles to return: those of the recorded step with the lowest KSD, the
        draws given included (step 0), or those after the last step. ``"best"`` never
        returns particles with a higher KSD than the draws given.
    batched : bool, default True
        Whether a ``score`` callable takes an (n, d) batch (True) or one (d,) draw.
    group, var_names, filter_vars, coords, sample_dims
        As in :func:`steindiag.ksd` (ArviZ's selection: ``~`` excludes, ``filter_vars``
        "like" or "regex").
    {labeller}
    method : {"auto", "fused", "gemm"}, default "auto"
        Path of the kernel sum: the same numbers to rounding.
    progress : bool or None, default None
        Progress bar on stderr (tqdm if installed). None: only when interactive and the
        run is expected to take more than a few seconds. Ctrl-C stops between steps, and
        within a step between calls of about 0.25 s of work.
    rng : int, numpy.random.Generator or None
        Accepted as by every function of steindiag; SVGD and its KSD record are
        deterministic given the draws, so no random number is drawn.

    Returns
    -------
    SteinVariational
        ``draws``: the moved draws, of the input's type:

        - an array: the same shape as ``data``;
        - a trace (InferenceData, DataTree, Dataset): ``group`` is replaced by the moved
          draws with the same chain and draw coordinates (after ``coords``). With a
          PyMC ``model`` it holds, as ``pm.sample(idata_kwargs={"include_transformed":
          True})`` would, every free variable in its constrained space and the
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
        When no particles with a lower KSD than the draws given were found: with
        ``keep="best"`` the draws given come back unchanged; with ``keep="last"`` the
        last step's particles are returned all the same (the warning names the step
        with the lowest KSD).
    UserWarning
        When posterior variables that SVGD did not move are dropped.

    Notes
    -----
    Liu & Wang (2016): the direction in the unit ball of the kernel's RKHS that
    decreases ``KL(q || p)`` fastest, estimated with the particles x_1..x_N, is

        phi(x_i) = (1/N) sum_j [ k(x_j, x_i) s(x_j) + grad_(x_j) k(x_j, x_i) ],

    s = grad log p: the first term pulls particles to high density, the second pushes
    them apart. SVGD runs in fixed coordinates w = T^T x (``svgd_preconditioner``),
    with the kernel isotropic in w and the scores s_w = T^-1 s. For ``"hessian"``,
    T = D^-1 U Lambda^(1/2), D the initial draws' robust scales and U Lambda U^T the
    eigendecomposition of H = -(B + B^T) / 2, B = Cov(s_z, z) Cov(z)^-1 the slopes of
    the least-squares fit of the standardised scores s_z on the standardised draws z
    (eigenvalues taken in absolute value, floored at 1e-4 times the largest). For a
    Gaussian target H is its precision whatever the draws; otherwise an average
    Hessian over them. A constant T keeps SVGD an SVGD (with a matrix-valued kernel,
    Wang et al. 2019), so its fixed points are those of that kernel.

    Adam's step (Kingma & Ba 2015), elementwise in w, with m_t = 0.9 m_(t-1) +
    0.1 phi_t, v_t = 0.999 v_(t-1) + 0.001 phi_t^2 (m_0 = v_0 = 0):

        w_(t+1) = w_t + epsilon_t (m_t / (1 - 0.9^t)) / (1e-8 + sqrt(v_t / (1 - 0.999^t))),

    so each coordinate moves by about epsilon per step while phi keeps its sign, and
    less once phi falls below its running scale. epsilon_t = ``step_size`` times
    ``step_decay``^(-t / (n_steps - 1)) (if given) times 2^-b after b backtracks.
    ``step_rule="adagrad"``: G_0 = phi_0^2, G_t = 0.9 G_(t-1) + 0.1 phi_t^2 and
    w_(t+1) = w_t + epsilon_t phi_t / (1e-6 + sqrt(G_t)), the reference implementation.

    Each step costs one score evaluation at N particles and O(N^2 d) time for the
    kernel sum, with O(N d) memory: the N x N kernel matrix is not stored (the median
    bandwidth uses the pairs of at most 500 evenly spaced particles, 1 MB). Each
    recorded KSD costs a KSD pass (0.3-0.7 of a step, measured), the Hessian O(N d^2 + d^3)
    once. See the Background page of the docs.

    The result is a set of particles, not independent draws: with N particles the
    error of a moment is often below the Monte Carlo error of N exact draws, but the
    bandwidth heuristic tends to under-disperse particles in high dimension (tens of
    parameters with a few hundred particles). The KSD sees this only weakly: compare
    the KSD with its floor, and the moments with another method where you can.

    The defaults, measured (benchmarks/results/svgd.md): on 4,000 mean-field
    (under-dispersed, uncorrelated) particles of a correlated Gaussian in d = 89 the KSD
    of the particles came within 5 % of its i.i.d. floor after 40 steps, in 67-87 times
    the time of one KSD pass, and the run stopped by the rule after 200 steps, the KL
    divergence of the Gaussian fitted to the particles down from 50 to 0.14 (that of
    4,000 exact draws: 0.53); 4,000 ADVI draws of a 23-parameter hierarchical logistic
    model stopped after 160 steps with every mean within 0.03 posterior sds of NUTS's
    (ADVI's: 0.76).

    References
    ----------
    Liu, Q. & Wang, D. (2016), Stein variational gradient descent: a general purpose
    Bayesian inference algorithm, NeurIPS.

    Wang, D., Tang, Z., Bajaj, C. & Liu, Q. (2019), Stein variational gradient descent
    with matrix-valued kernels, NeurIPS.

    Kingma, D. P. & Ba, J. (2015), Adam: a method for stochastic optimization, ICLR.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> rng = np.random.default_rng(0)
    >>> x = 0.5 + 2.0 * rng.standard_normal((200, 2))   # far from the N(0, I) target
    >>> res = steindiag.stein_variational(x, score=lambda z: -z)
    >>> res.draws.shape, res.improved, res.attrs["svgd_stop_reason"]
    ((200, 2), True, 'converged')
    >>> bool(np.all(np.abs(res.draws.mean(axis=0)) < 0.1))
    True
    """
    _svgd_iv(score, n_steps, step_size, step_rule, step_decay, svgd_kernel,
             svgd_preconditioner, bandwidth, tol, patience, ksd_every, method, progress, keep,
             rng)
    _score_source_iv(data, model, score, log_density)
    pending = read_input(data, model, score=score, batched=batched, group=group,
                         var_names=var_names, coords=coords, sample_dims=sample_dims,
                         filter_vars=filter_vars, labeller=labeller,
                         compile_mode=compile_mode, log_density=log_density,
                         takes_space=False)
    score_fn = pending.source.score_function()
    n_chain, n_draw, d = pending.draws.shape
    try:
        ksd_pre = make_preconditioner("standardize", pending.draws.reshape(-1, d),
                                      pending.parameter)
    except ValueError as err:
        raise ValueError(
            f"stein_variational needs initial draws that vary in every coordinate (their "
            f"spread fixes the scale of the KSD kernel and of the SVGD step): {err}"
        ) from err
    prepared = pending.with_scores()
    draws = prepared.draws.reshape(-1, d).copy()
    scores = (score_fn(draws) if prepared.attrs.get("score_source") == "nutpie"
              else prepared.scores.reshape(-1, d).copy())
    run = run_svgd(draws, scores, score_fn, ksd_pre, preconditioner=svgd_preconditioner,
                   n_steps=n_steps, step_size=step_size, step_rule=step_rule,
                   step_decay=step_decay, kind=KERNELS[svgd_kernel], bandwidth=bandwidth,
                   method=method, ksd_every=ksd_every, tol=tol, patience=patience, keep=keep,
                   progress=progress)
    settings = settings_attrs(
        svgd_kernel=svgd_kernel, bandwidth=bandwidth, n_steps=n_steps, step_size=step_size,
        step_rule=step_rule, step_decay=step_decay, preconditioner=svgd_preconditioner,
        tol=tol, patience=patience, ksd_every=ksd_every)
    result = svgd_result(run, pending.origin, pending.source, prepared, settings, keep, ksd_pre)
    message = not_improved_message(run, keep)
    if message:
        warn_user(message, CorrectionWarning)
    return result
