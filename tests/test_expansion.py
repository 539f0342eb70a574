"""The model expansion (``bs.bayes.expansion``): the law plus a second-order polynomial in its log
inputs, with the coefficients integrated out (docs/forecasting.md, "Model expansion")."""
import warnings

import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes.expansion import Expansion, expansion_scale
from bayes_scaling.errors import BayesScalingError


def pure_power_fn(p, x):
    return p["A"] * x["N"] ** -p["alpha"]


PURE_POWER = bs.laws.Law(
    name="toy_pure_power", variables=("N",), equation="A N^-alpha", fn=pure_power_fn,
    params=(bs.laws.Param("A", 1.0, 1e4, (1.0, 1e4), True),
            bs.laws.Param("alpha", 0.05, 1.0, (0.05, 1.0), True)))


def power_table(curvature=0.0, noise=0.005, seed=0, N=None):
    """``20 N^-0.1`` times ``exp(curvature v^2)``, ``v`` the centred scaled ``log N`` of the
    fitted range 1e7..1e9, with log-normal noise."""
    N = np.geomspace(1e7, 1e9, 30) if N is None else np.asarray(N, float)
    v = np.log(N / 1e7) / np.log(100.0) - 0.5
    clean = 20.0 * N**-0.1 * np.exp(curvature * v**2)
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"N": N, "loss": clean * np.exp(noise * rng.standard_normal(len(N))),
                         "clean": clean})


def fit(law, df):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bs.fit_posterior(law, df, method="laplace", likelihood="normal", seed=0,
                                progress_bar=False, allow_unconverged=True)


@pytest.fixture(scope="module")
def straight():
    return fit(PURE_POWER, power_table())


def test_a_term_the_law_absorbs_does_not_move_its_forecasts(straight):
    # log(A N^-alpha) is linear in log N: the linear term is absorbed exactly by A and alpha, at
    # every row however far; the square is not, and grows beyond the fitted range
    ex = Expansion(straight)
    assert ex.names == ["N", "N^2"]
    far = pd.DataFrame({"N": [1e8, 1e10, 1e12]})
    phi = ex.phi_perp(far)
    assert np.abs(phi[:, 0]).max() < 1e-6
    v = np.log(far["N"].to_numpy() / 1e7) / np.log(100.0) - 0.5
    assert abs(phi[2, 1]) > 10 * abs(phi[0, 1])
    # phi_perp of the square is v^2 minus its least-squares line over the fitted rows
    fitted = np.log(np.geomspace(1e7, 1e9, 30) / 1e7) / np.log(100.0) - 0.5
    line = np.polyfit(fitted, fitted**2, 1)
    np.testing.assert_allclose(phi[:, 1], v**2 - np.polyval(line, v), rtol=1e-6, atol=1e-9)


def test_right_law_noise_and_coefficients(straight):
    ex = Expansion(straight)
    assert ex.sigma(0.05) == pytest.approx(0.005, rel=0.3)
    mean, cov = ex.coefficients(0.05)
    assert np.all(np.abs(mean) < 3 * np.sqrt(np.diag(cov)) + 1e-12)
    # Occam: a scale far beyond what the residuals show has less evidence than a small one
    assert ex.log_evidence(1.0) < ex.log_evidence(0.01)


def test_recovers_curvature_the_law_lacks():
    post = fit(PURE_POWER, power_table(curvature=0.3))
    ex = Expansion(post)
    mean, cov = ex.coefficients(0.5)
    assert mean[1] == pytest.approx(0.3, abs=3 * np.sqrt(cov[1, 1]))
    assert np.sqrt(cov[1, 1]) < 0.1
    assert ex.log_evidence(0.5) > ex.log_evidence(0.01)
    far = power_table(curvature=0.3, noise=0.0, N=np.geomspace(3e9, 3e10, 5))
    post.settings["expansion_scale"] = 0.5
    off = post.forecast(far, allow_unconverged=True, discrepancy="off")
    on = post.forecast(far, allow_unconverged=True, discrepancy="expansion")
    truth = far["clean"].to_numpy()
    assert not np.any((off["lower"] <= truth) & (truth <= off["upper"]))
    assert np.all((on["lower"] <= truth) & (truth <= on["upper"]))
    assert on["discrepancy_basis"].str.contains("second-order expansion in log N").all()
    # the systematic part moves the median towards the truth
    assert np.all(np.abs(on["median"] - truth) < 0.5 * np.abs(off["median"] - truth))


def test_expansion_is_a_discrepancy_option(straight):
    with pytest.raises(BayesScalingError, match="'expansion'"):
        straight.forecast(pd.DataFrame({"N": [1e10]}), discrepancy="bogus",
                          allow_unconverged=True)
    row = pd.DataFrame({"N": [3e8, 1e11]})
    fc = straight.forecast(row, discrepancy="expansion", allow_unconverged=True)
    assert list(fc["extrapolated"]) == [False, True]
    # inside the range the expansion is pinned by the rows; beyond it, it widens
    assert fc["discrepancy_tau"].iloc[1] > 5 * fc["discrepancy_tau"].iloc[0]
    assert np.isfinite(fc["upper"]).all()


def test_anchor_selection_reads_the_same_expansion(straight):
    # the anchors' second moments of the discrepancy are the forecast draws' own
    from bayes_scaling.anchors import _rehearsed_moments

    straight.settings["discrepancy"] = "expansion"
    try:
        rows = pd.DataFrame({"N": [3e8, 1e10, 1e11]})
        (M, H), info = _rehearsed_moments(straight, [rows])
        assert np.all(M == 0) and info["discrepancy"] == "expansion"
        shift = straight.expansion().draws(rows, expansion_scale(straight), 20000,
                                           np.random.default_rng(1))
        np.testing.assert_allclose(np.sqrt(np.diag(H)), np.sqrt((shift**2).mean(0)), rtol=0.03)
        np.testing.assert_allclose(H[1, 2], (shift[:, 1] * shift[:, 2]).mean(), rtol=0.05)
    finally:
        del straight.settings["discrepancy"]


def test_a_posterior_can_make_it_its_default_for_plans(straight):
    # the planners read draws through predictive.predict_draws, i.e. the posterior's default
    from bayes_scaling.bayes.predictive import predict_draws

    rows = pd.DataFrame({"N": [1e8, 1e11]})
    straight.settings["discrepancy"] = "expansion"
    try:
        planned = predict_draws(straight, rows)
    finally:
        del straight.settings["discrepancy"]
    np.testing.assert_allclose(planned, straight.predict_draws(rows, discrepancy="expansion",
                                                               allow_unconverged=True))
    assert not np.allclose(planned, straight.predict_draws(rows, discrepancy="off",
                                                           allow_unconverged=True))


@pytest.mark.parametrize("bad", [-0.1, float("nan"), "wide"])
def test_a_bad_scale_is_refused_with_its_setting_named(straight, bad):
    straight.settings["expansion_scale"] = bad
    try:
        with pytest.raises(BayesScalingError, match=r"settings\['expansion_scale'\]"):
            straight.forecast(pd.DataFrame({"N": [1e10]}), discrepancy="expansion",
                              allow_unconverged=True)
    finally:
        del straight.settings["expansion_scale"]
