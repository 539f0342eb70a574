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
