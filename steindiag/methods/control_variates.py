"""Stein control variates: cross-fitted regressions on functions of known mean zero (NumPy/SciPy).

For a target p with score s = grad log p and a smooth vector field g whose boundary
terms vanish, E_p[div g + g . s] = 0. Each estimator here picks g from a family, fits
its coefficients by (penalised) least squares of the function values f on the
control variates, and returns the adjusted values h = f - (div g + g . s), whose mean
estimates E_p[f]:

- ``polynomial_design``: zero-variance control variates (Mira, Solgi & Imparato 2013),
  g = grad P for a polynomial P of order 1 (columns s_j) or 2 (also 1 + x_j s_j and
  x_j s_k + x_k s_j): the design matrix, O(N p) memory;
- ``ridge_cross_fit``: least squares or ridge (South et al. 2023) on that design, cross-
  fitted over folds of draws: one thin SVD per fold, shared by every function and every
  penalty;
- ``kernel_cross_fit``: control functionals (Oates, Girolami & Chopin 2017) with the
  Stein kernel, semi-exact (South et al. 2022): a dense kernel matrix, O(N^2) memory;
- ``stein_kernel_matrix``: the IMQ Langevin Stein kernel between two sets of points;
- ``transform_controls``: function-specific control variates f s_k + df/dz_k for
  quantities f = T(z_k) of one coordinate (a constrained parameter, e.g. exp(z_k) for a
  log-transformed scale), extra columns of the polynomial design.

Arrays are flat: draws and scores (N, d), function values (N, m), fold labels (N,).
"""

import numpy as np
from scipy import linalg

__all__ = [
    "polynomial_design",
    "n_coefficients",
    "fold_labels",
    "ridge_cross_fit",
    "kernel_cross_fit",
    "stein_kernel_matrix",
    "transform_controls",
]

# Ridge penalties, relative to the number of training rows (the design's columns are
# scaled to unit variance, so n_train is the scale of the Gram matrix's eigenvalues).
RIDGE_GRID = 10.0 ** np.arange(-6.0, 2.01, 0.5)
# Kernel ridge penalties, relative to the mean of the Stein kernel's diagonal.
KERNEL_GRID = 10.0 ** np.arange(-8.0, 0.01, 1.0)


def n_coefficients(d, order, diagonal=False):
    """Number of control-variate columns: d (order 1), 2d (diagonal order 2), d(d+3)/2."""
    if order == 1:
        return d
    if diagonal:
        return 2 * d
    return d * (d + 3) // 2


def polynomial_design(draws, scores, order, *, centre=None, diagonal=False):
    """Zero-variance control variates of a polynomial P, one column per coefficient.

    Parameters
    ----------
    draws, scores : ndarray, shape (N, d)
    order : {1, 2}
    centre : ndarray (d,), optional
        Expansion point m of the quadratic, P = a . x + (x - m)^T B (x - m) / 2
        (default the draws' mean); it changes the columns' conditioning, not their span.
    diagonal : bool
        Order 2 with a diagonal B only (2d columns instead of d(d+3)/2).

    Returns
    -------
    ndarray, shape (N, p)
        Columns s_j (the coefficient a_j), then 1 + y_j s_j (B_jj), then
        y_j s_k + y_k s_j for j < k (B_jk = B_kj), with y = x - m. Each column has mean
        zero under p.
    """
    if order == 1:
        return np.array(scores, dtype=np.float64)
    if centre is None:
        centre = draws.mean(axis=0)
    centred = draws - centre
    columns = [scores, 1.0 + centred * scores]
    if not diagonal:
        d = draws.shape[1]
        upper_j, upper_k = np.triu_indices(d, k=1)
        columns.append(centred[:, upper_j] * scores[:, upper_k]
                       + centred[:, upper_k] * scores[:, upper_j])
    return np.concatenate(columns, axis=1)


def transform_controls(values, derivatives, draws, scores, coordinates, *, products=True,
                       centre=None):
    """Control variates div g + g . s for fields g carrying a quantity of one coordinate.

    Parameters
    ----------
    values, derivatives : ndarray, shape (N, q)
        Per draw, q quantities f_j = T_j(z_k(j)) and their derivatives dT_j/dz_k(j).
    draws, scores : ndarray, shape (N, d)
    coordinates : sequence of int, length q
        The coordinate k(j) each quantity depends on.
    products : bool
        With False, one column per quantity: g = f e_k. With True, 3d - 1 per quantity:
        g = f e_i (every i), g = f y_i e_i (every i) and g = f y_i e_k (i != k), y = z - m
        (f times the first-order field and the diagonal of the second-order one, plus
        the k-th row of B).
    centre : ndarray (d,), optional
        m (default the draws' mean); it changes the columns' conditioning, not their span.

    Returns
    -------
    ndarray, shape (N, q) or (N, q (3d - 1))
        Per quantity, with f' = df/dz_k: f s_k + f' (g = f e_k) first, then f s_i
        (i != k), f y_i s_i + f + [i = k] f' y_i, f y_i s_k + f' y_i (i != k). Each has
        mean zero under p.

    Notes
    -----
    div g + g . s with g = f(z_k) u(z) e_i is f' u [i = k] + f du/dz_i + f u s_i;
    E_p[div g + g . s] = 0 when f u p -> 0 at the ends of every line along z_i (f u p
    integrable: moments of f of the order used, with p's tails, are what make it so).
    For f = exp(z_k) (a positive scale) the first column is exp(z_k) (s_k + 1): the
    quantity itself enters the basis where polynomials in z fit it poorly. O(N q d)
    memory.
    """
    values = np.asarray(values, dtype=np.float64)
    derivatives = np.asarray(derivatives, dtype=np.float64)
    coordinates = [int(k) for k in coordinates]
    if not products:
        return values * scores[:, coordinates] + derivatives
    if centre is None:
        centre = draws.mean(axis=0)
    centred = draws - centre
    d = draws.shape[1]
    columns = []
    for j, k in enumerate(coordinates):
        f, df = values[:, j:j + 1], derivatives[:, j:j + 1]
        others = np.array([i for i in range(d) if i != k], dtype=int)
        diagonal = f * (centred * scores + 1.0)
        diagonal[:, k] += df[:, 0] * centred[:, k]
        columns += [f * scores[:, [k]] + df, f * scores[:, others], diagonal,
                    f * centred[:, others] * scores[:, [k]] + df * centred[:, others]]
    return np.concatenate(columns, axis=1)


def fold_labels(n_chain, n_draw, n_folds):
    """Fold of each draw, shape (chain, draw).

    With several chains, chain c is in fold c mod K (whole chains are held out, so the
    held-out draws are not neighbours of the training draws); with one chain, K
    contiguous blocks of draws.
    """
    if n_chain >= 2:
        n_folds = min(n_folds, n_chain)
        return np.repeat((np.arange(n_chain) % n_folds)[:, None], n_draw, axis=1)
    edges = np.linspace(0, n_draw, n_folds + 1).round().astype(int)
    labels = np.empty(n_draw, dtype=int)
    for k in range(n_folds):
        labels[edges[k]:edges[k + 1]] = k
    return labels[None, :]


def _scaled_training(controls, train):
    """Centre and scale the training rows' columns; constant columns get weight 0."""
    mean = controls[train].mean(axis=0)
    scale = controls[train].std(axis=0)
    keep = scale > 1e-12 * max(1.0, float(np.max(np.abs(mean), initial=0.0)))
    inverse = np.where(keep, 1.0 / np.where(keep, scale, 1.0), 0.0)
    return mean, inverse


def ridge_cross_fit(values, controls, folds, *, penalties=(0.0,)):
    """Cross-fitted (penalised) least squares of ``values`` on ``controls``.

    Parameters
    ----------
    values : ndarray, shape (N, m)
        Function values f at the draws (one column per function).
    controls : ndarray, shape (N, p)
        Control-variate columns (mean zero under p).
    folds : ndarray of int, shape (N,)
        Fold of each row; every fold is predicted from a fit on all other folds.
    penalties : sequence of float
        Ridge penalties relative to the number of training rows (0: least squares,
        minimum-norm when rank-deficient). With several, each function takes the one
        with the smallest held-out squared error summed over the folds.

    Returns
    -------
    adjusted : ndarray, shape (N, m)
        h = f - c . psi with c fitted without the row's fold (psi not centred: its
        mean under p is zero, so mean(h) estimates E_p[f]).
    penalty : ndarray, shape (m,)
        The (relative) penalty used for each function.
    held_out_error : ndarray, shape (m,)
        Held-out mean squared prediction error of the chosen penalty.

    Notes
    -----
    Per fold the training design is centred and its columns scaled to unit variance,
    Z = U S V^T (thin SVD, one per fold, shared by every function and penalty), and
    the coefficients are V diag(S / (S^2 + lambda n_train)) U^T (F - mean F): least
    squares through the SVD (never the normal equations), accurate to rounding when
    f is in the span of the control variates. Singular values below
    max(n, p) eps S_max are dropped. Time O(K n p min(n, p) + K n p m), memory
    O(n p + n m) per fold.
    """
    values = np.asarray(values, dtype=np.float64)
    controls = np.asarray(controls, dtype=np.float64)
    penalties = np.asarray(penalties, dtype=np.float64)
    n, m = values.shape
    fold_ids = np.unique(folds)
    parts = []
    errors = np.zeros((penalties.size, m))
    for k in fold_ids:
        test = folds == k
        train = ~test
        n_train = int(train.sum())
        col_mean, col_inverse = _scaled_training(controls, train)
        design = (controls[train] - col_mean) * col_inverse
        value_mean = values[train].mean(axis=0)
        u, s, vt = linalg.svd(design, full_matrices=False, lapack_driver="gesdd",
                              check_finite=False)
        cutoff = max(design.shape) * np.finfo(float).eps * (s[0] if s.size else 0.0)
        rank = int(np.sum(s > cutoff))
        u, s, vt = u[:, :rank], s[:rank], vt[:rank]
        projected = u.T @ (values[train] - value_mean)               # (r, m)
        # The held-out control variates, not centred (their mean under p is 0; centring
        # them on the training mean would add an offset), and centred for the error.
        test_design = (controls[test] * col_inverse) @ vt.T             # (n_test, r)
        test_offset = (col_mean * col_inverse) @ vt.T                  # (r,)
        test_centred = values[test] - value_mean
        # Held-out error |t - P w|^2 = |t|^2 - 2 w . (P^T t) + w^T (P^T P) w for every
        # penalty from r x r and r x m products (P the centred held-out design, n_test x r).
        centred_design = test_design - test_offset
        gram = centred_design.T @ centred_design
        cross = centred_design.T @ test_centred
        total = np.sum(test_centred ** 2, axis=0)
        factors = []
        for j, penalty in enumerate(penalties):
            factor = s / (s * s + penalty * n_train)
            weights = factor[:, None] * projected
            errors[j] += np.maximum(
                total - 2.0 * np.sum(weights * cross, axis=0)
                + np.sum(weights * (gram @ weights), axis=0), 0.0)
            factors.append(factor)
        parts.append((test, np.stack(factors), projected, test_design))
    choice = np.argmin(errors, axis=0)                               # (m,)
    adjusted = np.empty_like(values)
    for test, factors, projected, test_design in parts:
        coefficient = factors[choice].T * projected                  # (r, m)
        adjusted[test] = values[test] - test_design @ coefficient
    held_out = errors[choice, np.arange(m)] / n
    return adjusted, penalties[choice], held_out


def stein_kernel_matrix(x, score_x, y, score_y, a, *, c=1.0, beta=-0.5):
    """IMQ Langevin Stein kernel k_p(x_i, y_j) between two sets of points, dense.

    Parameters
    ----------
    x, score_x : ndarray (n, d)
    y, score_y : ndarray (m, d)
    a : ndarray (d,)
        Diagonal of A (kernel coordinates).
    c, beta : float
        IMQ base kernel (c^2 + u^T A u)^beta.

    Returns
    -------
    ndarray, shape (n, m)
        k_p(x, y) = -4 beta (beta-1) q^(beta-2) u^T A^2 u
        - 2 beta q^(beta-1) [tr(A) + u^T A (s(x) - s(y))] + q^beta s(x) . s(y),
        u = x - y, q = c^2 + u^T A u. Memory: a few (n, m) float64 arrays.
    """
    xa, ya = x * a, y * a
    norm_a = (np.sum(x * xa, axis=1)[:, None] + np.sum(y * ya, axis=1)[None, :]
              - 2.0 * xa @ y.T)
    np.maximum(norm_a, 0.0, out=norm_a)
    xaa, yaa = xa * a, ya * a
    norm_a2 = (np.sum(xa * xa, axis=1)[:, None] + np.sum(ya * ya, axis=1)[None, :]
               - 2.0 * xaa @ y.T)
    np.maximum(norm_a2, 0.0, out=norm_a2)
    # u^T A (s(x) - s(y)) = x.A s_x - x.A s_y - y.A s_x + y.A s_y
    cross = (np.sum(xa * score_x, axis=1)[:, None] - xa @ score_y.T
             - score_x @ ya.T + np.sum(ya * score_y, axis=1)[None, :])
    q = c * c + norm_a
    q_beta = q ** beta
    inv_q = 1.0 / q
    out = q_beta * (score_x @ score_y.T)
    out -= 2.0 * beta * q_beta * inv_q * (np.sum(a) + cross)
    out -= 4.0 * beta * (beta - 1.0) * q_beta * inv_q * inv_q * norm_a2
    return out


def kernel_cross_fit(values, draws, scores, folds, a, *, semi_exact=True,
                     penalties=KERNEL_GRID):
    """Cross-fitted control functionals with the IMQ Stein kernel (dense).

    Parameters
    ----------
    values : ndarray (N, m)
    draws, scores : ndarray (N, d)
        In kernel coordinates (A diagonal, ``a``).
    folds : ndarray of int (N,)
    a : ndarray (d,)
    semi_exact : bool
        Add the first-order polynomial control variates (s_j) to the constant, as in
        semi-exact control functionals: exact for every f in their span.
    penalties : sequence of float
        Kernel ridge penalties relative to the mean of the Stein kernel's diagonal;
        each function takes the one with the smallest held-out squared error.

    Returns
    -------
    adjusted, penalty, held_out_error : as :func:`ridge_cross_fit`.

    Notes
    -----
    With K the training Stein-kernel matrix, Phi = [1, s] and M = (K + lambda I)^-1:
    beta = (Phi^T M Phi)^-1 Phi^T M f and alpha = M (f - Phi beta) (so Phi^T alpha =
    0, Sard's constraint); the control variate at a held-out x is
    s(x) . beta_s + sum_j alpha_j k_p(x, x_j). One eigendecomposition of K per fold,
    shared by every function and penalty. Memory: the (n_train, n_train) kernel, its
    eigenvectors and the (n_test, n_train) cross kernel, about 8 (2 n_train + n_test)
    n_train bytes; time O(K n_train^3).
    """
    values = np.asarray(values, dtype=np.float64)
    n, m = values.shape
    penalties = np.asarray(penalties, dtype=np.float64)
    errors = np.zeros((penalties.size, m))
    parts = []
    for k in np.unique(folds):
        test = folds == k
        train = ~test
        x, sx = draws[train], scores[train]
        gram = stein_kernel_matrix(x, sx, x, sx, a)
        gram = 0.5 * (gram + gram.T)
        cross = stein_kernel_matrix(draws[test], scores[test], x, sx, a)
        scale = float(np.mean(np.diag(gram)))
        eigenvalues, vectors = linalg.eigh(gram, check_finite=False, driver="evr")
        del gram
        np.maximum(eigenvalues, 0.0, out=eigenvalues)
        n_train = x.shape[0]
        basis = np.ones((n_train, 1))
        test_basis = np.ones((int(test.sum()), 1))
        if semi_exact:
            basis = np.concatenate([basis, sx], axis=1)
            test_basis = np.concatenate([test_basis, scores[test]], axis=1)
        rotated_basis = vectors.T @ basis                      # (n, q)
        rotated_values = vectors.T @ values[train]             # (n, m)
        cross_vectors = cross @ vectors                        # (n_test, n)
        del cross
        solutions = []
        for j, penalty in enumerate(penalties):
            inverse = 1.0 / (eigenvalues + penalty * scale)
            weighted_basis = rotated_basis * inverse[:, None]
            normal = rotated_basis.T @ weighted_basis
            rhs = weighted_basis.T @ rotated_values
            beta = linalg.lstsq(normal, rhs, check_finite=False)[0]           # (q, m)
            alpha_rotated = inverse[:, None] * (rotated_values - rotated_basis @ beta)
            prediction = test_basis @ beta + cross_vectors @ alpha_rotated     # with constant
            errors[j] += np.sum((values[test] - prediction) ** 2, axis=0)
            solutions.append((beta, alpha_rotated))
        parts.append((test, test_basis, cross_vectors, solutions))
    choice = np.argmin(errors, axis=0)
    adjusted = np.empty_like(values)
    for test, test_basis, cross_vectors, solutions in parts:
        for j in np.unique(choice):
            columns = np.flatnonzero(choice == j)
            beta, alpha_rotated = solutions[j]
            control = (test_basis[:, 1:] @ beta[1:, columns]
                       + cross_vectors @ alpha_rotated[:, columns])
            adjusted[np.ix_(test, columns)] = values[np.ix_(test, columns)] - control
    held_out = errors[choice, np.arange(m)] / n
    return adjusted, penalties[choice], held_out
