"""Executors on this machine: in-process, and a process pool that re-runs the jobs of a worker
that died."""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import resource_tracker

from .base import (
    Executor,
    ScaleoutError,
    WorkerDiedError,
    WorkerExecutor,
    compile_cache_env,
    use_compile_cache,
    worker_env,
)


class SerialExecutor(Executor):
    """Runs every job in the calling process, one after another (with ``compile_cache``, this
    process uses that persistent compilation cache from now on)."""

    def __init__(self, *, compile_cache=None):
        if compile_cache is not None:
            use_compile_cache(compile_cache)

    def map(self, fn, items):
        return [fn(x) for x in items]


@contextmanager
def _sigint_blocked():
    """Ctrl-C reaches the whole process group; only the parent reacts to it and stops the
    workers. A worker starts (the pool spawns it inside ``submit``) with SIGINT blocked, so a
    Ctrl-C that arrives while it is still importing stays pending instead of raising there; the
    parent's own pending Ctrl-C is delivered when the block ends. The resource tracker is
    started first: starting it unblocks SIGINT in the calling thread."""
    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def _environ(env: dict):
    """This process's environment with ``env`` added, for the processes started inside (a
    spawned worker reads its variables at start, before any of its imports)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: How often a worker checks that the process that started it is still there (seconds).
PARENT_CHECK_SECONDS = 1.0


def _exit_with_parent(parent: int) -> None:
    """A worker whose parent died without stopping its pool (killed, ``kill -9``, out of memory)
    is re-parented; it ends itself rather than run its job to the end for nobody."""
    while True:
        time.sleep(PARENT_CHECK_SECONDS)
        if os.getppid() != parent:
            os._exit(1)


def _start_worker(initializer, initargs) -> None:
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True,
                     name="exit-with-parent").start()
    # ignoring SIGINT discards one that arrived during start-up; then it may be unblocked
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if initializer is not None:
        initializer(*initargs)


class LocalExecutor(WorkerExecutor):
    """A pool of ``workers`` spawned processes. When a worker process dies (killed, out of memory)
    the pool breaks; it is replaced and every job that had not returned is submitted again, each
    at most ``max_retries`` times. ``initializer(*initargs)`` runs once in each worker.

    Each worker gets its share of the cores, ``cpu_count // workers`` threads (at least one):
    with one thread, its numerical libraries run single-threaded (:func:`worker_env`), so that
    two workers on two cores do not each spread over both. With ``compile_cache`` the workers
    share that directory of compiled programs (:func:`compile_cache_env`) and, unless
    ``first_alone`` is False, the first job runs alone (:class:`WorkerExecutor`)."""

    def __init__(self, workers: int | None = None, *, max_retries: int = 3, initializer=None,
                 initargs=(), compile_cache=None, first_alone: bool | None = None):
        workers = (os.cpu_count() or 1) if workers is None else workers
        if workers < 1:
            raise ScaleoutError(f"workers must be >= 1, got {workers} (e.g. --workers 2)")
        self.workers, self.max_retries = int(workers), int(max_retries)
        self.env = worker_env(max(1, (os.cpu_count() or 1) // self.workers))
        if compile_cache is not None:
            self.env.update(compile_cache_env(compile_cache))
        self.set_first_alone(first_alone, compile_cache)
        self.initializer, self.initargs = initializer, tuple(initargs)
        self.pool: cf.ProcessPoolExecutor | None = None

    def _pool(self) -> cf.ProcessPoolExecutor:
        if self.pool is None:
            self.pool = cf.ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                               initializer=_start_worker,
                                               initargs=(self.initializer, self.initargs))
        return self.pool

    def _submit(self, fn, x) -> cf.Future:
        # the pool starts worker processes here, on demand
        with _sigint_blocked(), _environ(self.env):
            return self._pool().submit(fn, x)

    def run_iter(self, fn, items):
        attempts = [0] * len(items)
        pending = {self._submit(fn, x): i for i, x in enumerate(items)}
        try:
            while pending:
                done, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                broken = []
                for fut in done:
                    i = pending.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        broken.append(i)
                        continue
                    yield i, result
                if broken:
                    # every job still in the broken pool fails too: run them all again
                    broken += [pending[f] for f in pending]
                    self._discard_pool()
                    pending = {}
                    for i in sorted(broken):
                        attempts[i] += 1
                        if attempts[i] > self.max_retries:
                            raise WorkerDiedError(
                                f"job {i} lost its worker process {attempts[i]} times; giving up "
                                f"(max_retries={self.max_retries}). If workers die at start, "
                                "guard the script's code with `if __name__ == '__main__':`")
                        pending[self._submit(fn, items[i])] = i
        except BaseException:
            self._discard_pool()
            raise

    def _discard_pool(self) -> None:
        """Stop the pool now: cancel queued jobs, end running ones and reap their processes."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        # the pool offers no public way to end running jobs (Python < 3.14): end its processes
        procs = list((pool._processes or {}).values())
        for p in procs:
            if p.is_alive():
                p.terminate()
        pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def __exit__(self, exc_type, *exc) -> None:
        # leaving on an error or Ctrl-C stops running jobs rather than waiting for them
        if exc_type is None:
            self.close()
        else:
            self._discard_pool()
