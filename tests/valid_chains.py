"""Chains whose truth is known by construction, for calibrating ``steindiag.diagnose``.

Two kinds, NumPy only, every random function taking ``rng`` (a ``numpy.random.Generator``):

- valid chains: every draw is marginally an exact draw of the target p (stationary
  Gaussian AR(1) / VAR(1) chains; random-walk Metropolis and MALA started at an exact
  draw of p). A test of "the draws are from p" that rejects on them is a false alarm;
- biased samplers: the unadjusted Langevin algorithm (ULA) and its noisy-gradient version
  (SGLD), under-dispersed draws, draws of one mode of a two-mode target, a wrong score,
  a stuck chain. A test that accepts them has missed a difference that is there.

Each generator returns a :class:`Chains`: ``draws`` (chain, draw, d), the batched
``score`` ((n, d) -> (n, d)) and ``log_density`` ((n, d) -> (n,), up to a constant) of
the target the draws are diagnosed against, and whether they are valid.

Used by ``benchmarks/bench_calibration.py`` (which puts this folder on ``sys.path``) and
by ``tests/test_valid_chains.py``.
"""

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.special import logsumexp

# ------------------------------------------------------------------------------------
# Results and targets
# ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Target:
    """A distribution p with its log density, score and an exact sampler.

    Attributes
    ----------
    name : str
        Short description ("N(0, I_2)", "banana b=0.03", ...).
    dim : int
        Dimension d.
    log_density : callable
        log p up to a constant, (n, d) -> (n,).
    score : callable
        grad log p, (n, d) -> (n, d).
    sample : callable
        ``sample(rng, n)``: n independent exact draws, (n, d).
    mean : numpy.ndarray
        E_p[x], (d,).
    """

    name: str
    dim: int
    log_density: Callable
    score: Callable
    sample: Callable
    mean: np.ndarray


@dataclass(kw_only=True)
class Chains:
    """Draws of several chains and the target they are to be diagnosed against.

    Attributes
    ----------
    draws : numpy.ndarray
        (chain, draw, d).
    score, log_density : callable
        The target's score ((n, d) -> (n, d)) and log density ((n, d) -> (n,)); for a
        biased sampler, the target the sampler was meant to sample (for "wrong score",
        the wrong one).
    valid : bool
        True when every draw is marginally an exact draw of the target (a "does not fit"
        is a false alarm); False for a biased sampler (a "fits" is a miss).
    description : str
        What the draws are, in words.
    acceptance : numpy.ndarray or None
        Metropolis acceptance rate of each chain (chain,), for MCMC samplers.
    """

    draws: np.ndarray
    score: Callable
    log_density: Callable
    valid: bool
    description: str
    acceptance: np.ndarray | None = field(default=None)


def gaussian_target(mean, covariance):
    """N(mean, covariance) as a :class:`Target` (score -P (x - m), P the precision)."""
    mean = np.asarray(mean, dtype=float)
    covariance = np.atleast_2d(np.asarray(covariance, dtype=float))
    precision = np.linalg.inv(covariance)
    cholesky = np.linalg.cholesky(covariance)
    dim = mean.size

    def log_density(x):
        centred = x - mean
        return -0.5 * np.einsum("ni,ij,nj->n", centred, precision, centred)

    def score(x):
        return -(x - mean) @ precision

    def sample(rng, n):
        return mean + rng.standard_normal((n, dim)) @ cholesky.T

    return Target(name=f"N(m, S), d={dim}", dim=dim, log_density=log_density, score=score,
                  sample=sample, mean=mean)


def standard_normal_target(dim):
    """N(0, I_d) as a :class:`Target`."""

    def log_density(x):
        return -0.5 * np.einsum("nd,nd->n", x, x)

    def score(x):
        return -x

    def sample(rng, n):
        return rng.standard_normal((n, dim))

    return Target(name=f"N(0, I_{dim})", dim=dim, log_density=log_density, score=score,
                  sample=sample, mean=np.zeros(dim))


def banana_target(curvature=0.03, first_variance=100.0):
    """Haario's twisted Gaussian in d = 2.

    x1 ~ N(0, v), x2 = u + b (x1^2 - v) with u ~ N(0, 1) independent of x1 (v =
    ``first_variance``, b = ``curvature``). Hence
    log p(x) = -x1^2 / (2 v) - (x2 - b (x1^2 - v))^2 / 2 + const, and exact draws are one
    Gaussian draw and one transformation (the map (x1, u) -> (x1, x2) has Jacobian 1).
    E[x] = 0 (E[x1^2] = v).
    """
    b, v = float(curvature), float(first_variance)

    def residual(x):
        return x[:, 1] - b * (x[:, 0] ** 2 - v)

    def log_density(x):
        return -0.5 * x[:, 0] ** 2 / v - 0.5 * residual(x) ** 2

    def score(x):
        r = residual(x)
        return np.stack([-x[:, 0] / v + 2.0 * b * x[:, 0] * r, -r], axis=1)

    def sample(rng, n):
        first = np.sqrt(v) * rng.standard_normal(n)
        return np.stack([first, rng.standard_normal(n) + b * (first ** 2 - v)], axis=1)

    return Target(name=f"banana b={b:g}", dim=2, log_density=log_density, score=score,
                  sample=sample, mean=np.zeros(2))


def student_t_target(dim, degrees_of_freedom=5.0):
    """Independent Student-t coordinates with nu degrees of freedom.

    log p(x) = -(nu + 1) / 2 sum_k log(1 + x_k^2 / nu) + const; score
    -(nu + 1) x_k / (nu + x_k^2); exact draws ``rng.standard_t``.
    """
    nu = float(degrees_of_freedom)

    def log_density(x):
        return -0.5 * (nu + 1.0) * np.log1p(x ** 2 / nu).sum(axis=1)

    def score(x):
        return -(nu + 1.0) * x / (nu + x ** 2)

    def sample(rng, n):
        return rng.standard_t(nu, size=(n, dim))

    return Target(name=f"t{nu:g}, d={dim}", dim=dim, log_density=log_density, score=score,
                  sample=sample, mean=np.zeros(dim))


def multivariate_t_target(scale_matrix, degrees_of_freedom=5.0):
    """The multivariate Student-t with scale matrix S and nu degrees of freedom, centred.

    log p(x) = -(nu + d) / 2 log(1 + x^T S^-1 x / nu) + const; score
    -(nu + d) S^-1 x / (nu + x^T S^-1 x); exact draws L z / sqrt(w / nu) with L L^T = S,
    z ~ N(0, I_d) and w ~ chi^2_nu independent. Covariance nu / (nu - 2) S for nu > 2:
    heavy tails and correlation at once.
    """
    scale_matrix = np.atleast_2d(np.asarray(scale_matrix, dtype=float))
    precision = np.linalg.inv(scale_matrix)
    cholesky = np.linalg.cholesky(scale_matrix)
    dim, nu = scale_matrix.shape[0], float(degrees_of_freedom)

    def quadratic(x):
        return np.einsum("ni,ij,nj->n", x, precision, x)

    def log_density(x):
        return -0.5 * (nu + dim) * np.log1p(quadratic(x) / nu)

    def score(x):
        return -(nu + dim) * (x @ precision) / (nu + quadratic(x))[:, None]

    def sample(rng, n):
        z = rng.standard_normal((n, dim)) @ cholesky.T
        return z / np.sqrt(rng.chisquare(nu, size=n) / nu)[:, None]

    return Target(name=f"multivariate t{nu:g}, d={dim}", dim=dim, log_density=log_density,
                  score=score, sample=sample, mean=np.zeros(dim))


def gaussian_mixture_target(means, weights=None, sd=1.0):
    """sum_k w_k N(mu_k, sd^2 I) as a :class:`Target`.

    Score: the responsibilities' average of the components' scores,
    sum_k r_k(x) (mu_k - x) / sd^2 with r_k(x) = w_k N(x; mu_k) / p(x) (computed with
    log-sum-exp). Exact draws: a component index, then a Gaussian draw.
    """
    means = np.atleast_2d(np.asarray(means, dtype=float))
    n_component, dim = means.shape
    weights = (np.full(n_component, 1.0 / n_component) if weights is None
               else np.asarray(weights, dtype=float))
    log_weights = np.log(weights)
    variance = float(sd) ** 2

    def component_logs(x):
        diffs = x[:, None, :] - means[None]
        return log_weights - 0.5 * (diffs ** 2).sum(axis=2) / variance, diffs

    def log_density(x):
        return logsumexp(component_logs(x)[0], axis=1)

    def score(x):
        logs, diffs = component_logs(x)
        responsibilities = np.exp(logs - logsumexp(logs, axis=1, keepdims=True))
        return -np.einsum("nk,nkd->nd", responsibilities, diffs) / variance

    def sample(rng, n):
        component = rng.choice(n_component, size=n, p=weights)
        return means[component] + float(sd) * rng.standard_normal((n, dim))

    return Target(name=f"mixture of {n_component}, d={dim}", dim=dim,
                  log_density=log_density, score=score, sample=sample,
                  mean=weights @ means)


# ------------------------------------------------------------------------------------
# Valid chains: stationary Gaussian AR(1) / VAR(1)
# ------------------------------------------------------------------------------------


def rho_for_tau(tau):
    """Lag-1 coefficient of the AR(1) chain with integrated autocorrelation time ``tau``.

    tau = 1 + 2 sum_{k>=1} rho^k = (1 + rho) / (1 - rho), so rho = (tau - 1) / (tau + 1).
    """
    tau = np.asarray(tau, dtype=float)
    if np.any(tau < 1):
        raise ValueError(f"tau must be >= 1 (an AR(1) chain with rho >= 0), got {tau!r}")
    return (tau - 1.0) / (tau + 1.0)


def tau_for_rho(rho):
    """Integrated autocorrelation time (1 + rho) / (1 - rho) of an AR(1) chain."""
    rho = np.asarray(rho, dtype=float)
    return (1.0 + rho) / (1.0 - rho)


def ar1_paths(n_chain, n_draw, rho, *, rng):
    """Stationary AR(1) paths with N(0, 1) marginals, one coefficient per coordinate.

    z_0 ~ N(0, 1), z_t = rho z_{t-1} + sqrt(1 - rho^2) e_t with e_t ~ N(0, 1) i.i.d.

    Parameters
    ----------
    n_chain, n_draw : int
    rho : array_like, (d,)
        Coefficient of each coordinate, in (-1, 1).
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray, (chain, draw, d)

    Notes
    -----
    Exact by induction: if z_{t-1} ~ N(0, 1) then z_t is Gaussian with mean 0 and
    variance rho^2 + (1 - rho^2) = 1, and z_0 ~ N(0, 1). Every z_t is an exact N(0, 1)
    draw; lag-k correlation rho^k.
    """
    rho = np.atleast_1d(np.asarray(rho, dtype=float))
    if np.any(np.abs(rho) >= 1):
        raise ValueError(f"rho must be in (-1, 1), got {rho!r}")
    innovation_sd = np.sqrt(1.0 - rho ** 2)
    paths = np.empty((n_chain, n_draw, rho.size))
    paths[:, 0] = rng.standard_normal((n_chain, rho.size))
    innovations = rng.standard_normal((n_chain, n_draw, rho.size)) * innovation_sd
    for t in range(1, n_draw):
        paths[:, t] = rho * paths[:, t - 1] + innovations[:, t]
    return paths


def ar1_chains(n_chain, n_draw, dim, rho, *, rng):
    """Stationary AR(1) chains on N(0, I_d), every coordinate with coefficient ``rho``.

    Exact: see :func:`ar1_paths` (coordinates independent, each with N(0, 1)
    marginal, so every draw is an exact N(0, I_d) draw); autocorrelation time
    tau = (1 + rho) / (1 - rho).
    """
    target = standard_normal_target(dim)
    draws = ar1_paths(n_chain, n_draw, np.full(dim, float(rho)), rng=rng)
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True,
                  description=f"AR(1) on N(0, I_{dim}), rho={rho:.4g}, "
                              f"tau={float(tau_for_rho(rho)):.3g}")


def var1_chains(n_chain, n_draw, covariance, rho, *, rng):
    """Stationary VAR(1) chains on N(0, Sigma), coordinates mixing at different speeds.

    x_t = L z_t with L L^T = Sigma (Cholesky) and z an AR(1) path per coordinate with its
    own coefficient rho_k (:func:`ar1_paths`).

    Parameters
    ----------
    n_chain, n_draw : int
    covariance : array_like, (d, d)
        Sigma, symmetric positive definite.
    rho : array_like, (d,)
        Coefficient of each latent coordinate (some near 0: fast, some near 1: slow).
    rng : numpy.random.Generator

    Notes
    -----
    Exact: z_t ~ N(0, I) for every t (:func:`ar1_paths`), so x_t = L z_t ~ N(0, L L^T) =
    N(0, Sigma). x is a VAR(1) process, x_t = L R L^-1 x_{t-1} + L D e_t with
    R = diag(rho), D = diag(sqrt(1 - rho^2)).
    """
    covariance = np.asarray(covariance, dtype=float)
    rho = np.asarray(rho, dtype=float)
    dim = covariance.shape[0]
    if rho.shape != (dim,):
        raise ValueError(f"rho must have shape ({dim},) like the covariance, got {rho.shape}")
    target = gaussian_target(np.zeros(dim), covariance)
    cholesky = np.linalg.cholesky(covariance)
    draws = ar1_paths(n_chain, n_draw, rho, rng=rng) @ cholesky.T
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True,
                  description=f"VAR(1) on N(0, Sigma), d={dim}, "
                              f"tau from {float(tau_for_rho(rho.min())):.3g} "
                              f"to {float(tau_for_rho(rho.max())):.3g}")


def correlated_covariance(dim, correlation=0.9, sds=None):
    """Sigma_ij = s_i s_j correlation^|i - j| (an AR(1)-like Toeplitz correlation).

    ``sds`` default: log-spaced from 1 to 10 across coordinates.
    """
    sds = np.logspace(0.0, 1.0, dim) if sds is None else np.asarray(sds, dtype=float)
    lags = np.abs(np.subtract.outer(np.arange(dim), np.arange(dim)))
    return np.outer(sds, sds) * correlation ** lags


def ill_conditioned_covariance(dim, condition_number=100.0, *, rng):
    """Q diag(lambda) Q^T with eigenvalues log-spaced in [1, condition_number] and Q a
    uniformly random rotation (QR of a Gaussian matrix, signs fixed)."""
    gaussian = rng.standard_normal((dim, dim))
    q, r = np.linalg.qr(gaussian)
    q = q * np.sign(np.diag(r))
    eigenvalues = np.logspace(0.0, np.log10(condition_number), dim)
    return (q * eigenvalues) @ q.T


# ------------------------------------------------------------------------------------
# Valid chains: Metropolis-Hastings started at an exact draw
# ------------------------------------------------------------------------------------


def random_walk_metropolis(target, n_chain, n_draw, *, step, rng, proposal_scale=None):
    """Random-walk Metropolis chains on ``target`` started at exact draws.

    Proposal y = x + step * s * e, e ~ N(0, I), s = ``proposal_scale`` (d,) (default 1);
    accepted with probability min(1, p(y) / p(x)).

    Returns
    -------
    Chains
        ``draws`` (chain, draw, d): the start and n_draw - 1 transitions; ``acceptance``.

    Notes
    -----
    Exact: the proposal is symmetric, so the Metropolis kernel satisfies detailed balance
    with respect to p and leaves p invariant. The start x_0 is an exact draw of p, hence
    (by induction) so is every x_t; the draws are dependent but each is marginally p.
    """
    x = target.sample(rng, n_chain)
    scale = np.ones(target.dim) if proposal_scale is None else np.asarray(proposal_scale)
    log_p = target.log_density(x)
    draws = np.empty((n_chain, n_draw, target.dim))
    draws[:, 0] = x
    accepted = np.zeros(n_chain)
    for t in range(1, n_draw):
        proposal = x + step * scale * rng.standard_normal(x.shape)
        log_p_proposal = target.log_density(proposal)
        accept = np.log(rng.uniform(size=n_chain)) < log_p_proposal - log_p
        x = np.where(accept[:, None], proposal, x)
        log_p = np.where(accept, log_p_proposal, log_p)
        accepted += accept
        draws[:, t] = x
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True, acceptance=accepted / max(n_draw - 1, 1),
                  description=f"RWM on {target.name}, step {step:g}")


def mala(target, n_chain, n_draw, *, step, rng, proposal_scale=None):
    """Metropolis-adjusted Langevin chains on ``target`` started at exact draws.

    With M = diag(s^2) (s = ``proposal_scale``, default 1) and h = ``step``: proposal
    y = x + (h / 2) M grad log p(x) + sqrt(h) s e, e ~ N(0, I); accepted with probability
    min(1, p(y) q(x | y) / (p(x) q(y | x))), q the proposal's Gaussian density.

    Notes
    -----
    Exact: the Hastings ratio makes the kernel reversible with respect to p, which it
    therefore leaves invariant (whatever the step); started at an exact draw, every x_t
    is marginally p.
    """
    scale = np.ones(target.dim) if proposal_scale is None else np.asarray(proposal_scale)
    metric = scale ** 2

    def proposal_mean(points, scores):
        return points + 0.5 * step * metric * scores

    def log_q(to, mean):  # log q(to | from), up to a constant common to both directions
        return -0.5 * (((to - mean) / scale) ** 2).sum(axis=1) / step

    x = target.sample(rng, n_chain)
    log_p, score = target.log_density(x), target.score(x)
    draws = np.empty((n_chain, n_draw, target.dim))
    draws[:, 0] = x
    accepted = np.zeros(n_chain)
    for t in range(1, n_draw):
        forward_mean = proposal_mean(x, score)
        proposal = forward_mean + np.sqrt(step) * scale * rng.standard_normal(x.shape)
        log_p_proposal, score_proposal = target.log_density(proposal), target.score(proposal)
        log_ratio = (log_p_proposal - log_p + log_q(x, proposal_mean(proposal, score_proposal))
                     - log_q(proposal, forward_mean))
        accept = np.log(rng.uniform(size=n_chain)) < log_ratio
        x = np.where(accept[:, None], proposal, x)
        log_p = np.where(accept, log_p_proposal, log_p)
        score = np.where(accept[:, None], score_proposal, score)
        accepted += accept
        draws[:, t] = x
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True, acceptance=accepted / max(n_draw - 1, 1),
                  description=f"MALA on {target.name}, step {step:g}")


def hmc_chains(target, n_chain, n_draw, *, step, n_leapfrog, rng, jitter=0.0):
    """Hamiltonian Monte Carlo on ``target``: leapfrog with a Metropolis correction.

    Each transition draws a momentum m ~ N(0, I), runs L = ``n_leapfrog`` leapfrog steps
    of size h (``step``, times a factor drawn uniformly from [1 - jitter, 1 + jitter]
    per transition and chain) and accepts the end point with probability
    min(1, exp(-H(end) + H(start))), H(x, m) = -log p(x) + |m|^2 / 2. Started at exact
    draws.

    Notes
    -----
    Exact: the leapfrog map is volume-preserving and reversible (with the momentum
    flipped), so the Metropolis step makes the transition leave p(x) N(m; 0, I)
    invariant, and a fresh momentum leaves it invariant too; a step size drawn
    independently of the state does not change that. Started at an exact draw, every
    x_t is marginally p. With a path L h near half a period of the target's oscillation
    the draws are antithetic (negative lag-1 autocorrelation), as NUTS's often are,
    while their squares stay positively autocorrelated.
    """
    x = target.sample(rng, n_chain)
    log_p, score = target.log_density(x), target.score(x)
    draws = np.empty((n_chain, n_draw, target.dim))
    draws[:, 0] = x
    accepted = np.zeros(n_chain)
    for t in range(1, n_draw):
        h = step * (1.0 + jitter * rng.uniform(-1.0, 1.0, size=(n_chain, 1)))
        momentum = rng.standard_normal(x.shape)
        start_energy = -log_p + 0.5 * (momentum ** 2).sum(axis=1)
        position, gradient = x.copy(), score.copy()
        momentum = momentum + 0.5 * h * gradient
        for step_index in range(n_leapfrog):
            position = position + h * momentum
            gradient = target.score(position)
            if step_index < n_leapfrog - 1:
                momentum = momentum + h * gradient
        momentum = momentum + 0.5 * h * gradient
        log_p_end = target.log_density(position)
        end_energy = -log_p_end + 0.5 * (momentum ** 2).sum(axis=1)
        with np.errstate(invalid="ignore", over="ignore"):
            accept = np.log(rng.uniform(size=n_chain)) < start_energy - end_energy
        accept &= np.isfinite(end_energy)
        x = np.where(accept[:, None], position, x)
        log_p = np.where(accept, log_p_end, log_p)
        score = np.where(accept[:, None], gradient, score)
        accepted += accept
        draws[:, t] = x
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True, acceptance=accepted / max(n_draw - 1, 1),
                  description=f"HMC on {target.name}, step {step:g} x {n_leapfrog}")


def exact_hmc_gaussian(n_chain, n_draw, covariance, path_length, *, rng, jitter=0.0):
    """HMC with the exact Hamiltonian flow on N(0, Sigma), unit mass, path length T.

    In the eigenbasis Sigma = Q diag(lambda) Q^T, the flow for time T maps each
    coordinate z_k = (Q^T x)_k with fresh momentum m_k ~ N(0, 1) to
    z_k cos(T / sd_k) + sd_k m_k sin(T / sd_k), sd_k = sqrt(lambda_k). With a fixed path
    (``jitter`` 0) each z_k is a stationary AR(1) path with coefficient cos(T / sd_k),
    negative where T / sd_k is between pi / 2 and 3 pi / 2 (antithetic draws); with
    ``jitter`` j, T is drawn uniformly from [T (1 - j), T (1 + j)] at every transition
    (one for all coordinates, as NUTS's path is), which averages the coefficients of the
    fast coordinates towards 0.

    Notes
    -----
    Exact: the exact flow conserves H and volume, so no Metropolis step is needed; given
    T (drawn independently of the state), z_k' has mean 0 and variance
    sd_k^2 (cos^2 + sin^2), so x' = Q z' ~ N(0, Sigma) whenever x does, and the chains
    start at exact draws.
    """
    covariance = np.atleast_2d(np.asarray(covariance, dtype=float))
    eigenvalues, rotation = np.linalg.eigh(covariance)
    sds = np.sqrt(eigenvalues)
    target = gaussian_target(np.zeros(covariance.shape[0]), covariance)
    latent = np.empty((n_chain, n_draw, sds.size))
    latent[:, 0] = sds * rng.standard_normal((n_chain, sds.size))
    for t in range(1, n_draw):
        path = float(path_length) * (1.0 + jitter * rng.uniform(-1.0, 1.0, size=(n_chain, 1)))
        angle = path / sds
        momentum = rng.standard_normal((n_chain, sds.size))
        latent[:, t] = latent[:, t - 1] * np.cos(angle) + sds * momentum * np.sin(angle)
    draws = latent @ rotation.T
    rho = np.cos(float(path_length) / sds)
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True,
                  description=f"exact HMC on N(0, Sigma), d={covariance.shape[0]}, path "
                              f"{path_length:g} (jitter {jitter:g}), lag-1 correlations at the "
                              f"fixed path {rho.min():.2f} to {rho.max():.2f}")


def equicorrelated_covariance(dim, correlation, sds=None):
    """Sigma_ij = s_i s_j (correlation if i != j else 1): every pair equally correlated.

    ``sds`` default all 1. Eigenvalues 1 + (d - 1) correlation (once) and 1 - correlation
    (d - 1 times) for unit sds: condition number about d / (1 - correlation).
    """
    sds = np.ones(dim) if sds is None else np.asarray(sds, dtype=float)
    correlation_matrix = np.full((dim, dim), float(correlation))
    np.fill_diagonal(correlation_matrix, 1.0)
    return np.outer(sds, sds) * correlation_matrix


def iid_draws(target, n_chain, n_draw, *, rng):
    """Independent exact draws of ``target``, as (chain, draw, d) chains."""
    draws = target.sample(rng, n_chain * n_draw).reshape(n_chain, n_draw, target.dim)
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True, description=f"independent draws of {target.name}")


def student_t_ar1_chains(n_chain, n_draw, dim, degrees_of_freedom, rho, *, rng):
    """Stationary chains on independent Student-t coordinates through a Gaussian copula.

    x_t = F_nu^-1(Phi(z_t)) coordinate-wise, z an AR(1) path with coefficient ``rho``
    (:func:`ar1_paths`). With rho < 0 the draws are antithetic while their squares stay
    positively autocorrelated (as z_t^2 has lag-1 correlation rho^2), the pattern of NUTS
    output, on a target whose scores are heavy-tailed.

    Notes
    -----
    Exact: every z_t is an exact N(0, 1) draw, so Phi(z_t) is uniform and F_nu^-1 of it an
    exact t_nu draw (the probability integral transform), for every t.
    """
    from scipy import special, stats

    target = student_t_target(dim, degrees_of_freedom)
    latent = ar1_paths(n_chain, n_draw, np.full(dim, float(rho)), rng=rng)
    # Phi(z) through the tails in log space: stats.t.ppf of special.ndtr would round
    # 1 - 1e-17 to 1 for z > 8.3 (never reached here, but exact where it is).
    draws = np.where(latent > 0,
                     stats.t.isf(special.ndtr(-latent), degrees_of_freedom),
                     stats.t.ppf(special.ndtr(latent), degrees_of_freedom))
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True,
                  description=f"t{degrees_of_freedom:g} copula AR(1) on {target.name}, "
                              f"rho={rho:g}")


def multivariate_t_ar1_chains(n_chain, n_draw, scale_matrix, degrees_of_freedom, rho,
                              scale_rho, *, rng):
    """Stationary chains on a correlated multivariate Student-t: x_t = L z_t / sqrt(w_t / nu).

    z an AR(1) path per coordinate with coefficient ``rho`` (negative: antithetic
    directions), w_t = F_chi2_nu^-1(Phi(u_t)) with u an AR(1) path with coefficient
    ``scale_rho`` (positive: the radius, hence the squares and the score's size, stays
    positively autocorrelated).

    Notes
    -----
    Exact: for every t, z_t ~ N(0, I) and u_t ~ N(0, 1) are independent, so w_t is an
    exact chi^2_nu draw independent of z_t, and L z_t / sqrt(w_t / nu) an exact draw of
    :func:`multivariate_t_target`.
    """
    from scipy import special, stats

    target = multivariate_t_target(scale_matrix, degrees_of_freedom)
    cholesky = np.linalg.cholesky(np.atleast_2d(np.asarray(scale_matrix, dtype=float)))
    latent = ar1_paths(n_chain, n_draw, np.full(target.dim, float(rho)), rng=rng)
    radius = ar1_paths(n_chain, n_draw, [float(scale_rho)], rng=rng)[..., 0]
    w = np.where(radius > 0, stats.chi2.isf(special.ndtr(-radius), degrees_of_freedom),
                 stats.chi2.ppf(special.ndtr(radius), degrees_of_freedom))
    draws = (latent @ cholesky.T) / np.sqrt(w / degrees_of_freedom)[..., None]
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=True,
                  description=f"copula AR(1) on {target.name}, direction rho={rho:g}, "
                              f"radius rho={scale_rho:g}")


# ------------------------------------------------------------------------------------
# Biased samplers
# ------------------------------------------------------------------------------------


def ula_chains(target, n_chain, n_draw, *, step, rng, burn_in=0, gradient_noise=0.0):
    """Unadjusted Langevin (ULA), or SGLD with ``gradient_noise`` > 0, on ``target``.

    x' = x + h (grad log p(x) + sigma xi) + sqrt(2 h) e, xi, e ~ N(0, I), h = ``step``,
    sigma = ``gradient_noise`` (a minibatch-like error of the gradient), no Metropolis
    correction; started at exact draws of p, ``burn_in`` steps discarded.

    Notes
    -----
    Biased: without the accept/reject step the kernel does not leave p invariant. For a
    Gaussian target the stationary law is Gaussian with the same mean and a wider
    covariance (:func:`ula_gaussian_stationary`).
    """
    x = target.sample(rng, n_chain)
    draws = np.empty((n_chain, n_draw, target.dim))
    noise_sd = np.sqrt(2.0 * step)
    for t in range(burn_in + n_draw):
        drift = target.score(x)
        if gradient_noise:
            drift = drift + gradient_noise * rng.standard_normal(x.shape)
        x = x + step * drift + noise_sd * rng.standard_normal(x.shape)
        if t >= burn_in:
            draws[:, t - burn_in] = x
    kind = "SGLD" if gradient_noise else "ULA"
    noise = f", gradient noise sd {gradient_noise:g}" if gradient_noise else ""
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=False,
                  description=f"{kind} on {target.name}, step {step:g}, burn-in {burn_in}{noise}")


def ula_gaussian_stationary(mean, covariance, step, gradient_noise=0.0):
    """Stationary mean and covariance of ULA / SGLD (:func:`ula_chains`) on N(m, S).

    Returns
    -------
    mean : numpy.ndarray, (d,)
        m (unchanged).
    covariance : numpy.ndarray, (d, d)
        V = (2 h + h^2 sigma^2) (I - A^2)^-1 with A = I - h P, P = S^-1; for sigma = 0,
        V = S (I - h P / 2)^-1.

    Notes
    -----
    x' - m = A (x - m) + h sigma xi + sqrt(2 h) e is a Gaussian VAR(1): its stationary
    mean is m and its covariance solves V = A V A^T + (2 h + h^2 sigma^2) I. A is
    symmetric and commutes with P, so V = (2 h + h^2 sigma^2)(I - A^2)^-1, and
    I - A^2 = h P (2 I - h P). Stationary when every eigenvalue of h P is in (0, 2).
    """
    covariance = np.atleast_2d(np.asarray(covariance, dtype=float))
    dim = covariance.shape[0]
    precision = np.linalg.inv(covariance)
    transition = np.eye(dim) - step * precision
    eigenvalues = np.linalg.eigvalsh(step * precision)
    if eigenvalues.max() >= 2.0:
        raise ValueError(f"step {step} too large: h * lambda_max(P) = {eigenvalues.max():.3g} "
                         ">= 2, ULA has no stationary law")
    innovation_variance = 2.0 * step + step ** 2 * gradient_noise ** 2
    stationary = innovation_variance * np.linalg.inv(np.eye(dim) - transition @ transition)
    return np.asarray(mean, dtype=float), 0.5 * (stationary + stationary.T)


def shrunk_draws(target, n_chain, n_draw, *, rng, shrink=0.8):
    """Independent exact draws pulled towards the mean: m + shrink (x - m).

    Under-dispersed (the covariance is shrink^2 times p's); no autocorrelation.
    """
    draws = target.sample(rng, n_chain * n_draw).reshape(n_chain, n_draw, target.dim)
    draws = target.mean + shrink * (draws - target.mean)
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=False,
                  description=f"exact draws of {target.name} shrunk {shrink:g} to the mean")


def one_mode_draws(n_chain, n_draw, dim, *, rng, separation=4.0, rho=0.0):
    """Every chain in one mode of 0.5 N(-a e_1, I) + 0.5 N(a e_1, I) (a = ``separation``).

    The draws are a stationary AR(1) path (coefficient ``rho``; 0: independent) of the
    right component N(a e_1, I): half of p's mass is never visited. Diagnosed against
    the mixture's score and log density.
    """
    means = np.zeros((2, dim))
    means[0, 0], means[1, 0] = -separation, separation
    target = gaussian_mixture_target(means)
    draws = ar1_paths(n_chain, n_draw, np.full(dim, float(rho)), rng=rng) + means[1]
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=False,
                  description=f"one mode (+{separation:g}) of a two-mode mixture, d={dim}, "
                              f"rho={rho:g}")


def split_mode_chains(n_chain, n_draw, dim, *, rng, separation=4.0, rho=0.0, fraction=0.5):
    """Chains each in one mode of w N(-a e_1, I) + (1 - w) N(a e_1, I) (a = ``separation``).

    n_left = max(1, round(``fraction`` C)) chains, chosen at random, are a stationary AR(1)
    path (coefficient ``rho``) of the left component, the others of the right one, and
    the target's weight w = n_left / C: the pooled draws hold each mode's share of the
    mass, but no chain moves between the modes, so the chains disagree. KSD is nearly
    blind to this (near a mode the mixture's score is that mode's); the test that the
    chains agree is not. Diagnosed against the mixture's score and log density.
    """
    n_left = max(1, int(round(fraction * n_chain)))
    means = np.zeros((2, dim))
    means[0, 0], means[1, 0] = -separation, separation
    target = gaussian_mixture_target(means, weights=[n_left / n_chain, 1 - n_left / n_chain])
    draws = ar1_paths(n_chain, n_draw, np.full(dim, float(rho)), rng=rng) + means[1]
    left = rng.choice(n_chain, size=n_left, replace=False)
    draws[left] += means[0] - means[1]
    return Chains(draws=draws, score=target.score, log_density=target.log_density,
                  valid=False,
                  description=f"{n_left} of {n_chain} chains in the mode -{separation:g} e1, "
                              f"the others in +{separation:g} e1, d={dim}, rho={rho:g}")


def wrong_score_banana(n_chain, n_draw, *, rng, curvature=0.03, assumed_curvature=0.0,
                       first_variance=100.0):
    """Exact independent draws of a banana, diagnosed with another banana's score.

    Draws of :func:`banana_target` (``curvature``, ``first_variance``); score and log
    density of the banana with ``assumed_curvature`` and the same first variance (0: the
    Gaussian N(0, diag(v, 1))).
    """
    truth = banana_target(curvature, first_variance)
    assumed = banana_target(assumed_curvature, first_variance)
    draws = truth.sample(rng, n_chain * n_draw).reshape(n_chain, n_draw, 2)
    return Chains(draws=draws, score=assumed.score, log_density=assumed.log_density,
                  valid=False,
                  description=f"exact banana b={curvature:g} draws, score of "
                              f"b={assumed_curvature:g}")


def stuck_chain(n_chain, n_draw, dim, *, rng, rho=0.0):
    """AR(1) chains on N(0, I_d) of which the last stays at its first draw throughout."""
    chains = ar1_chains(n_chain, n_draw, dim, rho, rng=rng)
    draws = chains.draws
    draws[-1] = draws[-1, 0]
    return Chains(draws=draws, score=chains.score, log_density=chains.log_density,
                  valid=False,
                  description=f"{n_chain - 1} AR(1) chains (rho={rho:g}) on N(0, I_{dim}) "
                              "and one constant chain")


def nearly_stuck_chain(n_chain, n_draw, dim, *, rng, rho=0.5, offset=6.0, move=1e-5):
    """Valid AR(1) chains on N(0, I_d) and a last one that sits ``offset`` sd out in every
    coordinate and moves ``move`` per step (a Gaussian random walk of that step size).

    The case of issue 39: a chain that barely moves, far out, is not sampling the target;
    its draws are distinct (no two equal), so equality does not find it.
    """
    chains = ar1_chains(n_chain, n_draw, dim, rho, rng=rng)
    draws = chains.draws
    steps = move * rng.standard_normal((n_draw, dim))
    draws[-1] = offset + np.cumsum(steps, axis=0)
    return Chains(draws=draws, score=chains.score, log_density=chains.log_density,
                  valid=False,
                  description=f"{n_chain - 1} AR(1) chains (rho={rho:g}) on N(0, I_{dim}) and "
                              f"one {offset:g} sd out moving {move:g} per step")
