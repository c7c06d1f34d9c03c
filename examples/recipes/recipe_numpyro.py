"""KSD of numpyro NUTS draws, in numpyro's unconstrained space: one call on the MCMC.

The user guide's numpyro recipe. steindiag reads the run MCMC itself (latent sites,
numpyro's transforms, scores from its potential energy, divergences); the glue below the
recipe is what happens under the hood, kept so that tests/test_ecosystems.py checks its
score against finite differences of log p and this script checks the one call against it.
Needs: pip install numpyro (brings jax).
"""

import jax

jax.config.update("jax_enable_x64", True)  # float64: JAX's float32 default loses digits

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from numpyro.handlers import seed, trace  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402
from numpyro.infer.util import potential_energy, unconstrain_fn  # noqa: E402

import steindiag  # noqa: E402


def model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))       # constrained: sigma > 0
    numpyro.deterministic("mu_plus_sigma", mu + sigma)          # not a parameter
    numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


model_args = (jnp.asarray(np.random.default_rng(0).normal(1.0, 2.0, size=20)),)
mcmc = MCMC(NUTS(model), num_warmup=500, num_samples=1000, num_chains=4,
            chain_method="sequential", progress_bar=False)
mcmc.run(jax.random.PRNGKey(0), *model_args)

# -- recipe: start
res = steindiag.ksd(mcmc)             # every function takes the MCMC: diagnose(mcmc), ...
# -- recipe: end

# -- under the hood: start
samples = mcmc.get_samples(group_by_chain=True)     # constrained values, (chain, draw, ...)
# Keep the latent sample sites only: deterministic sites are functions of them, not
# parameters (in the flat vector they would get a score of 0 and inflate KSD).
sites = trace(seed(model, 0)).get_trace(*model_args)
latent = [name for name, site in sites.items()
          if site["type"] == "sample" and not site["is_observed"]]
samples = {name: samples[name] for name in latent}


def flat_unconstrained(params):
    return ravel_pytree(unconstrain_fn(model, model_args, {}, params))[0]


draws = np.asarray(jax.vmap(jax.vmap(flat_unconstrained))(samples))   # (chain, draw, d)
_, unravel = ravel_pytree(unconstrain_fn(model, model_args, {},
                                         {name: v[0, 0] for name, v in samples.items()}))


def log_density(z):
    """log p of the flat unconstrained vector, log-Jacobian included."""
    return -potential_energy(model, model_args, {}, unravel(z))


batched_grad = jax.jit(jax.vmap(jax.grad(log_density)))   # (n, d) -> (n, d)


def score(z):
    return np.asarray(batched_grad(z))


by_hand = steindiag.ksd(draws, score=score)
# -- under the hood: end
batched = True
np.testing.assert_allclose(res["ksd"], by_hand["ksd"], rtol=1e-12)
print("parameters (ravel_pytree order, sorted by site name):", sorted(latent))
print(res[["ksd", "ksd_iid"]].to_dataframe().assign(ratio=lambda t: t.ksd / t.ksd_iid))
print(f"pooled KSD / floor: {float(res.ksd_pooled / res.ksd_iid_pooled):.2f}")
