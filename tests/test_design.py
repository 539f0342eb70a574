"""bs.design: the ScaleBench protocol as a harness, on data generated from a known law."""
import pickle

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
import bayes_scaling.cli  # noqa: F401  (bs.cli)
from bayes_scaling.design import fitting
from bayes_scaling.design.acquisition import greedy_linear
from bayes_scaling.errors import BayesScalingError, DataError
from conftest import toy_chinchilla_law

TRUE = {"E": 1.8, "A": 400.0, "alpha": 0.34, "B": 410.0, "beta": 0.28}


# A law brought by a user: specs plus one function, read from the table's own column names.
LAW = toy_chinchilla_law(N="params", D="tokens")


def _table(sizes, tpps, noise=0.0, seed=0):
    rows = [dict(params=n, tokens=n * t) for n in sizes for t in tpps]
    df = pd.DataFrame(rows)
    clean = np.asarray(LAW(TRUE, df))
    df["loss"] = clean + noise * np.random.default_rng(seed).standard_normal(len(df))
    return df


@pytest.fixture(scope="module")
def task():
    train = _table([1e7, 2e7, 4e7, 8e7, 1.6e8], [2, 5, 10, 20, 40, 80], noise=0.003)
    test = _table([1e9, 2e9], [20, 40], noise=0.003, seed=1)
    return bs.design.Task(name="toy", train=train, test=test, law=LAW, target="loss",
                          cost="6ND", budgets=(0.05, 0.2, 0.5))


def test_least_squares_recovers_a_known_law_with_either_optimiser():
    df = _table([1e7, 3e7, 1e8, 3e8], [5, 20, 80])
    x = {v: df[LAW.column(v)].to_numpy() for v in LAW.variables}
    theta0 = fitting.uniform_starts(LAW, 16, np.random.default_rng(0))
    for method in ("jax", "scipy"):
        starts = fitting.least_squares(LAW, x, df["loss"].to_numpy(), theta0, method=method)
        pred = np.asarray(LAW(dict(zip(LAW.param_names, starts.best)), df))
        assert np.max(np.abs(pred - df["loss"])) < 1e-3, method


def test_r2_is_clipped_and_a_non_finite_forecast_scores_minus_one():
    y = np.array([1.0, 2.0, 3.0])
    assert fitting.r2_clipped(y, y) == 1.0
    assert fitting.r2_clipped(y, y + 100.0) == -1.0
    assert fitting.r2_clipped(y, np.array([1.0, np.nan, 3.0])) == -1.0
    assert fitting.r2_clipped(y, np.array([1.0, 2.0, 2.5])) == pytest.approx(1 - 0.25 / 2.0)


def test_cheapest_buys_in_cost_order_and_holds_over_the_run_that_does_not_fit(task):
    res = bs.design.run(task, method="cheapest", seeds=[0])
    cost = np.sort(task.costs(task.train))
    total = cost.sum()
    prefix = np.cumsum(cost)
    prev = 0
    for budget, n_runs, spent in zip(res.budget, res.n_runs, res.cost_spent):
        # the k cheapest runs, k the most the budget allows, or one more: the run held over
        k = int(np.searchsorted(prefix, budget * total, side="right"))
        assert n_runs in (k, prev + 1) and n_runs >= prev
        assert spent == pytest.approx(prefix[n_runs - 1])
        assert spent <= budget * total * (1 + 1e-12) or n_runs == prev + 1
        prev = n_runs


def test_executor_gives_the_serial_result_and_the_job_is_picklable(task):
    class Executor:
        def __init__(self):
            self.calls = 0

        def map(self, fn, items):
            items = list(items)
            self.calls += len(items)
            return [fn(pickle.loads(pickle.dumps(i))) for i in items]

    ex = Executor()
    serial = bs.design.run(task, method="random", seeds=[0, 1])
    mapped = bs.design.run(task, method="random", seeds=[0, 1], executor=ex)
    assert ex.calls == 2
    pd.testing.assert_frame_equal(serial.drop(columns="seconds"), mapped.drop(columns="seconds"))
    assert list(serial.columns) == ["seed", "budget", "n_runs", "cost_spent", "r2_protocol",
                                    "r2_posterior", "coverage90", "seconds"]
    assert pickle.loads(pickle.dumps(bs.design.seed_job)) is bs.design.seed_job


def test_bayes_recovers_the_target_region(task):
    res = bs.design.run(task, method="bayes", seeds=[0], batch=2)
    last = res.iloc[-1]
    assert last.r2_protocol > 0.9
    assert last.r2_posterior > 0.9
    assert last.cost_spent <= 0.5 * task.costs(task.train).sum() * (1 + 1e-12)


def test_posterior_intervals_cover_fresh_rows_of_the_known_law():
    noise = 0.01
    df = _table([1e7, 2e7, 4e7, 8e7], [4, 10, 25, 60], noise=noise)
    group = bs.design.Task(name="c", train=df, test=df, law=LAW).groups()[0]
    x = group.x
    starts = fitting.least_squares(LAW, x, group.y, fitting.uniform_starts(
        LAW, 32, np.random.default_rng(0)))
    post = bs.design.LaplaceMixture.from_starts(LAW, group, np.arange(len(df)), starts)
    fresh = _table([1.5e7, 3e7, 6e7], [6, 15, 40], noise=noise, seed=7)
    xf = {v: fresh[LAW.column(v)].to_numpy() for v in LAW.variables}
    lo, hi = post.quantiles(xf, (0.05, 0.95), n=2000)
    inside = np.mean((fresh["loss"] >= lo) & (fresh["loss"] <= hi))
    assert 0.65 <= inside <= 1.0
    assert post.sigma2 == pytest.approx(noise ** 2, rel=1.0)


def test_greedy_batch_conditions_on_each_pick():
    # targets t0, t1; candidates c0 (informs t0, cheap), c1 (a copy of c0), c2 (informs t1)
    v = np.array([[1.0, 0.0, 0.9, 0.9, 0.0],
                  [0.0, 1.0, 0.0, 0.0, 0.8],
                  [0.9, 0.0, 1.0, 1.0, 0.0],
                  [0.9, 0.0, 1.0, 1.0, 0.0],
                  [0.0, 0.8, 0.0, 0.0, 1.0]])
    cost = np.array([1.0, 1.0, 1.0])
    picked = greedy_linear(v, 2, 0.01, cost, 10.0, max_picks=2)[0]
    assert picked[0] in (0, 1) and picked[1] == 2  # the copy of the first pick adds nothing
    assert greedy_linear(v, 2, 0.01, cost, 0.5, max_picks=1)[0] == []  # nothing affordable


def test_bad_tasks_fail_with_the_column_rows_and_fix(task):
    with pytest.raises(DataError, match="tokens"):
        bs.design.Task(name="x", train=task.train.drop(columns="tokens"), test=task.test, law=LAW)
    bad = task.train.copy()
    bad.loc[3, "params"] = -1.0
    with pytest.raises(DataError, match=r"\[3\]"):
        bs.design.Task(name="x", train=bad, test=task.test, law=LAW)
    with pytest.raises(DataError, match="budgets"):
        bs.design.Task(name="x", train=task.train, test=task.test, law=LAW, budgets=(0.1, 0.05))
    with pytest.raises(BayesScalingError, match="unknown method"):
        bs.design.run(task, method="oracle")
    with pytest.raises(BayesScalingError, match=r"takes no options \['seed'\].*seeds=\[0, 1\]"):
        bs.design.run(task, method="bayes", seed=0)


def test_groups_are_fitted_separately_and_a_test_group_needs_a_pool():
    a = _table([1e7, 3e7, 1e8], [5, 20, 80]).assign(g="a")
    b = _table([1e7, 3e7, 1e8], [5, 20, 80]).assign(g="b")
    b["loss"] += 0.5  # a different curve: one fit of both could not match either
    t = bs.design.Task(name="g", train=pd.concat([a, b]), test=pd.concat([a, b]), law=LAW,
                       group="g", budgets=(1.0,))
    assert [g.name for g in t.groups()] == ["a", "b"]
    res = bs.design.run(t, method="cheapest", seeds=[0])
    assert res.r2_protocol.iloc[0] > 0.99 and res.n_runs.iloc[0] == len(a) + len(b)
    with pytest.raises(DataError, match="no train rows"):
        bs.design.Task(name="g", train=a, test=pd.concat([a, b]), law=LAW, group="g").groups()


def test_scalebench_task_reads_the_benchmark_folder():
    folder = bs.scalebench.data_dir()
    if not folder.is_dir():
        pytest.skip(f"ScaleBench folder {folder} absent (set {bs.scalebench.ENV_VAR})")
    t = bs.design.scalebench_task("parallel_scaling_law", "sl_9")
    assert t.group == "group" and t.target == "loss" and len(t.groups()) == 2
    g = t.groups()[0]
    np.testing.assert_allclose(g.cost, g.x["N"])
    v = bs.design.scalebench_task("vocab_scaling_law", "sl_1")
    assert v.group is None and v.target == "unigram_normalized_loss"
    np.testing.assert_allclose(v.groups()[0].cost, v.train.non_vocab_parameters
                               * v.train.num_characters)


def test_joint_covariance_of_one_mode_is_the_delta_method():
    df = _table([1e7, 3e7, 1e8], [5, 20, 80], noise=0.002)
    group = bs.design.Task(name="c", train=df, test=df, law=LAW).groups()[0]
    starts = fitting.least_squares(LAW, group.x, group.y, fitting.uniform_starts(
        LAW, 16, np.random.default_rng(0)))
    post = bs.design.LaplaceMixture.from_starts(LAW, group, np.arange(len(df)), starts,
                                                discrepancy=1e-12)
    post.u, post.cov, post.weights = post.u[:1], post.cov[:1], np.ones(1)
    C = post.joint_cov(group.x)
    _, J = fitting.jacobian_u(LAW)(jnp.asarray(post.u[0]), group.x)
    np.testing.assert_allclose(C, np.asarray(J) @ post.cov[0] @ np.asarray(J).T, rtol=1e-6,
                               atol=1e-9 * np.abs(C).max())


def test_design_command_runs_a_task_folder_and_writes_the_table(tmp_path, capsys):
    folder = bs.scalebench.data_dir() / "parallel_scaling_law"
    if not folder.is_dir():
        pytest.skip(f"ScaleBench folder {folder} absent (set {bs.scalebench.ENV_VAR})")
    out = tmp_path / "table.csv"
    rc = bs.cli.main(["design", str(folder), "--laws", "sl_9", "--methods", "cheapest",
                      "--seeds", "1", "--budgets", "0.1", "--out", str(out)])
    table = pd.read_csv(out)
    assert rc == 0 and len(table) == 1
    assert table.loc[0, ["task", "law", "method"]].tolist() == [
        "parallel_scaling_law", "sl_9", "cheapest"]
    assert table.loc[0, "r2_protocol"] > 0.9  # the ten cheapest runs pin this 3-parameter law
    assert "r2_protocol" in capsys.readouterr().out


@pytest.mark.parametrize("n", [None, 40])
def test_bayes_refits_from_its_number_of_starts(task, monkeypatch, n):
    from bayes_scaling.design import methods

    seen = []

    def recording(law, x, y, theta0, **kw):
        seen.append(len(theta0))
        return fitting.least_squares(law, x, y, theta0, **kw)

    monkeypatch.setattr(methods, "least_squares", recording)
    options = {} if n is None else {"refit_starts": n}
    bs.design.run(task, method="bayes", seeds=[0], batch=2, **options)
    want = methods.REFIT_STARTS if n is None else n
    assert len(seen) >= 2 and set(seen) == {want}
    with pytest.raises(BayesScalingError, match="refit_starts must be at least 2"):
        methods.make("bayes", refit_starts=1)
