"""The target-vs-helper Pareto front of bayes_scaling.plan.pareto on a known-parameter case: M3 at
its Table 13 (Japanese) values for the target, He + Dual PL at its example values for the helper,
each with a few jittered draws. The front is checked against the chance constraint recomputed
from a loss table and against a brute-force grid over the recipe box."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes.predictive import ParamDraws, order_statistic, predict_draws
from bayes_scaling.errors import BayesScalingError
from bayes_scaling.plan.pareto import helper_law, pareto_front

C0 = 1e18
C, D_T = C0, 5.8316 * C0 ** 0.4757 * 2.0 ** -3   # M3 Eq. 14 grid: f_C = 0, f_D = -3 (scarce)
PROB = 0.6
LIMITS = (2.0, 2.3, 2.5, 2.8, 3.5)


def _draws(law, S=5, jitter=0.02, seed=0):
    rng = np.random.default_rng(seed)
    return ParamDraws(law, {k: v * np.exp(jitter * rng.standard_normal(S))
                            for k, v in law.example.items()})


@pytest.fixture(scope="module")
def case():
    target = _draws(bs.laws.get("m3"), seed=0)
    helper = _draws(helper_law(), seed=1)
    front = pareto_front(target, helper, C=C, D_T=D_T, helper_limits=LIMITS, prob=PROB)
    return target, helper, front


def _table(M, D, k, r, r_f, two_stage):
    """Loss-table rows of recipes (k < 1: one pass over a k D_T subset, as the optimiser
    reads it)."""
    k = np.asarray(k, float)
    return pd.DataFrame({"M": M, "D": D, "D_T": D_T * np.minimum(k, 1.0), "k": np.maximum(k, 1.0),
                         "r": r, "r_f": r_f, "r1": np.zeros_like(k) if two_stage else r,
                         "r_helper": np.maximum(1 - np.asarray(r), 1e-9),
                         "r_f_helper": np.maximum(1 - np.asarray(r_f), 1e-9)})


def _brute_force(target, helper, n=56):
    """q_p of both losses on a grid of recipes: multi 1-stage (D, r) and multi 2-stage
    (D, r_f, r / r_f), D/D_T in [0.5, 300]."""
    D = D_T * np.geomspace(0.5, 300, n)
    ratio = np.geomspace(0.02, 1.0, n)
    one = np.stack(np.meshgrid(D, ratio, indexing="ij"), -1).reshape(-1, 2)
    two = np.stack(np.meshgrid(D, ratio, ratio, indexing="ij"), -1).reshape(-1, 3)
    rows = [_table(C / one[:, 0], one[:, 0], one[:, 1] * one[:, 0] / D_T, one[:, 1], one[:, 1],
                   False),
            _table(C / two[:, 0], two[:, 0], two[:, 1] * two[:, 2] * two[:, 0] / D_T,
                   two[:, 1] * two[:, 2], two[:, 1], True)]
    df = pd.concat(rows, ignore_index=True)
    qt = order_statistic(predict_draws(target, df), PROB)
    qh = order_statistic(predict_draws(helper, df), PROB)
    return qt, qh


def test_each_point_meets_its_chance_constraint_recomputed_from_a_loss_table(case):
    target, helper, front = case
    ok = front[front["feasible"]]
    assert len(ok) >= 3
    for _, row in ok.iterrows():
        df = _table([row["M"]], [row["D"]], [row["k"]], [row["r"]], [row["r_f"]],
                    row["approach"] == "multi_2stage")
        Lt, Lh = predict_draws(target, df)[:, 0], predict_draws(helper, df)[:, 0]
        assert row["M"] * row["D"] == pytest.approx(C, rel=1e-9)              # C = M D
        assert row["k"] == pytest.approx(row["r"] * row["D"] / D_T, rel=1e-9)  # M3 Eq. 24
        assert order_statistic(Lh, PROB) <= row["helper_limit"] * (1 + 1e-12)
        assert np.mean(Lh <= row["helper_limit"]) >= PROB
        assert order_statistic(Lt, PROB) == pytest.approx(row["target_loss"], rel=1e-9)
        assert row["target_lower"] <= row["target_loss"] <= row["target_upper"]


def test_front_is_monotone_trades_off_and_matches_brute_force(case):
    target, helper, front = case
    ok = front[front["feasible"]]
    t = ok["target_loss"].to_numpy()
    assert np.all(np.diff(t) <= 1e-12), t                 # looser limit, no worse target loss
    assert t[0] > t[-1] + 0.05                             # the helper limit really costs
    assert (ok["helper_loss"] <= ok["helper_limit"] * (1 + 1e-12)).all()
    # a tight limit binds: the recipe sits on it and keeps a larger helper share at the end
    tight = ok.iloc[0]
    assert tight["helper_loss"] == pytest.approx(tight["helper_limit"], rel=1e-3)
    assert tight["r_f"] < ok.iloc[-1]["r_f"]
    qt, qh = _brute_force(target, helper)
    for _, row in front.iterrows():
        feasible = qh <= row["helper_limit"]
        if not row["feasible"]:
            assert not feasible.any()            # no grid recipe meets it either
            continue
        assert row["target_loss"] <= qt[feasible].min() + 1e-5


def test_bad_requests_raise_clear_errors(case):
    target, helper, _ = case
    with pytest.raises(BayesScalingError, match="prob"):
        pareto_front(target, helper, C=C, D_T=D_T, helper_limits=[3.0], prob=1.5)
    with pytest.raises(BayesScalingError, match="mono 1-stage trains no helper"):
        pareto_front(target, helper, C=C, D_T=D_T, helper_limits=[3.0],
                     approaches=("mono_1stage",))
    with pytest.raises(BayesScalingError, match="helper_limits"):
        pareto_front(target, helper, C=C, D_T=D_T, helper_limits=[np.nan])
    with pytest.raises(BayesScalingError, match="reads no language ratio"):
        helper_law("chinchilla_m3")
