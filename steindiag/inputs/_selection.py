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

With a score that covers more coordinates than the selection (a PyMC model's, a score
Dataset with more variables): the score is evaluated at the whole point and its selected
components kept, the Stein discrepancy of the selected coordinates (the Background page,
"A selection of the parameters")::

    names -> model_selection: the free variables selected (by name or value-variable
             name; deterministics passed over) -> Selection (their columns), or None
             when every free variable is selected (the whole vector, unchanged)
    whole draws + whole scores -> select_coordinates -> draws[..., S], scores[..., S];
             the whole SteinInput kept for the missing-mass search (log p is the whole
             model's); attrs stein_coordinates "selected k of D"
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from steindiag._containers import group_dataset, is_labelled
from steindiag._validate import warn_user

__all__ = ["check_selection", "selected_names", "resolve_var_names", "Selection",
           "check_model_names", "model_selection", "select_coordinates",
           "score_selection_attrs"]

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


# ------------------------------------------------------------------------------------
# A selection of a score that covers more coordinates than selected
# ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Selection:
    """The selected coordinates of a score that covers every free variable.

    The Stein discrepancy of the selected coordinates x_S takes the draws' columns S and
    the joint score's components S, s_S(x) = grad_{x_S} log p(x), evaluated at the whole
    point (see the Background page, "A selection of the parameters").

    Attributes
    ----------
    columns : ndarray of int
        The selected columns of the whole unconstrained vector, in its order.
    parameter : list of str
        Labels of every column of the whole vector.
    variables, left_out : list of str
        The free variables selected and left out (their names in the trace).
    draws : ndarray (chain, draw, D)
        The whole unconstrained draws.
    full : SteinInput or None
        The whole draws with their scores, once the scores are evaluated (the
        missing-mass search, which needs log p of the whole model, runs on them).
    """

    columns: np.ndarray
    parameter: list
    variables: list
    left_out: list
    draws: np.ndarray = None
    full: object = None

    @property
    def coordinates(self):
        """``"k of D"``: how many coordinates of the whole vector are checked."""
        return f"{len(self.columns)} of {len(self.parameter)}"

    def refuse(self, what):
        """A ValueError for ``what``, which needs the selected score at new points."""
        return ValueError(
            f"{what} cannot run on a selection of the parameters (var_names/filter_vars "
            f"selected {self.variables}, {self.coordinates} unconstrained coordinates): "
            f"it moves the draws or evaluates p away from them, and the score of the "
            f"selected parameters depends on the left-out ones {self.left_out}. Select every "
            "free variable (var_names=None) for it.")


def model_selection(names, layout, available):
    """The :class:`Selection` of the free variables ``names`` selects (a model's
    ``layout``: free variables with ``name``, ``value_name``, ``size``), or None when
    ``names`` is None or selects every free variable (the whole vector, unchanged).

    A name selects a free variable by its name or its value variable's name
    (``"tau_log__"``); other variables of the trace (``available``: deterministics) are
    not parameters and are passed over; a name that is neither, or a selection with no
    free variable, is an error.
    """
    if names is None:
        return None
    by_name = {var.name: var.name for var in layout}
    by_name.update({var.value_name: var.name for var in layout})
    unknown = [name for name in names if name not in by_name and name not in available]
    if unknown:
        raise ValueError(f"var_names {unknown} are neither free variables of the model "
                         f"({[var.name for var in layout]}) nor variables of the trace.")
    chosen = {by_name[name] for name in names if name in by_name}
    if not chosen:
        raise ValueError(
            f"var_names={list(names)} selects no free variable of the model (deterministics "
            f"are not parameters: the score is grad log p of the free variables "
            f"{[var.name for var in layout]}).")
    if len(chosen) == len(layout):
        return None
    offsets = np.cumsum([0] + [var.size for var in layout])
    columns = np.concatenate([np.arange(offsets[k], offsets[k + 1])
                              for k, var in enumerate(layout) if var.name in chosen])
    return Selection(columns=columns, parameter=[], variables=[
        var.name for var in layout if var.name in chosen], left_out=[
        var.name for var in layout if var.name not in chosen])


def check_model_names(names, model, available):
    """Plain ``names`` with a PyMC model: each a variable of the trace (``available``) or a
    value variable of the model, checked before anything of the model is compiled."""
    if names is None:
        return
    values = {model.rvs_to_values[rv].name for rv in model.free_RVs}
    unknown = [name for name in names if name not in available and name not in values]
    if unknown:
        raise ValueError(f"var_names {unknown} are not variables of the trace "
                         f"({[str(name) for name in available]}) nor value variables of the "
                         "model.")


def select_coordinates(selection, draws, labels, scores, attrs, full_input):
    """The selected columns of the whole ``draws`` (chain, draw, D) and ``labels``, and a
    ``scores`` () -> (values, source) of the whole vector narrowed to them: the whole
    scores are evaluated once and kept (``selection.full``, built by ``full_input``
    (draws, scores, labels, source) -> SteinInput). ``attrs`` records the selection."""
    if selection is None:
        return draws, labels, scores
    selection.draws, selection.parameter = draws, list(labels)
    attrs.update(stein_coordinates=f"selected {selection.coordinates}",
                 selected_variables=list(selection.variables),
                 left_out_variables=list(selection.left_out))

    def selected_scores():
        values, source = scores()
        selection.full = full_input(draws, values, list(labels), source)
        return values[..., selection.columns], source

    return (np.ascontiguousarray(draws[..., selection.columns]),
            [labels[k] for k in selection.columns], selected_scores)


def score_selection_attrs(score, names, sample_dims):
    """The attrs marking a selection of a score Dataset's variables: {} when ``names``
    selects them all. The selected components of the score are the joint score's, as
    with a model (the user's scores of the left-out variables are not used)."""
    left_out = [str(name) for name in score.data_vars if name not in names]
    if not left_out:
        return {}

    def size(name):
        return int(np.prod([n for dim, n in score[name].sizes.items()
                            if dim not in sample_dims]))

    chosen = sum(size(name) for name in names if name in score.data_vars)
    return {"stein_coordinates": f"selected {chosen} of {chosen + sum(map(size, left_out))}",
            "selected_variables": [str(name) for name in names],
            "left_out_variables": left_out}
