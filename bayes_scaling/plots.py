"""Figures: observed vs fitted curves with credible bands, fan charts of forecasts, ArviZ
trace/pair plots, all in one style (:func:`style`).

Every function takes a fitted object (a :class:`~bayes_scaling.bayes.Posterior`, parameter draws
(:class:`~bayes_scaling.bayes.predictive.ParamDraws`), or a :class:`~bayes_scaling.fit.MapFit`,
drawn as a line without a band) and plain tables, returns a matplotlib ``Figure`` and, given
``path``, writes it as PNG. No pyplot state is used for our own figures (they are
``matplotlib.figure.Figure`` objects on the Agg canvas), so they can be drawn from scripts,
notebooks and the CLI alike.

Bands are drawn from common draws on a dense grid (:func:`common_draws`, :func:`band`): the law's
value per posterior draw at every grid point (:data:`GRID_POINTS` of them along a curve), the
observation noise and the model discrepancy of extrapolated points added with one standard normal
per draw, shared by every point (common random numbers), then quantiles across draws. The
marginal distribution at each point is the one ``Posterior.predict_draws`` gives, but the band's
edges move with ``x`` only as the law and the discrepancy's distance do: smooth, not the
Monte-Carlo noise of independent draws per point.

Grouping follows the law's variables: the x axis is the variable with the most distinct values
(``D`` for CPT tables), panels are the next one (``N``), colours the next (``replay``); any further
variables split lines within a panel (with ``ptpp`` in the panel title). A table whose rows do
not form curves (e.g. Epoch's 240 (N, D) points) is drawn as observed vs predicted.
"""
from __future__ import annotations

import contextlib
import functools
import math
import warnings

import numpy as np
import pandas as pd

from .data import log_scaled
from .errors import BayesScalingError

__all__ = ["BAND_COLORS", "BAND_LEVELS", "GRID_POINTS", "RC", "band", "band_from_draws",
           "common_draws", "dense_grid", "draw_band", "fan_chart", "fan_levels", "fit_plot", "forecast_plot",
           "grouping", "pair_plot", "parity_plot", "style", "styled", "trace_plot"]

MAX_PANELS = 12
MAX_COLORS = 8
#: Points of a curve's grid: bands are evaluated there, never on the table's own rows.
GRID_POINTS = 200
#: The central credible levels a fan shows (each band's edges: equal-tailed quantiles).
BAND_LEVELS = (0.5, 0.8, 0.9)
#: Fill colours of the nested bands of a single fan (the 90% band lies under the 80% and 50%).
BAND_COLORS = {0.5: "#5b9bd1", 0.8: "#a6c8e6", 0.9: "#d6e6f4"}
#: Opacity of each band when several curves of different colours share an axis (stacked, so the
#: inner bands come out darker).
BAND_ALPHA = {0.5: 0.30, 0.8: 0.18, 0.9: 0.12}
MEDIAN_COLOR = "#0d4a80"
DATA_COLOR = "0.45"
HIGHLIGHT_COLOR = "#b3261e"
#: The package's figure style (matplotlib rcParams), applied by :func:`style`.
RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "figure.titlesize": 11,
    "axes.grid": True,
    "axes.grid.which": "major",
    "grid.color": "0.88",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": __import__("cycler").cycler(color=[
        "#0d4a80", "#d1495b", "#2e933c", "#edae49", "#6b4c9a", "#00798c", "#8d6a4f", "#555555"]),
    "lines.linewidth": 1.5,
    "savefig.dpi": 130,
    "savefig.bbox": "tight",
}


@contextlib.contextmanager
def style():
    """The package's figure style as a matplotlib rcParams context (:data:`RC`: fonts, grid,
    colours; the bands' colours are :data:`BAND_COLORS`). Every figure of the package is created
    and saved inside it; use it around your own figures to match::

        with bs.plots.style():
            fig, ax = plt.subplots()
    """
    from matplotlib import rc_context

    with rc_context(RC):
        yield


def Figure(**kw):
    """A ``matplotlib.figure.Figure`` (matplotlib is imported when the first figure is drawn,
    not when the package is: it is most of an import's time)."""
    from matplotlib.figure import Figure as _Figure

    return _Figure(**kw)


def styled(fn):
    """Run a figure function inside :func:`style`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with style():
            return fn(*args, **kwargs)
    return wrapper


def dense_grid(lo: float, hi: float, n: int = GRID_POINTS, log: bool = True) -> np.ndarray:
    """``n`` points from ``lo`` to ``hi``, evenly spaced in log space when ``log`` (and lo > 0)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise BayesScalingError(f"a grid needs finite ends, got [{lo}, {hi}]")
    return np.geomspace(lo, hi, n) if log and lo > 0 else np.linspace(lo, hi, n)


# --- common draws ---------------------------------------------------------------------------------


def _is_posterior(fit) -> bool:
    return hasattr(fit, "idata")


def _call(fit, rows, kind, *, seed, max_draws, discrepancy="off"):
    """``fit.predict_draws`` for any fitted object, as floats: a posterior's with ``discrepancy``,
    ``ParamDraws``' with the seed, a ``MapFit``'s (one draw, ``kind="mean"`` only)."""
    if _is_posterior(fit):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a labelled posterior's warning: said by its caller
            out = fit.predict_draws(rows, kind, seed=seed, max_draws=max_draws,
                                    discrepancy=discrepancy)
    elif hasattr(fit, "sigma"):  # ParamDraws
        out = fit.thin(max_draws).predict_draws(rows, kind, seed=seed)
    else:
        out = fit.predict_draws(rows, kind)
    out = np.asarray(out, float)
    return out[None, :] if out.ndim == 1 else out


def common_draws(fit, grid, kind: str = "predictive", *, seed: int = 0, max_draws: int = 1000,
                 discrepancy=None) -> np.ndarray:
    """``(S, n)`` draws of the loss at the rows of ``grid``, every row from the same ``S`` draws.

    The model is ``Posterior.predict_draws``' (docs/forecasting.md): the law's value
    ``f(theta_s, x)``, for ``kind="predictive"`` times the observation noise
    ``exp(sigma_s eps_s)``, and for a row outside the fitted range times the model discrepancy
    ``exp(loc_s(x) + scale_s(x) z_s)`` (``loc = mu_s d^p_s``, ``scale = tau_s d^p_s``, with
    ``(p_s, tau_s, mu_s)`` drawn per draw from the discrepancy's posterior along the row's
    signature; a fixed tau: ``loc = 0``, ``scale = tau d``). Here ``eps_s`` and ``z_s`` are drawn
    once per draw and shared by every row (common random numbers), so a draw is a smooth curve
    over the grid and quantiles across draws have smooth edges. Column ``i`` is exactly
    ``predict_draws(grid.iloc[[i]], kind, seed=seed)``: the same marginal, another joint.

    Args:
        fit: a Posterior, ParamDraws or MapFit (one draw; ``kind="mean"`` only).
        grid: DataFrame of rows (the law's columns).
        kind: ``"mean"`` (the law's value, with the discrepancy) or ``"predictive"`` (a new
            measured loss).
        seed: seeds the noise and the discrepancy (as ``predict_draws``).
        max_draws: thin the posterior evenly to at most this many draws.
        discrepancy: a posterior's discrepancy option (``None``: its default).
    """
    if kind not in ("mean", "predictive"):
        raise BayesScalingError(f"kind must be 'mean' or 'predictive', got {kind!r}")
    grid = pd.DataFrame(grid).reset_index(drop=True)
    kw = {"seed": seed, "max_draws": max_draws}
    out = _call(fit, grid, "mean", **kw)
    if not len(grid):
        return out
    row = grid.iloc[:1]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if kind == "predictive":  # exp(sigma_s eps_s), the posterior's own noise, one per draw
            out = out * (_call(fit, row, "predictive", **kw) / _call(fit, row, "mean", **kw))
        if _is_posterior(fit):
            out = out * _discrepancy_factor(fit, grid, discrepancy, seed=seed, S=len(out))
    return out


def _discrepancy_factor(post, grid, discrepancy, *, seed, S):
    """``(S, n)`` factors ``exp(loc_s(x) + scale_s(x) z_s)`` of a posterior's discrepancy, with
    one ``z_s`` per draw for every row (``1`` where no row extrapolates)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a labelled posterior's warning: said by its caller
        factor, _ = post.discrepancy_draws(grid, S, seed=seed, discrepancy=discrepancy,
                                           shared_z=True)
    return np.ones(1) if factor is None else factor


def band_from_draws(y: np.ndarray, levels=BAND_LEVELS) -> pd.DataFrame:
    """Median and equal-tailed ``levels`` bounds across draws (rows of ``y``, shape ``(S, n)``):
    columns ``median``, ``lower_50``, ``upper_50``, ... (level in percent). A draw that is not
    finite at some point is left out of every point, with a warning saying how many."""
    y = np.asarray(y, float)
    ok = np.all(np.isfinite(y), axis=1)
    if not ok.any():
        raise BayesScalingError(f"every one of the {len(ok)} draws is non-finite (or no positive "
                                "loss) somewhere on the grid: check the grid's columns and units "
                                "against the fitted table")
    if not ok.all():
        warnings.warn(f"{int((~ok).sum())} of {len(ok)} draws are non-finite (or no positive loss) "
                      "somewhere on the grid and are left out of the band", stacklevel=2)
        y = y[ok]
    out = {"median": np.median(y, axis=0)}
    for lv in sorted(levels):
        if not 0 < lv < 1:
            raise BayesScalingError(f"band levels must be in (0, 1), got {lv}")
        a = (1 - lv) / 2
        lo, hi = np.quantile(y, [a, 1 - a], axis=0)
        out[f"lower_{_pct(lv)}"], out[f"upper_{_pct(lv)}"] = lo, hi
    return pd.DataFrame(out)


def band(fit, grid, levels=BAND_LEVELS, kind: str = "predictive", *, seed: int = 0,
         max_draws: int = 1000, discrepancy=None) -> pd.DataFrame:
    """The fan at the rows of ``grid``: :func:`band_from_draws` of :func:`common_draws`
    (one row per grid row, same index)."""
    y = common_draws(fit, grid, kind, seed=seed, max_draws=max_draws, discrepancy=discrepancy)
    out = band_from_draws(y, levels)
    out.index = pd.DataFrame(grid).index
    return out


def _pct(level) -> str:
    return f"{100 * level:g}"


def fan_levels(interval) -> tuple:
    """The levels of a fan up to ``interval``: the :data:`BAND_LEVELS` below it, and it."""
    if not 0 < interval < 1:
        raise BayesScalingError(f"interval must be in (0, 1), got {interval}")
    return tuple(lv for lv in BAND_LEVELS if lv < interval) + (interval,)


def draw_band(ax, x, b: pd.DataFrame, *, color=None, label=None, median=True):
    """Draw the nested bands of :func:`band`'s table ``b`` along ``x`` (widest first) and its
    median. ``color=None``: the single-fan colours :data:`BAND_COLORS`; a colour: that colour at
    the opacities :data:`BAND_ALPHA` (for several curves on one axis)."""
    levels = sorted((float(c[len("lower_"):]) / 100 for c in b if c.startswith("lower_")),
                    reverse=True)
    for lv in levels:
        lo, hi = b[f"lower_{_pct(lv)}"], b[f"upper_{_pct(lv)}"]
        if color is None:
            fill = BAND_COLORS.get(lv, BAND_COLORS[0.9])
            ax.fill_between(x, lo, hi, color=fill, lw=0, label=f"{_pct(lv)}% interval")
        else:
            ax.fill_between(x, lo, hi, color=color, alpha=BAND_ALPHA.get(lv, 0.12), lw=0)
    if median:
        ax.plot(x, b["median"], color=MEDIAN_COLOR if color is None else color,
                label=label if label is not None else ("median" if color is None else None))


def _band_or_line(fit, grid, kind, interval, seed=0):
    """A fan up to ``interval`` (:func:`band`), or a one-draw fit's line (median only)."""
    y = common_draws(fit, grid, kind, seed=seed)
    return band_from_draws(y, fan_levels(interval) if y.shape[0] > 1 else ())


# --- figures --------------------------------------------------------------------------------------


def grouping(law, df, x=None, panel=None, color=None):
    """(x, panel variables, colour variable) for a table, from the law's variables.

    Convention (as in the papers' figures): one panel per model size (the law's first variable,
    N or M), the most finely varied remaining variable on the x axis, and the next one (with at
    most MAX_COLORS values) as colour; any other varying variable adds panels.
    """
    cols = [law.column(v) for v in law.variables if law.column(v) in df]
    nuniq = {c: df[c].nunique() for c in cols}
    varying = [c for c in cols if nuniq[c] > 1]
    size = cols[0] if cols and nuniq.get(cols[0], 0) > 1 else None
    if x is None:
        rest = [c for c in varying if c != size] or varying
        x = max(rest, key=lambda c: nuniq[c]) if rest else cols[0]
    others = [c for c in varying if c != x]
    if color is None:
        cands = [c for c in others if c != size and c != panel and nuniq[c] <= MAX_COLORS]
        color = cands[0] if cands else None
    if panel is None:
        panel = [c for c in others if c != color]
    elif isinstance(panel, str):
        panel = [panel]
    return x, list(panel), color


def _curve_grid(law, rows, x, logx, n=GRID_POINTS):
    """A dense grid along ``x`` over the range of ``rows``, the law's other columns held at the
    first row's values."""
    lo, hi = rows[x].min(), rows[x].max()
    grid = dense_grid(lo, hi, n, log=logx)
    first = rows.iloc[0]
    new = pd.DataFrame({c: np.full(len(grid), first[c]) for c in rows.columns
                        if c in [law.column(v) for v in law.variables] and c != x})
    new[x] = grid
    return new


@styled
def fit_plot(fit, df, *, x=None, panel=None, color=None, interval=0.9, kind="mean", logx="auto",
             n_grid=GRID_POINTS, path=None, title=None):
    """Observed losses and the fitted law with its credible bands up to ``interval``.

    Args:
        fit: a Posterior (bands from its draws, :func:`band`) or MapFit (a line).
        df: the loss table (``loss`` and the law's columns).
        x, panel, color: override the grouping (column names; ``panel`` may be a list).
        interval: the widest central credible band; the :data:`BAND_LEVELS` below it are drawn
            inside it.
        kind: ``"mean"`` (band of the law's value) or ``"predictive"`` (of a new measurement).
        logx: log-scale x axis; ``"auto"`` (default): when every ``x`` value drawn is positive
            (a proportion that may be 0 or a signed input stays on a linear axis).
        n_grid: points per curve.
        path: write a PNG there.
    """
    law = fit.law
    x, panels, color = grouping(law, df, x, panel, color)
    logx = _log_axis(logx, df[x])
    keys = panels
    groups = list(df.groupby(keys, sort=True)) if keys else [((), df)]
    if len(groups) > MAX_PANELS:
        return parity_plot(fit, df, interval=interval, path=path, title=title)
    ncol = min(len(groups), min(len(groups), 4))
    nrow = math.ceil(len(groups) / ncol)
    fig = Figure(figsize=(4.2 * ncol, 3.4 * nrow), constrained_layout=True)
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    cvals = sorted(df[color].unique()) if color else [None]
    cmap = _colors(len(cvals))
    for ax, (gkey, g) in zip(axes, groups):
        gkey = gkey if isinstance(gkey, tuple) else (gkey,)
        for ci, cv in enumerate(cvals):
            gg = g if cv is None else g[g[color] == cv]
            if gg.empty:
                continue
            new = _curve_grid(law, gg, x, logx, n_grid)
            b = _band_or_line(fit, new, kind, interval)
            col = cmap[ci] if color else None
            label = None if cv is None else f"{color}={cv:g}"
            draw_band(ax, new[x], b, color=col, label=label)
            ax.scatter(gg[x], gg["loss"], s=12, color=col or DATA_COLOR, edgecolor="k",
                       linewidth=0.3, zorder=3)
        if logx:
            _logx(ax)
        ax.set_xlabel(x)
        ax.set_ylabel("loss")
        ax.set_title(", ".join(f"{k}={v:g}" for k, v in zip(keys, gkey)) or law.name)
    for ax in axes[len(groups):]:
        ax.set_visible(False)
    if color or not keys:
        axes[0].legend(loc="best")
    what = "predictive" if kind == "predictive" else "credible"
    fig.suptitle(title or f"{law.name}: observed (points) and fitted (median, "
                 f"{'/'.join(_pct(lv) for lv in fan_levels(interval))}% {what} bands)")
    return _save(fig, path)


@styled
def parity_plot(fit, df, *, interval=0.9, kind="mean", path=None, title=None):
    """Observed vs predicted loss with the ``interval`` credible interval of every prediction."""
    b = _band_or_line(fit, df, kind, interval)
    med = b["median"].to_numpy()
    fig = Figure(figsize=(5, 5), constrained_layout=True)
    ax = fig.subplots()
    obs = np.asarray(df["loss"], float)
    if f"lower_{_pct(interval)}" in b:
        lo, hi = b[f"lower_{_pct(interval)}"].to_numpy(), b[f"upper_{_pct(interval)}"].to_numpy()
        ax.errorbar(obs, med, yerr=[med - lo, hi - med], fmt="none", ecolor=BAND_COLORS[0.8],
                    lw=1)
    ax.scatter(obs, med, s=10, color=MEDIAN_COLOR, zorder=3)
    lim = [min(obs.min(), med.min()), max(obs.max(), med.max())]
    ax.plot(lim, lim, color="k", lw=0.8)
    ax.set_xlabel("observed loss")
    ax.set_ylabel("predicted loss (median)")
    ax.set_title(title or f"{fit.law.name}: observed vs predicted ({_pct(interval)}% intervals)")
    return _save(fig, path)


@styled
def forecast_plot(fit, new_df, *, x=None, train=None, heldout=None, interval=0.9,
                  kind="predictive", logx="auto", n_grid=GRID_POINTS, path=None, title=None):
    """Forecast bands over the range of ``new_df`` along ``x`` (one curve per combination of the
    other columns, evaluated on a dense grid of ``n_grid`` points), with the training rows
    (grey) and held-out rows (red crosses) if given. A curve of one row is a point with its
    ``interval`` bar."""
    law = fit.law
    x, panels, color = grouping(law, new_df, x)
    logx = _log_axis(logx, *(t[x] for t in (new_df, train, heldout) if t is not None))
    keys = panels + ([color] if color else [])
    groups = list(new_df.groupby(keys, sort=True)) if keys else [((), new_df)]
    fig = Figure(figsize=(6.5, 4.2), constrained_layout=True)
    ax = fig.subplots()
    single = len(groups) == 1
    cmap = _colors(len(groups))
    for i, (gkey, g) in enumerate(groups):
        gkey = gkey if isinstance(gkey, tuple) else (gkey,)
        label = ", ".join(f"{k}={v:g}" for k, v in zip(keys, gkey)) or None
        col = None if single else cmap[i]
        if g[x].nunique() > 1:
            new = _curve_grid(law, g, x, logx, n_grid)
            draw_band(ax, new[x], _band_or_line(fit, new, kind, interval), color=col,
                      label=label)
        else:
            b = _band_or_line(fit, g.iloc[:1], kind, interval)
            lo = b.get(f"lower_{_pct(interval)}", b["median"]).iloc[0]
            hi = b.get(f"upper_{_pct(interval)}", b["median"]).iloc[0]
            m = b["median"].iloc[0]
            ax.errorbar(g[x].iloc[:1], [m], yerr=[[m - lo], [hi - m]], fmt="o", capsize=3,
                        color=col or MEDIAN_COLOR, label=label)
    if train is not None:
        ax.scatter(train[x], train["loss"], s=8, color=DATA_COLOR, label="fitted rows", zorder=3)
    if heldout is not None:
        ax.scatter(heldout[x], heldout["loss"], s=22, marker="x", color=HIGHLIGHT_COLOR,
                   label="held out", zorder=4)
    if logx:
        _logx(ax)
    ax.set_xlabel(x)
    ax.set_ylabel("loss")
    labelled = ax.get_legend_handles_labels()[1]
    if labelled and (len(groups) <= 10 or train is not None or heldout is not None):
        ax.legend(loc="best")
    what = "predictive" if kind == "predictive" else "credible"
    ax.set_title(title or f"{law.name}: forecast, "
                 f"{'/'.join(_pct(lv) for lv in fan_levels(interval))}% {what} bands")
    return _save(fig, path)


@styled
def fan_chart(fit, grid, x, *, data=None, points=None, levels=BAND_LEVELS, kind="predictive",
              logx="auto", xlabel=None, seed=0, max_draws=1000, discrepancy=None, path=None,
              title=None):
    """A fan chart: the forecast's nested ``levels`` bands and median along the rows of ``grid``
    (a path through the law's inputs, e.g. a compute-optimal line; ``x`` a column of ``grid``
    to plot them against), the observed ``data`` rows (with an ``x`` column and ``loss``) as
    points, and ``points`` (rows with an ``x`` column, e.g. a target model) each drawn with its
    widest interval as a bar and labelled with its median and interval.

    Bands come from :func:`band` (common draws, so their edges are smooth); ``seed``,
    ``max_draws`` and ``discrepancy`` are passed to it. Returns the figure (its axes' first
    element holds the plot); the bands are in ``fig.bands`` (the :func:`band` table along
    ``grid``) and the points' intervals in ``fig.points``.
    """
    if x not in grid:
        raise BayesScalingError(f"fan_chart: the grid has no column {x!r} to plot against "
                                f"(it has {list(grid.columns)}); add it, e.g. C = 6 N D")
    grid = pd.DataFrame(grid).reset_index(drop=True)
    logx = _log_axis(logx, grid[x], *(pd.DataFrame(t)[x] for t in (data, points)
                                      if t is not None and len(t) and x in pd.DataFrame(t)))
    kw = {"seed": seed, "max_draws": max_draws, "discrepancy": discrepancy}
    b = band(fit, grid, levels, kind, **kw)
    fig = Figure(figsize=(7.0, 4.6), constrained_layout=True)
    ax = fig.subplots()
    if data is not None:
        ax.scatter(data[x], data["loss"], s=9, color=DATA_COLOR, alpha=0.7, lw=0,
                   label="observed runs", zorder=2)
    draw_band(ax, grid[x], b)
    pts = None
    if points is not None and len(points):
        pts = band(fit, points, levels, kind, **kw)
        top = _pct(max(levels))
        for (_, row), (_, q) in zip(pd.DataFrame(points).iterrows(), pts.iterrows()):
            m, lo, hi = q["median"], q[f"lower_{top}"], q[f"upper_{top}"]
            ax.errorbar([row[x]], [m], yerr=[[m - lo], [hi - m]], fmt="D", ms=5, capsize=4,
                        color=HIGHLIGHT_COLOR, zorder=4)
            ax.annotate(f"{m:.3f} [{lo:.3f}, {hi:.3f}]", (row[x], hi), textcoords="offset points",
                        xytext=(-4, 6), ha="right", fontsize=8, color=HIGHLIGHT_COLOR)
    if logx:
        _logx(ax)
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel("loss" if kind == "mean" else "loss (a new measurement)")
    ax.legend(loc="upper right")
    ax.set_title(title or f"{fit.law.name}: forecast fan, {'/'.join(map(_pct, levels))}% bands")
    fig.bands, fig.points = b, pts
    return _save(fig, path)


def trace_plot(post, path=None, var_names=None):
    """ArviZ trace plot of the parameters (one row each: density per chain, trace)."""
    import arviz as az
    import matplotlib.pyplot as plt

    with style(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = az.plot_trace(post.idata, var_names=var_names or post.param_names, compact=False)
        fig = np.asarray(axes).ravel()[0].figure
        _save(fig, path)
    plt.close(fig)
    return fig


def pair_plot(post, path=None, var_names=None, divergences=True):
    """ArviZ pair plot (scatter of every pair of parameters), divergent draws highlighted."""
    import arviz as az
    import matplotlib.pyplot as plt

    has_div = divergences and hasattr(post.idata, "sample_stats")
    with style(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = az.plot_pair(post.idata, var_names=var_names or post.param_names, kind="scatter",
                            divergences=has_div, marginals=True, scatter_kwargs={"alpha": 0.2})
        fig = np.asarray(axes).ravel()[0].figure
        _save(fig, path)
    plt.close(fig)
    return fig


def _log_axis(logx, *values) -> bool:
    """``logx`` as asked; ``"auto"``: True when every value drawn along the axis is positive."""
    if logx != "auto":
        return bool(logx)
    return log_scaled(np.concatenate([np.ravel(np.asarray(a, float)) for a in values] or [[]]))


def _logx(ax):
    """A log x axis whose minor ticks are labelled only when it spans less than 0.7 decades
    (matplotlib labels some up to a decade, and they overlap)."""
    from matplotlib.ticker import LogFormatterSciNotation

    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(LogFormatterSciNotation(labelOnlyBase=False,
                                                         minor_thresholds=(0.7, 0.3)))


def _colors(n):
    from matplotlib import colormaps

    cm = colormaps["viridis"]
    return [cm(0.1 + 0.8 * i / max(n - 1, 1)) for i in range(n)]


def _save(fig, path):
    if path is not None:
        fig.savefig(str(path))
    return fig
