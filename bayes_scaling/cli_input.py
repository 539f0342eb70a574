"""What the ``bayes-scaling`` commands read: loss tables, saved fits and posteriors, option values
and ``--law-module`` files; each bad input ends in one clear error (what, where, how to fix)."""
from __future__ import annotations

import argparse
import importlib.util
import traceback
from pathlib import Path

import pandas as pd

from . import datasets
from .bayes import load_posterior
from .errors import BayesScalingError, DataError, LawError, OptionError
from .fit import MapFit


def read_table(path: str, query: str | None) -> pd.DataFrame:
    """A loss table from a CSV path or ``dataset:NAME``, optionally filtered by a pandas query."""
    if path.startswith("dataset:"):
        df = datasets.load(path.split(":", 1)[1])
    else:
        if not Path(path).is_file():
            raise DataError(f"{path}: no such file; give a CSV loss table (a header row of column "
                            "names, one row per run) or dataset:NAME (see `bayes-scaling "
                            "datasets`)")
        try:
            df = pd.read_csv(path)
        except pd.errors.EmptyDataError:
            raise DataError(f"{path} is empty; a loss table needs a header row of column names "
                            "and one row per run") from None
        except (pd.errors.ParserError, UnicodeDecodeError) as e:
            raise DataError(f"{path} is not a readable CSV ({str(e).splitlines()[0]}); save it as "
                            "comma-separated text with one header row") from None
    names = [c.strip() if isinstance(c, str) else c for c in df.columns]
    if names != list(df.columns):  # "N, D, loss": the spaces after the commas are not names
        twice = sorted({str(c) for c in names if names.count(c) > 1})
        if twice:
            raise DataError(f"{path}: columns {twice} appear twice once the spaces around the "
                            "header's names are removed; give every column its own name")
        df.columns = names
    if df.empty:
        raise DataError(f"{path} has a header ({', '.join(map(str, df.columns))}) but no rows; "
                        "add one row per measured run")
    if query:
        try:
            df = df.query(query)
        except (SyntaxError, NameError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataError(f"--query {query!r} is not a valid pandas query on {path} "
                            f"({type(e).__name__}: {e}); the columns are "
                            f"{', '.join(map(str, df.columns))}; e.g. --query \"domain == "
                            "'target' and D > 0\"") from None
        if df.empty:
            raise DataError(f"--query {query!r} selects no rows of {path}; loosen it")
    return df


def check_writable(path: str | None, option: str) -> None:
    """Refuse an output path whose directory does not exist, before any computation."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise OptionError(f"{option} {path} is a directory; give a file name inside it")
    if not p.parent.is_dir():
        raise OptionError(f"{option} {path}: the directory {p.parent} does not exist; create it "
                          "first or write elsewhere")


def read_saved(load, path: str, errors: tuple, what: str, written: str):
    """``load(path)`` of a file written by a command; a law this process has not registered and a
    damaged file (one of ``errors``) end in one clear error each."""
    try:
        return load(path)
    except LawError as e:
        raise LawError(f"{path} was written with a law that is not registered here "
                       f"({e.message}); pass --law-module FILE.py, the file that registers it"
                       ) from None
    except errors as e:
        raise DataError(f"cannot read {path} as {what} ({type(e).__name__}: {e}): it is not a "
                        f"complete {written}; write it again") from None


def load_posterior_file(path: str):
    """A posterior saved by ``bayes-scaling posterior``, or one clear error."""
    if not Path(path).is_file():
        raise DataError(f"{path}: no such file (a posterior .nc from `bayes-scaling posterior "
                        "--out`)")
    if path.endswith(".json"):
        raise DataError(f"{path} is a point fit (JSON from `bayes-scaling fit --out`), which has "
                        "no forecast distribution; forecast needs a posterior .nc from "
                        "`bayes-scaling posterior --out`")
    return read_saved(load_posterior, path, (OSError, ValueError, KeyError), "a posterior",
                      ".nc written by `bayes-scaling posterior` (truncated or corrupt?)")


def load_fit_file(path: str):
    """A saved Posterior (.nc) or MapFit (.json)."""
    if not path.endswith(".json"):
        return load_posterior_file(path)
    if not Path(path).is_file():
        raise DataError(f"{path}: no such file (a posterior .nc from `bayes-scaling "
                        "posterior` or a fit .json from `bayes-scaling fit --out`)")
    return read_saved(MapFit.load, path, (ValueError, KeyError, TypeError), "a fit",
                      ".json written by `bayes-scaling fit --out` (truncated or edited?)")


def parse_fixed(items) -> dict:
    fixed = {}
    for item in items or ():
        k, eq, v = item.partition("=")
        try:
            fixed[k] = float(v) if eq and k else None
        except ValueError:
            fixed[k] = None
        if fixed[k] is None:
            raise OptionError(f"--fixed expects NAME=VALUE (e.g. --fixed alpha=0.34), got {item!r}")
    return fixed


def positive_int(text: str) -> int:
    return int_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    return int_at_least(text, 0)


def int_at_least(text: str, least: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"must be an integer >= {least}, got {v}")
    return v


def positive_number(text: str, what: str = "a number") -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what} > 0, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be {what} > 0, got {text!r}")
    return v


def positive_seconds(text: str) -> float:
    return positive_number(text, "a number of seconds")


def probability(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"must be a probability in (0, 1), e.g. 0.9; got {text!r}")
    return v


def import_law_modules(paths) -> None:
    """Import each Python file in ``paths`` (run for its ``register`` calls); one clear error
    naming the file and line when it is missing or fails."""
    for path in paths or ():
        p = Path(path)
        if not p.is_file() or p.suffix != ".py":
            raise OptionError(f"--law-module {path}: no such Python file; give a .py file that "
                              "defines laws and registers them with bayes_scaling.laws.register")
        spec = importlib.util.spec_from_file_location(f"bayes_scaling_law_module_{p.stem}", p)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BayesScalingError:
            raise
        except Exception as e:  # noqa: BLE001  (the user's file: say where it failed)
            where = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(p)]
            line = f" line {where[-1].lineno}" if where else ""
            raise OptionError(
                f"--law-module {path}{line} failed: {type(e).__name__}: {e}") from None


def source_tree_script(*parts) -> Path:
    """A file of the source checkout (``analyses/run_all.py``), or a clear error from a wheel."""
    path = Path(__file__).resolve().parents[1].joinpath(*parts)
    if not path.exists():
        raise BayesScalingError(f"{'/'.join(parts)} is not here: it ships with the source "
                                "checkout, not with an installed wheel; run from a clone of the repository")
    return path
