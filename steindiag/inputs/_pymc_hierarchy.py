"""Whether a PyMC model holds a centred hierarchy, read from its graph.

A free variable whose scale is itself a function of another free variable (theta ~
N(mu, tau) with tau free; Neal's funnel, x ~ N(0, exp(v / 2))) makes a funnel: where the
scale is small the posterior's curvature is large, and NUTS diverges there. Written
non-centred (theta = mu + tau z, z ~ N(0, 1)) the same model has no such variable. This
module reads, for each free variable, which of its distribution's parameters is the
scale (a table of the distributions whose scale parameter is known) and whether that
parameter depends on another free variable. It says "centred" only for what it finds,
"no centred hierarchy" only when every free variable whose parameters depend on other
free variables has a distribution in the table, and otherwise that it cannot tell.
PyTensor is imported only when a model is given.
"""

from dataclasses import dataclass, field

__all__ = ["Parameterisation", "model_parameterisation"]

# PyTensor random variable name -> (number of distribution parameters, index of the
# scale among them), the same in PyMC 5 and 6. Gamma's and Exponential's parameter is
# their scale (PyMC passes 1 / beta, 1 / lam).
_SCALE = {
    "normal": (2, 1), "halfnormal": (2, 1), "t": (3, 2), "halfstudentt": (2, 1),
    "cauchy": (2, 1), "halfcauchy": (1, 0), "laplace": (2, 1), "logistic": (2, 1),
    "lognormal": (2, 1), "gumbel": (2, 1), "exponential": (1, 0), "gamma": (2, 1),
    "invgamma": (2, 1), "weibull": (2, 1), "truncated_normal": (4, 1),
    "multivariate_normal": (2, 1), "multivariate_studentt": (3, 2),
}


@dataclass(kw_only=True)
class Parameterisation:
    """What a PyMC model's graph says about centred hierarchies.

    Attributes
    ----------
    centred : list of (str, list of str)
        Each free variable whose scale depends on other free variables, with those
        variables: ``[("theta", ["tau"])]``.
    unknown : list of str
        Free variables some of whose parameters depend on other free variables but whose
        distribution's scale parameter is not in the table (e.g. a random walk): for
        these nothing is claimed.
    """

    centred: list = field(default_factory=list)
    unknown: list = field(default_factory=list)

    @property
    def state(self):
        """"centred" (some found), "non-centred" (none, and every dependent free variable
        read), or "unknown" (none found, but some could not be read)."""
        if self.centred:
            return "centred"
        return "unknown" if self.unknown else "non-centred"


def _ancestors(variables):
    try:
        from pytensor.graph.traversal import ancestors
    except ImportError:  # PyTensor < 2.31
        from pytensor.graph.basic import ancestors
    return set(ancestors(variables))


def _parents(variables, free, own):
    """Names of the free variables (other than ``own``) the ``variables`` depend on."""
    found = _ancestors(list(variables))
    return [rv.name for rv in free if rv is not own and rv in found]


def model_parameterisation(model):
    """The :class:`Parameterisation` of a PyMC ``model``'s free variables."""
    free = list(model.free_RVs)
    out = Parameterisation()
    for rv in free:
        node = rv.owner
        inputs = [var for var in node.inputs if not _is_rng_or_size(var)]
        if not _parents(inputs, free, rv):
            continue            # no parameter depends on another free variable
        known = _SCALE.get(getattr(node.op, "name", None))
        try:
            params = list(node.op.dist_params(node))
        except (AttributeError, TypeError, ValueError, IndexError):
            params = None
        if known is None or params is None or len(params) != known[0]:
            out.unknown.append(rv.name)
            continue
        parents = _parents([params[known[1]]], free, rv)
        if parents:
            out.centred.append((rv.name, parents))
    return out


def _is_rng_or_size(variable):
    """A random variable node's generator or size input (not a distribution parameter)."""
    kind = type(variable.type).__name__
    return "RandomGenerator" in kind or "RandomState" in kind or kind == "NoneTypeT"
