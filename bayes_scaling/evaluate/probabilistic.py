"""Probabilistic metrics for posteriors: pure functions of predictive draws ``(S, n)`` and
observations ``(n,)`` (coverage, interval width, CRPS, log predictive density), and a posterior's
held-out predictions and log-likelihood; per-row scores from draws or quantiles
(:func:`draw_rows`, :func:`quantile_rows`) and the calibration table per dataset, each weighted
equally (:func:`calibration_by`)."""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..bayes.likelihood import log_likelihood
from ..errors import BayesScalingError, ConvergenceWarning, DataError, FitError

__all__ = ["MSCE_GRID", "SCORE_LEVELS", "calibration_by", "central_interval", "coverage", "crps",
           "crps_gaussian", "crps_quantiles", "crps_samples", "draw_rows", "interval_score",
           "interval_width", "log_predictive_density", "lpd_kde", "msce", "pit_quantiles",
           "posterior_loglik", "posterior_predictions", "probabilistic_scores", "quantile_rows"]


def _draws_obs(draws, y):
    draws = np.asarray(draws, dtype=float)
    y = np.asarray(y, dtype=float).ravel()
    if draws.ndim == 1:
        draws = draws[:, None]
    if draws.ndim != 2 or draws.shape[1] != y.size:
        raise DataError(f"draws must have shape (S, n) with n = {y.size} observations; "
                        f"got {draws.shape}")
    if draws.shape[0] < 2:
        raise DataError(f"need at least 2 draws per observation, got {draws.shape[0]}")
    if not (np.all(np.isfinite(draws)) and np.all(np.isfinite(y))):
        raise DataError("draws and observations must be finite; drop the non-finite draws first")
    return draws, y


def central_interval(draws, level=0.9):
    """(lower, upper) per column: the empirical ``(1-level)/2`` and ``(1+level)/2`` quantiles."""
    if not 0 < level < 1:
        raise BayesScalingError(f"interval level must be in (0, 1), got {level}")
    draws = np.asarray(draws, dtype=float)
    q = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return q[0], q[1]


def coverage(draws, y, level=0.9) -> float:
    """Fraction of observations inside the central ``level`` interval of their predictive draws.

    Args:
        draws: ``(S, n)`` posterior predictive draws (one column per observation).
        y: ``(n,)`` observations.
        level: nominal coverage of the central interval (0.5, 0.9, ...).

    Returns:
        The empirical coverage in [0, 1]; a calibrated forecast has coverage close to ``level``.
    """
    draws, y = _draws_obs(draws, y)
    lo, hi = central_interval(draws, level)
    return float(np.mean((y >= lo) & (y <= hi)))


def interval_width(draws, y=None, level=0.9, relative=True) -> float:
    """Mean width of the central ``level`` interval, divided by ``|y|`` when ``relative`` (a
    signed target's width is relative to its magnitude)."""
    draws = np.asarray(draws, dtype=float)
    lo, hi = central_interval(draws, level)
    w = hi - lo
    if relative:
        if y is None:
            raise BayesScalingError("a relative width needs the observations y")
        w = w / np.abs(np.asarray(y, dtype=float).ravel())
    return float(np.mean(w))


def crps_samples(draws, y) -> np.ndarray:
    """CRPS of every observation from predictive samples (the energy form, on the loss scale).

    ``CRPS(F, y) = E|X - y| - E|X - X'| / 2`` with ``X, X' ~ F`` independent, estimated by the
    V-statistic over the ``S`` draws of each column (Gneiting & Raftery 2007, Eq. 21). The spread
    term uses the sorted draws, ``E|X - X'| = 2 / S^2 sum_i (2 i - S - 1) x_(i)``, so the cost is
    ``O(S log S)`` per column. A point forecast (all draws equal) gives ``|x - y|``: CRPS is in the
    units of the loss and generalises the absolute error.

    Returns:
        ``(n,)`` array of CRPS values (lower is better).
    """
    draws, y = _draws_obs(draws, y)
    s = draws.shape[0]
    x = np.sort(draws, axis=0)
    w = (2.0 * np.arange(1, s + 1) - s - 1.0)[:, None]
    spread = 2.0 * np.sum(w * x, axis=0) / s**2
    return np.mean(np.abs(draws - y[None, :]), axis=0) - 0.5 * spread


def crps(draws, y) -> float:
    """Mean CRPS over observations (see :func:`crps_samples`)."""
    return float(np.mean(crps_samples(draws, y)))


def crps_gaussian(mu, sigma, y) -> np.ndarray:
    """Closed-form CRPS of ``Normal(mu, sigma)`` at ``y`` (Gneiting & Raftery 2007, Eq. 5):
    ``sigma (z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi))``, ``z = (y - mu) / sigma``."""
    from scipy.stats import norm

    mu, sigma, y = (np.asarray(a, dtype=float) for a in (mu, sigma, y))
    z = (y - mu) / sigma
    return sigma * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / math.sqrt(math.pi))


def log_predictive_density(loglik) -> np.ndarray:
    """Held-out log pointwise predictive density from log-likelihood draws.

    ``lpd_i = log (1/S sum_s p(y_i | theta_s)) = logsumexp_s(loglik[s, i]) - log S``
    (Vehtari, Gelman & Gabry 2017, Eq. 3, on held-out rows instead of the fitted ones).

    Args:
        loglik: ``(S, n)`` log-likelihood of each held-out observation under each posterior draw.

    Returns:
        ``(n,)`` array; sum it for the total or average it per row (higher is better).
    """
    from scipy.special import logsumexp

    ll = np.asarray(loglik, dtype=float)
    if ll.ndim != 2:
        raise DataError(f"loglik must have shape (S, n), got {ll.shape}")
    return logsumexp(ll, axis=0) - math.log(ll.shape[0])


def lpd_kde(draws, y, log_scale=True) -> np.ndarray:
    """Log predictive density of ``y`` estimated from predictive samples by a Gaussian kernel.

    Used when the log-likelihood of new rows is not available. With ``log_scale`` (the default,
    matching the likelihood of ``bayes_scaling.bayes``, which is on ``log L``) the density is that
    of ``log y`` under the predictive draws of ``log L``; Silverman's bandwidth
    ``0.9 min(sd, IQR/1.34) S^(-1/5)`` per column.

    Returns:
        ``(n,)`` array of log densities.
    """
    from scipy.special import logsumexp

    draws, y = _draws_obs(draws, y)
    if log_scale:
        if np.any(draws <= 0) or np.any(y <= 0):
            raise DataError("log-scale densities need positive draws and observations")
        draws, y = np.log(draws), np.log(y)
    s = draws.shape[0]
    sd = draws.std(axis=0, ddof=1)
    iqr = np.subtract(*np.quantile(draws, [0.75, 0.25], axis=0)) / 1.34
    spread = np.where(iqr > 0, np.minimum(sd, iqr), sd)
    h = 0.9 * np.maximum(spread, 1e-12) * s ** (-0.2)
    z = (y[None, :] - draws) / h
    logk = -0.5 * z**2 - np.log(h) - 0.5 * math.log(2 * math.pi)
    return logsumexp(logk, axis=0) - math.log(s)


def probabilistic_scores(draws, y, *, loglik=None, levels=(0.5, 0.9)) -> dict[str, float]:
    """Every probabilistic metric at once.

    Args:
        draws: ``(S, n)`` posterior *predictive* draws of the loss (observation noise included).
        y: ``(n,)`` observed losses.
        loglik: optional ``(S, n)`` log-likelihood draws of ``log y``; when absent the log
            predictive density is estimated from ``draws`` by :func:`lpd_kde`.
        levels: interval levels to report coverage for.

    Returns:
        ``coverage50``, ``coverage90`` (one ``coverage<pct>`` per level), ``width90_rel`` (mean
        90% interval width / y), ``crps`` (mean, loss units), ``lpd`` (mean per row, on ``log L``)
        and ``lpd_source`` (``"loglik"`` or ``"kde"``).
    """
    draws, y = _draws_obs(draws, y)
    out = {f"coverage{round(100 * lv)}": coverage(draws, y, lv) for lv in levels}
    out["width90_rel"] = interval_width(draws, y, 0.9)
    out["crps"] = crps(draws, y)
    if loglik is not None:
        out["lpd"] = float(np.mean(log_predictive_density(loglik)))
        out["lpd_source"] = "loglik"
    else:
        out["lpd"] = float(np.mean(lpd_kde(draws, y)))
        out["lpd_source"] = "kde"
    return out


def posterior_loglik(post, df, mean_draws=None, keep=None) -> np.ndarray:
    """``(S, n)`` log-likelihood of each row's observed ``log loss`` under each posterior draw.

    Uses the posterior's own likelihood (``post.settings["likelihood"]``: Huber with threshold
    ``c``, Student-t with ``student_df`` degrees of freedom, or Normal) with each draw's scale
    ``sigma`` (or the fixed ``settings["scale"]``), centred on ``log f(theta_s, x)`` from
    ``post.predict_draws(df, kind="mean")``: the density the fit itself used, evaluated at rows it
    did not see (of ``log(loss + c)`` for a signed target, ``c = post.target_shift``). Feed it to
    :func:`log_predictive_density`. ``keep``: boolean mask over the posterior's draws that
    ``mean_draws`` was already reduced to.
    """
    st = post.settings
    mean = np.asarray(post.predict_draws(df, kind="mean") if mean_draws is None else mean_draws,
                      dtype=float)
    draws = post.draws()
    sigma = np.asarray(draws["sigma"], float) if "sigma" in draws else \
        np.full(mean.shape[0], float(st["scale"]))
    if keep is not None and "sigma" in draws:
        sigma = sigma[np.asarray(keep, bool)]
    if sigma.shape[0] != mean.shape[0]:
        raise BayesScalingError(f"{sigma.shape[0]} scale draws for {mean.shape[0]} mean draws")
    c = getattr(post, "target_shift", 0.0)  # a signed target fitted as loss + c
    r = np.log(df["loss"].to_numpy(dtype=float) + c)[None, :] - np.log(mean + c)
    return np.asarray(log_likelihood(r, sigma[:, None], st["likelihood"], c=float(st["c"]),
                                     student_df=float(st["student_df"])), dtype=float)


def posterior_predictions(post, df, interval, allow_unconverged=False):
    """(point, lower, upper, predictive draws, loglik or None, number of draws dropped) of a
    posterior on ``df``; draws with a non-finite prediction on any row are dropped whole.

    The log-likelihood draws come from :func:`posterior_loglik` when the posterior exposes its
    draws and likelihood settings; otherwise ``None`` (the caller falls back to a kernel
    estimate from the predictive draws). ``allow_unconverged``: score a posterior that failed its
    convergence checks too (an evaluation then reports its ``status``, ``NOT CONVERGED``);
    without it such a posterior raises :class:`~bayes_scaling.errors.ConvergenceError`.
    """
    kw = {"allow_unconverged": True} if allow_unconverged and hasattr(post, "status") else {}
    with warnings.catch_warnings():
        if kw:  # the caller labels the result with the posterior's status
            warnings.simplefilter("ignore", ConvergenceWarning)
        pred_draws = np.asarray(post.predict_draws(df, kind="predictive", **kw), dtype=float)
        mean_draws = np.asarray(post.predict_draws(df, kind="mean", **kw), dtype=float)
    ok = np.all(np.isfinite(pred_draws), 1) & np.all(np.isfinite(mean_draws), 1)
    n_bad = int((~ok).sum())
    if n_bad == len(ok):
        raise FitError(f"every posterior draw of {post.law.name} gives a non-finite prediction "
                       "on these rows")
    if n_bad:
        # a draw whose law overflows somewhere on these rows is removed as a whole (never per
        # row, which would bias the rows it fails on); the count goes into the results table
        warnings.warn(f"{n_bad} of {len(ok)} posterior draws of {post.law.name} give non-finite "
                      "predictions on these rows; they are left out of the intervals and scores "
                      "(column nonfinite_draws)", RuntimeWarning, stacklevel=3)
        pred_draws, mean_draws = pred_draws[ok], mean_draws[ok]
    point = np.median(mean_draws, axis=0)
    lo, hi = central_interval(pred_draws, interval)
    loglik = None
    if hasattr(post, "draws") and isinstance(getattr(post, "settings", None), Mapping) \
            and "likelihood" in post.settings:
        loglik = posterior_loglik(post, df, mean_draws, keep=ok)
    return point, lo, hi, pred_draws, loglik, n_bad


# --------------------------------------------------------------------------------------------------
# Per-row scores from draws or quantiles, and the calibration table per dataset.

#: Central levels whose coverage, intervals and MSCE the calibration table reports.
SCORE_LEVELS = (0.5, 0.8, 0.9, 0.95)
#: The levels 0.50, 0.51, ..., 0.99 of the MSCE over a grid (as NSL-PFN reports it).
MSCE_GRID = np.round(np.arange(0.50, 0.995, 0.01), 2)


def interval_score(lower, upper, y, level) -> np.ndarray:
    """Interval score of the central ``level`` interval (Gneiting & Raftery 2007, Eq. 43):
    ``(u - l) + (2 / alpha) (l - y) 1{y < l} + (2 / alpha) (y - u) 1{y > u}``, ``alpha = 1 -
    level``: the width plus a penalty for each miss proportional to how far it misses (lower is
    better; in the units of ``y``)."""
    if not 0 < level < 1:
        raise BayesScalingError(f"interval level must be in (0, 1), got {level}")
    lower, upper, y = (np.asarray(a, float) for a in (lower, upper, y))
    a = 1.0 - level
    return (upper - lower) + 2 / a * np.maximum(lower - y, 0) + 2 / a * np.maximum(y - upper, 0)


def _quantiles_obs(quantiles, taus, y):
    q = np.asarray(quantiles, float)
    taus = np.asarray(taus, float)
    y = np.asarray(y, float).ravel()
    if q.ndim != 2 or q.shape != (y.size, taus.size):
        raise DataError(f"quantiles must have shape (n, len(taus)) = ({y.size}, {taus.size}); "
                        f"got {q.shape}")
    if np.any(np.diff(taus) <= 0) or taus[0] <= 0 or taus[-1] >= 1:
        raise DataError("taus must increase strictly inside (0, 1)")
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(y))):
        raise DataError("quantiles and observations must be finite")
    return np.sort(q, axis=1), taus, y


def pit_quantiles(quantiles, taus, y) -> np.ndarray:
    """``P(Y <= y)`` from a quantile function on the grid ``taus``, linear between grid points;
    0 below the lowest quantile and 1 above the highest (outside every central interval the grid
    holds)."""
    q, taus, y = _quantiles_obs(quantiles, taus, y)
    k = (q <= y[:, None]).sum(1)
    inner = (k > 0) & (k < taus.size)
    j = np.clip(k, 1, taus.size - 1)
    rows = np.arange(y.size)
    q0, q1 = q[rows, j - 1], q[rows, j]
    w = np.where(q1 > q0, (y - q0) / np.where(q1 > q0, q1 - q0, 1.0), 0.5)
    pit = taus[j - 1] + np.clip(w, 0, 1) * (taus[j] - taus[j - 1])
    return np.where(inner, pit, np.where(k == 0, 0.0, 1.0))


def crps_quantiles(quantiles, taus, y) -> np.ndarray:
    """CRPS from a quantile function: ``2 int_0^1 QS_tau(q_tau, y) d tau`` with the quantile
    (pinball) score ``QS_tau = (1{y < q} - tau)(q - y)`` (Gneiting & Raftery 2007, Eqs. 20-21 and
    Sec. 9.2), the integral over cells around each grid ``tau`` (the cell edges halfway between
    grid points, the outer ones at 0 and 1). On :data:`~bayes_scaling.evaluate.baselines.TAUS` it
    is within 1% of the exact CRPS of a Gaussian."""
    q, taus, y = _quantiles_obs(quantiles, taus, y)
    edges = np.concatenate([[0.0], (taus[1:] + taus[:-1]) / 2, [1.0]])
    qs = ((y[:, None] < q) - taus[None, :]) * (q - y[:, None])
    return 2.0 * qs @ np.diff(edges)


def _rows(y, median, pit, crps_, bounds, levels) -> pd.DataFrame:
    out = {"y": y, "median": median, "pit": pit, "crps": crps_}
    for lv, (lo, hi) in zip(levels, bounds):
        out[f"lo{round(100 * lv)}"], out[f"hi{round(100 * lv)}"] = lo, hi
    return pd.DataFrame(out)


def draw_rows(draws, y, levels=SCORE_LEVELS) -> pd.DataFrame:
    """Per observation, from predictive draws ``(S, n)``: ``y``, the predictive ``median``, the PIT
    ``P(Y < y) + P(Y = y) / 2``, the CRPS (:func:`crps_samples`) and the central interval
    ``lo<pct>``, ``hi<pct>`` of each level: the input of :func:`calibration_by`."""
    draws, y = _draws_obs(draws, y)
    pit = np.mean(draws < y, 0) + 0.5 * np.mean(draws == y, 0)
    return _rows(y, np.median(draws, 0), pit, crps_samples(draws, y),
                 [central_interval(draws, lv) for lv in levels], levels)


def quantile_rows(quantiles, taus, y, levels=SCORE_LEVELS) -> pd.DataFrame:
    """:func:`draw_rows` from predictive quantiles ``(n, len(taus))`` instead of draws (PIT by
    :func:`pit_quantiles`, CRPS by :func:`crps_quantiles`, intervals read off the grid by linear
    interpolation)."""
    q, taus, y = _quantiles_obs(quantiles, taus, y)

    def at(t):
        return np.array([np.interp(t, taus, row) for row in q]) if len(q) else np.zeros(0)

    return _rows(y, at(0.5), pit_quantiles(q, taus, y), crps_quantiles(q, taus, y),
                 [(at((1 - lv) / 2), at((1 + lv) / 2)) for lv in levels], levels)


def msce(pit, levels=SCORE_LEVELS) -> float:
    """Mean squared calibration error over central ``levels`` (as NSL-PFN reports it): the mean
    over levels ``p`` of ``(p - c_p)^2``, ``c_p`` the share of observations inside their central
    ``p`` interval, ``|PIT - 1/2| <= p / 2``. 0 for a calibrated forecast, up to sampling error
    ``~ p (1 - p) / n``."""
    dev = np.abs(np.asarray(pit, float) - 0.5)
    levels = np.asarray(levels, float)
    cov = (dev[None, :] <= levels[:, None] / 2 + 1e-12).mean(1)
    return float(np.mean((cov - levels) ** 2))


def calibration_by(rows, by="dataset", levels=SCORE_LEVELS, grid=MSCE_GRID,
                   interval_levels=(0.5, 0.9), width_level=0.9):
    """The calibration and sharpness of a predictive per group, each group weighted equally.

    Args:
        rows: one row per held-out observation with ``y``, ``pit``, ``crps``, the interval
            bounds ``lo<pct>``/``hi<pct>`` of ``interval_levels`` and ``width_level`` (as
            :func:`draw_rows` and :func:`quantile_rows` give them) and the column ``by``.
        by: the group column (``dataset``).
        levels: the levels of the coverage columns and of ``msce``.
        grid: the levels of ``msce_grid`` (default 0.50, 0.51, ..., 0.99).

    Returns:
        ``(table, mean)``: ``table`` has one row per group: ``rows``, ``cov<pct>`` per level,
        ``msce`` (over ``levels``), ``msce_grid`` (over ``grid``), ``is<pct>`` (mean
        :func:`interval_score` per interval level), ``crps`` (mean), ``width<pct>_median``
        (median of the ``width_level`` interval's width over ``|y|``); ``mean`` is the mean of
        each column over the groups (each group counts once, whatever its number of rows).
    """
    need = ["y", "pit", "crps", by] + [f"{s}{round(100 * lv)}" for lv in
                                        (*interval_levels, width_level) for s in ("lo", "hi")]
    missing = [c for c in need if c not in rows]
    if missing:
        raise DataError(f"calibration_by needs column(s) {missing}; the rows have "
                        f"{list(rows.columns)} (build them with draw_rows or quantile_rows)")
    out = []
    for g, r in rows.groupby(by, sort=True):
        dev = np.abs(r["pit"].to_numpy(float) - 0.5)
        row = {by: g, "rows": len(r)}
        for lv in levels:
            row[f"cov{round(100 * lv)}"] = float(np.mean(dev <= lv / 2 + 1e-12))
        row["msce"] = msce(r["pit"], levels)
        row["msce_grid"] = msce(r["pit"], grid)
        y = r["y"].to_numpy(float)
        for lv in interval_levels:
            p = round(100 * lv)
            row[f"is{p}"] = float(np.mean(interval_score(r[f"lo{p}"], r[f"hi{p}"], y, lv)))
        row["crps"] = float(np.mean(r["crps"]))
        p = round(100 * width_level)
        row[f"width{p}_median"] = float(np.median((r[f"hi{p}"] - r[f"lo{p}"]) / np.abs(y)))
        out.append(row)
    table = pd.DataFrame(out)
    return table, table.drop(columns=[by]).mean(numeric_only=True)
