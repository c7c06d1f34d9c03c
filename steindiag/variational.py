"""Stein variational gradient descent (SVGD): ``stein_variational`` moves draws towards
the target.

Data flow: input -> ``inputs.read_input`` (read once: draws in the space where the score
is defined, for a PyMC model the unconstrained one) -> one preconditioner from the initial
draws (the KSD's metric and the standardisation) -> ``methods.variational.run_svgd``
(repeating: score at the particles, median bandwidth, ``engine.svgd.kernel_vector_sums``,
O(N^2 d) time and O(N d) memory, AdaGrad step, KSD of the particles) ->
``outputs.variational`` (the moved draws in the input's type, with the KSD of every step,
as a :class:`SteinVariational`).
"""

from steindiag._types import CorrectionWarning
from steindiag._validate import (check_bool, check_choice, check_int, check_real, check_rng,
                                 renamed_arguments, warn_user)
from steindiag.engine import svgd as _svgd_kernels
from steindiag.engine.progress import check_progress
from steindiag.inputs import derived_score, read_input
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.methods.variational import ADAGRAD_ALPHA, ADAGRAD_FUDGE, KERNELS, run_svgd
from steindiag.outputs.variational import (KERNEL_FORMULAS, SteinVariational,
                                           not_improved_message, svgd_result)

__all__ = ["stein_variational", "SteinVariational"]


def _svgd_iv(score, n_steps, step_size, svgd_kernel, bandwidth, standardize, ksd_every,
             method, progress, step_decay, keep, rng):
    if score is not None and not callable(score):
        raise TypeError(
            "score must be a callable (or None with a PyMC model): SVGD moves the draws, so "
            "the score is evaluated again at every step and an array of scores at the "
            f"initial draws cannot be used; got {type(score).__name__}."
        )
    check_int(n_steps, "n_steps", minimum=1)
    check_int(ksd_every, "ksd_every", minimum=1)
    check_real(step_size, "step_size", low=0.0, low_open=True)
    check_real(step_decay, "step_decay", low=1.0, allow_none=True)
    check_choice(svgd_kernel, "svgd_kernel", sorted(KERNELS))
    check_choice(keep, "keep", ("best", "last"))
    if isinstance(bandwidth, str):
        check_choice(bandwidth, "bandwidth", ("median",))
    else:
        check_real(bandwidth, "bandwidth", low=0.0, low_open=True)
    check_bool(standardize, "standardize")
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


@renamed_arguments(kernel=("svgd_kernel", "'rbf' or 'imq': the base kernel of the update"))
def stein_variational(data, model=None, *, score=None, n_steps=500, step_size=0.01,
                      svgd_kernel="imq", bandwidth="median", standardize=True, ksd_every=1,
                      batched=True, group="posterior", var_names=None, coords=None,
                      filter_vars=None,
                      sample_dims=None, method="auto", progress=None, step_decay=10.0,
                      keep="best", compile_mode=None, log_density=None, rng=None):
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
    svgd_kernel : {"rbf", "imq"}, default "imq"
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
    group, var_names, filter_vars, coords, sample_dims
        As in :func:`steindiag.ksd` (ArviZ's selection: ``~`` excludes, ``filter_vars``
        "like" or "regex").
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
    ADVI draws of the varying-intercept radon model (d = 89): KSD 0.477 -> 0.452 (the
    lowest, at step 42; 0.466 after step 500); every 4th draw of a divergent centred
    eight-schools NUTS run (d = 10): 0.402 -> 0.220. The former defaults (Gaussian kernel, constant step 0.01) raised the KSD on
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
    _svgd_iv(score, n_steps, step_size, svgd_kernel, bandwidth, standardize, ksd_every, method,
             progress, step_decay, keep, rng)
    _score_source_iv(data, model, score, log_density)
    pending = read_input(data, model, score=score, batched=batched, group=group,
                         var_names=var_names, coords=coords, sample_dims=sample_dims,
                         filter_vars=filter_vars,
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
            f"spread fixes the scale of the KSD kernel and, with standardize=True, of the "
            f"SVGD step): {err}"
        ) from err
    prepared = pending.with_scores()
    draws = prepared.draws.reshape(-1, d).copy()
    scores = (score_fn(draws) if prepared.attrs.get("score_source") == "nutpie"
              else prepared.scores.reshape(-1, d).copy())
    run = run_svgd(draws, scores, score_fn, ksd_pre, standardize=standardize, n_steps=n_steps,
                   step_size=step_size, step_decay=step_decay, kind=KERNELS[svgd_kernel],
                   bandwidth=bandwidth, method=method, ksd_every=ksd_every, keep=keep,
                   progress=progress)
    settings = {
        "svgd_kernel": svgd_kernel, "svgd_kernel_formula": KERNEL_FORMULAS[svgd_kernel],
        "svgd_bandwidth": bandwidth if isinstance(bandwidth, str) else float(bandwidth),
        "svgd_n_steps": int(n_steps), "svgd_step_size": float(step_size),
        "svgd_step_decay": "none" if step_decay is None else float(step_decay),
        "svgd_adagrad_alpha": ADAGRAD_ALPHA, "svgd_adagrad_fudge": ADAGRAD_FUDGE,
        "svgd_standardize": int(bool(standardize))}
    result = svgd_result(run, pending.origin, pending.source, prepared, settings, keep, ksd_pre)
    message = not_improved_message(run, n_steps, keep)
    if message:
        warn_user(message, CorrectionWarning)
    return result
