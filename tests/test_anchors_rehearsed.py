"""``bs.anchors.select(criterion="refit", discrepancy="rehearsal")`` on a fitted ``Posterior``:
the discrepancy the refit does not model is the posterior's own extrapolation discrepancy (the
rehearsed ``(p, tau)`` its forecasts use), so the runs it buys follow the rehearsal."""
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling import anchors
from bayes_scaling.bayes.intervals import extrapolation
from bayes_scaling.bayes.predictive import as_draws
from bayes_scaling.errors import BayesScalingError
from bayes_scaling.laws import Law, Param

LIN = Law("lin_rehearsed", (Param("a", -np.inf, np.inf, (0.0, 1.0)),
                            Param("b", -np.inf, np.inf, (0.0, 1.0))),
          ("D",), lambda p, x: jnp.exp(p["a"] + p["b"] * jnp.log(x["D"])))
NOISE = 0.05
LOG_D_OBS = np.linspace(1.0, 2.5, 12)  # the fitted rows
D_Q = np.exp(np.array([9.0, 9.5]))  # the queries, far beyond them
# three cheap runs halfway, and one run near the queries costing all three
D_C = np.exp(np.array([6.0, 6.5, 7.0, 8.5]))
COST = np.array([1.0, 1.0, 1.0, 3.0])


@pytest.fixture(scope="module")
def post():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"D": np.exp(LOG_D_OBS),
                       "loss": np.exp(0.3 - 0.2 * LOG_D_OBS + NOISE * rng.standard_normal(12))})
    return bs.fit_posterior(LIN, df, method="laplace", seed=0, progress_bar=False,
                            allow_unconverged=True)


def rehearsed(post, grid, n_rows=12):
    """Set the posterior's rehearsed grid of ``(p, tau)`` for rows beyond the largest ``D``
    (the cache ``signature_grid`` fills), as a rehearsal on ``n_rows`` training rows would
    (``n_rows=0``: the prior alone, whose distance is in decades)."""
    post.settings["discrepancy_grid"] = {"D+": {**grid, "n_rows": n_rows,
                                                "basis": "set in the test"}}


def pick(post, criterion="refit", **kw):
    obs = {}
    if criterion == "refit":
        obs = {"observed": pd.DataFrame({"D": np.exp(LOG_D_OBS)}), "discrepancy": "rehearsal"}
        obs.update(kw)
        kw = {}
    return anchors.select(post, pd.DataFrame({"D": D_C, "c": COST}), budget=3.0, cost="c",
                          queries=pd.DataFrame({"D": D_Q}), criterion=criterion, noise=NOISE,
                          **obs, **kw)


def test_a_larger_rehearsed_discrepancy_buys_the_run_nearer_the_queries(post):
    """With a negligible rehearsed tau the refit criterion is the variance criterion and buys
    the three cheap runs halfway; with a rehearsed tau of 0.1 per fitted width the misfit those
    runs carry to the queries outweighs their slope, and it buys the run near the queries."""
    var = pick(post, "variance")["candidate"].tolist()
    assert sorted(var) == [0, 1, 2]
    rehearsed(post, {"p": [1.0], "tau": [1e-4], "mu": [0.0], "mu_sd": [0.0], "w": [1.0]})
    assert sorted(pick(post)["candidate"].tolist()) == [0, 1, 2]
    rehearsed(post, {"p": [1.0], "tau": [0.1], "mu": [0.0], "mu_sd": [0.0], "w": [1.0]})
    sel = pick(post)
    assert sel["candidate"].tolist() == [3]
    assert sel.attrs["discrepancy"] == "rehearsal"
    assert sel.attrs["discrepancy_basis"] == "D+: set in the test"


def test_the_rehearsed_discrepancy_is_the_mixture_at_the_queries(post):
    """Before any purchase the refit leans on the fitted rows only, where the discrepancy is 0
    (inside the fitted range), so the expected error at the queries is their posterior variance
    plus the mean of ``E[(tau^2 + mu^2) d^(2p)]`` over the grid posterior (the varying part and
    the systematic shift ``mu d^p``, ``mu`` normal at each grid point): exact for a mixture
    grid."""
    grid = {"p": [0.5, 1.0], "tau": [0.05, 0.2], "mu": [0.01, -0.03], "mu_sd": [0.02, 0.01],
            "w": [0.3, 0.7]}
    rehearsed(post, grid)
    d, sigs = extrapolation(pd.DataFrame({"D": np.exp(LOG_D_OBS)}), pd.DataFrame({"D": D_Q}),
                            ["D"])
    assert list(sigs) == ["D+", "D+"] and np.all(d > 4)
    second = sum(w * (t ** 2 + m ** 2 + sd ** 2) * d ** (2 * p) for p, t, m, sd, w in
                 zip(*(grid[k] for k in ("p", "tau", "mu", "mu_sd", "w"))))
    sel = pick(post)
    base = pick(post, "variance").attrs["initial"]
    assert sel.attrs["initial"] == pytest.approx(base + second.mean(), rel=1e-9)
    assert sel.attrs["discrepancy_sd_queries"] == pytest.approx(np.sqrt(second.mean()), rel=1e-9)
    # a number (or the default) is a stationary sd at every row, fitted rows included
    fixed = pick(post, discrepancy=0.3)
    assert fixed.attrs["discrepancy"] == 0.3
    assert fixed.attrs["initial"] != pytest.approx(sel.attrs["initial"], rel=1e-3)
    assert pick(post, discrepancy=None).attrs["discrepancy"] == pytest.approx(NOISE)
    # the same grid resting on the prior alone reads the distance in decades, as forecasts do
    rehearsed(post, grid, n_rows=0)
    dec = np.log10(D_Q) - LOG_D_OBS.max() / np.log(10)
    second = sum(w * (t ** 2 + m ** 2 + sd ** 2) * dec ** (2 * p) for p, t, m, sd, w in
                 zip(*(grid[k] for k in ("p", "tau", "mu", "mu_sd", "w"))))
    assert pick(post).attrs["initial"] == pytest.approx(base + second.mean(), rel=1e-9)


def test_a_posterior_with_its_discrepancy_off_scores_the_variance(post):
    post.settings["discrepancy"] = "off"
    try:
        sel, var = pick(post), pick(post, "variance")
    finally:
        del post.settings["discrepancy"]
    assert sel["candidate"].tolist() == var["candidate"].tolist()
    np.testing.assert_allclose(sel["criterion_after"], var["criterion_after"], rtol=1e-6)


def test_a_rehearsal_needs_a_posterior_fitted_on_a_table(post):
    with pytest.raises(BayesScalingError, match="rehearsal"):
        pick(as_draws(post))
    with pytest.raises(BayesScalingError, match="rehearsal"):
        pick(post, discrepancy="forecast")
