"""KSD of blackjax NUTS draws: a log density written in the unconstrained space.

The user guide's blackjax recipe: the positions and the log density, nothing else
(steindiag derives the score with jax.grad). The glue below the recipe is what happens
under the hood, kept so that tests/test_ecosystems.py checks its score against finite
differences of log p and this script checks the one call against it.
Needs: pip install blackjax (brings jax).
"""

import jax

jax.config.update("jax_enable_x64", True)  # float64: JAX's float32 default loses digits

import blackjax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from jax.scipy.stats import expon, norm  # noqa: E402

import steindiag  # noqa: E402

y = jnp.asarray(np.random.default_rng(0).normal(1.0, 2.0, size=20))


def logdensity(position):
    """mu ~ N(0, 5^2), sigma ~ Exp(1), y ~ N(mu, sigma^2), in (mu, log sigma).

    Sampling in log sigma needs the log-Jacobian of sigma = exp(log_sigma): + log_sigma.
    """
    mu, log_sigma = position["mu"], position["log_sigma"]
    sigma = jnp.exp(log_sigma)
    return (norm.logpdf(mu, 0.0, 5.0) + expon.logpdf(sigma) + log_sigma
            + norm.logpdf(y, mu, sigma).sum())


def run_chain(key, n_warmup=500, n_draws=1000):
    warmup_key, sample_key = jax.random.split(key)
    warmup = blackjax.window_adaptation(blackjax.nuts, logdensity)
    (state, parameters), _ = warmup.run(warmup_key, {"mu": 0.0, "log_sigma": 0.0}, n_warmup)
    step = jax.jit(blackjax.nuts(logdensity, **parameters).step)

    def one_step(state, key):
        state, _ = step(key, state)
        return state, state.position

    _, positions = jax.lax.scan(one_step, state, jax.random.split(sample_key, n_draws))
    return positions                                  # pytree, leaves (draw, ...)


chains = [run_chain(key) for key in jax.random.split(jax.random.PRNGKey(0), 4)]
positions = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *chains)

# -- recipe: start
# positions: pytree of the sampler's states, leaves of shape (chain, draw, ...), in the
# space the log density is written in (here the unconstrained one, Jacobian included).
res = steindiag.ksd(positions, log_density=logdensity)
# -- recipe: end

# -- under the hood: start
first = jax.tree_util.tree_map(lambda leaf: leaf[0, 0], positions)
_, unravel = ravel_pytree(first)
draws = np.asarray(jax.vmap(jax.vmap(lambda p: ravel_pytree(p)[0]))(positions))  # (chain, draw, d)


def log_density(z):
    return logdensity(unravel(z))


batched_grad = jax.jit(jax.vmap(jax.grad(log_density)))   # (n, d) -> (n, d)


def score(z):
    return np.asarray(batched_grad(z))


by_hand = steindiag.ksd(draws, score=score)
# -- under the hood: end
batched = True
np.testing.assert_allclose(res["ksd"], by_hand["ksd"], rtol=1e-12)
print(res[["ksd", "ksd_iid"]].to_dataframe().assign(ratio=lambda t: t.ksd / t.ksd_iid))
print(f"pooled KSD / floor: {float(res.ksd_pooled / res.ksd_iid_pooled):.2f}")
