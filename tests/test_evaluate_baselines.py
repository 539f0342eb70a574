"""The peers' intervals (bs.evaluate.baselines) and the per-dataset calibration scores."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

import bayes_scaling as bs
from bayes_scaling import evaluate as ev
from bayes_scaling.errors import DataError

LAW = bs.laws.get("chinchilla")
TRUE = LAW.example
SIGMA = 0.01


def _design(sizes, ratios):
    N = np.repeat(np.asarray(sizes, float), len(ratios))
    return pd.DataFrame({"N": N, "D": N * np.tile(np.asarray(ratios, float), len(sizes))})


TRAIN = _design(np.geomspace(1e7, 3e8, 6), [10, 20, 40, 80])
INSIDE = _design([3e7, 1e8], [15, 50])


def _noisy(design, seed):
    rng = np.random.default_rng(seed)
    return design.assign(loss=np.asarray(LAW(TRUE, design))
                         * np.exp(SIGMA * rng.standard_normal(len(design))))


def test_bootstrap_interval_of_the_law_covers_the_truth_at_its_level():
    """20 replicate tables (24 runs, Gaussian noise 0.01 on log L) of Chinchilla at its example
    parameters; per replicate 30 bootstrap refits and the 90% interval of the law's value
    (noise=False) at 4 points inside the fitted range. Over the 80 (replicate, point) pairs the
    truth is covered at 80-100% (the binomial sd of 80 draws is 3.4 points; the percentile
    bootstrap undercovers slightly on small tables; a bootstrap without spread covers ~0%)."""
    truth = np.asarray(LAW(TRUE, INSIDE))
    hits, widths = [], []
    for seed in range(20):
        out = ev.bootstrap(LAW, _noisy(TRAIN, seed), INSIDE, levels=(0.9,), n_boot=30,
                           n_starts=1, seed=seed, noise=False)
        hits.append((out["lower90"] <= truth) & (truth <= out["upper90"]))
        widths.append(np.log(out["upper90"] / out["lower90"]))
    cov = float(np.mean(np.concatenate(hits)))
    assert 0.80 <= cov <= 1.0, cov
    # the interval of the law's value is narrower than the noise's own 90% interval (it
    # averages 24 runs), and not degenerate
    w = float(np.median(np.concatenate(widths)))
    assert 0 < w < 2 * 1.645 * SIGMA, w


def test_bootstrap_noise_widens_to_the_observation_interval():
    """With noise=True the 90% interval of a new observation inside the range is at least the
    width of the fitted residuals' spread, wider than the law's own interval."""
    train = _noisy(TRAIN, 0)
    law_only = ev.bootstrap(LAW, train, INSIDE, levels=(0.9,), n_boot=30, n_starts=1,
                            noise=False)
    obs = ev.bootstrap(LAW, train, INSIDE, levels=(0.9,), n_boot=30, n_starts=1)
    w_law = np.log(law_only["upper90"] / law_only["lower90"])
    w_obs = np.log(obs["upper90"] / obs["lower90"])
    assert np.all(w_obs > w_law)
    assert np.all(w_obs > 1.645 * SIGMA)  # about 2 x 1.645 sigma when calibrated


def test_residual_bootstrap_recentres_on_the_map():
    """The residual bootstrap's median of the law's value at the training inputs is the MAP
    prediction (the replicates resample residuals around it), to within half the noise, and
    its 90% interval there is narrower than the noise's own."""
    train = _noisy(TRAIN, 1)
    out = ev.residual_bootstrap(LAW, train, train, levels=(0.5, 0.9), n_boot=30, n_starts=1,
                                noise=False)
    fit = bs.fit_map(LAW, train, delta=1e-3, n_starts=64, seed=0)
    assert np.max(np.abs(np.log(out["median"] / fit.predict(train)))) < 0.5 * SIGMA
    width = np.log(out["upper90"] / out["lower90"])
    assert np.all(width > 0) and np.median(width) < 2 * 1.645 * SIGMA
    assert out.attrs["settings"]["failed"] == 0


def test_conformal_width_is_the_stated_residual_quantile():
    """The half-width in log space of each level's interval is the ceil((m + 1) p)-th smallest
    calibration score, computed here by hand from the scores the function reports, and the
    interval is centred (in log space) on the full-data MAP forecast."""
    train = _noisy(TRAIN, 2)
    query = _design([6e8, 1e9], [20, 40])
    out = ev.conformal(LAW, train, query, levels=(0.5, 0.8, 0.9))
    st = out.attrs["settings"]
    s = np.sort(st["scores"])
    m = len(s)
    assert m == st["calibration_rows"] > 0
    for p in (0.5, 0.8, 0.9):
        k = math.ceil((m + 1) * p)
        expect = s[min(k, m) - 1]
        pct = round(100 * p)
        half = np.log(out[f"upper{pct}"] / out[f"lower{pct}"]) / 2
        np.testing.assert_allclose(half, expect, rtol=1e-9)
        assert st["half_width"][p] == pytest.approx(expect)
    fit = bs.fit_map(LAW, train, delta=1e-3, n_starts=64, seed=0)
    np.testing.assert_allclose(out["median"], fit.predict(query), rtol=1e-6)
    assert st["axis"] == "N"  # the queries lie beyond the training range in N


def test_conformal_folds_forecast_the_next_block():
    """Each calibration block lies above its fit along the axis, and each training row is a
    calibration row at most once."""
    values = np.repeat(np.arange(8.0), 3)
    folds = ev.baselines.calibration_folds(values, min_fit=6, n_folds=3)
    seen = np.zeros(len(values), int)
    for fit_rows, cal in folds:
        assert fit_rows.sum() >= 6 and cal.any()
        assert values[fit_rows].max() < values[cal].min()
        seen += cal
    assert seen.max() == 1


def test_conformal_refuses_a_table_too_small_to_split():
    tiny = _noisy(_design([1e7, 2e7], [10, 20, 40]), 0)
    with pytest.raises(DataError, match="calibration split needs at least 6 training rows"):
        ev.conformal(LAW, tiny, INSIDE)
    with pytest.raises(DataError, match="axis column 'C'"):
        ev.conformal(LAW, _noisy(TRAIN, 0), INSIDE, axis="C")


def test_calibrated_gaussian_has_msce_near_zero_and_a_wrong_one_does_not():
    """Predictive N(0, 1) for y ~ N(0, 1) (20,000 rows): MSCE over 50/80/90/95% and over
    0.50-0.99 within sampling error (expected ~ mean p(1-p)/n = 1e-5); a predictive with half the
    spread is off by far more."""
    rng = np.random.default_rng(0)
    y = rng.standard_normal(20_000)
    taus = ev.TAUS
    good = ev.quantile_rows(np.tile(norm.ppf(taus), (y.size, 1)), taus, y)
    bad = ev.quantile_rows(np.tile(0.5 * norm.ppf(taus), (y.size, 1)), taus, y)
    for rows, lo, hi in ((good, 0, 1e-4), (bad, 0.01, 1)):
        t, mean = ev.calibration_by(rows.assign(dataset="a"))
        assert lo <= t.loc[0, "msce"] <= hi and lo <= t.loc[0, "msce_grid"] <= hi
    # CRPS from the quantile grid is the closed form within 1%
    np.testing.assert_allclose(good["crps"].mean(), ev.crps_gaussian(0, 1, y).mean(), rtol=0.01)


def test_interval_score_by_hand_and_equal_weights():
    """Interval [1, 3] at 90%: 2 inside, 2 + 20 x 1 a unit below or above (Gneiting & Raftery
    2007, Eq. 43); a dataset of 1 row weighs as much as one of 3 in the mean."""
    np.testing.assert_allclose(ev.interval_score([1, 1, 1], [3, 3, 3], [2, 0, 4], 0.9),
                               [2, 22, 22])
    rows = pd.DataFrame({"dataset": ["a", "a", "a", "b"], "y": [2.0, 2.0, 2.0, 4.0],
                         "pit": [0.5, 0.5, 0.5, 1.0], "crps": [0.1, 0.1, 0.1, 0.5],
                         "lo50": 1.5, "hi50": 2.5, "lo90": 1.0, "hi90": 3.0})
    t, mean = ev.calibration_by(rows)
    assert t.set_index("dataset").loc["b", "is90"] == pytest.approx(22.0)
    assert mean["is90"] == pytest.approx((2.0 + 22.0) / 2)
    assert mean["cov90"] == pytest.approx(0.5)  # a: all covered, b: none
    with pytest.raises(DataError, match="needs column"):
        ev.calibration_by(rows.drop(columns="pit"))


def test_pit_from_quantiles_matches_draws():
    """The PIT read off a quantile grid agrees with the PIT of the draws it came from."""
    rng = np.random.default_rng(1)
    draws = rng.lognormal(0, 0.2, size=(4000, 50))
    y = rng.lognormal(0, 0.2, size=50)
    q = np.quantile(draws, ev.TAUS, axis=0).T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = ev.draw_rows(draws, y)
    b = ev.quantile_rows(q, ev.TAUS, y)
    np.testing.assert_allclose(a["pit"], b["pit"], atol=0.01)
    np.testing.assert_allclose(a["lo90"], b["lo90"], rtol=1e-3)


def _proportion_law():
    import jax.numpy as jnp
    from bayes_scaling.laws import Law, Param
    return Law(name="user_proportion", variables=("r1", "N"), equation="c + k exp(t r1) + A/N^a",
               params=(Param("c", 0.0, 10.0, (0.5, 2.0)), Param("k", 1e-3, 10.0, (0.1, 1.0)),
                       Param("t", -10.0, 10.0, (-2.0, 2.0)), Param("A", 1e-3, 1e4, (1.0, 100.0)),
                       Param("a", 0.0, 1.0, (0.1, 0.5))),
               fn=lambda p, x: p["c"] + p["k"] * jnp.exp(p["t"] * x["r1"]) + p["A"] / x["N"] ** p["a"])


def test_the_conformal_axis_of_a_law_whose_inputs_may_be_zero():
    # a mixture proportion r1 (0 on some runs) and a positive N: the axis is N when the queries
    # reach beyond N (log units); r1, read as it is, when only r1 leaves the table (it was an
    # error: "no input varies with positive values")
    law = _proportion_law()
    train = pd.DataFrame({"r1": [0.0, 0.25, 0.5] * 2, "N": [1e8] * 3 + [1e9] * 3})
    beyond_n = pd.DataFrame({"r1": [0.25], "N": [1e10]})
    axis = ev.baselines.auto_axis(law, train, beyond_n)
    assert axis.name == "N"
    np.testing.assert_allclose(axis(beyond_n), [math.log(1e10)])
    beyond_r = pd.DataFrame({"r1": [0.75], "N": [5e8]})
    axis = ev.baselines.auto_axis(law, train, beyond_r)
    assert axis.name == "r1"
    np.testing.assert_allclose(axis(pd.concat([train, beyond_r])), [0, 0.25, 0.5] * 2 + [0.75])
    below = pd.DataFrame({"r1": [-0.1], "N": [5e8]})  # a signed input below the range
    assert ev.baselines.auto_axis(law, train, below).name == "-r1"
