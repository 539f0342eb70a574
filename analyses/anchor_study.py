"""Which PTPP-279 runs to buy: random anchors vs the paper's anchors vs ``bs.anchors.select``.

    python analyses/anchor_study.py                 # on bayes_scaling/datasets/bible_ptpp.csv
    python analyses/anchor_study.py --synthetic     # dry run on a synthetic table with the same grid
    python analyses/anchor_study.py --train-ptpp 15 --test-ptpp 31   # the same protocol one stage down

Protocol (issue "Decisions", PTPP paper Sec. 2 "Anchors", Table 2): the target-domain law
(Form 3, ``ptpp_gated_floor``) is fitted on the adaptation rows at PTPP {15, 31}. Candidates are
every target-domain adaptation row at PTPP 279 except the largest model's; the queries are the
largest model's PTPP-279 rows (held out from the candidates). Each candidate costs 6 N D FLOPs
(N non-embedding parameters, D adaptation tokens). At equal compute budgets, three ways to choose
anchors are compared; the law is refitted on the PTPP-{15, 31} rows plus the anchors and scored on
the queries (MAE_rel of the posterior median; coverage of the 90% predictive interval):

- random: candidates in random order, each taken if it still fits the budget (mean over seeds);
- paper: the smallest model's grid (the PTPP paper's 241M anchors), cheapest first, then the next
  smallest model's, within the budget; at budget 1x it is exactly the smallest model's full grid;
- ours: ``bs.anchors.select`` (greedy expected query-variance reduction per FLOP with the
  plain-gain fallback, ``greedy="auto"``, from the posterior fitted at PTPP {15, 31}); also
  reported: ``ours-gain``, the same criterion ranked by value alone (``greedy="gain"``);
- ours-refit: ``bs.anchors.select(criterion="refit")``, the expected error at the queries of the
  law refitted on the PTPP-{15, 31} rows plus the anchors, with a model discrepancy the refit
  does not model (stationary, the default sd; ``greedy="auto"``); ``ours-refit-gain`` with
  ``greedy="gain"``; ``ours-refit-rehearsal`` with the base posterior's own extrapolation
  discrepancy instead (``discrepancy="rehearsal"``: the rehearsed ``tau d^p`` of its forecasts);
  ``ours-refit-sd<k>x`` (``--refit-sd-scales``) with a stationary sd of k times the likelihood's
  noise sd (a sensitivity diagnosis, left out of the winners).

The selections read the base posterior (NUTS by default, cached in ``base_posterior_<kind>.nc``
beside the outputs and reused while the rows, the settings and the model code are unchanged;
``--check-only`` prints its checks and exits); every refit, ``none`` included, is
``--refit-posterior`` (Laplace by default: the study's 40-odd fits in minutes), so the
strategies are scored alike. A refit of an anchor set already fitted is reused.

Budgets are multiples of the paper's anchor cost. As a diagnosis, the law is also refitted on one
model's full PTPP-279 grid (each size but the smallest, whose grid is ``paper`` at 1x) and on
every candidate; every refit's posterior mode goes into results.csv (``map_*``), so the summary
shows which parameters the anchors move. The fits run strategies first, then random seeds, then
the diagnosis, writing results.csv and summary.md after each (``--resume`` continues a run). ``--train-ptpp``/``--test-ptpp`` move the
protocol to other stages (e.g. fit at 15, anchors and queries at 31, while PTPP 279 is still
being trained). Writes ``analyses/out/anchor_study[_p<train>to<test>][_synthetic]/``:
results.csv, selection_order.csv, budget_error.png, summary.md.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bible_common as bc  # noqa: E402

import bayes_scaling as bs  # noqa: E402
import bayes_scaling.evaluate as ev  # noqa: E402
from bayes_scaling.anchors import candidate_cost, select  # noqa: E402
from bayes_scaling.bayes.predictive import as_draws, predict_draws  # noqa: E402
from bayes_scaling.objective import data_hash  # noqa: E402

HERE = Path(__file__).resolve().parent


def split(df, train_ptpp=(15.0, 31.0), test_ptpp=279.0):
    t = df[(df["domain"] == "target") & (df["D"] > 0)].copy()
    train = t[np.isin(t["ptpp"], train_ptpp)]
    stage = t[np.isclose(t["ptpp"], test_ptpp)]
    largest = stage[bc.SIZE].max()
    queries = stage[np.isclose(stage[bc.SIZE], largest)]
    cands = stage[~np.isclose(stage[bc.SIZE], largest)]
    return train, cands, queries


def flops(cands):
    """A candidate run's cost, 6 N D with N the non-embedding parameter count."""
    return 6.0 * cands[bc.SIZE].to_numpy(float) * cands["D"].to_numpy(float)


def paper_order(cands):
    """Smallest model first, cheapest run first within a model."""
    c = cands.assign(_cost=candidate_cost(cands, flops))
    return c.sort_values([bc.SIZE, "_cost"]).index.tolist()


def take_in_order(order, cost, budget):
    chosen, left = [], budget
    for i in order:
        if cost[i] <= left * (1 + 1e-12):
            chosen.append(i)
            left -= cost[i]
    return chosen


def score(post, queries, level=0.9):
    """MAE_rel of the posterior median, coverage and relative width of the predictive interval at
    the queries; draws that overflow on a query are left out whole (counted in ``nonfinite_draws``),
    and a posterior with no finite draw scores NaN with ``failed`` set rather than stopping the study."""
    y = queries["loss"].to_numpy(float)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med, lo, hi, _, _, n_bad = ev.posterior_predictions(post, queries, level)
    except bs.FitError as e:
        return {"mae_rel": np.nan, "coverage90": np.nan, "width_rel": np.nan,
                "width_rel_noise": np.nan, "nonfinite_draws": np.nan, "failed": str(e)}
    with warnings.catch_warnings():  # the fitted noise alone: the width no discrepancy adds to
        warnings.simplefilter("ignore")
        fc = post.forecast(queries, level, discrepancy=0, allow_unconverged=True)
    return {"mae_rel": float(np.mean(np.abs(med - y) / y)),
            "coverage90": float(np.mean((y >= lo) & (y <= hi))),
            "width_rel": float(np.mean((hi - lo) / y)),
            "width_rel_noise": float(np.mean((fc["upper"] - fc["lower"]).to_numpy() / y)),
            "nonfinite_draws": n_bad, "failed": ""}


def model_code_hash() -> str:
    """Hash of the model's source (laws, priors, likelihood, samplers): a cached posterior is stale
    once it changes; the selection and design code are not part of it."""
    h = hashlib.sha256()
    root = Path(bs.__file__).parent
    for f in sorted([*root.glob("*.py"), *(root / "bayes").rglob("*.py"),
                     *(root / "laws").rglob("*.py")]):
        if f.name != "anchors.py":
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def base_posterior(law, train, path, *, kind, posterior_kw):
    """(posterior, label) of the base fit, reusing ``path`` (netCDF) when it was fitted on the same
    rows with the same settings by the same model code."""
    cols = [law.column(v) for v in law.variables if law.column(v) in train] + ["loss"]
    key = {"law": law.name, "rows": int(len(train)), "hash": data_hash(train, cols),
           "kind": kind, "kw": posterior_kw, "seed": 0, "code": model_code_hash()}
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == key:
        post = bs.load_posterior(path, law)
        post.settings["allow_unconverged"] = True  # labelled by diagnostics_note
        return post, f"bs.fit_posterior ({post.settings.get('method', 'nuts')}, cached)"
    post, how = bc.posterior(law, train, seed=0, kind=kind, posterior_kw=posterior_kw)
    post.save(path)
    meta.write_text(json.dumps(key))
    return post, how


def weights_check(post, rows) -> float:
    """``tr(C_OO) / s^2``: the draws' summed variance of the log law at the rows the posterior was
    fitted on over the mean of sigma^2. In the linear-Gaussian model it is the trace of the hat
    matrix (about the number of well-determined parameters), which ``criterion="refit"`` relies on
    for the refit's weights ``C_tO / s^2`` (docs/design.md); draws that overflow are left out."""
    d = as_draws(post, 4000)
    with np.errstate(all="ignore"):
        F = np.log(predict_draws(d, rows))
    ok = np.all(np.isfinite(F), 1)
    return float(np.trace(np.cov(F[ok], rowvar=False)) / np.mean(d.sigma[ok] ** 2))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", action="store_true", help="dry run on a synthetic table")
    ap.add_argument("--law", default="ptpp_gated_floor")
    ap.add_argument("--train-ptpp", default="15,31")
    ap.add_argument("--test-ptpp", type=float, default=279.0)
    ap.add_argument("--budgets", default="0.25,0.5,1,2", help="multiples of the paper's anchor cost")
    ap.add_argument("--seeds", type=int, default=5, help="random-anchor seeds")
    ap.add_argument("--posterior", default="nuts", choices=("auto", "nuts", "laplace"),
                    help="posterior of the base fit that the selections read (default nuts: the "
                         "Laplace approximation fails its own check here, Pareto k 0.89)")
    ap.add_argument("--refit-posterior", default="laplace", choices=("auto", "nuts", "laplace"),
                    help="posterior of every refit, none included (default laplace)")
    ap.add_argument("--posterior-kw", default="{}", help="JSON kwargs for bs.fit_posterior")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows of an earlier results.csv and fit only the missing ones")
    ap.add_argument("--refit-sd-scales", default="",
                    help="also ours-refit with the discrepancy sd scaled by these factors "
                         "(e.g. 0.5,2: a sensitivity diagnosis, left out of the winners)")
    ap.add_argument("--check-only", action="store_true",
                    help="fit (or load) the base posterior, print its checks and exit")
    ap.add_argument("--explain", type=float, default=None, metavar="BUDGET_X",
                    help="at this budget (x the paper's anchor cost): the runs ours-refit and the "
                         "paper buy, and the refit's signed errors at the queries with each set "
                         "and with each of ours-refit's runs left out; writes explain_<b>x.md")
    ap.add_argument("--redo", default="",
                    help="with --resume: strategies whose earlier rows are dropped and refitted "
                         "(comma-separated, e.g. ours,ours-gain after a change of the selection)")
    args = ap.parse_args(argv)
    train_ptpp = tuple(float(x) for x in args.train_ptpp.split(","))
    default = train_ptpp == (15.0, 31.0) and args.test_ptpp == 279.0
    name = "anchor_study" + ("" if default else
                             f"_p{'+'.join(f'{p:g}' for p in train_ptpp)}to{args.test_ptpp:g}")
    out = HERE / "out" / (name + ("_synthetic" if args.synthetic else ""))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    df = bc.load(args.synthetic)
    cov = bc.coverage_report(df)
    need = train_ptpp + (args.test_ptpp,)
    missing = [p for p in need if p not in cov["stages"]]
    at_test = (df["D"] > 0) & np.isclose(df["ptpp"], args.test_ptpp)
    sizes_test = sorted(df.loc[at_test, bc.SIZE].unique())
    if missing or len(sizes_test) < 2:
        msg = (f"bible_ptpp does not cover the study yet: adaptation rows at PTPP {cov['stages']} "
               f"(missing {missing}), sizes at PTPP {args.test_ptpp:g}: {list(sizes_test)}. Rerun "
               f"when the sweep has committed PTPP {args.test_ptpp:g} rows for at least two sizes.")
        (out / "summary.md").write_text(f"# Anchor study\n\nNot run: {msg}\n")
        print(msg)
        return 1
    law = bc.nonemb_law(args.law)
    kw = json.loads(args.posterior_kw)
    train, cands, queries = split(df, train_ptpp, args.test_ptpp)
    cost = pd.Series(candidate_cost(cands, flops), index=cands.index)
    p_order = paper_order(cands)
    smallest = cands[bc.SIZE].min()
    paper_cost = float(cost[np.isclose(cands[bc.SIZE], smallest)].sum())
    budgets = [float(b) * paper_cost for b in args.budgets.split(",")]

    refit_kind = args.refit_posterior
    base, how = base_posterior(law, train, out / f"base_posterior_{args.posterior}.nc",
                               kind=args.posterior, posterior_kw=kw)
    d = getattr(base, "diagnostics", None) or {}
    check = (f"{bc.diagnostics_note(base) or 'no diagnostics'}"
             + (f" (max R-hat {d['max_rhat']:.3f}, min bulk ESS {d['min_ess_bulk']:.0f}, "
                f"{d['divergences']} divergences)" if "max_rhat" in d else "")
             + f"; tr(C_OO)/s^2 = {weights_check(base, train):.3g} at the fitted rows (the "
               "refit criterion's weights check, docs/design.md)")
    if args.check_only:
        print(f"{how}; {check}")
        return 0
    crits = {"ours": {}, "ours-gain": {"greedy": "gain"},
             "ours-refit": {"criterion": "refit", "observed": train},
             "ours-refit-gain": {"criterion": "refit", "observed": train, "greedy": "gain"},
             "ours-refit-rehearsal": {"criterion": "refit", "observed": train,
                                      "discrepancy": "rehearsal"}}

    def choose(strategy, b):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflowing draws: left out whole
            return select(base, cands, cost=flops, budget=b, queries=queries, **crits[strategy])

    a, r = (choose(k, budgets[0]).attrs for k in ("ours-refit", "ours-refit-rehearsal"))
    s_noise = float(np.sqrt(a["noise_var"]))
    check += (f"; the refit criterion's discrepancy sd s_d = {a['discrepancy']:.3g} (log loss; "
              f"noise sd {s_noise:.3g}); rehearsed: rms sd at the queries "
              f"{r['discrepancy_sd_queries']:.3g} ({r['discrepancy_basis']})")
    for k in (float(x) for x in args.refit_sd_scales.split(",") if x):
        crits[f"ours-refit-sd{k:g}x"] = {"criterion": "refit", "observed": train,
                                        "discrepancy": k * s_noise}

    if args.explain is not None:
        b = args.explain * paper_cost
        sets = {"none": [], "ours-refit": choose("ours-refit", b)["candidate"].tolist(),
                "paper": take_in_order(p_order, cost, b)}
        return explain(sets, args.explain, law=law, train=train, cands=cands, queries=queries,
                       refit_kind=refit_kind, kw=kw, out=out)
    pd.concat([choose(k, max(budgets)).assign(strategy=k) for k in ("ours", "ours-refit")]).to_csv(
        out / "selection_order.csv", index=False)
    done = pd.read_csv(out / "results.csv") if args.resume and (out / "results.csv").exists() \
        else pd.DataFrame()
    redo = [x for x in args.redo.split(",") if x]
    if redo and len(done):
        done = done[~done["strategy"].isin(redo)]
    rows = done.to_dict("records")
    keys = {(r["strategy"], round(r["budget_x"], 6), r["seed"]) for r in rows}
    fitted = {}  # refits by anchor set and seed: selections that coincide share one fit
    header = {"law": law, "how": how, "refit_kind": refit_kind, "base": base, "train": train,
              "cands": cands, "queries": queries, "paper_cost": paper_cost, "seeds": args.seeds,
              "t0": t0, "train_ptpp": train_ptpp, "test_ptpp": args.test_ptpp, "check": check,
              "default": default, "synthetic": args.synthetic, "out": out}

    def record(strategy, b, idx, post, seed=0):
        rows.append(dict(strategy=strategy, budget_x=b / paper_cost, budget=b,
                         selection_base=how if strategy.startswith("ours") else "",
                         spent=float(cost[idx].sum()), n_anchors=len(idx), seed=seed,
                         sizes="/".join(str(int((cands.loc[idx, bc.SIZE] == n).sum()))
                                        for n in sizes),
                         **score(post, queries),
                         **{f"map_{k}": float(v) for k, v in post.map.items()}))
        pd.DataFrame(rows).to_csv(out / "results.csv", index=False)
        write_summary(pd.DataFrame(rows), **header)

    def refit(idx, strategy, b, seed=0):
        if (strategy, round(b / paper_cost, 6), seed) in keys:
            return
        k = (frozenset(idx), seed)
        if k not in fitted:
            fit_df = pd.concat([train, cands.loc[idx]])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fitted[k], _ = bc.posterior(law, fit_df, seed=seed, kind=refit_kind,
                                            posterior_kw=kw)
        record(strategy, b, idx, fitted[k], seed)
        print(f"{strategy} {b / paper_cost:g}x seed {seed} ({time.time() - t0:.0f} s)", flush=True)

    sizes = sorted(cands[bc.SIZE].unique())
    refit([], "none", 0.0)
    # the strategies first, then the random seeds, then one size's full grid each: a partial run
    # already compares the strategies at every budget
    for b in budgets:
        for strategy in crits:
            if (strategy, round(b / paper_cost, 6), 0) not in keys:
                refit(choose(strategy, b)["candidate"].tolist(), strategy, b)
        refit(take_in_order(p_order, cost, b), "paper", b)
    for s in range(args.seeds):
        order = list(np.random.default_rng(s).permutation(cands.index.to_numpy()))
        for b in budgets:
            refit(take_in_order(order, cost, b), "random", b, seed=s)
    for n in sizes[1:]:  # the smallest model's grid is the paper's anchors at 1x
        idx = cands.index[np.isclose(cands[bc.SIZE], n)].tolist()
        refit(idx, f"grid N={n:.0f}", float(cost[idx].sum()))
    refit(cands.index.tolist(), "every candidate", float(cost.sum()))
    write_summary(pd.DataFrame(rows), **header)
    return 0


def explain(sets, budget_x, *, law, train, cands, queries, refit_kind, kw, out):
    """Why one strategy beats another at one budget: for each anchor set (and ours-refit's with
    each of its runs left out), the runs bought and the refit's relative errors at the queries
    (MAE_rel, the mean signed error, and by the queries' adaptation length); writes
    ``explain_<b>x.md``."""
    ours = sets["ours-refit"]
    if len(ours) > 1:
        sets.update({f"ours-refit without {cands.loc[i, 'run_id']} (D={cands.loc[i, 'D']:g})":
                     [j for j in ours if j != i] for i in ours})
    y = queries["loss"].to_numpy(float)
    short = queries["D"].to_numpy(float) <= np.median(queries["D"])
    rows, runs = [], []
    for name, idx in sets.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            post, _ = bc.posterior(law, pd.concat([train, cands.loc[idx]]), kind=refit_kind,
                                   posterior_kw=kw)
            med = ev.posterior_predictions(post, queries, 0.9)[0]
        rel = (med - y) / y
        rows.append({"anchors": name, "n": len(idx), "mae_rel": np.mean(np.abs(rel)),
                     "mean_signed_rel": np.mean(rel),
                     "mae_rel_short_D": np.mean(np.abs(rel[short])),
                     "mae_rel_long_D": np.mean(np.abs(rel[~short])),
                     **{f"map_{k}": float(post.map[k]) for k in ("lam", "zeta", "F", "eta")}})
        print(rows[-1], flush=True)
        if name in ("ours-refit", "paper"):
            runs += [{"set": name, "run_id": cands.loc[i, "run_id"], bc.SIZE: cands.loc[i, bc.SIZE],
                      "D": cands.loc[i, "D"], "replay": cands.loc[i, "replay"],
                      "loss": cands.loc[i, "loss"]} for i in idx]
    how = (f"`python analyses/anchor_study.py --explain {budget_x:g}` (refits: {refit_kind}; "
           "signed error = (median - loss) / loss; short/long D: the queries' adaptation length "
           "at or below / above its median)")
    text = "\n".join([
        f"# Anchor study at {budget_x:g}x: the runs bought and the refit's errors at the queries",
        "", how, "", ev.report.markdown_table(pd.DataFrame(rows)), "",
        "Runs bought:", "", ev.report.markdown_table(pd.DataFrame(runs)), ""])
    (out / f"explain_{budget_x:g}x.md").write_text(text)
    return 0


def write_summary(res, *, law, how, refit_kind, base, train, cands, queries, paper_cost, seeds,
                  t0, train_ptpp, test_ptpp, check, default, synthetic, out):
    """summary.md and budget_error.png from the rows of results.csv so far."""
    res = res.copy()
    res["failed"] = res["failed"].fillna("")
    is_diag = res["strategy"].str.startswith(("grid", "every"))
    diag, res = res[is_diag], res[~is_diag]
    agg = res.groupby(["strategy", "budget_x"]).agg(
        mae_rel=("mae_rel", "mean"), mae_rel_sd=("mae_rel", "std"), coverage90=("coverage90", "mean"),
        width_rel=("width_rel", "mean"), width_rel_noise=("width_rel_noise", "mean"),
        spent=("spent", "mean"), n_anchors=("n_anchors", "mean"),
        sizes=("sizes", "first"), seeds=("seed", "count"),
        failed=("failed", lambda f: int((f != "").sum()))).reset_index()
    agg["sizes"] = agg["sizes"].where(agg["seeds"] == 1, "").fillna("")
    plot(agg, test_ptpp, out)
    best = {}
    contenders = (agg["strategy"] != "none") & ~agg["strategy"].str.contains("-sd")
    for b, g in agg[contenders].groupby("budget_x"):
        g = g.set_index("strategy")["mae_rel"].dropna()
        best[b] = (g.idxmin() if len(g) else "none (every refit failed)", g.to_dict())
    stages = "{" + ", ".join(f"{p:g}" for p in train_ptpp) + "}"
    sizes = ", ".join(f"{n:.0f}" for n in sorted(cands[bc.SIZE].unique()))
    lines = ["# Anchor study on `bible_ptpp`" + (" (SYNTHETIC dry run)" if synthetic else "")
             + ("" if default else f": fit at PTPP {stages}, anchors and queries at PTPP "
                                   f"{test_ptpp:g}"), "",
             (f"Law `{law.name}` on the target domain; fit at PTPP {stages} ({len(train)} rows); "
             f"{len(cands)} candidates at PTPP {test_ptpp:g} (N_nonemb {sizes}); {len(queries)} "
             f"queries (largest model, N_nonemb = {queries[bc.SIZE].iloc[0]:.0f}). Posterior: "
             f"{how} (refits: {refit_kind}); {check}. "
             f"Paper anchor cost {paper_cost:.3e} FLOPs; random: mean of the seeds run "
             f"(column seeds, of {seeds}). {len(res) + len(diag)} fits, run time "
             f"{time.time() - t0:.0f} s."), "",
             ("| strategy | budget (x paper) | anchors | runs per size | FLOPs spent | MAE_rel "
              "| 90% coverage | rel. width | rel. width, fitted noise only | seeds | failed refits |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in agg.sort_values(["budget_x", "strategy"]).iterrows():
        lines.append(f"| {r['strategy']} | {r['budget_x']:g} | {r['n_anchors']:.1f} | {r['sizes']} "
                     f"| {r['spent']:.3e} | {r['mae_rel']:.4f}"
                     + (f" +- {r['mae_rel_sd']:.4f}" if r['seeds'] > 1 else "")
                     + f" | {r['coverage90']:.2f} | {r['width_rel']:.4f} "
                       f"| {r['width_rel_noise']:.4f} | {r['seeds']} | {r['failed']} |")
    lines += ["", "Winner by MAE_rel at each budget (honest comparison; random is a mean over seeds):",
              ""]
    for b, (w, d) in best.items():
        others = ", ".join(f"{k} {v:.4f}" for k, v in sorted(d.items()))
        lines.append(f"- {b:g}x: **{w}** ({others})")
    if len(diag):
        lines += ["", ("One model's full grid of anchors (the smallest model's is `paper` at 1x) "
                       "and every candidate:"), "",
                  "| anchors | FLOPs (x paper) | MAE_rel | 90% coverage | rel. width | rel. width, "
                  "fitted noise only |", "|---|---|---|---|---|---|"]
        for _, r in diag.iterrows():
            lines.append(f"| {r['strategy']} | {r['budget_x']:.1f} | {r['mae_rel']:.4f} "
                         f"| {r['coverage90']:.2f} | {r['width_rel']:.4f} "
                         f"| {r['width_rel_noise']:.4f} |")
    mp = [c for c in res.columns if c.startswith("map_") and c != "map_sigma"]
    moved = res[(res["seed"] == 0)
                & res["strategy"].isin(["none", "ours", "ours-refit", "paper"])]
    lines += ["", ("Posterior mode of every parameter, the refit without anchors and those of "
                   "`ours`, `ours-refit` and `paper` (which parameters the anchors move):"), "",
              "| strategy | budget | " + " | ".join(c[4:] for c in mp) + " |",
              "|---|---|" + "---|" * len(mp)]
    for _, r in moved.sort_values(["budget_x", "strategy"]).iterrows():
        lines.append(f"| {r['strategy']} | {r['budget_x']:g} | "
                     + " | ".join(f"{r[c]:.4g}" for c in mp) + " |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def plot(agg, test_ptpp, out):
    """budget_error.png: MAE_rel and 90% coverage against the budget, one line per strategy."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    colors = {"ours": "C2", "ours-gain": "C3", "ours-refit": "C4", "ours-refit-gain": "C5",
              "ours-refit-rehearsal": "C6",
              "paper": "C0", "random": "C1", "none": "k"}
    for strat, g in agg.groupby("strategy"):
        g = g.sort_values("budget_x")
        if strat == "none":
            for ax, col in zip(axes, ("mae_rel", "coverage90")):
                ax.axhline(g[col].iloc[0], color="k", ls=":", label="no anchors")
            continue
        style = ({"color": colors[strat]} if strat in colors  # sensitivity rows: grey, dashed
                 else {"color": "0.6", "ls": "--", "alpha": 0.7})
        axes[0].errorbar(g["budget_x"], g["mae_rel"], yerr=g["mae_rel_sd"].fillna(0), marker="o",
                         label=strat, capsize=3, **style)
        axes[1].plot(g["budget_x"], g["coverage90"], marker="o", label=strat, **style)
    axes[1].axhline(0.9, color="grey", ls="--", lw=1)
    axes[0].set(xscale="log", xlabel="budget (x the paper's anchor cost)",
                ylabel="MAE_rel at the queries",
                title=f"error at the largest model, PTPP {test_ptpp:g}")
    axes[1].set(xscale="log", xlabel="budget (x the paper's anchor cost)",
                ylabel="90% interval coverage", title="calibration", ylim=(-0.02, 1.02))
    axes[0].legend()
    fig.savefig(out / "budget_error.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
