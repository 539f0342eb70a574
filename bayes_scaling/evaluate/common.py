"""Inputs shared by the held-out protocols: the laws to evaluate and the table's columns."""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..errors import BayesScalingError, DataError
from ..laws import Law
from ..laws import get as get_law

__all__ = ["named_laws", "require_columns"]


def named_laws(laws) -> dict[str, Law]:
    """``{label: Law}`` from a name, a Law, a list of them, or a ``{label: law}`` mapping."""
    if isinstance(laws, (str, Law)):
        laws = [laws]
    if isinstance(laws, Mapping):
        out = {str(k): get_law(v) for k, v in laws.items()}
    else:
        out = {}
        for lw in laws:
            lw = get_law(lw)
            if lw.name in out:
                raise BayesScalingError(f"law {lw.name!r} listed twice; pass a dict of labels")
            out[lw.name] = lw
    if not out:
        raise BayesScalingError("no laws given; pass a law name, a list of names or {label: law}")
    return out


def require_columns(df, cols, what):
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{what} needs a pandas DataFrame loss table, got {type(df).__name__}")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(f"{what} needs column(s) {missing}; the table has {list(df.columns)}")
