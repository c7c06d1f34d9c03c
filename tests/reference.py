"""Slow, obvious plain-NumPy reference for the Stein kernels (IMQ, Gaussian, Matern) and KSD.

Written straight from the formulas of the docs' background page with a full matrix A and an
explicit N x N kernel matrix, so that it shares nothing with the fast engine
(no rotation, no tiling, no Gram-matrix tricks, no row sums). Use only for small N.
"""

import numpy as np
from scipy.optimize import nnls
from scipy.spatial.distance import pdist


def imq_stein_kernel_matrix(x, sx, y, sy, A, c=1.0, beta=-0.5):
    """k_p(x_i, y_j) for all i, j (the background page), A = Lambda^{-1} a full matrix."""
    x, sx, y, sy, A = (np.asarray(v, dtype=np.float64) for v in (x, sx, y, sy, A))
    u = x[:, None, :] - y[None, :, :]  # (n, m, d)
    Au = u @ A  # A symmetric: (A u)^T = u^T A
    q = c**2 + np.einsum("nmk,nmk->nm", Au, u)
    uA2u = np.einsum("nmk,nmk->nm", Au, Au)
    ds = sx[:, None, :] - sy[None, :, :]
    uAds = np.einsum("nmk,nmk->nm", Au, ds)
    ss = sx @ sy.T
    return (
        -4 * beta * (beta - 1) * q ** (beta - 2) * uA2u
        - 2 * beta * q ** (beta - 1) * (np.trace(A) + uAds)
        + q**beta * ss
    )


# -- Radial base kernels written in r = sqrt(u^T A u), with their r-derivatives --------------
#
# The package writes every kernel as f(t), t = r^2, and differentiates in t; here each
# kernel is g(r) = f(r^2) with g'(r), g''(r) worked out by hand in r, and the Stein kernel
# is assembled from the gradients of k(x, y) = g(r(x - y)) directly:
#
#   grad_x k = g'(r) A u / r = -grad_y k,
#   div_x grad_y k = -(g''(r) / r^2 - g'(r) / r^3) u^T A^2 u - g'(r) / r tr(A),
#
# so k_p = div_x grad_y k + grad_x k . s(y) + grad_y k . s(x) + k s(x) . s(y). At r = 0
# (x = y) the limits are g'(r) / r -> g''(0) and u^T A^2 u (...) -> 0.
# ``test_kernels.py`` checks g', g'' against finite differences of g, and this Stein kernel
# against finite differences of k.


def radial_profile(kernel, r, c=1.0, beta=-0.5):
    """(g(r), g'(r), g''(r)) of a base kernel k = g(r) as a function of r = sqrt(u^T A u)."""
    r = np.asarray(r, dtype=np.float64)
    if kernel == "imq":
        q = c**2 + r**2
        return (q**beta, 2 * beta * r * q ** (beta - 1),
                2 * beta * q ** (beta - 1) + 4 * beta * (beta - 1) * r**2 * q ** (beta - 2))
    if kernel == "gaussian":
        g = np.exp(-(r**2) / 2)
        return g, -r * g, (r**2 - 1) * g
    if kernel == "matern32":
        e = np.exp(-np.sqrt(3) * r)
        # g = (1 + sqrt3 r) e: g' = -3 r e, g'' = (3 sqrt3 r - 3) e.
        return (1 + np.sqrt(3) * r) * e, -3 * r * e, (3 * np.sqrt(3) * r - 3) * e
    if kernel == "matern52":
        e = np.exp(-np.sqrt(5) * r)
        # g = (1 + sqrt5 r + 5 r^2 / 3) e: g' = -(5/3) r (1 + sqrt5 r) e,
        # g'' = -(5/3) (1 + sqrt5 r - 5 r^2) e.
        return ((1 + np.sqrt(5) * r + 5 * r**2 / 3) * e, -(5 / 3) * r * (1 + np.sqrt(5) * r) * e,
                -(5 / 3) * (1 + np.sqrt(5) * r - 5 * r**2) * e)
    raise ValueError(kernel)


def base_kernel_matrix(x, y, A, kernel="imq", c=1.0, beta=-0.5):
    """k(x_i, y_j) = g(r_ij) for all i, j."""
    x, y, A = (np.asarray(v, dtype=np.float64) for v in (x, y, A))
    u = x[:, None, :] - y[None, :, :]
    r = np.sqrt(np.maximum(np.einsum("nmk,kl,nml->nm", u, A, u), 0.0))
    return radial_profile(kernel, r, c, beta)[0]


def stein_kernel_matrix(x, sx, y, sy, A, kernel="imq", c=1.0, beta=-0.5):
    """k_p(x_i, y_j) for all i, j from g(r), g'(r), g''(r) (see above), A a full matrix."""
    x, sx, y, sy, A = (np.asarray(v, dtype=np.float64) for v in (x, sx, y, sy, A))
    u = x[:, None, :] - y[None, :, :]
    Au = u @ A
    r = np.sqrt(np.maximum(np.einsum("nmk,nmk->nm", Au, u), 0.0))
    uA2u = np.einsum("nmk,nmk->nm", Au, Au)
    uAds = np.einsum("nmk,nmk->nm", Au, sx[:, None, :] - sy[None, :, :])
    ss = sx @ sy.T
    g, g1, g2 = radial_profile(kernel, r, c, beta)
    g2_zero = radial_profile(kernel, np.zeros(1), c, beta)[2][0]
    with np.errstate(divide="ignore", invalid="ignore"):
        g1_over_r = np.where(r > 0, g1 / r, g2_zero)
        curvature = np.where(r > 0, (g2 / r**2 - g1 / r**3) * uA2u, 0.0)
    return -curvature - g1_over_r * (np.trace(A) + uAds) + g * ss


def stein_kernel_fd(x, sx, y, sy, A, kernel="imq", c=1.0, beta=-0.5):
    """k_p(x, y) for one pair, with every derivative of k(x, y) = g(r) by central differences.

    Independent of any derivative formula: only g itself is used. The step is
    h = 1e-4 min(1, |x - y|) (the Matern 3/2 kernel is not smooth at x = y, so the step
    must be small next to the distance); accurate to about 1e-6 relative (O((h / r)^2)
    truncation, O(eps / h^2) rounding in the mixed second derivative).
    """
    x, sx, y, sy = (np.asarray(v, dtype=np.float64) for v in (x, sx, y, sy))
    d = x.shape[0]
    h = 1e-4 * min(1.0, float(np.linalg.norm(x - y)))

    def k(a, b):
        return base_kernel_matrix(a[None], b[None], A, kernel, c, beta)[0, 0]

    eye = np.eye(d) * h
    grad_x = np.array([(k(x + e, y) - k(x - e, y)) / (2 * h) for e in eye])
    grad_y = np.array([(k(x, y + e) - k(x, y - e)) / (2 * h) for e in eye])
    div = sum((k(x + e, y + e) - k(x + e, y - e) - k(x - e, y + e) + k(x - e, y - e))
              / (4 * h * h) for e in eye)
    return div + grad_x @ sy + grad_y @ sx + k(x, y) * (sx @ sy)


def _matrix(x, sx, A, c, beta, kernel):
    if kernel == "imq":
        return imq_stein_kernel_matrix(x, sx, x, sx, A, c, beta)
    return stein_kernel_matrix(x, sx, x, sx, A, kernel)


def ksd_v2(x, sx, A, c=1.0, beta=-0.5, kernel="imq"):
    """V-statistic KSD^2 = N^-2 sum_{i,j} k_p(x_i, x_j)."""
    K = _matrix(x, sx, A, c, beta, kernel)
    return K.sum() / K.shape[0] ** 2


def ksd_u2(x, sx, A, c=1.0, beta=-0.5, kernel="imq"):
    """U-statistic [N(N-1)]^-1 sum_{i != j} k_p(x_i, x_j)."""
    K = _matrix(x, sx, A, c, beta, kernel)
    n = K.shape[0]
    return (K.sum() - np.trace(K)) / (n * (n - 1))


def ksd_iid2(x, sx, A, c=1.0, beta=-0.5, kernel="imq"):
    """mean_i k_p(x_i, x_i) / N, the i.i.d. floor squared."""
    K = _matrix(x, sx, A, c, beta, kernel)
    return np.mean(np.diag(K)) / K.shape[0]


def lambda_for(name, pooled):
    """Lambda (not A) for a named preconditioner, written independently of steindiag.

    "standardize" is not a Lambda on x: it is a change of variables handled by
    ``standardize_reference``; this returns the identity for it.
    """
    n, d = pooled.shape
    if name in ("identity", "standardize"):
        return np.eye(d)
    if name in ("med", "sclmed"):
        sub = pooled[np.linspace(0, n - 1, 1000, dtype=int)] if n > 1000 else pooled
        med2 = np.median(pdist(sub)) ** 2
        return med2 * np.eye(d) if name == "med" else med2 / np.log(min(n, 1000)) * np.eye(d)
    if name == "smpcov":
        return np.atleast_2d(np.cov(pooled, rowvar=False))
    raise ValueError(name)


def standardize_reference(pooled_x, x, sx):
    """Robust scale per coordinate (1.4826 * MAD), x / scale and s * scale."""
    med = np.median(pooled_x, axis=0)
    scale = 1.482602218505602 * np.median(np.abs(pooled_x - med), axis=0)
    return x / scale, sx * scale


def reference_ksd(draws, scores, preconditioner="identity", c=1.0, beta=-0.5, kernel="imq"):
    """Everything ``steindiag.ksd`` reports, the slow way, for (chain, draw, d) arrays.

    ``kernel``: "imq" (with c, beta) or "gaussian", "matern32", "matern52".
    """
    draws = np.asarray(draws, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    n_chain, n_draw, d = draws.shape
    pooled_x = draws.reshape(-1, d)
    if isinstance(preconditioner, str):
        lam = lambda_for(preconditioner, pooled_x)
    else:
        lam = np.asarray(preconditioner, dtype=np.float64)
        lam = lam * np.eye(d) if lam.ndim == 0 else (np.diag(lam) if lam.ndim == 1 else lam)
    if isinstance(preconditioner, str) and preconditioner == "standardize":
        draws, scores = standardize_reference(pooled_x, draws, scores)
    A = np.linalg.inv(lam)
    out = {"ksd": [], "ksd_iid": [], "ksd2_u": []}
    for ch in range(n_chain):
        out["ksd"].append(np.sqrt(ksd_v2(draws[ch], scores[ch], A, c, beta, kernel)))
        out["ksd_iid"].append(np.sqrt(ksd_iid2(draws[ch], scores[ch], A, c, beta, kernel)))
        out["ksd2_u"].append(ksd_u2(draws[ch], scores[ch], A, c, beta, kernel))
    # Pooled: all draws of all chains together (cross-chain pairs included).
    px, ps = draws.reshape(-1, d), scores.reshape(-1, d)
    out["ksd_pooled"] = np.sqrt(ksd_v2(px, ps, A, c, beta, kernel))
    out["ksd_iid_pooled"] = np.sqrt(ksd_iid2(px, ps, A, c, beta, kernel))
    out["ksd2_u_pooled"] = ksd_u2(px, ps, A, c, beta, kernel)
    # Running curves by recomputing every prefix (the obvious, quadratic-per-prefix way).
    path = np.empty((n_chain, n_draw))
    path_pooled = np.empty(n_draw)
    for n in range(1, n_draw + 1):
        for ch in range(n_chain):
            path[ch, n - 1] = np.sqrt(ksd_v2(draws[ch, :n], scores[ch, :n], A, c, beta, kernel))
        path_pooled[n - 1] = np.sqrt(
            ksd_v2(draws[:, :n].reshape(-1, d), scores[:, :n].reshape(-1, d), A, c, beta, kernel)
        )
    out["path"] = path
    out["path_pooled"] = path_pooled
    return {k: np.asarray(v) for k, v in out.items()}


# -- MMD (the background page) and bootstrap quadratic forms, the explicit-matrix way -------


def imq_base_kernel_matrix(x, y, A, c=1.0, beta=-0.5):
    """k(x_i, y_j) = (c^2 + (x_i - y_j)^T A (x_i - y_j))^beta for all i, j."""
    x, y, A = (np.asarray(v, dtype=np.float64) for v in (x, y, A))
    u = x[:, None, :] - y[None, :, :]
    return (c**2 + np.einsum("nmk,kl,nml->nm", u, A, u)) ** beta


def mmd2_u(x, y, A, c=1.0, beta=-0.5, kernel="imq"):
    """Unbiased MMD^2 between samples x (m, d) and y (n, d), self-pairs left out."""
    if kernel == "imq":
        kxx = imq_base_kernel_matrix(x, x, A, c, beta)
        kyy = imq_base_kernel_matrix(y, y, A, c, beta)
        kxy = imq_base_kernel_matrix(x, y, A, c, beta)
    else:
        kxx, kyy, kxy = (base_kernel_matrix(a, b, A, kernel) for a, b in ((x, x), (y, y), (x, y)))
    m, n = len(x), len(y)
    return ((kxx.sum() - np.trace(kxx)) / (m * (m - 1))
            + (kyy.sum() - np.trace(kyy)) / (n * (n - 1)) - 2.0 * kxy.mean())


def quadratic_forms(K, W):
    """w_b^T K w_b for every column b of W (N, B), from the explicit N x N matrix K."""
    return np.einsum("nb,nb->b", W, K @ W)


def simplex_qp_exact(K):
    """min w^T K w over the simplex, exactly, with nothing from steindiag.

    K = F F^T from NumPy's symmetric eigendecomposition (eigenvalues below 1e-14 of the
    largest dropped), then SciPy's Lawson-Hanson NNLS on min ||F^T u||^2 + (1 - sum u)^2,
    u >= 0, whose solution is u* = w* / (1 + f*). Returns (w, f = w^T K w).
    """
    K = np.asarray(K, dtype=np.float64)
    n = K.shape[0]
    scale = np.trace(K) / n
    lam, vectors = np.linalg.eigh(K / scale)
    keep = lam > 1e-14 * lam.max()
    F = vectors[:, keep] * np.sqrt(lam[keep])
    A = np.vstack([F.T, np.ones((1, n))])
    b = np.zeros(A.shape[0])
    b[-1] = 1.0
    u, _ = nnls(A, b, maxiter=50 * n)
    w = u / u.sum()
    return w, float(w @ K @ w)


def project_to_simplex(v):
    """Euclidean projection onto {w >= 0, sum w = 1} (Duchi et al. 2008, sort-based)."""
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1.0
    index = np.arange(1, v.size + 1)
    rho = np.nonzero(u - cumulative / index > 0)[0][-1]
    return np.maximum(v - cumulative[rho] / (rho + 1.0), 0.0)


def simplex_qp_fista(K, n_iter=3000):
    """Accelerated projected gradient (FISTA with adaptive restart) on min w^T K w.

    A feasible point, so its objective bounds the optimum from above.
    """
    K = np.asarray(K, dtype=np.float64)
    n = K.shape[0]
    step = 1.0 / (2.0 * np.linalg.eigvalsh(K)[-1])
    w = np.full(n, 1.0 / n)
    y, t, f_old = w.copy(), 1.0, np.inf
    for _ in range(n_iter):
        w_new = project_to_simplex(y - step * 2.0 * (K @ y))
        f_new = w_new @ K @ w_new
        if f_new > f_old:  # restart the momentum (O'Donoghue & Candes 2015)
            t, y = 1.0, w.copy()
            continue
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        y = w_new + ((t - 1.0) / t_new) * (w_new - w)
        w, t, f_old = w_new, t_new, f_new
    return w, float(w @ K @ w)
