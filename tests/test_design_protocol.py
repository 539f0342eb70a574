"""The protocol's budgets: a run held over waits for the first checkpoint it fits, so no checkpoint
is scored on more than its budget, whatever the method proposes."""
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from conftest import offset_power_law
from bayes_scaling.design import harness

LAW = offset_power_law()


def _table(n):
    return pd.DataFrame({"N": n, "loss": 1.5 + 300.0 * n ** -0.3})


def test_no_checkpoint_spends_more_than_its_budget_and_held_runs_are_bought_later():
    # a pool whose dearest runs cost far more than the first checkpoint's budget
    task = bs.design.Task(name="dear", train=_table(np.geomspace(1e6, 1e8, 15)),
                          test=_table(np.array([3e8, 1e9])), law=LAW, cost="N",
                          budgets=(0.05, 0.2, 0.5))
    total = task.costs(task.train).sum()
    held_then_bought = 0
    for seed in range(6):
        prev = set()
        for budget, states, _ in harness.checkpoints((task, "random", seed, "jax", {})):
            st = states[0]
            assert st.spent <= budget * total * (1 + 1e-12)
            assert np.isclose(st.spent, st.group.cost[st.observed].sum())
            now = set(st.observed.tolist())
            assert prev <= now
            held_then_bought += budget > 0.05 and len(now - prev) > 0 and any(
                st.group.cost[i] > 0.05 * total for i in now - prev)
            prev = now
    assert held_then_bought  # some dear run was bought at a later checkpoint


def test_bayes_with_either_criterion_recovers_the_law_within_each_budget():
    task = bs.design.Task(name="dear", train=_table(np.geomspace(1e6, 1e8, 15)),
                          test=_table(np.array([3e8, 1e9])), law=LAW, cost="N",
                          budgets=(0.1, 0.3))
    total = task.costs(task.train).sum()
    for criterion in ("refit", "posterior"):
        res = bs.design.run(task, "bayes", seeds=[0], criterion=criterion)
        assert np.all(res.cost_spent <= res.budget * total * (1 + 1e-12))
        assert res.r2_protocol.iloc[-1] > 0.9
    with pytest.raises(bs.BayesScalingError, match="criterion must be"):
        bs.design.run(task, "bayes", seeds=[0], criterion="bias")
