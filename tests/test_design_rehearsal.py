"""The rehearsal of ``bayes`` (``rehearsal=R``): each greedy plan's purchase refitted from R starts
on a table simulated at the posterior's mode, and the plan whose refit lands in its best basin
(the start lottery of the protocol's 64-start refit) preferred; docs/design.md."""
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

from bayes_scaling.design import fitting, methods
from bayes_scaling.design.acquisition import best_rule
from bayes_scaling.design.task import Group
from bayes_scaling.errors import BayesScalingError
from bayes_scaling.laws import Law, Param

# A cosine whose frequency has one basin on a short stretch of x and many on a long one.
COS = Law("cosine", (Param("a", 0.5, 2.0, (0.5, 2.0)), Param("w", 0.1, 10.0, (0.1, 10.0)),
                     Param("c", -1.0, 1.0, (-1.0, 1.0))), ("x",),
          lambda p, x: p["c"] + p["a"] * jnp.cos(p["w"] * x["x"]))
TRUTH = np.array([1.0, 1.3, 0.2])
OBSERVED = [0.2, 0.5, 0.8, 1.1]
FAR = [6.0, 7.0, 8.0, 9.0]  # many periods: the frequency has many local minima
NEAR = [1.5, 2.0, 2.5, 3.0]  # under one period: one basin
TARGETS = {"x": np.array([3.5, 4.0])}


def _law(x):
    return np.asarray(fitting.predictor(COS)(TRUTH[None], {"x": np.asarray(x)}))[0]


def test_best_of_weights_is_the_distribution_of_the_best_of_k_draws():
    rng = np.random.default_rng(0)
    sse = np.append(rng.random(30), [np.inf, np.inf])  # two failed starts
    k = 5
    w = fitting.best_of_weights(sse, k)
    assert np.isclose(w.sum(), 1.0)
    draws = rng.integers(len(sse), size=(200_000, k))
    best = draws[np.arange(len(draws)), np.argmin(sse[draws], axis=1)]
    freq = np.bincount(best, minlength=len(sse)) / len(draws)
    assert np.max(np.abs(freq - w)) < 0.005
    assert np.isclose(w[-2:].sum(), (2 / 32) ** k)  # both failed only when every draw failed
    assert np.allclose(fitting.best_of_weights(sse[:30], 1), 1 / 30)  # one start: uniform


def test_start_lottery_finds_the_purchase_whose_refit_hits_its_basin():
    """Four runs beyond the first period leave the frequency with many basins: 64 starts miss
    the best one with sizeable probability; four runs within the period leave one basin."""
    th0 = fitting.uniform_starts(COS, 128, np.random.default_rng(0))
    lots = {}
    for name, extra in (("far", FAR), ("near", NEAR)):
        x = np.array(OBSERVED + extra)
        lots[name] = fitting.start_lottery(COS, {"x": x}, _law(x), TARGETS, th0, 64)
    assert lots["near"].hit > 0.25 and lots["far"].hit < 0.12
    assert lots["near"].excess < 1e-6
    assert lots["far"].excess > 1e-4


def test_rehearsal_prefers_the_plan_the_refit_lands_on():
    """Two plans of equal size: the plain rule keeps the one with the lower criterion (the far
    runs), the rehearsal the one whose refit reaches its best basin (the near runs)."""
    x_pool = np.array(OBSERVED + FAR + NEAR)
    g = Group("all", {"x": x_pool}, _law(x_pool), np.ones(len(x_pool)), TARGETS,
              _law(TARGETS["x"]))
    state = SimpleNamespace(group=g, law=COS, observed=np.arange(4), memory={})
    aff = np.arange(4, len(x_pool))
    u = np.asarray(fitting.to_unconstrained(COS, jnp.asarray(TRUTH)))
    post = SimpleNamespace(u=u[None], weights=np.array([1.0]))
    plans = {"ratio": ([0, 1, 2, 3], [2e-4, 1.0e-4], 3e-4),
             "gain": ([4, 5, 6, 7], [2e-4, 1.2e-4], 3e-4)}
    _, (plain, _, _), _ = best_rule(lambda p: plans["ratio" if p == 1.0 else "gain"])
    assert plain == plans["ratio"][0]
    bayes = methods.make("bayes", rehearsal=128)
    chosen = bayes.rehearse(state, post, aff, plans)
    assert chosen == plans["gain"][0]
    log = {r["rule"]: r for r in state.memory["rehearsals"]}
    assert log["gain"]["hit"] > 2 * log["ratio"]["hit"]
    assert log["gain"]["excess"] < 1e-6
    assert log["ratio"]["excess"] > 1e-4
    # with the far runs' criterion far lower, the rehearsal keeps them: the lottery is a cost
    # added to the criterion, not a veto
    plans["gain"] = ([4, 5, 6, 7], [2e-4, 1.0e-2], 3e-4)
    assert bayes.rehearse(state, post, aff, plans) == plans["ratio"][0]


def test_rehearsal_options_are_checked():
    with pytest.raises(BayesScalingError, match="rehearsal"):
        methods.make("bayes", rehearsal=-1)
    with pytest.raises(BayesScalingError, match="protocol_starts"):
        methods.make("bayes", protocol_starts=0)
    with pytest.raises(BayesScalingError, match="rules"):
        methods.make("bayes", rehearsal=64, rules=("ratio", "cheapest"))
