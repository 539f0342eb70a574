"""Posteriors that refused with the defaults, before and after the escalation ladder.

The cases (each at the seeds given, with `bs.fit_posterior`'s defaults, chains one per host
device as `bayes-scaling posterior` runs them):

- `bible`: `ptpp_gated_floor` on `bs.datasets.load("bible_ptpp")` target rows with D > 0 at
  PTPP 15 and 31 (168 rows; the README's second real case);
- `parallel`: the ScaleBench `parallel_scaling_law` laws with signed coefficients (4-6
  parameters, 2 inputs) on each group of its train table (`stack`, `pile`: 18 rows each);
- `farseer`, `data_constrained`: the ScaleBench laws of those tasks with signed coefficients, on
  their train tables.

One JSON line per (label, case, seed) is appended to `--out` (a case already there is skipped,
so an interrupted run resumes); the table of all lines is printed at the end. `--kw` passes
settings to `fit_posterior` (e.g. `--kw retries=0` for the engine without its ladder).

Usage:
    .venv/bin/python benchmarks/ladder_cases.py --label after --cases bible parallel \
        --seeds 0 1 2 --out ladder_cases.jsonl
    .venv/bin/python benchmarks/ladder_cases.py --show --out ladder_cases.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PARALLEL_LAWS = ("sl_1", "sl_2", "sl_3", "sl_4", "sl_6", "sl_7", "sl_8")
DATA_CONSTRAINED_LAWS = ("sl_2", "sl_7")


def cases(which):
    """``[(name, law, table)]`` of the families in ``which``."""
    import bayes_scaling as bs
    from bayes_scaling import scalebench

    out = []
    if "bible" in which:
        df = bs.datasets.load("bible_ptpp").query("domain == 'target' and D > 0")
        out.append(("bible_ptpp 15/31 ptpp_gated_floor", "ptpp_gated_floor",
                    df[df["ptpp"].isin((15, 31))]))
    for task, family, ids in (("parallel_scaling_law", "parallel", PARALLEL_LAWS),
                              ("farseer_scaling_law", "farseer", ("sl_1",)),
                              ("data_constrained_scaling_law", "data_constrained",
                               DATA_CONSTRAINED_LAWS)):
        if family not in which:
            continue
        train, _ = scalebench.load(task)
        target = scalebench.TARGETS[task]
        train = train.rename(columns={target: "loss"}) if target != "loss" else train
        groups = sorted(train["group"].unique()) if "group" in train else [None]
        for law_id in ids:
            law = scalebench.get(task, law_id)
            for g in groups:
                rows = train if g is None or len(groups) == 1 else train[train["group"] == g]
                name = f"{family}/{law_id}" + ("" if len(groups) == 1 else f" [{g}]")
                out.append((name, law, rows.reset_index(drop=True)))
    return out


def fit(law, df, seed, kw):
    import bayes_scaling as bs

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = bs.fit_posterior(law, df, seed=seed, progress_bar=False, **kw)
    d = post.diagnostics
    attempts = d.get("attempts", [])
    return {
        "seconds": round(time.perf_counter() - t0, 1), "ok": bool(post.ok),
        "max_rhat": round(d["max_rhat"], 4), "min_ess_bulk": round(d["min_ess_bulk"]),
        "min_ess_tail": round(d["min_ess_tail"]), "divergences": d["divergences"],
        "modes": len(d.get("modes", [])), "attempts": len(attempts),
        "tried": [a.get("action", "") for a in attempts],
        "failed": d["failed"][:3], "notes": d.get("notes", []),
        "warnings": sorted({type(w.message).__name__ for w in caught}),
    }


def show(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f]
    print(f"{'label':8} {'case':44} {'seed':>4} {'s':>7} {'ok':>5} {'rhat':>6} {'bulk':>5} "
          f"{'tail':>5} {'div':>4} {'att':>3}  tried")
    for r in rows:
        if "error" in r:
            print(f"{r['label']:8} {r['case']:44} {r['seed']:>4} error: {r['error'][:60]}")
            continue
        print(f"{r['label']:8} {r['case']:44} {r['seed']:>4} {r['seconds']:7.1f} {r['ok']!s:>5} "
              f"{r['max_rhat']:6.3f} {r['min_ess_bulk']:5d} {r['min_ess_tail']:5d} "
              f"{r['divergences']:4d} {r['attempts']:3d}  {', '.join(r['tried'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="default")
    ap.add_argument("--cases", nargs="+", default=["bible", "parallel"],
                    choices=["bible", "parallel", "farseer", "data_constrained"])
    ap.add_argument("--only", nargs="*", default=None, help="case names to keep (substrings)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--kw", nargs="*", default=[], help="fit_posterior settings, key=value")
    ap.add_argument("--out", default="ladder_cases.jsonl")
    ap.add_argument("--show", action="store_true", help="print the table of --out and stop")
    args = ap.parse_args()
    if args.show:
        return show(args.out)
    from bayes_scaling.bayes import use_chain_devices

    use_chain_devices(4)
    kw = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.kw)}
    done = set()
    if os.path.exists(args.out):
        with open(args.out) as f:
            for line in f:
                r = json.loads(line)
                done.add((r["label"], r["case"], r["seed"]))
    for name, law, df in cases(args.cases):
        if args.only and not any(o in name for o in args.only):
            continue
        for seed in args.seeds:
            if (args.label, name, seed) in done:
                continue
            try:
                res = fit(law, df, seed, kw)
            except Exception as e:  # noqa: BLE001 (a case that raises is a result too)
                res = {"error": f"{type(e).__name__}: {e}"}
            res = {"label": args.label, "case": name, "seed": seed, "rows": len(df), **res}
            with open(args.out, "a") as f:
                f.write(json.dumps(res) + "\n")
            print(json.dumps(res), flush=True)
    show(args.out)


if __name__ == "__main__":
    main()
