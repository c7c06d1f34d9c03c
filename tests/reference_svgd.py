"""Slow, obvious plain-NumPy references for SVGD and minimum-KSD estimation.

SVGD is written from Liu & Wang (2016), eq. (8) and their description of the step size
(AdaGrad with momentum, fudge 1e-6, alpha 0.9), with explicit N x N matrices of kernel
values and of kernel gradients grad_{x_j} k(x_j, x_i): no tiling, no Gram-matrix
distances, no folding of terms. Use only for small N.

The minimum-KSD reference recovers the quadratic KSD^2_U(theta) of a linear score by
evaluating ``reference.ksd_u2`` at 1 + k + k (k + 1) / 2 points and solving for its
coefficients; it never forms the sums the library uses.
"""

import itertools

import numpy as np

from reference import ksd_u2


def median_bandwidth_reference(z):
    """med^2 / log(N + 1), med^2 the median squared distance over pairs i < j."""
    n = z.shape[0]
    squared = ((z[:, None, :] - z[None, :, :]) ** 2).sum(axis=-1)
    return np.median(squared[np.triu_indices(n, k=1)]) / np.log(n + 1)


def svgd_direction_reference(z, scores, h, kernel="rbf"):
    """phi(z_i) = (1/N) sum_j [k(z_j, z_i) s(z_j) + grad_{z_j} k(z_j, z_i)]."""
    n = z.shape[0]
    diff = z[:, None, :] - z[None, :, :]  # diff[j, i] = z_j - z_i
    r2 = (diff**2).sum(axis=-1) / h
    if kernel == "rbf":
        k = np.exp(-r2)
        grad = -2.0 / h * diff * k[:, :, None]  # d/dz_j exp(-|z_j - z_i|^2 / h)
    else:
        k = (1.0 + r2) ** -0.5
        grad = -(1.0 + r2)[:, :, None] ** -1.5 * diff / h  # d/dz_j (1 + |z_j - z_i|^2/h)^-1/2
    # sum over j (the first index) for every i
    return (np.einsum("ji,jk->ik", k, scores) + grad.sum(axis=0)) / n


def svgd_reference(x0, score, n_steps, step_size, *, kernel="rbf", scale=None,
                   bandwidth=None, step_decay=None):
    """Particles after ``n_steps`` SVGD steps in z = x / scale; returns (x, bandwidths).

    ``step_decay``: the step size falls geometrically from ``step_size`` (first step) to
    ``step_size / step_decay`` (last step).
    """
    scale = np.ones(x0.shape[1]) if scale is None else scale
    z = x0 / scale
    history = None
    bandwidths = []
    for step in range(n_steps):
        s = score(z * scale) * scale
        h = median_bandwidth_reference(z) if bandwidth is None else bandwidth
        bandwidths.append(h)
        phi = svgd_direction_reference(z, s, h, kernel)
        if step == 0:
            history = phi**2
        else:
            history = 0.9 * history + 0.1 * phi**2
        epsilon = step_size
        if step_decay is not None:
            epsilon = step_size / step_decay ** (step / (n_steps - 1))
        z = z + epsilon * phi / (1e-6 + np.sqrt(history))
    return z * scale, np.array(bandwidths)


def quadratic_min_ksd_reference(x, score_linear, k, A, c=1.0, beta=-0.5):
    """argmin over theta of KSD^2_U for s_theta(x) = score_linear(x, theta), linear in theta.

    KSD^2_U(theta) = theta^T Q theta + 2 v^T theta + w exactly; Q, v, w are read off
    values of the slow reference at theta = 0, e_a, e_a + e_b.
    """
    def value(theta):
        return ksd_u2(x, score_linear(x, theta), A, c, beta)

    eye = np.eye(k)
    w = value(np.zeros(k))
    diag = np.array([value(eye[a]) for a in range(k)])  # Q_aa + 2 v_a + w
    minus = np.array([value(-eye[a]) for a in range(k)])  # Q_aa - 2 v_a + w
    q_diag = 0.5 * (diag + minus) - w
    v = 0.25 * (diag - minus)
    Q = np.diag(q_diag)
    for a, b in itertools.combinations(range(k), 2):
        both = value(eye[a] + eye[b])  # Q_aa + Q_bb + 2 Q_ab + 2 v_a + 2 v_b + w
        Q[a, b] = Q[b, a] = 0.5 * (both - q_diag[a] - q_diag[b] - 2 * v[a] - 2 * v[b] - w)
    return np.linalg.solve(Q, -v), Q
