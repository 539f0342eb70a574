"""Fit and forecast metrics (PTPP paper Appendix A; M3 paper Eq. 19).

All take observed ``y`` and predicted ``yhat`` (positive losses) and return floats.
"""
from __future__ import annotations

import numpy as np

from .errors import DataError


def _arrays(y, yhat):
    y = np.asarray(y, dtype=float).ravel()
    yhat = np.asarray(yhat, dtype=float).ravel()
    if y.shape != yhat.shape:
        raise DataError(f"y has {y.size} values but yhat has {yhat.size}; pass aligned arrays")
    bad = np.flatnonzero(~(np.isfinite(y) & np.isfinite(yhat) & (y > 0) & (yhat > 0)))
    if bad.size:
        raise DataError(
            f"metrics need finite positive losses; rows {bad[:10].tolist()} are not "
            "(drop or fix them before scoring)"
        )
    return y, yhat


def huber_log(y, yhat, delta=0.02):
    """Mean Huber_delta of log residuals r = log yhat - log y (PTPP paper, Appendix A)."""
    y, yhat = _arrays(y, yhat)
    r = np.abs(np.log(yhat) - np.log(y))
    return float(np.mean(np.where(r <= delta, 0.5 * r**2, delta * (r - 0.5 * delta))))


def rmse_log(y, yhat):
    """sqrt(mean r^2) of log residuals."""
    y, yhat = _arrays(y, yhat)
    return float(np.sqrt(np.mean((np.log(yhat) - np.log(y)) ** 2)))


def mae_rel(y, yhat):
    """Mean |yhat - y| / y."""
    y, yhat = _arrays(y, yhat)
    return float(np.mean(np.abs(yhat - y) / y))


def mape_clip(y, yhat, y_clip=1e-3):
    """Mean |yhat - y| / max(y, y_clip)."""
    y, yhat = _arrays(y, yhat)
    return float(np.mean(np.abs(yhat - y) / np.maximum(y, y_clip)))


def calibration(y, yhat):
    """(a, b) of the OLS fit log y = a + b log yhat; ideal (0, 1). NaN when yhat is constant."""
    y, yhat = _arrays(y, yhat)
    lx, ly = np.log(yhat), np.log(y)
    vx = np.var(lx)
    if y.size < 2 or vx == 0:
        return float("nan"), float("nan")
    b = float(np.mean((lx - lx.mean()) * (ly - ly.mean())) / vx)
    return float(ly.mean() - b * lx.mean()), b


def r2(y, yhat):
    """Coefficient of determination on the original scale, 1 - SS_res / SS_tot (M3 paper Eq. 19)."""
    y, yhat = _arrays(y, yhat)
    ss_tot = np.sum((y - y.mean()) ** 2)
    if ss_tot == 0:
        return float("nan")
    return float(1.0 - np.sum((y - yhat) ** 2) / ss_tot)


def score(y, yhat, *, delta, y_clip=1e-3) -> dict[str, float]:
    """All point metrics at once: huber_log, rmse_log, mae_rel, mape_clip, calib_intercept,
    calib_slope, r2. ``delta`` is the Huber threshold (0.02 in the PTPP paper, 1e-3 in the M3
    paper), required so a score always uses the fit's own; ``MapFit.score(df)`` does that."""
    a, b = calibration(y, yhat)
    return {
        "huber_log": huber_log(y, yhat, delta),
        "rmse_log": rmse_log(y, yhat),
        "mae_rel": mae_rel(y, yhat),
        "mape_clip": mape_clip(y, yhat, y_clip),
        "calib_intercept": a,
        "calib_slope": b,
        "r2": r2(y, yhat),
        "n": int(np.asarray(y).size),
    }
