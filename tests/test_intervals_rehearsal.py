"""The discrepancy's grid posterior pools rehearsal rows of several directions, some of which
allow no cut (an empty part): the pooled posterior is that of the non-empty parts."""
import numpy as np
import pandas as pd

from bayes_scaling.bayes.intervals import TAU_SCALE, tau_posterior


def test_an_empty_untyped_part_pools_like_nothing():
    rng = np.random.default_rng(0)
    rows = pd.DataFrame({"row": np.arange(12), "cut": 0.75, "r": 0.05 * rng.standard_normal(12),
                         "v0": np.full(12, 1e-4), "d": np.linspace(0.1, 0.6, 12)})
    empty = pd.DataFrame(columns=["row", "cut", "r", "v0", "d"])  # object columns
    pooled = tau_posterior(pd.concat([empty, rows], ignore_index=True))
    alone = tau_posterior(rows)
    assert pooled["n_rows"] == alone["n_rows"] == 12
    np.testing.assert_allclose(pooled["w"], alone["w"])
    # residuals of sd 0.05 against a predictive sd of 0.01 need a discrepancy: tau well above 0
    tau = np.dot(alone["w"], alone["tau"])
    assert tau > 0.05
    # no rows at all: the prior, a half-normal of scale TAU_SCALE (mean TAU_SCALE sqrt(2 / pi))
    prior = tau_posterior(empty)
    assert prior["n_rows"] == 0
    np.testing.assert_allclose(np.dot(prior["w"], prior["tau"]), TAU_SCALE * np.sqrt(2 / np.pi),
                               rtol=0.02)
