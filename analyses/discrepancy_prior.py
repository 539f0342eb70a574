"""The discrepancy prior's scales learnt across real tables (empirical Bayes), validated leaving
one dataset out.

The default predictive (docs/forecasting.md, "Posterior of the discrepancy") gives the
discrepancy's systematic part ``mu ~ N(0, MU_SCALE^2)`` and its spread ``tau ~
HalfNormal(TAU_SCALE)``; the rehearsal rows of a table update them. Where a table has few or no
rehearsal rows along a direction (two PTPP stages: no cut along PTPP), the forecast is the prior's.
Here the two scales are chosen by the marginal likelihood of every real table's rehearsal rows
(each rehearsed direction of each table with its own ``mu``, ``tau``, ``p``, ``a``; each dataset
weighted once), and the choice is checked on the held-out rows of the forecast-honesty splits:
for each dataset, the scales learnt from the *other* datasets' rehearsals forecast its held-out
rows (leave one dataset out), against the current scales.

The units are those of ``analyses/forecast_honesty.py`` (its splits, laws and fits: Laplace
posteriors, seed 0, as its committed ``per_dataset.md``); each unit's posterior is saved with its
rehearsal under ``out/discrepancy_prior/posteriors/`` and
its rehearsal rows in ``rehearsal.json`` (neither is committed: the run refits what is missing). Scores per dataset, each dataset once:
``bs.evaluate.calibration_by`` (coverage 50/80/90/95%, MSCE, interval scores, CRPS, width), beside
the peers' intervals cached by ``forecast_honesty.py --variants baselines``.

Usage:
    nice -n 10 python analyses/discrepancy_prior.py [--datasets epoch gadre ...] [--m3 12]
    python analyses/discrepancy_prior.py --report       # from what is saved
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analyses"))
import forecast_honesty as fh  # noqa: E402

import bayes_scaling as bs  # noqa: E402
from bayes_scaling.bayes import intervals as iv  # noqa: E402
from bayes_scaling.errors import BayesScalingError  # noqa: E402

OUT = ROOT / "analyses" / "out" / "discrepancy_prior"
POSTS = OUT / "posteriors"
REHEARSAL = OUT / "rehearsal.json"
#: the candidate prior scales (the same grid for ``tau`` and ``mu``)
SCALES = (0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3)
#: the peers' intervals scored beside (forecast_honesty's cached rows)
PEERS = {"bootstrap": "bootstrap", "residual bootstrap": "residual-bootstrap",
         "conformal": "conformal"}


def units(datasets=None, m3=12) -> list:
    """forecast_honesty's units with a training table to fit; bible_m3's thinned to ``m3``
    (evenly over its list), the rest all."""
    out = [u for u in fh.all_units() if not u.skip]
    if datasets:
        out = [u for u in out if u.dataset in datasets or u.dataset.split("/")[0] in datasets]
    m3_units = [u for u in out if u.dataset == "bible_m3"]
    keep = {id(u) for u in m3_units[:: max(1, len(m3_units) // max(m3, 1))][:m3]} if m3 else set()
    return [u for u in out if u.dataset != "bible_m3" or id(u) in keep]


def fit(unit) -> dict:
    """Fit ``unit``'s Laplace posterior (as forecast_honesty does), save it with its rehearsal,
    and return its rehearsal rows per direction (or the failure)."""
    path = POSTS / f"{unit.slug}.nc"
    t0 = time.perf_counter()
    try:
        law = fh.resolve_law(unit.law)
        fixed = dict(unit.fixed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if unit.two_phase:
                mapfit = fh.m3_common.fit(law, unit.train)
                fixed.update({k: mapfit.params[k] for k in fh.M3_BASE})
            post = bs.fit_posterior(law, unit.train, fixed=fixed or None, method="laplace",
                                    seed=0, progress_bar=False)
            post.save(path)
    except (fh.SplitSkipped, BayesScalingError, FloatingPointError, ValueError) as exc:
        return {"status": "failed", "reason": str(exc).splitlines()[0][:200]}
    return {"status": "ok", "dataset": unit.dataset, "seconds": time.perf_counter() - t0,
            "posterior_ok": bool(post.ok), "rehearsal": post.settings["rehearsal"]}


def collect(todo) -> dict:
    """Fit the units not yet in ``rehearsal.json`` (written after each)."""
    POSTS.mkdir(parents=True, exist_ok=True)
    saved = json.loads(REHEARSAL.read_text()) if REHEARSAL.exists() else {}
    for i, u in enumerate(todo):
        if u.slug in saved and (saved[u.slug]["status"] != "ok"
                                or (POSTS / f"{u.slug}.nc").exists()):
            continue
        rec = fit(u)
        saved[u.slug] = rec
        REHEARSAL.write_text(json.dumps(saved))
        print(f"[{i + 1}/{len(todo)}] {u.dataset} | {u.split} | {u.label}: {rec['status']} "
              f"{rec.get('reason', '')}{rec.get('seconds', 0):.0f} s", flush=True)
    return saved


def direction_rows(rec) -> list[pd.DataFrame]:
    """One rehearsal table per rehearsed direction with rows."""
    out = []
    for d in rec["rehearsal"].values():
        rows = pd.DataFrame({k: d[k] for k in ("row", "cut", "r", "v0", "d", "q")})
        if len(rows):
            out.append(rows)
    return out


def evidence(saved) -> pd.DataFrame:
    """Log evidence of each unit's rehearsal rows (summed over its directions) at every pair of
    scales: columns dataset, unit, tau_scale, mu_scale, log_evidence."""
    out = []
    for slug, rec in saved.items():
        if rec["status"] != "ok":
            continue
        terms = [iv.grid_terms(r) for r in direction_rows(rec)]
        for st in SCALES:
            for sm in SCALES:
                ev = sum(iv.log_evidence(t, st, sm) for t in terms)
                out.append({"dataset": rec["dataset"], "unit": slug, "tau_scale": st,
                            "mu_scale": sm, "log_evidence": ev})
    return pd.DataFrame(out)


def best_scales(ev: pd.DataFrame, leave_out=None) -> tuple[float, float]:
    """The scales maximising the mean over datasets (each once) of their units' mean log
    evidence, ``leave_out`` excluded."""
    e = ev[ev["dataset"] != leave_out] if leave_out else ev
    per = (e.groupby(["dataset", "tau_scale", "mu_scale"])["log_evidence"].mean()
           .groupby(["tau_scale", "mu_scale"]).mean())
    return tuple(map(float, per.idxmax()))


def forecast_rows(unit, tau_scale, mu_scale) -> pd.DataFrame | None:
    """The held-out rows of ``unit`` scored under the default predictive with the given prior
    scales (its saved posterior; nothing refitted)."""
    path = POSTS / f"{unit.slug}.nc"
    if not path.exists():
        return None
    post = bs.load_posterior(path, law=fh.resolve_law(unit.law))
    old = iv.TAU_SCALE, iv.MU_SCALE
    iv.TAU_SCALE, iv.MU_SCALE = tau_scale, mu_scale
    try:
        post.settings.pop("discrepancy_grid", None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            draws = fh.predictive(post, unit.test, "after")
    finally:
        iv.TAU_SCALE, iv.MU_SCALE = old
    ok = np.all(np.isfinite(draws), 1)
    return fh.row_scores(draws[ok], unit.test["loss"].to_numpy(float))


def report(todo, saved) -> str:
    ev = evidence(saved)
    ev.to_csv(OUT / "evidence.csv", index=False)
    datasets = sorted(ev["dataset"].unique())
    s_all = best_scales(ev)
    choice = {ds: best_scales(ev, ds) for ds in datasets}
    own = {}
    for ds, g in ev.groupby("dataset"):
        per = g.groupby(["tau_scale", "mu_scale"])["log_evidence"].mean()
        st, sm = per.idxmax()
        own[ds] = (float(st), float(sm), float(per.max() - per.loc[(iv.TAU_SCALE, iv.MU_SCALE)]))
    rows = []
    for u in todo:
        if saved.get(u.slug, {}).get("status") != "ok" or u.dataset not in choice:
            continue
        variants = {"current (0.1, 0.1)": (iv.TAU_SCALE, iv.MU_SCALE),
                    "learnt, leave dataset out": choice[u.dataset], "learnt, all": s_all}
        for name, (st, sm) in variants.items():
            r = forecast_rows(u, st, sm)
            if r is not None:
                rows.append(r.assign(dataset=u.dataset, split=u.split, law=u.label, method=name))
        for name, v in PEERS.items():
            f = fh.cache_dir(v, "laplace") / f"{u.slug}.csv"
            if f.exists():
                rows.append(pd.read_csv(f).assign(dataset=u.dataset, split=u.split, law=u.label,
                                                  method=name))
    rows = pd.concat(rows, ignore_index=True)
    unit = ["dataset", "split", "law"]
    n = rows.groupby(unit)["method"].nunique()
    rows = rows.set_index(unit).loc[lambda t: t.index.isin(n[n == n.max()].index)].reset_index()
    tables = []
    for m, g in rows.groupby("method", sort=False):
        table, mean = bs.evaluate.calibration_by(g, by="dataset")
        tables.append(table.assign(method=m))
        tables.append(pd.DataFrame([{"dataset": "mean (datasets equal)", "method": m, **mean}]))
    t = pd.concat(tables, ignore_index=True)
    t.to_csv(OUT / "scores.csv", index=False)
    cols = ["method", "rows", "cov50", "cov80", "cov90", "cov95", "msce", "is50", "is90", "crps",
            "width90_median"]
    lines = [
        "# The discrepancy prior's scales, learnt across tables", "",
        "Generated by `nice -n 10 python analyses/discrepancy_prior.py` (resumable; `--report` "
        "from what is saved). Laplace posteriors of forecast_honesty's units (seed 0), each with "
        "its rehearsal; the scales maximise the marginal likelihood of the rehearsal rows "
        "(`bs.bayes.intervals.tau_posterior`'s `log_evidence`, each rehearsed direction with its "
        "own mu, tau, p, a; the mean over datasets of their units' mean). Held-out rows scored "
        "with `bs.evaluate.calibration_by` (each dataset once), on the units every method "
        "scored.", "",
        f"Units fitted: {sum(r['status'] == 'ok' for r in saved.values())} "
        f"(failed: {sum(r['status'] != 'ok' for r in saved.values())}); datasets: "
        f"{', '.join(datasets)}.", "",
        f"Scales learnt from every dataset: tau_scale {s_all[0]:g}, mu_scale {s_all[1]:g} "
        f"(current {iv.TAU_SCALE:g}, {iv.MU_SCALE:g}).", "",
        "Per dataset: the scales its own rehearsals prefer (its units' mean log evidence, "
        "maximised alone), the gain in that mean over the current scales, and the scales the "
        "other datasets choose for it (leave it out):", "",
        "| dataset | its own tau_scale | its own mu_scale | gain (nats per unit) | left out: "
        "tau_scale | left out: mu_scale |", "|---|---|---|---|---|---|",
        *[f"| {ds} | {own[ds][0]:g} | {own[ds][1]:g} | {own[ds][2]:.1f} | {st:g} | {sm:g} |"
          for ds, (st, sm) in choice.items()], "",
        "## Equal-weight mean over datasets", "",
        _md(t[t["dataset"] == "mean (datasets equal)"][cols]), "",
        "## Per dataset", ""]
    for ds in sorted(set(t["dataset"]) - {"mean (datasets equal)"}):
        lines += [f"### {ds}", "", _md(t[t["dataset"] == ds][cols]), ""]
    text = "\n".join(lines)
    (OUT / "summary.md").write_text(text)
    return text


def _md(t: pd.DataFrame) -> str:
    """A scores table as forecast_honesty's per_dataset.md writes it."""
    return bs.evaluate.markdown_table(fh._fmt_scores(t))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", help="datasets (default: all)")
    ap.add_argument("--m3", type=int, default=12, help="bible_m3 units (evenly thinned)")
    ap.add_argument("--report", action="store_true", help="only the report, from what is saved")
    a = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    todo = units(a.datasets, a.m3)
    saved = json.loads(REHEARSAL.read_text()) if REHEARSAL.exists() else {}
    if not a.report:
        saved = collect(todo)
    print(report(todo, saved))
    return 0


if __name__ == "__main__":
    sys.exit(main())
