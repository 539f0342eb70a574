"""The rehearsal calibrated against its own null (bayes_scaling.bayes.intervals): replicate tables
drawn from the fitted model measure the inner fits' bias, variance and the correlation of the
rows one cut holds out; the calibrated discrepancy is small on a table from the law itself and
clearly positive on a table from a law with a kink the fitted law lacks."""
import warnings

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes.intervals import (
    MU_SCALE,
    NULL_REPLICATES,
    TAU_SCALE,
    calibrate_rows,
    null_statistics,
    signature_grid,
    tau_posterior,
)

LAW = bs.laws.get("chinchilla")
N = np.repeat(np.geomspace(1e7, 3e8, 8), 4)
TRAIN = pd.DataFrame({"N": N, "D": N * np.tile([10.0, 20.0, 40.0, 80.0], 8)})


def table(kink, seed):
    """The Chinchilla law at its example parameters with noise 0.01 on ``log L``, times
    ``exp(kink * max(log(N / 1e8), 0))``: beyond ``N = 1e8`` the loss falls slower than the law."""
    x = LAW.inputs(TRAIN.assign(loss=1.0))
    y = np.asarray(LAW.fn({k: jnp.asarray(v) for k, v in LAW.example.items()}, x))
    beyond = np.maximum(np.log(TRAIN["N"].to_numpy() / 1e8), 0.0)
    noise = 0.01 * np.random.default_rng(seed).standard_normal(len(TRAIN))
    return TRAIN.assign(loss=y * np.exp(kink * beyond + noise))


def fit(df):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bs.fit_posterior("chinchilla", df, method="laplace", likelihood="normal", seed=0,
                                progress_bar=False)


def scale(grid):
    """Posterior mean of ``mu`` and the root mean square discrepancy one fitted width beyond the
    table, ``sqrt(E[mu^2 + tau^2])`` (the prior's is ``sqrt(MU_SCALE^2 + TAU_SCALE^2)``)."""
    w = np.asarray(grid["w"])
    mu, sd, tau = (np.asarray(grid[k]) for k in ("mu", "mu_sd", "tau"))
    return float(w @ mu), float(np.sqrt(w @ (mu**2 + sd**2 + tau**2)))


@pytest.fixture(scope="module")
def right():
    return fit(table(0.0, seed=0))


@pytest.fixture(scope="module")
def kinked():
    return fit(table(0.06, seed=0))


def test_the_null_of_a_right_law_is_near_standard_with_correlated_cuts(right):
    stats = null_statistics(right, {"N": 1.0})
    assert len(stats) >= 2 and (stats["n_rep"] == NULL_REPLICATES).all()
    # the inner Laplace fits are nearly calibrated row by row ...
    assert (stats["mean"].abs() < 1.0).all()
    assert ((stats["var"] > 0.5) & (stats["var"] < 2.5)).all()
    # ... but the rows one cut holds out share its parameter error
    assert (stats["rho"] > 0.1).all() and (stats["rho"] < 0.9).all()
    # the same replicates give the same statistics
    pd.testing.assert_frame_equal(stats, null_statistics(right, {"N": 1.0}))


def test_the_calibrated_discrepancy_is_small_for_the_right_law_and_positive_for_a_wrong_one(
        right, kinked):
    prior = np.hypot(MU_SCALE, TAU_SCALE)
    mu_right, s_right = scale(signature_grid(right, "N+", calibrated=True))
    mu_kinked, s_kinked = scale(signature_grid(kinked, "N+", calibrated=True))
    # well inside the prior (0.14) for the right law, though not zero: one table's rehearsal
    # still carries a spurious shift of a few noise sds
    assert abs(mu_right) < 0.07 and s_right < 0.7 * prior
    # the kinked table's loss lies above the law beyond the cuts: a positive shift
    assert mu_kinked > 0.08 and mu_kinked > mu_right + 0.1 and s_kinked > s_right
    assert "calibrated on" in signature_grid(kinked, "N+", calibrated=True)["basis"]
    # cached apart from the default grid
    assert {"N+", "calibrated N+"} - set(kinked.settings["discrepancy_grid"]) == {"N+"}


def rows(shared, n_cuts=4, n=12, seed=0):
    """Rehearsal rows of ``n_cuts`` cuts, ``n`` rows each, ``v0 = 1e-4``, whose standardised
    residuals share one N(0, shared) error per cut (no discrepancy)."""
    rng = np.random.default_rng(seed)
    cut = np.repeat(np.arange(n_cuts) / 10 + 0.5, n)
    z = np.sqrt(shared) * np.repeat(rng.standard_normal(n_cuts), n) \
        + np.sqrt(1 - shared) * rng.standard_normal(n_cuts * n)
    return pd.DataFrame({"row": np.arange(n_cuts * n), "cut": cut, "r": 0.01 * z, "v0": 1e-4,
                         "d": rng.uniform(0.1, 0.6, n_cuts * n), "q": 1.0})


def test_calibration_removes_the_null_bias_and_scales_the_variance():
    r = rows(0.0).assign(r=lambda t: t["r"] + 0.02)  # every row 2 sd too high
    stats = pd.DataFrame({"cut": sorted(r["cut"].unique()), "mean": 2.0, "var": 4.0, "rho": 0.3,
                          "n_rep": 20})
    c = calibrate_rows(r, stats)
    np.testing.assert_allclose(c["r"], r["r"] - 0.02)
    np.testing.assert_allclose(c["v0"], 4e-4)
    np.testing.assert_allclose(c["rho"], 0.3)
    # a variance below 1 is not shrunk
    assert (calibrate_rows(r, stats.assign(var=0.5))["v0"] == 1e-4).all()


def test_correlated_rows_are_weaker_evidence_for_a_shift():
    """Rows sharing a per-cut error and no discrepancy: read as independent, ``mu`` is often more
    than two posterior sds from 0 (a spurious shift); scored with their correlation, rarely."""
    def spurious(g):
        m = np.dot(g["w"], g["mu"])
        sd = np.sqrt(np.dot(g["w"], np.square(g["mu_sd"]) + np.square(g["mu"])) - m**2)
        return abs(m) > 2 * sd

    tables = [rows(0.5, seed=s) for s in range(40)]
    alone = np.mean([spurious(tau_posterior(r)) for r in tables])
    joint = np.mean([spurious(tau_posterior(r.assign(rho=0.5))) for r in tables])
    assert alone > 0.2 and joint < 0.15


def test_forecast_uses_the_calibrated_rehearsal_when_asked(kinked):
    new = pd.DataFrame({"N": [1e8, 1e9, 2e9], "D": [2e9, 2e10, 4e10]})
    fc = kinked.forecast(new, discrepancy="calibrated", allow_unconverged=True)
    off = kinked.forecast(new, discrepancy="off", allow_unconverged=True)
    assert list(fc["extrapolated"]) == [False, True, True]
    assert fc.loc[0, "lower"] == off.loc[0, "lower"] and fc.loc[0, "discrepancy_shift"] == 0
    assert (fc.loc[1:, "discrepancy_shift"] > 0).all()
    assert (fc.loc[1:, "upper"] > off.loc[1:, "upper"]).all()
    assert fc["discrepancy_basis"].str.contains("calibrated on").iloc[1:].all()
    with pytest.raises(bs.errors.BayesScalingError, match="calibrated"):
        kinked.forecast(new, discrepancy="null")


def test_an_inner_fit_the_full_tables_modes_do_not_start_is_found_by_a_fresh_map():
    """On this strongly curved table (``exp(0.02 log(N / 1e7)^2)``) Newton from the full table's
    modes reaches no finite inner mode; the rehearsal searches it from random starts instead of
    failing the forecast."""
    n = np.log(TRAIN["N"].to_numpy() / 1e7)
    post = fit(table(0.0, seed=0).assign(loss=lambda t: t["loss"] * np.exp(0.02 * n**2)))
    grid = signature_grid(post, "D+,N+")
    assert grid["n_rows"] > 0 and "skipped" not in grid["basis"]
    # beyond each cut the curved loss lies above the law fitted inside it
    assert scale(grid)[0] > 0.05
