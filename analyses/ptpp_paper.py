"""The PTPP paper's tables and figures, regenerated on the bundled ``bible_ptpp`` sweep.

    python analyses/ptpp_paper.py                      # point fits + Laplace posteriors
    python analyses/ptpp_paper.py --posterior nuts     # NUTS posteriors instead
    python analyses/ptpp_paper.py --posterior none     # point fits only
    python analyses/ptpp_paper.py --quick              # 8 starts, no posteriors (smoke run)

Goffinet et al., *PTPP-Aware Adaptation Scaling Laws* (arXiv 2510.23198): fit on the pre-training
stages PTPP = 15 and 31, predict every adaptation run of the unseen stage PTPP = 279.

Writes into ``analyses/out/ptpp_paper/``:

- ``ptpp_paper.md``: Tables 1 and 2, the appendix tables (target and source domain; no anchors,
  with the 241M-style anchors, i.e. every (replay, D) point of our smallest model; the D-CPT
  oracle) with the paper's six metrics, the probabilistic metrics of the Bayesian fits, the
  paper's numbers next to ours, and the comparison of rankings and claims;
- ``figure1_test_stage.png``: test-stage predictions of Form 3 vs observations, one panel per
  model size, one colour per replay ratio, 90% bands from the posterior;
- ``figure3_in_sample.png``: the in-sample grid of Form 3 (rows: replay; columns: sizes).

It runs on whatever the table holds and says what is missing (the PTPP = 279 stage is the last
the training sweep produces).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scaling as bs
from bayes_scaling import evaluate as ev

OUT = Path(__file__).resolve().parent / "out" / "ptpp_paper"
TRAIN_PTPP, TEST_PTPP = (15, 31), 279
DELTA = 0.02
LAWS = {"Form 1 (Additive)": "ptpp_floor", "Form 2 (Gated)": "ptpp_gated",
        "Form 3 (G+F)": "ptpp_gated_floor"}
SHORT = {"Form 1 (Additive)": "F1", "Form 2 (Gated)": "F2", "Form 3 (G+F)": "F3",
         ev.TRANSFER: "D-CPT", ev.ORACLE: "oracle"}
SIX = ("huber_log", "rmse_log", "mae_rel", "mape_clip", "calib_intercept", "calib_slope")
DOMAINS = {"target": "French (target)", "source": "English/Arabic (source)"}

# The paper's Appendix A and B (HTML extraction): Huber_log, RMSE_log, MAE_rel, MAPE_clip,
# intercept, slope. French with anchors has no D-CPT row in the paper.
PAPER = {
    ("target", "none"): {
        "Form 1 (Additive)": (2.34e-4, 2.27e-2, 2.08e-2, 2.08e-2, -0.01, 0.991),
        "Form 2 (Gated)": (1.99e-4, 2.12e-2, 1.83e-2, 1.83e-2, 0.05, 0.970),
        "Form 3 (G+F)": (4.43e-5, 9.53e-3, 6.70e-3, 6.70e-3, 0.01, 0.991),
        ev.TRANSFER: (4.74e-4, 3.47e-2, 3.43e-2, 3.43e-2, -0.00, 0.961),
    },
    ("target", "anchors"): {
        "Form 1 (Additive)": (5.22e-5, 1.02e-2, 8.56e-3, 8.56e-3, 0.03, 0.956),
        "Form 2 (Gated)": (4.23e-5, 9.20e-3, 8.17e-3, 8.17e-3, 0.00, 0.992),
        "Form 3 (G+F)": (3.54e-5, 8.42e-3, 7.39e-3, 7.39e-3, 0.00, 0.992),
    },
    ("source", "none"): {
        "Form 1 (Additive)": (9.89e-5, 1.44e-2, 1.18e-2, 1.18e-2, -0.05, 1.034),
        "Form 2 (Gated)": (2.79e-4, 2.75e-2, 2.27e-2, 2.27e-2, -0.03, 1.045),
        "Form 3 (G+F)": (7.55e-4, 5.06e-2, 4.65e-2, 4.65e-2, 0.01, 1.030),
        ev.TRANSFER: (5.73e-4, 4.08e-2, 3.91e-2, 3.91e-2, 0.04, 0.932),
    },
    ("source", "anchors"): {
        "Form 1 (Additive)": (9.21e-5, 1.39e-2, 1.14e-2, 1.14e-2, 0.01, 0.981),
        "Form 2 (Gated)": (5.94e-5, 1.10e-2, 9.01e-3, 9.01e-3, 0.04, 0.960),
        "Form 3 (G+F)": (8.77e-5, 1.36e-2, 1.14e-2, 1.14e-2, 0.00, 0.989),
        ev.TRANSFER: (5.73e-4, 4.08e-2, 3.91e-2, 3.91e-2, 0.04, 0.932),
    },
    ("target", "oracle"): {ev.ORACLE: (2.05e-6, 2.03e-3, 1.63e-3, 1.63e-3, 0.00, 1.000)},
    ("source", "oracle"): {ev.ORACLE: (1.67e-5, 5.77e-3, 4.44e-3, 4.44e-3, -0.00, 1.001)},
}


# ==================================================================================================
# Data


def load_table() -> pd.DataFrame:
    """``bible_ptpp`` through ``bs.datasets.load`` (or the bundled CSV while it has no datasheet)."""
    try:
        return bs.datasets.load("bible_ptpp")
    except bs.DataError:
        from importlib import resources

        with (resources.files("bayes_scaling.datasets") / "bible_ptpp.csv").open("rb") as fh:
            return pd.read_csv(fh)


def inventory(df: pd.DataFrame) -> pd.DataFrame:
    """Adaptation rows (D > 0) per (domain, PTPP, size): what the sweep has produced so far."""
    cpt = df[df["D"] > 0]
    col = "size" if "size" in cpt.columns else "N"
    inv = cpt.groupby(["domain", "ptpp", col]).size().unstack(col, fill_value=0)
    return inv


def size_labels(df: pd.DataFrame) -> dict:
    """N -> label (the sweep's size names when present, else N)."""
    if "size" in df.columns:
        return dict(df.groupby("N")["size"].first())
    return {n: f"N = {n:.3g}" for n in sorted(df["N"].unique())}


# ==================================================================================================
# Tables


def paper_frame(domain, setting) -> pd.DataFrame:
    rows = [dict(label=k, **dict(zip(SIX, v))) for k, v in PAPER.get((domain, setting), {}).items()]
    return pd.DataFrame(rows)


def ranking(table: pd.DataFrame, metric="huber_log", labels=None) -> str:
    t = table if labels is None else table[table["label"].isin(labels)]
    t = t.dropna(subset=[metric]).sort_values(metric)
    return " < ".join(SHORT.get(lab, lab) for lab in t["label"])


def six_metric_table(res: ev.Evaluation, fit="map", roles=("candidate", "transfer")):
    t = res.table[(res.table["fit"] == fit) & res.table["role"].isin(roles)]
    return t[["label", *SIX]].reset_index(drop=True)


def side_by_side(ours: pd.DataFrame, domain, setting) -> pd.DataFrame:
    """Ours and the paper's values of Huber_log, MAE_rel and slope in one table."""
    paper = paper_frame(domain, setting).set_index("label") if PAPER.get((domain, setting)) \
        else pd.DataFrame(columns=SIX)
    rows = []
    for _, r in ours.iterrows():
        p = paper.loc[r["label"]] if r["label"] in paper.index else None
        rows.append(dict(label=r["label"], huber_log=r["huber_log"],
                         paper_huber_log=np.nan if p is None else p["huber_log"],
                         mae_rel=r["mae_rel"], paper_mae_rel=np.nan if p is None else p["mae_rel"],
                         calib_slope=r["calib_slope"],
                         paper_calib_slope=np.nan if p is None else p["calib_slope"]))
    return pd.DataFrame(rows)


# ==================================================================================================
# Figures


def _grid(sub: pd.DataFrame, n=bs.plots.GRID_POINTS):
    """A fine D grid per (N, replay, ptpp) over the observed D range of that curve."""
    rows = []
    for (n_, r, p), g in sub.groupby(["N", "replay", "ptpp"]):
        for d in np.geomspace(g["D"].min() * 0.8, g["D"].max() * 1.2, n):
            rows.append(dict(N=n_, replay=r, ptpp=p, D=d))
    return pd.DataFrame(rows)


def _bands(post, grid, level=0.9):
    """The fan of the predictive (:func:`bs.plots.band`: common draws, so smooth edges) at the
    grid's rows, up to ``level``; ``None`` without a posterior (a draw that is not finite on the
    whole grid is left out, and said)."""
    if post is None:
        return None
    return bs.plots.band(post, grid, bs.plots.fan_levels(level), kind="predictive")


@bs.plots.styled
def figure1(df_dom, fit, post, path, title):
    """Test-stage predictions vs observations: one panel per size, one colour per replay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = df_dom[np.isclose(df_dom["ptpp"], TEST_PTPP)]
    sizes = sorted(test["N"].unique())
    labels = size_labels(df_dom)
    colours = dict(zip(sorted(test["replay"].unique()), ["C0", "C1", "C2", "C3", "C4"]))
    fig, axes = plt.subplots(1, len(sizes), figsize=(3.6 * len(sizes), 3.4), squeeze=False,
                             sharey=False)
    for ax, n in zip(axes[0], sizes):
        obs = test[test["N"] == n]
        grid = _grid(obs)
        pred = np.asarray(fit.predict(grid))
        b = _bands(post, grid)
        for r, c in colours.items():
            m = np.isclose(grid["replay"], r)
            ax.plot(grid["D"][m], pred[m], ":", color=c, lw=1.0)
            if b is not None:
                bs.plots.draw_band(ax, grid["D"][m], b[m], color=c)
            o = obs[np.isclose(obs["replay"], r)]
            ax.plot(o["D"], o["loss"], "o", color=c, ms=4, label=f"r = {r:g}")
        ax.set_xscale("log")
        ax.set_title(f"{labels.get(n, n)} (N = {n:.3g})", fontsize=9)
        ax.set_xlabel("adaptation tokens D")
    axes[0][0].set_ylabel("validation loss")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


@bs.plots.styled
def figure3(train_dom, fit, path, title):
    """In-sample grid: rows = replay ratios, columns = sizes, one colour per training PTPP."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(train_dom["N"].unique())
    replays = sorted(train_dom["replay"].unique())
    stages = sorted(train_dom["ptpp"].unique())
    labels = size_labels(train_dom)
    colours = dict(zip(stages, ["C0", "C3", "C2", "C1"]))
    fig, axes = plt.subplots(len(replays), len(sizes), figsize=(3.1 * len(sizes),
                                                                2.5 * len(replays)),
                             squeeze=False)
    for i, r in enumerate(replays):
        for j, n in enumerate(sizes):
            ax = axes[i][j]
            obs = train_dom[(train_dom["N"] == n) & np.isclose(train_dom["replay"], r)]
            if obs.empty:
                ax.set_axis_off()
                continue
            grid = _grid(obs)
            pred = np.asarray(fit.predict(grid))
            for p, c in colours.items():
                m = np.isclose(grid["ptpp"], p)
                ax.plot(grid["D"][m], pred[m], "--", color=c, lw=1.1)
                o = obs[np.isclose(obs["ptpp"], p)]
                ax.plot(o["D"], o["loss"], "o", color=c, ms=3.5, label=f"PTPP {p:g}")
            ax.set_xscale("log")
            ax.set_title(f"r = {r:g}, {labels.get(n, n)}", fontsize=8)
            if i == len(replays) - 1:
                ax.set_xlabel("D")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ==================================================================================================
# The run


def posterior_settings(kind: str):
    if kind == "none":
        return False, "posteriors not requested"
    fn = getattr(bs, "fit_posterior", None)
    if fn is None:
        try:
            from bayes_scaling import bayes as _b
            fn = getattr(_b, "fit_posterior", None)
        except ImportError:
            fn = None
    if fn is None:
        return False, "bayes_scaling.fit_posterior is not available yet"
    if kind == "laplace":
        return {"method": "laplace", "num_chains": 2, "num_samples": 500,
                "progress_bar": False}, ""
    return {"method": "nuts", "num_chains": 2, "num_warmup": 300, "num_samples": 400,
            "progress_bar": False}, ""


def run(args, df: pd.DataFrame | None = None) -> str:
    global OUT
    t0 = time.time()
    OUT = Path(args.out)
    OUT.mkdir(parents=True, exist_ok=True)
    df = load_table() if df is None else df
    if args.n_column != "N":
        df = df.assign(N=df[args.n_column])
    inv = inventory(df)
    stages = sorted(df.loc[df["D"] > 0, "ptpp"].unique())
    have_test = any(np.isclose(stages, TEST_PTPP))
    bayes, bayes_note = (False, "--quick") if args.quick else posterior_settings(args.posterior)
    n_starts = 8 if args.quick else args.n_starts

    md = ["# The PTPP paper regenerated on `bible_ptpp`", ""]
    md += [f"Generated by `python analyses/ptpp_paper.py`{' --quick' if args.quick else ''} "
           f"(Huber delta = {DELTA}, {n_starts} starts per fit, seed {args.seed}; N column "
           f"`{args.n_column}`). Protocol: fit on PTPP = {TRAIN_PTPP[0]}, {TRAIN_PTPP[1]}; "
           f"score every adaptation run at PTPP = {TEST_PTPP} (`bs.evaluate.ptpp_holdout`). "
           "Anchors: every (replay, D) point of the smallest model at the test stage, added "
           "to the fit and removed from the scoring (the paper's 20 241M anchors). The D-CPT "
           "transfer baseline is fitted on the training stages only (it never sees the "
           "anchors); the oracle is D-CPT fitted on the whole test stage.", ""]
    md += ["## Data", "", "Adaptation rows (D > 0) per domain, PTPP stage and model size:", "",
           ev.markdown_table(inv.reset_index()), ""]

    results = {}
    missing = []
    if not have_test:
        missing.append(f"no adaptation rows at PTPP = {TEST_PTPP} yet (stages present: "
                       f"{', '.join(f'{s:g}' for s in stages)}): Tables 1-2, the appendix "
                       "tables, the oracle and Figure 1 need them")
    for p in TRAIN_PTPP:
        if not any(np.isclose(stages, p)):
            missing.append(f"no adaptation rows at training PTPP = {p}")
    if not missing:
        for domain in DOMAINS:
            for setting, anchors in (("none", None), ("anchors", ev.PAPER_ANCHORS)):
                print(f"[ptpp_paper] {domain} / {setting}", file=sys.stderr)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    results[(domain, setting)] = ev.ptpp_holdout(
                        LAWS, df, domain=domain, train_ptpp=TRAIN_PTPP, test_ptpp=TEST_PTPP,
                        anchors=anchors, delta=DELTA, n_starts=n_starts, seed=args.seed,
                        bayes=bayes, baselines=("transfer", "oracle"))
    if missing:
        md += ["## What is missing", ""] + [f"- {m}" for m in missing] + [
            "", "Rerun `python analyses/ptpp_paper.py` once the sweep has written them.", ""]

    if results:
        md += tables_section(results, bayes, bayes_note)
        md += ridge_section(df, results)
        md += claims_section(results, bayes)
        md += figures(df, results)
    else:
        md += in_sample_only(df, n_starts, args.seed)
    md += ["", f"_Run time: {(time.time() - t0) / 60:.1f} min._", ""]
    text = "\n".join(md)
    (OUT / "ptpp_paper.md").write_text(text)
    return text


def tables_section(results, bayes, bayes_note):
    md = []
    # Tables 1 and 2 (French = target): Huber, MAE_rel, slope, with the paper alongside
    for num, setting in ((1, "none"), (2, "anchors")):
        ours = six_metric_table(results[("target", setting)])
        what = "no anchors" if setting == "none" else "with the smallest-model anchors"
        md += [f"## Table {num}: target (French) at unseen PTPP = {TEST_PTPP}, {what}", "",
               ev.markdown_table(side_by_side(ours, "target", setting)), ""]
    md += ["## Appendix A: full metric tables (MAP fits)", ""]
    for domain, name in DOMAINS.items():
        for setting in ("none", "anchors"):
            res = results[(domain, setting)]
            what = "no anchors" if setting == "none" else (
                f"with anchors ({len(res.settings['anchor_rows'])} rows of the smallest model)")
            md += [f"### {name}: unseen PTPP = {TEST_PTPP}, {what}", "",
                   ev.markdown_table(six_metric_table(res)), "",
                   "Paper:", "", ev.markdown_table(paper_frame(domain, setting)), ""]
    md += ["## Fitted parameters (MAP, no anchors)", "",
           "Parameters at a bound or at extreme values show where two training stages do not "
           "pin a term down.", ""]
    for domain, name in DOMAINS.items():
        res = results[(domain, "none")]
        rows = []
        for (label, kind), fit in res.fits.items():
            if kind == "map":
                rows.append(dict(label=label, **{k: v for k, v in fit.params.items()}))
        md += [f"### {name}", "", ev.markdown_table(pd.DataFrame(rows)), ""]
    md += ["## Appendix B: oracle (D-CPT fitted on the whole test stage)", ""]
    rows = []
    for domain, name in DOMAINS.items():
        t = results[(domain, "none")].table
        o = t[(t["role"] == "oracle") & (t["fit"] == "map")].iloc[0]
        p = PAPER[(domain, "oracle")][ev.ORACLE]
        rows.append(dict(domain=name, **{m: o[m] for m in SIX}))
        rows.append(dict(domain=name + ", paper", **dict(zip(SIX, p))))
    md += [ev.markdown_table(pd.DataFrame(rows)), ""]
    md += ["## Probabilistic metrics of the Bayesian fits", ""]
    if not bayes:
        md += [f"Not run: {bayes_note}.", ""]
    else:
        md += [f"Posterior settings: {bayes}. Point metrics use the posterior median of the mean "
               "curve; coverage of central 50% / 90% posterior predictive intervals, relative "
               "90% width, CRPS (loss units) and mean held-out log predictive density (of log L).",
               ""]
        diag = []
        for (domain, setting), res in results.items():
            for (label, kind), post in res.fits.items():
                if kind == "posterior":
                    diag.append(dict(domain=domain, anchors=setting, label=label,
                                     diagnostics=diagnostics_note(post)))
        md += ["Convergence of every posterior:", "", ev.markdown_table(pd.DataFrame(diag)), ""]
        for domain, name in DOMAINS.items():
            for setting in ("none", "anchors"):
                t = results[(domain, setting)].table
                t = t[t["fit"] == "posterior"]
                cols = ["label", "huber_log", "mae_rel", "calib_slope", *ev.PROB_METRICS]
                md += [f"### {name}, {'no anchors' if setting == 'none' else 'anchors'}", "",
                       ev.markdown_table(t[[c for c in cols if c in t.columns]]), ""]
    return md


def ridge_section(df, results):
    """How much of each MAP forecast is the optimiser's choice: the starts tied with the best
    objective (``MapFit.tied``) fit the training stages equally well; their MAE_rel on the scored
    test-stage rows shows how far apart their forecasts are."""
    md = ["## Equally good fits, different forecasts (MAP)", "",
          "Starts whose objective is within a relative 1e-6 of the best (`MapFit.tied`) fit the "
          "training stages equally well; which one is reported is decided by floating-point detail. "
          "Columns: the number of tied starts, the parameters on which they disagree by more "
          "than 1% (`MapFit.ridge`) and the range of MAE_rel over the tied starts on the scored "
          f"rows at PTPP = {TEST_PTPP} (the reported fit's value is in the tables above).", ""]
    rows = []
    for (domain, setting), res in results.items():
        for (label, kind), fit in res.fits.items():
            if kind != "map" or label not in LAWS:
                continue
            d = res.detail
            idx = d[(d["label"] == label) & (d["fit"] == "map") & d["scored"]]["row"]
            test = df.loc[idx.to_numpy()]
            maes = [bs.metrics.mae_rel(test["loss"], np.asarray(fit.law(p, test), float))
                    for p in fit.tied()]
            ridge = fit.ridge()
            rows.append({"domain": domain, "anchors": setting, "law": label,
                         "tied starts": f"{len(maes)} of {len(fit.starts)}",
                         "ridge": ", ".join(ridge) if ridge else "none",
                         "MAE_rel over tied starts": f"{min(maes):.3g} .. {max(maes):.3g}"})
    md += [ev.markdown_table(pd.DataFrame(rows)), ""]
    return md


def diagnostics_note(post) -> str:
    d = getattr(post, "diagnostics", {}) or {}
    ok = "ok" if d.get("ok", False) else "NOT OK"
    if d.get("method", "nuts") == "laplace":
        return f"Laplace, Pareto k {d.get('pareto_k', float('nan')):.2f} ({ok})"
    return (f"NUTS, max R-hat {d.get('max_rhat', float('nan')):.3f}, min bulk ESS "
            f"{d.get('min_ess_bulk', float('nan')):.0f}, {d.get('divergences', 0)} divergences "
            f"({ok})")


def _get(results, domain, setting, label, metric, fit="map"):
    t = results[(domain, setting)].table
    r = t[(t["label"] == label) & (t["fit"] == fit)]
    return float(r[metric].iloc[0]) if len(r) else float("nan")


def claims_section(results, bayes):
    md = ["## Rankings and claims: ours vs the paper", ""]
    forms = list(LAWS) + [ev.TRANSFER]
    rows = []
    for domain, name in DOMAINS.items():
        for setting in ("none", "anchors"):
            ours = six_metric_table(results[(domain, setting)])
            paper = paper_frame(domain, setting)
            rows.append(dict(setting=f"{name}, {setting}",
                             ours_by_huber=ranking(ours, labels=forms),
                             paper_by_huber=ranking(paper, labels=forms) if len(paper) else "—",
                             ours_by_mae=ranking(ours, "mae_rel", forms),
                             paper_by_mae=ranking(paper, "mae_rel", forms) if len(paper) else "—"))
    md += ["Rankings (best first) by Huber_log and by MAE_rel:", "",
           ev.markdown_table(pd.DataFrame(rows)), ""]

    def g(*a):
        return _get(results, *a)

    f3, tr = "Form 3 (G+F)", ev.TRANSFER
    beats = [m for m in ("huber_log", "mae_rel") if g("target", "none", f3, m) < g("target", "none", tr, m)]
    slope3 = abs(g("target", "none", f3, "calib_slope") - 1)
    slopet = abs(g("target", "none", tr, "calib_slope") - 1)
    md += ["**1. Does Form 3 beat the D-CPT transfer baseline at the unseen stage (target, no "
           "anchors)?** Paper: yes on every metric (Huber 4.43e-5 vs 4.74e-4, MAE_rel 0.67% "
           "vs 3.43%, slope 0.991 vs 0.961). Ours: Huber "
           f"{g('target', 'none', f3, 'huber_log'):.3g} vs {g('target', 'none', tr, 'huber_log'):.3g}, "
           f"MAE_rel {100 * g('target', 'none', f3, 'mae_rel'):.2f}% vs "
           f"{100 * g('target', 'none', tr, 'mae_rel'):.2f}%, slope "
           f"{g('target', 'none', f3, 'calib_slope'):.3f} vs {g('target', 'none', tr, 'calib_slope'):.3f}: "
           + ("**yes**" if len(beats) == 2 and slope3 <= slopet else
              "**partly**" if beats else "**no**")
           + f" (better on {', '.join(beats) or 'neither error metric'}; calibration slope "
           + ("closer to 1" if slope3 <= slopet else "further from 1") + ").", ""]
    lines = []
    tighter = 0
    for domain in DOMAINS:
        for lab in LAWS:
            s0 = g(domain, "none", lab, "calib_slope")
            s1 = g(domain, "anchors", lab, "calib_slope")
            h0 = g(domain, "none", lab, "huber_log")
            h1 = g(domain, "anchors", lab, "huber_log")
            tighter += abs(s1 - 1) <= abs(s0 - 1)
            lines.append(dict(domain=domain, law=lab, slope_no_anchors=s0, slope_anchors=s1,
                              huber_no_anchors=h0, huber_anchors=h1))
    md += [f"**2. Do anchors tighten calibration?** Paper: yes (slope -> 1 and lower errors "
           f"for every form, rankings unchanged). Ours: the slope moves closer to 1 for "
           f"{tighter} of {len(lines)} (domain, form) pairs; Huber_log drops for "
           f"{sum(r['huber_anchors'] < r['huber_no_anchors'] for r in lines)} of {len(lines)}.",
           "", ev.markdown_table(pd.DataFrame(lines)), ""]
    if bayes:
        cov = []
        for domain in DOMAINS:
            for lab in LAWS:
                cov.append(dict(
                    domain=domain, law=lab,
                    coverage90_no_anchors=_get(results, domain, "none", lab, "coverage90",
                                               "posterior"),
                    coverage90_anchors=_get(results, domain, "anchors", lab, "coverage90",
                                            "posterior"),
                    width90_no_anchors=_get(results, domain, "none", lab, "width90_rel",
                                            "posterior"),
                    width90_anchors=_get(results, domain, "anchors", lab, "width90_rel",
                                         "posterior")))
        md += ["Posterior 90% coverage and relative width, without and with anchors:", "",
               ev.markdown_table(pd.DataFrame(cov)), ""]
    src = six_metric_table(results[("source", "none")])
    src = src[src["label"].isin(forms)]
    best = src.sort_values("huber_log")["label"].iloc[0]
    md += ["**3. Is the source domain better served by Form 1 (no anchors)?** Paper: yes (Form 1 "
           "best on every error metric; Form 3 worst of the PTPP-aware forms; with anchors Form "
           f"2 becomes best). Ours: best by Huber_log is **{best}** "
           f"(ranking {ranking(src, labels=forms)}); with anchors "
           f"{ranking(six_metric_table(results[('source', 'anchors')]), labels=forms)}.", ""]
    md += ["**A caveat that holds whatever the data.** With two training stages the PTPP terms "
           "are only partly identified: the floor `E + F / PTPP^eta` has three unknowns and the "
           "data give two stage offsets; the gate `lambda sigmoid(zeta log PTPP)` has two "
           "unknowns and the data give one change of the data exponent between the stages. "
           "Without anchors the extrapolation to PTPP = 279 of Forms 1-3 is therefore partly set "
           "by the starts and bounds rather than the data (in `tests/test_evaluate.py`, data "
           "simulated from Form 1 needed a third training stage for the generator to win "
           "reliably; in a synthetic check with Form-3 data on this script's grid, Form 2 beat "
           "the generator without anchors and the generator won with them). The anchors supply exactly the missing information, which is "
           "why they help so much more here than calibration alone would suggest; posterior "
           "intervals, not point fits, are the honest summary of the no-anchor forecast.", ""]
    md += headline(results, bayes)
    return md


def headline(results, bayes):
    rows = []
    for domain in DOMAINS:
        for lab in [*LAWS, ev.TRANSFER]:
            row = dict(domain=domain, law=SHORT[lab])
            for setting in ("none", "anchors"):
                suf = "" if setting == "none" else "_anchors"
                row["huber" + suf] = _get(results, domain, setting, lab, "huber_log")
                row["mae_rel" + suf] = _get(results, domain, setting, lab, "mae_rel")
                row["slope" + suf] = _get(results, domain, setting, lab, "calib_slope")
                if bayes:
                    row["cov90" + suf] = _get(results, domain, setting, lab, "coverage90",
                                              "posterior")
            rows.append(row)
    return ["## Headline numbers", "",
            "Per law: Huber_log, MAE_rel, calibration slope"
            + (", posterior 90% coverage" if bayes else "")
            + ", without and with anchors (MAP fits), target and source.", "",
            ev.markdown_table(pd.DataFrame(rows)), ""]


def figures(df, results):
    md = ["## Figures", ""]
    res = results[("target", "none")]
    fit = res.fits[("Form 3 (G+F)", "map")]
    post = res.fits.get(("Form 3 (G+F)", "posterior"))
    dom = df[(df["domain"] == "target") & (df["D"] > 0)]
    figure1(dom, fit, post, OUT / "figure1_test_stage.png",
            f"Form 3 at unseen PTPP = {TEST_PTPP} (target; fit on PTPP 15, 31): dotted = MAP"
            + (", solid = posterior median, bands = 50/80/90% predictive" if post is not None
               else ""))
    train = dom[np.isin(dom["ptpp"], TRAIN_PTPP)]
    figure3(train, fit, OUT / "figure3_in_sample.png",
            "Form 3 in-sample fit on the training stages (target)")
    md += ["![Figure 1](figure1_test_stage.png)", "",
           "Figure 1: PTPP = 279 predictions of Form 3 vs observations (markers), one panel "
           "per size, one colour per replay ratio; dotted: the MAP fit"
           + ("; solid: posterior median; bands: 50, 80 and 90% posterior predictive intervals "
              "(common draws on a 200-point grid, `bs.plots.band`)."
              if post is not None else
              "; no bands (no posterior)."), "",
           "![Figure 3](figure3_in_sample.png)", "",
           "Figure 3: in-sample fit of Form 3 on the training stages (rows: replay; columns: "
           "sizes; colours: PTPP).", ""]
    return md


def in_sample_only(df, n_starts, seed):
    """Without the test stage: Form 3 fitted on what there is, Figure 3 only."""
    md = []
    dom = df[(df["domain"] == "target") & (df["D"] > 0)]
    present = [p for p in TRAIN_PTPP if np.isclose(dom["ptpp"], p).any()]
    train = dom[np.isin(dom["ptpp"], present)]
    if len(train) < 20:
        return ["Too few adaptation rows for an in-sample fit.", ""]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bs.fit_map("ptpp_gated_floor", train, delta=DELTA, n_starts=n_starts, seed=seed)
    figure3(train, fit, OUT / "figure3_in_sample.png",
            f"Form 3 in-sample fit on PTPP {', '.join(map(str, present))} (target)")
    s = bs.metrics.score(train["loss"], fit.predict(train), delta=DELTA)
    md += ["## In-sample fit on the stages present (Figure 3 only)", "",
           f"Form 3 fitted on the {len(train)} target-domain rows at PTPP "
           f"{', '.join(map(str, present))}: in-sample Huber_log {s['huber_log']:.3g}, MAE_rel "
           f"{s['mae_rel']:.3g}, slope {s['calib_slope']:.3f}. With a single PTPP stage the PTPP "
           "terms (gate, floor) are not identified; this is a fit-quality check only.", "",
           "![Figure 3](figure3_in_sample.png)", ""]
    return md


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 starts, no posteriors")
    ap.add_argument("--posterior", choices=("nuts", "laplace", "none"), default="laplace",
                    help="laplace (default: 16 posteriors fit the runtime budget; each is checked "
                         "by its Pareto k) or nuts (2 chains x 400 draws; slower)")
    ap.add_argument("--n-starts", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT), help="output folder")
    ap.add_argument("--n-column", default="N",
                    help="column used as N (e.g. N_nonemb: the count PTPP is defined on)")
    args = ap.parse_args(argv)
    text = run(args)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
