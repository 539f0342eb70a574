"""``analyses/forecast_honesty.py``: the held-out splits never leak a scored row into the fit and
extrapolate along their axis, the per-row scores recover the coverage of a known predictive, and
the resumable run fits only what its cache lacks."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analyses"))
import forecast_honesty as fh


@pytest.fixture(scope="module")
def units():
    return [*fh.epoch_units(), *fh.datablations_units(), *fh.gadre_units(), *fh.mixing_units(),
            *fh.ptpp_units(), *fh.m3_units()]


def test_held_out_rows_never_reach_the_fit_and_lie_beyond_it(units):
    for u in units:
        assert not set(u.train.index) & set(u.test.index), u.slug
    ep = {u.split: u for u in units if u.dataset == "epoch"}
    big = ep["N>=2.5e9"]
    assert big.train["N"].max() < 2.5e9 <= big.test["N"].min()
    for u in (u for u in units if u.dataset == "gadre"):
        assert u.train["ptpp"].max() <= 80 < u.test["ptpp"].min()
    for u in (u for u in units if u.dataset == "bible_ptpp"):
        assert set(u.train["ptpp"]) == {15, 31} and set(u.test["ptpp"]) == {279}
        assert (u.train["domain"] == u.split.split(":")[0]).all()
    m3 = [u for u in units if u.dataset == "bible_m3"]
    assert len({u.split for u in m3}) == 2 * len(fh.m3_common.SPLITS)
    for u in m3:
        if not u.skip:  # the M3 protocol's rule: at least 10 rows on each side
            assert min(len(u.train), len(u.test)) >= 10


def test_row_scores_recover_the_coverage_of_a_calibrated_and_a_biased_predictive():
    rng = np.random.default_rng(0)
    n, s = 4000, 2000
    mu = rng.uniform(2.0, 3.0, n)
    draws = mu + 0.05 * rng.standard_normal((s, n))
    y = mu + 0.05 * rng.standard_normal(n)
    sc = fh.scores(fh.row_scores(draws, y))
    for lv in fh.LEVELS:  # binomial sd at n = 4000 is below 0.8 percentage points
        assert abs(sc[f"cov{round(100 * lv)}"] - lv) < 0.03
    r = fh.row_scores(draws, y)
    np.testing.assert_allclose(fh.calibration(r), fh.CURVE, atol=0.03)
    # predictive centred one sd too low: the 90% interval covers P(|Z - 1| <= 1.645) = 0.74
    biased = fh.scores(fh.row_scores(draws - 0.05, y))
    assert abs(biased["cov90"] - 0.74) < 0.03
    assert biased["crps"] > sc["crps"]


def test_run_fits_only_units_missing_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(fh, "CACHE", tmp_path)
    d = pd.DataFrame({"loss": [2.0, 1.9], "N": [1.0, 2.0], "D": [1.0, 1.0]})
    units = [fh.Unit("a", "s", "law", ("registry", "chinchilla"), d, d, skip="too few rows"),
             fh.Unit("b", "s", "law", ("registry", "chinchilla"), d, d, skip="too few rows")]
    fitted = []

    class Recorder:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit_iter(self, fn, jobs):
            for i, job in enumerate(jobs):
                fitted.append(job[0].dataset)
                yield i, fn(job)

    fh.run(units[:1], ["before"], "laplace", Recorder())
    fh.run(units, ["before"], "laplace", Recorder())
    assert fitted == ["a", "b"]
    meta, _ = fh.load_cached(units, ["before"], "laplace")
    assert list(meta["status"]) == ["skipped", "skipped"]


def test_simulated_cases_draw_from_their_law_and_scores_count_coverage():
    cases = {c.name: c for c in fh.sim_cases()}
    right, wrong = cases["chinchilla, sigma 0.01"], cases["curved -> chinchilla, sigma 0.01"]
    assert right.right and not wrong.right and cases["muennighoff, sigma 0.01"].right
    b = right.beyond
    t = fh.bs.laws.get("chinchilla").example
    np.testing.assert_allclose(right.loss(b), t["E"] + t["A"] / b["N"] ** t["alpha"]
                               + t["B"] / b["D"] ** t["beta"], rtol=1e-5)
    np.testing.assert_allclose(np.log(wrong.loss(b) / right.loss(b)),
                               0.006 * np.log(b["N"] / 1e7) ** 2, rtol=1e-4)
    assert b["N"].min() > right.train["N"].max()  # the scored rows lie beyond the fitted range
    muen = cases["muennighoff, sigma 0.01"]
    assert (muen.beyond["D"] / muen.beyond["U"]).min() > (muen.train["D"] / muen.train["U"]).max()
    # scores of known intervals: N(0, 1) rows against +-1.645 (90%) and +-0.674 (50%), and a
    # default predictive twice as wide
    rng = np.random.default_rng(0)
    y = rng.standard_normal(20000)
    r = pd.DataFrame({"seed": 0, "y": y, "tau": 0.0, "off_lo90": -1.645, "off_hi90": 1.645,
                      "off_lo50": -0.674, "off_hi50": 0.674, "auto_lo90": -3.29,
                      "auto_hi90": 3.29, "auto_lo50": -1.349, "auto_hi50": 1.349})
    s = fh.sim_scores(r)
    assert abs(s["off cov90"] - 0.9) < 0.01 and abs(s["off cov50"] - 0.5) < 0.015
    assert abs(s["auto cov50"] - 0.823) < 0.015 and s["auto cov90"] > 0.99
    assert s["90% width auto / off"] == pytest.approx(2.0)


def test_the_floors_pseudo_observations_are_calibrated_and_keep_the_rows_correlation():
    """``self_pits``: a row of the predictive's own draws, scored under the others, covers each
    central level at its nominal rate on average; rows that share a per-draw shift (as a unit's
    held-out rows share its parameters and discrepancy) move together, so their MSCE is several
    times that of independent rows of the same marginals: the floor counts that sampling error."""
    rng = np.random.default_rng(0)
    S, n = 2000, 30
    shift = rng.standard_normal((S, 1))
    joint = 0.9 * shift + np.sqrt(1 - 0.81) * rng.standard_normal((S, n))
    independent = rng.standard_normal((S, n))
    levels = np.array(fh.LEVELS)
    msce = {}
    for name, draws in (("joint", joint), ("independent", independent)):
        pits = fh.self_pits(draws, 400)
        cov = (np.abs(pits[:, :, None] - 0.5) <= levels / 2 + 1e-12).mean(1)  # (reps, levels)
        np.testing.assert_allclose(cov.mean(0), levels, atol=0.03)
        msce[name] = np.mean([fh.ev.msce(p, levels) for p in pits])
    assert msce["joint"] > 3 * msce["independent"]
