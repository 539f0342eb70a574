"""Checks on the committed bible_ptpp loss table that would catch a broken training pipeline.

They run on whatever (possibly partial) table is committed; a check is skipped, with the reason,
only when the rows it needs are not in the table yet. NOISE is the tolerance in nats for one
comparison between two evaluations on the same fixed validation windows.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import committed_table

TABLE = Path(__file__).resolve().parents[1] / "bayes_scaling" / "datasets" / "bible_ptpp.csv"
CANONICAL = ["loss", "N", "N_nonemb", "D", "ptpp", "replay", "domain", "atpp"]
NOISE = 0.01


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return committed_table(TABLE)


def test_columns_and_values(table):
    assert list(table.columns[:8]) == CANONICAL
    assert (table.loss > 0).all() and np.isfinite(table.loss).all()
    assert set(table.domain) <= {"source", "target"}
    assert not table.duplicated(["run_id", "D", "domain"]).any()
    base = table[table.D == 0]
    assert base.replay.isna().all() and (base.atpp == 0).all() and base.is_base.all()
    cpt = table[table.D > 0]
    assert cpt.replay.between(0, 1, inclusive="right").all()
    np.testing.assert_allclose(cpt.atpp, cpt.D / cpt.N_nonemb, rtol=1e-5)
    assert (table.N > table.N_nonemb).all()


def test_target_loss_falls_with_D_in_every_run(table):
    runs = table[(table.D > 0) & (table.domain == "target")].groupby("run_id")
    runs = [g.sort_values("D") for _, g in runs if len(g) >= 3]
    if not runs:
        pytest.skip("no continual pre-training run with >= 3 evaluated budgets yet")
    base = table[(table.D == 0) & (table.domain == "target")].set_index(["size", "ptpp"]).loss
    for g in runs:
        loss = g.loss.to_numpy()
        rid = g.run_id.iloc[0]
        assert np.all(np.diff(loss) < NOISE), f"{rid}: target loss rises with D: {loss}"
        assert loss[-1] < loss[0] - 5 * NOISE, f"{rid}: target loss hardly falls: {loss}"
        before = base.get((g["size"].iloc[0], g.ptpp.iloc[0]))
        if before is not None:  # (the first, tiny budgets may sit above it: re-warming)
            assert loss[-1] < before - 5 * NOISE, f"{rid}: last budget not below D = 0 loss"


def test_larger_models_reach_lower_loss_at_equal_ptpp_replay_D(table):
    """Target loss of the next-larger size at each of its budgets D is below the smaller size's
    loss at the same D (read off the smaller size's measured curve, linear in log D, within its
    measured range); source loss at D = 0 falls with size at every PTPP."""
    order = table.groupby("size").N_nonemb.first().sort_values()
    compared = 0
    target = table[(table.D > 0) & (table.domain == "target")]
    for (ptpp, replay), g in target.groupby(["ptpp", "replay"]):
        for small, large in zip(order.index[:-1], order.index[1:]):
            s = g[g["size"] == small].sort_values("D")
            big = g[g["size"] == large].sort_values("D")
            if len(s) < 2:
                continue
            inside = big[(big.D >= s.D.iloc[0]) & (big.D <= s.D.iloc[-1])]
            ref = np.interp(np.log(inside.D), np.log(s.D), s.loss)
            compared += len(inside)
            worse = inside.loss.to_numpy() >= ref + NOISE
            assert not worse.any(), (
                f"ptpp={ptpp} r={replay}: {large} not below {small} at D="
                f"{inside.D[worse].tolist()}: {inside.loss[worse].tolist()} vs {ref[worse]}")
    base = table[(table.D == 0) & (table.domain == "source")]
    for ptpp, g in base.groupby("ptpp"):
        loss = g.set_index("size").loss.reindex(order.index).dropna().to_numpy()
        compared += len(loss) - 1
        assert np.all(np.diff(loss) < 0), f"ptpp={ptpp}: source loss not falling with size {loss}"
    if not compared:
        pytest.skip("no two sizes share a (ptpp, replay) yet")


def test_pre_adaptation_source_loss_falls_with_ptpp(table):
    base = table[(table.D == 0) & (table.domain == "source")]
    groups = [g.sort_values("ptpp") for _, g in base.groupby("size") if len(g) >= 2]
    if not groups:
        pytest.skip("no size has two PTPP stages evaluated yet")
    for g in groups:
        loss = g.loss.to_numpy()
        assert np.all(np.diff(loss) < 0), f"{g['size'].iloc[0]}: source loss vs PTPP {loss}"


def test_forgetting_shrinks_as_replay_grows(table):
    """Forgetting = source loss minus its D = 0 value, averaged over the shared budgets."""
    base = table[(table.D == 0) & (table.domain == "source")].set_index(["size", "ptpp"]).loss
    src = table[(table.D > 0) & (table.domain == "source")].copy()
    src["forget"] = src.loss - [base.get((s, p), np.nan) for s, p in zip(src["size"], src.ptpp)]
    checked = 0
    for (size, ptpp), g in src.dropna(subset=["forget"]).groupby(["size", "ptpp"]):
        steps = g.groupby("replay").steps.apply(set)
        if len(steps) < 2:
            continue
        shared = set.intersection(*steps)
        f = g[g.steps.isin(shared)].groupby("replay").forget.mean().sort_index()
        checked += 1
        assert np.all(np.diff(f.to_numpy()) < NOISE), (
            f"{size} ptpp={ptpp}: mean forgetting does not shrink with replay: {f.to_dict()}")
    if not checked:
        pytest.skip("no (size, ptpp) has two replay ratios evaluated yet")
