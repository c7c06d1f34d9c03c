"""Input layer: data + score source -> ``SteinInput``, one pipeline for every function.

Data flow::

    data: array | DataArray | Dataset | DataTree | InferenceData
    score source: PyMC model | callable | arrays | nutpie's stored gradients
      -> read_input: every argument validated, draws read (chain, draw, d), labelled
      -> the caller's checks that need the draws (preconditioner, sizes)
      -> PendingInput.with_scores(): scores evaluated or loaded -> SteinInput

Modules: ``_arrays`` (the axes of plain arrays), ``_trace`` (labelled traces),
``_labels`` (the one labelling rule), ``_pymc`` and ``_pymc_values`` (PyMC models,
imported only when a model is passed), ``_functions`` (score and log-density
functions for methods that evaluate them at new points), ``_sampler`` (the sampler's
divergence counts in ``sample_stats``), ``_prepare`` (the entry point).
"""

from steindiag._types import SteinInput
from steindiag.inputs._functions import log_density_values, score_function
from steindiag.inputs._sampler import SamplerWarnings, sampler_warnings
from steindiag.inputs._prepare import (
    PendingInput,
    as_trace,
    check_space,
    is_labelled,
    prepare_input,
    read_input,
)

__all__ = [
    "SteinInput",
    "PendingInput",
    "read_input",
    "prepare_input",
    "as_trace",
    "is_labelled",
    "check_space",
    "score_function",
    "log_density_values",
    "SamplerWarnings",
    "sampler_warnings",
]
