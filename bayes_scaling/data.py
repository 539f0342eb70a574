"""Loss-table validation: canonical columns checked once, at the boundary.

The canonical columns are ``loss, N, D, ptpp, replay, domain, M, D_T, k, r, r_f, r1, r2, U`` (their
meaning and range: :data:`RULES`).

``validate(df, law)`` returns a cleaned copy or raises one :class:`~bayes_scaling.errors.DataError`
naming the column, the offending rows and the fix. The PTPP paper clips the replay ratio to
[1e-9, 1 - 1e-9]; that clip is applied here and recorded in ``df.attrs["clipped"]`` (and warned
about), never silently.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import DataError, SignedTargetWarning
from .laws import get as get_law

REPLAY_CLIP = (1e-9, 1.0 - 1e-9)  # the PTPP paper clips r to [1e-9, 1 - 1e-9]


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
    "loss": Rule(0.0, what="validation loss (nats/token)",
                 fix="losses must be positive; drop or correct these rows, or, for a signed target "
                 "(a loss minus a baseline), let fit_posterior or fit_map fit it as loss + c "
                 "(their target_shift, picked by default unless set to 0)"),
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


#: The rules that hold for any law's columns: a loss, a model size and a token count are positive.
#: The other rules (ratios, epochs, replay, ...) are the shipped laws' conventions for those names;
#: a law of one's own that reads a column of such a name (a mixture proportion ``r2`` that may be
#: 0, an ``M`` that is not FLOPs) is given its values as they are, and its own function decides
#: what they mean (:func:`conventions_apply`).
UNIVERSAL_RULES = ("loss", "N", "D")


def conventions_apply(law) -> bool:
    """Whether ``law`` is one of the package's own (its function is defined in ``bayes_scaling``),
    whose columns follow the conventions of :data:`RULES` beyond :data:`UNIVERSAL_RULES` (and
    whose ``replay`` is clipped into ``REPLAY_CLIP``)."""
    if law is None:
        return True
    module = getattr(law.unshifted_fn, "__module__", "") or ""
    return module == "bayes_scaling" or module.startswith("bayes_scaling.")


CANONICAL = ("loss", "N", "D", "ptpp", "replay", "domain", "M", "D_T", "k", "r", "r_f", "r1", "r2",
             "U")
ROW_NOTE = " (rows are the table's index labels: in a CSV, 0-based data rows, header not counted)"


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
    law = get_law(law) if law is not None else None
    variables = _variables(df, law, columns)
    if law is not None and min_rows is None:
        min_rows = len(law.params) + 1
    out = df.copy()
    _check_columns(out, variables, law)
    for col, var in variables.items():
        if var == "replay" and conventions_apply(law):
            v = out[col].to_numpy(dtype=float)
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
            f"{min_rows} (free parameters + 1); add runs or hold parameters fixed "
            "(fixed={name: value}; on the command line --fixed NAME=VALUE)"
        )
    dup = out.duplicated(subset=list(variables), keep=False)
    if dup.any():
        warnings.warn(
            f"rows {_rows(out.index[dup])} repeat the same ({', '.join(variables)}) values; "
            "keep them only if they are genuine repeated measurements" + ROW_NOTE,
            stacklevel=2,
        )
    return out


def validate_inputs(df, law) -> None:
    """Check that the rows of ``df`` lie in ``law``'s input domain (the :data:`RULES` of the
    columns it reads; no ``loss`` needed), e.g. before predicting at them.

    Raises:
        DataError: a missing or non-numeric column, NaN/inf, or a value outside its range (a
            negative or zero ``N``, ``D`` ...), naming the column, the rows and the fix.
    """
    law = get_law(law)
    if not isinstance(df, pd.DataFrame):
        df = pd.DataFrame({k: np.asarray(v) for k, v in dict(df).items()})
    variables = _variables(df, law, None)
    del variables["loss"]
    _check_columns(df, variables, law, rows_needed=False)


def _variables(df, law, columns) -> dict:
    """{column: variable} to check: ``loss``, the law's columns (optional ones when present) and
    ``columns``."""
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"expected a pandas DataFrame loss table, got {type(df).__name__}")
    variables = {}
    if law is not None:
        for v in law.variables:
            if v in law.defaults and law.column(v) not in df.columns:
                continue
            variables[law.column(v)] = v
    for c in columns or ():
        variables.setdefault(c, c)
    return {"loss": "loss", **variables}


def _check_columns(df, variables, law, rows_needed=True) -> None:
    """Raise a DataError for the first missing, empty, non-numeric, non-finite or out-of-range
    column among ``variables`` ({column: variable})."""
    missing = [c for c in variables if c not in df.columns]
    if missing:
        need = f" for law {law.name}" if law is not None else ""
        raise DataError(
            f"missing column(s) {missing}{need}; the table has {list(df.columns)}. Rename the "
            f"table's columns to the canonical names ({', '.join(CANONICAL)})",
            python_hint=("or read them through law.renamed(name, variable='column')"
                         if law is not None else ""))
    if rows_needed and len(df) == 0:
        raise DataError(f"the table has no rows (only the columns {list(df.columns)}); add one "
                        "row per measured run")
    for col, var in variables.items():
        s = df[col]
        if not pd.api.types.is_numeric_dtype(s):
            num = pd.to_numeric(s, errors="coerce")
            text = num.isna() & s.notna()
            cells = ", ".join(f"row {i}: {s[i]!r}" for i in s.index[text][:5])
            raise DataError(
                f"column {col!r} must be numeric; it has text at rows {_rows(s.index[text])}"
                f"{' (' + cells + ')' if cells else ''}. Fix those cells (a number per row, no "
                "units or thousands separators)" + ROW_NOTE)
        v = s.to_numpy(dtype=float)
        nonfinite = ~np.isfinite(v)
        if nonfinite.any():
            raise DataError(
                f"column {col!r} has NaN/inf at rows {_rows(df.index[nonfinite])}; "
                "drop those rows or fill in the measured values" + ROW_NOTE
            )
        rule = RULES.get(var) or RULES.get(col)
        if rule is not None and (conventions_apply(law)
                                 or var in UNIVERSAL_RULES or col in UNIVERSAL_RULES):
            bad = rule.bad(v)
            if bad.any():
                raise DataError(
                    f"column {col!r} ({rule.what}) must be in {rule.describe()}; rows "
                    f"{_rows(df.index[bad])} have {np.unique(v[bad])[:5].tolist()}. Fix: {rule.fix}"
                    + ROW_NOTE
                )


def log_scaled(values) -> bool:
    """Whether an input is read in log space (distances, axes): when every value is positive (a
    size, a token count: a scale); a proportion that may be 0 or a signed input is read as it
    is, where a log would put every 0 at the same far end."""
    v = np.asarray(values, dtype=float)
    return bool(v.size) and bool(np.all(v > 0))


def input_space(ref, x=None) -> np.ndarray:
    """``x`` (default ``ref``) in the space distances between rows are measured in: the natural log
    when the reference ``ref`` is :func:`log_scaled`, the values as they are otherwise."""
    ref = np.asarray(ref, dtype=float)
    x = ref if x is None else np.asarray(x, dtype=float)
    return np.log(np.maximum(x, 1e-300)) if log_scaled(ref) else x


def input_relations(law, df) -> list[str]:
    """What a refusal should say about the table's design: each input of ``law`` that takes one
    value in ``df``, and, among the others, an exact linear relation of their
    :func:`input_space` values (two inputs: ``log D = a + b log N`` at every row, as on runs at
    one tokens-per-parameter ratio). Terms of inputs that move together cannot be told apart, so
    their parameters rest on the priors along a ridge and more draws do not help."""
    cols = [law.column(v) for v in law.variables if law.column(v) in df]
    out, varying = [], {}
    for c in cols:
        x = input_space(df[c].to_numpy(dtype=float))
        if np.ptp(x) <= 1e-12 * max(1.0, float(np.max(np.abs(x)))):
            out.append(f"{c} takes one value ({df[c].iloc[0]:.4g}) in the table: the law's terms "
                       f"in {c} are not identified unless their parameters are fixed "
                       f"(fixed=...); or add runs at other values of {c}")
        else:
            varying[c] = x
    if len(varying) >= 2 and len(df) > len(varying):
        names = list(varying)
        X = np.column_stack([varying[c] for c in names])
        X = (X - X.mean(0)) / X.std(0)
        sv = np.linalg.svd(X, compute_uv=False)
        if sv[-1] <= 1e-6 * sv[0]:
            logs = {c: ("log " if log_scaled(df[c]) else "") + c for c in names}
            if len(names) == 2:
                b, a = np.polyfit(varying[names[0]], varying[names[1]], 1)
                how = f"{logs[names[1]]} = {a:.4g} {'+' if b >= 0 else '-'} {abs(b):.4g} " \
                      f"{logs[names[0]]} at every row"
            else:
                how = "one is a linear combination of the others at every row"
            out.append(f"the inputs {', '.join(names)} move together ({how}): the law's terms in "
                       "them cannot be told apart, so their parameters rest on the priors; add "
                       "runs off that line or fix some of them (fixed=...)")
    return out


def target_shift_of(loss) -> float:
    """The constant that makes a signed target a positive one (0 when every finite value is
    already positive).

    The likelihood lives on ``log L``; a target with values at or below 0 (ScaleBench's
    unigram-normalised loss, a loss minus an entropy) is fitted as ``L + c``, with ``c`` such
    that the smallest shifted value is the larger of the table's range and half its largest
    magnitude: ``c = -min + max(max - min, max|L| / 2)`` (1 - min when every value is 0),
    rounded up to two significant digits. The noise model is then relative to ``L + c``, about
    as wide as the table's own spread.
    """
    y = np.asarray(pd.to_numeric(pd.Series(np.ravel(loss)), errors="coerce"), float)
    y = y[np.isfinite(y)]
    if not len(y) or y.min() > 0:
        return 0.0
    lo, hi = float(y.min()), float(y.max())
    room = max(hi - lo, 0.5 * max(abs(lo), abs(hi))) or 1.0
    c = room - lo
    step = 10.0 ** (np.floor(np.log10(c)) - 1)
    return float(f"{np.ceil(c / step) * step:.3g}")


def as_rows(rows, what: str = "the rows") -> pd.DataFrame:
    """A table of rows to predict at: a DataFrame as it is, a Series as one row, a mapping of
    column names to scalars (one row) or to sequences of one length; anything else is an error."""
    if isinstance(rows, pd.DataFrame):
        return rows
    if isinstance(rows, pd.Series):
        return rows.to_frame().T.infer_objects()
    if isinstance(rows, Mapping):
        if all(np.ndim(v) == 0 for v in rows.values()):
            return pd.DataFrame({k: [v] for k, v in rows.items()})
        try:
            return pd.DataFrame({k: np.ravel(v) if np.ndim(v) else v for k, v in rows.items()})
        except ValueError:
            sizes = {str(k): int(np.size(v)) for k, v in rows.items()}
            raise DataError(f"{what}: the columns have different lengths {sizes}; give each "
                            "column one value per row (or one value for every row)") from None
    raise DataError(f"{what}: expected a DataFrame, a Series (one row) or a dict of columns, got "
                    f"{type(rows).__name__}")


def warn_mixed_signs(loss: pd.Series, what: str, how: str, stacklevel: int = 3) -> None:
    """A :class:`~bayes_scaling.errors.SignedTargetWarning` when ``loss`` is positive on some rows
    and at or below 0 on others (a sentinel such as -1 or 0 for a run not made looks just like
    that), naming those rows; ``how`` says what is done with them."""
    y = pd.to_numeric(loss, errors="coerce").to_numpy(float)
    low = np.flatnonzero(np.isfinite(y) & (y <= 0))
    if not len(low) or not (y > 0).any():
        return
    warnings.warn(
        f"{what}: the loss is at or below 0 at {len(low)} of {int(np.isfinite(y).sum())} rows "
        f"({loss.index[low[:10]].tolist()}: {y[low[:3]].tolist()}) and positive at the others; "
        f"{how}. If those values mark runs not made, leave their loss empty or drop the rows",
        SignedTargetWarning, stacklevel=stacklevel)


def shifted_table(law, df, target_shift=None):
    """``(law, df, c)``: the law and table of ``loss + c`` (``fit_posterior`` and ``fit_map``'s
    ``target_shift``): ``None`` picks ``c`` by :func:`target_shift_of` when ``df`` has a numeric
    ``loss`` column (0 otherwise: validation names what is wrong), a number fixes it, 0 keeps the
    table as it is. The law is ``law.shifted(c)`` (``Law.shifted``)."""
    law = get_law(law)
    if target_shift is None:
        target_shift = (target_shift_of(df["loss"]) if isinstance(df, pd.DataFrame)
                        and "loss" in df and pd.api.types.is_numeric_dtype(df["loss"]) else 0.0)
        if target_shift:
            warn_mixed_signs(df["loss"], "the table", f"it is fitted as a signed target, loss + "
                             f"{target_shift:g} (target_shift={target_shift:g}, on the command "
                             f"line --target-shift {target_shift:g}, says so and silences this)",
                             stacklevel=4)
    if isinstance(target_shift, bool) or not isinstance(target_shift, (int, float, np.number)) \
            or not np.isfinite(target_shift):
        raise DataError(f"target_shift must be a finite number or None (picked from the table), "
                        f"got {target_shift!r}")
    c = float(target_shift)
    if c:
        df = df.assign(loss=df["loss"] + c)
    return law.shifted(c), df, c
