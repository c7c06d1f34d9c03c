"""Nyström features of the Stein kernel at m landmarks, streamed: the estimator of ``ksd_test``.

(``ksd`` and ``ksd_path`` project onto the base kernel at the landmarks instead:
``engine.nystrom_base``, which shares the landmark rule, the exact-lag rule and
``lag_pair_gaps`` from here.)

Data flow (see the Background page of the docs, "Nyström KSD"):

    draws, scores (chain, draw, d), preconditioner, kernel
      -> m landmarks L drawn from the draws with the caller's rng
      -> K_mm = K_p(L, L) -> projection M = Lambda_r^(-1/2) U_r^T (eigenvalues of K_mm
         below a relative cut-off dropped), so that the features of x are
         phi(x) = M K_p(L, x) and K_p(x, y) ~ phi(x).phi(y)
      -> blocks of draw indices (every chain): K_p(L, X_block) from ``cross_stein_block``
         (Numba, parallel over draws), reduced at once into m-vectors or (m, B) products;
         no N x m array is held.

Nothing here imports xarray and nothing validates input.
"""

from dataclasses import dataclass

import numba as nb
import numpy as np

from steindiag.engine.dask import single_threaded
from steindiag.engine.row_sums import _FAST_SUM, _accumulate_block, stein_kernel_diagonal
from steindiag.kernels._stein import block_stein_values, kernel_constants, stein_pair
from steindiag.stats.autocorrelation import integrated_autocorrelation_time
from steindiag.stats.bootstrap import sign_chains

__all__ = ["cross_stein_block", "lag_pair_gaps", "lag_weighted_sums", "Landmarks", "choose_landmarks",
           "draw_landmarks", "inverse_root", "landmark_attrs", "default_n_landmarks",
           "default_exact_lags", "nystrom_quadratic_forms", "backend_map"]

# Draws per inner block of the cross product (per-pair temporaries live in L1).
_BLOCK = 256


@nb.njit(cache=True, parallel=True, fastmath=_FAST_SUM, error_model="numpy")
def cross_stein_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, land_x, land_s,
                      out):
    """out[r, j] = k_p(L_r, x_j): landmarks (m, d) against points (1, d, n), kernel coordinates.

    Parallel over blocks of 256 points; m n pair evaluations, no memory beyond ``out``.
    """
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_land = land_x.shape[0]
    c2, beta = kernel_constants(kind, params)
    n_chunks = (n + _BLOCK - 1) // _BLOCK
    for chunk in nb.prange(n_chunks):
        qdist = np.empty(_BLOCK)
        a2dist = np.empty(_BLOCK)
        uads = np.empty(_BLOCK)
        ss = np.empty(_BLOCK)
        x_i = np.empty(d)
        s_i = np.empty(d)
        j0 = chunk * _BLOCK
        nj = min(_BLOCK, n - j0)
        for r in range(n_land):
            for k in range(d):
                x_i[k] = land_x[r, k]
                s_i[k] = land_s[r, k]
            _accumulate_block(draws_t, scores_t, a, isotropic, 0, j0, nj, x_i, s_i, qdist,
                              a2dist, uads, ss)
            block_stein_values(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, 1.0,
                               out[r, j0 : j0 + nj])


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def lag_pair_gaps(draws_k, scores_k, features_t, a, isotropic, kind, params, trace_a, n_prefix,
                  out):
    """out[t - n_prefix, l - 1] = k_p(x_(t-l), x_t) - phi(x_(t-l)).phi(x_t), l = 1..L.

    ``draws_k``, ``scores_k`` (n, d): consecutive draws of one chain in kernel
    coordinates; ``features_t`` (n, r) their features; ``out`` (n - n_prefix, L), 0 where
    t < l. The pair quantities are those of ``_accumulate_block`` (the landmark
    products), so that the two terms of a gap agree when m = N. O(n L (d + r)).
    """
    n, d = draws_k.shape
    r = features_t.shape[1]
    n_lags = out.shape[1]
    for t in range(n_prefix, n):
        for lag in range(1, n_lags + 1):
            if t < lag:
                out[t - n_prefix, lag - 1] = 0.0
                continue
            s = t - lag
            qdist = 0.0
            a2dist = 0.0
            uads = 0.0
            ss = 0.0
            for k in range(d):
                ak = a[0] if isotropic else a[k]
                u = draws_k[t, k] - draws_k[s, k]
                au = ak * u
                qdist += au * u
                a2dist += au * au
                uads += au * (scores_k[t, k] - scores_k[s, k])
                ss += scores_k[t, k] * scores_k[s, k]
            approx = 0.0
            for k in range(r):
                approx += features_t[t, k] * features_t[s, k]
            out[t - n_prefix, lag - 1] = (
                stein_pair(kind, params, qdist, a2dist, uads, ss, trace_a) - approx)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def lag_weighted_sums(gaps, weights, out):
    """out[b] += 2 sum_(t >= l) gaps[t, l - 1] weights[t, b] weights[t - l, b]: O(n L B).

    ``gaps`` (n, L) and ``weights`` (n, B) of the same n consecutive draws of one chain.
    """
    n, n_lags = gaps.shape
    n_bootstrap = weights.shape[1]
    for t in range(n):
        for lag in range(1, min(n_lags, t) + 1):
            g = 2.0 * gaps[t, lag - 1]
            for b in range(n_bootstrap):
                out[b] += g * weights[t, b] * weights[t - lag, b]


# Relative eigenvalue cut-off of K_mm: directions with eigenvalue below this times the
# largest are dropped from the projection (the pseudo-inverse square root). Rounding in
# K_p(L, x), about 1e-16 of the largest eigenvalue, is amplified by 1 / sqrt(lambda):
# at most about 1e-11 here.
EIGEN_CUTOFF = 1e-10
# Draws of one chain per bootstrap block (each with its own random stream): its weights
# take 8 B _WEIGHT_ROWS bytes (16 MB for B = 1000).
_WEIGHT_ROWS = 2048
# Default number of landmarks: _LANDMARKS_PER_ROOT_N sqrt(N), between _MIN_LANDMARKS
# and _MAX_LANDMARKS (and at most N). See ``default_n_landmarks``.
_LANDMARKS_PER_ROOT_N = 4.0
_MIN_LANDMARKS = 200
_MAX_LANDMARKS = 500
# Exact lags: pairs of draws of one chain at most L apart are computed exactly, with
# L = min(_MAX_EXACT_LAGS, ceil(_LAGS_PER_TAU tau), draw - 1), tau the largest integrated
# autocorrelation time over chains and coordinates, estimated on the first
# _TAU_DRAWS draws of each chain. See ``default_exact_lags``.
_LAGS_PER_TAU = 2.0
_MAX_EXACT_LAGS = 50
_TAU_DRAWS = 65536
EXACT_LAG_RULE = ("pairs of draws of one chain at most n_exact_lags apart computed exactly: "
                  "n_exact_lags = min(50, ceil(2 tau), draw - 1), tau the largest integrated "
                  "autocorrelation time (Geyer) over chains and coordinates of the draws "
                  "(first 65536 draws of each chain)")
LANDMARK_RULE = ("uniformly without replacement from the pooled draws, with the call's rng "
                 "(numpy.random.Generator.choice); indices in landmark_index (chain-major: "
                 "chain * n_draw + draw)")


def default_n_landmarks(n_total):
    """m = 4 sqrt(N), clipped to [200, 500] and to N (the measurements behind it: the
    user guide, "Many draws: the Nyström estimator")."""
    m = int(np.ceil(_LANDMARKS_PER_ROOT_N * np.sqrt(n_total)))
    return int(min(n_total, max(_MIN_LANDMARKS, min(_MAX_LANDMARKS, m))))


def default_exact_lags(draws):
    """L = min(50, ceil(2 tau), draw - 1) for draws (chain, draw, d); see ``EXACT_LAG_RULE``.

    Neighbouring draws of a chain are close pairs that m landmarks do not resolve; their
    Stein kernel values matter up to lags of a few autocorrelation times.
    """
    n_chain, n_draw, _ = draws.shape
    if n_draw < 2:
        return 0
    head = draws[:, :_TAU_DRAWS]
    tau = max(float(integrated_autocorrelation_time(head[c]).max()) for c in range(n_chain))
    return int(min(_MAX_EXACT_LAGS, np.ceil(_LAGS_PER_TAU * tau), n_draw - 1))


def _transposed_block(pre, draws, scores):
    """(n, d) draws and scores -> kernel coordinates (1, d, n) for the Numba loops, and |s|^2."""
    x_k, s_k = pre.to_kernel_coordinates(draws, scores)
    return (np.ascontiguousarray(x_k.T[None]), np.ascontiguousarray(s_k.T[None]),
            np.einsum("nk,nk->n", s_k, s_k))


@dataclass(kw_only=True)
class Landmarks:
    """The m landmarks and the Nyström projection, everything a block of draws needs.

    Attributes
    ----------
    index : ndarray (m,) int64
        Flat chain-major indices (chain * n_draw + draw) of the landmarks.
    draws_k, scores_k : ndarray (m, d)
        Their draws and scores in kernel coordinates.
    projection : ndarray (r, m)
        M = Lambda_r^(-1/2) U_r^T from K_mm = U Lambda U^T, the r eigenvalues above
        ``EIGEN_CUTOFF`` times the largest kept: phi(x) = M K_p(L, x).
    a, isotropic, trace_a, kind, params
        The preconditioner's and kernel's constants (as the engine's kernels take them).
    """

    index: np.ndarray
    draws_k: np.ndarray
    scores_k: np.ndarray
    projection: np.ndarray
    a: np.ndarray
    isotropic: bool
    trace_a: float
    kind: tuple
    params: np.ndarray
    n_lags: int = 0

    @property
    def rank(self):
        return self.projection.shape[0]

    def attrs(self):
        """Attributes that say how the result was computed and reproduce the landmarks."""
        return landmark_attrs(self.index, self.rank, self.n_lags)

    def cross(self, draws_t, scores_t):
        """K_p(L, X), (m, n), for points (1, d, n) in kernel coordinates."""
        out = np.empty((self.index.size, draws_t.shape[2]))
        cross_stein_block(draws_t, scores_t, self.a, self.isotropic, self.kind, self.params,
                          self.trace_a, self.draws_k, self.scores_k, out)
        return out

    def features(self, draws, scores, pre):
        """(features (r, n), exact k_p(x, x) (n,), Nyström |phi(x)|^2 (n,)) of (n, d) points."""
        draws_t, scores_t, scores_sq = _transposed_block(pre, draws, scores)
        features = self.projection @ self.cross(draws_t, scores_t)
        exact = stein_kernel_diagonal(scores_sq, self.kind, self.params, self.trace_a)
        return features, exact, np.einsum("rn,rn->n", features, features)

    def lag_gaps(self, draws, scores, pre, features, n_prefix):
        """k_p(x_(t-l), x_t) - phi(x_(t-l)).phi(x_t), (n - n_prefix, L), l = 1..L.

        ``draws``, ``scores`` (n, d): consecutive draws of one chain, the first
        ``n_prefix`` only partners of the later ones (when they are the chain's first
        draws, pairs reaching before them are 0); ``features`` (r, n) theirs.
        """
        n = draws.shape[0]
        x_k, s_k = pre.to_kernel_coordinates(draws, scores)
        gaps = np.empty((n - n_prefix, self.n_lags))
        lag_pair_gaps(np.ascontiguousarray(x_k), np.ascontiguousarray(s_k),
                      np.ascontiguousarray(features.T), self.a, self.isotropic, self.kind,
                      self.params, self.trace_a, n_prefix, gaps)
        return gaps


def draw_landmarks(draws, scores, pre, n_landmarks, rng):
    """The landmark rule (``LANDMARK_RULE``) of both Nyström estimators.

    Returns (flat chain-major indices (m,) int64, their draws and scores (m, d) in
    kernel coordinates, C-contiguous).
    """
    n_chain, n_draw, _ = draws.shape
    index = np.sort(rng.choice(n_chain * n_draw, size=n_landmarks, replace=False))
    chain, draw = np.divmod(index, n_draw)
    draws_k, scores_k = pre.to_kernel_coordinates(draws[chain, draw], scores[chain, draw])
    return (index.astype(np.int64), np.ascontiguousarray(draws_k),
            np.ascontiguousarray(scores_k))


def inverse_root(gram, what):
    """U_r Lambda_r^(-1/2) (m, r) of a symmetric PSD ``gram``, over the r eigenvalues above
    ``EIGEN_CUTOFF`` times the largest (a pseudo-inverse square root)."""
    eigenvalues, eigenvectors = np.linalg.eigh(0.5 * (gram + gram.T))
    keep = eigenvalues > EIGEN_CUTOFF * max(eigenvalues[-1], 0.0)
    if not keep.any():
        raise ValueError(f"nystrom: {what} is zero; use estimator='exact'.")
    return np.ascontiguousarray(eigenvectors[:, keep] / np.sqrt(eigenvalues[keep]))


def landmark_attrs(index, rank, n_lags):
    """The attributes both Nyström estimators record: landmarks, rank and exact lags."""
    return {
        "estimator": "nystrom",
        "n_landmarks": int(index.size),
        "nystrom_rank": int(rank),
        "landmark_rule": LANDMARK_RULE,
        "landmark_index": index.copy(),
        "eigenvalue_cutoff": EIGEN_CUTOFF,
        "n_exact_lags": int(n_lags),
        "exact_lag_rule": EXACT_LAG_RULE,
    }


def choose_landmarks(draws, scores, pre, kernel, n_landmarks, rng):
    """Draw ``n_landmarks`` landmarks with ``rng`` and build the projection (O(m^2 d + m^3)).

    Parameters
    ----------
    draws, scores : ndarray (chain, draw, d)
    pre : Preconditioner
    kernel : BaseKernel
    n_landmarks : int, 1 <= n_landmarks <= chain * draw
    rng : numpy.random.Generator
    """
    index, draws_k, scores_k = draw_landmarks(draws, scores, pre, n_landmarks, rng)
    land = Landmarks(
        index=index, draws_k=draws_k, scores_k=scores_k, projection=np.empty((0, n_landmarks)),
        a=np.asarray(pre.a, dtype=np.float64), isotropic=bool(pre.isotropic),
        trace_a=float(pre.trace_a), kind=kernel.numba_kind,
        params=np.asarray(kernel.numba_params, dtype=np.float64),
    )
    gram = land.cross(np.ascontiguousarray(draws_k.T[None]), np.ascontiguousarray(scores_k.T[None]))
    land.projection = np.ascontiguousarray(inverse_root(
        gram, "the landmarks' Stein kernel matrix (all scores 0 and a kernel with f'(0) = 0?)").T)
    return land


# ---------------------------------------------------------------------------------------
# Bootstrap: w^T K_p w for the all-ones column and B bootstrap columns, from the features.
# ---------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class _BlockForms:
    """What one bootstrap block (draws of one chain) returns: O((r + L) B) numbers."""

    total: np.ndarray         # (r,) sum of features (the all-ones column)
    product: np.ndarray       # (r, B) features @ W_block
    head: np.ndarray          # (max(1, min(L, b)), B) W_block's first rows
    tail: np.ndarray          # (max(1, min(L, b)), B) W_block's last rows
    boundary_flip: np.ndarray  # (B,) bool: the sign chains flip entering this block
    correction: float         # sum over the block's exact pairs of k_p - phi.phi (see below)
    correction_w: np.ndarray  # (B,) the same pairs weighted by w_i w_j (within the block)
    cross_gap: np.ndarray     # (min(L, b), L) gaps of pairs reaching into the previous block


def _bootstrap_block(land, pre, draws, scores, start, stop, kind, seed, flip, n_bootstrap,
                     count):
    """Features of draws start..stop of one chain times their bootstrap weights.

    ``draws``, ``scores`` (draw, d): the whole chain. Sign kinds: the block's sign chains
    are drawn by ``stats.bootstrap.sign_chains`` with a random first sign;
    ``boundary_flip`` says whether the chain flips between the previous block's last
    draw and this one's first (probability ``flip``), and the caller multiplies each
    column by the sign that makes the chains continuous. Multinomial: ``count`` (B,)
    resamples fell in this block; they are spread uniformly over its draws (a
    multinomial split of the chain's counts, so exactly its law).

    The exact pairs (diagonal, and (t - l, t) for l = 1..L = ``land.n_lags``) enter as
    gaps k_p - phi.phi: ``correction`` sums them over every pair whose later draw is in
    the block (both ordered pairs), ``correction_w`` weights those within the block by
    w_i w_j; ``cross_gap[j, l - 1]`` (j < l) is the gap of the pair (start + j - l,
    start + j), which the caller weights with the previous block's last rows.
    """
    lo = max(0, start - land.n_lags)
    n_prefix = start - lo
    features, exact, nystrom = land.features(draws[lo:stop], scores[lo:stop], pre)
    diagonal_gap = (exact - nystrom)[n_prefix:]
    n_rows = stop - start
    n_lags = land.n_lags
    head_rows = min(n_lags, n_rows)
    if n_lags > 0:
        lag_gap = land.lag_gaps(draws[lo:stop], scores[lo:stop], pre, features, n_prefix)
        cross_gap = np.zeros((head_rows, n_lags))
        for j in range(head_rows):
            cross_gap[j, j:] = lag_gap[j, j:]
    features = features[:, n_prefix:]
    rng = np.random.default_rng(seed)
    weights = np.empty((n_rows, n_bootstrap))
    if kind == "multinomial":
        weights[:] = rng.multinomial(count, np.full(n_rows, 1.0 / n_rows)).T
        weights -= 1.0
        boundary_flip = None
    else:
        boundary_flip = rng.random(n_bootstrap) < flip
        sign_chains(rng, n_rows, n_bootstrap, flip, weights)
    correction = float(diagonal_gap.sum())
    correction_w = (weights * weights).T @ diagonal_gap
    if n_lags > 0:
        correction += 2.0 * float(lag_gap.sum())
        lag_weighted_sums(lag_gap, weights, correction_w)
    return _BlockForms(total=features.sum(axis=1), product=features @ weights,
                       head=weights[: max(1, head_rows)].copy(),
                       tail=weights[max(0, n_rows - max(1, n_lags)):].copy(),
                       boundary_flip=boundary_flip, correction=correction,
                       correction_w=correction_w,
                       cross_gap=cross_gap if n_lags > 0 else None)


def _block_plan(n_chain, n_draw, kind, rng, n_bootstrap):
    """Blocks (chain, start, stop, seed, count) of the bootstrap pass, seeded from ``rng``.

    Every block has its own random stream (a ``SeedSequence`` keyed by (chain, block)),
    so the weights do not depend on where or in which order blocks run.
    """
    entropy = [int(v) for v in rng.integers(0, 2**63, size=2)]
    starts = np.arange(0, n_draw, _WEIGHT_ROWS)
    stops = np.minimum(starts + _WEIGHT_ROWS, n_draw)
    plan = []
    for c in range(n_chain):
        if kind == "multinomial":
            counts = rng.multinomial(n_draw, (stops - starts) / n_draw, size=n_bootstrap)
        for k, (start, stop) in enumerate(zip(starts, stops)):
            seed = np.random.SeedSequence(entropy, spawn_key=(c, k))
            count = counts[:, k] if kind == "multinomial" else None
            plan.append((c, int(start), int(stop), seed, count))
    return plan


def nystrom_quadratic_forms(draws, scores, pre, land, kind, rng, n_bootstrap, flip,
                            backend=None):
    """Nyström counterpart of ``engine.forms.quadratic_forms`` with the weights streamed.

    Returns (per_chain (chain, 1 + B), pooled (1 + B,)): column 0 approximates
    1^T K_p 1 and column b the bootstrap form w_b^T K_p w_b, both as w^T K~ w with the
    matrix of ``nystrom_cumulative_sums``: |Phi^T w|^2 + sum_i w_i^2 (k_p(x_i, x_i)
    - |phi(x_i)|^2) + 2 sum_(pairs (t - l, t) of one chain, l <= L) w_(t-l) w_t
    (k_p - phi.phi), per chain and over all chains (each chain's weights independent):
    the statistic and its bootstrap replicates use the same matrix. The N x B weight
    matrix is never held: blocks of 2048 draws of one chain draw their own weights.
    O(N m (8 d + 20) + 2 N r (m + B) + N L (3 d + 2 r + 2 B)) time;
    O(chain r B + 2048 (m + B + L)) memory.
    """
    n_chain, n_draw, _ = draws.shape
    plan = _block_plan(n_chain, n_draw, kind, rng, n_bootstrap)
    if backend is None:
        results = (_bootstrap_block(land, pre, draws[c], scores[c], start, stop, kind, seed,
                                    flip[c], n_bootstrap, count)
                   for c, start, stop, seed, count in plan)
    else:
        results = backend_map(backend, draws, scores, pre, land, _bootstrap_task,
                                  [(c, start, stop, kind, seed, flip[c], n_bootstrap, count)
                                   for c, start, stop, seed, count in plan])
    r = land.rank
    per_chain = np.empty((n_chain, 1 + n_bootstrap))
    pooled_product = np.zeros((r, n_bootstrap))
    pooled_total = np.zeros(r)
    pooled_correction = np.zeros(1 + n_bootstrap)
    for (c, start, _, _, _), block in zip(plan, results):
        if start == 0:
            product = np.zeros((r, n_bootstrap))
            total = np.zeros(r)
            correction = np.zeros(1 + n_bootstrap)
            sign = np.ones(n_bootstrap)
        if kind != "multinomial" and start > 0:
            # The first sign must be the previous block's last, flipped or not.
            sign = tail[-1] * np.where(block.boundary_flip, -1.0, 1.0) * block.head[0]
        block.product *= sign
        correction[0] += block.correction
        # Pairs within the block carry sign^2 = 1; pairs reaching into the previous
        # block are weighted by its last rows (already signed).
        correction[1:] += block.correction_w
        if block.cross_gap is not None and start > 0:
            _add_cross_pairs(correction[1:], block.cross_gap, tail, sign * block.head)
        tail = sign * block.tail
        product += block.product
        total += block.total
        if start + _WEIGHT_ROWS >= n_draw:
            per_chain[c, 0] = total @ total
            per_chain[c, 1:] = np.einsum("rb,rb->b", product, product)
            per_chain[c] += correction
            pooled_product += product
            pooled_total += total
            pooled_correction += correction
    pooled = np.empty(1 + n_bootstrap)
    pooled[0] = pooled_total @ pooled_total
    pooled[1:] = np.einsum("rb,rb->b", pooled_product, pooled_product)
    pooled += pooled_correction
    return per_chain, pooled


def _add_cross_pairs(out, cross_gap, tail, head):
    """out += 2 sum_(j < l) cross_gap[j, l - 1] tail[-(l - j)] head[j] (pairs across blocks).

    ``tail`` (>= L, B): the previous block's last weights; ``head`` (<= L, B): this
    block's first weights, both signed.
    """
    n_lags = cross_gap.shape[1]
    for j in range(head.shape[0]):
        for lag in range(j + 1, n_lags + 1):
            out += 2.0 * cross_gap[j, lag - 1] * tail[-(lag - j)] * head[j]


# ---------------------------------------------------------------------------------------
# dask.distributed: the same blocks as tasks (``steindiag.engine.dask.DaskBackend``).
# ---------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class _Operands:
    """Scattered once to every worker: the draws, scores, preconditioner and landmarks."""

    draws: np.ndarray
    scores: np.ndarray
    pre: object
    land: object  # Landmarks, or engine.nystrom_base.BaseLandmarks


def _bootstrap_task(ops, c, start, stop, kind, seed, flip, n_bootstrap, count):
    return single_threaded(_bootstrap_block, ops.land, ops.pre, ops.draws[c], ops.scores[c],
                           start, stop, kind, seed, flip, n_bootstrap, count)


def backend_map(backend, draws, scores, pre, land, task, blocks):
    """Yield ``task(ops, *block)`` for every block, in order, computed on the workers.

    The operands go to every worker once; results come back in submission order
    (the workers run ahead), and remaining tasks are cancelled on error or Ctrl-C.
    """
    ops_future = backend.client.scatter(_Operands(draws=draws, scores=scores, pre=pre,
                                                  land=land), broadcast=True, hash=False)
    futures = [backend.client.submit(task, ops_future, *block, pure=False) for block in blocks]
    try:
        for future in futures:
            yield future.result()
    finally:
        backend.client.cancel(futures)
        ops_future.release()
