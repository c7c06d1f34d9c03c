"""Numba: the Langevin Stein kernel of each radial base kernel, pair by pair.

Every base kernel here is radial in the preconditioned squared distance,
k(x, y) = f(t) with t = u^T A u and u = x - y, and its Langevin Stein kernel is

    k_p = -4 f''(t) u^T A^2 u - 2 f'(t) [tr A + u^T A (s(x) - s(y))] + f(t) s(x).s(y)

(see the Background page of the docs). The engine loops reduce every pair to four
numbers, ``qdist = t``, ``a2dist = u^T A^2 u``, ``uads = u^T A (s(x) - s(y))`` and
``ss = s(x).s(y)``; ``stein_value`` turns them into k_p for one kernel. This module
is the one place where a kernel's formulas are written: adding a kernel is a new
``kind``, a branch of ``stein_value`` / ``base_value`` / ``profile_at_zero``, and a
branch in each of the block dispatchers below (and ``engine.row_sums._tile_pair_sum``).

Dispatch. A loop over pairs must not test the kernel on every pair (the branch,
or a ``pow`` if-converted onto every SIMD lane, would cost several times the pair).
The Numba layer receives the kernel as a *kind token*, the tuple ``(0,) * (kind + 1)``
(``kind_token``), and a float64 parameter array. Each kernel's token has its own Numba
type, so every pass is compiled once per kernel (and cached). The dispatchers below
(``block_stein_sum``, ``block_stein_values``, ``block_base_sum``, ``stein_pair``) are
Numba overloads that read the kind from the token's type when the caller is typed and
return the code of that kernel only; within the IMQ they branch once per block on
beta = -1/2 (a square root instead of a ``pow`` call) and run a loop of its own for
each case. The default IMQ (beta = -1/2) has a token of its own, ``(0.0,)``
(``kind_token(IMQ, half=True)``), for which they return the square-root loop alone. ``stein_value`` and ``base_value`` take the loop's ``variant`` as a literal
and likewise compile one formula. So a pass compiles one kernel's loops (two for the
IMQ), not all of them: the first call in a fresh process compiles several times less.

Nothing here imports xarray, PyMC or matplotlib, and nothing validates input.
"""

import numba as nb
import numpy as np
from numba import types
from numba.core.errors import TypingError
from numba.extending import overload

__all__ = [
    "IMQ", "GAUSSIAN", "MATERN32", "MATERN52", "N_PARAMS", "kind_token",
    "stein_value", "stein_pair", "base_value", "profile_at_zero", "kernel_constants",
    "block_stein_sum", "block_stein_values", "block_base_sum",
]

# Kernel kinds (the int the Numba layer receives with a float64 parameter array).
IMQ = 0         # f = (c^2 + t)^beta, params = [c^2, beta]
GAUSSIAN = 1    # f = exp(-t / 2), no params
MATERN32 = 2    # f = (1 + sqrt(3 t)) exp(-sqrt(3 t)), no params
MATERN52 = 3    # f = (1 + sqrt(5 t) + 5 t / 3) exp(-sqrt(5 t)), no params
# Length of each kind's parameter array.
N_PARAMS = {IMQ: 2, GAUSSIAN: 0, MATERN32: 0, MATERN52: 0}
# Internal variant: the IMQ with beta = -1/2, a square root instead of a pow call.
_IMQ_SQRT = 100


def kind_token(kind, half=False):
    """The kernel ``kind`` as the Numba layer takes it: a tuple of kind + 1 zeros.

    A tuple's length is part of its Numba type, so each kernel gets its own compiled
    specialisation of every pass, with ``len(token) - 1`` a compile-time constant.
    ``half=True`` (the IMQ with beta = -1/2, the default kernel): ``(0.0,)``, an IMQ
    token of another type, for which the dispatchers compile the square-root loop only
    (the general IMQ token compiles both loops and picks one per block by beta).
    """
    if half:
        if int(kind) != IMQ:
            raise ValueError("kind_token: half=True is the IMQ with beta = -1/2 only.")
        return (0.0,)
    return (0,) * (int(kind) + 1)


def _imq_half(token):
    """True if the Numba type of a kind token is the IMQ's with beta = -1/2 (``(0.0,)``)."""
    return isinstance(token, types.UniTuple) and isinstance(token.dtype, types.Float)

_SQRT3 = np.sqrt(3.0)
_SQRT5 = np.sqrt(5.0)
# Guards a division by r = sqrt(t) at t = 0 (where the numerator is 0 too).
_TINY = 1e-300

# Reassociation (summation order) and FMA contraction only: no approximate reciprocals
# or square roots, which would bias every pair the same way.
FAST_SUM = {"reassoc", "contract"}


@nb.njit(cache=True, fastmath=FAST_SUM, inline="always")
def stein_combine(q_beta, inv_q, a2dist, uads, ss, c1, c0, trace_a):
    """IMQ k_p from q^beta, 1/q and the reduced quantities; c1 = -4 beta (beta-1), c0 = -2 beta.

    k_p = c1 q^(beta-2) u^T A^2 u + c0 q^(beta-1) (tr A + u^T A ds) + q^beta s.s'.
    """
    q_beta1 = q_beta * inv_q
    return q_beta1 * (c1 * inv_q * a2dist + c0 * (trace_a + uads)) + q_beta * ss


@nb.njit(cache=True, fastmath=FAST_SUM, error_model="numpy", inline="always")
def _q_powers(qdist, c2, beta, half):
    """(q^beta, 1/q) for q = c^2 + qdist; half: beta = -1/2 (a square root, no pow call)."""
    inv_q = 1.0 / (c2 + qdist)
    if half:
        return np.sqrt(inv_q), inv_q
    return (c2 + qdist) ** beta, inv_q


def _literal_variant(variant, name):
    """The int value of a literal ``variant`` argument (typing time), or a TypingError."""
    if isinstance(variant, types.IntegerLiteral):
        return variant.literal_value
    raise TypingError(f"{name}: variant must be a compile-time constant, got {variant}.")


def _token_kind(token):
    """The kernel kind from the Numba type of a kind token ``(0,) * (kind + 1)``."""
    if isinstance(token, types.UniTuple):
        return token.count - 1
    if isinstance(token, types.Tuple) and len(token) > 0:
        return len(token) - 1
    raise TypingError(f"kind must be a kind token (see kind_token), got {token}.")


def stein_value(variant, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0):
    """k_p of one pair of the kernel ``variant`` (a literal: compiled code only).

    With r = sqrt(t), the k_p of each kernel, f'' and f' written out:

    - IMQ: -4 beta (beta-1) q^(beta-2) a2 - 2 beta q^(beta-1) (tr A + uads) + q^beta ss,
      q = c^2 + t; c1 = -4 beta (beta - 1) and c0 = -2 beta (unused by the others).
    - Gaussian: e^(-t/2) [-a2 + tr A + uads + ss]   (f' = -f/2, f'' = f/4).
    - Matern 3/2: e^(-sqrt3 r) [-3 sqrt3 a2 / r + 3 (tr A + uads) + (1 + sqrt3 r) ss]
      (f' = -3/2 e^(-sqrt3 r), f'' = 3 sqrt3 / (4 r) e^(-sqrt3 r)). a2 <= lambda_max(A) t
      <= tr(A) r^2, so a2 / r <= tr(A) r -> 0; a2 is clipped to tr(A) t (which only
      removes rounding) and divided by max(r, tiny): 0 at r = 0, no 0/0.
    - Matern 5/2: e^(-sqrt5 r) [-25/3 a2 + 5/3 (1 + sqrt5 r)(tr A + uads)
      + (1 + sqrt5 r + 5 t / 3) ss]   (f' = -5/6 (1 + sqrt5 r) e^(-sqrt5 r),
      f'' = 25/12 e^(-sqrt5 r)).
    """
    raise NotImplementedError("stein_value runs in compiled code only.")


@overload(stein_value, prefer_literal=True, inline="always")
def _stein_value_overload(variant, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0):
    value = _literal_variant(variant, "stein_value")
    if value == _IMQ_SQRT:
        def imq_sqrt(variant, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0):
            q_beta, inv_q = _q_powers(qdist, c2, beta, True)
            return stein_combine(q_beta, inv_q, a2dist, uads, ss, c1, c0, trace_a)
        return imq_sqrt
    if value == IMQ:
        def imq(variant, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0):
            q_beta, inv_q = _q_powers(qdist, c2, beta, False)
            return stein_combine(q_beta, inv_q, a2dist, uads, ss, c1, c0, trace_a)
        return imq
    if value == GAUSSIAN:
        def gaussian(variant, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0):
            return np.exp(-0.5 * qdist) * (trace_a + uads + ss - a2dist)
        return gaussian
    if value == MATERN32:
        def matern32(variant, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0):
            r = np.sqrt(qdist)
            a2_over_r = min(a2dist, trace_a * qdist) / max(r, _TINY)
            return np.exp(-_SQRT3 * r) * (3.0 * (trace_a + uads) + (1.0 + _SQRT3 * r) * ss
                                          - 3.0 * _SQRT3 * a2_over_r)
        return matern32
    if value == MATERN52:
        def matern52(variant, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0):
            r = np.sqrt(qdist)
            s5r = _SQRT5 * r
            return np.exp(-s5r) * ((5.0 / 3.0) * (1.0 + s5r) * (trace_a + uads)
                                   + (1.0 + s5r + (5.0 / 3.0) * qdist) * ss
                                   - (25.0 / 3.0) * a2dist)
        return matern52
    raise TypingError(f"stein_value: unknown kernel variant {value}.")


def base_value(variant, qdist, c2, beta):
    """The base kernel f(t) of ``variant`` (a literal) at t = qdist (compiled code only)."""
    raise NotImplementedError("base_value runs in compiled code only.")


@overload(base_value, prefer_literal=True, inline="always")
def _base_value_overload(variant, qdist, c2, beta):
    value = _literal_variant(variant, "base_value")
    if value == _IMQ_SQRT:
        return lambda variant, qdist, c2, beta: np.sqrt(1.0 / (c2 + qdist))
    if value == IMQ:
        return lambda variant, qdist, c2, beta: (c2 + qdist) ** beta
    if value == GAUSSIAN:
        return lambda variant, qdist, c2, beta: np.exp(-0.5 * qdist)
    if value == MATERN32:
        def matern32(variant, qdist, c2, beta):
            r = np.sqrt(qdist)
            return (1.0 + _SQRT3 * r) * np.exp(-_SQRT3 * r)
        return matern32
    if value == MATERN52:
        def matern52(variant, qdist, c2, beta):
            r = np.sqrt(qdist)
            return (1.0 + _SQRT5 * r + (5.0 / 3.0) * qdist) * np.exp(-_SQRT5 * r)
        return matern52
    raise TypingError(f"base_value: unknown kernel variant {value}.")


@nb.njit(cache=True, inline="always")
def kernel_constants(token, params):
    """(t_scale, beta) of the kernel with kind token ``token`` (see ``kind_token``).

    t_scale is the scale of t on which f changes by O(1) near t = 0 (c^2 for the IMQ,
    1 for the Gaussian and Matern 5/2 kernels: the preconditioner sets the length
    scale); the tiled path uses it to decide which pairs lose digits to cancellation.
    It is 0 for the Matern 3/2 kernel, whose k_p is not smooth in t at t = 0 (its f'
    changes like sqrt(t)): an error e in t changes k_p by about sqrt(e), so the tiled
    path tests each pair against sqrt(t) instead and no pair is safe a priori.
    beta is the IMQ exponent (unused otherwise). Passes call this once, outside their
    parallel loops, and hand the two scalars to the block functions below.
    """
    kind = len(token) - 1
    if kind == IMQ:
        return params[0], params[1]
    if kind == MATERN32:
        return 0.0, -0.5
    return 1.0, -0.5


@nb.njit(cache=True)
def profile_at_zero(token, params):
    """(f(0), f'(0)): k_p(x, x) = -2 f'(0) tr A + f(0) |s(x)|^2."""
    kind = len(token) - 1
    if kind == IMQ:
        c2 = params[0]
        beta = params[1]
        return c2**beta, beta * c2 ** (beta - 1.0)
    elif kind == GAUSSIAN:
        return 1.0, -0.5
    elif kind == MATERN32:
        return 1.0, -1.5
    return 1.0, -5.0 / 6.0


def stein_pair(kind, params, qdist, a2dist, uads, ss, trace_a):
    """k_p of one pair (scalar dispatch: for code outside the hot loops; compiled only)."""
    raise NotImplementedError("stein_pair runs in compiled code only.")


@overload(stein_pair, inline="always")
def _stein_pair_overload(kind, params, qdist, a2dist, uads, ss, trace_a):
    value = _token_kind(kind)
    if _imq_half(kind):
        def imq_sqrt(kind, params, qdist, a2dist, uads, ss, trace_a):
            c2 = params[0]
            beta = params[1]
            c1 = -4.0 * beta * (beta - 1.0)
            c0 = -2.0 * beta
            return stein_value(_IMQ_SQRT, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0)
        return imq_sqrt
    if value == IMQ:
        def imq(kind, params, qdist, a2dist, uads, ss, trace_a):
            c2 = params[0]
            beta = params[1]
            c1 = -4.0 * beta * (beta - 1.0)
            c0 = -2.0 * beta
            if beta == -0.5:
                return stein_value(_IMQ_SQRT, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0)
            return stein_value(IMQ, qdist, a2dist, uads, ss, c2, beta, trace_a, c1, c0)
        return imq
    if value == GAUSSIAN:
        return lambda kind, params, qdist, a2dist, uads, ss, trace_a: stein_value(
            GAUSSIAN, qdist, a2dist, uads, ss, 1.0, -0.5, trace_a, 0.0, 0.0)
    if value == MATERN32:
        return lambda kind, params, qdist, a2dist, uads, ss, trace_a: stein_value(
            MATERN32, qdist, a2dist, uads, ss, 0.0, -0.5, trace_a, 0.0, 0.0)
    if value == MATERN52:
        return lambda kind, params, qdist, a2dist, uads, ss, trace_a: stein_value(
            MATERN52, qdist, a2dist, uads, ss, 1.0, -0.5, trace_a, 0.0, 0.0)
    raise TypingError(f"stein_pair: unknown kernel kind {value}.")


@nb.njit(cache=True, fastmath=FAST_SUM, error_model="numpy", inline="always")
def _sum_loop(variant, qdist, a2dist, uads, ss, nj, c2, beta, trace_a):
    total = 0.0
    c1 = -4.0 * beta * (beta - 1.0)
    c0 = -2.0 * beta
    for m in range(nj):
        total += stein_value(variant, qdist[m], a2dist[m], uads[m], ss[m], c2, beta, trace_a,
                             c1, c0)
    return total


def block_stein_sum(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a):
    """sum_m k_p over one block of pairs (one specialised, vectorised loop per kernel).

    ``kind`` is the kind token, ``c2, beta = kernel_constants(kind, params)``.
    Compiled code only.
    """
    raise NotImplementedError("block_stein_sum runs in compiled code only.")


@overload(block_stein_sum, inline="always")
def _block_stein_sum_overload(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a):
    value = _token_kind(kind)
    if _imq_half(kind):
        return lambda kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a: _sum_loop(
            _IMQ_SQRT, qdist, a2dist, uads, ss, nj, c2, beta, trace_a)
    if value == IMQ:
        def imq(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a):
            if beta == -0.5:
                return _sum_loop(_IMQ_SQRT, qdist, a2dist, uads, ss, nj, c2, beta, trace_a)
            return _sum_loop(IMQ, qdist, a2dist, uads, ss, nj, c2, beta, trace_a)
        return imq
    if value == GAUSSIAN:
        return lambda kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a: _sum_loop(
            GAUSSIAN, qdist, a2dist, uads, ss, nj, c2, beta, trace_a)
    if value == MATERN32:
        return lambda kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a: _sum_loop(
            MATERN32, qdist, a2dist, uads, ss, nj, c2, beta, trace_a)
    if value == MATERN52:
        return lambda kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a: _sum_loop(
            MATERN52, qdist, a2dist, uads, ss, nj, c2, beta, trace_a)
    raise TypingError(f"block_stein_sum: unknown kernel kind {value}.")


@nb.njit(cache=True, fastmath=FAST_SUM, error_model="numpy", inline="always")
def _values_loop(variant, qdist, a2dist, uads, ss, nj, c2, beta, trace_a, factor, out):
    c1 = -4.0 * beta * (beta - 1.0)
    c0 = -2.0 * beta
    for m in range(nj):
        out[m] = factor * stein_value(variant, qdist[m], a2dist[m], uads[m], ss[m], c2, beta,
                                      trace_a, c1, c0)


def block_stein_values(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, factor, out):
    """out[m] = factor * k_p for each pair of one block (one loop per kernel).

    ``kind`` is the kind token, ``c2, beta = kernel_constants(kind, params)``.
    Compiled code only.
    """
    raise NotImplementedError("block_stein_values runs in compiled code only.")


@overload(block_stein_values, inline="always")
def _block_stein_values_overload(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, factor,
                                 out):
    value = _token_kind(kind)
    if _imq_half(kind):
        return lambda kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, factor, out: (
            _values_loop(_IMQ_SQRT, qdist, a2dist, uads, ss, nj, c2, beta, trace_a, factor, out))
    if value == IMQ:
        def imq(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, factor, out):
            if beta == -0.5:
                _values_loop(_IMQ_SQRT, qdist, a2dist, uads, ss, nj, c2, beta, trace_a, factor,
                             out)
            else:
                _values_loop(IMQ, qdist, a2dist, uads, ss, nj, c2, beta, trace_a, factor, out)
        return imq
    if value == GAUSSIAN:
        return lambda kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, factor, out: (
            _values_loop(GAUSSIAN, qdist, a2dist, uads, ss, nj, c2, beta, trace_a, factor, out))
    if value == MATERN32:
        return lambda kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, factor, out: (
            _values_loop(MATERN32, qdist, a2dist, uads, ss, nj, c2, beta, trace_a, factor, out))
    if value == MATERN52:
        return lambda kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, factor, out: (
            _values_loop(MATERN52, qdist, a2dist, uads, ss, nj, c2, beta, trace_a, factor, out))
    raise TypingError(f"block_stein_values: unknown kernel kind {value}.")


@nb.njit(cache=True, fastmath=FAST_SUM, error_model="numpy", inline="always")
def _base_loop(variant, qdist, nj, c2, beta):
    total = 0.0
    for m in range(nj):
        total += base_value(variant, qdist[m], c2, beta)
    return total


def block_base_sum(kind, c2, beta, qdist, nj):
    """sum_m f(qdist[m]): the base kernel over one block of pairs (one loop per kernel).

    ``kind`` is the kind token, ``c2, beta = kernel_constants(kind, params)``.
    Compiled code only.
    """
    raise NotImplementedError("block_base_sum runs in compiled code only.")


@overload(block_base_sum, inline="always")
def _block_base_sum_overload(kind, c2, beta, qdist, nj):
    value = _token_kind(kind)
    if _imq_half(kind):
        return lambda kind, c2, beta, qdist, nj: _base_loop(_IMQ_SQRT, qdist, nj, c2, beta)
    if value == IMQ:
        def imq(kind, c2, beta, qdist, nj):
            if beta == -0.5:
                return _base_loop(_IMQ_SQRT, qdist, nj, c2, beta)
            return _base_loop(IMQ, qdist, nj, c2, beta)
        return imq
    if value == GAUSSIAN:
        return lambda kind, c2, beta, qdist, nj: _base_loop(GAUSSIAN, qdist, nj, c2, beta)
    if value == MATERN32:
        return lambda kind, c2, beta, qdist, nj: _base_loop(MATERN32, qdist, nj, c2, beta)
    if value == MATERN52:
        return lambda kind, c2, beta, qdist, nj: _base_loop(MATERN52, qdist, nj, c2, beta)
    raise TypingError(f"block_base_sum: unknown kernel kind {value}.")
