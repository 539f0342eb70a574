"""The SQLite results store of a sweep: evaluation rows, finished jobs, progress and job spec
hashes, and the export of its rows as a CSV loss table.

Every evaluation is appended in one transaction (``INSERT OR IGNORE`` on a unique key), so a
killed sweep, restarted with the same command, skips recorded evaluations.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from pathlib import Path

import pandas as pd

from .config import ConfigError, spec_hash
from .tables import FRAMES


class Store:
    """SQLite results store: evaluation rows, finished jobs, progress and job spec hashes."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with self._con() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            con.execute("CREATE TABLE IF NOT EXISTS rows (key TEXT PRIMARY KEY, job TEXT, "
                        "data TEXT, written REAL)")
            con.execute("CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, wall REAL)")
            con.execute("CREATE TABLE IF NOT EXISTS progress (job TEXT PRIMARY KEY, tokens INT)")
            con.execute("CREATE TABLE IF NOT EXISTS specs (job TEXT PRIMARY KEY, hash TEXT)")

    def claim(self, jobs: list[dict]) -> None:
        """Record each job's spec hash; a job already recorded with another spec is an error.

        Jobs are checked one by one, so a grid can be extended or trimmed (sizes, stages, replay
        ratios) without invalidating finished work, but a changed setting cannot mix results.
        """
        with self._con() as con:
            con.executemany("INSERT OR IGNORE INTO specs VALUES (?, ?)",
                            [(j["id"], spec_hash(j)) for j in jobs])
            have = dict(con.execute("SELECT job, hash FROM specs"))
        changed = [j["id"] for j in jobs if have[j["id"]] != spec_hash(j)]
        if changed:
            raise ConfigError(
                f"store {self.path} holds results of {len(changed)} jobs made with different "
                f"settings ({', '.join(changed[:3])}, ...); use another out_dir for a new grid")

    def _con(self):
        return sqlite3.connect(self.path, timeout=120)

    def set_meta(self, key: str, value: str) -> None:
        with self._con() as con:
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def meta(self, key: str) -> str | None:
        with self._con() as con:
            got = con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return got[0] if got else None

    def add_rows(self, job: str, rows: dict[str, dict]) -> None:
        """Append rows atomically (one transaction); keys already present are ignored."""
        now = time.time()
        with self._con() as con:
            con.executemany("INSERT OR IGNORE INTO rows VALUES (?, ?, ?, ?)",
                            [(k, job, json.dumps(v), now) for k, v in rows.items()])

    def keys(self, job: str) -> set[str]:
        with self._con() as con:
            return {k for (k,) in con.execute("SELECT key FROM rows WHERE job=?", (job,))}

    def finish(self, job: str, wall: float) -> None:
        with self._con() as con:
            con.execute("INSERT OR REPLACE INTO jobs VALUES (?, ?)", (job, wall))

    def finished(self) -> dict[str, float]:
        with self._con() as con:
            return dict(con.execute("SELECT job, wall FROM jobs"))

    def set_progress(self, job: str, tokens: int) -> None:
        with self._con() as con:
            con.execute("INSERT OR REPLACE INTO progress VALUES (?, ?)", (job, tokens))

    def progress(self) -> int:
        with self._con() as con:
            return con.execute("SELECT COALESCE(SUM(tokens), 0) FROM progress").fetchone()[0]

    def frame(self) -> pd.DataFrame:
        """All rows as a loss table (``training.tables``) of the store's table kind (the ``table``
        meta key, written by every job; ``ptpp`` when absent)."""
        with self._con() as con:
            data = [json.loads(d) for (d,) in con.execute("SELECT data FROM rows ORDER BY key")]
        return FRAMES[self.meta("table") or "ptpp"](pd.DataFrame(data))


def write_atomically(path: str | Path, write) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then rename it over ``path``: a kill
    never leaves a truncated file, and the temporary name is unique (process id and a random
    part), so two processes writing the same path at once (a retried job beside the one it
    replaces) never move each other's file away; the last rename wins."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def export(store_path: str | Path, out_csv: str | Path) -> int:
    """Write the store's rows to a CSV (atomically); returns the number of rows."""
    if not Path(store_path).exists():
        raise FileNotFoundError(f"no results store at {store_path}")
    df = Store(store_path).frame()
    write_atomically(out_csv, lambda tmp: df.to_csv(tmp, index=False, float_format="%.6g"))
    return len(df)
