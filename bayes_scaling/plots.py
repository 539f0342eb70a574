"""Figures: observed vs fitted curves with credible bands, forecasts, ArviZ trace/pair plots.

Every function takes a fitted object (a :class:`~bayes_scaling.bayes.Posterior`, or a
:class:`~bayes_scaling.fit.MapFit`, drawn as a line without a band) and plain tables, returns a
matplotlib ``Figure`` and, given ``path``, writes it as PNG. No pyplot state is used for our own
figures (they are ``matplotlib.figure.Figure`` objects on the Agg canvas), so they can be drawn
from scripts, notebooks and the CLI alike.

Grouping follows the law's variables: the x axis is the variable with the most distinct values
(``D`` for CPT tables), panels are the next one (``N``), colours the next (``replay``); any further
variables split lines within a panel (with ``ptpp`` in the panel title). A table whose rows do
not form curves (e.g. Epoch's 240 (N, D) points) is drawn as observed vs predicted.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

MAX_PANELS = 12
MAX_COLORS = 8


def _draws(fit, df, kind="mean", max_draws=1000):
    if hasattr(fit, "idata"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fit.predict_draws(df, kind, max_draws=max_draws)
    return fit.predict_draws(df, kind)


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


def fit_plot(fit, df, *, x=None, panel=None, color=None, interval=0.9, kind="mean", logx=True,
             n_grid=60, path=None, title=None):
    """Observed losses and the fitted law with its ``interval`` credible band.

    Args:
        fit: a Posterior (band from its draws) or MapFit (a line).
        df: the loss table (``loss`` and the law's columns).
        x, panel, color: override the grouping (column names; ``panel`` may be a list).
        interval: central credible interval of the band.
        kind: ``"mean"`` (band of the law's value) or ``"predictive"`` (of a new measurement).
        logx: log-scale x axis.
        n_grid: points per curve.
        path: write a PNG there.
    """
    law = fit.law
    x, panels, color = grouping(law, df, x, panel, color)
    keys = panels
    groups = list(df.groupby(keys, sort=True)) if keys else [((), df)]
    if len(groups) > MAX_PANELS:
        return parity_plot(fit, df, interval=interval, path=path, title=title)
    ncol = min(len(groups), 4 if len(groups) > 4 else len(groups))
    nrow = math.ceil(len(groups) / ncol)
    fig = Figure(figsize=(4.2 * ncol, 3.4 * nrow), constrained_layout=True)
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    cvals = sorted(df[color].unique()) if color else [None]
    cmap = _colors(len(cvals))
    a = (1 - interval) / 2
    for ax, (gkey, g) in zip(axes, groups):
        gkey = gkey if isinstance(gkey, tuple) else (gkey,)
        for ci, cv in enumerate(cvals):
            gg = g if cv is None else g[g[color] == cv]
            if gg.empty:
                continue
            lo, hi = gg[x].min(), gg[x].max()
            grid = np.geomspace(lo, hi, n_grid) if logx and lo > 0 else np.linspace(lo, hi, n_grid)
            row = gg.iloc[0]
            new = pd.DataFrame({c: np.full(n_grid, row[c]) for c in gg.columns
                                if c in [law.column(v) for v in law.variables]})
            new[x] = grid
            y = _draws(fit, new, kind)
            med = np.median(y, 0)
            col = cmap[ci]
            label = None if cv is None else f"{color}={cv:g}"
            ax.plot(grid, med, color=col, lw=1.5, label=label)
            if y.shape[0] > 1:
                qlo, qhi = np.quantile(y, [a, 1 - a], axis=0)
                ax.fill_between(grid, qlo, qhi, color=col, alpha=0.25, lw=0)
            ax.scatter(gg[x], gg["loss"], s=12, color=col, edgecolor="k", linewidth=0.3, zorder=3)
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel("loss")
        ax.set_title(", ".join(f"{k}={v:g}" for k, v in zip(keys, gkey)) or law.name, fontsize=9)
    for ax in axes[len(groups):]:
        ax.set_visible(False)
    if color:
        axes[0].legend(fontsize=7, frameon=False)
    band = f"{int(round(100 * interval))}% {'predictive' if kind == 'predictive' else 'credible'} band"
    fig.suptitle(title or f"{law.name}: observed (points) and fitted (median, {band})", fontsize=10)
    return _save(fig, path)


def parity_plot(fit, df, *, interval=0.9, kind="mean", path=None, title=None):
    """Observed vs predicted loss with the ``interval`` credible interval of every prediction."""
    y = _draws(fit, df, kind)
    med = np.median(y, 0)
    a = (1 - interval) / 2
    fig = Figure(figsize=(5, 5), constrained_layout=True)
    ax = fig.subplots()
    obs = np.asarray(df["loss"], float)
    if y.shape[0] > 1:
        lo, hi = np.quantile(y, [a, 1 - a], axis=0)
        ax.errorbar(obs, med, yerr=[med - lo, hi - med], fmt="none", ecolor="C0", alpha=0.4, lw=1)
    ax.scatter(obs, med, s=10, color="C0", zorder=3)
    lim = [min(obs.min(), med.min()), max(obs.max(), med.max())]
    ax.plot(lim, lim, color="k", lw=0.8)
    ax.set_xlabel("observed loss")
    ax.set_ylabel("predicted loss (median)")
    ax.set_title(title or f"{fit.law.name}: observed vs predicted ({int(100 * interval)}% intervals)",
                 fontsize=10)
    return _save(fig, path)


def forecast_plot(fit, new_df, *, x=None, train=None, heldout=None, interval=0.9,
                  kind="predictive", logx=True, path=None, title=None):
    """Forecast bands at new rows along ``x`` (one curve per combination of the other columns),
    with the training rows (grey) and held-out rows (red crosses) if given."""
    law = fit.law
    x, panels, color = grouping(law, new_df, x)
    keys = panels + ([color] if color else [])
    groups = list(new_df.groupby(keys, sort=True)) if keys else [((), new_df)]
    fig = Figure(figsize=(6.5, 4.2), constrained_layout=True)
    ax = fig.subplots()
    cmap = _colors(len(groups))
    a = (1 - interval) / 2
    for i, (gkey, g) in enumerate(groups):
        g = g.sort_values(x)
        y = _draws(fit, g, kind)
        med = np.median(y, 0)
        gkey = gkey if isinstance(gkey, tuple) else (gkey,)
        label = ", ".join(f"{k}={v:g}" for k, v in zip(keys, gkey)) or None
        ax.plot(g[x], med, color=cmap[i], lw=1.5, label=label)
        if y.shape[0] > 1:
            lo, hi = np.quantile(y, [a, 1 - a], axis=0)
            ax.fill_between(g[x], lo, hi, color=cmap[i], alpha=0.2, lw=0)
    if train is not None:
        ax.scatter(train[x], train["loss"], s=8, color="0.5", label="fitted rows", zorder=3)
    if heldout is not None:
        ax.scatter(heldout[x], heldout["loss"], s=22, marker="x", color="red", label="held out",
                   zorder=4)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel("loss")
    labelled = ax.get_legend_handles_labels()[1]
    if labelled and (len(groups) <= 10 or train is not None or heldout is not None):
        ax.legend(fontsize=7, frameon=False)
    ax.set_title(title or f"{law.name}: forecast, {int(100 * interval)}% "
                 f"{'predictive' if kind == 'predictive' else 'credible'} band", fontsize=10)
    return _save(fig, path)


def trace_plot(post, path=None, var_names=None):
    """ArviZ trace plot of the parameters (one row each: density per chain, trace)."""
    import arviz as az
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = az.plot_pair(post.idata, var_names=var_names or post.param_names, kind="scatter",
                            divergences=has_div, marginals=True, scatter_kwargs={"alpha": 0.2})
    fig = np.asarray(axes).ravel()[0].figure
    _save(fig, path)
    plt.close(fig)
    return fig


def _colors(n):
    from matplotlib import colormaps

    cm = colormaps["viridis"]
    return [cm(0.1 + 0.8 * i / max(n - 1, 1)) for i in range(n)]


def _save(fig, path):
    if path is not None:
        fig.savefig(str(path), dpi=120)
    return fig
