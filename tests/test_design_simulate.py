"""``bayes`` with ``simulate=M``: the greedy's plans judged by the protocol's own refit in M worlds
drawn from the Laplace mixture and its discrepancy (docs/design.md, "Plans judged in simulated
worlds")."""
from types import SimpleNamespace

import numpy as np
import pytest

from bayes_scaling.design import fitting, methods
from bayes_scaling.design.posterior import LaplaceMixture
from bayes_scaling.design.task import Group
from bayes_scaling.errors import BayesScalingError
from bayes_scaling.laws import Law, Param

# ScaleBench parallel's sl_10 shape: (A N^-alpha + E) S^-beta
LAW = Law("parallel_probe", (Param("A", 0.0, 500.0, (0.0, 500.0)),
                             Param("alpha", 0.0, 2.0, (0.0, 2.0)),
                             Param("E", -5.0, 5.0, (-5.0, 5.0)),
                             Param("beta", 0.0, 2.0, (0.0, 2.0))), ("N", "S"),
          lambda p, x: (p["A"] * x["N"] ** -p["alpha"] + p["E"]) * x["S"] ** -p["beta"])
TRUTH = np.array([60.0, 0.3, 0.9, 0.03])
N0 = 5.4e8
# the pool: runs of nearly one size (0.4% apart, as the smallest models of the parallel task) at
# S = 1, 2, 4, then larger sizes
POOL_N = np.array([N0, 1.004 * N0, 1.008 * N0, 2 * N0, 2 * N0, 8 * N0])
POOL_S = np.array([1.0, 2.0, 4.0, 4.0, 2.0, 1.0])
TARGETS = {"N": np.array([N0, 2 * N0, 4 * N0, 8 * N0]), "S": np.full(4, 8.0)}


def _truth(x):
    f = np.asarray(fitting.predictor(LAW)(TRUTH[None], x))[0]
    return f * (1 + 0.01 * np.log(x["S"]) ** 2)  # a misfit the law cannot follow in S


def _state_and_posterior():
    x = {"N": POOL_N, "S": POOL_S}
    g = Group("all", x, _truth(x), POOL_N / N0, TARGETS, _truth(TARGETS))
    observed = np.array([0])
    rng = np.random.default_rng(0)
    starts = fitting.least_squares(LAW, {k: v[observed] for k, v in x.items()}, g.y[observed],
                                   fitting.uniform_starts(LAW, 16, rng))
    post = LaplaceMixture.from_starts(LAW, g, observed, starts)
    state = SimpleNamespace(group=g, law=LAW, observed=observed, memory={})
    return state, post


def test_simulated_worlds_refuse_runs_of_nearly_one_size():
    """Two runs at the first size (S = 2, 4) against one run at twice the size: the refit of the
    first plan has to follow the noise along the 0.4% spread in N, and extrapolates it."""
    state, post = _state_and_posterior()
    aff = np.arange(1, len(POOL_N))
    near, spread = [0, 1], [2]  # positions in aff: (1.004 N0, 2), (1.008 N0, 4); (2 N0, 4)
    plans = {"ratio": (near, [1e-3, 5e-4], 1e-2), "gain": (spread, [6e-4], 1e-2)}
    bayes = methods.make("bayes", simulate=8)
    assert bayes.simulated(state, post, aff, plans) == spread
    log = state.memory["simulated"][-1]
    err = dict(zip(log["runs"], log["errors"]))
    assert err[2] > 2 * err[1]


def test_simulated_worlds_prefer_the_plan_that_adds_a_size():
    """A plan that adds a larger size to the same run beats that run alone."""
    state, post = _state_and_posterior()
    aff = np.arange(1, len(POOL_N))
    one, more = [2], [2, 4]  # (2 N0, 4); and (8 N0, 1)
    plans = {"ratio": (one, [6e-4], 1e-2), "gain": (more, [7e-4, 6.5e-4], 1e-2)}
    assert methods.make("bayes", simulate=8).simulated(state, post, aff, plans) == more


def test_one_distinct_plan_is_bought_without_simulating():
    state, post = _state_and_posterior()
    plans = {"ratio": ([1, 0], [1e-3, 5e-4], 1e-2), "gain": ([0, 1], [1e-3, 5e-4], 1e-2)}
    assert methods.make("bayes", simulate=8).simulated(state, post, np.arange(1, 6),
                                                      plans) == [1, 0]
    assert "simulated" not in state.memory


def test_simulate_is_checked():
    with pytest.raises(BayesScalingError, match="simulate"):
        methods.make("bayes", simulate=-1)


def test_recommend_with_simulated_worlds_buys_a_second_size():
    """The same choice through ``bs.design.recommend``: one run done, a budget that buys either
    the two runs of nearly the first size (S = 2, 4) or the run at twice the size."""
    import pandas as pd

    from bayes_scaling.design import recommend

    x = {"N": POOL_N[:4], "S": POOL_S[:4]}
    pool = pd.DataFrame({"N": x["N"], "S": x["S"], "loss": _truth(x)})
    pool.loc[1:, "loss"] = np.nan
    targets = pd.DataFrame(TARGETS)
    room = 2.05 * N0  # two near runs (2.012 N0) or the larger one (2 N0), not both
    plain = recommend(pool, law=LAW, cost="N", targets=targets, budget=room, simulate=0, seed=0)
    assert sorted(plain["row"]) == [1, 2]  # the linearised criterion ends lower on the near runs
    rec = recommend(pool, law=LAW, cost="N", targets=targets, budget=room, simulate=8, seed=0)
    assert rec["row"].tolist() == [3] and rec.attrs["greedy"] == "gain"
    sim = rec.attrs["simulated_by_rule"]
    assert sim is not None and max(sim.values()) > 2 * min(sim.values())
