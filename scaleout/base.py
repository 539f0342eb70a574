"""The executor interface every backend implements."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping

#: XLA options that keep a process's compiled programs on one thread (XLA's CPU backend
#: otherwise spreads an operation over every core, whatever ``OMP_NUM_THREADS`` says).
ONE_THREAD_XLA = ("--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1")


class ScaleoutError(RuntimeError):
    """A bad executor setting (unknown name, bad worker count, unreachable cluster)."""


class WorkerDiedError(ScaleoutError):
    """A job's worker process died on every attempt (``max_retries`` + 1 runs)."""


def worker_env(threads: float | None, environ: Mapping[str, str] | None = None) -> dict:
    """Environment variables that hold a worker to ``threads`` threads of computation.

    A worker given one CPU (``threads`` < 2) runs its numerical libraries on one thread: BLAS and
    OpenMP through ``OMP_NUM_THREADS=1`` (what Ray sets for its own one-CPU workers) and its
    OpenBLAS and MKL equivalents, and JAX through :data:`ONE_THREAD_XLA` appended to
    ``XLA_FLAGS`` (``environ``'s, default this process's, so a host-device count set for
    parallel chains is kept), so that many workers on one node do not each spread over every
    core. ``threads`` of None or 2 or more: no variables (the libraries' defaults)."""
    if threads is None or threads >= 2:
        return {}
    environ = os.environ if environ is None else environ
    flags = environ.get("XLA_FLAGS", "").split()
    flags += [f for f in ONE_THREAD_XLA if f.split("=")[0] not in {g.split("=")[0] for g in flags}]
    return {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "XLA_FLAGS": " ".join(flags)}


class Executor:
    """Runs ``fn`` on each item independently. Use as a context manager: leaving the block (also
    by an exception or Ctrl-C) stops every worker the executor started."""

    def map(self, fn: Callable, items: Iterable) -> list:
        """``[fn(x) for x in items]``, in the order of ``items``."""
        results = dict(self.submit_iter(fn, items))
        return [results[i] for i in range(len(results))]

    def submit_iter(self, fn: Callable, items: Iterable) -> Iterator[tuple[int, object]]:
        """Yields ``(index, fn(items[index]))`` as jobs finish (any order). A caller that stores
        each result as it arrives can resume after an interruption by submitting the rest."""
        yield from enumerate(self.map(fn, items))

    def close(self) -> None:
        """Stop the workers this executor started."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
