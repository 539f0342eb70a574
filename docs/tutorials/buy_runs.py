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
# # Which runs to buy next
#
# You have measured some cheap runs and want to forecast expensive ones. Before buying more
# compute, ask the posterior which runs would tell you most about those forecasts, per FLOP.
#
# On Epoch AI's re-extraction of the Chinchilla runs we pretend to know only the runs below 1e20
# FLOPs. The runs from 1e20 to 1e21 FLOPs are the pool one could buy; the runs above 1e21 FLOPs are
# the forecasts that matter. Because every run of the pool was in fact measured, we can buy what
# the selection picks and see what it was worth.

# %% tags=["hide-input"]
# set-up for the rendered page (not shown there): inline figures, no notebook-widget warning
# %matplotlib inline
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import numpy as np
import pandas as pd

import bayes_scaling as bs

runs = bs.datasets.load("chinchilla_epoch").query("epoch_kept")[["N", "D", "loss"]]
runs["C"] = 6 * runs.N * runs.D
have = runs[runs.C < 1e20]
pool = runs[(runs.C >= 1e20) & (runs.C < 1e21)]
targets = runs[runs.C >= 1e21]
print(f"measured: {len(have)} runs, {have.C.sum():.2e} FLOPs in all; pool: {len(pool)} runs, "
      f"{pool.C.sum():.2e} FLOPs; targets: {len(targets)} runs")

# %% [markdown]
# ## The posterior from the runs we have

# %%
post = bs.fit_posterior("chinchilla", have[["N", "D", "loss"]], method="laplace", seed=0)
print(post)

# %% [markdown]
# ## Select
#
# `bs.anchors.select` buys greedily from the pool, within the budget, the runs that most reduce the
# expected squared error of the targets' forecasts once the law is refitted with them (the
# criterion when the fitted rows are given as `observed`), per unit of cost (`"6ND"`, training
# FLOPs). The budget here is 5% of the pool's compute.

# %%
budget = 0.05 * pool.C.sum()
picks = bs.anchors.select(post, pool[["N", "D"]], budget=budget, cost="6ND",
                          queries=targets[["N", "D"]], observed=have[["N", "D", "loss"]])
picks[["N", "D", "cost", "cum_cost", "reduction"]]

# %% [markdown]
# `reduction` is the cumulative fraction of the expected error removed. The picks are not the
# biggest runs of the pool: a run's worth is what it says about the targets, divided by its cost.
#
# ## Buy them, and check
#
# Buying means measuring the picked runs' losses (here: reading them from the table) and fitting
# again. We compare the forecasts of the targets before and after, and against a purchase of the
# same cost made at random (MAP fits, so that several random purchases stay cheap).

# %%
bought = pool.loc[picks.candidate]
after = pd.concat([have, bought])


def target_error(rows):
    fit = bs.fit_map("chinchilla", rows[["N", "D", "loss"]], delta=1e-3, n_starts=16, seed=0)
    return fit.score(targets)["mae_rel"]


rng = np.random.default_rng(0)
random_errors = []
for _ in range(3):
    order = rng.permutation(len(pool))
    spent = np.cumsum(pool.C.to_numpy()[order])
    random_errors.append(target_error(pd.concat([have, pool.iloc[order[spent <= budget]]])))
print(f"MAE_rel on the targets, runs we had:          {target_error(have):.4f}")
print(f"  ... plus the selected runs:                 {target_error(after):.4f}")
print(f"  ... plus random runs of the same cost:      {np.round(random_errors, 4)}")

# %% [markdown]
# Read these together with the `reduction` the selection expected. A purchase is worth its cost
# when the targets' error falls by more than random purchases of the same cost make it fall; on a
# table whose cheap runs already pin the law down, no purchase helps much, and the expected
# reduction says so before any compute is spent.
#
# The posterior refitted with the bought runs, and its 90% intervals at the targets:

# %%
post_after = bs.fit_posterior("chinchilla", after[["N", "D", "loss"]], method="laplace", seed=0)
for name, p in (("before", post), ("after", post_after)):
    fc = p.forecast(targets[["N", "D"]], interval=0.9)
    width = ((fc.upper - fc.lower) / fc["median"]).median()
    inside = ((targets.loss >= fc.lower) & (targets.loss <= fc.upper)).mean()
    print(f"{name:>6}: median 90% width {width:.1%} of the loss, "
          f"{inside:.0%} of the {len(targets)} targets inside")

# %% [markdown]
# Narrower intervals are only worth having if they still contain the targets, so look at the
# coverage as well as the width. The bought runs move the fitted range closer to the targets: the
# forecasts extrapolate less, and their model-discrepancy term shrinks with that distance
# ([Forecast intervals](../forecasting.md)).
#
# The same from the command line is `bayes-scaling design` on your own pool (a CSV of runs you
# could buy, a cost column or formula, the target rows and a budget); comparing selection methods
# over many seeds is `bs.design.run` ([guide](../guide/buy-runs.md)).
