"""The M3 paper's multi-split extrapolation protocol (Akimoto et al., *M3 Scaling Law*, Appendix
C.2): threshold splits per axis, R^2 per split (Eq. 19), the exclusion rule and averaging."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import metrics as _metrics
from ..errors import BayesScalingError, DataError, SplitSkipped
from ..fit import fit_map
from .common import named_laws, require_columns
from .report import Evaluation

__all__ = ["C0", "DERIVED", "DT0", "M0", "M3_SPLITS", "M3_SPLITS_2STAGE", "PRESETS", "Split",
           "aggregate_splits", "axis_splits", "split_masks"]

# The M3 paper's multi-split protocol


C0 = 1e18                       #: M3 paper Eq. 14: reference compute budget (FLOPs)
DT0 = 5.8316 * C0 ** 0.4757     #: M3 paper Eq. 14: reference target corpus size (tokens)
M0 = C0 / DT0                   #: M3 paper Eq. 14: reference model scale (FLOPs per token)

#: Axis values derived from canonical columns when the table does not carry them (M3 Eq. 15).
DERIVED: dict[str, tuple[str, Callable]] = {
    "f_C": ("C", lambda v: np.log2(v / C0)),
    "f_M": ("M", lambda v: np.log2(M0 / v)),
    "f_D": ("D_T", lambda v: np.log2(v / DT0)),
    "log2_D": ("D", np.log2),
}

_OPS = {">=": np.greater_equal, "<=": np.less_equal, ">": np.greater, "<": np.less,
        "==": np.equal}


@dataclass(frozen=True)
class Split:
    """One held-out split: the rows whose ``column`` satisfies ``op threshold`` form the test set.

    Attributes:
        name: split name (e.g. ``"C_ge0"``).
        axis: the axis it belongs to (splits are averaged per axis first).
        column: a table column, or a derived axis of :data:`DERIVED` (``f_C``, ``f_M``, ``f_D``,
            ``log2_D``) computed from a canonical column when the table does not carry it.
        op: one of ``>=, <=, >, <, ==``.
        threshold: the threshold. Comparisons allow ``1e-6`` of slack so integer factors derived
            through logarithms compare as the integers they are.
    """

    name: str
    axis: str
    column: str
    op: str
    threshold: float

    def __post_init__(self):
        if self.op not in _OPS:
            raise BayesScalingError(f"split {self.name}: op must be one of {list(_OPS)}, "
                                    f"got {self.op!r}")

    def values(self, df: pd.DataFrame) -> np.ndarray:
        if self.column in df.columns:
            return df[self.column].to_numpy(dtype=float)
        if self.column in DERIVED:
            src, fn = DERIVED[self.column]
            if src in df.columns:
                return np.asarray(fn(df[src].to_numpy(dtype=float)), dtype=float)
            raise DataError(f"split {self.name} needs column {self.column!r} or {src!r} to derive "
                            f"it from; the table has {list(df.columns)}")
        raise DataError(f"split {self.name} needs column {self.column!r}; the table has "
                        f"{list(df.columns)}")

    def test_mask(self, df: pd.DataFrame) -> np.ndarray:
        v, t, tol = self.values(df), float(self.threshold), 1e-6
        if self.op == ">=":
            return v >= t - tol
        if self.op == "<=":
            return v <= t + tol
        if self.op == ">":
            return v > t + tol
        if self.op == "<":
            return v < t - tol
        return np.abs(v - t) <= tol


def _s(name, axis, column, op, threshold):
    return Split(name, axis, column, op, threshold)


#: The M3 paper's 18 splits for the combined evaluation (Appendix C.2.1, Table 7). Axes: C via
#: ``f_C = log2(C / C0)``, M via ``f_M = log2(M0 / M)`` (so ``M_le-1`` holds out the *larger*
#: models), D_T via ``f_D = log2(D_T / D_T0)``, total tokens D via ``log2 D``, ``r`` and ``k``.
M3_SPLITS: tuple[Split, ...] = (
    _s("C_ge0", "C", "f_C", ">=", 0), _s("C_ge-1", "C", "f_C", ">=", -1),
    _s("M_le-1", "M", "f_M", "<=", -1), _s("M_le0", "M", "f_M", "<=", 0),
    _s("M_le1", "M", "f_M", "<=", 1),
    _s("DT_ge0", "D_T", "f_D", ">=", 0), _s("DT_ge-1", "D_T", "f_D", ">=", -1),
    _s("DT_ge-2", "D_T", "f_D", ">=", -2),
    _s("D_ge34", "D", "log2_D", ">=", 34), _s("D_ge33", "D", "log2_D", ">=", 33),
    _s("D_ge32", "D", "log2_D", ">=", 32),
    _s("r_le0.125", "r", "r", "<=", 0.125), _s("r_le0.25", "r", "r", "<=", 0.25),
    _s("r_ge0.5", "r", "r", ">=", 0.5), _s("r_ge1", "r", "r", ">=", 1.0),
    _s("k_ge32", "k", "k", ">=", 32), _s("k_ge64", "k", "k", ">=", 64),
    _s("k_ge128", "k", "k", ">=", 128),
)

#: The 13 splits of the multi-lingual single-epoch evaluation (M3 paper Appendix C.2.2, Table 8).
M3_SPLITS_2STAGE: tuple[Split, ...] = tuple(
    s for s in M3_SPLITS if s.axis != "k" and s.name not in ("r_le0.25", "r_ge1"))

PRESETS = {"m3": M3_SPLITS, "m3_2stage": M3_SPLITS_2STAGE}


def _as_splits(splits) -> tuple[Split, ...]:
    if isinstance(splits, str):
        if splits not in PRESETS:
            raise BayesScalingError(f"unknown split preset {splits!r}; presets: {sorted(PRESETS)}")
        return PRESETS[splits]
    if isinstance(splits, pd.DataFrame):
        splits = splits.to_dict("records")
    out = []
    for s in splits:
        if isinstance(s, Split):
            out.append(s)
        elif isinstance(s, Mapping):
            try:
                out.append(Split(**s))
            except TypeError as exc:
                raise BayesScalingError(f"a split needs name, axis, column, op, threshold: {exc}") \
                    from None
        else:
            raise BayesScalingError(f"splits must be Split objects or dicts, got {type(s).__name__}")
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise BayesScalingError(f"split names must be unique, got {names}")
    if not out:
        raise BayesScalingError("no splits given")
    return tuple(out)


def split_masks(df: pd.DataFrame, splits) -> pd.DataFrame:
    """Boolean test-set membership of every row (rows) for every split (columns)."""
    return pd.DataFrame({s.name: s.test_mask(df) for s in _as_splits(splits)}, index=df.index)


def aggregate_splits(detail: pd.DataFrame, axes: Sequence[str] | None = None):
    """Exclusion rule and averaging of the M3 paper (Appendix C.2.3), on per-split R^2 values.

    Args:
        detail: one row per (``group``, ``split``, ``law``) with ``axis``, ``r2`` and ``status``
            (``"ok"``, ``"skipped"`` when a side has too few rows or the fitter raised
            :class:`~bayes_scaling.errors.SplitSkipped`, ``"failed"`` when the fit failed or gave
            an invalid R^2). ``group`` is e.g. the language; use one value for none.
        axes: axis order of the output (default: order of first appearance).

    Rules:
        1. A (group, split) is *excluded for every law* when any law's status there is not ``ok``.
        2. Per group, law and axis: the mean R^2 over the non-excluded splits of that axis
           (undefined when none remain).
        3. Per law and axis: the unweighted mean of the defined per-group values.
        4. ``Avg``: the unweighted mean of the defined per-axis values.

    Returns:
        (table, per_group, detail): ``table`` indexed by law with one column per axis plus
        ``Avg``; ``per_group`` the same per group; ``detail`` with an ``excluded`` column added.
    """
    d = detail.copy()
    if "group" not in d:
        d["group"] = "all"
    ok = (d["status"] == "ok") & np.isfinite(d["r2"].astype(float))
    bad = (~ok).groupby([d["group"], d["split"]]).transform("any")
    d["excluded"] = bad.to_numpy()
    axes = list(dict.fromkeys(d["axis"])) if axes is None else list(axes)
    laws = list(dict.fromkeys(d["law"]))
    groups = list(dict.fromkeys(d["group"]))
    kept = d[~d["excluded"]]
    per_group = (kept.groupby(["group", "law", "axis"])["r2"].mean().unstack("axis")
                 .reindex(columns=axes))
    per_group = per_group.reindex(pd.MultiIndex.from_product([groups, laws],
                                                             names=["group", "law"]))
    table = per_group.groupby(level="law", sort=False).mean()  # pandas mean skips NaN
    table = table.reindex(laws)
    table["Avg"] = table[axes].mean(axis=1)
    per_group["Avg"] = per_group[axes].mean(axis=1)
    return table, per_group, d


def axis_splits(
    laws,
    df: pd.DataFrame,
    splits="m3",
    *,
    delta: float = 1e-3,
    n_starts: int = 32,
    seed: int = 0,
    min_rows: int = 10,
    group: str | None = None,
    fitter: Callable | None = None,
    fit_kwargs: Mapping | None = None,
    pool: pd.DataFrame | None = None,
    scored: Mapping[str, Callable] | None = None,
):
    """The M3 paper's multi-split extrapolation protocol (Appendix C.2), on any loss table.

    For every split (and every value of ``group``, e.g. each language): the rows satisfying the
    split's test condition form the test set, the rest the training set. A split with fewer than
    ``min_rows`` rows on either side is skipped. Each law is fitted on the training set and scored
    by R^2 on the original loss scale (M3 Eq. 19, ``bs.metrics.r2``); a fit that raises, or an
    R^2 that is not finite (e.g. non-positive predictions), is a failure. Aggregation follows
    :func:`aggregate_splits`: a split is excluded for every law when any law fails or it is
    skipped; per-axis means over the remaining splits, then the unweighted mean over groups, then
    ``Avg`` over axes.

    Args:
        laws: a law name, a list of names/Laws or ``{label: law}``.
        df: the loss table (validated by each fit).
        splits: :class:`Split` objects, dicts with the same fields, a DataFrame of them, or a
            preset name: ``"m3"`` (the 18 splits of Table 7, :data:`M3_SPLITS`) or
            ``"m3_2stage"`` (the 13 of Table 8).
        delta: Huber threshold of the default fitter (the M3 paper: 1e-3).
        n_starts, seed: multi-start settings of the default fitter.
        min_rows: minimum rows on each side (the paper: 10).
        group: optional column whose values are evaluated separately and averaged unweighted
            (the paper's languages).
        fitter: ``fitter(law, train_df) -> object with .predict(df)``; default
            ``bs.fit_map(law, train_df, delta=delta, n_starts=n_starts, seed=seed)``. Pass e.g.
            ``lambda law, d: bs.fit_two_phase(law, d, phase1=..., delta=1e-3)[0]`` for the paper's
            two-phase fits. A fitter that raises :class:`~bayes_scaling.errors.SplitSkipped`
            (the protocol rules the fit out, e.g. no phase-1 rows on the training side) marks the
            split skipped; the laws after it are not fitted there (the split is excluded for all).
        fit_kwargs: extra keyword arguments for the default fitter.
        pool: extra rows outside ``df`` the fitter may draw on (the M3 paper's setting (d) takes
            its phase-1 monolingual rows from the whole table). The fitter is then called as
            ``fitter(law, train_df, pool_train)`` with the pool rows of the same group on the
            split's training side.
        scored: ``{name: df -> mask}``: score each split's test rows in these subsets separately
            from one fit (the M3 paper's setting (d): 1-stage and 2-stage test rows). A fit is made
            when the training side and at least one subset have ``min_rows`` rows; a subset with
            fewer is skipped.

    Returns:
        :class:`Evaluation` with ``table`` (one row per law: one column per axis and ``Avg``),
        ``per_group`` and ``detail`` (one row per group, split and law: ``n_train``, ``n_test``,
        ``r2``, ``status``, ``reason``, ``excluded``); with ``scored``, ``{name: Evaluation}``
        (the fits are shared).
    """
    named = named_laws(laws)
    splits = _as_splits(splits)
    require_columns(df, ["loss"] + ([group] if group else []), "axis_splits")
    fkw = dict(fit_kwargs or {})
    fitter_name = "fit_map" if fitter is None else getattr(fitter, "__name__", "custom")
    if fitter is None:
        def fitter(law, d):
            return fit_map(law, d, delta=delta, n_starts=n_starts, seed=seed, **fkw)
    subsets = dict(scored) if scored else {None: None}

    groups = [(None, df)] if group is None else [(g, df[df[group] == g])
                                                 for g in dict.fromkeys(df[group])]
    rows, fits = {name: [] for name in subsets}, {}
    for g, gdf in groups:
        gpool = None if pool is None else (pool if g is None else pool[pool[group] == g])
        for s in splits:
            test_mask = s.test_mask(gdf)
            train, test = gdf[~test_mask], gdf[test_mask]
            tests = {name: test if sel is None else test[np.asarray(sel(test), bool)]
                     for name, sel in subsets.items()}
            base = {"group": "all" if g is None else g, "split": s.name, "axis": s.axis,
                    "n_train": len(train)}
            fit_it = len(train) >= min_rows and any(len(t) >= min_rows for t in tests.values())
            skipped = None
            for label, law in named.items():
                fit, status, reason = None, "skipped", f"fewer than {min_rows} rows on a side"
                if not fit_it:
                    pass
                elif skipped is not None:  # excluded for every law anyway: no need to fit
                    reason = f"not fitted: skipped for {skipped}"
                else:
                    try:
                        fit = (fitter(law, train) if gpool is None else
                               fitter(law, train, gpool[~s.test_mask(gpool)]))
                        fits[(base["group"], s.name, label)] = fit
                    except SplitSkipped as exc:
                        skipped, reason = label, str(exc).splitlines()[0][:200]
                    except (BayesScalingError, FloatingPointError) as exc:
                        status, reason = "failed", str(exc).splitlines()[0][:200]
                for name, t in tests.items():
                    row = dict(base, law=label, n_test=len(t), r2=np.nan, status=status,
                               reason=reason)
                    if fit is not None and len(t) < min_rows:
                        row["reason"] = f"fewer than {min_rows} rows on a side"
                    elif fit is not None:
                        try:
                            r2 = _metrics.r2(t["loss"], np.asarray(fit.predict(t), float))
                            ok = math.isfinite(r2)
                            row.update(r2=r2, status="ok" if ok else "failed",
                                       reason="" if ok else "R^2 not finite")
                        except (BayesScalingError, FloatingPointError) as exc:  # e.g. NaN preds
                            row.update(status="failed", reason=str(exc).splitlines()[0][:200])
                    rows[name].append(row)
    axes = list(dict.fromkeys(s.axis for s in splits))
    settings = {"splits": [s.name for s in splits], "delta": delta, "n_starts": n_starts,
                "seed": seed, "min_rows": min_rows, "group": group, "fitter": fitter_name}
    out = {}
    for name, rows_ in rows.items():
        table, per_group, detail = aggregate_splits(pd.DataFrame(rows_), axes)
        table = table.reset_index().rename(columns={"law": "label"})
        n_used = (detail[~detail["excluded"]].groupby("law")["split"].count()
                  .reindex(list(named)).fillna(0).astype(int))
        table["n_splits"] = n_used.to_numpy()
        out[name] = Evaluation("axis_splits", table, detail, fits,
                               dict(settings, **({"scored": name} if scored else {})),
                               per_group=per_group)
    return out if scored else out[None]
