"""bs.design on any pool: every method returns its rows or one clear error, never another exception.

Tasks are generated from a known law written through the public law API (as a user brings one):
groups of very different sizes, budgets that buy nothing at a checkpoint, ties in cost, laws with
more parameters than the runs a budget affords, groups with no target rows.
"""
import numpy as np
import pandas as pd
import pytest
from conftest import toy_chinchilla_law
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bayes_scaling as bs
from bayes_scaling.errors import BayesScalingError

TRUE5 = {"E": 1.8, "A": 400.0, "alpha": 0.34, "B": 410.0, "beta": 0.28}


def offset_fn(p, x):
    return p["E"] + p["A"] * x["N"] ** -p["alpha"]


def three_param_law() -> bs.laws.Law:
    """``E + A N^-alpha``: 3 parameters, one variable."""
    return bs.laws.Law(
        name="prop_power3", variables=("N",), equation="E + A N^-alpha", fn=offset_fn,
        params=(bs.laws.Param("E", 0.0, 5.0, (0.0, 5.0)),
                bs.laws.Param("A", 1.0, 1e4, (1.0, 1e4), True),
                bs.laws.Param("alpha", 0.05, 1.0, (0.05, 1.0), True)))


LAWS = {3: (three_param_law(), {"E": 1.8, "A": 400.0, "alpha": 0.34}),
        5: (toy_chinchilla_law(), TRUE5)}


def make_task(n_params, sizes, test_sizes, budgets, tie_costs, seed, name="prop"):
    """A grouped task from the law with ``n_params`` parameters: group ``g`` has ``sizes[g]``
    pool runs and ``test_sizes[g]`` target rows (larger N, D than its pool); with ``tie_costs``
    every run of a group costs the same (cost column ``c``), else ``6 N D``."""
    law, true = LAWS[n_params]
    rng = np.random.default_rng(seed)
    train, test = [], []
    for g, (n, nt) in enumerate(zip(sizes, test_sizes)):
        N = 10 ** rng.uniform(6.0, 8.0, n)
        D = N * 10 ** rng.uniform(0.5, 2.0, n)
        train.append(pd.DataFrame({"N": N, "D": D, "group": f"g{g}"}))
        test.append(pd.DataFrame({"N": 10 ** rng.uniform(8.5, 9.0, nt), "group": f"g{g}",
                                  "D": 10 ** rng.uniform(10.0, 11.0, nt)}))
    train, test = pd.concat(train, ignore_index=True), pd.concat(test, ignore_index=True)
    for df in (train, test):
        df["loss"] = np.asarray(law(true, df)) * np.exp(0.005 * rng.standard_normal(len(df)))
    train["c"] = 1.0 if tie_costs else 6.0 * train["N"] * train["D"]
    return bs.design.Task(name=name, train=train, test=test, law=law, cost="c",
                          group="group" if len(sizes) > 1 else None, budgets=budgets)


def check_protocol(task, method, seed=0, **options):
    """Run ``method`` on ``task`` and check the protocol's invariants: every checkpoint has its
    record, each group spends no more than its budget and exactly the cost of the runs it bought,
    no run is bought twice, purchases only grow. Returns the result table."""
    res = bs.design.run(task, method=method, seeds=[seed], **options)
    assert list(res["budget"]) == list(task.budgets)
    assert np.all(np.diff(res["n_runs"]) >= 0) and np.all(np.diff(res["cost_spent"]) >= -1e-9)
    assert res["r2_protocol"].between(-1, 1).all() and res["r2_posterior"].between(-1, 1).all()
    groups = task.groups()
    before = [np.array([], int) for _ in groups]
    for budget, states, _ in bs.design.checkpoints((task, method, seed, "jax", options)):
        for i, (g, s) in enumerate(zip(groups, states)):
            assert len(np.unique(s.observed)) == len(s.observed)  # no run bought twice
            assert np.isin(before[i], s.observed).all()  # nothing sold back
            assert s.spent == pytest.approx(g.cost[s.observed].sum(), rel=1e-12, abs=0)
            assert s.spent <= budget * g.cost.sum() * (1 + 1e-9)
            before[i] = s.observed
        row = res[res["budget"] == budget].iloc[0]
        assert row["n_runs"] == sum(len(s.observed) for s in states)
        assert row["cost_spent"] == pytest.approx(sum(s.spent for s in states))
    return res


def test_a_model_based_method_buys_in_a_group_whose_cheapest_run_exceeds_the_pilot_share():
    """Regression: in a group of five equal-cost runs each run is 20% of the group's pool, more
    than the pilot's 2%; the pilot ended with no run bought and the refit of zero runs raised
    IndexError in ``pad_rows``. The pilot now always buys one run, and the group buys as many
    runs as its budget affords (a 35% budget affords one run of 20%)."""
    task = make_task(5, sizes=(14, 5), test_sizes=(2, 2), budgets=(0.2, 0.35), tie_costs=True,
                     seed=1)
    for method in ("d_opt", "v_opt", "bayes"):
        res = check_protocol(task, method)
        states = list(bs.design.checkpoints((task, method, 0, "jax", {})))[-1][1]
        assert [len(s.observed) for s in states] == [4, 1], method  # 35% of 14 and of 5 runs
        assert res["n_runs"].iloc[-1] == 5


def test_least_squares_of_no_runs_is_a_clear_error():
    law, _ = LAWS[3]
    theta0 = bs.design.uniform_starts(law, 4, np.random.default_rng(0))
    with pytest.raises(bs.errors.DataError, match="no runs to fit"):
        bs.design.least_squares(law, {"N": np.array([])}, np.array([]), theta0)


group_sizes = st.lists(st.integers(1, 12), min_size=1, max_size=3)


@st.composite
def tasks(draw, sizes=group_sizes):
    sizes = draw(sizes)
    test_sizes = [draw(st.integers(0, 2)) for _ in sizes]
    if sum(test_sizes) == 0:
        test_sizes[draw(st.integers(0, len(sizes) - 1))] = 1
    n_budgets = draw(st.integers(1, 3))
    # the first budget can be too small to buy any run (1e-4 of a group's pool)
    budgets = sorted(draw(st.sets(st.sampled_from([1e-4, 0.03, 0.1, 0.25, 0.5, 1.0]),
                                  min_size=n_budgets, max_size=n_budgets)))
    return make_task(draw(st.sampled_from([3, 5])), sizes, test_sizes, budgets,
                     draw(st.booleans()), draw(st.integers(0, 2 ** 16)))


FAST = settings(max_examples=8, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("method", ["random", "cheapest", "cost_random"])
@FAST
@given(task=tasks())
def test_baselines_return_their_rows_on_any_pool(method, task):
    check_protocol(task, method)


@pytest.mark.parametrize("method", ["d_opt", "bayes"])
@FAST
@given(task=tasks(st.lists(st.integers(1, 6), min_size=1, max_size=2)))
def test_model_based_methods_return_their_rows_on_small_pools(method, task):
    check_protocol(task, method)


@pytest.mark.slow
@pytest.mark.parametrize("method", list(bs.design.METHODS))
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(task=tasks(st.lists(st.integers(1, 30), min_size=1, max_size=3)))
def test_every_method_returns_its_rows_on_any_pool(method, task):
    check_protocol(task, method)


def test_a_task_with_no_target_rows_is_a_clear_error():
    with pytest.raises(BayesScalingError, match="test"):
        make_task(3, sizes=(4,), test_sizes=(0,), budgets=(0.5,), tie_costs=False, seed=0)
