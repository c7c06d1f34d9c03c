"""KSD of emcee walkers: get_chain() is (step, walker, d).

The user guide's emcee recipe (tests/test_ecosystems.py runs it and checks the score
against finite differences of log p, and the one call against the glue under it).
Needs: pip install emcee jax.
"""

import jax

jax.config.update("jax_enable_x64", True)  # float64: JAX's float32 default loses digits

import emcee  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.scipy.stats import expon, norm  # noqa: E402

import steindiag  # noqa: E402

y = jnp.asarray(np.random.default_rng(0).normal(1.0, 2.0, size=20))


def log_prob(theta):
    """(mu, log sigma): mu ~ N(0, 5^2), sigma ~ Exp(1), y ~ N(mu, sigma^2), Jacobian included."""
    mu, log_sigma = theta[0], theta[1]
    sigma = jnp.exp(log_sigma)
    return (norm.logpdf(mu, 0.0, 5.0) + expon.logpdf(sigma) + log_sigma
            + norm.logpdf(y, mu, sigma).sum())


batched_log_prob = jax.jit(jax.vmap(log_prob))
n_walkers, d = 16, 2
sampler = emcee.EnsembleSampler(n_walkers, d, lambda x: np.asarray(batched_log_prob(x)),
                                vectorize=True)
sampler.random_state = np.random.RandomState(1).get_state()   # reproducible runs
start = np.random.default_rng(1).normal([1.0, 0.5], 0.1, size=(n_walkers, d))
sampler.run_mcmc(start, 3000, progress=False)

# -- recipe: start
batched_grad = jax.jit(jax.vmap(jax.grad(log_prob)))   # (n, d) -> (n, d)


def score(z):
    return np.asarray(batched_grad(z))


# The sampler itself: walkers x steps, labelled var_0, var_1; the score is checked
# against central differences of log_prob_fn at a few draws before anything else.
res = steindiag.ksd(sampler, score=score, coords={"draw": slice(1000, None)})
# -- recipe: end

# -- under the hood: start
draws = sampler.get_chain(discard=1000)                # (step, walker, d): say so
res_glue = steindiag.ksd(draws, score=score, sample_dims=("draw", "chain"))
# -- under the hood: end
batched = True
draws = np.swapaxes(draws, 0, 1)                      # (walker, step, d) for the checks
log_density = log_prob
print(f"{res.sizes['chain']} walkers x {res.attrs['n_draw']} steps; pooled KSD / floor: "
      f"{float(res.ksd_pooled / res.ksd_iid_pooled):.2f}")
