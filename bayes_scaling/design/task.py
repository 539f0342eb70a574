"""A design task: a candidate pool, a target region, a law, a cost per run and the budgets."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from .. import scalebench
from ..errors import DataError
from ..checks import check_traceable
from ..laws import Law
from ..laws import get as get_law


@dataclass(frozen=True)
class ColumnProduct:
    """Cost of a run as ``factor`` times the product of columns (e.g. ``6 N D``); picklable."""

    columns: tuple[str, ...]
    factor: float = 1.0

    def __call__(self, df: pd.DataFrame) -> np.ndarray:
        out = np.full(len(df), float(self.factor))
        for c in self.columns:
            out = out * df[c].to_numpy(dtype=float)
        return out


@dataclass(frozen=True)
class Group:
    """One group's pool and target rows, with the law's inputs read once."""

    name: str
    x: dict  # law variable -> pool values
    y: np.ndarray
    cost: np.ndarray
    x_test: dict
    y_test: np.ndarray


@dataclass(frozen=True)
class Task:
    """Which runs to buy from ``train`` to forecast ``test`` with ``law``, under cost budgets.

    Args:
        name: label of the task in results.
        train: the candidate pool (one row per run that could be bought).
        test: the target region (never bought): the rows the forecast is scored on.
        law: a :class:`~bayes_scaling.laws.Law` or a registered law name.
        target: the column the law predicts.
        cost: cost of each run: a callable ``df -> array``, a column name, or ``"6ND"`` (six times
            the law's ``N`` and ``D`` columns).
        group: a column whose groups are fitted separately (ScaleBench's parallel task), or None.
        budgets: fractions of the group pool's total cost at which the fit is scored, increasing.
    """

    name: str
    train: pd.DataFrame = field(repr=False)
    test: pd.DataFrame = field(repr=False)
    law: Law | str = None
    target: str = "loss"
    cost: Callable | str = "6ND"
    group: str | None = None
    budgets: Sequence[float] = (0.01, 0.05, 0.1)

    def __post_init__(self):
        object.__setattr__(self, "law", get_law(self.law))
        check_traceable(self.law)
        object.__setattr__(self, "budgets", tuple(float(b) for b in self.budgets))
        b = np.asarray(self.budgets)
        if len(b) == 0 or np.any(b <= 0) or np.any(b > 1) or np.any(np.diff(b) <= 0):
            raise DataError(f"task {self.name}: budgets must be increasing fractions in (0, 1], "
                            f"got {self.budgets}")
        for side, df, what in (("train", self.train, "candidate runs to buy"),
                               ("test", self.test, "target rows to forecast")):
            if len(df) == 0:
                raise DataError(f"task {self.name}: {side} has no rows; give at least one row of "
                                f"{what}")
            needed = list(self.law.columns) + [self.target] + ([self.group] if self.group else [])
            missing = [c for c in needed if c not in df.columns]
            if missing:
                raise DataError(f"task {self.name}: {side} lacks columns {missing} (law "
                                f"{self.law.name} reads {list(self.law.columns)}, target "
                                f"{self.target!r}); rename the columns or set law.column_map")
            for c in list(self.law.columns) + [self.target]:
                bad = np.flatnonzero(~np.isfinite(pd.to_numeric(df[c], errors="coerce")))
                if len(bad):
                    raise DataError(f"task {self.name}: {side} column {c!r} is not a finite number "
                                    f"in rows {bad[:10].tolist()}; drop or fix those rows")
        cost = self.costs(self.train)
        bad = np.flatnonzero(~(np.isfinite(cost) & (cost > 0)))
        if len(bad):
            raise DataError(f"task {self.name}: the cost of train rows {bad[:10].tolist()} is "
                            "not a positive number; fix the cost columns or the cost function")

    def costs(self, df: pd.DataFrame) -> np.ndarray:
        """Cost of each row of ``df``."""
        if callable(self.cost):
            return np.asarray(self.cost(df), dtype=float)
        if self.cost == "6ND":
            return ColumnProduct((self.law.column("N"), self.law.column("D")), 6.0)(df)
        if self.cost in df.columns:
            return df[self.cost].to_numpy(dtype=float)
        raise DataError(f"task {self.name}: cost {self.cost!r} is neither a callable, a column of "
                        "train, nor '6ND'")

    def groups(self) -> list[Group]:
        """The groups in order of first appearance in ``train`` (one group when ``group`` is None).
        A group with test rows but no pool rows, or the reverse, is an error."""
        if self.group is None:
            parts = [("all", self.train, self.test)]
        else:
            names = list(dict.fromkeys(self.train[self.group]))
            extra = sorted(set(self.test[self.group]) - set(names), key=str)
            if extra:
                raise DataError(f"task {self.name}: test groups {extra} have no train rows")
            parts = [(g, self.train[self.train[self.group] == g],
                      self.test[self.test[self.group] == g]) for g in names]
        out = []
        for name, tr, te in parts:
            out.append(Group(
                name=str(name),
                x={v: tr[self.law.column(v)].to_numpy(dtype=float) for v in self.law.variables},
                y=tr[self.target].to_numpy(dtype=float),
                cost=self.costs(tr),
                x_test={v: te[self.law.column(v)].to_numpy(dtype=float)
                        for v in self.law.variables},
                y_test=te[self.target].to_numpy(dtype=float),
            ))
        return out


#: ScaleBench's cost of one run per task (SOURCE.md).
SCALEBENCH_COSTS = {
    "data_constrained_scaling_law": "6ND",
    "farseer_scaling_law": "6ND",
    "parallel_scaling_law": "num_params",
    "vocab_scaling_law": ColumnProduct(("non_vocab_parameters", "num_characters")),
}


def scalebench_task(task: str, law_id: str, data_dir=None,
                    budgets: Sequence[float] = (0.01, 0.05, 0.1)) -> Task:
    """The ScaleBench task ``task`` with its law ``law_id``, e.g.
    ``scalebench_task("vocab_scaling_law", "sl_3")``; data from ``data_dir`` (see
    :func:`bayes_scaling.scalebench.data_dir`)."""
    train, test = scalebench.load(task, data_dir)
    groups = train["group"].nunique() > 1
    return Task(name=f"{task}/{law_id}", train=train, test=test, law=scalebench.get(task, law_id),
                target=scalebench.TARGETS[task], cost=SCALEBENCH_COSTS[task],
                group="group" if groups else None, budgets=budgets)
