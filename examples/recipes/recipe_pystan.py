"""KSD of Stan draws through pystan 3, in Stan's unconstrained space.

The user guide's pystan recipe (tests/test_ecosystems.py runs it and checks the score
against finite differences of log p; tests/test_emcee_stan.py checks that the one call
gives the numbers of the glue below). Needs: pip install pystan (Linux or macOS; it
builds the model with the system's C++ compiler, about a minute the first time).
"""

import numpy as np
import stan

import steindiag

program = """
data { int N; vector[N] y; }
parameters { real mu; real<lower=0> sigma; }
model { mu ~ normal(0, 5); sigma ~ exponential(1); y ~ normal(mu, sigma); }
"""
data = {"N": 20, "y": np.random.default_rng(0).normal(1.0, 2.0, size=20).tolist()}
posterior = stan.build(program, data=data, random_seed=1)
fit = posterior.sample(num_chains=4, num_samples=250)

# -- recipe: start
res = steindiag.ksd(fit, posterior)     # the fit and the model that sampled it
# -- recipe: end

# -- under the hood: start
n_chain = fit.num_chains
n_draw = fit[fit.param_names[0]].shape[-1] // n_chain
# fit[name] is (*shape, draw * chain) with the chains interleaved (draw-major): the
# (chain, draw) order is .reshape(n_draw, n_chain).T, not .reshape(n_chain, n_draw).
constrained = {name: np.moveaxis(fit[name].reshape(*shape, n_draw, n_chain), (-1, -2), (0, 1))
               for name, shape in zip(fit.param_names, fit.dims)}  # (chain, draw, *shape)
draws = np.array([[posterior.unconstrain_pars({name: value[c, t].tolist()
                                                for name, value in constrained.items()})
                   for t in range(n_draw)] for c in range(n_chain)])  # (chain, draw, d)


def score(z):
    """grad log p of one unconstrained draw (Jacobian included), (d,) -> (d,)."""
    return np.asarray(posterior.grad_log_prob(z.tolist()))


res_glue = steindiag.ksd(draws, score=score, batched=False)


def log_density(z):
    return posterior.log_prob(list(z), adjust_transform=True)
# -- under the hood: end


batched = False
print(res[["ksd", "ksd_iid"]].to_dataframe().assign(ratio=lambda t: t.ksd / t.ksd_iid))
print(f"pooled KSD / floor: {float(res.ksd_pooled / res.ksd_iid_pooled):.2f}")
