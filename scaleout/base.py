"""The executor interface every backend implements."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping

#: XLA options that keep a process's compiled programs on one thread (XLA's CPU backend
#: otherwise spreads an operation over every core, whatever ``OMP_NUM_THREADS`` says). Only
#: ``--`` options: XLA stops reading ``XLA_FLAGS`` at the first word without ``--``.
ONE_THREAD_XLA = ("--xla_cpu_multi_thread_eigen=false",)

#: XLA's older CPU fusion emitter compiles the package's programs in about 0.7x the time (a NUTS
#: fit's sampler, Newton Hessian and L-BFGS programs; BENCHMARKS.md, "Test-suite time: XLA's
#: fusion emitter" and "Cold compilation: XLA's older fusion emitter") and runs them as fast. It
#: rounds some operations differently: a MAP agrees to 12 digits, NUTS draws within Monte Carlo
#: error. XLA aborts on an option it does not know, so it is used only on the jaxlib releases it
#: was measured on.
FAST_COMPILE_XLA = "--xla_cpu_use_fusion_emitters=false"
FAST_COMPILE_JAXLIB = ((0, 10),)


def _cache_settings(path) -> dict:
    return {"jax_compilation_cache_dir": str(path),
            "jax_persistent_cache_min_compile_time_secs": 0.0,
            "jax_persistent_cache_min_entry_size_bytes": -1,
            "jax_compilation_cache_max_size": 2**30}


def compile_cache_env(path) -> dict:
    """Environment variables that give a process JAX's persistent compilation cache at ``path``:
    every program it compiles is written there (whatever its compile time or size) and every
    program found there is loaded instead of compiled. Workers given the same directory compile
    a program once between them; on a cluster, a directory every node mounts makes it once per
    cluster. Entries are keyed by the program's full text and JAX's version, so a stale entry is
    never used; the size bound (1 GiB, least recently used first) also turns on JAX's file lock,
    so concurrent workers never read a half-written entry."""
    return {k.upper(): str(v) for k, v in _cache_settings(path).items()}


def use_compile_cache(path) -> None:
    """This process, and the processes it starts, use the persistent compilation cache at
    ``path`` (:func:`compile_cache_env`), whether JAX is imported yet or not."""
    os.environ.update(compile_cache_env(path))
    jax = sys.modules.get("jax")  # already imported: its settings were read from the environment
    if jax is not None:
        for name, value in _cache_settings(path).items():
            jax.config.update(name, value)


def compile_cache_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether JAX's persistent compilation cache was already given a directory: by
    ``JAX_COMPILATION_CACHE_DIR`` (e.g. set by :func:`use_compile_cache` in a parent process) or,
    once JAX is imported, by ``jax.config``."""
    environ = os.environ if environ is None else environ
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return True
    jax = sys.modules.get("jax")
    return bool(jax is not None and jax.config.jax_compilation_cache_dir)


def user_cache_dir(app: str, environ: Mapping[str, str] | None = None):
    """``$XDG_CACHE_HOME/<app>/jax/<jax version>`` (``~/.cache`` without ``XDG_CACHE_HOME``): one
    folder per JAX release, so an upgrade starts afresh and the old folder can be deleted."""
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    environ = os.environ if environ is None else environ
    base = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    try:
        release = f"jax-{version('jax')}-jaxlib-{version('jaxlib')}"
    except PackageNotFoundError:
        release = "jax-unknown"
    return base / app / "jax" / release


def use_fast_compile(off_variable: str | None = None,
                     environ: MutableMapping[str, str] | None = None) -> bool:
    """Add :data:`FAST_COMPILE_XLA` to ``XLA_FLAGS`` (``environ``, default this process's, which
    the processes it starts inherit), unless the variable ``off_variable`` is set to anything but
    ``""`` or ``"0"``, the option is there already (the user's choice stands), the installed
    jaxlib is not one of :data:`FAST_COMPILE_JAXLIB`, or this process's JAX backend has started
    (XLA reads its options once: a flag added later would only reach the child processes, whose
    programs would then not share this one's compilation-cache keys).

    Returns:
        whether the option is in ``XLA_FLAGS`` now.
    """
    environ = os.environ if environ is None else environ
    flags = environ.get("XLA_FLAGS", "").split()
    name = FAST_COMPILE_XLA.split("=")[0]
    if any(f.split("=")[0] == name for f in flags):
        return FAST_COMPILE_XLA in flags
    if off_variable and environ.get(off_variable, "") not in ("", "0"):
        return False
    try:
        from jax._src import xla_bridge
        import jaxlib.version

        started = xla_bridge.backends_are_initialized()
        release = tuple(jaxlib.version.__version_info__[:2])
    except (ImportError, AttributeError):
        return False
    if started or release not in FAST_COMPILE_JAXLIB:
        return False
    environ["XLA_FLAGS"] = " ".join([*flags, FAST_COMPILE_XLA])
    return True


def use_user_compile_cache(app: str, off_variable: str,
                           environ: Mapping[str, str] | None = None):
    """Give this process (and those it starts) the persistent compilation cache of
    :func:`use_compile_cache` at :func:`user_cache_dir`, so that a command run again loads the
    programs it compiled last time instead of compiling them. Nothing is changed when the cache is
    already configured (:func:`compile_cache_configured`: the user's own choice, or a parent's
    shared cache), when the variable ``off_variable`` is set to anything but ``""`` or ``"0"``,
    when the ``filelock`` package is missing (the size bound's file lock keeps concurrent
    processes from reading half-written entries) or when the folder cannot be created.

    Returns:
        the folder used, or None.
    """
    environ = os.environ if environ is None else environ
    if environ.get(off_variable, "") not in ("", "0") or compile_cache_configured(environ):
        return None
    try:
        import filelock  # noqa: F401
    except ImportError:
        return None
    path = user_cache_dir(app, environ)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    use_compile_cache(path)
    return path


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


class WorkerExecutor(Executor):
    """An executor that starts worker processes of its own. With ``first_alone`` the first job
    runs by itself before the others are submitted: the programs it compiles reach the shared
    compilation cache (``compile_cache``) before any other worker starts, so they are compiled
    once rather than once per worker at the same moment."""

    first_alone = False

    def set_first_alone(self, first_alone: bool | None, compile_cache) -> None:
        """``first_alone`` as given, or, when None, on exactly when a compilation cache is
        shared (without one, running the first job alone only delays the others)."""
        self.first_alone = compile_cache is not None if first_alone is None else bool(first_alone)

    def submit_iter(self, fn, items):
        items = list(items)
        if not self.first_alone or len(items) < 2:
            yield from self.run_iter(fn, items)
            return
        yield from self.run_iter(fn, items[:1])
        for i, result in self.run_iter(fn, items[1:]):
            yield i + 1, result

    def run_iter(self, fn, items: list) -> Iterator[tuple[int, object]]:
        """Submit every item at once; yield ``(index, result)`` as jobs finish."""
        raise NotImplementedError
