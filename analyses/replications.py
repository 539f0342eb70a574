"""Replications of published numbers on the four bundled real loss tables.

    python analyses/replications.py            # full run (posteriors when bayes_scaling.bayes has them)
    python analyses/replications.py --quick    # fewer starts, no posteriors (CI smoke run)

Writes ``analyses/out/replications.md``: one headline table with every published number next to
ours, then one section per dataset.

1. Epoch Chinchilla (Besiroglu et al. 2024): the Huber(1e-3) point fit on the 240 kept points
   against Epoch's estimates and plain grid-search fit; the posterior's 95% intervals against
   Epoch's bootstrap intervals.
2. datablations (Muennighoff et al. 2023): R_D*, R_N* with the base frozen at the notebook values,
   against the published values; held-out predictions for the high-epoch runs.
3. gadre_overtraining (Gadre et al. 2024): the repository's own over-training fit (5 models,
   least squares) and its two published extrapolation errors; then a PTPP-style hold-out of
   Chinchilla (fit at <= 20 tokens per parameter, forecast 40 .. 640) with errors and coverage.
4. mixing_laws_cpt (Ye et al. 2025, 70M continual pre-training): the D-CPT law of the PTPP paper
   fitted on three replay ratios, predicting the other two (target = Python, source = Pile);
   the notebook's critical replay proportion against the one our source-loss fit implies.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scaling as bs
from bayes_scaling import evaluate as ev
from bayes_scaling.laws import Law, Param

OUT = Path(__file__).resolve().parent / "out"


@dataclass
class Config:
    n_starts: int = 64
    seed: int = 0
    posterior: bool = True
    posterior_kw: dict = field(default_factory=lambda: dict(num_chains=2, num_warmup=400,
                                                             num_samples=500,
                                                             progress_bar=False))


@dataclass
class Section:
    title: str
    rows: list = field(default_factory=list)  # headline rows: dataset, quantity, published, ours, note
    body: list = field(default_factory=list)  # Markdown paragraphs and tables

    def add(self, quantity, published, ours, note=""):
        self.rows.append(dict(dataset=self.title, quantity=quantity, published=published,
                              ours=ours, note=note))

    def md(self, text):
        self.body.append(text)


def fmt(v, digits=4):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, tuple):
        return "(" + ", ".join(fmt(x, digits) for x in v) + ")"
    v = float(v)
    if v != 0 and (abs(v) < 1e-2 or abs(v) >= 1e5):
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}"


def fit_posterior(law, df, cfg: Config, **kw):
    """``bs.fit_posterior`` when the Bayesian layer provides it, else ``None`` (and a note)."""
    if not cfg.posterior:
        return None, "posteriors skipped (--quick)"
    fn = getattr(bs, "fit_posterior", None)
    if fn is None:
        try:
            from bayes_scaling import bayes as _bayes
            fn = getattr(_bayes, "fit_posterior", None)
        except ImportError:
            fn = None
    if fn is None:
        return None, "not run: bayes_scaling.fit_posterior is not available yet"
    kw = {**cfg.posterior_kw, "seed": cfg.seed, **kw}
    return fn(law, df, **kw), ""


def param_draws(post, name):
    return np.asarray(post.idata.posterior[name]).ravel()


def diagnostics_note(post) -> str:
    """One line on the posterior's convergence (R-hat, ESS, divergences) or Laplace check."""
    d = getattr(post, "diagnostics", {}) or {}
    ok = "converged" if d.get("ok", False) else "NOT CONVERGED: intervals indicative only"
    if d.get("method", "nuts") == "laplace":
        return f"Laplace, Pareto k {d.get('pareto_k', float('nan')):.2f} ({ok})"
    return (f"NUTS, max R-hat {d.get('max_rhat', float('nan')):.3f}, min bulk ESS "
            f"{d.get('min_ess_bulk', float('nan')):.0f}, {d.get('divergences', 0)} divergences "
            f"({ok})")


def holdout_scores(obs, pred, delta, post=None, test=None):
    """Point metrics (and probabilistic ones when a posterior is given) on held-out rows. A
    posterior that failed its checks is scored too: every section labels it
    (:func:`diagnostics_note`)."""
    out = bs.metrics.score(obs, pred, delta=delta)
    if post is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", bs.errors.ConvergenceWarning)
            draws = np.asarray(post.predict_draws(test, kind="predictive",
                                                  allow_unconverged=True))
        out.update(ev.probabilistic_scores(draws, np.asarray(obs, float)))
    return out


# ==================================================================================================
# 1. Epoch Chinchilla

EPOCH_ESTIMATES = dict(A=482.01, B=2085.43, E=1.81686, alpha=0.34781, beta=0.36585)
EPOCH_SE = dict(A=124.52, B=1293.28, E=0.026, alpha=0.015, beta=0.021)
EPOCH_CI = dict(A=(285.2, 743.6), B=(1042.4, 5810.3), E=(1.769, 1.871), alpha=(0.317, 0.373),
                beta=(0.331, 0.415))
EPOCH_PLAIN = dict(A=477.8, B=2143.9, E=1.8172, alpha=0.3473, beta=0.3672)
EPOCH_PLAIN_OBJECTIVE = 1.01832e-3  # datasheet: the plain fit's summed Huber(1e-3) on 240 rows


def epoch_chinchilla(cfg: Config) -> Section:
    sec = Section("Epoch Chinchilla")
    df = bs.datasets.load("chinchilla_epoch")
    kept = df[df["epoch_kept"]]
    fit = bs.fit_map("chinchilla", kept, delta=1e-3, n_starts=cfg.n_starts, seed=cfg.seed)
    post, note = fit_posterior("chinchilla", kept, cfg)
    rows = []
    for p in ("A", "B", "E", "alpha", "beta"):
        row = dict(param=p, epoch_estimate=EPOCH_ESTIMATES[p], epoch_plain_fit=EPOCH_PLAIN[p],
                   ours_map=fit.params[p], epoch_se=EPOCH_SE[p],
                   epoch_ci95=fmt(EPOCH_CI[p]))
        if post is not None:
            d = param_draws(post, p)
            row.update(post_median=float(np.median(d)), post_sd=float(np.std(d)),
                       post_ci95=fmt(tuple(np.quantile(d, [0.025, 0.975]))))
        rows.append(row)
        sec.add(f"{p} (point)", fmt(EPOCH_ESTIMATES[p]), fmt(fit.params[p]),
                f"Epoch's plain Huber fit: {fmt(EPOCH_PLAIN[p])}")
        if post is not None:
            sec.add(f"{p} 95% interval", fmt(EPOCH_CI[p]),
                    fmt(tuple(np.quantile(param_draws(post, p), [0.025, 0.975]))),
                    "Epoch: 4000 bootstrap refits; ours: posterior quantiles")
    sec.add("summed Huber(1e-3) on 240 rows", fmt(EPOCH_PLAIN_OBJECTIVE, 6),
            fmt(fit.objective, 6),
            "at Epoch's plain fit (recomputed in the datasheet) vs our fit")
    sec.md("240 kept points (Epoch drops the 5 highest losses); Huber(delta = 1e-3) on log "
           f"residuals, {cfg.n_starts} starts. Epoch's estimates come from a Huber-shaped "
           "likelihood with a fitted scale (BFGS) and 4000 bootstrap refits; their plain "
           "grid-search Huber fit is the closest analogue of our MAP fit.")
    sec.md(ev.markdown_table(pd.DataFrame(rows), digits=4))
    if post is None:
        sec.md(f"Posterior intervals: {note}.")
    else:
        cover = sum(EPOCH_CI[p][0] <= float(np.median(param_draws(post, p))) <= EPOCH_CI[p][1]
                    for p in EPOCH_CI)
        ratio = np.median([np.std(param_draws(post, p)) / EPOCH_SE[p] for p in EPOCH_SE])
        sec.md(f"Posterior: {diagnostics_note(post)}; default priors, Huber likelihood with a "
               f"fitted scale. The posterior median of {cover} of 5 parameters lies inside "
               "Epoch's bootstrap 95% interval; the posterior sd is a median "
               f"{ratio:.2f} times Epoch's bootstrap SE (a bootstrap also resamples which points "
               "are in the fit, a posterior conditions on them).")
    return sec


# ==================================================================================================
# 2. datablations

DATABLATIONS_BASE = dict(A=math.exp(6.255414), B=math.exp(7.3049974), E=math.exp(0.6254804),
                         alpha=0.3526596, beta=0.3526596)
PUBLISHED_R = dict(RD_star=15.387756, RN_star=5.309743)
DATABLATIONS_OBJECTIVE = 0.015825936570763588
HIGH_EPOCH = 16.0  # runs with more than 16 epochs (D / U > 16) are held out


def datablations(cfg: Config) -> Section:
    sec = Section("datablations")
    df = bs.datasets.load("datablations")
    law = bs.laws.get("muennighoff")
    fit = bs.fit_map(law, df, delta=1e-3, n_starts=cfg.n_starts, seed=cfg.seed,
                     fixed=DATABLATIONS_BASE)
    sec.add("R_D*", fmt(PUBLISHED_R["RD_star"]), fmt(fit.params["RD_star"]),
            "base (A, B, E, alpha = beta) frozen at the notebook values; all 182 runs")
    sec.add("R_N*", fmt(PUBLISHED_R["RN_star"]), fmt(fit.params["RN_star"]), "")
    sec.add("summed Huber(1e-3), 182 runs", fmt(DATABLATIONS_OBJECTIVE, 7),
            fmt(fit.objective, 7),
            "notebook cell 29 printed minimum")
    # the ridge: how flat is the objective between the published point and ours?
    pub = {**DATABLATIONS_BASE, **PUBLISHED_R}
    obj_pub = float(bs.metrics.huber_log(df["loss"], law(pub, df), 1e-3) * len(df))
    sec.md("All 182 runs; A, B, E and the tied alpha = beta frozen at the notebook values "
           "(they come from Chinchilla's C4 data, not from these runs); R_D* and R_N* fitted "
           f"with Huber(1e-3), {cfg.n_starts} starts (the notebook: a 4 x 4 grid). Our "
           f"objective at the published (R_D*, R_N*) is {obj_pub:.8g}; at our fit "
           f"{fit.objective:.8g}. The optimum lies on a flat ridge in (R_D*, R_N*), so R_D* can "
           "move a lot for a change in the 7th digit of the objective.")

    # held-out high-epoch runs
    epochs = df["D"] / df["U"]
    train, test = df[epochs <= HIGH_EPOCH], df[epochs > HIGH_EPOCH]
    fit_tr = bs.fit_map(law, train, delta=1e-3, n_starts=cfg.n_starts, seed=cfg.seed,
                        fixed=DATABLATIONS_BASE)
    post, note = fit_posterior(law, train, cfg, fixed=DATABLATIONS_BASE)
    no_repeat = {**DATABLATIONS_BASE, "RD_star": 1e6, "RN_star": 1e6}  # repeats = fresh tokens
    rows = []
    for name, params, p in (("fit on <= 16 epochs", fit_tr.params, post),
                            ("published (fitted on all runs)", pub, None),
                            ("no repetition discount (R* -> inf)", no_repeat, None)):
        s = holdout_scores(test["loss"], np.asarray(law(params, test)), 1e-3, p, test)
        rows.append(dict(predictor=name, R_D=params["RD_star"], R_N=params["RN_star"],
                         mae_rel=s["mae_rel"], rmse_log=s["rmse_log"], r2=s["r2"],
                         calib_slope=s["calib_slope"], coverage90=s.get("coverage90", np.nan)))
    r = rows[0]
    sec.add(f"held-out runs with > {HIGH_EPOCH:g} epochs: MAE_rel", "—", fmt(r["mae_rel"]),
            f"{len(test)} runs; fit on the {len(train)} runs with <= {HIGH_EPOCH:g} epochs; "
            f"published parameters (in-sample for these runs) give {fmt(rows[1]['mae_rel'])}")
    if post is not None:
        sec.add("held-out high-epoch runs: 90% coverage", "—", fmt(r["coverage90"]), "posterior")
    at_bound = [f"{q.name} = {fit_tr.params[q.name]:g} (bounds [{q.lower:g}, {q.upper:g}])"
                for q in law.params if q.name in ("RD_star", "RN_star")
                and min(abs(fit_tr.params[q.name] - q.lower), abs(fit_tr.params[q.name] - q.upper))
                <= 1e-6 * max(1.0, abs(fit_tr.params[q.name]))]
    sec.md(f"Held-out high-epoch runs: fit R_D*, R_N* (base frozen) on the {len(train)} runs with "
           f"D/U <= {HIGH_EPOCH:g}, predict the {len(test)} runs with more epochs (up to "
           f"{epochs.max():.0f})."
           + (f" The fit on the low-epoch runs ends at a bound: {'; '.join(at_bound)}: the "
              "saturation of repeated data is barely visible below 16 epochs, so the "
              "high-epoch forecast is an extrapolation the data do not pin down."
              if at_bound else ""))
    sec.md(ev.markdown_table(pd.DataFrame(rows), digits=3))
    if post is None:
        sec.md(f"Interval coverage: {note}.")
    else:
        sec.md(f"Posterior (fit on the low-epoch runs, base frozen): {diagnostics_note(post)}.")
    return sec


# ==================================================================================================
# 3. gadre_overtraining

def _gadre_fn(p, x):
    # Gadre et al. (2024) `powlaw_ours`, written with a positive exponent b:
    # L = E + a N^-b + c 6^(-b/2) (M N)^-b, M = tokens per parameter
    b = p["b"]
    return (p["E"] + p["a"] * x["N"] ** (-b)
            + p["c"] * 6.0 ** (-b / 2) * (x["ptpp"] * x["N"]) ** (-b))


GADRE_LAW = Law(
    name="gadre_overtraining",
    params=(Param("E", 0.0, 20.0, (0.5, 3.0), doc="irreducible loss"),
            Param("a", 0.0, math.inf, (1e1, 1e4), True, doc="model-size coefficient"),
            Param("c", 0.0, math.inf, (1e1, 1e4), True, doc="data coefficient"),
            Param("b", 0.0, 2.0, (0.05, 0.5), doc="shared exponent")),
    variables=("N", "ptpp"),
    fn=_gadre_fn,
    equation="L = E + a N^-b + c 6^(-b/2) (M N)^-b  (Gadre et al. 2024, repository laws.py)",
)
GADRE_PUBLISHED = {("open_lm_1b", 640.0): 0.7103, ("open_lm_7b", 20.0): 0.7320}  # % rel. error
GADRE_FIT_MODELS = ("d=96_l=8_h=4", "d=512_l=8_h=4", "d=576_l=24_h=8", "d=1024_l=24_h=8")


def _gadre_least_squares(train):
    """The repository's recipe: least squares on the loss from a grid of 128 starts, keeping the
    start with the smallest residual; here scipy ``least_squares`` (trust region) per start."""
    from scipy.optimize import least_squares

    n, m, y = (train[c].to_numpy(float) for c in ("N", "ptpp", "loss"))

    def resid(th):
        a, c, b, e = th  # b is the (negative) exponent of the repository's parameterisation
        return a * n**b + c * 6.0 ** (b / 2) * (m * n) ** b + e - y

    best = None
    for a0 in (1e2, 3e2, 1e3, 3e3):
        for c0 in (1e2, 3e2, 1e3, 3e3):
            for b0 in (-0.1, -0.3):
                for e0 in (0.0, 1.0, 2.0, 10.0):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        r = least_squares(resid, [a0, c0, b0, e0], method="lm", max_nfev=10000)
                    if np.all(np.isfinite(r.x)) and (best is None or r.cost < best.cost):
                        best = r
    a, c, b, e = best.x
    return dict(E=e, a=a, c=c, b=-b)


def gadre(cfg: Config) -> Section:
    sec = Section("gadre_overtraining")
    g = bs.datasets.load("gadre_overtraining")
    g = g[g["domain"] == "c4_val"]
    # (a) the repository's protocol: 4 small models at M = 20 plus d=96 at M = 320
    rows = []
    for ts in ("rpj", "c4_original", "rw_original"):
        d = g[g["train_set"] == ts]
        sel = ((d["model"].isin(GADRE_FIT_MODELS) & np.isclose(d["ptpp"], 20))
               | ((d["model"] == "d=96_l=8_h=4") & np.isclose(d["ptpp"], 320)))
        train = d[sel]
        assert len(train) == 5, (ts, len(train))
        p_ls = _gadre_least_squares(train)
        fit_h = bs.fit_map(GADRE_LAW, train, delta=1e-3, n_starts=cfg.n_starts, seed=cfg.seed)
        for (model, m), pub in GADRE_PUBLISHED.items():
            t = d[(d["model"] == model) & np.isclose(d["ptpp"], m)]
            if t.empty:
                continue
            y = float(t["loss"].iloc[0])
            e_ls = 100 * abs(float(GADRE_LAW(p_ls, t)[0]) - y) / y
            e_h = 100 * abs(float(fit_h.predict(t)[0]) - y) / y
            rows.append(dict(train_set=ts, target=f"{model}, M = {m:g}", loss=y,
                             published_pct=pub if ts == "rpj" else np.nan,
                             ours_least_squares_pct=e_ls, ours_huber_pct=e_h))
            if ts == "rpj":
                sec.add(f"rel. error, {model} at M = {m:g} (%)", fmt(pub), fmt(e_ls),
                        "repository protocol (5 models, least squares), RedPajama, C4 eval loss; "
                        f"Huber(1e-3) fit instead: {fmt(e_h)}")
    sec.md("(a) The repository's own protocol (`fit_ds`): their law `L = E + a N^-b + c "
           "6^(-b/2) (M N)^-b` fitted by least squares on 5 models (4 small architectures at "
           "M = 20 tokens per parameter, `d=96_l=8_h=4` at M = 320), C4 validation loss; relative "
           "errors of the two extrapolations the notebook reports (its outputs are for "
           "RedPajama, the only corpus with the 1.4B model at M = 640).")
    sec.md(ev.markdown_table(pd.DataFrame(rows), digits=3))

    # (b) PTPP-style hold-out with Chinchilla, per corpus
    rows = []
    cover, diag = {}, []
    for ts in ("rpj", "c4_original", "rw_original"):
        d = g[g["train_set"] == ts]
        anchor = (d["model"] == "d=96_l=8_h=4") & np.isclose(d["ptpp"], 320)
        anchors = {"none": anchor & False, "d=96 at M = 320": anchor}
        laws = {"chinchilla": bs.laws.get("chinchilla"), "gadre (shared b)": GADRE_LAW}
        for (variant, extra), (name, law) in itertools.product(anchors.items(), laws.items()):
            train, test = d[(d["ptpp"] <= 20) | extra], d[(d["ptpp"] > 20) & ~extra]
            fit = bs.fit_map(law, train, delta=1e-3, n_starts=cfg.n_starts, seed=cfg.seed)
            # posteriors for Chinchilla only (the runtime budget of `make analyses`)
            post, note = (fit_posterior(law, train, cfg) if name == "chinchilla"
                          else (None, "posterior run for Chinchilla only"))
            s = holdout_scores(test["loss"], fit.predict(test), 1e-3, post, test)
            rows.append(dict(train_set=ts, anchor=variant, law=name, n_fit=len(train),
                             n_test=len(test), mae_rel=s["mae_rel"], rmse_log=s["rmse_log"],
                             calib_slope=s["calib_slope"], r2=s["r2"],
                             coverage50=s.get("coverage50", np.nan),
                             coverage90=s.get("coverage90", np.nan), crps=s.get("crps", np.nan)))
            if name == "chinchilla":
                cover.setdefault(variant, []).append(s.get("coverage90", np.nan))
            if post is not None:
                diag.append(f"{ts}, {variant}: {diagnostics_note(post)}")
    tab = pd.DataFrame(rows)
    mean_err = tab.groupby(["anchor", "law"])["mae_rel"].mean()
    sec.add("Chinchilla fit at <= 20 tok/param, forecast 40..640: MAE_rel (mean of 3 corpora)",
            "—", fmt(mean_err[("none", "chinchilla")]),
            "no published counterpart (PTPP-style extrapolation); Gadre's shared-exponent law: "
            + fmt(mean_err[("none", "gadre (shared b)")]))
    sec.add("same, plus one anchor (d=96 at M = 320) in the fit", "—",
            fmt(mean_err[("d=96 at M = 320", "chinchilla")]),
            "Gadre's law: " + fmt(mean_err[("d=96 at M = 320", "gadre (shared b)")]))
    if any(np.isfinite(v).any() for v in cover.values()):
        sec.add("Chinchilla posterior 90% coverage of the over-trained runs: no anchor / anchor",
                "0.9 (nominal)",
                " / ".join(fmt(float(np.nanmean(cover[k])), 3) for k in anchors),
                "posterior predictive, mean of 3 corpora (see the convergence notes)")
    sec.md("(b) PTPP-style extrapolation: Chinchilla (`L = E + A/N^alpha + B/D^beta`) and "
           "Gadre's law (one exponent shared by the N and D terms), Huber(1e-3), fitted per "
           "training corpus on the runs at <= 20 tokens per parameter, forecasting the "
           "over-trained runs (40 .. 640 tokens per parameter), C4 validation loss. At <= 20 "
           "tokens per parameter D and N move together, so the data term is weakly identified. "
           "Second variant: the fit also gets one over-trained run, the smallest model at "
           "M = 320 (as in the repository's protocol, and like the PTPP paper's small-model "
           "anchors), which is then not scored.")
    sec.md(ev.markdown_table(tab, digits=3))
    if diag:
        sec.md("Chinchilla posteriors: " + "; ".join(diag) + ".")
    else:
        sec.md(f"Interval coverage: {note}.")
    return sec


# ==================================================================================================
# 4. mixing_laws_cpt

CRITICAL_PUBLISHED = 0.28622540757637893  # continue_training.ipynb: Pile proportion at which the
# Pile loss at step 10,000 returns to its pre-CPT level
TOKENS_PER_STEP = 1_048_576
# One model size: A / N^alpha is a constant that E absorbs. Freezing A at 1e-9 (and alpha) makes
# the term vanish, so E is identified and the sampler does not wander along the E-A ridge.
CONSTANT_N_TERM = {"A": 1e-9, "alpha": 0.5}


def _critical_replay(fit, base_loss, n, d):
    """Replay ratio at which the fitted source law equals ``base_loss`` at (N, D), by bisection."""
    from scipy.optimize import brentq

    def f(r):
        return float(fit.predict(pd.DataFrame({"N": [n], "D": [d], "replay": [r]}))[0]) - base_loss

    lo, hi = 1e-3, 0.999
    if f(lo) * f(hi) > 0:
        return float("nan")
    return brentq(f, lo, hi, xtol=1e-8)


def mixing_laws(cfg: Config) -> Section:
    sec = Section("mixing_laws_cpt")
    df = bs.datasets.load("mixing_laws_cpt")
    cpt = df[~df["is_base"]]
    base = df[df["is_base"]].groupby("domain")["loss"].first()
    designs = {
        "interpolate: fit 0.125, 0.25, 0.5 -> predict 0.285, 0.375": ((0.125, 0.25, 0.5),
                                                                     (0.28515625, 0.375)),
        "extrapolate: fit 0.125, 0.25, 0.285 -> predict 0.375, 0.5": ((0.125, 0.25, 0.28515625),
                                                                     (0.375, 0.5)),
    }
    rows, notes, diag = [], [], []
    crit = {}
    for design, (tr, te) in designs.items():
        for domain in ("target", "source"):
            d = cpt[cpt["domain"] == domain]
            train = d[np.isin(d["replay"], tr)]
            test = d[np.isin(d["replay"], te)]
            fit = bs.fit_map("dcpt", train, delta=0.02, n_starts=cfg.n_starts, seed=cfg.seed,
                             fixed=CONSTANT_N_TERM)
            post, note = fit_posterior("dcpt", train, cfg, fixed=CONSTANT_N_TERM)
            if note:
                notes.append(note)
            else:
                diag.append(f"{design.split(':')[0]}, {domain}: {diagnostics_note(post)}")
            s = holdout_scores(test["loss"], fit.predict(test), 0.02, post, test)
            rows.append(dict(design=design.split(":")[0], domain=domain, n_fit=len(train),
                             n_test=len(test), huber_log=s["huber_log"], mae_rel=s["mae_rel"],
                             rmse_log=s["rmse_log"], calib_slope=s["calib_slope"],
                             coverage50=s.get("coverage50", np.nan),
                             coverage90=s.get("coverage90", np.nan)))
            if domain == "source":
                crit[design] = _critical_replay(fit, float(base["source"]),
                                                float(d["N"].iloc[0]), 10_000 * TOKENS_PER_STEP)
    tab = pd.DataFrame(rows)
    first = list(designs)[0]
    sec.add("critical Pile proportion (source loss back to pre-CPT level at step 10,000)",
            fmt(CRITICAL_PUBLISHED), fmt(crit[first]),
            "notebook: exp(kx+b) fit on step-10,000 losses of all 4 ratios; ours: D-CPT source "
            "fit on 0.125, 0.25, 0.5 (all steps)")
    t = tab[tab.design == "interpolate"].set_index("domain")
    sec.add("D-CPT, held-out replay ratios: MAE_rel target / source", "—",
            f"{fmt(t.loc['target', 'mae_rel'])} / {fmt(t.loc['source', 'mae_rel'])}",
            "fit on 3 ratios, predict 0.285 and 0.375 (interpolation)")
    if tab["coverage90"].notna().any():
        sec.add("same: 90% coverage target / source", "0.9 (nominal)",
                f"{fmt(t.loc['target', 'coverage90'])} / {fmt(t.loc['source', 'coverage90'])}",
                "posterior predictive")
    sec.md("The PTPP paper's D-CPT law (`E + A/N^alpha + B r^nu / D^beta + C/(r + eps)^gamma`, "
           "Huber 0.02) on the continual pre-training of Pythia-70M (step 20,000) on Python with "
           "Pile replay r; D = CPT tokens (1,048,576 per step), the pre-CPT rows at D = 0 "
           "excluded from the fits. N is constant, so A/N^alpha is a constant that E absorbs: A "
           "and alpha are frozen (A = 1e-9, alpha = 0.5, making the term vanish) and the other "
           "six parameters fitted. Target = Python loss, source = Pile loss.")
    sec.md(ev.markdown_table(tab, digits=3))
    sec.md("Critical Pile proportion (the replay ratio at which the Pile loss at step 10,000 "
           f"equals its pre-CPT value {float(base['source']):.6f}): published "
           f"{CRITICAL_PUBLISHED:.4f} (checked by the 0.28515625 run, which ends at 2.87207); "
           + "; ".join(f"ours ({k.split(':')[0]}) "
                       + (f"{v:.4f}" if np.isfinite(v) else "none: the fitted source law does "
                          "not cross the pre-CPT level for r in (0.001, 0.999)")
                       for k, v in crit.items()) + ".")
    if notes:
        sec.md(f"Interval coverage: {notes[0]}.")
    if diag:
        sec.md("D-CPT posteriors: " + "; ".join(diag) + ".")
    return sec


# ==================================================================================================
# 5. The M3 paper's multi-split protocol on Epoch's Chinchilla points

CHINCHILLA_SPLITS = (
    ev.Split("N_ge4e9", "N", "N", ">=", 4e9), ev.Split("N_ge2e9", "N", "N", ">=", 2e9),
    ev.Split("N_ge1e9", "N", "N", ">=", 1e9),
    ev.Split("D_ge1e11", "D", "D", ">=", 1e11), ev.Split("D_ge5e10", "D", "D", ">=", 5e10),
    ev.Split("D_ge2e10", "D", "D", ">=", 2e10),
    ev.Split("C_ge1e21", "C", "C", ">=", 1e21), ev.Split("C_ge5e20", "C", "C", ">=", 5e20),
)


def chinchilla_axis_splits(cfg: Config) -> Section:
    sec = Section("Axis splits (Epoch Chinchilla)")
    df = bs.datasets.load("chinchilla_epoch")
    kept = df[df["epoch_kept"]].assign(ptpp=lambda d: d["D"] / d["N"])
    res = ev.axis_splits({"chinchilla": "chinchilla", "gadre (shared b)": GADRE_LAW}, kept,
                         CHINCHILLA_SPLITS, delta=1e-3, n_starts=cfg.n_starts, seed=cfg.seed)
    t = res.table.set_index("label")
    sec.add("M3-protocol Avg R^2 (8 splits on N, D, C): chinchilla / Gadre's law", "—",
            f"{fmt(t.loc['chinchilla', 'Avg'], 3)} / {fmt(t.loc['gadre (shared b)', 'Avg'], 3)}",
            "bs.evaluate.axis_splits; no published counterpart")
    sec.md("`bs.evaluate.axis_splits` (the M3 paper's Appendix C.2 protocol: threshold splits per "
           "axis, >= 10 rows on each side, R^2 on the loss scale, a split excluded for every law "
           "when one fails, per-axis then unweighted means) on the 240 kept points, with splits "
           "holding out the largest models, the longest runs and the largest compute budgets. "
           "Huber(1e-3) fits.")
    sec.md(res.to_markdown())
    det = res.detail[["split", "axis", "law", "n_train", "n_test", "r2", "status", "excluded"]]
    sec.md(ev.markdown_table(det))
    return sec


# ==================================================================================================


def write(sections, cfg: Config, seconds: float, path: Path):
    head = pd.concat([pd.DataFrame(s.rows) for s in sections], ignore_index=True)
    lines = ["# Replications on published loss tables", "",
             "Generated by `python analyses/replications.py`"
             + (" --quick" if not cfg.posterior else "")
             + f" ({cfg.n_starts} starts per fit, seed {cfg.seed}; "
             f"{seconds / 60:.1f} min). Each published number is next to ours; '—' means the "
             "source reports no such number.", "",
             "## Headline table", "", ev.markdown_table(head, digits=4), ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        for b in s.body:
            lines += [b, ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return head


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 starts, no posteriors")
    ap.add_argument("--out", default=str(OUT / "replications.md"))
    ap.add_argument("--only", nargs="*", default=None,
                    help="subset of: epoch datablations gadre mixing splits")
    args = ap.parse_args(argv)
    cfg = Config(n_starts=8, posterior=False) if args.quick else Config()
    t0 = time.time()
    parts = dict(epoch=epoch_chinchilla, datablations=datablations, gadre=gadre,
                 mixing=mixing_laws, splits=chinchilla_axis_splits)
    sections = []
    for key, fn in parts.items():
        if args.only and key not in args.only:
            continue
        t = time.time()
        sections.append(fn(cfg))
        print(f"[replications] {key}: {time.time() - t:.0f} s", file=sys.stderr)
    head = write(sections, cfg, time.time() - t0, Path(args.out))
    print(head.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
