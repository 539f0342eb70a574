"""One acquisition engine behind bs.design's ``bayes`` and bs.anchors.select, and ``bayes``
spending each checkpoint's budget rather than holding a run over."""
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling import anchors
from bayes_scaling.bayes.predictive import ParamDraws
from bayes_scaling.design import harness, methods
from bayes_scaling.design.acquisition import best_rule, greedy_linear
from bayes_scaling.laws import Law, Param
from conftest import toy_chinchilla_law

LIN = Law("lin", (Param("a", -np.inf, np.inf, (0.0, 1.0)), Param("b", -np.inf, np.inf, (0.0, 1.0))),
          ("D",), lambda p, x: jnp.exp(p["a"] + p["b"] * jnp.log(x["D"])))


def _exact_greedy(h_q, h_c, cov, s2, cost, budget):
    """Greedy per-cost variance reduction of the log forecasts ``h' theta`` by explicit Kalman
    updates of the parameter covariance."""
    S, left, picks = cov.copy(), budget, []
    while True:
        ok = [c for c in range(len(h_c)) if c not in picks and cost[c] <= left]
        if not ok:
            return picks
        red = [sum((q @ S @ h_c[c]) ** 2 for q in h_q) / (h_c[c] @ S @ h_c[c] + s2) / cost[c]
               for c in ok]
        c = ok[int(np.argmax(red))]
        g = S @ h_c[c]
        S = S - np.outer(g, g) / (h_c[c] @ S @ h_c[c] + s2)
        picks.append(c)
        left -= cost[c]


def test_anchor_selection_is_the_design_engine_on_the_draws_covariance():
    """For a law linear in its parameters in log space, select's picks are the Kalman-greedy picks
    and equal the engine's on the exact covariance of the log forecasts."""
    rng = np.random.default_rng(0)
    cov = np.array([[0.04, -0.01], [-0.01, 0.01]])
    th = rng.multivariate_normal([0.5, -0.1], cov, size=40000)
    draws = ParamDraws(LIN, {"a": th[:, 0], "b": th[:, 1]})
    D_c = np.array([10.0, 30.0, 100.0, 300.0, 1000.0])
    cost = np.array([1.0, 1.5, 2.0, 4.0, 8.0])
    D_q = np.array([3000.0, 1e4])
    s2, budget = 0.05 ** 2, 7.0
    sel = anchors.select(draws, pd.DataFrame({"D": D_c, "c": cost}), budget=budget, cost="c",
                         queries=pd.DataFrame({"D": D_q}), noise=0.05, greedy="ratio",
                         max_draws=None)
    h_c = np.stack([np.ones_like(D_c), np.log(D_c)], 1)
    h_q = np.stack([np.ones_like(D_q), np.log(D_q)], 1)
    Sc = np.cov(th, rowvar=False)
    want = _exact_greedy(h_q, h_c, Sc, s2, cost, budget)
    assert sel["candidate"].tolist() == want
    H = np.concatenate([h_q, h_c])
    picks, values, v0 = greedy_linear(H @ Sc @ H.T, len(D_q), s2, cost, budget,
                                      weights=np.full(len(D_q), 1 / len(D_q)))
    assert picks == want
    np.testing.assert_allclose(sel["criterion_after"], values, rtol=1e-8)
    assert sel.attrs["initial"] == pytest.approx(v0, rel=1e-8)


def test_engine_prefers_value_per_cost_and_gain_alone_with_cost_power_zero():
    # two targets; candidate 0 informs both a little and is cheap, candidate 1 informs both well
    C = np.array([[1.0, 0.5, 0.3, 0.9],
                  [0.5, 1.0, 0.3, 0.9],
                  [0.3, 0.3, 1.0, 0.3],
                  [0.9, 0.9, 0.3, 1.0]])
    cost = np.array([0.1, 1.0])
    assert greedy_linear(C, 2, 0.01, cost, 1.0, max_picks=1)[0] == [0]
    assert greedy_linear(C, 2, 0.01, cost, 1.0, max_picks=1, cost_power=0.0)[0] == [1]


TRUE = {"E": 1.8, "A": 400.0, "alpha": 0.34, "B": 410.0, "beta": 0.28}
LAW = toy_chinchilla_law()


def _table(sizes, tpps, seed):
    df = pd.DataFrame([{"N": n, "D": n * t} for n in sizes for t in tpps])
    df["loss"] = np.asarray(LAW(TRUE, df)) + 0.003 * np.random.default_rng(seed).standard_normal(
        len(df))
    return df


def test_bayes_chooses_within_the_current_checkpoint():
    """Once the pilot is over, ``bayes`` proposes only runs the current checkpoint still affords
    (a run held over would leave that checkpoint's budget unspent); with the checkpoint at the
    final budget the same state buys a run the small checkpoint could not afford."""
    task = bs.design.Task(name="toy", train=_table([1e7, 2e7, 4e7, 8e7, 1.6e8],
                                                   [2, 5, 10, 20, 40, 80], 0),
                          test=_table([1e9, 2e9], [20, 40], 1), law=LAW, target="loss",
                          cost="6ND", budgets=(0.05, 0.5))
    g = task.groups()[0]
    total = float(g.cost.sum())
    bought = np.argsort(g.cost)[:8]
    rest = np.setdiff1d(np.arange(len(g.y)), bought)

    def state(budget):
        return harness.State(task, g, np.random.default_rng(0), rest, bought,
                             float(g.cost[bought].sum()), total, 0.5 * total, budget,
                             {"pilot_done": True})

    free = methods.make("bayes").propose(state(0.5 * total), batch=4)
    room = 0.5 * g.cost[free].max()
    assert g.cost[rest].min() < room
    picks = methods.make("bayes").propose(state(float(g.cost[bought].sum()) + room), batch=4)
    assert len(picks) and g.cost[picks].sum() <= room * (1 + 1e-12)


def test_best_rule_keeps_the_lower_final_criterion_and_bayes_checks_its_rule():
    # one cheap run that explains little, one dear run that explains the target entirely
    C = np.array([[1.0, 0.5, 1.0],
                  [0.5, 1.0, 0.5],
                  [1.0, 0.5, 1.0]])
    cost = np.array([0.1, 1.0])

    def run(power):
        return greedy_linear(C, 1, 0.01, cost, 1.0, cost_power=power)

    rule, (picks, _, _), final = best_rule(run)
    assert run(1.0)[0] == [0] and run(0.0)[0] == [1]  # ratio buys the cheap run, then cannot
    assert rule == "gain" and picks == [1] and final["gain"] < final["ratio"]
    with pytest.raises(bs.BayesScalingError, match="greedy must be"):
        methods.make("bayes", greedy="lazy")
    assert methods.make("bayes", greedy="half").greedy == "half"  # every rule of RULES
