"""Input layer: any container + score source, read once into a ``PendingInput``.

Data flow::

    data: array | DataArray | Dataset | DataTree | InferenceData | a sampler's own object
    score source: PyMC model | callable | arrays | stored gradients | JAX | the sampler's
      -> read_input: every argument validated, draws read (chain, draw, d), labelled;
         the score source (``ScoreSource``) and the container (``Origin``) recorded
      -> the caller's checks that need the draws (preconditioner, sizes)
      -> PendingInput.with_scores(): scores evaluated or loaded -> SteinInput

The reading step and what every reader shares:

- ``_read``: ``read_input``, the one reading step, and the readers' order (``_READERS``);
- ``_functions``: ``ScoreSource``, the target's score and log p at new points;
- ``_checks``: checks shared by the readers (space, compile mode, the scores' scale);
- ``_labels``: the one labelling rule (``theta[a]``, ``theta[0]``, ``Sigma[0, 1]``);
- ``_space``: checks that the draws are in the space the caller says;
- ``_sampler``: the sampler's divergences stored in a trace, with their flags per draw and
  the chains' mean acceptance (``SamplerWarnings``).

The readers (a sampler's library is imported only when its object is given):

- ``_arrays``: plain arrays, the layout of their axes (``sample_dims``) and their scores;
- ``_trace``: labelled containers (InferenceData, DataTree, Dataset, DataArray);
- ``_trace_arrays``: a trace's variables and score arrays flattened to (chain, draw, d);
- ``_trace_model``: a PyMC model's unconstrained draws in a trace; stored scores (nutpie);
- ``_emcee``: emcee's ``EnsembleSampler`` (walkers as chains, its ``log_prob_fn``);
- ``_stan``: a pystan 3 fit with its model, or a CmdStanPy fit with a BridgeStan model;
- ``_jax``: JAX positions (pytrees, BlackJAX) and JAX log densities (``jax.grad``);
- ``_numpyro``: a numpyro ``MCMC``, its latent sites in numpyro's unconstrained space.

PyMC models as score sources (PyMC imported only when a model is given):

- ``_pymc``: the model's layout, unconstrained draws and batched grad log p;
- ``_pymc_graphs``: the compiled, batched graphs of log p and its gradient;
- ``_pymc_data``: the model's data checked against the trace's;
- ``_pymc_functions``: batched log p and score callables, for methods that move points;
- ``_pymc_values``: constrained values and deterministics at unconstrained draws;
- ``_pymc_prior``: prior draws as overdispersed starts, in the unconstrained layout;
- ``_pymc_hierarchy``: whether the model holds a centred hierarchy (``Parameterisation``).

For the summaries and checks:

- ``_columns``: a trace's own variables as columns, and weights read against its draws;
- ``_differences``: central finite differences of a log density (check or derive a score).
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
