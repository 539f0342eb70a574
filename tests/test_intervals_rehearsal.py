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


def test_the_log_evidence_picks_the_prior_scale_the_tables_were_drawn_with():
    """Empirical Bayes over tables: 30 tables whose discrepancy (mu, tau) is drawn from the
    priors at scale 0.05 (rows r = (mu + tau z) d, tiny predictive variance); the summed log
    evidence of their rehearsal rows is highest at the scale they were drawn with, and a prior
    given explicitly changes the posterior as the module's default would."""
    rng = np.random.default_rng(3)
    scales = (0.01, 0.02, 0.05, 0.1, 0.2)
    total = dict.fromkeys(scales, 0.0)
    for _ in range(30):
        tau, mu = abs(0.05 * rng.standard_normal()), 0.05 * rng.standard_normal()
        d = rng.uniform(0.05, 0.5, 25)
        rows = pd.DataFrame({"row": np.arange(25), "cut": 0.75, "v0": np.full(25, 1e-6), "d": d,
                             "r": (mu + tau * rng.standard_normal(25)) * d})
        for s in scales:
            total[s] += tau_posterior(rows, tau_scale=s, mu_scale=s)["log_evidence"]
    assert max(total, key=total.get) == 0.05
    assert total[0.05] - total[0.01] > 20 and total[0.05] - total[0.2] > 5
    # no rows: zero evidence whatever the scales; the prior's mean tau follows the scale given
    empty = pd.DataFrame(columns=["row", "cut", "r", "v0", "d"])
    small = tau_posterior(empty, tau_scale=0.02)
    assert small["log_evidence"] == 0.0
    np.testing.assert_allclose(np.dot(small["w"], small["tau"]), 0.02 * np.sqrt(2 / np.pi),
                               rtol=0.05)


def test_an_inner_fit_padded_to_the_full_tables_rows_is_the_same_fit():
    """The rehearsal pads each inner table to the full table's row count (rows of weight 0), so
    it runs the programs the posterior's own fit compiled: the inner fit's predictive draws are
    those of the inner table padded to its own size."""
    import bayes_scaling as bs
    from bayes_scaling.bayes.intervals import _laplace_log_draws
    from bayes_scaling.bayes.spec import make_spec
    from bayes_scaling.params import row_bucket
    from conftest import simulate

    N = np.repeat(np.geomspace(1e7, 1e9, 16), 5)
    D = N * np.tile([5.0, 10.0, 20.0, 40.0, 80.0], 16)
    table = simulate("chinchilla", pd.DataFrame({"N": N, "D": D}), noise=0.01, seed=4)
    spec = make_spec(bs.laws.get("chinchilla"))
    fit = bs.fit_map("chinchilla", table, delta=1e-3)
    starts = {n: np.array([float(fit.params[n]) if n in fit.params else 0.01])
              for n in spec.names}
    inner, outer = table[table["N"] < 1.5e8], table[table["N"] >= 1.5e8]
    assert row_bucket(len(inner)) < row_bucket(len(table))
    own = _laplace_log_draws(spec, starts, inner, outer, seed=0)
    padded = _laplace_log_draws(spec, starts, inner, outer, seed=0,
                                pad=row_bucket(len(table)))
    assert own.shape == padded.shape == (len(own), len(outer))
    np.testing.assert_allclose(padded, own, rtol=0, atol=1e-8)
