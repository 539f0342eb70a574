"""Loss-table validation: canonical columns (DESIGN.md) checked once, at the boundary.

``validate(df, law)`` returns a cleaned copy or raises one :class:`~bayes_scaling.errors.DataError`
naming the column, the offending rows and the fix. The PTPP paper clips the replay ratio to
[1e-9, 1 - 1e-9]; that clip is applied here and recorded in ``df.attrs["clipped"]`` (and warned
about), never silently.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import DataError
from .laws import get as get_law

REPLAY_CLIP = (1e-9, 1.0 - 1e-9)


@dataclass(frozen=True)
class Rule:
    lower: float
    upper: float = np.inf
    lower_open: bool = True  # value must be > lower (else >= lower)
    upper_open: bool = False
    what: str = ""
    fix: str = ""

    def bad(self, v: np.ndarray) -> np.ndarray:
        lo = v <= self.lower if self.lower_open else v < self.lower
        hi = v >= self.upper if self.upper_open else v > self.upper
        return lo | hi

    def describe(self) -> str:
        lb = "(" if self.lower_open else "["
        ub = ")" if self.upper_open else "]"
        return f"{lb}{self.lower:g}, {self.upper:g}{ub}"


_POS = dict(lower=0.0, fix="losses and sizes must be positive; drop or correct these rows")
# Rules by variable or column name. A law variable read through a column map is checked by the
# variable's rule (e.g. ``replay`` read from ``r_f`` keeps the replay range).
RULES: dict[str, Rule] = {
    "loss": Rule(**_POS, what="validation loss (nats/token)"),
    "N": Rule(**_POS, what="parameters"),
    "M": Rule(**_POS, what="non-embedding FLOPs per token"),
    "D": Rule(0.0, what="tokens", fix="tokens must be positive; the laws diverge at D = 0, so keep "
              "pre-adaptation (D = 0) rows out of the fit, e.g. df[df.D > 0]"),
    "D_2": Rule(0.0, what="second-stage tokens", fix="drop rows with D_2 <= 0 (single-stage runs)"),
    "D_T": Rule(**_POS, what="target corpus tokens"),
    "U": Rule(**_POS, what="unique tokens"),
    "ptpp": Rule(**_POS, what="pre-training tokens per parameter"),
    "replay": Rule(0.0, 1.0, lower_open=False, what="replay ratio (fraction of source data)",
                   fix="replay is a fraction in [0, 1]; convert percentages by dividing by 100"),
    "r": Rule(0.0, 1.0, what="average target-language ratio",
              fix="r is a fraction in (0, 1]; convert percentages by dividing by 100"),
    "r_f": Rule(0.0, 1.0, what="final-stage target-language ratio",
                fix="r_f is a fraction in (0, 1]"),
    "r1": Rule(0.0, 1.0, lower_open=False, what="first-stage ratio", fix="r1 is a fraction in [0, 1]"),
    "r2": Rule(0.0, 1.0, what="second-stage ratio", fix="r2 is a fraction in (0, 1]"),
    "k": Rule(1.0, lower_open=False, what="epochs over the target corpus",
              fix="k counts epochs and must be >= 1"),
}


def _rows(idx, limit=10) -> str:
    idx = list(idx)
    s = ", ".join(str(i) for i in idx[:limit])
    return s + (f", ... ({len(idx)} rows)" if len(idx) > limit else "")


def validate(df: pd.DataFrame, law=None, *, columns=None, min_rows: int | None = None) -> pd.DataFrame:
    """Check a loss table against a law (or an explicit column list) and return a cleaned copy.

    Args:
        df: the loss table (canonical columns; extra columns pass through untouched).
        law: a registered law name or :class:`~bayes_scaling.laws.Law`; its columns plus ``loss``
            are checked, and at least ``n_params + 1`` rows are required.
        columns: alternatively, the columns to check.
        min_rows: override the minimum row count.

    Returns:
        A copy of ``df``; replay values outside [1e-9, 1 - 1e-9] are clipped into it and the clip
        is recorded in ``.attrs["clipped"]`` as ``{column: [row labels]}``.

    Raises:
        DataError: missing columns, NaN/inf, values outside a column's range, too few rows.
    """
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"expected a pandas DataFrame loss table, got {type(df).__name__}")
    variables = {}
    if law is not None:
        law = get_law(law)
        for v in law.variables:
            if v in law.defaults and law.column(v) not in df.columns:
                continue
            variables[law.column(v)] = v
        min_rows = len(law.params) + 1 if min_rows is None else min_rows
    for c in columns or ():
        variables.setdefault(c, c)
    variables = {"loss": "loss", **variables}

    missing = [c for c in variables if c not in df.columns]
    if missing:
        need = f" for law {law.name}" if law is not None else ""
        raise DataError(
            f"missing column(s) {missing}{need}; the table has {list(df.columns)}. "
            "Rename your columns to the canonical names (see DESIGN.md: loss, N, D, ptpp, replay, ...)"
            + (" or map them with law.renamed(...)" if law is not None else "")
        )

    out = df.copy()
    for col, var in variables.items():
        s = out[col]
        if not pd.api.types.is_numeric_dtype(s):
            raise DataError(f"column {col!r} must be numeric, found dtype {s.dtype}")
        v = s.to_numpy(dtype=float)
        nonfinite = ~np.isfinite(v)
        if nonfinite.any():
            raise DataError(
                f"column {col!r} has NaN/inf at rows {_rows(out.index[nonfinite])}; "
                "drop those rows or fill in the measured values"
            )
        rule = RULES.get(var) or RULES.get(col)
        if rule is not None:
            bad = rule.bad(v)
            if bad.any():
                raise DataError(
                    f"column {col!r} ({rule.what}) must be in {rule.describe()}; rows "
                    f"{_rows(out.index[bad])} have {np.unique(v[bad])[:5].tolist()}. Fix: {rule.fix}"
                )
        if var == "replay":
            lo, hi = REPLAY_CLIP
            clip = (v < lo) | (v > hi)
            if clip.any():
                out[col] = np.clip(v, lo, hi)
                out.attrs.setdefault("clipped", {})[col] = out.index[clip].tolist()
                warnings.warn(
                    f"column {col!r}: {clip.sum()} replay values outside [1e-9, 1-1e-9] clipped "
                    f"(rows {_rows(out.index[clip])}), as in the PTPP paper's fitting recipe",
                    stacklevel=2,
                )

    if min_rows is not None and len(out) < min_rows:
        raise DataError(
            f"{len(out)} rows is too few: {law.name if law is not None else 'the fit'} needs at least "
            f"{min_rows} (free parameters + 1); add runs or freeze parameters with fixed={{...}}"
        )
    dup = out.duplicated(subset=list(variables), keep=False)
    if dup.any():
        warnings.warn(
            f"rows {_rows(out.index[dup])} repeat the same ({', '.join(variables)}) values; "
            "keep them only if they are genuine repeated measurements",
            stacklevel=2,
        )
    return out
