"""Nyström KSD through the base kernel's landmarks: the estimator of ``ksd`` and ``ksd_path``.

The Stein kernel is an inner product in H^d (H the base kernel's RKHS):
k_p(x, y) = <xi(x), xi(y)>, xi_l(x) = s_l(x) k(x, .) + d/dx_l k(x, .). Its Nyström
approximation here projects each coordinate of xi onto the span of the base kernel at m
landmarks z_1..z_m, a space of m d functions (the Stein-kernel Nyström of
``engine.nystrom``, used by the test, projects onto m functions only). With
K_zz = k(Z, Z) = U Lambda U^T, H = U_r Lambda_r^(-1/2) (m, r) and Kp = H H^T:

    b(x) = f s^T + 2 g (a x)^T - 2 diag(g) (a Z)       (m, d), f = k(x, Z), g = f'(t(x, Z))
    <P xi(x), P xi(y)> = tr(b(x)^T Kp b(y)),          KSD^2 part  |H^T sum_i b(x_i)|_F^2

(A = diag(a) in kernel coordinates; see the Background page of the docs, "Nyström
KSD"). The sum over draws of b is one O(N m d) pass of matrix products. The pairs that
the projection resolves worst, each draw with itself and with its chain's L nearest
neighbours in time, are exact: their k_p is computed and their projected products
removed. Those projected products need O(m^2) per draw; ``ksd`` computes them on a
random sample of windows of draws (all of them when the cost is small) and scales the
sum up by the ratio to the exact values of the same pairs, ``ksd_path`` on every draw.
The pairs of two landmarks are exact too (their projected products are not centred).

Data flow: draws, scores (chain, draw, d), preconditioner, kernel -> ``BaseLandmarks``
(rng, K_zz, H) -> blocks of draws (every chain): sums of b, exact near pairs ->
windows (or all draws): projected near pairs -> the four arrays of
``stats.ksd.cumulative_sums``. Nothing here imports xarray and nothing validates input.
"""

from dataclasses import dataclass

import numpy as np

from steindiag.engine.dask import single_threaded
from steindiag.engine.nystrom import (
    backend_map, cross_stein_block, draw_landmarks, inverse_root, lag_pair_gaps, landmark_attrs,
)
from steindiag.engine.row_sums import stein_kernel_diagonal
from steindiag.kernels import _stein

__all__ = ["BaseLandmarks", "choose_base_landmarks", "base_cumulative_sums", "SAMPLE_RULE"]

# Draws per block of the passes over all draws (of one chain, or of several short
# chains): k(X, Z) and f' take 2 * 8 m _BLOCK_DRAWS bytes (8 MB at m = 500).
_BLOCK_DRAWS = 1024
# Draws of one chain per sampling window of the projected near pairs (fewer, down to
# _MIN_WINDOW, when the chains are many).
_WINDOW = 256
_MIN_WINDOW = 16
# Flops of the projected near pairs (about 12 m^2 + 4 m d + 2 (L + 1)(9 m + 4 r) a draw)
# that ``ksd`` spends on all draws; above it, on a random sample of windows of that cost
# (at least _MIN_SAMPLED draws).
_SAMPLE_FLOPS = 2e11
_MIN_SAMPLED = 8192
SAMPLE_RULE = ("projected products of the exact near pairs on every draw when they cost at "
               "most 2e11 flops, else on a simple random sample (rng) of windows of 256 "
               "draws of each chain (fewer, down to 16, with many chains; the same number "
               "in every chain, at least 8192 draws over all, more when the 2e11 flops "
               "allow), each chain's sum estimated by the ratio to the exact values of the "
               "same pairs, known for every draw")
# Pairs with t below _NEAR (|x|^2 + |z|^2) get t from differences (in chunks of
# _NEAR_CHUNK pairs), not from the product form.
_NEAR = 1e-6
_NEAR_CHUNK = 65536
# Memory of the (n, r, d) running sums of the path, per piece of rows.
_PATH_BYTES = 32 * 2**20


def _profile(kernel_kind, params, t):
    """(f(t), f'(t)) of the base kernel, in place of ``t`` where possible."""
    kind = len(kernel_kind) - 1
    if kind == _stein.IMQ:
        c2, beta = float(params[0]), float(params[1])
        q = np.add(t, c2, out=t)
        if beta == -0.5:
            f = np.sqrt(q)
            np.reciprocal(f, out=f)
        else:
            f = q**beta
        g = np.divide(f, q, out=q)
        g *= beta
        return f, g
    if kind == _stein.GAUSSIAN:
        f = np.exp(-0.5 * t)
        return f, -0.5 * f
    r = np.sqrt(t)
    if kind == _stein.MATERN32:
        e = np.exp(-np.sqrt(3.0) * r)
        return (1.0 + np.sqrt(3.0) * r) * e, -1.5 * e
    e = np.exp(-np.sqrt(5.0) * r)
    return ((1.0 + np.sqrt(5.0) * r + (5.0 / 3.0) * t) * e,
            -(5.0 / 6.0) * (1.0 + np.sqrt(5.0) * r) * e)


@dataclass(kw_only=True)
class BaseLandmarks:
    """The m landmarks, the projection H and the constants a block of draws needs.

    Attributes
    ----------
    index : ndarray (m,) int64
        Flat chain-major indices (chain * n_draw + draw) of the landmarks.
    z : ndarray (m, d)
        The landmarks in kernel coordinates; ``z_root`` = sqrt(a) z - ``center`` (the
        mean of sqrt(a) z; distances are Euclidean there), ``z_sq`` its squared row
        norms, ``z_a`` = a z.
    h : ndarray (m, r)
        U_r Lambda_r^(-1/2) of K_zz (eigenvalues above ``EIGEN_CUTOFF`` times the largest).
    w : ndarray (m, m)
        Kp * (z_a z_a^T) (elementwise), the quadratic form of the diag(g) part of b.
    a : ndarray (d,)
        The diagonal of A in kernel coordinates.
    """

    index: np.ndarray
    z: np.ndarray
    z_scores: np.ndarray
    z_root: np.ndarray
    center: np.ndarray
    z_sq: np.ndarray
    z_a: np.ndarray
    h: np.ndarray
    w: np.ndarray
    a: np.ndarray
    a_stein: np.ndarray
    isotropic: bool
    trace_a: float
    kind: tuple
    params: np.ndarray
    n_lags: int = 0
    n_sampled: int = 0

    @property
    def rank(self):
        return self.h.shape[1]

    def attrs(self):
        """Attributes that say how the result was computed and reproduce the landmarks."""
        return {
            **landmark_attrs(self.index, self.rank, self.n_lags),
            "nystrom_features": ("base kernel at the landmarks, one function per landmark "
                                 "and coordinate (m d functions)"),
            "near_pair_draws_sampled": int(self.n_sampled),
            "near_pair_sample_rule": SAMPLE_RULE,
        }

    def values(self, x):
        """(f, g) = (k(x, Z), f'(t(x, Z))), each (n, m), for points x (n, d) in kernel coordinates."""
        x_root = x * np.sqrt(self.a) - self.center
        x_sq = np.einsum("nk,nk->n", x_root, x_root)
        t = x_root @ self.z_root.T
        t *= -2.0
        t += x_sq[:, None]
        t += self.z_sq[None, :]
        # The product form loses digits for near pairs (t small against |x|^2 + |z|^2):
        # those are recomputed from differences, so a draw that is a landmark gets t = 0.
        # Rows whose smallest t is small are searched (few: the landmarks' own rows).
        scale = x_sq + self.z_sq.max()
        rows = np.nonzero(t.min(axis=1) < _NEAR * scale)[0]
        if rows.size:
            sub_rows, cols = np.nonzero(t[rows] < _NEAR * scale[rows, None])
            for k in range(0, sub_rows.size, _NEAR_CHUNK):
                i, j = rows[sub_rows[k:k + _NEAR_CHUNK]], cols[k:k + _NEAR_CHUNK]
                u = x_root[i] - self.z_root[j]
                t[i, j] = np.einsum("nk,nk->n", u, u)
        np.maximum(t, 0.0, out=t)
        return _profile(self.kind, self.params, t)

    def b_sums(self, x, s):
        """sum over draws of b(x) for each chain: x, s (chain, n, d) -> (chain, m, d)."""
        n_chain, n, d = x.shape
        f, g = self.values(x.reshape(-1, d))
        f = f.reshape(n_chain, n, -1)
        g = g.reshape(n_chain, n, -1)
        out = np.matmul(f.transpose(0, 2, 1), s)
        out += 2.0 * np.matmul(g.transpose(0, 2, 1), x * self.a)
        out -= 2.0 * g.sum(axis=1)[:, :, None] * self.z_a
        return out

    def draw_vectors(self, x, s):
        """Per-draw quantities of the projected products (``projected_products``) of
        draws x, scores s (chain, n, d): each (chain, n, .)."""
        n_chain, n, d = x.shape
        f, g = self.values(x.reshape(-1, d))
        x_a = (x * self.a).reshape(-1, d)
        alpha = f @ self.h
        gamma = g @ self.h
        flat = {
            "alpha": alpha, "gamma": gamma, "p": alpha @ self.h.T, "q": gamma @ self.h.T,
            "wg": g @ self.w, "g": g, "zs": s.reshape(-1, d) @ self.z_a.T,
            "zx": x_a @ self.z_a.T, "s": s.reshape(-1, d), "x_a": x_a,
        }
        return {key: value.reshape(n_chain, n, -1) for key, value in flat.items()}


def projected_products(v, lag):
    """<P xi(x_t), P xi(x_(t-lag))>, (chain, n - lag) for t = lag..n-1, from
    ``draw_vectors`` of n consecutive draws of each chain.

    tr(b_i^T Kp b_j) written out (i = t, j = t - lag), with alpha = H^T f, gamma = H^T g,
    p = Kp f, q = Kp g, zs = (a Z) s, zx = (a Z)(a x):
    (alpha_i.alpha_j)(s_i.s_j) + 2 (alpha_i.gamma_j)(s_i.x_aj) + 2 (gamma_i.alpha_j)(x_ai.s_j)
    + 4 (gamma_i.gamma_j)(x_ai.x_aj) - 2 sum(p_i g_j zs_i) - 2 sum(p_j g_i zs_j)
    - 4 sum(q_i g_j zx_i) - 4 sum(q_j g_i zx_j) + 4 g_i.(W g_j).
    """
    n = v["alpha"].shape[1]
    i = (slice(None), slice(lag, n))
    j = (slice(None), slice(0, n - lag))

    def dot(name_i, name_j):
        return np.einsum("cnk,cnk->cn", v[name_i][i], v[name_j][j])

    def triple(first, second, third, left, right):
        return np.einsum("cnk,cnk,cnk->cn", v[first][left], v[second][right], v[third][left])

    out = dot("alpha", "alpha") * dot("s", "s")
    out += 2.0 * dot("alpha", "gamma") * dot("s", "x_a")
    out += 2.0 * dot("gamma", "alpha") * dot("x_a", "s")
    out += 4.0 * dot("gamma", "gamma") * dot("x_a", "x_a")
    out -= 2.0 * triple("p", "g", "zs", i, j)
    out -= 2.0 * triple("p", "g", "zs", j, i)
    out -= 4.0 * triple("q", "g", "zx", i, j)
    out -= 4.0 * triple("q", "g", "zx", j, i)
    out += 4.0 * dot("g", "wg")
    return out


def choose_base_landmarks(draws, scores, pre, kernel, n_landmarks, rng):
    """Draw ``n_landmarks`` landmarks with ``rng`` (the rule of ``engine.nystrom``) and build H."""
    d = draws.shape[2]
    index, z, z_scores = draw_landmarks(draws, scores, pre, n_landmarks, rng)
    a_stein = np.asarray(pre.a, dtype=np.float64)
    a = np.broadcast_to(a_stein, (d,)).astype(np.float64) if pre.isotropic else a_stein.copy()
    z_root = z * np.sqrt(a)
    center = z_root.mean(axis=0)
    z_root = np.ascontiguousarray(z_root - center)
    u = z_root[:, None, :] - z_root[None, :, :]
    gram, _ = _profile(kernel.numba_kind, kernel.numba_params, np.einsum("ijk,ijk->ij", u, u))
    h = inverse_root(gram, "the landmarks' base kernel matrix")
    z_a = np.ascontiguousarray(z * a)
    return BaseLandmarks(
        index=index, z=z, z_scores=z_scores, z_root=z_root, center=center,
        z_sq=np.einsum("mk,mk->m", z_root, z_root), z_a=z_a, h=h,
        w=(h @ h.T) * (z_a @ z_a.T), a=a, a_stein=a_stein, isotropic=bool(pre.isotropic),
        trace_a=float(pre.trace_a), kind=kernel.numba_kind,
        params=np.asarray(kernel.numba_params, dtype=np.float64),
    )


def landmark_pair_gaps(land, n_draw):
    """k_p - <P xi, P xi> over the pairs of two different landmarks outside the band of
    exact near pairs: (gaps (m, m), chain (m,), draw (m,)), 0 on excluded pairs.

    The projection depends on the landmarks, so their pairs' projected products are not
    centred like those of other pairs (under the target, E <P xi(x), P xi(y)> = 0 for a
    draw y independent of the landmarks and of x, but not for two landmarks): left
    projected, these m (m - 1) pairs bias the estimate by about m^2 / N relative to the
    diagonal. They are made exact: O(m^2 d) for k_p, O(m^2 (m + r)) for the products.
    """
    chain, draw = np.divmod(land.index, n_draw)
    exact = np.empty((land.index.size, land.index.size))
    cross_stein_block(np.ascontiguousarray(land.z.T[None]),
                      np.ascontiguousarray(land.z_scores.T[None]), land.a_stein, land.isotropic,
                      land.kind, land.params, land.trace_a, land.z, land.z_scores, exact)
    v = {key: value[0] for key, value in land.draw_vectors(land.z[None], land.z_scores[None]).items()}
    ps = v["p"] * v["zs"]
    qx = v["q"] * v["zx"]
    projected = ((v["alpha"] @ v["alpha"].T) * (v["s"] @ v["s"].T)
                 + 2.0 * (v["alpha"] @ v["gamma"].T) * (v["s"] @ v["x_a"].T)
                 + 2.0 * (v["gamma"] @ v["alpha"].T) * (v["x_a"] @ v["s"].T)
                 + 4.0 * (v["gamma"] @ v["gamma"].T) * (v["x_a"] @ v["x_a"].T)
                 - 2.0 * (ps @ v["g"].T + v["g"] @ ps.T)
                 - 4.0 * (qx @ v["g"].T + v["g"] @ qx.T)
                 + 4.0 * (v["g"] @ v["wg"].T))
    gaps = exact - projected
    band = (chain[:, None] == chain[None]) & (np.abs(draw[:, None] - draw[None]) <= land.n_lags)
    gaps[band] = 0.0
    return gaps, chain, draw


def _exact_near(land, x, s, n_prefix):
    """Exact k_p of each draw with itself and (both orders) with its L predecessors.

    ``x``, ``s`` (chain, n, d): consecutive draws of each chain in kernel coordinates, the
    first ``n_prefix`` only partners. Returns (diagonal, near sums), each (chain, n - n_prefix).
    """
    n_chain, n, _ = x.shape
    diagonal = stein_kernel_diagonal(np.einsum("cnk,cnk->cn", s, s)[:, n_prefix:], land.kind,
                                     land.params, land.trace_a)
    near = diagonal.copy()
    if land.n_lags > 0:
        gaps = np.empty((n - n_prefix, land.n_lags))
        no_features = np.zeros((n, 0))
        for c in range(n_chain):
            lag_pair_gaps(np.ascontiguousarray(x[c]), np.ascontiguousarray(s[c]), no_features,
                          land.a_stein, land.isotropic, land.kind, land.params, land.trace_a,
                          n_prefix, gaps)
            near[c] += 2.0 * gaps.sum(axis=1)
    return diagonal, near


def _projected_near(land, v, n_prefix):
    """Projected products of each draw with itself and its L predecessors, (chain, n - n_prefix)."""
    n = v["alpha"].shape[1]
    out = projected_products(v, 0)[:, n_prefix:]
    for lag in range(1, min(land.n_lags, n - 1) + 1):
        products = projected_products(v, lag)  # entries for t = lag..n-1
        start = max(n_prefix, lag)
        out[:, start - n_prefix:] += 2.0 * products[:, start - lag:]
    return out


def _block_plan(n_chain, n_draw):
    """Blocks (c0, c1, t0, t1) of the pass over all draws, chain-major: 1024 draws of one
    chain, or several whole chains of fewer draws (many-chain samplers)."""
    if n_draw >= _BLOCK_DRAWS:
        return [(c, c + 1, t0, min(n_draw, t0 + _BLOCK_DRAWS))
                for c in range(n_chain) for t0 in range(0, n_draw, _BLOCK_DRAWS)]
    group = max(1, _BLOCK_DRAWS // n_draw)
    return [(c0, min(n_chain, c0 + group), 0, n_draw) for c0 in range(0, n_chain, group)]


def _pass_block(land, pre, draws, scores, c0, c1, t0, t1):
    """Draws t0..t1 of chains c0..c1: (b sums (chains, m, d), exact diagonal sums
    (chains,), exact near sums (chains,))."""
    lo = max(0, t0 - land.n_lags)
    x, s = pre.to_kernel_coordinates(draws[c0:c1, lo:t1], scores[c0:c1, lo:t1])
    b = land.b_sums(x[:, t0 - lo:], s[:, t0 - lo:])
    diagonal, near = _exact_near(land, x, s, t0 - lo)
    return b, diagonal.sum(axis=1), near.sum(axis=1)


def _window_task(land, pre, draws, scores, c0, c1, w0, w1):
    """Sums over draws w0..w1 of chains c0..c1 of their projected near products and of
    the same pairs' exact k_p: ((chains,), (chains,))."""
    lo = max(0, w0 - land.n_lags)
    x, s = pre.to_kernel_coordinates(draws[c0:c1, lo:w1], scores[c0:c1, lo:w1])
    _, near = _exact_near(land, x, s, w0 - lo)
    return (_projected_near(land, land.draw_vectors(x, s), w0 - lo).sum(axis=1),
            near.sum(axis=1))


def _window_plan(land, n_chain, n_draw, d, rng):
    """Windows (c0, c1, w0, w1) whose projected near products are computed, and whether
    they are a sample; every draw when affordable.

    Sampled: the same number k of windows in every chain, a simple random sample of its
    windows; windows are shorter than 256 draws when the chains are many.
    """
    m, r = land.z.shape[0], land.rank
    per_draw = 12.0 * m * m + 4.0 * m * d + 2.0 * (land.n_lags + 1) * (9.0 * m + 4.0 * r)
    n_total = n_chain * n_draw
    budget = max(_MIN_SAMPLED, int(_SAMPLE_FLOPS / per_draw))
    if budget >= n_total:
        land.n_sampled = n_total
        return _block_plan(n_chain, n_draw), False
    width = int(min(_WINDOW, max(_MIN_WINDOW, budget // n_chain)))
    starts = np.arange(0, n_draw, width)
    n_windows = starts.size
    k = min(n_windows, max(1, -(-budget // (n_chain * width))))
    plan = []
    for c in range(n_chain):
        for w in np.sort(rng.choice(n_windows, size=k, replace=False)):
            plan.append((c, c + 1, int(starts[w]), int(min(n_draw, starts[w] + width))))
    land.n_sampled = int(sum(w1 - w0 for _, _, w0, w1 in plan))
    return plan, True


def _scale_up(projected, near_sampled, near, n_draw, windows, n_chain):
    """Each chain's projected near products over all its draws, from its sampled windows.

    Ratio estimator with the exact near sums as the auxiliary variable (known for every
    draw): projected ~ near * (projected / exact over the sampled windows). The two
    follow each other draw by draw (the projection keeps a similar fraction of each
    pair), so the ratio varies far less than the window sums themselves; its bias is of
    order 1 / windows sampled. Where the sampled exact sum is not positive, the plain
    expansion estimator (windows / sampled) is used instead.
    """
    drawn = np.zeros(n_chain)
    for c0, c1, w0, w1 in windows:
        drawn[c0:c1] += w1 - w0
    ratio_ok = near_sampled > 0
    out = projected * n_draw / drawn
    out[ratio_ok] = near[ratio_ok] * projected[ratio_ok] / near_sampled[ratio_ok]
    return out


def base_cumulative_sums(draws, scores, pre, land, rng, path=True, backend=None):
    """Nyström counterpart of ``stats.ksd.cumulative_sums`` (the same four arrays).

    ``per_chain`` (chain, n), ``pooled`` (n,): sums of k_p over all ordered pairs of the
    first n draws (of each chain, of every chain), approximated by
    |H^T sum b|_F^2 + sum over the exact near pairs (each draw with itself, and with the
    draws of its chain at most L = ``land.n_lags`` before it, both orders; and the pairs
    of two landmarks, ``landmark_pair_gaps``) of k_p - <P xi, P xi>. With ``path=False``
    only n = draw (one column), and the projected
    near products from a sample of windows when computing them all would cost more than
    ``_SAMPLE_FLOPS`` (``SAMPLE_RULE``). ``diag_chain``, ``diag_pooled``: running sums
    of the exact diagonal.
    """
    if path:
        if backend is not None:
            raise ValueError("estimator='nystrom' with client= computes ksd and ksd_test; "
                             "ksd_path with client= needs estimator='exact' (or no client).")
        return _path_sums(draws, scores, pre, land)
    n_chain, n_draw, d = draws.shape
    blocks = _block_plan(n_chain, n_draw)
    windows, sampled = _window_plan(land, n_chain, n_draw, d, rng)
    if backend is None:
        block_results = (_pass_block(land, pre, draws, scores, *block) for block in blocks)
        window_results = (_window_task(land, pre, draws, scores, *window) for window in windows)
    else:
        block_results = backend_map(backend, draws, scores, pre, land, _block_task, blocks)
        window_results = backend_map(backend, draws, scores, pre, land, _window_remote,
                                      windows)
    # Chains are finished in order (the plan is chain-major): each chain's |H^T B_c|^2 is
    # taken when its last block is in, so only the pooled B and one group's are held.
    m = land.z.shape[0]
    pooled_b = np.zeros((m, d))
    norms = np.zeros(n_chain)
    diagonal = np.zeros(n_chain)
    near = np.zeros(n_chain)
    current = None
    for (c0, c1, _, t1), (b, diag_block, near_block) in zip(blocks, block_results):
        if current is None or current[0] != c0:
            current = (c0, np.zeros((c1 - c0, m, d)))
        current[1][...] += b
        diagonal[c0:c1] += diag_block
        near[c0:c1] += near_block
        if t1 == n_draw:
            features = np.einsum("mr,cmd->crd", land.h, current[1])
            norms[c0:c1] = np.einsum("crd,crd->c", features, features)
            pooled_b += current[1].sum(axis=0)
            current = None
    projected = np.zeros(n_chain)
    near_sampled = np.zeros(n_chain)
    for (c0, c1, _, _), (value, exact_value) in zip(windows, window_results):
        projected[c0:c1] += value
        near_sampled[c0:c1] += exact_value
    if sampled:
        projected = _scale_up(projected, near_sampled, near, n_draw, windows, n_chain)
    gaps, chain, _ = landmark_pair_gaps(land, n_draw)
    same = chain[:, None] == chain[None]
    correction = near - projected + np.bincount(chain, weights=(gaps * same).sum(axis=1),
                                                minlength=n_chain)
    correction_pooled = correction.sum() + (gaps * ~same).sum()
    pooled_features = land.h.T @ pooled_b
    pooled = np.einsum("rd,rd->", pooled_features, pooled_features) + correction_pooled
    return ((norms + correction)[:, None], np.array([pooled]), diagonal[:, None],
            np.array([diagonal.sum()]))


def _path_sums(draws, scores, pre, land):
    """``base_cumulative_sums`` at every n: running |H^T sum b|^2 per chain and pooled.

    |H^T B|^2 = |H^T P|^2 - 4 c.v + 4 c.(W c) for B = P - 2 diag(c) (a Z), with the
    running sums P = sum f s^T + 2 g x_a^T (kept as H^T P, (r, d)), c = sum g,
    v = sum (p zs + 2 q zx) and W c = sum W g (each (m,)), per chain and over chains.
    """
    n_chain, n_draw, d = draws.shape
    m, r = land.z.shape[0], land.rank
    step = max(1, _BLOCK_DRAWS // n_chain)
    diag = np.empty((n_chain, n_draw))
    correction = np.empty((n_chain, n_draw))
    norm_chain = np.empty((n_chain, n_draw))
    norm_pooled = np.empty(n_draw)
    state_chain = [np.zeros((n_chain, r, d)), *(np.zeros((n_chain, m)) for _ in range(3))]
    state_pooled = [np.zeros((1, r, d)), *(np.zeros((1, m)) for _ in range(3))]
    for t0 in range(0, n_draw, step):
        t1 = min(n_draw, t0 + step)
        lo = max(0, t0 - land.n_lags)
        n_prefix = t0 - lo
        x, s = pre.to_kernel_coordinates(draws[:, lo:t1], scores[:, lo:t1])
        v = land.draw_vectors(x, s)
        diag[:, t0:t1], near = _exact_near(land, x, s, n_prefix)
        correction[:, t0:t1] = near - _projected_near(land, v, n_prefix)
        v = {key: value[:, n_prefix:] for key, value in v.items()}
        norm_chain[:, t0:t1], norm_pooled[t0:t1] = _running_norms(v, (state_chain, state_pooled))
    # Pairs of two landmarks enter the curves at the later of their two draws.
    gaps, chain, draw = landmark_pair_gaps(land, n_draw)
    later = np.maximum(draw[:, None], draw[None])
    same = chain[:, None] == chain[None]
    for c in range(n_chain):
        inside = same & (chain[:, None] == c)
        correction[c] += np.bincount(later[inside], weights=gaps[inside], minlength=n_draw)
    across = np.bincount(later[~same], weights=gaps[~same], minlength=n_draw)
    diag_chain = np.cumsum(diag, axis=1)
    correction_chain = np.cumsum(correction, axis=1)
    per_chain = norm_chain + correction_chain
    pooled = norm_pooled + correction_chain.sum(axis=0) + np.cumsum(across)
    return per_chain, pooled, diag_chain, diag_chain.sum(axis=0)


def _running_norms(v, states):
    """|H^T B(t)|^2 after each draw t of the block: per chain (chain, n) and pooled (n,)
    (the chains' increments at each draw summed). ``states`` = (per chain, pooled), each
    carried from block to block; every increment is built once for both."""
    n_chain, n = v["alpha"].shape[:2]
    r, d = states[0][0].shape[1:]

    def both(values):
        return values, values.sum(axis=0, keepdims=True)

    norms = []
    for (hp, c0, v0, wc0), c, u, wc in zip(
            states, *(both(part) for part in (v["g"], v["p"] * v["zs"] + 2.0 * v["q"] * v["zx"],
                                              v["wg"]))):
        c = np.cumsum(c, axis=1) + c0[:, None]
        u = np.cumsum(u, axis=1) + v0[:, None]
        wc = np.cumsum(wc, axis=1) + wc0[:, None]
        norms.append(-4.0 * np.einsum("cnm,cnm->cn", c, u)
                     + 4.0 * np.einsum("cnm,cnm->cn", c, wc))
        c0[...], v0[...], wc0[...] = c[:, -1], u[:, -1], wc[:, -1]
    rows = max(1, _PATH_BYTES // (8 * r * d * n_chain))
    for p0 in range(0, n, rows):
        p1 = min(n, p0 + rows)
        part = (slice(None), slice(p0, p1))
        # The rank-2 increments alpha s^T + 2 gamma x_a^T of H^T P.
        step = np.einsum("cnr,cnd->cnrd", v["alpha"][part], v["s"][part])
        step += 2.0 * np.einsum("cnr,cnd->cnrd", v["gamma"][part], v["x_a"][part])
        for (hp, *_), out, increments in zip(states, norms, both(step)):
            running = np.cumsum(increments, axis=1)
            running += hp[:, None]
            out[:, p0:p1] += np.einsum("cnrd,cnrd->cn", running, running)
            hp[...] = running[:, -1]
    return norms[0], norms[1][0]


# ---------------------------------------------------------------------------------------
# dask.distributed: blocks and windows as tasks (``steindiag.engine.dask.DaskBackend``).
# ---------------------------------------------------------------------------------------

def _block_task(ops, c0, c1, t0, t1):
    return single_threaded(_pass_block, ops.land, ops.pre, ops.draws, ops.scores, c0, c1, t0, t1)


def _window_remote(ops, c0, c1, w0, w1):
    return single_threaded(_window_task, ops.land, ops.pre, ops.draws, ops.scores, c0, c1, w0, w1)
