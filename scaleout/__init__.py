"""One executor interface for running independent jobs: in-process, on a local process pool or on
a Ray cluster.

```python
from scaleout import get_executor
with get_executor("local", workers=2) as ex:          # process pool on this machine
    results = ex.map(fn, items)                         # ordered list
with get_executor("ray", address="auto") as ex:       # join a running Ray cluster
    for i, result in ex.submit_iter(fn, items):         # as jobs finish
        ...
```

``fn`` is a top-level (picklable) function of one item. A job whose worker process dies is run
again (up to ``max_retries`` times); an exception raised by ``fn`` itself is not retried and
reaches the caller. Ray is imported only when a Ray executor is asked for. This package imports
neither ``bayes_scaling`` nor ``training``, so both can use it.
"""
from __future__ import annotations

from .base import (
    FAST_COMPILE_JAXLIB,
    FAST_COMPILE_XLA,
    Executor,
    ScaleoutError,
    WorkerDiedError,
    compile_cache_configured,
    compile_cache_env,
    use_compile_cache,
    use_fast_compile,
    use_user_compile_cache,
    user_cache_dir,
    worker_env,
)
from .local import LocalExecutor, SerialExecutor

KINDS = ("serial", "local", "ray")

__all__ = ["FAST_COMPILE_JAXLIB", "FAST_COMPILE_XLA", "KINDS", "Executor", "LocalExecutor",
           "ScaleoutError", "SerialExecutor",
           "WorkerDiedError", "add_arguments", "compile_cache_configured", "compile_cache_env",
           "from_arguments", "get_executor", "use_compile_cache", "use_fast_compile",
           "use_user_compile_cache",
           "user_cache_dir", "worker_env"]


def get_executor(kind="local", *, workers: int | None = None, address: str | None = None,
                 max_retries: int = 3, **options) -> Executor:
    """An executor by name, or ``kind`` itself wrapped when it is an object with ``.map``.

    Args:
        kind: ``"serial"`` (in this process), ``"local"`` (a process pool on this machine) or
            ``"ray"``; or any object with a ``map(fn, items)`` method (used as it is; closing the
            returned executor leaves it open).
        workers: local pool size (default: the machine's CPU count); ignored by the others.
        address: Ray only: ``"auto"`` or ``"ray://host:10001"`` joins a running cluster; ``None``
            starts a local cluster sized to the machine and shuts it down on exit (a Ray runtime
            already started in this process is used as it is and left running).
        max_retries: times a job is run again after its worker process died.
        **options: passed to the executor (local and Ray: ``compile_cache``, a directory of
            compiled programs the workers share, :func:`compile_cache_env`; local:
            ``initializer``, ``initargs``; Ray: ``num_cpus`` of a started cluster,
            ``cpus_per_job``, ``runtime_env``).
    """
    if not isinstance(kind, str):
        if not callable(getattr(kind, "map", None)):
            raise ScaleoutError(f"an executor is a name in {KINDS} or an object with a .map(fn, "
                                f"items) method; got {type(kind).__name__}")
        return Borrowed(kind)
    if kind == "serial":
        return SerialExecutor(compile_cache=options.get("compile_cache"))
    if kind == "local":
        return LocalExecutor(workers, max_retries=max_retries, **options)
    if kind == "ray":
        from .ray_executor import RayExecutor  # Ray is imported only when asked for

        return RayExecutor(address, max_retries=max_retries, **options)
    raise ScaleoutError(f"unknown executor {kind!r}; use one of {KINDS} (e.g. --executor local)")


def add_arguments(parser, *, executor: str | None = "serial", workers: int | None = 2,
                  what: str = "jobs", compile_cache: bool = True) -> None:
    """The executor options of a command line: ``--executor``, ``--workers``, ``--ray-address``
    and (for JAX work) ``--compile-cache``, read back by :func:`from_arguments`. ``executor`` and
    ``workers`` are the command's defaults (``workers=None``: the machine's CPU count;
    ``executor=None``: serial for one worker, else local)."""
    default = (f"default {executor}" if executor else "default: serial for --workers 1, else local")
    parser.add_argument("--executor", choices=KINDS, default=executor,
                        help=f"what runs the {what}: serial (this process), local (a process pool "
                             f"of --workers) or ray (a Ray cluster; {default})")
    parser.add_argument("--workers", type=int, default=workers,
                        help="processes of the local pool (default: "
                             f"{workers or 'the CPU count'})")
    parser.add_argument("--ray-address", default=None,
                        help="Ray cluster to join ('auto' or ray://host:10001); none: start one "
                             "here")
    if compile_cache:
        parser.add_argument("--compile-cache", metavar="DIR", default=None,
                            help="directory of compiled programs the workers share (JAX's "
                                 "persistent compilation cache; on a cluster, a path every node "
                                 "mounts)")


def from_arguments(args, **options) -> Executor:
    """The executor :func:`add_arguments`' options ask for (``options`` as :func:`get_executor`
    takes them)."""
    options.setdefault("compile_cache", getattr(args, "compile_cache", None))
    return get_executor(args.executor, workers=args.workers, address=args.ray_address, **options)


class Borrowed(Executor):
    """An executor-like object supplied by the caller: used through ``map`` (and its own
    ``submit_iter`` when it has one), never closed here."""

    def __init__(self, inner):
        self.inner = inner

    def map(self, fn, items):
        return list(self.inner.map(fn, items))

    def submit_iter(self, fn, items):
        if callable(getattr(self.inner, "submit_iter", None)):
            return self.inner.submit_iter(fn, items)
        return super().submit_iter(fn, items)
