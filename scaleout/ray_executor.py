"""Jobs as Ray tasks: on a running cluster (``address="auto"`` or ``"ray://head:10001"``) or on a
local cluster started for the executor's lifetime (``address=None``)."""
from __future__ import annotations

import os
import sys

import ray
from ray.exceptions import WorkerCrashedError

from .base import ScaleoutError, WorkerDiedError, WorkerExecutor, compile_cache_env, worker_env


def call(fn, x):
    """One job: ``fn(x)`` (``fn`` arrives resolved from the object store)."""
    return fn(x)


def same_imports(runtime_env: dict | None) -> dict:
    """``runtime_env`` with this process's ``sys.path`` as the workers' ``PYTHONPATH`` (unless it
    sets one), so the workers of a cluster started here import the code this process imports. A
    script that puts its checkout on ``sys.path`` would otherwise run another installed copy of
    the packages in its workers (different code, different results) or fail to import them."""
    runtime_env = dict(runtime_env or {})
    env = dict(runtime_env.get("env_vars") or {})
    env.setdefault("PYTHONPATH", os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)))
    runtime_env["env_vars"] = env
    return runtime_env


def with_worker_env(runtime_env: dict | None, cpus_per_job: float, compile_cache=None) -> dict:
    """``runtime_env`` whose variables hold a task of ``cpus_per_job`` CPUs to that many threads
    (:func:`worker_env`) and, with ``compile_cache``, give the workers that directory of compiled
    programs (:func:`compile_cache_env`); variables ``runtime_env`` already sets are kept."""
    runtime_env = dict(runtime_env or {})
    env = worker_env(cpus_per_job)
    if compile_cache is not None:
        env.update(compile_cache_env(compile_cache))
    runtime_env["env_vars"] = {**env, **(runtime_env.get("env_vars") or {})}
    return runtime_env


class RayExecutor(WorkerExecutor):
    """Each item is one Ray task of ``cpus_per_job`` CPUs, run again up to ``max_retries`` times
    when its worker process dies (Ray's ``max_retries``; exceptions raised by the job are not
    retried). A Ray runtime already started in this process is used and left running.

    A task of fewer than two CPUs runs its numerical libraries, JAX included, on one thread
    (:func:`worker_env`; variables given in ``runtime_env`` win). With ``compile_cache`` the
    workers share that directory of compiled programs (:func:`compile_cache_env`; on a cluster,
    a path every node mounts) and, unless ``first_alone`` is False, the first job runs alone
    (:class:`WorkerExecutor`)."""

    def __init__(self, address: str | None = None, *, max_retries: int = 3, num_cpus=None,
                 cpus_per_job: float = 1, runtime_env: dict | None = None, compile_cache=None,
                 first_alone: bool | None = None):
        self.max_retries, self.cpus_per_job = int(max_retries), cpus_per_job
        self.set_first_alone(first_alone, compile_cache)
        self.pending: list = []
        self.owns_runtime = not ray.is_initialized()
        if self.owns_runtime:
            runtime_env = with_worker_env(runtime_env, cpus_per_job, compile_cache)
            if address is None:
                num_cpus = num_cpus or os.cpu_count()
                runtime_env = same_imports(runtime_env)
            try:
                ray.init(address=address, num_cpus=num_cpus, runtime_env=runtime_env,
                         include_dashboard=False, log_to_driver=True,
                         configure_logging=False)
            except ConnectionError as e:
                raise ScaleoutError(f"no Ray cluster at address {address!r} ({e}); start one "
                                    "with `ray start --head` or leave the address out to start a "
                                    "local cluster") from e

    def run_iter(self, fn, items):
        task = ray.remote(num_cpus=self.cpus_per_job, max_retries=self.max_retries)(call)
        fn_ref = ray.put(fn)  # shipped once, whatever callable it is (e.g. functools.partial)
        refs = [task.remote(fn_ref, x) for x in items]
        index = {ref: i for i, ref in enumerate(refs)}
        pending = self.pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                self.pending = pending
                for ref in done:
                    try:
                        result = ray.get(ref)
                    except WorkerCrashedError as e:
                        raise WorkerDiedError(
                            f"job {index[ref]} lost its worker process {self.max_retries + 1} "
                            f"times; giving up (max_retries={self.max_retries})") from e
                    yield index[ref], result
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            self.pending = []

    def close(self) -> None:
        for ref in self.pending:  # jobs left running by an error or Ctrl-C in the caller
            ray.cancel(ref, force=True)
        self.pending = []
        if self.owns_runtime and ray.is_initialized():
            ray.shutdown()
