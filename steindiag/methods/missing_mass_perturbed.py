"""``method="perturbed ksd"`` of the search (Liu, Duncan & Gandy 2023): the KSD of the
draws and of their p-invariant jumps between the modes found, with one wild bootstrap.
"""
import numpy as np

from steindiag.engine.forms import quadratic_forms
from steindiag.stats.autocorrelation import integrated_autocorrelation_time
from steindiag.stats.bootstrap import bootstrap_pvalue, bootstrap_weights, flip_probability

__all__ = ["perturbed_ksd_test"]

# Perturbed KSD test: T - 1 = 9 Metropolis-Hastings steps (their T = 10) with mode-jump
# proposals of jump scales theta (their spKSD sums over a grid in [0.5, 1.5]; theta = 1
# is left out: exact jumps between equal modes move a one-mode sample straight to p).
_PERTURB_STEPS = 9
_JUMP_SCALES = (0.5, 0.75, 1.25, 1.5)


def _symmetric_sqrt(precision):
    values, vectors = np.linalg.eigh(precision)
    return (vectors * np.sqrt(values)) @ vectors.T


def _perturb(flat, log_p, modes, theta, counted, rng):
    """``_PERTURB_STEPS`` Metropolis-Hastings steps with mode-jump proposals (p-invariant).

    Each step picks an ordered pair (i, j) of distinct modes uniformly and proposes
    x' = theta m_j + S_j^-1 S_i (x - theta m_i), S = H^(1/2); the pair (j, i) maps x' back
    to x and is picked with the same probability, so accepting with probability
    min(1, p(x') |det S_i| / (p(x) |det S_j|)) leaves p invariant (Liu, Duncan & Gandy
    2023). Returns the moved points, their log p and the number of accepted moves.
    """
    roots = [_symmetric_sqrt(mode["precision"]) for mode in modes]
    log_dets = [0.5 * np.linalg.slogdet(mode["precision"])[1] for mode in modes]
    pairs = [(i, j) for i in range(len(modes)) for j in range(len(modes)) if i != j]
    maps = [(np.linalg.solve(roots[j], roots[i]), theta * modes[j]["point"],
             theta * modes[i]["point"], log_dets[i] - log_dets[j]) for i, j in pairs]
    x, logp, accepted = flat.copy(), log_p.copy(), 0
    for _ in range(_PERTURB_STEPS):
        which = rng.integers(len(pairs), size=x.shape[0])
        proposal = np.empty_like(x)
        log_jacobian = np.empty(x.shape[0])
        for k, (matrix, to_centre, from_centre, log_det) in enumerate(maps):
            rows = which == k
            proposal[rows] = to_centre + (x[rows] - from_centre) @ matrix.T
            log_jacobian[rows] = log_det
        with np.errstate(invalid="ignore", over="ignore"):
            proposal_logp = counted.log_density(proposal)
            log_ratio = np.where(np.isfinite(proposal_logp),
                                 proposal_logp + log_jacobian - logp, -np.inf)
        accept = np.log(rng.random(x.shape[0])) < log_ratio
        x[accept], logp[accept] = proposal[accept], proposal_logp[accept]
        accepted += int(accept.sum())
    return x, logp, accepted


def perturbed_ksd_test(draws, scores, modes, counted, kernel, preconditioner, rng,
                       n_bootstrap):
    """spKSD: sum over the draws and their perturbations of N KSD^2_V, wild bootstrap.

    The same bootstrap weight vector multiplies draw i and every perturbation of draw
    i, so the replicates keep the dependence between them; each chain's weights are a
    sign chain with the flip probability ``ksd_test`` uses for it.
    """
    n_chain, n_draw, d = draws.shape
    flat = draws.reshape(-1, d)
    tau = np.array([integrated_autocorrelation_time(
        np.concatenate([draws[ch], scores[ch]], axis=1)).max() for ch in range(n_chain)])
    weights = bootstrap_weights("wild", rng, n_chain, n_draw, n_bootstrap,
                                flip_probability(tau))
    total = quadratic_forms(draws, scores, preconditioner, kernel, weights, True)[1]
    accepted = proposed = 0
    if len(modes) >= 2:
        log_p = counted.log_density(flat)
        for theta in _JUMP_SCALES:
            moved, _, n_accepted = _perturb(flat, log_p, modes, theta, counted, rng)
            accepted += n_accepted
            proposed += _PERTURB_STEPS * flat.shape[0]
            moved_scores = counted.score(moved)
            if not (np.all(np.isfinite(moved)) and np.all(np.isfinite(moved_scores))):
                raise ValueError("the score is not finite at a perturbed draw.")
            total = total + quadratic_forms(moved.reshape(draws.shape),
                                            moved_scores.reshape(draws.shape),
                                            preconditioner, kernel, weights, True)[1]
    total = total / (n_chain * n_draw)
    pvalue = float(bootstrap_pvalue(total[1:], np.asarray(total[0])))
    return pvalue, float(total[0]), (accepted / proposed if proposed else np.nan)
