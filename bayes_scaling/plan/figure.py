"""The PTPP paper's Figure 2 for an adaptation plan, with probability contours."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..bayes.predictive import order_statistic
from ..errors import BayesScalingError
from ..plots import GRID_POINTS, band, draw_band, fan_levels, style
from .adaptation import PlanProblem, source_base_loss, thin_draws
from .result import Plan, parse_forgetting

__all__ = ["plot_adaptation"]

# --- figure: the PTPP paper's Figure 2, with probabilities ---------------------------------------


def plot_adaptation(plan: Plan, target=None, source=None, *, n_grid: int = 61, max_draws: int = 400,
                    prob_levels: Sequence[float] = (0.5, 0.9), path=None):
    with style():
        return _plot_adaptation(plan, target, source, n_grid=n_grid, max_draws=max_draws,
                                prob_levels=prob_levels, path=path)


def frontier_grid(replay, atpp, n: int = GRID_POINTS):
    """A dense replay grid along a frontier known at ``replay`` (ATPP ``atpp``, ``inf``/NaN where
    infeasible): ATPP interpolated linearly in log ATPP between neighbouring feasible points;
    ``(replay, atpp)`` with ATPP NaN between an infeasible point and its neighbours (a gap)."""
    r = np.asarray(replay, float)
    a = np.asarray(atpp, float)
    ok = np.isfinite(a) & (a > 0)
    dense = np.linspace(r.min(), r.max(), n) if len(r) else r
    j = np.clip(np.searchsorted(r, dense, side="right") - 1, 0, max(len(r) - 2, 0))
    both = ok[j] & ok[np.minimum(j + 1, len(r) - 1)]
    both |= np.isin(dense, r[ok])
    la = np.log(np.where(ok, a, 1.0))
    out = np.exp(np.interp(dense, r, la))
    return dense, np.where(both, out, np.nan)


def _plot_adaptation(plan, target, source, *, n_grid, max_draws, prob_levels, path):
    """The PTPP paper's Figure 2 for ``plan``, with the chance-constrained optimum added, in the
    package's style (:func:`bayes_scaling.plots.style`).

    Left: forgetting landscape (median forecast, relative to L_src,0 when ``max_forgetting`` was
    relative) over replay x ATPP, with the forgetting boundary ``Delta L_src = delta``. Right: the
    target loss landscape with the boundary ``L_tgt = tau``. On both: the minimal-ATPP curve over
    replay, the deterministic optimum (star), the chance-constrained optimum (diamond) and
    probability contours ``P(constraint holds) in prob_levels`` (and ``plan.prob``).

    ``target``/``source`` default to the fits the plan was computed from (not stored by
    :meth:`Plan.save`). Returns the matplotlib figure (and writes it to ``path`` if given).
    """
    import matplotlib.pyplot as plt

    tf, sf = plan._fits if plan._fits else (None, None)
    target, source = target if target is not None else tf, source if source is not None else sf
    if target is None or source is None:
        raise BayesScalingError("plot_adaptation needs the target and source fits (a loaded Plan does "
                                "not carry them): plot_adaptation(plan, target, source)")
    target, source = thin_draws(target, max_draws), thin_draws(source, max_draws)
    fval, frel = parse_forgetting(plan.max_forgetting)
    r_lo, r_hi = plan.settings["replay_bounds"]
    a_lo, a_hi = plan.settings["atpp_bounds"]
    r = np.linspace(r_lo, r_hi, n_grid)
    a = np.geomspace(a_lo, a_hi, n_grid)
    RR, AA = np.meshgrid(r, a)
    if plan.source_base_method.startswith("law"):
        base, _, _ = source_base_loss(source, None, plan.N, plan.ptpp)
    else:
        base = plan.source_base["mean"]
    prob = PlanProblem(target, source, plan.N, plan.ptpp, plan.target_loss, fval, frel, base)
    Lt, Ls = prob.losses(RR.ravel(), AA.ravel() * plan.N)
    b = np.asarray(base, float)
    dl = Ls - b
    forget = dl / b if frel else dl
    delta = fval
    shape = RR.shape
    f_med = order_statistic(forget, 0.5).reshape(shape)
    t_med = order_statistic(Lt, 0.5).reshape(shape)
    p_f = np.mean(forget <= delta, axis=0).reshape(shape)
    p_t = np.mean(Lt <= plan.target_loss, axis=0).reshape(shape)
    levels = sorted(set(list(prob_levels) + ([plan.prob] if plan.prob else [])))

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2), constrained_layout=True,
                             gridspec_kw={"width_ratios": [1.15, 1.15, 1.0]})
    panels = (
        (axes[0], 100 * f_med if frel else f_med, p_f, 100 * delta if frel else delta,
         "forgetting " + ("(% of $L_{src,0}$, median)" if frel else "(nats, median)"), "coolwarm"),
        (axes[1], t_med, p_t, plan.target_loss, "target loss (median forecast)", "viridis"),
    )
    c = plan.curves
    for ax, Z, P, thr, label, cmap in panels:
        zmin = float(np.nanmin(Z))
        zmax = thr + 1.5 * max(thr - zmin, 1e-12)  # colour range centred on the threshold
        lv = np.linspace(zmin, zmax, 31)
        cf = ax.contourf(100 * RR, AA, np.clip(Z, zmin, zmax), levels=lv, cmap=cmap, extend="max")
        fig.colorbar(cf, ax=ax, label=label)
        ax.contour(100 * RR, AA, Z, levels=[thr], colors="k", linewidths=1.5)
        cs = ax.contour(100 * RR, AA, P, levels=levels, colors="w", linestyles="--", linewidths=1)
        ax.clabel(cs, fmt=lambda v: f"P={v:g}", fontsize=8)
        ok = np.isfinite(c["atpp_both_median"])
        ax.plot(100 * c["replay"][ok], c["atpp_both_median"][ok], color="k", lw=2.5,
                label="min ATPP (median forecast)")
        if "atpp_both_prob" in c:
            okp = np.isfinite(c["atpp_both_prob"])
            ax.plot(100 * c["replay"][okp], c["atpp_both_prob"][okp], color="m", lw=2, ls="-.",
                    label=f"min ATPP (p={plan.prob:g})")
        d = plan.deterministic
        ax.plot(100 * d.replay, d.atpp, marker="*", ms=18, color="gold", mec="k", ls="none",
                label=f"deterministic: {d.atpp:.3g} ATPP, {100 * d.replay:.0f}% replay")
        if plan.chance is not None:
            ch = plan.chance
            ax.plot(100 * ch.replay, ch.atpp, marker="D", ms=10, color="m", mec="k", ls="none",
                    label=f"p={plan.prob:g}: {ch.atpp:.3g} ATPP, {100 * ch.replay:.0f}% replay")
        ax.set_yscale("log")
        ax.set_xlabel("replay (%)")
        ax.set_ylabel("ATPP (adaptation tokens per parameter)")
        ax.set_ylim(a_lo, a_hi)
    fs = plan.max_forgetting if isinstance(plan.max_forgetting, str) else f"{plan.max_forgetting:+g}"
    axes[0].set_title(f"forgetting landscape (black: forgetting = {fs})")
    axes[1].set_title(f"target loss landscape (black: loss = {plan.target_loss:g})")

    # Right: the target loss along the median-forecast frontier (the paper's right panel).
    ax = axes[2]
    rf, af = frontier_grid(c["replay"].to_numpy(), c["atpp_both_median"].to_numpy())
    if np.isfinite(af).any():
        # the target loss along the frontier: bands from common draws on a dense replay grid
        rows = prob.rows(rf, np.nan_to_num(af, nan=a_lo) * plan.N)
        b = band(target, rows.rename(columns=dict(target.law.column_map)),
                 fan_levels(plan.interval), kind="mean")
        b.loc[np.isnan(af)] = np.nan
        draw_band(ax, 100 * rf, b, color="k", label="median, on the frontier")
        if "atpp_both_prob" in c:
            okp = np.isfinite(c["atpp_both_prob"]).to_numpy()
            if okp.any():
                Ltp, _ = prob.losses(c["replay"].to_numpy()[okp],
                                     c["atpp_both_prob"].to_numpy()[okp] * plan.N)
                ax.plot(100 * c["replay"].to_numpy()[okp], order_statistic(Ltp, 0.5), color="m",
                        lw=2, ls="-.", label=f"median, on the p={plan.prob:g} frontier")
    ax.axhline(plan.target_loss, color="r", ls=":", label=f"target loss {plan.target_loss:g}")
    d = plan.deterministic
    ax.plot(100 * d.replay, d.target_loss["median"], marker="*", ms=18, color="gold", mec="k",
            ls="none")
    if plan.chance is not None:
        ax.plot(100 * plan.chance.replay, plan.chance.target_loss["median"], marker="D", ms=10,
                color="m", mec="k", ls="none")
    ax.set_xlabel("replay (%)")
    ax.set_ylabel("target loss at the minimal ATPP")
    ax.set_title("resulting target loss along the frontier")
    ax.legend(loc="best", fontsize=7)
    h, l_ = axes[1].get_legend_handles_labels()
    fig.legend(h, l_, loc="lower center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, -0.06))
    fig.suptitle(f"Adaptation plan, N={plan.N:.3g}, PTPP={plan.ptpp:g} (dashed white: probability "
                 "the constraint holds)")
    if path is not None:
        fig.savefig(path, dpi=130, bbox_inches="tight")
    return fig
