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
# # Forecast a 70B model from Chinchilla's runs
#
# Hoffmann et al. (2022) trained a 70B-parameter model on 1.4T tokens after fitting a scaling law
# to hundreds of smaller runs. Here we do the same with the Chinchilla law
# `L = E + A / N^alpha + B / D^beta` on Epoch AI's re-extraction of those runs (Besiroglu et al.
# 2024), but with a posterior instead of a point fit, so the forecast comes with an interval that
# says how sure it is, and how far it extrapolates.
#
# To see whether the interval can be trusted, the 23 runs above 1e21 FLOPs are held out: the law is
# fitted on the smaller runs only, and asked about the held-out runs and about the 70B model.
#
# This page is executed each time the documentation is built (`make docs`), so what it shows is
# what the package computes today.

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
runs["C"] = 6 * runs.N * runs.D  # training FLOPs
train, heldout = runs[runs.C < 1e21], runs[runs.C >= 1e21]
print(f"{len(train)} runs to fit (up to {train.C.max():.1e} FLOPs), {len(heldout)} held out "
      f"(up to {heldout.C.max():.1e} FLOPs)")

# %% [markdown]
# ## A posterior
#
# `method="laplace"` is a Gaussian at the posterior's mode: no sampling, a few seconds once compiled.
# It checks itself (the Pareto k of importance ratios between the Gaussian and the true posterior)
# and says so when the Gaussian is not good enough; `method="nuts"` (the default) samples.

# %%
post = bs.fit_posterior("chinchilla", train[["N", "D", "loss"]], method="laplace", seed=0)
post

# %%
post.summary()

# %% [markdown]
# ## Forecasts with intervals
#
# `post.forecast(rows, interval=0.9)` gives the median and a 90% interval for a new measured loss
# at each row. A row beyond the fitted table also carries a model-discrepancy term: how wrong the
# law has been when extrapolated *within* the training table (the table cut along the direction
# the row leaves it, refitted, and scored on the cut-off rows). Each row says how far it
# extrapolates (`extrapolation`, in widths of the fitted range) and what its discrepancy rests on.

# %%
target = pd.DataFrame({"N": [70e9], "D": [1.4e12]})
target["C"] = 6 * target.N * target.D
fc = post.forecast(target[["N", "D"]], interval=0.9)
fc[["median", "lower", "upper", "extrapolation", "discrepancy_tau", "discrepancy_basis"]]

# %% [markdown]
# Without the discrepancy term the interval is the posterior predictive of a law assumed exact,
# and much narrower:

# %%
naive = post.forecast(target[["N", "D"]], interval=0.9, discrepancy="off")
print(f"90% interval with the discrepancy term:    [{fc.lower.iloc[0]:.3f}, {fc.upper.iloc[0]:.3f}]")
print(f"90% interval assuming the law is exact:    [{naive.lower.iloc[0]:.3f}, "
      f"{naive.upper.iloc[0]:.3f}]")

# %% [markdown]
# ## Are the intervals honest? The held-out runs
#
# The 23 held-out runs are up to 13 times the fitted compute. `post.coverage` is the fraction of
# them inside each central interval:

# %%
print("with the discrepancy term:", post.coverage(heldout, intervals=(0.5, 0.9)))
print("law assumed exact:        ",
      post.coverage(heldout, intervals=(0.5, 0.9), discrepancy="off"))

# %% [markdown]
# Intervals of a law assumed exact miss most of the larger runs: the law is a little wrong, and
# more so the further it goes. The discrepancy term, learnt from the training runs alone, brings
# the coverage much closer to the nominal levels, at the price of wider intervals. How this holds
# up across tables is in [Results](../results.md#forecast-intervals-are-they-honest).

# %% [markdown]
# ## A fan chart
#
# Along the compute-optimal line (20 tokens per parameter), the nested 50/80/90% bands of the
# forecast, the fitted runs (grey) and the held-out ones (crosses), and the 70B model with its 90%
# interval. Bands come from common posterior draws on a dense grid; they widen where the line
# leaves the fitted runs (the discrepancy term grows with the distance).

# %%
N = np.geomspace(3e7, 1e11, 120)
grid = pd.DataFrame({"N": N, "D": 20 * N})
grid["C"] = 6 * grid.N * grid.D
fig = bs.plots.fan_chart(post, grid, "C", data=train, points=target,
                         xlabel="training FLOPs 6ND")
fig.axes[0].scatter(heldout.C, heldout.loss, marker="x", s=25, color="black",
                    label="held-out runs", zorder=5)
fig.axes[0].legend(loc="upper right")
fig

# %% [markdown]
# ## A plan: the compute-optimal size, with its uncertainty
#
# For a budget of `C = 6 N D` FLOPs, the loss-minimising split of the Chinchilla law is
# `N* = G (C/6)^(beta/(alpha+beta))`, `D* = (C/6)^(alpha/(alpha+beta)) / G` (M3 paper, Eqs. 43-44).
# Applied to every posterior draw it gives an interval for the optimal model size at
# Chinchilla's own budget:

# %%
draws = bs.plan.as_draws(post)
p = draws.params
n_opt, d_opt = bs.plan.chinchilla_optimal(p["A"], p["B"], p["alpha"], p["beta"],
                                          C=float(target.C.iloc[0]) / 6)
for name, v in (("N*", n_opt), ("D*", d_opt)):
    lo, med, hi = np.quantile(v, [0.05, 0.5, 0.95])
    print(f"{name} = {med:.3g}  (90% interval {lo:.3g} to {hi:.3g})")

# %% [markdown]
# Next: [which runs to buy](buy_runs.py) to narrow this interval, and the
# [user guide](../guide/forecast.md) for the same steps on your own CSV and from the command line.
