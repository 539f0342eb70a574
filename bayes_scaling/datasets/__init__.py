"""Bundled real loss tables: ``names()``, ``load(name)``, ``datasheet(name)``.

A dataset is any ``<name>.csv`` (or ``<name>.csv.gz``) in this folder with a datasheet
``<name>.md`` beside it; nothing else has to be registered. The CSV is stored already in the
canonical columns of a loss table (``loss``, ``N``, ``D``, ``ptpp``, ``replay``, ``domain``, ...;
see DESIGN.md); extra columns pass through untouched.

The datasheet may start with a front-matter block of ``key: value`` lines between two ``---``
lines. Its keys end up in ``df.attrs`` (``true``/``false`` become booleans, ``unknown`` becomes
``None``)::

    ---
    title: One-line description
    source: https://github.com/owner/repo
    commit: 0123abcd...
    license: MIT (LICENSE file in the repository)
    n_includes_embeddings: true
    notes: Anything a user must know before fitting (one line).
    ---

``df.attrs`` always holds ``name``, ``title``, ``source``, ``commit``, ``license``,
``n_includes_embeddings`` (whether ``N`` counts embedding parameters), ``notes`` and
``datasheet`` (the Markdown file name); keys missing from the front matter are ``None``
(``title`` falls back to the first ``#`` heading).

Examples::

    import bayes_scaling.datasets as ds
    ds.names()                                   # ['chinchilla_epoch', 'datablations', ...]
    df = ds.load("chinchilla_epoch")             # all 245 rows
    kept = df[df["epoch_kept"]]                  # the 240 points Epoch's fits use
    cpt = ds.load("mixing_laws_cpt")
    cpt[~cpt["is_base"]]                         # drop the pre-CPT rows at D = 0
"""
from __future__ import annotations

from importlib import resources

import numpy as np
import pandas as pd

from ..errors import DataError

__all__ = ["datasheet", "load", "names"]

_SUFFIXES = (".csv", ".csv.gz")
_ATTR_KEYS = ("title", "source", "commit", "license", "n_includes_embeddings", "notes")


def _folder():
    return resources.files(__name__)


def _data_files() -> dict[str, list]:
    """Map dataset name -> its data files (normally exactly one)."""
    folder = _folder()
    entries = {p.name: p for p in folder.iterdir() if p.is_file()}
    found: dict[str, list] = {}
    for fname, path in sorted(entries.items()):
        for suffix in _SUFFIXES:
            if fname.endswith(suffix) and not fname.startswith(("_", ".")):
                stem = fname[: -len(suffix)]
                if f"{stem}.md" in entries:
                    found.setdefault(stem, []).append(path)
    return found


def names() -> list[str]:
    """Sorted names of the bundled datasets (a CSV with a datasheet beside it)."""
    return sorted(_data_files())


def _resolve(name: str):
    files = _data_files()
    if not isinstance(name, str) or name not in files:
        raise DataError(
            f"unknown dataset {name!r}; available datasets: {', '.join(sorted(files)) or 'none'}. "
            "A dataset is a <name>.csv (or .csv.gz) with a <name>.md datasheet in "
            "bayes_scaling/datasets/."
        )
    paths = files[name]
    if len(paths) > 1:
        raise DataError(
            f"dataset {name!r} has several data files ({', '.join(p.name for p in paths)}); "
            "keep exactly one of <name>.csv and <name>.csv.gz."
        )
    return paths[0]


def datasheet(name: str) -> str:
    """The Markdown datasheet of dataset ``name`` (provenance, licence, column mapping)."""
    _resolve(name)
    return (_folder() / f"{name}.md").read_text(encoding="utf-8")


def _parse_value(value: str):
    low = value.strip().lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("", "unknown", "none", "null"):
        return None
    return value.strip()


def _metadata(name: str, text: str) -> dict:
    meta: dict = {key: None for key in _ATTR_KEYS}
    lines = text.splitlines()
    body_start = 0
    if lines and lines[0].strip() == "---":
        for i, line in enumerate(lines[1:], start=1):
            if line.strip() == "---":
                body_start = i + 1
                break
            if ":" in line:
                key, value = line.split(":", 1)
                meta[key.strip()] = _parse_value(value)
    if meta.get("title") is None:
        meta["title"] = next(
            (ln.lstrip("#").strip() for ln in lines[body_start:] if ln.startswith("# ")), None
        )
    meta["name"] = name
    meta["datasheet"] = f"{name}.md"
    return meta


def load(name: str) -> pd.DataFrame:
    """Load bundled dataset ``name`` as a loss table in canonical columns.

    Args:
      name: one of :func:`names`.

    Returns:
      A new DataFrame (one row per evaluated checkpoint, or per checkpoint and validation set
      when there is a ``domain`` column) whose ``attrs`` hold the dataset's metadata: ``name``,
      ``title``, ``source``, ``commit``, ``license``, ``n_includes_embeddings``, ``notes``,
      ``datasheet``. The datasheet (:func:`datasheet`) documents every column.

    Raises:
      DataError: unknown name (the message lists the available datasets), or a data file
        without a positive finite ``loss`` column.
    """
    path = _resolve(name)
    compression = "gzip" if path.name.endswith(".gz") else None
    with path.open("rb") as fh:
        df = pd.read_csv(fh, compression=compression)
    if "loss" not in df.columns:
        raise DataError(
            f"dataset {name!r} ({path.name}) has no 'loss' column; columns are {list(df.columns)}. "
            "Rename the loss column to 'loss' (canonical columns: DESIGN.md)."
        )
    loss = pd.to_numeric(df["loss"], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~(np.isfinite(loss) & (loss > 0)))
    if bad.size:
        raise DataError(
            f"dataset {name!r} ({path.name}): column 'loss' must be finite and > 0; offending rows "
            f"{bad[:20].tolist()}{' ...' if bad.size > 20 else ''}. Fix or remove them in the CSV."
        )
    df.attrs.update(_metadata(name, datasheet(name)))
    return df
