"""bs.design.recommend: the next runs to buy from a user's pool, on pools simulated from a known law."""
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from conftest import learning_rate_law, offset_power_law

import bayes_scaling as bs
from bayes_scaling.errors import BayesScalingError, DataError, OptionError
from bayes_scaling.laws import Law, Param

LAW = offset_power_law("rec_power")
TRUE = {"E": 1.8, "A": 400.0, "alpha": 0.34}
TARGETS = pd.DataFrame({"N": [3e9, 6e9]})


def pool_1d(seed=0):
    """Done: 8 small runs (N 1e6..1e7); candidates: 10 runs from 2e7 to 2e9, cost = N."""
    rng = np.random.default_rng(seed)
    done = pd.DataFrame({"N": np.geomspace(1e6, 1e7, 8)})
    done["loss"] = np.asarray(LAW(TRUE, done)) * np.exp(0.003 * rng.standard_normal(len(done)))
    cand = pd.DataFrame({"N": np.geomspace(2e7, 2e9, 10), "loss": np.nan})
    return pd.concat([done, cand], ignore_index=True)


@pytest.fixture(scope="module")
def rec():
    return bs.design.recommend(pool_1d(), law=LAW, cost="N", targets=TARGETS, budget="40%")


def test_the_recommendation_is_ordered_within_budget_and_lowers_the_expected_error(rec):
    pool = pool_1d()
    budget = 0.4 * pool["N"][pool["loss"].isna()].sum()
    assert len(rec) >= 1 and rec.attrs["budget"] == pytest.approx(budget)
    assert list(rec["step"]) == list(range(1, len(rec) + 1))
    assert rec["cum_cost"].iloc[-1] <= budget * (1 + 1e-12)
    assert np.allclose(rec["cum_cost"], np.cumsum(rec["cost"]))
    assert rec["row"].is_unique and pool.loc[rec["row"], "loss"].isna().all()  # candidates only
    assert np.all(rec["expected_reduction"] > 0)
    assert np.allclose(rec["expected_error_after"],
                       rec.attrs["initial_error"] - np.cumsum(rec["expected_reduction"]))
    assert np.allclose(rec["reduction_per_cost"], rec["expected_reduction"] / rec["cost"])
    assert np.allclose(rec["expected_rmse_after"], np.sqrt(rec["expected_error_after"] / 2))


def test_a_run_near_the_targets_ranks_above_a_far_one_of_equal_cost():
    """Two candidates at the same cost, one at the targets' scale and one below the runs done:
    with a budget for one run, the one that informs the targets is bought; with a budget for
    both, it comes first."""
    pool = pool_1d()
    pool = pd.concat([pool[pool["loss"].notna()],
                      pd.DataFrame({"N": [2e5, 2e9], "loss": np.nan})], ignore_index=True)
    pool["c"] = 1.0
    near = pool.index[-1]
    one = bs.design.recommend(pool, law=LAW, cost="c", targets=TARGETS, budget=1.0)
    assert list(one["row"]) == [near]
    two = bs.design.recommend(pool, law=LAW, cost="c", targets=TARGETS, budget=2.0)
    assert two["row"].iloc[0] == near


def test_a_done_marker_column_and_a_target_query_select_the_rows():
    pool = pool_1d()
    pool["done"] = np.where(pool["loss"].notna(), "yes", "")
    pool.loc[pool["loss"].isna(), "loss"] = 9.9  # a loss written in a candidate row is ignored
    rec = bs.design.recommend(pool, law=LAW, cost="N", targets="N >= 1e9", budget=5e8,
                              done="done")
    assert rec.attrs["n_done"] == 8 and rec.attrs["n_targets"] == 2
    assert rec["cum_cost"].iloc[-1] <= 5e8
    assert not pool.loc[rec["row"], "done"].eq("yes").any()


def test_cost_formula_is_arithmetic_of_columns_and_nothing_else():
    df = pd.DataFrame({"N": [1e6, 2e6], "D": [1e8, 3e8]})
    assert np.allclose(bs.design.cost_formula("6*N*D", df), 6 * df["N"] * df["D"])
    assert np.allclose(bs.design.cost_formula("2 * N ** 0.5 + log(D)", df),
                       2 * df["N"] ** 0.5 + np.log(df["D"]))
    for bad in ("__import__('os').system('true')", "N.__class__", "df['N']", "open('x')"):
        with pytest.raises(OptionError, match="not allowed"):
            bs.design.cost_formula(bad, df)


@pytest.mark.parametrize("change, kwargs, match", [
    (lambda p: p.drop(columns="loss"), {}, "no loss column 'loss'"),
    (lambda p: p.assign(loss=np.nan), {}, "no run of the pool is done"),
    (None, {"cost": "6*N*D"}, "names column 'D'"),
    (lambda p: p.assign(c=np.where(p.index == 12, -1.0, 1.0)), {"cost": "c"}, r"rows \[12\]"),
    (lambda p: p.assign(c=np.where(p.index == 12, "abc", "1.5")), {"cost": "c"},
     r"cost column 'c' holds non-numbers at rows \[12\] \(\['abc'\]\)"),
    (None, {"budget": 1e6}, "cheapest candidate .* costs 2e\\+07"),
    (None, {"budget": "150%"}, "share must be in"),
    (None, {"targets": "N > 1e12"}, "selects no row"),
    (lambda p: p.assign(loss=p["loss"].astype(object).where(p.index != 3, "n/a")), {},
     r"non-numbers at rows \[3\]"),
])
def test_bad_input_is_one_clear_error_naming_the_fix(change, kwargs, match):
    pool = pool_1d() if change is None else change(pool_1d())
    args = {"law": LAW, "cost": "N", "targets": TARGETS, "budget": "40%", **kwargs}
    with pytest.raises(BayesScalingError, match=match):
        bs.design.recommend(pool, **args)


def test_the_figure_marks_candidates_recommended_runs_and_targets(rec, tmp_path):
    path = tmp_path / "rec.png"
    fig = bs.design.recommend_figure(pool_1d(), rec, law=LAW, cost="N", targets=TARGETS, path=path)
    assert path.stat().st_size > 0
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["done (8)", "candidates (10)", f"recommended ({len(rec)})", "targets (2)"]


def test_runs_done_with_a_loss_at_or_below_0_among_positive_ones_are_named():
    pool = pool_1d()
    pool.loc[[1, 4], "loss"] = -1.0  # a marker of runs not made, or a signed target
    with pytest.warns(bs.SignedTargetWarning, match=r"the runs done: the loss is at or below 0 at "
                      r"2 of 8 rows \(\[1, 4\]: \[-1.0, -1.0\]\).*leave their loss empty"):
        bs.design.recommend(pool, law=LAW, cost="N", targets=TARGETS, budget="40%")


def test_a_pool_with_no_candidate_is_a_clear_error():
    pool = pool_1d().dropna()
    with pytest.raises(DataError, match="every row of the pool is done"):
        bs.design.recommend(pool, law=LAW, cost="N", targets=TARGETS, budget=1.0)


def test_the_figure_keeps_an_input_that_is_not_positive_on_a_linear_axis(tmp_path):
    # a log learning rate (negative) beside N: on a log axis every point vanished (an empty
    # figure); the positive N keeps its log axis
    law = learning_rate_law("rec_lr")
    grid = pd.DataFrame([(n, g) for n in np.geomspace(1e6, 1e8, 5) for g in (-4.0, -3.0, -2.0)],
                        columns=["N", "loglr"])
    grid["loss"] = np.asarray(law({**TRUE, "c": 0.1}, grid))
    grid.loc[grid["N"] > 2e7, "loss"] = np.nan
    targets = pd.DataFrame({"N": [1e9, 1e9], "loglr": [-3.5, -2.5]})
    rec = bs.design.recommend(grid, law=law, cost="N", targets=targets, budget="50%")
    fig = bs.design.recommend_figure(grid, rec, law=law, cost="N", targets=targets,
                                     path=tmp_path / "lr.png")
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "linear")
    lo, hi = ax.get_ylim()
    assert lo < -4.0 and hi > -2.0  # every learning rate drawn inside the axis


def test_runs_that_differ_only_in_an_input_not_drawn_share_one_label(tmp_path):
    # a third input (a learning rate) is not drawn: two recommended runs at one (N, D) point
    # were labelled on top of each other, and the first label vanished under the second
    def three(p, x):
        return p["E"] + p["A"] / x["N"] ** p["a"] + 0.01 * jnp.log(x["lr"] / 1e-3) ** 2
    law = Law(name="rec_three_inputs", variables=("N", "D", "lr"), fn=three,
              params=(Param("E", 0.0, 5.0, (1.0, 2.0)), Param("A", 1.0, 1e4, (10.0, 1e3)),
                      Param("a", 0.05, 1.0, (0.1, 0.5))))
    pool = pd.DataFrame([(n, d, lr) for n in np.geomspace(1e6, 1e8, 5) for d in (1e9, 2e9)
                         for lr in (1e-3, 3e-3)], columns=["N", "D", "lr"])
    pool["loss"] = np.asarray(law({"E": 1.7, "A": 400.0, "a": 0.3}, pool))
    pool.loc[pool["N"] > 2e7, "loss"] = np.nan
    rec = pd.DataFrame({"row": [pool.index[-1], pool.index[-2], pool.index[-4]]})
    targets = pd.DataFrame({"N": [1e9], "D": [4e9], "lr": [1e-3]})
    fig = bs.design.recommend_figure(pool, rec, law=law, cost="N", targets=targets)
    ax = fig.axes[0]
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["1, 2", "3"]  # rows -1 and -2 differ only in lr; -4 is another D
    assert ax.get_title() == "next runs to buy (rec_three_inputs; lr not drawn)"
