"""A sweep: a grid of runs from a TOML file, a results store, resumable execution.

The config's family (``training.kinds``: PTPP pre-training and continual pre-training in
``training.pretrain``, M3 runs in ``training.m3``) plans the jobs; each job is a pure function of
its spec, run by its job kind, and appends its evaluations to the SQLite store
(``training.store``), so a killed sweep, restarted with the same command, skips recorded
evaluations and resumes unfinished jobs from their last trunk checkpoint.

Execution goes through one seam, :func:`execute`: the pending jobs, a callable that runs one job,
and a backend (``slots``, ``submit(fn, job) -> Future``, ``shutdown()``). ``InlineBackend`` runs
jobs in the calling process, ``LocalBackend`` in local worker processes; another backend (e.g. a
cluster queue) only needs the same three members and a filesystem shared with the store.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm import tqdm

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


# ----------------------------------------------------------------------------- backends

def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


class InlineBackend:
    """Runs each job in the calling process, one at a time (``--workers 1``)."""

    slots = 1

    def submit(self, fn, job: dict) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(job))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            fut.set_exception(e)
        return fut

    def shutdown(self) -> None:
        pass


class LocalBackend:
    """Runs jobs in ``workers`` local processes, splitting the CPU cores between them."""

    def __init__(self, workers: int):
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}")
        threads = max(1, (os.cpu_count() or 1) // workers)
        self.pool = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                                           initializer=_init_worker, initargs=(threads,))
        self.slots = workers

    def submit(self, fn, job: dict) -> cf.Future:
        return self.pool.submit(fn, job)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


# ----------------------------------------------------------------------------- driver

def execute(pending: list[dict], run_one: Callable[[dict], str], backend,
            finished: set[str] | None = None,
            on_done: Callable[[dict], None] = lambda job: None) -> None:
    """Run every job of ``pending`` on ``backend``, each once the jobs of its ``deps`` are
    finished (in ``finished`` or run here), at most ``backend.slots`` at a time, in list order
    among the ready ones. ``run_one(job)`` must be picklable for process backends; a job's
    failure is raised here. ``on_done(job)`` is called after each job and at least every 10 s
    with ``None`` (for progress). The backend is shut down on return."""
    finished = set(finished or ())
    todo = list(pending)
    running: dict[cf.Future, dict] = {}
    try:
        while todo or running:
            for j in list(todo):
                if len(running) >= backend.slots:
                    break
                if all(d in finished for d in j["deps"]):
                    running[backend.submit(run_one, j)] = j
                    todo.remove(j)
            if not running:
                raise RuntimeError(f"jobs {[j['id'] for j in todo]} wait on unfinished deps")
            done, _ = cf.wait(running, timeout=10, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                j = running.pop(fut)
                fut.result()  # re-raise a job's failure here
                finished.add(j["id"])
                on_done(j)
            if not done:
                on_done(None)
    finally:
        backend.shutdown()


def run_sweep(config: str | Path, workers: int = 1, out_dir: str | None = None,
              backend=None, progress: bool = True) -> Path:
    """Run (or resume) the sweep of a config; returns the results store path."""
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
    if backend is None:
        backend = InlineBackend() if workers == 1 else LocalBackend(workers)
    total = sum(job_tokens(j) for j in jobs)
    bar = tqdm(total=total, initial=min(total, store.progress()), unit="tok", unit_scale=True,
               disable=not progress, mininterval=1 if sys.stderr.isatty() else 60,
               desc=cfg["name"], smoothing=0.05)

    def on_done(job):
        if job is not None:
            bar.write(f"{time.strftime('%H:%M:%S')} done {job['id']}")
        bar.update(max(0, min(total, store.progress()) - bar.n))

    try:
        execute([j for j in jobs if j["id"] not in finished],
                functools.partial(run_job, store_path=str(store_path), ckpt_dir=str(out / "ckpt")),
                backend, finished, on_done)
    finally:
        bar.close()
    return store_path
