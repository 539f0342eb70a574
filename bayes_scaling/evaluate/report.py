"""The result of a held-out protocol (:class:`Evaluation`) and its Markdown rendering."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["Evaluation", "markdown_table"]


@dataclass
class Evaluation:
    """The result of a held-out protocol.

    Attributes:
        protocol: ``"ptpp_holdout"`` or ``"axis_splits"``.
        table: one row per evaluated law (and fit kind), one column per metric (PTPP hold-out)
            or per axis plus ``Avg`` (axis splits).
        detail: per test row (PTPP hold-out: observation, prediction, interval, anchor flag) or
            per (group, split, law) (axis splits: sizes, R^2, status, exclusion).
        fits: the fitted objects, keyed like the table's ``label`` (and ``fit`` kind).
        settings: every setting of the run, plus the record of rows set aside (e.g. D = 0 rows).
        per_group: axis splits only: the per-group (e.g. per-language) axis averages.
    """

    protocol: str
    table: pd.DataFrame
    detail: pd.DataFrame
    fits: dict = field(default_factory=dict, repr=False)
    settings: dict = field(default_factory=dict)
    per_group: pd.DataFrame | None = None

    def long(self) -> pd.DataFrame:
        """The table in tidy form: one row per (law, fit, metric) with its ``value``."""
        ids = [c for c in ("label", "law", "fit", "role") if c in self.table.columns]
        value_cols = [c for c in self.table.columns if c not in ids
                      and pd.api.types.is_numeric_dtype(self.table[c])]
        return self.table.melt(id_vars=ids, value_vars=value_cols, var_name="metric",
                               value_name="value")

    def to_markdown(self, columns: Sequence[str] | None = None, digits: int = 3) -> str:
        """The table as a GitHub Markdown table (numbers in 3 significant digits by default)."""
        df = self.table if columns is None else self.table[list(columns)]
        return markdown_table(df, digits=digits)

    def __repr__(self):
        return f"Evaluation({self.protocol}: {len(self.table)} rows)\n{self.table.to_string()}"


def _fmt(v, digits=3) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if not math.isfinite(v):
            return "—" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if v == 0:
            return "0"
        if abs(v) < 1e-2 or abs(v) >= 1e5:
            return f"{v:.{digits - 1}e}"
        if abs(v) >= 10 ** digits:
            return f"{v:.0f}"
        return f"{v:#.{digits}g}".rstrip(".") if abs(v) >= 1 else f"{v:.{digits}f}"
    return str(v).replace("|", "\\|")


def markdown_table(df: pd.DataFrame, digits: int = 3, index: bool = False) -> str:
    """Render ``df`` as a GitHub Markdown table without extra dependencies.

    Floats below 1e-2 (or above 1e5) in magnitude are written in scientific notation with
    ``digits`` significant digits, others with ``digits`` decimals (below 1) or significant digits;
    NaN is written as an em dash.
    """
    if index:
        df = df.reset_index()
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v, digits) for v in row) + " |")
    return "\n".join(lines)
