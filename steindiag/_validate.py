"""Input validation, done once and up front (scipy.stats ``_..._iv`` style).

Every message names the argument, what is allowed and what was received.
"""

import numbers
import os
import sys
import warnings

import numpy as np

__all__ = [
    "warn_user",
    "warn_if_low_precision",
    "check_kernel_args",
    "check_finite",
    "as_draws_array",
    "evaluate_score_callable",
    "check_method",
]


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def warn_user(message, category=UserWarning):
    """``warnings.warn`` attributed to the first caller outside steindiag."""
    frame, level = sys._getframe(1), 2  # stacklevel 2 is the caller of warn_user
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE_DIR + os.sep
    ):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def _is_low_precision(dtype):
    if dtype is None:
        return False
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return False
    return dtype.kind == "f" and dtype.itemsize < 8


def warn_if_low_precision(dtype, name):
    """Warn when scores arrive in less than float64 (JAX's float32 default)."""
    if _is_low_precision(dtype):
        dtype = np.dtype(dtype)
        warn_user(
            f"{name} is {dtype}: a score computed in single precision carries at most "
            f"{np.finfo(dtype).precision} significant digits (fewer after summing over many "
            "observations), and a finite-difference check of it in the same precision shows "
            "errors of about 1e-2, so it cannot be verified. JAX computes in float32 by "
            "default: call jax.config.update('jax_enable_x64', True) at start-up, before "
            "creating any array. steindiag itself computes in float64."
        )


# Largest power of ten the Stein kernel's factors may reach before its sums over N^2 pairs
# (and products such as u^T A (s(x) - s(y))) risk overflowing float64 (max about 1.8e308).
LOG10_HEADROOM = 250.0


def check_kernel_args(c, beta):
    """c > 0 finite, beta in (-1, 0); returns them as floats."""
    for name, value in (("c", c), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number; got {type(value).__name__}.")
    c, beta = float(c), float(beta)
    if not (np.isfinite(c) and c > 0):
        raise ValueError(f"c must be a finite number > 0; got c={c}.")
    if not -1.0 < beta < 0.0:
        raise ValueError(
            f"beta must be in the open interval (-1, 0) (the IMQ range in which KSD "
            f"detects non-convergence); got beta={beta}."
        )
    # The Stein kernel at t = 0 holds c^2 and (c^2)^(beta - 2); both must stay well inside
    # float64 (HEADROOM leaves room for tr(A), |s|^2 and sums over N^2 pairs).
    log_c2 = 2.0 * np.log10(c)
    if not (abs(log_c2) <= LOG10_HEADROOM and (2.0 - beta) * -log_c2 <= LOG10_HEADROOM):
        low = 10.0 ** (-LOG10_HEADROOM / (2.0 * (2.0 - beta)))
        high = 10.0 ** (LOG10_HEADROOM / 2.0)
        raise ValueError(
            f"c must be between {low:.3g} and {high:.3g} for beta = {beta:g}: the IMQ Stein "
            f"kernel holds c^2 and c^(2 (beta - 2)), which overflow float64 outside; got "
            f"c={c:g}. c is in the kernel's coordinates (after the preconditioner; with the "
            "default preconditioner='standardize', 1 is about one sd of the draws)."
        )
    return c, beta


def check_method(method, allowed):
    if method not in allowed:
        raise ValueError(f"method must be one of {sorted(allowed)}; got {method!r}.")
    return method


def _numeric_array(value, name):
    try:
        array = np.asarray(value)
    except Exception as err:  # noqa: BLE001 - anything numpy cannot take
        raise TypeError(f"{name} must be array-like; got {type(value).__name__}.") from err
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise TypeError(f"{name} must hold real numbers; got dtype {array.dtype}.")
    return array.astype(np.float64, copy=False)


def as_draws_array(value, name):
    """(chain, draw, d) or (draw, d) array-like -> float64 (chain, draw, d) array."""
    array = _numeric_array(value, name)
    if array.ndim == 2:
        array = array[None, :, :]
    if array.ndim != 3:
        raise ValueError(
            f"{name} must have shape (chain, draw, d) or (draw, d); got shape {array.shape}."
        )
    n_chain, n_draw, d = array.shape
    if n_chain < 1:
        raise ValueError(f"{name} must have at least one chain; got shape {array.shape}.")
    if d < 1:
        raise ValueError(f"{name} must have at least one parameter (d >= 1); got d = 0.")
    if n_draw < 2:
        raise ValueError(
            f"{name} must have at least 2 draws per chain; got {n_draw} (shape {array.shape})."
        )
    return array


def check_finite(array, name, chain=None, draw=None):
    """Raise ValueError naming the first non-finite (chain, draw) entries of a (C, T, d) array."""
    bad = ~np.isfinite(array)
    if not bad.any():
        return
    chain_idx, draw_idx = np.nonzero(bad.any(axis=2))
    chain = np.arange(array.shape[0]) if chain is None else np.asarray(chain)
    draw = np.arange(array.shape[1]) if draw is None else np.asarray(draw)
    where = ", ".join(
        f"(chain={chain[c].item()!r}, draw={draw[t].item()!r})" for c, t in zip(chain_idx[:5], draw_idx[:5])
    )
    more = f" and {len(chain_idx) - 5} more" if len(chain_idx) > 5 else ""
    kinds = []
    if np.isnan(array).any():
        kinds.append("NaN")
    if np.isinf(array).any():
        kinds.append("inf")
    raise ValueError(
        f"{name} contains {'/'.join(kinds)} at {len(chain_idx)} draw(s): {where}{more}. "
        "KSD needs finite draws and scores."
    )


def evaluate_score_callable(score, draws, *, batched=True, chunk_size=4096, name="score"):
    """Evaluate a user score function on (chain, draw, d) draws.

    ``batched=True``: ``score`` maps an (n, d) array to an (n, d) array (evaluated in
    chunks of ``chunk_size`` rows); ``batched=False``: it maps a (d,) vector to a (d,)
    vector. Returns a float64 (chain, draw, d) array.
    """
    if not callable(score):
        raise TypeError(f"{name} must be an array or a callable; got {type(score).__name__}.")
    n_chain, n_draw, d = draws.shape
    flat = draws.reshape(-1, d)
    out = np.empty_like(flat)
    if batched:
        pieces = [(start, min(start + chunk_size, flat.shape[0]))
                  for start in range(0, flat.shape[0], chunk_size)]
    else:
        pieces = [(i, i + 1) for i in range(flat.shape[0])]
    low_precision = None
    for start, stop in pieces:
        argument = flat[start:stop].copy() if batched else flat[start].copy()
        try:
            value = score(argument)
        except Exception as err:
            hint = (f" batched=True passes a batch of draws as an (n, d) array (here "
                    f"{argument.shape}); for a function of one draw, (d,) -> (d,), such as "
                    "Stan's log_density_gradient or pystan's grad_log_prob, pass "
                    "batched=False.") if batched else ""
            raise ValueError(
                f"{name} raised {type(err).__name__} when evaluated on draws "
                f"{start}..{stop - 1} (flattened chain-major): {err}.{hint}"
            ) from err
        if low_precision is None and _is_low_precision(getattr(value, "dtype", None)):
            low_precision = value.dtype
        value = np.asarray(value, dtype=np.float64)
        expected = (stop - start, d) if batched else (d,)
        if value.shape != expected:
            hint = (" (batched=True: it receives an (n, d) array; pass batched=False for "
                    "a function of one draw)") if batched else ""
            raise ValueError(
                f"{name} returned shape {value.shape} for input of shape {argument.shape}; "
                f"expected {expected}{hint}."
            )
        out[start:stop] = value
    warn_if_low_precision(low_precision, f"the output of {name}")
    return out.reshape(n_chain, n_draw, d)


def check_rng(rng):
    """``numpy.random.default_rng(rng)``, with a TypeError naming ``rng`` on bad input."""
    try:
        return np.random.default_rng(rng)
    except (TypeError, ValueError) as err:
        raise TypeError(
            "rng must be None, an integer seed, a numpy.random.Generator or a "
            f"SeedSequence; got {type(rng).__name__}."
        ) from err
