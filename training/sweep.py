"""A sweep: a grid of runs from a TOML file, a results store, resumable execution.

The config's family (``training.kinds``: PTPP pre-training and continual pre-training in
``training.pretrain``, M3 runs in ``training.m3``) plans the jobs; each job is a pure function of
its spec, run by its job kind, and appends its evaluations to the SQLite store
(``training.store``), so a killed sweep, restarted with the same command, skips recorded
evaluations and resumes unfinished jobs from their last trunk checkpoint.

Execution goes through one seam, :func:`execute`: the pending jobs, a callable that runs one job,
and a ``scaleout`` executor: this process (``--workers 1``), a pool of local worker processes
(``--workers N``) or a Ray cluster (``--executor ray``), whose nodes share the filesystem that
holds the store and the checkpoints. A job whose worker process dies is run again (it resumes
from its checkpoint; rows already recorded are not written twice).
"""
from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm import tqdm

from scaleout import get_executor

from . import corpora
from .config import ConfigError, read_toml
from .kinds import family, job_kind
from .store import Store


def load_config(path: str | Path, out_dir: str | None = None) -> dict:
    """Read and validate a sweep TOML file; ``out_dir`` overrides the file's ``out_dir``."""
    raw = read_toml(path)
    return family(raw).load_config(Path(path), raw, out_dir)


def plan(cfg: dict) -> list[dict]:
    """All job specs of a validated config, in execution order (its family's planner)."""
    return family(cfg).plan(cfg)


def job_tokens(spec: dict) -> int:
    """Training tokens a job processes (trunk plus cooldown branches), for progress and ETA."""
    return job_kind(spec).tokens(spec)


def run_job(spec: dict, store_path: str, ckpt_dir: str) -> str:
    """Run one job to completion (resuming from its checkpoint) and record its rows."""
    return job_kind(spec).run(spec, store_path, ckpt_dir)


# ----------------------------------------------------------------------------- execution

def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def executor_for(workers: int = 1, executor=None, ray_address: str | None = None):
    """The executor that runs a sweep's jobs: ``executor`` (``"serial"``, ``"local"``, ``"ray"``
    or an object with ``map``) or, by default, this process for ``workers == 1`` and otherwise a
    pool of ``workers`` local processes splitting the CPU cores between them. ``ray_address``
    (``"auto"``) joins a running Ray cluster; without it ``"ray"`` starts a local one."""
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    executor = executor or ("serial" if workers == 1 else "local")
    if executor == "local":
        threads = max(1, (os.cpu_count() or 1) // workers)
        return get_executor("local", workers=workers, initializer=_init_worker,
                            initargs=(threads,))
    return get_executor(executor, address=ray_address)


def execute(pending: list[dict], run_one: Callable[[dict], str], executor,
            finished: set[str] | None = None,
            on_done: Callable[[dict], None] = lambda job: None) -> None:
    """Run every job of ``pending`` on ``executor`` (a ``scaleout`` executor), each once the jobs
    of its ``deps`` are finished (in ``finished`` or run here): in waves, each wave every job whose
    deps are done, in list order. ``run_one(job)`` must be picklable for process and cluster
    executors; a job's failure is raised here. ``on_done(job)`` is called after each job. The
    executor is closed on return (also on Ctrl-C, which stops its workers)."""
    finished = set(finished or ())
    todo = list(pending)
    with executor:
        while todo:
            ready = [j for j in todo if all(d in finished for d in j["deps"])]
            if not ready:
                raise RuntimeError(f"jobs {[j['id'] for j in todo]} wait on unfinished deps")
            for i, _ in executor.submit_iter(run_one, ready):
                finished.add(ready[i]["id"])
                on_done(ready[i])
            todo = [j for j in todo if j["id"] not in finished]


# ----------------------------------------------------------------------------- driver

def run_sweep(config: str | Path, workers: int = 1, out_dir: str | None = None,
              executor=None, progress: bool = True, ray_address: str | None = None) -> Path:
    """Run (or resume) the sweep of a config; returns the results store path. ``executor`` and
    ``ray_address``: see :func:`executor_for`. On a cluster ``out_dir`` must be a path every node
    reads and writes (the store and the checkpoints live there)."""
    cfg = load_config(config, out_dir)
    fam = family(cfg)
    out = Path(cfg["out_dir"])
    store_path = out / "results.sqlite"
    store = Store(store_path)
    (out / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n")
    data = corpora.load(cfg["corpus"])  # fetch / verify once, before any worker starts
    jobs = fam.plan(cfg)
    if fam.check_corpora is not None:
        fam.check_corpora(jobs, data)
    store.set_meta("table", fam.table)
    store.claim(jobs)
    finished = set(store.finished())
    executor = executor_for(workers, executor, ray_address)
    total = sum(job_tokens(j) for j in jobs)
    bar = tqdm(total=total, initial=min(total, store.progress()), unit="tok", unit_scale=True,
               disable=not progress, mininterval=1 if sys.stderr.isatty() else 60,
               desc=cfg["name"], smoothing=0.05)

    def on_done(job):
        if job is not None:
            bar.write(f"{time.strftime('%H:%M:%S')} done {job['id']}")
        bar.update(max(0, min(total, store.progress()) - bar.n))

    ticking = threading.Event()

    def tick():  # progress of running jobs (they record it in the store every 5 s)
        while not ticking.wait(10):
            on_done(None)

    threading.Thread(target=tick, daemon=True).start()
    try:
        execute([j for j in jobs if j["id"] not in finished],
                functools.partial(run_job, store_path=str(store_path), ckpt_dir=str(out / "ckpt")),
                executor, finished, on_done)
    finally:
        ticking.set()
        bar.close()
    return store_path
