"""The intervals other scaling-law tools give, as baselines to score the default predictive against.

Every baseline is a function ``(law, train, query, levels, ...)`` returning one row per query row:
the predictive ``median`` and, for each level ``p`` of ``levels``, the central interval
``lower<pct>``, ``upper<pct>`` (the ``(1-p)/2`` and ``(1+p)/2`` quantiles of the loss); with
``taus=`` also the quantile ``q<tau>`` at each level of ``taus`` (:data:`TAUS` gives the grid
:func:`~bayes_scaling.evaluate.probabilistic.quantile_rows` scores). ``.attrs["settings"]``
records what was done (number of refits that failed, calibration rows, residual quantiles).

- :func:`bootstrap`: resample the training runs with replacement and refit the Huber MAP
  (Besiroglu et al. 2024, *Chinchilla Scaling: A replication attempt*, Sec. 4: bootstrapped
  confidence intervals of the fitted law);
- :func:`residual_bootstrap`: refit on the MAP prediction times resampled log residuals
  (Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, Sec. 9.5, "bootstrapping
  residuals"), the interval style of model-ladder forecasts (OLMo);
- :func:`conformal`: split-conformal intervals (Lei et al. 2018, *Distribution-free predictive
  inference for regression*, Sec. 2.2) on leave-future-out log residuals: calibration residuals
  from fitting the smaller runs and forecasting the next larger ones along the extrapolation
  axis (the construction of conformalized scaling laws);
- :func:`fitted_noise`: the project's posterior predictive with the discrepancy off
  (``discrepancy="off"``): parameter uncertainty and the fitted noise only.

None of them is a default; ``analyses/forecast_honesty.py --variants baselines`` scores them on
the project's held-out splits (docs/forecasting.md, "Against the peers' intervals").
"""
from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..data import log_scaled, shifted_table
from ..errors import BayesScalingError, DataError, FitError
from ..fit import MapFit, fit_map
from ..laws import get as get_law
from ..params import ParamSpace

__all__ = ["TAUS", "bootstrap", "conformal", "fitted_noise", "quantile_frame",
           "residual_bootstrap"]

#: Quantile levels 0.005, 0.010, ..., 0.995: every central interval of level 0.01 ... 0.99 is a
#: pair of them (the grid the calibration curve and MSCE over 0.5-0.99 read).
TAUS = np.round(np.arange(1, 200) / 200, 3)
DEFAULT_LEVELS = (0.5, 0.8, 0.9, 0.95)


def _check_levels(levels) -> tuple[float, ...]:
    levels = tuple(float(p) for p in np.atleast_1d(levels))
    bad = [p for p in levels if not 0 < p < 1]
    if bad:
        raise BayesScalingError(f"interval levels must be in (0, 1), got {bad}")
    return levels


def quantile_frame(q: np.ndarray, taus, levels, extra_taus=None, settings=None) -> pd.DataFrame:
    """The baselines' output from a quantile function: ``q`` is ``(n, len(taus))`` on increasing
    ``taus``; the median, each level's central interval and (``extra_taus``) the quantiles
    ``q<tau>``, all read off ``q`` by linear interpolation in ``tau``."""
    taus = np.asarray(taus, float)
    q = np.sort(np.asarray(q, float), axis=1)

    def at(t):
        i = np.clip(np.searchsorted(taus, t), 1, len(taus) - 1)
        w = (t - taus[i - 1]) / (taus[i] - taus[i - 1])
        return q[:, i - 1] + np.clip(w, 0, 1) * (q[:, i] - q[:, i - 1])

    out = {"median": at(0.5)}
    for p in _check_levels(levels):
        out[f"lower{round(100 * p)}"], out[f"upper{round(100 * p)}"] = at((1 - p) / 2), \
            at((1 + p) / 2)
    for t in ([] if extra_taus is None else np.asarray(extra_taus, float)):
        out[f"q{t:g}"] = at(t)
    frame = pd.DataFrame(out)
    frame.attrs["settings"] = dict(settings or {})
    return frame


def _from_log_draws(log_draws, levels, taus, settings) -> pd.DataFrame:
    grid = np.union1d(TAUS, [0.5] + [(1 + s * p) / 2 for p in levels for s in (-1, 1)])
    q = np.exp(np.quantile(log_draws, grid, axis=0)).T
    return quantile_frame(q, grid, levels, taus, settings)


def _map(law, train, *, delta, fixed, n_starts, seed, inits=None) -> MapFit:
    return fit_map(law, train, delta=delta, n_starts=n_starts, seed=seed, fixed=fixed,
                   inits=inits)


def _log_values(law, fits: Sequence[MapFit], query) -> np.ndarray:
    """``(len(fits), n)`` log of each fit's law at the query rows, in one vmapped call."""
    x = law.inputs(query.assign(loss=1.0) if "loss" not in query else query)
    p = {k: jnp.asarray([f.params[k] for f in fits]) for k in law.param_names}
    return np.log(np.asarray(jax.vmap(lambda th: law.fn(th, x))(p), float))


def _refits(law, tables, full: MapFit, *, delta, fixed, n_starts, seed) -> list[MapFit]:
    """The Huber MAP of every table of ``tables``, started from the full-data MAP and
    ``n_starts - 1`` draws of the init ranges (one compiled program serves every table: they
    have the training table's row count). A table every start of which fails is left out and
    counted; more than half failing raises."""
    names = [n for n in law.param_names if n not in (fixed or {})]
    start = np.array([[full.params[n] for n in names]])
    fits, failed = [], 0
    for b, t in enumerate(tables):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                inits = start if n_starts == 1 else np.vstack(
                    [start, _init_draws(law, fixed, n_starts - 1, seed + 1 + b)])
                fits.append(_map(law, t, delta=delta, fixed=fixed, n_starts=len(inits),
                                 seed=seed + 1 + b, inits=inits))
            except FitError:
                failed += 1
    if failed > len(tables) / 2:
        raise FitError(f"{failed} of {len(tables)} bootstrap refits of {law.name} failed; the "
                       "table is too small or too noisy for a bootstrap")
    return fits


def _init_draws(law, fixed, n, seed) -> np.ndarray:
    return ParamSpace.of(law, fixed).sample_inits(n, seed)


def _prepare(law, train, query, levels):
    law = get_law(law)
    levels = _check_levels(levels)
    for name, t in (("train", train), ("query", query)):
        if not isinstance(t, pd.DataFrame):
            raise DataError(f"{name} must be a pandas DataFrame, got {type(t).__name__}")
    missing = [c for c in law.columns if c not in query]
    if missing:
        raise DataError(f"the query rows need column(s) {missing} of {law.name}")
    return law, train.reset_index(drop=True), query.reset_index(drop=True), levels


def _signed_target(baseline):
    """A baseline of a signed target (some loss at or below 0): run on ``loss + c``
    (``bs.data.shifted_table``, as ``fit_posterior`` and ``fit_map`` do), its quantiles returned
    in the target's own units (``settings["target_shift"]``)."""

    @functools.wraps(baseline)
    def run(law, train, query, *args, **kw):
        law, train, c = shifted_table(law, train)
        out = baseline(law, train, query, *args, **kw)
        if c:
            cols = [k for k in out.columns
                    if k == "median" or k.startswith(("lower", "upper", "q"))]
            out[cols] = out[cols] - c
            out.attrs["settings"]["target_shift"] = c
        return out

    return run


@_signed_target
def bootstrap(law, train, query, levels=DEFAULT_LEVELS, *, n_boot=100, delta=1e-3, fixed=None,
              n_starts=4, seed=0, noise=True, taus=None) -> pd.DataFrame:
    """Intervals from a nonparametric bootstrap of the Huber MAP over training runs (Besiroglu et
    al. 2024, Sec. 4, who resample the 245 Chinchilla points and refit to give confidence
    intervals of the parameters and of the fitted law).

    Each of ``n_boot`` replicates resamples the training rows with replacement (seeded by
    ``seed``) and refits :func:`~bayes_scaling.fit_map` (Huber ``delta``, as Epoch: 1e-3), from
    the full-data MAP and ``n_starts - 1`` random starts. The refits' law values at the query
    rows give the interval of the law's value (``noise=False``, what Epoch report); with
    ``noise`` (the default, for scoring against observations) each refit's log prediction is
    shifted by 20 log residuals of the full-data fit drawn with replacement, so the interval is
    of a new observation.

    Returns:
        DataFrame (one row per query row): ``median``, ``lower<pct>``/``upper<pct>`` per level,
        ``q<tau>`` per ``taus``; ``attrs["settings"]``: replicates, failed refits.
    """
    law, train, query, levels = _prepare(law, train, query, levels)
    full = _map(law, train, delta=delta, fixed=fixed, n_starts=64, seed=seed)
    rng = np.random.default_rng(seed)
    n = len(train)
    tables = [train.iloc[rng.integers(0, n, n)].reset_index(drop=True) for _ in range(n_boot)]
    fits = _refits(law, tables, full, delta=delta, fixed=fixed, n_starts=n_starts, seed=seed)
    log_f = _log_values(law, fits, query)
    settings = {"method": "bootstrap", "n_boot": n_boot, "failed": n_boot - len(fits),
                "delta": delta, "noise": bool(noise)}
    if noise:
        log_f = _with_residuals(log_f, _log_residuals(full, train), rng)
    return _from_log_draws(log_f, levels, taus, settings)


def _log_residuals(fit: MapFit, df) -> np.ndarray:
    return np.log(df["loss"].to_numpy(float)) - np.log(fit.predict(df))


def _with_residuals(log_f, resid, rng, per_fit=20) -> np.ndarray:
    """``(B * per_fit, n)``: each row of ``log_f`` plus ``per_fit`` residuals drawn with
    replacement (one per draw, shared by the query rows of that draw, as one new run's error)."""
    e = rng.choice(resid, size=(log_f.shape[0], per_fit))
    return (log_f[:, None, :] + e[:, :, None]).reshape(-1, log_f.shape[1])


@_signed_target
def residual_bootstrap(law, train, query, levels=DEFAULT_LEVELS, *, n_boot=100, delta=1e-3,
                       fixed=None, n_starts=4, seed=0, noise=True, taus=None) -> pd.DataFrame:
    """Intervals from a residual bootstrap of the Huber MAP (Efron & Tibshirani 1993, Sec. 9.5),
    the style of the model-ladder forecasts' intervals (OLMo).

    The full-data MAP ``f(x; theta_hat)`` and its training log residuals ``e_i`` are computed once;
    each of ``n_boot`` replicate tables keeps the training inputs with losses
    ``f(x_i; theta_hat) exp(e*_i)``, ``e*`` drawn with replacement from the ``e_i``, and is refitted
    as in :func:`bootstrap`; ``noise`` adds a resampled residual to each refit's forecast.
    The design stays fixed, so the interval says nothing about which runs happened to be made.
    """
    law, train, query, levels = _prepare(law, train, query, levels)
    full = _map(law, train, delta=delta, fixed=fixed, n_starts=64, seed=seed)
    rng = np.random.default_rng(seed)
    resid = _log_residuals(full, train)
    base = full.predict(train)
    tables = [train.assign(loss=base * np.exp(rng.choice(resid, len(train))))
              for _ in range(n_boot)]
    fits = _refits(law, tables, full, delta=delta, fixed=fixed, n_starts=n_starts, seed=seed)
    log_f = _log_values(law, fits, query)
    settings = {"method": "residual_bootstrap", "n_boot": n_boot, "failed": n_boot - len(fits),
                "delta": delta, "noise": bool(noise)}
    if noise:
        log_f = _with_residuals(log_f, resid, rng)
    return _from_log_draws(log_f, levels, taus, settings)


def auto_axis(law, train, query) -> Callable:
    """The law input along which the query rows reach farthest beyond the training rows, in log
    units beyond the training range (above its maximum or below its minimum): a function of a
    table giving larger values farther out (the column, or its negative when the queries lie
    below the range). A column not positive in both tables is read as it is, its reach in widths
    of the training range: it is picked when no column in log units reaches beyond the range."""
    law = get_law(law)
    # log units for a column positive in both tables, fitted widths for the others (read as they
    # are: a proportion that may be 0, a signed input); a column reaching beyond the range in log
    # units first, then one beyond it as it is; with none beyond, the nearest as before
    found = []
    for col in law.columns:
        tr, qu = train[col].to_numpy(float), query[col].to_numpy(float)
        if np.ptp(tr) == 0:
            continue
        log = log_scaled(np.concatenate([tr, qu]))
        if log:
            up, down = np.log(qu.max() / tr.max()), np.log(tr.min() / qu.min())
        else:
            up, down = (qu.max() - tr.max()) / np.ptp(tr), (tr.min() - qu.min()) / np.ptp(tr)
        found += [(gap, log, col, sign) for gap, sign in ((up, 1.0), (down, -1.0))]
    # ranked: beyond in log units, beyond as it is, then log columns, then the farthest reach
    pick = max(found, key=lambda f: (f[0] > 0 and f[1], f[0] > 0, f[1], f[0]), default=None)
    if pick is None:
        raise DataError(f"no input of {law.name} ({list(law.columns)}) varies in the training "
                        "table: pass axis= (a column or table -> values)")
    _, log, col, sign = pick

    def fn(t):
        v = t[col].to_numpy(float)
        return sign * (np.log(v) if log else v)

    fn.name = col if sign > 0 else f"-{col}"
    return fn


def _axis_values(axis, df) -> np.ndarray:
    if isinstance(axis, str):
        if axis not in df:
            raise DataError(f"conformal axis column {axis!r} is not in the table; it has "
                            f"{list(df.columns)}")
        return df[axis].to_numpy(float)
    return np.asarray(axis(df), float)


def calibration_folds(values, min_fit, n_folds=4) -> list[tuple[np.ndarray, np.ndarray]]:
    """The leave-future-out calibration split of :func:`conformal`: ``(fit mask, calibration
    mask)`` pairs over the training rows, sorted along the axis ``values``.

    With ``v_1 < ... < v_m`` the distinct axis values and ``j_0`` the first index with at least
    ``min_fit`` rows at or below ``v_j0``, the cuts are up to ``n_folds`` values ``c_1 < ... < c_K``
    spread evenly over ``v_j0 ... v_(m-1)``; fold ``k`` fits the rows with value ``<= c_k`` and
    forecasts the next block, the rows in ``(c_k, c_(k+1)]`` (the last block: up to ``v_m``).
    Every calibration row is forecast once, one block beyond its fit, as a query is one step
    beyond the training table. Raises :class:`DataError` when no cut leaves ``min_fit`` rows to
    fit and a row to forecast."""
    values = np.asarray(values, float)
    if not np.all(np.isfinite(values)):
        raise DataError("conformal axis values must be finite")
    distinct = np.unique(values)
    count = np.array([(values <= v).sum() for v in distinct])
    ok = np.flatnonzero((count >= min_fit) & (np.arange(len(distinct)) < len(distinct) - 1))
    if not len(ok):
        raise DataError(f"a conformal calibration split needs at least {min_fit} training rows "
                        f"at or below some axis value and at least one row above it; the table "
                        f"has {len(values)} rows at {len(distinct)} distinct axis values. Add "
                        "runs along the extrapolation axis, or use another baseline")
    idx = np.unique(np.round(np.linspace(ok[0], len(distinct) - 2,
                                         min(n_folds, len(distinct) - 1 - ok[0]))).astype(int))
    cuts = list(distinct[idx]) + [np.inf]
    return [(values <= cuts[k], (values > cuts[k]) & (values <= cuts[k + 1]))
            for k in range(len(idx))]


def conformal_quantile(scores, level) -> tuple[float, bool]:
    """The split-conformal quantile of absolute residuals ``scores`` (Lei et al. 2018, Sec. 2.2):
    the ``ceil((m + 1) level)``-th smallest of the ``m`` scores. When that rank exceeds ``m`` the
    guarantee needs an unbounded interval; the largest score is returned and the flag is set."""
    s = np.sort(np.asarray(scores, float))
    k = math.ceil((len(s) + 1) * level)
    return float(s[min(k, len(s)) - 1]), k > len(s)


@_signed_target
def conformal(law, train, query, levels=DEFAULT_LEVELS, *, axis=None, n_folds=4, min_fit=None,
              delta=1e-3, fixed=None, n_starts=64, seed=0, taus=None) -> pd.DataFrame:
    """Split-conformal intervals on leave-future-out log residuals (conformalized scaling laws;
    split conformal prediction, Lei et al. 2018, Sec. 2.2).

    The calibration residuals come from :func:`calibration_folds` along ``axis`` (a column, a
    function ``table -> values``, larger = farther out, or ``None``: :func:`auto_axis`, the law
    input along which the queries reach farthest beyond the training range): per fold, the
    Huber MAP of the smaller runs forecasts the next larger block, and the absolute log
    residuals ``|log y - log f_hat|`` of every block are the scores. The interval at level ``p``
    is ``f_full(x) exp(+- h_p)`` with ``f_full`` the full-data MAP and ``h_p`` the
    :func:`conformal_quantile` of the scores; the quantile ``tau`` is ``f_full(x)
    exp(sign(tau - 1/2) h_|2 tau - 1|)``. ``min_fit``: rows a fold fits on (default: the law's
    free parameters + 1).

    Returns:
        DataFrame as :func:`bootstrap`; ``attrs["settings"]``: axis, folds, calibration rows
        ``m``, the scores, each level's half-width and whether it was capped at the largest score,
        and the folds left out because their fit gave a non-finite forecast of their block
        (``dropped_folds``; all of them raises :class:`FitError`).
    """
    law, train, query, levels = _prepare(law, train, query, levels)
    n_free = len([p for p in law.param_names if p not in (fixed or {})])
    min_fit = n_free + 1 if min_fit is None else int(min_fit)
    axis = auto_axis(law, train, query) if axis is None else axis
    folds = calibration_folds(_axis_values(axis, train), min_fit, n_folds)
    scores, dropped = [], []
    for k, (fit_rows, cal_rows) in enumerate(folds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = _map(law, train[fit_rows], delta=delta, fixed=fixed, n_starts=n_starts,
                     seed=seed + k)
        r = np.abs(_log_residuals(f, train[cal_rows]))
        if np.all(np.isfinite(r)):
            scores.append(r)
        else:  # the fold's fit cannot forecast its block (e.g. an input constant in the fold)
            dropped.append(k)
    if not scores:
        raise FitError(f"no calibration fold of {law.name} gives a finite forecast of its next "
                       f"block ({len(folds)} folds along {getattr(axis, 'name', axis)}); the "
                       "smaller runs do not identify the law: use another baseline")
    scores = np.concatenate(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = _map(law, train, delta=delta, fixed=fixed, n_starts=n_starts, seed=seed)
    log_f = np.log(full.predict(query))
    grid = np.union1d(TAUS, [0.5] + [(1 + s * p) / 2 for p in levels for s in (-1, 1)])
    half = np.array([conformal_quantile(scores, abs(2 * t - 1))[0] if t != 0.5 else 0.0
                     for t in grid])
    q = np.exp(log_f[:, None] + np.sign(grid - 0.5)[None, :] * half[None, :])
    qs = {p: conformal_quantile(scores, p) for p in levels}
    settings = {"method": "conformal", "axis": getattr(axis, "name", str(axis)),
                "folds": len(folds) - len(dropped), "dropped_folds": dropped,
                "calibration_rows": int(len(scores)),
                "scores": scores.tolist(), "half_width": {p: h for p, (h, _) in qs.items()},
                "capped": {p: c for p, (_, c) in qs.items()}, "delta": delta}
    return quantile_frame(q, grid, levels, taus, settings)


def fitted_noise(law, train, query, levels=DEFAULT_LEVELS, *, posterior=None, seed=0,
                 taus=None, **fit_kw) -> pd.DataFrame:
    """The posterior predictive with the discrepancy off (``discrepancy="off"``): parameter
    uncertainty and the fitted noise scale only, as a Bayesian fit of the law alone gives it.

    ``posterior``: an already fitted :class:`~bayes_scaling.bayes.Posterior` of ``law`` on
    ``train`` (otherwise ``bs.fit_posterior(law, train, seed=seed, **fit_kw)`` is fitted). A
    posterior that failed its checks is used as it is (its status is in ``attrs``).
    """
    law, train, query, levels = _prepare(law, train, query, levels)
    if posterior is None:
        from ..bayes import fit_posterior

        posterior = fit_posterior(law, train, seed=seed, progress_bar=False, **fit_kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draws = np.asarray(posterior.predict_draws(query, "predictive", discrepancy="off",
                                                   seed=seed, allow_unconverged=True), float)
    ok = np.all(np.isfinite(draws) & (draws > 0), 1)
    if not ok.any():
        raise FitError(f"every predictive draw of {law.name} is non-finite on the query rows")
    settings = {"method": "fitted_noise", "draws": int(ok.sum()),
                "dropped_draws": int((~ok).sum()), "status": getattr(posterior, "status", "")}
    return _from_log_draws(np.log(draws[ok]), levels, taus, settings)
