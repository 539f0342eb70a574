"""The micro training sweep on every executor: the same rows (timing aside) from this process, a
local pool and a local Ray cluster; `bayes-scaling train --executor ray --out-dir` works, and a
driver killed mid-sweep resumes without losing or duplicating a finished run."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
ray = pytest.importorskip("ray")

from training import sweep
from training.store import Store

ROOT = Path(__file__).resolve().parents[1]
KEY = ["run_id", "D", "domain"]


def micro_config(tmp_path: Path) -> Path:
    """training/configs/micro.toml reading the text sample by absolute path."""
    text = (ROOT / "training" / "configs" / "micro.toml").read_text()
    cfg = tmp_path / "micro.toml"
    cfg.write_text(text.replace('corpus = "tests/data"',
                                f'corpus = "{(ROOT / "tests" / "data").as_posix()}"'))
    return cfg


def rows(out: Path) -> pd.DataFrame:
    """The store's rows without the timing column, in a fixed order."""
    df = Store(out / "results.sqlite").frame().drop(columns="wall_seconds")
    return df.sort_values(KEY).reset_index(drop=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted serial run: its config and rows."""
    tmp = tmp_path_factory.mktemp("ref")
    cfg = micro_config(tmp)
    sweep.run_sweep(cfg, workers=1, out_dir=str(tmp / "out"), progress=False)
    return cfg, rows(tmp / "out")


def same_rows(got: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert not got.duplicated(KEY).any()
    # a run is a pure function of config and seed; thread counts change float sums in the last bits
    pd.testing.assert_frame_equal(got, ref, check_exact=False, rtol=1e-4)


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_same_rows_whichever_executor(executor, reference, tmp_path, request):
    if executor == "ray":
        request.getfixturevalue("ray_cluster")
    cfg, ref = reference
    assert len(ref) > 0
    sweep.run_sweep(cfg, workers=2, out_dir=str(tmp_path / "out"), executor=executor,
                    progress=False)
    same_rows(rows(tmp_path / "out"), ref)


def test_killed_ray_driver_resumes(reference, tmp_path, ray_cluster):
    cfg, ref = reference
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bayes_scaling.cli", "train", str(cfg), "--executor", "ray",
           "--out-dir", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    db = out / "results.sqlite"
    done = 0
    for _ in range(3000):  # until a job has finished (the driver starts its own cluster first)
        try:
            with sqlite3.connect(db) as con:
                done = con.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
        except sqlite3.Error:
            pass
        if done or proc.poll() is not None:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    err = proc.communicate()[1].decode()
    assert proc.returncode == -signal.SIGKILL, err
    before = Store(db).finished()
    n_jobs = len(sweep.plan(sweep.load_config(cfg)))
    assert 0 < len(before) < n_jobs, "the kill should land mid-sweep"
    kept = rows(out)

    sweep.run_sweep(cfg, out_dir=str(out), executor="ray", progress=False)
    got = rows(out)
    same_rows(got, ref)
    # every row recorded before the kill is still there, unchanged
    pd.testing.assert_frame_equal(kept, got.merge(kept[KEY], on=KEY)[kept.columns],
                                  check_dtype=False)
    assert set(before) <= set(Store(db).finished())
