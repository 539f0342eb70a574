"""Anchor selection against a brute-force refit.

A two-parameter law L = E0 + B / D^beta (E0 known) on a few small-D runs has a posterior that a
fine grid computes exactly. The brute-force value of a candidate run is the exact expected
posterior variance of the log query forecasts after observing it: for every possible outcome y
(a fine quadrature over y), refit the grid posterior with the candidate added, take the query
variance, and average over the predictive density of y. ``select`` sees only draws from the
posterior and must rank the candidates the same way.
"""
import numpy as np
import pandas as pd
import pytest

import jax.numpy as jnp

import bayes_scaling as bs
from bayes_scaling import anchors as A
from bayes_scaling import plan as P
from bayes_scaling.laws import Law, Param

E0, SIGMA = 1.5, 0.02
D_TRAIN = np.array([1e3, 2e3, 4e3, 8e3])
D_QUERY = [1e6, 4e6]
# the last candidate sits at a query: a nearest-to-the-queries heuristic would buy it first
D_CAND = [1.6e4, 6.4e4, 2.56e5, 1e6]


def _toy_fn(p, x):
    return E0 + jnp.exp(jnp.log(p["B"]) - p["beta"] * jnp.log(x["D"]))


TOY = Law("toy_power", (Param("B", 0.0, np.inf, (1.0, 1e3), True), Param("beta", 0.0, 2.0, (0.05, 1.0))),
          ("D",), _toy_fn, equation="L = E0 + B / D^beta (E0 = 1.5 known)")


def _f(B, beta, D):
    return np.log(E0 + B * D ** -beta)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(1)
    y = _f(50.0, 0.3, D_TRAIN) + SIGMA * rng.standard_normal(D_TRAIN.size)
    lB = np.linspace(np.log(2), np.log(5000), 201)
    be = np.linspace(0.01, 0.9, 201)
    LB, BE = [a.ravel() for a in np.meshgrid(lB, be, indexing="ij")]
    lp = sum(-0.5 * (yi - _f(np.exp(LB), BE, D)) ** 2 / SIGMA ** 2 for D, yi in zip(D_TRAIN, y))
    post = np.exp(lp - lp.max())
    post /= post.sum()
    # posterior draws: grid cells by posterior mass, uniform inside the cell
    S = 3000
    rs = np.random.default_rng(5)
    idx = rs.choice(post.size, size=S, p=post)
    jit = rs.uniform(-0.5, 0.5, (S, 2)) * [lB[1] - lB[0], be[1] - be[0]]
    draws = P.ParamDraws(TOY, {"B": np.exp(LB[idx] + jit[:, 0]), "beta": BE[idx] + jit[:, 1]},
                         sigma=np.full(S, SIGMA))
    return {"post": post, "LB": LB, "BE": BE, "draws": draws}


def brute_force_reduction(pb, D_c, D_q=D_QUERY):
    """Exact expected fractional reduction of the mean query variance from observing one run at D_c."""
    keep = pb["post"] > 1e-14
    post, LB, BE = pb["post"][keep], pb["LB"][keep], pb["BE"][keep]
    fq = np.stack([_f(np.exp(LB), BE, D) for D in D_q], 1)
    m = post @ fq
    v0 = float((post @ fq ** 2 - m ** 2).mean())
    fc = _f(np.exp(LB), BE, D_c)
    ys = np.linspace(fc.min() - 7 * SIGMA, fc.max() + 7 * SIGMA, 1500)
    joint = np.exp(-0.5 * (ys[:, None] - fc[None]) ** 2 / SIGMA ** 2) * post   # p(y, theta) on the grid
    py = joint.sum(1)
    W = joint / py[:, None]                                                      # refitted posteriors
    v_after = ((W @ fq ** 2 - (W @ fq) ** 2).mean(1) * py).sum() / py.sum()
    return 1 - v_after / v0


@pytest.fixture(scope="module")
def brute(problem):
    return np.array([brute_force_reduction(problem, D) for D in D_CAND])


def cands(cost=1.0):
    return pd.DataFrame({"D": D_CAND, "cost": cost})


@pytest.mark.parametrize("method", ["linear", "importance"])
def test_selection_matches_the_brute_force_refit(problem, brute, method):
    best = int(np.argmax(brute))
    assert best != len(D_CAND) - 1  # the most informative run is not the one nearest the queries
    sel = A.select(problem["draws"], cands(), budget=1.0, cost="cost",
                   queries=pd.DataFrame({"D": D_QUERY}), method=method)
    assert len(sel) == 1
    assert sel["candidate"].iloc[0] == best
    # each candidate's predicted value against the brute force: same ranking, close values
    single = [A.select(problem["draws"], cands().iloc[[i]], budget=1.0, cost="cost",
                       queries=pd.DataFrame({"D": D_QUERY}), method=method)["reduction"].iloc[0]
              for i in range(len(D_CAND))]
    assert list(np.argsort(single)) == list(np.argsort(brute))
    np.testing.assert_allclose(single, brute, atol=0.04)


def test_selection_is_per_unit_cost(problem, brute):
    cost = np.array([1.0, 1.0, 1.5, 1.0])
    best = int(np.argmax(brute / cost))
    assert best != int(np.argmax(brute))  # costs change the answer
    sel = A.select(problem["draws"], cands(cost), budget=1.0, cost="cost",
                   queries=pd.DataFrame({"D": D_QUERY}))
    assert sel["candidate"].iloc[0] == best


def test_auto_greedy_keeps_the_better_of_ratio_and_gain(problem):
    q = pd.DataFrame({"D": D_QUERY})
    c = cands([0.1, 0.1, 1.0, 0.1])
    final = {}
    for rule in ("ratio", "gain", "auto"):
        sel = A.select(problem["draws"], c, budget=1.0, cost="cost", queries=q, greedy=rule)
        assert sel["cum_cost"].iloc[-1] <= 1.0
        final[rule] = sel["criterion_after"].iloc[-1]
    assert final["auto"] == min(final["ratio"], final["gain"])
    assert sel.attrs["greedy"] in ("ratio", "gain")
    assert sel.attrs["final_by_rule"]["ratio"] == pytest.approx(final["ratio"])


def test_greedy_order_respects_the_budget_and_keeps_reducing(problem):
    sel = A.select(problem["draws"], cands([1.0, 2.0, 3.0, 4.0]), budget=6.0, cost="cost",
                   queries=pd.DataFrame({"D": D_QUERY}))
    assert sel["cum_cost"].iloc[-1] <= 6.0
    assert sel["candidate"].is_unique
    assert np.all(np.diff(sel["criterion_after"]) < 0)
    assert np.all(np.diff(sel["reduction"]) > 0) and sel["reduction"].iloc[-1] < 1
    assert sel["gain"].to_numpy() == pytest.approx((sel["criterion_before"] - sel["criterion_after"]).to_numpy())
    assert sel.attrs["noise_source"].startswith("posterior")


def test_linear_update_is_exact_for_a_gaussian_linear_model():
    """For a law linear in its parameters with Gaussian draws, the update is the Kalman update."""
    rng = np.random.default_rng(0)
    S = 20000
    lin = Law("lin", (Param("a", -np.inf, np.inf, (0.0, 1.0)), Param("b", -np.inf, np.inf, (0.0, 1.0))),
              ("D",), lambda p, x: jnp.exp(p["a"] + p["b"] * jnp.log(x["D"])))
    cov = np.array([[0.04, -0.01], [-0.01, 0.01]])
    th = rng.multivariate_normal([0.5, -0.1], cov, size=S)
    d = P.ParamDraws(lin, {"a": th[:, 0], "b": th[:, 1]})
    x_c, x_q, s2 = np.log(10.0), np.log(1000.0), 0.05 ** 2
    h_c, h_q = np.array([1, x_c]), np.array([1, x_q])
    Sc = np.cov(th, rowvar=False)
    exact = h_q @ Sc @ h_q - (h_q @ Sc @ h_c) ** 2 / (h_c @ Sc @ h_c + s2)
    sel = A.select(d, pd.DataFrame({"D": [10.0]}), budget=1, cost=1.0,
                   queries=pd.DataFrame({"D": [1000.0]}), noise=0.05, max_draws=None)
    assert sel["criterion_after"].iloc[0] == pytest.approx(exact, rel=1e-8)


def test_entropy_criterion(problem, brute):
    sel = A.select(problem["draws"], cands(), budget=2.0, cost="cost",
                   queries=pd.DataFrame({"D": D_QUERY}), criterion="entropy")
    assert len(sel) == 2 and np.all(sel["gain"] > 0)
    assert sel["reduction"].iloc[-1] == pytest.approx(sel["gain"].sum())  # nats, cumulative


def test_cost_6ND():
    c = A.candidate_cost(pd.DataFrame({"N": [1e4, 2e4], "D": [1e6, 1e6]}))
    np.testing.assert_allclose(c, [6e10, 1.2e11])


@pytest.mark.parametrize("kw, msg", [
    (dict(budget=0.0), "budget 0.0 must be a positive cost or a share such as '10%'"),
    (dict(budget="150%"), r"a share must be in \(0%, 100%\]"),
    (dict(criterion="mse"), "criterion must be"),
    (dict(method="exact"), "method must be"),
    (dict(greedy="lazy"), "greedy must be"),
    (dict(method="importance", criterion="entropy"), "supports criterion='variance' only"),
    (dict(cost="price"), "cost column"),
    (dict(cost=[1.0, -1.0, 1.0, 1.0]), "positive"),
    (dict(cost="6ND"), "needs column 'N'"),
    (dict(queries=pd.DataFrame()), "queries must be"),
])
def test_bad_anchor_inputs(problem, kw, msg):
    kw = {"budget": 1.0, "cost": "cost", "queries": pd.DataFrame({"D": D_QUERY}), **kw}
    with pytest.raises(bs.BayesScalingError, match=msg):
        A.select(problem["draws"], cands(), **kw)


def test_a_budget_share_and_queries_as_a_dict_read_as_the_cost_and_the_table(problem):
    """``budget="50%"``: half the candidates' total cost (4 runs at 1.0: 2.0); ``queries`` as a
    dict of columns: the same rows as the DataFrame."""
    q = pd.DataFrame({"D": D_QUERY})
    want = A.select(problem["draws"], cands(), budget=2.0, cost="cost", queries=q)
    got = A.select(problem["draws"], cands(), budget="50%", cost="cost", queries={"D": D_QUERY})
    assert list(got["candidate"]) == list(want["candidate"]) and len(want) >= 1
    np.testing.assert_allclose(got["gain"], want["gain"], rtol=1e-12)


def test_point_fit_and_missing_noise_are_refused(problem):
    q = pd.DataFrame({"D": D_QUERY})
    one = P.ParamDraws(TOY, {"B": [50.0], "beta": [0.3]})
    with pytest.raises(bs.BayesScalingError, match="needs posterior draws"):
        A.select(one, cands(), budget=1.0, cost="cost", queries=q)
    d = problem["draws"]
    no_sigma = P.ParamDraws(TOY, d.params)
    with pytest.raises(bs.BayesScalingError, match="noise is unknown"):
        A.select(no_sigma, cands(), budget=1.0, cost="cost", queries=q)
    sel = A.select(no_sigma, cands(), budget=1.0, cost="cost", queries=q, noise=SIGMA)
    assert sel["candidate"].iloc[0] == A.select(d, cands(), budget=1.0, cost="cost",
                                                queries=q)["candidate"].iloc[0]


@pytest.mark.slow
def test_selection_with_a_fitted_posterior():
    """End to end with bs.fit_posterior on a small PTPP-law problem (skipped if unavailable)."""
    fit_posterior = getattr(bs, "fit_posterior", None)
    if fit_posterior is None:
        pytest.skip("bs.fit_posterior is not available")
    law = bs.laws.get("dcpt")
    rng = np.random.default_rng(0)
    rows = [dict(N=n, D=a * n, replay=r) for n in (2e4, 4e4) for r in (0.1, 0.25, 0.5)
            for a in (0.5, 1, 2, 5)]
    df = pd.DataFrame(rows)
    df["loss"] = np.asarray(law(law.example, df)) * np.exp(0.003 * rng.standard_normal(len(df)))
    post = fit_posterior(law, df, seed=0)
    cand = pd.DataFrame([dict(N=n, D=a * n, replay=0.25) for n in (2e4, 8e4) for a in (10, 30)])
    q = pd.DataFrame([dict(N=1.6e5, D=30 * 1.6e5, replay=0.25)])
    sel = A.select(post, cand, budget=float(A.candidate_cost(cand).sum()), queries=q)
    assert len(sel) >= 1 and sel["reduction"].iloc[-1] > 0


def test_overflowing_draws_are_dropped_whole(problem):
    """Draws that overflow at a candidate or query (as Form-3 draws do far from the data) are left
    out whole, with a warning: the selection equals the one on the finite draws alone."""
    d = problem["draws"]
    S = len(d.params["B"])
    bad = np.zeros(S, bool)
    bad[:40] = True
    B = np.where(bad, np.inf, d.params["B"])
    spoiled = P.ParamDraws(TOY, {"B": B, "beta": d.params["beta"]}, sigma=d.sigma)
    clean = P.ParamDraws(TOY, {"B": d.params["B"][~bad], "beta": d.params["beta"][~bad]},
                         sigma=d.sigma[~bad])
    q, c = pd.DataFrame({"D": D_QUERY}), cands([1.0, 1.0, 1.0, 1.0])
    with pytest.warns(RuntimeWarning, match="40 of 3000 posterior draws"):
        got = A.select(spoiled, c, budget=2.0, cost="cost", queries=q)
    want = A.select(clean, c, budget=2.0, cost="cost", queries=q)
    assert got["candidate"].tolist() == want["candidate"].tolist()
    np.testing.assert_allclose(got["criterion_after"], want["criterion_after"], rtol=1e-12)
    all_bad = P.ParamDraws(TOY, {"B": np.full(S, np.inf), "beta": d.params["beta"]}, sigma=d.sigma)
    with pytest.raises(bs.BayesScalingError, match="3000 of 3000 draws"):
        A.select(all_bad, c, budget=2.0, cost="cost", queries=q)


def test_a_fitted_posterior_is_scored_on_its_law_values_not_its_discrepancy():
    """Queries beyond the fitted range get model-discrepancy noise in ``Posterior.predict_draws``
    (independent across rows); the criterion is the variance of the law's values over the
    parameter draws, so ``select`` on the posterior equals ``select`` on its parameter draws."""
    rng = np.random.default_rng(3)
    D = np.geomspace(1e3, 3e4, 10)
    df = pd.DataFrame({"D": D, "loss": np.exp(_f(50.0, 0.3, D) + SIGMA * rng.standard_normal(10))})
    post = bs.fit_posterior(TOY, df, method="laplace", seed=0, progress_bar=False,
                            allow_unconverged=True)
    q, c = pd.DataFrame({"D": D_QUERY}), cands([1.0, 2.0, 3.0, 4.0])
    law_values = np.log(np.asarray(post.predict_draws(q, discrepancy=0)))
    assert not np.allclose(np.log(np.asarray(post.predict_draws(q))), law_values)
    got = A.select(post, c, budget=6.0, cost="cost", queries=q, max_draws=None)
    want = A.select(bs.plan.as_draws(post), c, budget=6.0, cost="cost", queries=q, max_draws=None)
    assert got["candidate"].tolist() == want["candidate"].tolist()
    np.testing.assert_allclose(got["criterion_after"], want["criterion_after"], rtol=1e-10)
    np.testing.assert_allclose(got.attrs["initial"], law_values.var(0, ddof=1).mean(), rtol=1e-10)
