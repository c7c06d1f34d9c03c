"""Slow, obvious plain-NumPy references for SVGD and minimum-KSD estimation.

SVGD is written from Liu & Wang (2016), eq. (8) and their description of the step size
(AdaGrad with momentum, fudge 1e-6, alpha 0.9), with explicit N x N matrices of kernel
values and of kernel gradients grad_{x_j} k(x_j, x_i): no tiling, no Gram-matrix
distances, no folding of terms. Use only for small N.

``svgd_adam_reference`` is the default rule of ``stein_variational`` written out from its
documentation (docs/background.rst, "Stein variational gradient descent"): coordinates
whitened by the average Hessian read off a least-squares fit of the scores on the draws
(``numpy.linalg.lstsq``, not the covariance formula the library uses), Adam's step of
Kingma & Ba (2015), the KSD of the particles every ``ksd_every`` steps by the slow
V-statistic of tests/reference.py, backtracking to the lowest-KSD particles with half the
step when a recorded KSD is not the lowest, and the stopping rule on the lowest KSD.

The minimum-KSD reference recovers the quadratic KSD^2_U(theta) of a linear score by
evaluating ``reference.ksd_u2`` at 1 + k + k (k + 1) / 2 points and solving for its
coefficients; it never forms the sums the library uses.
"""

import itertools

import numpy as np

from reference import ksd_iid2, ksd_u2, ksd_v2


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


def whitening_reference(z, scores, floor=1e-4):
    """T with w = z @ T: T = U diag(sqrt(lambda)), U, lambda the eigenvectors and the
    absolute eigenvalues (floored at ``floor`` times the largest) of H = -(B + B^T) / 2,
    B the slopes of the least-squares fit s ~ b + B z."""
    design = np.column_stack([np.ones(len(z)), z])
    coefficients, *_ = np.linalg.lstsq(design, scores, rcond=None)  # scores = design @ coef
    slopes = coefficients[1:].T  # slopes[a, b] = d s_a / d z_b
    eigenvalues, vectors = np.linalg.eigh(-0.5 * (slopes + slopes.T))
    eigenvalues = np.abs(eigenvalues)
    eigenvalues = np.maximum(eigenvalues, floor * eigenvalues.max())
    return vectors * np.sqrt(eigenvalues)


def svgd_adam_reference(x0, score, n_steps, step_size, *, kernel="imq", whiten=True,
                        ksd_every=10, tol=0.01, patience=50):
    """The default SVGD of ``stein_variational`` (see the module docstring), slowly.

    Returns (particles after the last step, steps of the KSD record, KSD values,
    i.i.d. floors, number of backtracks, whether the stopping rule stopped the run).
    """
    med = np.median(x0, axis=0)
    scale = 1.482602218505602 * np.median(np.abs(x0 - med), axis=0)
    transform = (whitening_reference(x0 / scale, score(x0) * scale) if whiten
                 else np.eye(x0.shape[1]))
    inverse = np.linalg.inv(transform)

    def to_w(x):
        return (x / scale) @ transform

    def to_x(w):
        return (w @ inverse) * scale

    def ksd_and_floor(x, s):
        # The KSD's metric: the initial draws' robust scale, A = I (tests/reference.py).
        z, sz = x / scale, s * scale
        eye = np.eye(x.shape[1])
        return np.sqrt(ksd_v2(z, sz, eye)), np.sqrt(ksd_iid2(z, sz, eye))

    x, s = x0, score(x0)
    w = to_w(x)
    steps, ksd_values, floors = [], [], []
    best = None
    first = second = None
    t = backtracks = 0
    shrink = 1.0
    stopped = False
    for step in range(n_steps + 1):
        if step % ksd_every == 0 or step == n_steps:
            value, floor = ksd_and_floor(x, s)
            lowest = not ksd_values or value < min(ksd_values)
            steps.append(step)
            ksd_values.append(value)
            floors.append(floor)
            if lowest:
                best = (x, s)
            earlier = [k for st, k in zip(steps, ksd_values) if st <= step - patience]
            stopped = (step < n_steps and tol is not None and step >= patience
                       and min(ksd_values) > (1.0 - tol) * min(earlier))
            if not lowest and not stopped and step < n_steps:
                x, s = best
                w = to_w(x)
                first = second = None
                t = 0
                shrink *= 0.5
                backtracks += 1
        if step == n_steps or stopped:
            break
        s_w = (s * scale) @ inverse.T  # grad_w log p = T^-1 grad_z log p
        phi = svgd_direction_reference(w, s_w, median_bandwidth_reference(w), kernel)
        if first is None:
            first, second = np.zeros_like(phi), np.zeros_like(phi)
        t += 1
        first = 0.9 * first + 0.1 * phi
        second = 0.999 * second + 0.001 * phi**2
        w = w + shrink * step_size * (first / (1 - 0.9**t)) / (
            1e-8 + np.sqrt(second / (1 - 0.999**t)))
        x = to_x(w)
        s = score(x)
    return x, np.array(steps), np.array(ksd_values), np.array(floors), backtracks, stopped


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
