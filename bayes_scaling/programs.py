"""Compiled programs kept in memory: the most recently used ones, a bounded number of them.

Every compiled XLA program holds memory maps of its own (its code and data). A Linux process may
hold at most ``vm.max_map_count`` of them (65530 by default), and a program is freed only when
nothing refers to the function that compiled it. A process that fits many laws (a study, a
benchmark, a user's loop over candidate laws) and kept the programs of every law it ever fitted
would run out after a few dozen laws and crash in the compiler ("LLVM compilation error: Cannot
allocate memory"). Every in-memory cache of compiled functions in the package is therefore a
:class:`Programs`: the least recently used entries are dropped past ``maxsize``, and their
programs freed. A dropped program asked for again is rebuilt, and its compiled form read back
from the persistent compilation cache (``bs.compile_cache_dir``) rather than compiled anew.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Hashable

__all__ = ["MAP_SHARE", "Programs", "clear_programs", "map_count"]

_ALL: "weakref.WeakSet[Programs]" = weakref.WeakSet()

#: Share of the process's limit on memory maps (``vm.max_map_count``) past which every kept
#: program is dropped (:func:`clear_programs`, JAX's own caches included). The bounded caches keep
#: a process that fits many laws far below it; this is the guard for what they do not hold
#: (programs JAX keeps for functions that live on, such as a law's formula).
MAP_SHARE = 0.5
#: the map count is read once every this many new programs (reading it costs about a millisecond
#: per 10,000 maps)
CHECK_EVERY = 16
_built = [0]


def map_count() -> tuple[int, int] | None:
    """``(maps held, the limit)`` of this process, or None where the system does not say (not
    Linux)."""
    try:
        held = Path("/proc/self/maps").read_bytes().count(b"\n")
        limit = int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return None
    return held, limit


def _guard() -> None:
    _built[0] += 1
    if _built[0] % CHECK_EVERY:
        return
    counts = map_count()
    if counts is not None and counts[0] > MAP_SHARE * counts[1]:
        clear_programs(jax_caches=True)


class Programs:
    """A least-recently-used map from keys to compiled functions, at most ``maxsize`` of them.

    ``get(key, build)`` returns the function kept under ``key``, building it with ``build()`` the
    first time (or again after it was dropped). ``pin`` objects are kept alive with the entry
    (e.g. what the key holds only by ``id``)."""

    def __init__(self, maxsize: int, name: str = ""):
        if int(maxsize) < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize, self.name = int(maxsize), name
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        _ALL.add(self)

    def get(self, key: Hashable, build: Callable, pin=None):
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
        _guard()
        value = build()
        with self._lock:
            if key in self._entries:  # another thread built it meanwhile: keep the first
                self._entries.move_to_end(key)
                return self._entries[key][0]
            self._entries[key] = (value, pin)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return value

    def __contains__(self, key) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __repr__(self) -> str:
        return f"Programs({self.name!r}, {len(self)}/{self.maxsize})"


def clear_programs(jax_caches: bool = False) -> None:
    """Drop every compiled function the package keeps in memory (each is rebuilt when asked for
    again); with ``jax_caches``, JAX's own caches too (``jax.clear_caches``)."""
    for cache in list(_ALL):
        cache.clear()
    if jax_caches:
        import jax

        jax.clear_caches()
