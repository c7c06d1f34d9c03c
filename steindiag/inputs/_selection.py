"""``var_names`` and ``filter_vars`` as ArviZ reads them, resolved once to a list of names.

ArviZ's rules (``arviz.utils._var_names``, the same in arviz-base):

- ``var_names`` is a name or a list of names, in the order the draws' columns take;
- a name starting with ``~`` excludes that variable: the selection is every variable of
  the trace but the excluded ones, in the trace's order (a ``~name`` that is itself a
  variable's name is that variable);
- ``filter_vars="like"``: each entry is a substring of the names it selects;
  ``filter_vars="regex"``: a regular expression (``re.search``); both keep the trace's
  order, and apply to ``~`` entries too;
- an excluded name that matches nothing is ignored with a warning; a name that matches
  nothing is an error.

Where ArviZ would guess, steindiag refuses: names mixed with exclusions (ArviZ then drops
the names without a word), and a selection that leaves no variable. A variable selected
by two patterns is taken once.
"""

import re
from collections.abc import Sequence

from steindiag._containers import group_dataset, is_labelled
from steindiag._validate import warn_user

__all__ = ["check_selection", "selected_names", "resolve_var_names"]

FILTERS = (None, "like", "regex")


def check_selection(var_names, filter_vars):
    """``var_names`` as a list of strings (or None) and ``filter_vars``, both checked."""
    if filter_vars not in FILTERS:
        raise ValueError(
            f"filter_vars must be None, 'like' or 'regex' (as in ArviZ); got {filter_vars!r}."
        )
    if var_names is None:
        return None
    if isinstance(var_names, str):
        var_names = [var_names]
    if not (isinstance(var_names, Sequence) and all(isinstance(v, str) for v in var_names)):
        raise TypeError(f"var_names must be a string or a list of strings; got {var_names!r}.")
    if len(var_names) == 0:
        raise ValueError("var_names must name at least one variable; got an empty list.")
    if filter_vars == "regex":
        for pattern in var_names:
            try:
                re.compile(pattern[1:] if pattern.startswith("~") else pattern)
            except re.error as err:
                raise ValueError(f"var_names entry {pattern!r} is not a regular expression "
                                 f"(filter_vars='regex'): {err}.") from None
    return list(var_names)


def _matches(pattern, name, filter_vars):
    if filter_vars == "like":
        return pattern in name
    if filter_vars == "regex":
        return re.search(pattern, name) is not None
    return pattern == name


def selected_names(var_names, filter_vars, available, what="the trace"):
    """The names ``var_names`` selects among ``available`` (ArviZ's rules), or None."""
    var_names = check_selection(var_names, filter_vars)
    if var_names is None:
        return None
    available = [str(name) for name in available]
    excluded = [v[1:] for v in var_names if v.startswith("~") and v not in available]
    if excluded:
        kept = [v for v in var_names if not (v.startswith("~") and v not in available)]
        if kept:
            raise ValueError(
                f"var_names mixes names {kept} with exclusions "
                f"{['~' + v for v in excluded]}: ArviZ then keeps every variable but the "
                "excluded ones and drops the names. Pass only names, or only exclusions.")
        unmatched = [p for p in excluded
                     if not any(_matches(p, name, filter_vars) for name in available)]
        if unmatched:
            warn_user(f"var_names: the excluded {unmatched} match no variable of {what} "
                      f"({available}) and are ignored.")
        names = [name for name in available
                 if not any(_matches(p, name, filter_vars) for p in excluded)]
    elif filter_vars is None:
        names = list(dict.fromkeys(var_names))
        missing = [name for name in names if name not in available]
        if missing:
            raise ValueError(f"var_names {missing} are not variables of {what}; it has "
                             f"{available}.")
    else:
        names = [name for name in available
                 if any(_matches(p, name, filter_vars) for p in var_names)]
        unmatched = [p for p in var_names
                     if not any(_matches(p, name, filter_vars) for name in available)]
        if unmatched:
            raise ValueError(f"var_names {unmatched} (filter_vars={filter_vars!r}) match no "
                             f"variable of {what}; it has {available}.")
    if not names:
        raise ValueError(f"var_names={var_names} (filter_vars={filter_vars!r}) selects no "
                         f"variable of {what}; it has {available}.")
    return names


def resolve_var_names(data, group, var_names, filter_vars):
    """``var_names`` of a trace's ``group`` as the list of names it selects (None: all).

    Plain names without ``filter_vars`` are returned as given (the readers check them);
    ``~`` exclusions and patterns are resolved against the group's variables. For data
    that is not a trace (arrays, a sampler's object), ``filter_vars`` and ``~`` are
    refused: their readers take var_names as names.
    """
    var_names = check_selection(var_names, filter_vars)
    if var_names is None or (filter_vars is None
                             and not any(v.startswith("~") for v in var_names)):
        return var_names
    if not is_labelled(data) or type(data).__name__ == "DataArray":
        raise TypeError(
            f"var_names={var_names} with filter_vars={filter_vars!r} selects among a "
            f"trace's variables; data is a {type(data).__name__}: name the variables.")
    dataset = group_dataset(data, group)
    return selected_names(var_names, filter_vars, dataset.data_vars,
                          f"the trace's group {group!r}")
