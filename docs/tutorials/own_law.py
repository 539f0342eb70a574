# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Bring your own law
#
# A law is a list of parameters (bounds, an init range) and one JAX function of
# `(params, columns)`. Registered, it is known by name to every part of the package: fits,
# posteriors, forecasts, plans, run selection, figures and the command line.
#
# Here we add Kaplan et al.'s (2020) joint law, their Eq. (1.5), fit it and Chinchilla's law to
# Epoch AI's re-extraction of the Chinchilla runs, and compare them where it matters: on runs
# larger than those they were fitted on.

# %% tags=["hide-input"]
# set-up for the rendered page (not shown there): inline figures, no notebook-widget warning
# %matplotlib inline
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import jax.numpy as jnp
import pandas as pd

import bayes_scaling as bs
from bayes_scaling.laws import Law, Param


def kaplan(p, x):
    """L = ((N_c/N)^(alpha_N/alpha_D) + D_c/D)^alpha_D (Kaplan et al. 2020, Eq. 1.5), in log
    space: a power of large numbers overflows, a log-sum-exp does not."""
    log_n_term = p["alpha_N"] / p["alpha_D"] * (jnp.log(p["N_c"]) - jnp.log(x["N"]))
    log_d_term = jnp.log(p["D_c"]) - jnp.log(x["D"])
    return jnp.exp(p["alpha_D"] * jnp.logaddexp(log_n_term, log_d_term))


bs.laws.register(Law(
    name="kaplan",
    params=(Param("N_c", 1e5, 1e20, (1e10, 1e16), log_init=True),
            Param("D_c", 1e5, 1e20, (1e10, 1e16), log_init=True),
            Param("alpha_N", 0.01, 1.0, (0.03, 0.3)),
            Param("alpha_D", 0.01, 1.0, (0.03, 0.3))),
    variables=("N", "D"), fn=kaplan,
    equation="L = ((N_c/N)^(alpha_N/alpha_D) + D_c/D)^alpha_D  (Kaplan et al. 2020, Eq. 1.5)"))
print(bs.laws.get("kaplan").describe())

# %% [markdown]
# `Param(name, lower, upper, init_range, log_init)`: the bounds hold in every fit and prior; the
# multi-start fit draws its starts from the init range (log-uniformly for scale parameters).
# Registering the same definition again (this cell run twice) is a no-op.
#
# ## Fit both laws on the smaller runs

# %%
runs = bs.datasets.load("chinchilla_epoch").query("epoch_kept")[["N", "D", "loss"]]
C = 6 * runs.N * runs.D
train, heldout = runs[C < 1e21], runs[C >= 1e21]
fits = {name: bs.fit_map(name, train, delta=1e-3, n_starts=32, seed=0)
        for name in ("kaplan", "chinchilla")}
for fit in fits.values():
    print(fit)

# %% [markdown]
# ## Compare: in the table and beyond it
#
# `fit.objective` is the summed Huber loss of log residuals on the fitted rows; `fit.score(rows)`
# gives the usual metrics on any rows. The held-out runs are up to 13 times the fitted compute.

# %%
rows = []
for name, fit in fits.items():
    s = fit.score(heldout)
    rows.append({"law": name, "summed Huber (fitted rows)": fit.objective,
                 "held-out MAE_rel": s["mae_rel"], "held-out rmse_log": s["rmse_log"]})
pd.DataFrame(rows).set_index("law")

# %% [markdown]
# Observed against predicted on the held-out runs, for each law:

# %%
bs.plots.parity_plot(fits["kaplan"], heldout, title="kaplan on the held-out runs")

# %%
bs.plots.parity_plot(fits["chinchilla"], heldout, title="chinchilla on the held-out runs")

# %% [markdown]
# ## A posterior of your law
#
# The law is a NumPyro model as it stands: priors from its bounds and init ranges, the Huber
# likelihood on log residuals. A short NUTS run (2 chains of 300 draws here, to keep this page
# fast; use the defaults for numbers you report) gives forecasts with intervals:

# %%
post = bs.fit_posterior("kaplan", train, num_chains=2, num_warmup=300, num_samples=300,
                        progress_bar=False, seed=0, allow_unconverged=True)
print(post)
post.forecast(pd.DataFrame({"N": [70e9], "D": [1.4e12]}), interval=0.9)[
    ["median", "lower", "upper", "extrapolation", "posterior_status"]]

# %% [markdown]
# Two short chains can miss the convergence checks; `allow_unconverged=True` keeps such a
# posterior usable, labelled `NOT CONVERGED` in everything computed from it (the
# `posterior_status` column above). Posteriors of several laws on the same rows are ranked by
# PSIS-LOO with `bs.compare({"kaplan": post, "chinchilla": post_chinchilla})`, and from the
# command line with `bayes-scaling compare`. With `--law-module my_laws.py`, every command takes
# the law by name: see the [guide](../guide/own-law.md).
