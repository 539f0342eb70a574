"""``bs.anchors.select(criterion="refit")``: the expected error of the refitted forecast at the
queries, checked against simulated refits on a law linear in its parameters in log space, and the
runs it buys when the law's misfit grows away from the runs."""
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from bayes_scaling import anchors
from bayes_scaling.bayes.predictive import ParamDraws
from bayes_scaling.errors import BayesScalingError
from bayes_scaling.laws import Law, Param

LIN = Law("lin", (Param("a", -np.inf, np.inf, (0.0, 1.0)), Param("b", -np.inf, np.inf, (0.0, 1.0))),
          ("D",), lambda p, x: jnp.exp(p["a"] + p["b"] * jnp.log(x["D"])))

PRIOR = np.diag([1.0, 0.25])  # prior covariance of (a, b)
NOISE = 0.05
D_OBS = np.exp(np.array([1.0, 1.5, 2.0, 2.5]))  # the rows the posterior was fitted on
D_Q = np.exp(np.array([9.0, 9.5]))  # the queries: far beyond them
# candidates: three cheap runs halfway, and one run near the queries costing all three
D_C = np.exp(np.array([6.0, 6.5, 7.0, 8.5]))
COST = np.array([1.0, 1.0, 1.0, 3.0])


def design(d):
    return np.stack([np.ones_like(d), np.log(d)], 1)


def posterior_draws(n=200_000, seed=0):
    """Exact Gaussian posterior of (a, b) after the observed rows (its mean is immaterial)."""
    H = design(D_OBS)
    cov = np.linalg.inv(np.linalg.inv(PRIOR) + H.T @ H / NOISE ** 2)
    th = np.random.default_rng(seed).multivariate_normal([0.3, -0.2], cov, size=n)
    return ParamDraws(LIN, {"a": th[:, 0], "b": th[:, 1]})


def simulated_refit_error(bought, s_d, n_worlds=200_000, seed=1):
    """Mean squared error at the queries of the Bayesian least-squares refit (prior ``PRIOR``) on
    the observed rows plus ``bought``, over worlds drawn from the prior with a misfit
    ``delta ~ GP(0, s_d^2 exp(-|z - z'|^2 / 2))`` in log D standardised over observed rows and
    candidates, and the noise."""
    rng = np.random.default_rng(seed)
    ref = np.log(np.concatenate([D_OBS, D_C]))
    d_fit = np.concatenate([D_OBS, D_C[list(bought)]])
    rows = np.concatenate([d_fit, D_Q])
    z = (np.log(rows) - ref.mean()) / ref.std()
    K = s_d ** 2 * np.exp(-0.5 * (z[:, None] - z[None, :]) ** 2) + 1e-12 * np.eye(len(z))
    u = rng.multivariate_normal(np.zeros(2), PRIOR, size=n_worlds)
    delta = rng.multivariate_normal(np.zeros(len(z)), K, size=n_worlds)
    H, Hq = design(d_fit), design(D_Q)
    y = u @ H.T + delta[:, :len(d_fit)] + NOISE * rng.standard_normal((n_worlds, len(d_fit)))
    S = np.linalg.inv(np.linalg.inv(PRIOR) + H.T @ H / NOISE ** 2)
    u_hat = y @ H @ S / NOISE ** 2
    err = (u_hat - u) @ Hq.T - delta[:, len(d_fit):]
    return float(np.mean(err ** 2))


def pick(criterion, budget=3.0, cost=COST, **kw):
    if criterion == "refit":
        kw["observed"] = pd.DataFrame({"D": D_OBS})
    return anchors.select(posterior_draws(), pd.DataFrame({"D": D_C, "c": cost}), budget=budget,
                          cost="c", queries=pd.DataFrame({"D": D_Q}), noise=NOISE,
                          criterion=criterion, max_draws=None, **kw)


def test_refit_criterion_is_the_expected_error_of_simulated_refits():
    s_d = 0.3
    sel = pick("refit", discrepancy=s_d)
    bought = sel["candidate"].tolist()
    assert bought  # something lowers the expected error
    assert sel.attrs["initial"] == pytest.approx(simulated_refit_error([], s_d), rel=0.03)
    assert sel["criterion_after"].iloc[-1] == pytest.approx(
        simulated_refit_error(bought, s_d), rel=0.03)


def test_without_a_misfit_the_refit_criterion_is_the_variance_criterion():
    for greedy in ("ratio", "gain"):
        refit = pick("refit", discrepancy=0.0, greedy=greedy)
        var = pick("variance", greedy=greedy)
        assert refit["candidate"].tolist() == var["candidate"].tolist()
        np.testing.assert_allclose(refit["criterion_after"], var["criterion_after"], rtol=1e-6)


def test_refit_criterion_buys_the_run_near_the_queries_and_its_refit_errs_less():
    """With a misfit that grows away from the runs, three cheap runs halfway pin the slope as well
    as the run near the queries (the variance criterion buys them) but the refit that leans on
    them carries their misfit to the queries; the refit criterion buys the run near the queries,
    and simulated refits confirm that its purchase errs less there."""
    s_d = 0.3
    refit = pick("refit", discrepancy=s_d)["candidate"].tolist()
    var = pick("variance")["candidate"].tolist()
    assert refit == [3]
    assert sorted(var) == [0, 1, 2]
    assert simulated_refit_error(refit, s_d) < 0.5 * simulated_refit_error(var, s_d)


def test_refit_criterion_leaves_a_run_that_would_raise_the_error_unbought():
    """The run near the queries costs 2 of the budget of 3: the variance criterion adds a cheap
    run halfway (it always lowers the posterior variance), the refit criterion stops, and the
    simulated refits agree that the extra run raises the error at the queries."""
    s_d, cost = 0.3, np.array([1.0, 1.0, 1.0, 2.0])
    sel = pick("refit", cost=cost, discrepancy=s_d)
    var = pick("variance", cost=cost)["candidate"].tolist()
    assert sel["candidate"].tolist() == [3]
    assert sel["cum_cost"].iloc[-1] < 3.0
    assert len(var) == 2 and 3 in var
    assert simulated_refit_error([3], s_d) < simulated_refit_error(var, s_d)


def test_refit_criterion_needs_the_fitted_rows_and_a_valid_discrepancy():
    with pytest.raises(BayesScalingError, match="observed"):
        anchors.select(posterior_draws(1000), pd.DataFrame({"D": D_C, "c": COST}), budget=3.0,
                       cost="c", queries=pd.DataFrame({"D": D_Q}), noise=NOISE,
                       criterion="refit")
    with pytest.raises(BayesScalingError, match="discrepancy"):
        pick("refit", discrepancy=-1.0)
    with pytest.raises(BayesScalingError, match="criterion='refit'"):
        pick("variance", discrepancy=0.1)


def test_the_default_criterion_is_the_refit_when_the_fitted_rows_are_given():
    auto = anchors.select(posterior_draws(), pd.DataFrame({"D": D_C, "c": COST}), budget=3.0,
                          cost="c", queries=pd.DataFrame({"D": D_Q}), noise=NOISE, max_draws=None,
                          observed=pd.DataFrame({"D": D_OBS}), discrepancy=0.3)
    assert auto.attrs["criterion"] == "refit"
    assert auto["candidate"].tolist() == pick("refit", discrepancy=0.3)["candidate"].tolist()
    plain = anchors.select(posterior_draws(), pd.DataFrame({"D": D_C, "c": COST}), budget=3.0,
                           cost="c", queries=pd.DataFrame({"D": D_Q}), noise=NOISE,
                           max_draws=None)
    assert plain.attrs["criterion"] == "variance"
    assert plain["candidate"].tolist() == pick("variance")["candidate"].tolist()
