"""The fitted range of a table and how far a row lies beyond it (docs/forecasting.md,
"Extrapolation distance"): in the law's input columns, in log space (a column not positive
throughout the fit: as it is), each column scaled by its fitted width (:class:`FittedRange`,
:func:`extrapolation`), or in decades (:meth:`FittedRange.decades`), the unit of the
discrepancy's prior where no rehearsal is possible."""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from scipy.spatial import ConvexHull, QhullError

from ..data import log_scaled
from .predictive import idata_group

__all__ = ["HULL_TOL", "FittedRange", "extrapolation", "fitted_table", "input_columns"]

#: A row closer than this to the fitted hull (in scaled log units) is inside it.
HULL_TOL = 1e-9


def fitted_table(post) -> pd.DataFrame:
    """The table a posterior was fitted on (its input columns and ``loss``), from its idata."""
    cd = idata_group(post, "constant_data")
    if cd is None:  # a posterior built without its table: no range is known, nothing extrapolates
        return pd.DataFrame()
    return pd.DataFrame({str(k): np.asarray(cd[k]) for k in cd.data_vars})


def input_columns(law) -> list[str]:
    """The columns a law reads (one per variable)."""
    return [law.column(v) for v in law.variables]


def _hull_facets(F):
    """Unit outward normals ``(m, k)`` and offsets ``(m,)`` of the convex hull of the fitted
    points (``n . x + b <= 0`` inside), over the columns that vary; ``None`` when fewer than two
    vary or the points span less than their dimension."""
    vary = F.max(0) > F.min(0)
    if vary.sum() < 2:
        return None
    try:
        hull = ConvexHull(np.unique(F[:, vary], axis=0))
    except (QhullError, ValueError):
        return None
    normals = np.zeros((len(hull.equations), F.shape[1]))
    normals[:, vary] = hull.equations[:, :-1]
    return normals, hull.equations[:, -1]


class FittedRange:
    """A fitted table's range, computed once for many queries (:meth:`locate`): its columns
    (those of ``columns`` it has) in log space scaled to ``[0, 1]`` (``F``; a constant column
    has width 1) and the facets of their convex hull."""

    def __init__(self, fitted: pd.DataFrame, columns, log=None):
        self.fitted, self.columns = fitted, list(columns)
        self.cols = [c for c in self.columns if c in fitted]
        values = fitted[self.cols].to_numpy(float).reshape(len(fitted), len(self.cols))
        # log space for a column positive throughout the fit, its values as they are otherwise;
        # ``log`` ({column: bool}) keeps another table's choice (a part of it, as a rehearsal's
        # inner rows, is measured as the whole table is)
        self.log = np.array([log[c] if log is not None and c in log else log_scaled(v)
                             for c, v in zip(self.cols, values.T)], bool)
        F = self._space(values)
        self.lo = F.min(0, initial=np.inf)
        hi = F.max(0, initial=-np.inf)
        self.width = np.where(hi > self.lo, hi - self.lo, 1.0)
        self.F = (F - self.lo) / self.width

    def _space(self, values: np.ndarray) -> np.ndarray:
        return np.where(self.log, np.log(np.maximum(values, 1e-300)), values)

    def scale(self, df: pd.DataFrame) -> np.ndarray:
        """The rows of ``df`` in the scaled coordinates of ``F``."""
        values = df[self.cols].to_numpy(float).reshape(len(df), len(self.cols))
        return (self._space(values) - self.lo) / self.width

    @property
    def spaces(self) -> dict:
        """``{column: True}`` for a column measured in log space, ``False`` read as it is."""
        return dict(zip(self.cols, self.log.tolist()))

    def _part(self, df):
        return FittedRange(self.fitted, [c for c in self.columns if c in df], log=self.spaces)

    @functools.cached_property
    def facets(self):
        return _hull_facets(self.F) if len(self.F) else None

    def locate(self, df: pd.DataFrame):
        """``(d, signatures)`` of the rows of ``df``: :func:`extrapolation`."""
        if [c for c in self.cols if c in df] != self.cols:  # a table without some column
            return self._part(df).locate(df)
        X = self.scale(df)
        beyond = np.maximum(X - 1.0, 0.0) - np.maximum(-X, 0.0)
        d = np.sqrt((beyond**2).sum(1))
        sigs = np.array([",".join(sorted(f"{c}{'+' if b > 0 else '-'}"
                                         for c, b in zip(self.cols, row) if b != 0))
                         for row in beyond], dtype=object)
        if len(df) and self.facets is not None:
            normals, offsets = self.facets
            v = X @ normals.T + offsets
            best = v.argmax(1)
            out = (d == 0) & (v.max(1) > HULL_TOL)
            d = np.where(out, v.max(1), d)
            for i in np.flatnonzero(out):
                sigs[i] = "hull " + " ".join(f"{c}{u:+.1f}"
                                             for c, u in zip(self.cols, normals[best[i]])
                                             if round(u, 1) != 0)
        return d, sigs

    def decades(self, df: pd.DataFrame) -> np.ndarray:
        """How far each row of ``df`` lies beyond the fitted range in decades of the inputs,
        unscaled: beyond the box, the norm of each column's excess in ``log10``; inside the box
        and outside the hull, the distance from the facet :meth:`locate` names, in the same
        unscaled log space (the facet ``n . X + b = 0`` of the scaled coordinates is
        ``(n / w) . log x + c = 0``). The unit of the discrepancy's prior where no rehearsal is
        possible (docs/forecasting.md, "Where no rehearsal is possible"). A column read as it
        is (not positive throughout the fit) counts one fitted width beyond its range as one
        decade."""
        if [c for c in self.cols if c in df] != self.cols:  # a table without some column
            return self._part(df).decades(df)
        X = self.scale(df)
        # a column in log space: its excess in natural log units (a decade once divided by ln 10
        # below); a column read as it is: its excess in fitted widths, one width a "decade"
        unit = np.where(self.log, self.width, np.log(10.0))
        beyond = (np.maximum(X - 1.0, 0.0) - np.maximum(-X, 0.0)) * unit
        d = np.sqrt((beyond**2).sum(1))
        if len(df) and self.facets is not None:
            normals, offsets = self.facets
            v = X @ normals.T + offsets
            best = v.argmax(1)
            out = (d == 0) & (v.max(1) > HULL_TOL)
            d = np.where(out, v.max(1) / np.linalg.norm(normals / unit, axis=1)[best], d)
        return d / np.log(10.0)


def extrapolation(fitted: pd.DataFrame, df: pd.DataFrame, columns):
    """Distance of each row of ``df`` from the table ``fitted``, and the direction it leaves in.

    In log space, each column of ``columns`` (:func:`input_columns`) scaled by its fitted width
    (a column constant in the fit counts in units of 1 in log space). A row outside the fitted
    box ``[min, max]`` of some column: the Euclidean norm of its distances beyond the box, and the
    signature lists the columns and sides (``"N+"``, ``"D+,N+"``). A row inside the box but
    outside the convex hull of the fitted points (e.g. more tokens per parameter than any fitted
    run, at sizes and token counts each inside their range): its distance beyond the hull facet it
    violates most, and the signature ``"hull N-0.7 D+0.7"`` names that facet's outward normal
    (to one decimal: nearly parallel facets share one rehearsal).
    Inside the hull: 0 and ``""``. (:class:`FittedRange` keeps the fitted side for many calls.)

    Returns:
        ``(d, signatures)``: arrays of shape ``(n,)``.
    """
    return FittedRange(fitted, [c for c in columns if c in df]).locate(df)
