"""Slow checks of the Bayesian layer (excluded from CI with -m "not slow"): the hard case converges
with default settings, Epoch's Chinchilla posterior, and a larger calibration run."""
import warnings

import numpy as np
import pytest

import bayes_scaling as bs

from conftest import form3_grid, simulate

pytestmark = pytest.mark.slow


def test_form3_on_two_ptpp_levels_converges_with_defaults():
    """The hard case: ptpp_gated_floor on 4 sizes x PTPP {15, 31} x replay {.1, .25, .5} x 6 D."""
    law = bs.laws.get("ptpp_gated_floor")
    df = simulate(law, form3_grid(ptpps=(15, 31)), noise=0.005, seed=0)
    post = bs.fit_posterior(law, df, seed=0, progress_bar=False)
    d = post.diagnostics
    assert d["max_rhat"] <= 1.01
    assert d["min_ess_bulk"] >= 400
    assert d["divergences"] == 0
    assert post.ok
    # the identified quantities are recovered: the gated exponent at the two PTPP levels
    from bayes_scaling.laws.ptpp import beta_eff
    p = {k: np.asarray(post.idata.posterior[k]).reshape(-1) for k in ("beta", "lam", "zeta")}
    truth = np.asarray(beta_eff({k: law.example[k] for k in p}, np.array([15.0, 31.0])))
    for i, v in enumerate((15.0, 31.0)):
        b = np.asarray(beta_eff(p, v))
        lo, hi = np.quantile(b, [0.005, 0.995])
        assert lo <= truth[i] <= hi


def test_epoch_chinchilla_posterior(epoch):
    _, kept = epoch
    post = bs.fit_posterior("chinchilla", kept, seed=0, progress_bar=False)
    d = post.diagnostics
    assert d["max_rhat"] <= 1.01 and d["min_ess_bulk"] >= 400 and d["divergences"] == 0
    # 95% intervals overlap Epoch's bootstrap intervals
    boot = {"alpha": (0.317, 0.373), "beta": (0.331, 0.415), "E": (1.769, 1.871)}
    for k, (lo, hi) in boot.items():
        q = np.quantile(post.draws(k), [0.025, 0.975])
        assert q[0] < hi and q[1] > lo, k


def test_laplace_calibration_50_chinchilla_datasets():
    import pandas as pd
    from bayes_scaling.calibration import calibrate

    grid = pd.DataFrame([dict(N=a, D=b) for a in np.geomspace(2e7, 5e9, 6)
                         for b in np.geomspace(4e8, 2e11, 6)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = calibrate("chinchilla", grid, n_datasets=50, method="laplace", seed=100,
                        fit_kwargs={"n_starts": 8})
    assert res["n_failed"] == 0
    assert 0.80 <= res["coverage_params"] <= 0.97
    assert 0.80 <= res["coverage_predictions"] <= 0.97
