"""The executor interface every backend implements."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator


class ScaleoutError(RuntimeError):
    """A bad executor setting (unknown name, bad worker count, unreachable cluster)."""


class WorkerDiedError(ScaleoutError):
    """A job's worker process died on every attempt (``max_retries`` + 1 runs)."""


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
