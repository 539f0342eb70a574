"""Held-out honesty of posterior predictive intervals on three real tables.

For each case the posterior is fitted on the training rows only and the empirical coverage of its
central 50% and 90% predictive intervals is measured on the held-out rows, which lie beyond the
training data along one axis:

- epoch: Chinchilla on Epoch's 240 points; held out: the largest models (top 20% of N).
- datablations: Muennighoff's law, base frozen at the published values (as in the published fit);
  held out: the highest epoch counts D/U (top 15%).
- gadre: Chinchilla on the c4_val losses of each training corpus (c4_original, rpj, rw_original)
  of the over-training testbed; held out: the largest tokens per parameter (PTPP >= 320).

Remedy (model discrepancy): predictions are multiplied by exp(tau d z), z ~ N(0, 1), where d is the
extrapolation distance along the case's axis (0 inside the training range, 1 at one training-width
beyond it) and tau is estimated by rehearsing the same extrapolation inside the training rows
(``bs.bayes.estimate_discrepancy``): the held-out rows are never used to choose it.

Writes analyses/out/bayes_heldout/summary.md and one forecast figure per case. ``--quick`` uses the
Laplace approximation instead of NUTS.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bayes_scaling as bs  # noqa: E402
from bayes_scaling import bayes as B  # noqa: E402

OUT = ROOT / "analyses" / "out" / "bayes_heldout"
MUEN_BASE = {k: bs.laws.get("muennighoff").example[k] for k in ("A", "B", "E", "alpha", "beta")}


def _top(values, q):
    values = np.asarray(values, float)
    return values >= np.quantile(values, q)


def _top_two_levels(t):
    """The two largest tokens-per-parameter levels: 320 and 640 on the whole table, and the
    same kind of step inside the training rows (80 and 160) when tau is rehearsed."""
    p = np.asarray(t["ptpp"], float)
    return p >= np.unique(p)[-2]


def cases():
    """(name, law, table, held-out mask function, axis function or None, fit kwargs)."""
    ep = bs.datasets.load("chinchilla_epoch")
    ep = ep[ep["epoch_kept"]].reset_index(drop=True)
    yield ("epoch", "chinchilla", ep, lambda t: _top(t["N"], 0.8), lambda t: t["N"], {})
    db = bs.datasets.load("datablations")
    yield ("datablations", "muennighoff", db, lambda t: _top(t["D"] / t["U"], 0.85),
           lambda t: t["D"] / t["U"], {"fixed": MUEN_BASE})
    ga = bs.datasets.load("gadre_overtraining")
    ga = ga[ga["domain"] == "c4_val"]
    for ts in ("c4_original", "rpj", "rw_original"):
        t = ga[ga["train_set"] == ts].reset_index(drop=True)
        yield (f"gadre_{ts}", "chinchilla", t, _top_two_levels, lambda t: t["D"] / t["N"], {})


def run_case(name, law, df, heldout, axis, kw, quick):
    method = "laplace" if quick else "nuts"
    mask = np.asarray(heldout(df), bool)
    train, test = df[~mask], df[mask]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bs.fit_posterior(law, train, method=method, progress_bar=False, seed=0, **kw)
        before = post.coverage(test, (0.5, 0.9), discrepancy=0.0)
        # rehearse the same extrapolation inside the training rows to choose tau
        est = B.estimate_discrepancy(law, train, heldout, axis=axis, method=method, seed=1, **kw)
        B.with_discrepancy(post, est["tau"], axis)
        after = post.coverage(test, (0.5, 0.9))
        d = B.extrapolation_distance(post, test, axis)
        xcol = "N" if name == "epoch" else ("D" if name != "datablations" else "D")
        bs.plots.forecast_plot(post, test.sort_values(xcol), x=xcol, train=train, heldout=test,
                               path=OUT / f"{name}.png",
                               title=f"{name}: 90% predictive band with discrepancy tau="
                                     f"{est['tau']:.3g}")
    return {"case": name, "law": law, "n_train": len(train), "n_heldout": len(test),
            "max_distance": float(d.max()), "cov50_before": before[0.5], "cov90_before": before[0.9],
            "tau": est["tau"], "cov50_after": after[0.5], "cov90_after": after[0.9],
            "inner_cov90_before": est["inner_coverage_before"][0.9],
            "inner_cov90_after": est["inner_coverage_after"][0.9],
            "ok": post.ok, "seconds": time.perf_counter() - t0,
            "diag": (f"R-hat {post.diagnostics['max_rhat']:.3f}, ESS "
                     f"{post.diagnostics['min_ess_bulk']:.0f}, {post.diagnostics['divergences']} div"
                     if method == "nuts" else f"Pareto k {post.diagnostics['pareto_k']:.2f}")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Laplace instead of NUTS")
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    done = OUT / ("cases_quick" if args.quick else "cases")  # one JSON per case, so --only adds
    done.mkdir(exist_ok=True)
    names = []
    for name, law, df, heldout, axis, kw in cases():
        names.append(name)
        if args.only and name not in args.only:
            continue
        r = run_case(name, law, df, heldout, axis, kw, args.quick)
        (done / f"{name}.json").write_text(json.dumps(r, default=float))
        print(r, flush=True)
    rows = [json.loads((done / f"{n}.json").read_text()) for n in names
            if (done / f"{n}.json").exists()]
    lines = ["# Held-out coverage of posterior predictive intervals", "",
             f"Generated by `analyses/bayes_heldout.py{' --quick' if args.quick else ''}` "
             f"({'Laplace' if args.quick else 'NUTS, 4 chains x 1000 draws'}). Before: the "
             "posterior predictive as fitted. After: with the model-discrepancy term "
             "exp(tau d z), tau estimated by rehearsing the same extrapolation inside the training "
             "rows (the held-out rows are not used).", "",
             "| case | law | train rows | held-out rows | max distance d | 50% before | 90% before "
             "| tau | 50% after | 90% after | inner 90% before/after | fit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['law']} | {r['n_train']} | {r['n_heldout']} | "
            f"{r['max_distance']:.2f} | {r['cov50_before']:.0%} | {r['cov90_before']:.0%} | "
            f"{r['tau']:.3g} | {r['cov50_after']:.0%} | {r['cov90_after']:.0%} | "
            f"{r['inner_cov90_before']:.0%} / {r['inner_cov90_after']:.0%} | {r['diag']} |")
    n = sum(r["n_heldout"] for r in rows)
    if n:
        pooled = {k: sum(r[k] * r["n_heldout"] for r in rows) / n
                  for k in ("cov50_before", "cov90_before", "cov50_after", "cov90_after")}
        lines += ["", f"Pooled over {n} held-out rows: 50% {pooled['cov50_before']:.0%} -> "
                      f"{pooled['cov50_after']:.0%}, 90% {pooled['cov90_before']:.0%} -> "
                      f"{pooled['cov90_after']:.0%}."]
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
