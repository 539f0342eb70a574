"""The discrepancy's systematic part and its dependence on the width of the fitted table: the
grid posterior of bayes_scaling.bayes.intervals recovers both from rehearsal rows drawn with
known values, and a forecast draws a shifted, widened predictive from it."""
import numpy as np
import pandas as pd

from bayes_scaling.bayes.intervals import MU_SCALE, WIDTH_POWERS, sample_discrepancy, tau_posterior


def rows(mu, tau, a, p=1.0, n=60, seed=0):
    """Rehearsal rows at distances 0.1..0.6 from inner tables of width ratio q in {0.6, 0.75,
    0.85}, residuals ``N(mu g, v0 + tau^2 g^2)`` with ``g = d^p q^a`` and ``v0 = 1e-6``."""
    rng = np.random.default_rng(seed)
    q = np.tile([0.6, 0.75, 0.85], n // 3)
    d = rng.uniform(0.1, 0.6, n)
    g = d**p * q**a
    r = mu * g + np.sqrt(1e-6 + (tau * g) ** 2) * rng.standard_normal(n)
    return pd.DataFrame({"row": np.arange(n), "cut": q, "r": r, "v0": 1e-6, "d": d, "q": q})


def posterior_mean(grid, key):
    return float(np.dot(grid["w"], grid[key]))


def test_a_systematic_error_is_recovered_as_the_shift_not_as_spread():
    grid = tau_posterior(rows(mu=0.08, tau=0.0, a=0.0))
    assert abs(posterior_mean(grid, "mu") - 0.08) < 0.01
    assert posterior_mean(grid, "tau") < 0.02
    # the same rows with the sign flipped: the shift flips
    flipped = rows(mu=0.08, tau=0.0, a=0.0).assign(r=lambda t: -t["r"])
    assert abs(posterior_mean(tau_posterior(flipped), "mu") + 0.08) < 0.01


def test_an_error_that_grows_with_the_table_width_is_scaled_up_to_the_full_table():
    """Residuals ``0.08 d q^2`` (a quadratic term the law lacks): the inner tables, narrower than
    the full one, see the error shrunk by ``q^2``; the posterior extrapolates it to ``q = 1``."""
    grid = tau_posterior(rows(mu=0.08, tau=0.0, a=2.0))
    assert abs(posterior_mean(grid, "mu") - 0.08) < 0.015
    # without the width term the same rows say mu = 0.08 times the mean q^2 (about 0.53)
    assert WIDTH_POWERS[0] == 0.0
    no_width = tau_posterior(rows(mu=0.08, tau=0.0, a=2.0).drop(columns="q").assign(q=1.0))
    assert posterior_mean(no_width, "mu") < 0.06


def test_noise_like_residuals_give_no_shift_and_a_spread():
    grid = tau_posterior(rows(mu=0.0, tau=0.1, a=0.0, n=300))
    assert abs(posterior_mean(grid, "mu")) < 0.02
    assert 0.06 < posterior_mean(grid, "tau") < 0.16


def test_the_prior_alone_has_no_shift_and_its_draws_follow_it():
    empty = pd.DataFrame(columns=["row", "cut", "r", "v0", "d", "q"])
    grid = tau_posterior(empty)
    assert grid["n_rows"] == 0
    np.testing.assert_allclose(grid["mu"], 0.0)
    np.testing.assert_allclose(grid["mu_sd"], MU_SCALE)
    loc, scale, tau = sample_discrepancy(grid, np.array([0.0, 1.0]), 20000,
                                         np.random.default_rng(0))
    assert loc.shape == scale.shape == (20000, 2) and tau.shape == (20000,)
    np.testing.assert_allclose(loc[:, 0], 0.0)  # d = 0: no discrepancy
    np.testing.assert_allclose(scale[:, 0], 0.0)
    assert abs(loc[:, 1].std() - MU_SCALE) < 0.005 and abs(loc[:, 1].mean()) < 0.005
    np.testing.assert_allclose(scale[:, 1], tau)  # at d = 1 the sd is tau itself
