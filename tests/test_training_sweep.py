"""End-to-end micro-sweep on the text sample in tests/data: pre-training stages, annealed stage
checkpoints, continual pre-training with replay, rows in the store, and kill-and-resume."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from scaleout import get_executor
from training import kinds, sweep
from training.cli import main as training_main
from training.config import ConfigError
from training.loop import WSD, Batches, Mixture, branch_start
from training.store import Store, export
from training.tables import PTPP

ROOT = Path(__file__).resolve().parents[1]
MICRO = ROOT / "training" / "configs" / "micro.toml"
DATA = ROOT / "tests" / "data"


def _micro_config(tmp_path: Path, checkpoint_every: int = 3) -> Path:
    text = MICRO.read_text().replace('corpus = "tests/data"', f'corpus = "{DATA.as_posix()}"')
    text = text.replace("checkpoint_every = 3", f"checkpoint_every = {checkpoint_every}")
    cfg = tmp_path / "micro.toml"
    cfg.write_text(text)
    return cfg


def _expected_rows(cfg: dict) -> int:
    jobs = sweep.plan(cfg)
    return sum(2 if j["kind"] == "pre" else 2 * len(j["branches"]) for j in jobs)


def _sweep_cmd(cfg: Path, out: Path) -> list[str]:
    """The CLI with two worker processes (the pool backend)."""
    return [sys.executable, "-m", "training", "sweep", str(cfg), "--out-dir", str(out),
            "--workers", "2"]


def test_wsd_schedule_and_cooldown():
    lr = WSD(peak=1.0, warmup=4)
    assert lr(0) == pytest.approx(0.25) and lr(3) == 1.0 and lr(1000) == 1.0
    branch = lr.cooldown(start=8, steps=2)
    assert branch(7) == 1.0 and branch(8) == pytest.approx(0.5) and branch(9) == 0.0
    assert branch_start(10, 0.2) == 8 and branch_start(2, 0.2) == 1


def test_batches_are_pure_and_follow_the_mixture():
    rng = np.random.default_rng(0)
    corpora = {"a": rng.integers(0, 128, 5000).astype(np.uint8),  # corpus told apart by value
               "b": rng.integers(128, 256, 5000).astype(np.uint8)}
    b = Batches(corpora, batch_size=8, context=16, seed=3, stream=7)
    w = Mixture.constant({"a": 0.25, "b": 0.75})(0)
    x1, y1 = b(5, w)
    x2, _ = b(5, w)
    assert torch.equal(x1, x2) and torch.equal(y1[:, :-1], x1[:, 1:])
    assert not torch.equal(x1, b(6, w)[0])
    # over 100 steps (800 sequences) the share of corpus "a" is 25% to within 1%
    share = np.mean([(b(s, w)[0][:, 0] < 128).float().mean().item() for s in range(100)])
    assert abs(share - 0.25) < 0.01


def test_bad_config_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(MICRO.read_text().replace("replay = [0.25, 0.5]", "replay = [0.0, 1.5]"))
    with pytest.raises(ConfigError, match="replay"):
        sweep.load_config(bad)
    bad.write_text("bogus = 1\n" + MICRO.read_text())
    with pytest.raises(ConfigError, match="unknown keys"):
        sweep.load_config(bad)


def test_missing_corpus_directory_is_one_error_line(tmp_path, capsys):
    """A config whose corpus folder does not exist stops before any job, with one line and
    exit 2, not a traceback."""
    cfg = tmp_path / "micro.toml"
    cfg.write_text(MICRO.read_text().replace('corpus = "tests/data"',
                                             f'corpus = "{(tmp_path / "nope").as_posix()}"'))
    assert training_main(["sweep", str(cfg), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nope" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.pt"))


def test_micro_sweep_end_to_end_and_resume(tmp_path):
    cfg_path = _micro_config(tmp_path)
    cfg = sweep.load_config(cfg_path)
    n_rows = _expected_rows(cfg)

    # reference: an uninterrupted run, in this process
    ref_out = tmp_path / "ref"
    sweep.run_sweep(cfg_path, workers=1, out_dir=str(ref_out), progress=False)
    ref = Store(ref_out / "results.sqlite").frame()
    assert len(ref) == n_rows and ref["run_id"].notna().all()
    assert (ref["loss"] > 0).all() and np.isfinite(ref["loss"]).all()
    pre = ref[ref.D == 0]
    assert set(pre.domain) == {"source", "target"} and pre.replay.isna().all()
    assert (ref_out / "ckpt" / "pre-t2-seed0-p8.pt").exists()  # annealed stage checkpoint
    cpt = ref[ref.D > 0]
    assert set(cpt.replay) == {0.25, 0.5} and (cpt.atpp == cpt.D / cpt.N_nonemb).all()

    # interrupted run (CLI, worker pool): kill the process group once rows exist, then resume
    out = tmp_path / "killed"
    proc = subprocess.Popen(_sweep_cmd(cfg_path, out), cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = out / "results.sqlite"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with sqlite3.connect(db) as con:
                if con.execute("SELECT COUNT(*) FROM rows").fetchone()[0] >= 6:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = len(Store(db).frame())
    assert 0 < partial < n_rows, "the kill should land mid-sweep"

    sweep.run_sweep(cfg_path, workers=1, out_dir=str(out), progress=False)
    got = Store(db).frame()
    assert len(got) == n_rows
    key = ["run_id", "D", "domain"]
    assert not got.duplicated(key).any()
    merged = ref.merge(got, on=key, suffixes=("_ref", "_got"))
    assert len(merged) == n_rows
    # a run is a pure function of config and seed: resumed losses match the uninterrupted ones
    np.testing.assert_allclose(merged.loss_got, merged.loss_ref, rtol=1e-4)

    # a second restart has nothing to do and adds nothing
    sweep.run_sweep(cfg_path, workers=1, out_dir=str(out), progress=False)
    assert len(Store(db).frame()) == n_rows

    csv = tmp_path / "table.csv"
    assert export(db, csv) == n_rows
    table = pd.read_csv(csv)
    assert list(table.columns[:8]) == PTPP


def test_store_refuses_changed_jobs_but_allows_a_trimmed_grid(tmp_path):
    cfg = sweep.load_config(_micro_config(tmp_path))
    store = Store(tmp_path / "s.sqlite")
    store.claim(sweep.plan(cfg))
    trimmed = {**cfg, "sizes": {"t1": cfg["sizes"]["t1"]}}
    store.claim(sweep.plan(trimmed))  # same settings for the remaining jobs: fine
    with pytest.raises(ConfigError, match="different settings"):
        store.claim(sweep.plan({**cfg, "batch_size": 8}))


def test_execute_runs_each_job_after_its_deps_and_reports_failures():
    """The seam to workers: ``execute(pending, run_one, executor)`` starts a job only once its deps
    are finished (in ``finished`` or run here), calls ``on_done`` per job, re-raises a job's error
    and refuses jobs whose deps can never finish."""
    jobs = [{"id": "c", "deps": ["a", "b"]}, {"id": "b", "deps": ["a"]}, {"id": "a", "deps": []},
            {"id": "d", "deps": ["z"]}]
    ran, done = [], []

    def run_one(job):
        ran.append(job["id"])
        return job["id"]

    sweep.execute(jobs[:3], run_one, get_executor("serial"), on_done=lambda j: done.append(j))
    assert ran == ["a", "b", "c"] and [j["id"] for j in done] == ran
    ran.clear()
    sweep.execute(jobs[3:], run_one, get_executor("serial"), finished={"z"})
    assert ran == ["d"]
    with pytest.raises(RuntimeError, match=r"\['d'\] wait on unfinished deps"):
        sweep.execute(jobs[3:], run_one, get_executor("serial"))

    def fail(job):
        raise ValueError(f"job {job['id']} broke")

    with pytest.raises(ValueError, match="job a broke"):
        sweep.execute(jobs[2:3], fail, get_executor("serial"))


def test_every_planned_job_kind_is_registered():
    """Each config's family (by its section) plans only registered job kinds."""
    for name, family, job_kinds in (("micro", "pretrain", {"pre", "cpt"}),
                                    ("ptpp", "pretrain", {"pre", "cpt"}),
                                    ("m3_micro", "m3", {"m3"}), ("m3", "m3", {"m3"})):
        cfg = sweep.load_config(ROOT / "training" / "configs" / f"{name}.toml")
        assert kinds.family(cfg).section == family
        assert {j["kind"] for j in sweep.plan(cfg)} == job_kinds <= set(kinds.JOB_KINDS)
