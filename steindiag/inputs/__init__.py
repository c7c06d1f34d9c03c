"""Input layer: any container + score source, read once into a ``PendingInput``.

Data flow::

    data: array | DataArray | Dataset | DataTree | InferenceData | a sampler's own object
    score source: PyMC model | callable | arrays | stored gradients | JAX | the sampler's
      -> read_input: every argument validated, draws read (chain, draw, d), labelled;
         the score source (``ScoreSource``) and the container (``Origin``) recorded
      -> the caller's checks that need the draws (preconditioner, sizes)
      -> PendingInput.with_scores(): scores evaluated or loaded -> SteinInput

Modules: ``_read`` (the reading step and its readers' order), ``_arrays`` (the axes of
plain arrays), ``_trace``, ``_trace_arrays`` and ``_trace_model`` (labelled traces: the
reading, their variables and score arrays flattened, a PyMC model's value variables,
nutpie's and ``add_scores``' stored gradients), ``_labels`` (the one labelling rule),
``_space`` (checks of the space draws and scores are in), ``_checks`` (checks shared by
the readers), ``_functions`` (the score source: score and log p at new points),
``_columns`` (a trace's own variables, for summaries), ``_sampler`` (the sampler's
divergences), ``_differences`` (finite differences of a log density), ``_emcee``,
``_stan``, ``_jax`` and ``_numpyro`` (samplers' own objects, their libraries imported only
when such an object is given), and for PyMC models (PyMC imported only when a model is
given): ``_pymc`` (the free variables' layout, the score pass), ``_pymc_graphs`` (the
compiled graphs of log p and its gradient), ``_pymc_values`` (constrained <-> unconstrained
values), ``_pymc_data`` (the model's data against the trace's), ``_pymc_functions`` (log p
and score callables) and ``_pymc_prior`` (prior draws as starts).
"""

from steindiag._types import PendingInput, SteinInput
from steindiag.inputs._functions import ScoreSource, check_log_density
from steindiag.inputs._read import derived_score, read_input
from steindiag.inputs._sampler import SamplerWarnings, sampler_warnings
from steindiag.inputs._trace_model import as_trace

__all__ = [
    "read_input",
    "derived_score",
    "PendingInput",
    "SteinInput",
    "ScoreSource",
    "SamplerWarnings",
    "sampler_warnings",
    "check_log_density",
    "as_trace",
]
