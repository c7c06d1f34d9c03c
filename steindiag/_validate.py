"""Input validation, done once and up front (scipy.stats ``_..._iv`` style).

Every message names the argument, what is allowed and what was received.
"""

import functools
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
    "real_array",
    "evaluate_score_callable",
    "check_method",
    "check_bool",
    "check_int",
    "check_real",
    "check_choice",
    "check_probability",
    "check_callable",
    "check_labeller",
    "check_rng",
    "renamed_arguments",
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
    """``method`` is one of ``allowed`` (listed sorted in the message)."""
    return check_choice(method, "method", sorted(allowed))


# -- scalar arguments ---------------------------------------------------------------------
# One checker per kind of argument, each returning the value standardised (int, float,
# bool): the messages name the argument, what is allowed and what was received.


def check_bool(value, name):
    """True or False (NumPy's bool too), as a Python bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {value!r}.")
    return bool(value)


def _int_wanted(minimum, maximum, allow_none):
    if minimum == 1 and maximum is None:
        wanted = "a positive integer"
    elif minimum is not None and maximum is not None:
        wanted = f"an integer in [{minimum}, {maximum}]"
    elif minimum is not None:
        wanted = f"an integer >= {minimum}"
    else:
        wanted = "an integer"
    return f"None or {wanted}" if allow_none else wanted


def check_int(value, name, *, minimum=None, maximum=None, allow_none=False, wanted=None):
    """An integer (not a bool) in [minimum, maximum], as a Python int (or None if allowed).

    ``wanted`` replaces the description of what is allowed in the messages (e.g. "'auto'
    or a positive integer" for an argument that also takes a string).
    """
    if value is None and allow_none:
        return None
    wanted = _int_wanted(minimum, maximum, allow_none) if wanted is None else wanted
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        shown = repr(value) if isinstance(value, str) else type(value).__name__
        raise TypeError(f"{name} must be {wanted}; got {shown}.")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {wanted}; got {value}.")
    return int(value)


def check_real(value, name, *, low=None, high=None, low_open=False, high_open=False,
               allow_none=False):
    """A finite real number (not a bool) within the bounds given, as a Python float."""
    if value is None and allow_none:
        return None
    prefix = "None or " if allow_none else ""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {prefix}a real number; got {type(value).__name__}.")
    value = float(value)
    if low is not None and high is not None:
        wanted = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        wanted = f"{'>' if low_open else '>='} {low:g}"
    elif high is not None:
        wanted = f"{'<' if high_open else '<='} {high:g}"
    else:
        wanted = ""
    inside = np.isfinite(value) and not (
        (low is not None and (value < low or (low_open and value == low)))
        or (high is not None and (value > high or (high_open and value == high))))
    if not inside:
        raise ValueError(f"{name} must be {prefix}a finite number {wanted}".rstrip()
                         + f"; got {name}={value:g}.")
    return value


def check_probability(value, name):
    """A number in the open interval (0, 1), as a float."""
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
            or not 0 < value < 1):
        raise ValueError(f"{name} must be a number in (0, 1); got {value!r}.")
    return float(value)


def check_choice(value, name, choices):
    """One of ``choices`` (compared by equality, so strings, True/False or None)."""
    for choice in choices:
        if isinstance(choice, bool):
            if isinstance(value, (bool, np.bool_)) and bool(value) is choice:
                return choice
        elif isinstance(choice, str):
            if isinstance(value, str) and value == choice:
                return choice
        elif value is choice:
            return choice
    raise ValueError(f"{name} must be one of {list(choices)}; got {value!r}.")


def check_callable(value, name, wanted, *, allow_none=True):
    """A callable (or None when allowed); ``wanted`` describes it in the message."""
    if value is None and allow_none:
        return None
    if not callable(value):
        raise TypeError(f"{name} must be {'None or ' if allow_none else ''}{wanted}; got "
                        f"{type(value).__name__}.")
    return value


def check_labeller(labeller):
    """An ArviZ labeller (an object with ``make_label_flat(var_name, sel, isel)``) or None."""
    if labeller is not None and not callable(getattr(labeller, "make_label_flat", None)):
        raise TypeError(
            "labeller must be None or an ArviZ labeller: an object with "
            "make_label_flat(var_name, sel, isel), such as arviz_base.labels.BaseLabeller(), "
            "MapLabeller(...), DimCoordLabeller(), IdxLabeller() or NoVarLabeller() (arviz.labels "
            f"on ArviZ 0.x); got {type(labeller).__name__}.")
    return labeller


def real_array(value, name, *, allow_bool=False):
    """``value`` as a float64 array, or an error naming ``name``; never a silent coercion.

    Integers are exact in float64 and accepted (booleans too with ``allow_bool``: an
    indicator's 0 and 1). Complex numbers are refused (casting would drop the imaginary
    part), as are non-numbers; a masked array with masked entries is refused (NumPy
    would read the values under the mask).
    """
    if isinstance(value, np.ma.MaskedArray) and np.ma.count_masked(value):
        raise ValueError(
            f"{name} is a masked array with {np.ma.count_masked(value)} masked entries; "
            "steindiag does not read masks (the values under them would be used): fill "
            "them (numpy.ma.filled) or drop the masked draws first."
        )
    try:
        array = np.asarray(value)
    except Exception as err:  # noqa: BLE001 - anything numpy cannot take
        raise TypeError(f"{name} must be array-like; got {type(value).__name__}.") from err
    if np.issubdtype(array.dtype, np.complexfloating):
        raise TypeError(
            f"{name} must hold real numbers; got complex values (dtype {array.dtype}), "
            "whose imaginary part a cast would drop. Pass real values."
        )
    if array.dtype == bool and allow_bool:
        return array.astype(np.float64)
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise TypeError(f"{name} must hold real numbers; got dtype {array.dtype}.")
    return array.astype(np.float64, copy=False)


def as_draws_array(value, name):
    """(chain, draw, d) or (draw, d) array-like -> float64 (chain, draw, d) array."""
    array = real_array(value, name)
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
        value = real_array(value, f"the output of {name}")
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
    """``numpy.random.default_rng(rng)``, with an error naming ``rng`` on bad input."""
    if isinstance(rng, numbers.Integral) and not isinstance(rng, (bool, np.bool_)) and rng < 0:
        raise ValueError(f"rng must be None, a non-negative integer seed, a "
                         f"numpy.random.Generator or a SeedSequence; got {rng}.")
    try:
        return np.random.default_rng(rng)
    except (TypeError, ValueError) as err:
        raise TypeError(
            "rng must be None, a non-negative integer seed, a numpy.random.Generator or a "
            f"SeedSequence; got {type(rng).__name__}."
        ) from err


def renamed_arguments(**renames):
    """Decorator: a call with an argument's old name raises a TypeError naming the new one.

    ``renames`` maps each old name to (new name, what the new one takes); steindiag is
    pre-1.0, so a renamed argument is an error, never silently taken.
    """
    def decorate(function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            for old, (new, takes) in renames.items():
                if old in kwargs:
                    raise TypeError(f"{function.__name__}: {old}= was renamed {new}= "
                                    f"({takes}); got {old}={kwargs[old]!r}.")
            return function(*args, **kwargs)
        return call
    return decorate
