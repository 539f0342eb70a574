"""The posterior suite's own logic (benchmarks/posteriors.py): its cases, the MCSE distance and
the coverage it reports, and resuming from its results file. No posterior is fitted here."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from conftest import process_running

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "posteriors.py"


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("posterior_suite", PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def cases(suite):
    return suite.cases()


def test_every_registered_law_and_every_scalebench_law_is_a_case(suite, cases):
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    laws = {c.law_name for c in cases if not c.skip}
    # the package's own laws (other tests register laws of their own in the same process)
    packaged = {n for n in bs.laws.names()
                if bs.laws.get(n).fn.__module__.startswith("bayes_scaling.")}
    assert len(packaged) >= 10
    missing = packaged - laws
    assert not missing, f"registered laws with no case: {sorted(missing)}"
    scalebench = {f"{t}/{i}" for t in bs.scalebench.TASKS for i in bs.scalebench.task_laws(t)}
    assert len(scalebench) == 31
    assert scalebench <= {c.law_name for c in cases}
    # a case is either runnable or says why not
    assert all((c.build is None) == bool(c.skip) for c in cases)
    # simulated tables come first, each family before any second replicate
    kinds = [c.kind for c in cases]
    first_other = next(i for i, k in enumerate(kinds) if k != "simulated")
    assert first_other >= 2 * len(suite.SIM_LAWS) >= 8


def test_user_cases_are_laws_the_engine_was_never_told_about(suite, cases):
    """The user/ cases stand for laws a user brings: none is registered, and none declares
    structure the sampler could use (linear coefficients, coordinate blocks, prior references)."""
    user = [c for c in cases if c.kind == "user"]
    assert len(user) == (len(suite.USER_LAWS) * len(suite.USER_TABLES) + len(suite.OWN_TABLES)
                         + len(suite.SIMULATED_LAWS) + 1)
    assert len(user) >= 21 and {c.law_name for c in user} >= {"user_mixing"}
    registered = set(bs.laws.names())
    for c in user:
        law = c.law()
        assert law.name not in registered, law.name
        assert not law.linear and not law.coordinates and not law.prior_references, law.name


def test_selection_by_pattern_and_count(suite, cases):
    chosen = suite.select(cases, only=r"^sim/chinchilla/", max_cases=None)
    assert [c.name for c in chosen] == [f"sim/chinchilla/r{k}" for k in range(4)]
    assert len(suite.select(cases, only="scalebench", max_cases=3)) == 3


def test_simulated_table_follows_the_truth(suite):
    law = bs.laws.get("chinchilla")
    design = suite.epoch().iloc[:200]
    table = suite.simulate(law, design, law.example, 0.01, seed=0)
    r = np.log(table["loss"].to_numpy() / np.asarray(law(law.example, design)))
    assert abs(np.mean(r)) < 3 * 0.01 / np.sqrt(len(r)) * 1.5
    assert 0.7 * 0.01 < np.std(r) < 1.3 * 0.01
    again = suite.simulate(law, design, law.example, 0.01, seed=0)
    assert np.array_equal(table["loss"], again["loss"])


def test_simulated_truths_are_prior_draws_that_make_a_loss_table(suite):
    law = bs.laws.get("chinchilla")
    design = suite.epoch().iloc[:60]
    truths = [suite.prior_truth(law, design, seed)[0] for seed in range(40)]
    lo, hi = suite.SIM_LOSS_RANGE
    for t in truths:
        assert set(t) == {*law.param_names, "sigma"}
        mean = np.asarray(law({n: t[n] for n in law.param_names}, design))
        assert np.all((mean >= lo) & (mean <= hi))
    # the draws follow the default prior: log sigma ~ N(log 0.01, 1.4) inside its init range
    log_sigma = np.log([t["sigma"] for t in truths])
    m, s = bs.bayes.priors.prior_loc_scale(bs.bayes.SCALE)
    assert abs(log_sigma.mean() - m) < 3 * s / np.sqrt(len(truths))
    assert 0.6 * s < log_sigma.std() < 1.4 * s
    # seeded, and a different seed is another draw
    assert suite.prior_truth(law, design, 7) == suite.prior_truth(law, design, 7)
    assert truths[0] != truths[1]


def test_value_rows_are_the_largest_row_and_its_tenfold(suite):
    law = bs.laws.get("dcpt")
    t = pd.DataFrame(dict(N=[1e6, 4e6, 2e6], D=[1e9, 5e8, 3e9], replay=[0.1, 0.5, 0.25],
                          loss=[3.0, 2.9, 2.8]))
    rows = suite.value_rows(law, t)
    assert list(rows.index) == ["largest", "x10"]
    assert rows.loc["largest", "N"] == 2e6 and rows.loc["largest", "D"] == 3e9
    assert rows.loc["x10", "N"] == 2e7 and rows.loc["x10", "D"] == 3e10
    assert rows.loc["x10", "replay"] == 0.25  # a fraction is not a size


def test_mcse_distance_known_answers(suite):
    d = suite.mcse_distance
    assert d(dict(mean=1.0, mcse=0.3), dict(mean=0.5, mcse=0.4)) == pytest.approx(1.0)
    assert d(dict(mean=2.0, mcse=0.0), dict(mean=2.0, mcse=0.0)) == 0.0
    assert d(dict(mean=2.0, mcse=0.0), dict(mean=2.1, mcse=0.0)) == float("inf")
    assert np.isnan(d(dict(mean=np.nan, mcse=0.1), dict(mean=1.0, mcse=0.1)))


def test_mcse_of_independent_draws_and_distance_of_two_runs(suite):
    rng = np.random.default_rng(0)
    n_chains, n_draws, sd = 4, 500, 2.0
    s = suite.draw_summary(rng.normal(1.0, sd, (n_chains, n_draws)))
    # independent draws: MCSE of the mean = sd / sqrt(n)
    assert s["mcse"] == pytest.approx(sd / np.sqrt(n_chains * n_draws), rel=0.15)
    assert s["q05"] < s["q50"] < s["q95"]
    assert s["q95"] - s["q05"] == pytest.approx(2 * 1.6449 * sd, rel=0.1)
    # two runs on the same distribution: z is |N(0, 1)|, within 3 about 99.7% of the time
    z = [suite.mcse_distance(suite.draw_summary(rng.normal(0, 1, (2, 300))),
                             suite.draw_summary(rng.normal(0, 1, (2, 300)))) for _ in range(100)]
    assert np.mean(np.array(z) <= 3) >= 0.96
    assert 0.5 < np.median(z) < 0.9  # the median of |N(0, 1)| is 0.674
    # a run off by ten MCSEs of the difference is flagged
    a = suite.draw_summary(rng.normal(0, 1, (4, 500)))
    b = dict(a, mean=a["mean"] + 10 * np.hypot(a["mcse"], a["mcse"]))
    assert suite.mcse_distance(b, a) == pytest.approx(10.0)
    assert suite.mcse_distance(b, a) > suite.MCSE_Z


def test_coverage_of_a_conjugate_posterior_is_its_level(suite):
    """theta ~ N(0, 1), y ~ N(theta, 1): the posterior N(y/2, 1/2)'s 90% intervals cover the
    true theta 90% of the time."""
    rng = np.random.default_rng(1)
    hits = []
    for _ in range(300):
        theta = rng.normal()
        y = rng.normal(theta, 1.0)
        draws = rng.normal(y / 2, np.sqrt(0.5), (2, 500))
        hits.append(suite.coverage({"theta": suite.draw_summary(draws)}, {"theta": theta})["theta"])
    assert abs(np.mean(hits) - 0.9) < 3 * np.sqrt(0.09 / 300)
    # the interval is the stored 5%..95% quantiles; only parameters with a true value count
    params = {"a": dict(q05=0.0, q95=1.0), "b": dict(q05=0.0, q95=1.0), "c": dict(q05=0, q95=1)}
    assert suite.coverage(params, {"a": 0.5, "b": 1.5}) == {"a": True, "b": False}
    with pytest.raises(ValueError, match="0.9"):
        suite.coverage(params, {"a": 0.5}, level=0.5)


def _line(case, role, seed, **kw):
    line = dict(case=case, role=role, seed=seed, status=kw.pop("status", "converged"), **kw)
    if case.startswith("sim/"):  # as append() writes it
        line.setdefault("sim_truth", "prior")
    return line


def test_resume_skips_finished_lines(suite, cases, tmp_path):
    path = tmp_path / "results.jsonl"
    case = next(c for c in cases if c.name == "sim/chinchilla/r0")
    recs = [_line(case.name, "reference", suite.REFERENCE_SEED, status="ok", engine="a"),
            _line(case.name, "default", 0, engine="a"),
            _line(case.name, "default", 2, status="timeout", engine="a")]
    # a line of the same simulated case under an older choice of its truth is not read
    stale = _line(case.name, "default", 1, sim_truth="example")
    path.write_text("".join(json.dumps(r) + "\n" for r in [stale, *recs]) + '{"case": "cut off')
    records = suite.read_results(path)
    assert len(records) == 3  # the cut line is ignored: its job runs again
    assert suite.pending(case, "reference", records) == []
    assert suite.pending(case, "default", records) == [1]
    # rerunning the default engine: every seed not measured at this commit
    assert suite.pending(case, "default", records, redo_engine="b") == [0, 1, 2]
    assert suite.pending(case, "default", records, redo_engine="a") == [1]
    skipped = next(c for c in cases if c.skip)
    assert suite.pending(skipped, "default", []) == [0, 1, 2]  # the driver never runs it

    calls = []
    suite_run = suite.run_subprocess
    try:
        suite.run_subprocess = lambda c, role, seeds, cap, p, cpu_cap=None: calls.append(
            (c.name, role, seeds))
        suite.main(["--only", "^sim/chinchilla/r0$", "--results", str(path),
                    "--summary", str(tmp_path / "summary.md")])
    finally:
        suite.run_subprocess = suite_run
    assert calls == [("sim/chinchilla/r0", "default", [1])]
    assert (tmp_path / "summary.md").read_text().startswith("# Posterior suite")


def test_the_summary_compares_with_the_latest_lines(suite):
    ref = dict(params={"a": dict(mean=1.0, mcse=0.01), "b": dict(mean=2.0, mcse=0.01)}, values={})
    close = dict(params={"a": dict(mean=1.02, mcse=0.01), "b": dict(mean=2.0, mcse=0.01)},
                 values={})
    far = dict(params={"a": dict(mean=1.2, mcse=0.01), "b": dict(mean=2.0, mcse=0.01)},
               values={})
    records = [_line("x", "reference", 9, status="ok", **ref),
               _line("x", "default", 0, seconds=4.0, **far),
               _line("x", "default", 0, seconds=6.0, **close),   # the rerun replaces it
               _line("x", "default", 1, status="not converged", seconds=8.0, **close,
                     covered={"a": True, "b": False}),
               _line("y", "reference", 9, status="no reference", **ref),
               _line("y", "default", 0, seconds=2.0, **far)]
    cmp = suite.compare(records)
    t = suite.totals(cmp)
    assert t["runs"] == 3 and t["converged"] == 2
    # x: both seeds have a within 3 MCSE (z = 1.41) and b (z = 0); y has no reference
    assert (t["params"], t["within"]) == (4, 4)
    assert (t["truth"], t["covered"]) == (2, 1)
    assert t["median_seconds"] == 6.0
    x0 = cmp[(cmp["case"] == "x") & (cmp["seed"] == 0)].iloc[0]
    assert x0["max_z"] == pytest.approx(0.02 / np.hypot(0.01, 0.01))


def test_a_run_over_its_cpu_cap_is_recorded_as_a_timeout(suite, cases, tmp_path):
    """The worker is stopped by the kernel past its CPU seconds (here 1: it cannot even import
    the package) and the driver writes the line the worker could not."""
    path = tmp_path / "results.jsonl"
    case = next(c for c in cases if c.name == "sim/chinchilla/r0")
    how = suite.run_subprocess(case, "reference", [suite.REFERENCE_SEED], 600, path, cpu_cap=1)
    assert how == "cpu cap"
    (rec,) = suite.read_results(path)
    assert rec["status"] == "timeout" and "1 CPU-second cap" in rec["error"]
    assert suite.pending(case, "reference", [rec]) == []  # not retried


def test_a_default_run_over_its_wall_clock_cap_is_recorded(suite, cases, tmp_path):
    path = tmp_path / "results.jsonl"
    case = next(c for c in cases if c.name == "sim/chinchilla/r0")
    how = suite.run_subprocess(case, "default", [0, 1], 0.5, path)
    assert how == "timeout"
    recs = suite.read_results(path)
    assert [(r["seed"], r["status"]) for r in recs] == [(0, "timeout"), (1, "timeout")]
    assert "wall-clock cap" in recs[0]["error"]


def test_paired_compares_each_run_with_the_engine_before_it(suite):
    def rec(case, seed, engine, status, seconds):
        return dict(case=case, role="default", seed=seed, engine=engine, status=status,
                    seconds=seconds)

    records = [rec("a", 0, "old", "converged", 10.0), rec("a", 1, "old", "not converged", 40.0),
               rec("b", 0, "older", "converged", 8.0), rec("b", 0, "old", "converged", 20.0),
               rec("a", 0, "new", "converged", 5.0), rec("a", 1, "new", "converged", 10.0),
               rec("b", 0, "new", "converged", 30.0), rec("b", 0, "newer", "converged", 1.0),
               rec("c", 0, "new", "converged", 3.0)]  # c: nothing before it, left out
    text = suite.paired(records, "new")
    assert "| a | 1/2 | 2/2 | 10, 40 | 5, 10 |" in text
    assert "| b | 1/1 | 1/1 | 20 | 30 |" in text and "| c |" not in text
    assert "Converged: 2/3 before, 3/3 after" in text
    assert "median paired ratio 0.50, faster in 2 of 3" in text


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_a_stopped_driver_stops_its_worker(tmp_path):
    """SIGTERM to the driver (what `kill` sends) ends its worker too, which runs in a process
    group of its own and would otherwise go on fitting with nobody to read its result."""
    import os
    import signal
    import subprocess
    import time

    driver = subprocess.Popen(
        [sys.executable, str(PATH), "--only", "^sim/chinchilla/r0$", "--roles", "default",
         "--results", str(tmp_path / "r.jsonl"), "--summary", str(tmp_path / "s.md")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = Path(f"/proc/{driver.pid}/task/{driver.pid}/children")
    worker, t0 = None, time.monotonic()
    while worker is None and driver.poll() is None and time.monotonic() - t0 < 120:
        kids = children.read_text().split() if children.exists() else []
        worker = int(kids[0]) if kids else None
        time.sleep(0.1)
    try:
        assert worker is not None, "the driver started no worker"
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=60) == 128 + signal.SIGTERM
        assert not process_running(worker)
    finally:
        driver.kill()
        if worker is not None and process_running(worker):
            os.kill(worker, signal.SIGKILL)
