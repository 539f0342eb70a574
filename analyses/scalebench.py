"""ScaleBench (Li et al. 2026, arXiv 2604.22753): every method of ``bs.design`` on the four tasks.

Writes ``analyses/out/scalebench/``:

- ``results.csv``: one row per (task, law, method, seed, budget): r2_protocol, r2_posterior,
  coverage90, n_runs, cost_spent, seconds (of the whole seed job). Resumable: jobs already in the
  file are skipped, each finished job is appended at once.
- ``summary.md``: mean R^2 over laws and seeds per (task, budget, method) beside the paper's
  Table 2 (SOURCE.md), coverage, and runtime per method.
- ``<task>.png``: R^2 against budget for every method, the paper's MSPE points marked.

Run (niced; ``--workers`` processes):
    nice -n 10 python analyses/scalebench.py --executor local --workers 2 [--methods bayes,random] [--seeds 0-9]
    python analyses/scalebench.py --summary          # tables and figures from results.csv only
    python analyses/scalebench.py --speed            # jax vs scipy refit on a few laws
    nice -n 10 python analyses/scalebench.py --intervals   # bayes's intervals: draws vs delta
    python analyses/scalebench.py --diagnose farseer_scaling_law sl_1 7 [--methods d_opt]
    python analyses/scalebench.py --enumerate parallel_scaling_law sl_9 0.05
    nice -n 10 python analyses/scalebench.py --time-jobs vocab_scaling_law:sl_1:0 \
        vocab_scaling_law:sl_2:0 [--methods bayes]   # CPU and wall seconds per job, in one process
    nice -n 10 python analyses/scalebench.py --refit-starts farseer_scaling_law sl_1 --seeds 0-4 \
        --methods bayes,v_opt        # the protocol's 64-start refit against 1024 starts
    nice -n 10 python analyses/scalebench.py --basin farseer_scaling_law sl_1 --seeds 0-2 \
        --methods bayes              # how many of 64 starts reach the best basin: jax and scipy
    nice -n 10 python analyses/scalebench.py --purchases farseer_scaling_law sl_1 --seeds 0-9 \
        --methods bayes,v_opt        # what was bought; the refit's basin-hit rate and expected R^2
    nice -n 10 python analyses/scalebench.py --scorers-run --tasks farseer_scaling_law \
        --methods random,v_opt,mspe,bayes --seeds 0-9   # both scorers, the benchmark's conventions
    nice -n 10 python analyses/scalebench.py --rescore-peer   # the peer's purchases, both scorers
    python analyses/scalebench.py --compare-peer    # harness_agreement.md, mspe.md
    (analyses/scalebench_peer.py says what each writes)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scaling as bs
import scaleout
from bayes_scaling.design import fitting
from bayes_scaling.evaluate.report import markdown_table

OUT = Path(__file__).resolve().parent / "out" / "scalebench"
RESULTS = OUT / "results.csv"
TIMED = OUT / "timed_runs.json"  # runs from scratch into another results file: their wall time
KEY = ["task", "law", "method", "seed"]
COLS = KEY + ["budget", "r2_protocol", "r2_posterior", "coverage90", "n_runs", "cost_spent",
              "seconds"]
METHODS = ["random", "cheapest", "cost_random", "d_opt", "v_opt", "bayes"]
SHORT = {"data_constrained_scaling_law": "data_con", "farseer_scaling_law": "farseer",
         "parallel_scaling_law": "parallel", "vocab_scaling_law": "vocab"}
RUN_ORDER = ["parallel_scaling_law", "farseer_scaling_law", "data_constrained_scaling_law",
             "vocab_scaling_law"]  # cheapest tasks first, so a partial run covers whole tasks

# The paper's Table 2 (SOURCE.md): mean target-region R^2 at 1% / 5% / 10% of the pool's cost.
PAPER = {
    "random": {"data_con": (-0.74, -0.36, 0.12), "farseer": (-0.77, 0.78, 0.79),
               "parallel": (-1.00, 0.27, 0.19), "vocab": (0.54, 0.53, 0.59)},
    "cheapest": {"data_con": (-0.58, -0.56, -0.40), "farseer": (-0.89, 0.41, 0.68),
                 "parallel": (-1.00, 0.42, 0.42), "vocab": (0.30, 0.53, 0.55)},
    "cost_random": {"data_con": (-0.38, -0.39, -0.22), "farseer": (-0.25, 0.56, 0.74),
                    "parallel": (-1.00, 0.03, 0.53), "vocab": (0.86, 0.89, 0.83)},
    "d_opt": {"data_con": (0.71, 0.80, 0.77), "farseer": (-0.11, 0.49, 0.87),
              "parallel": (-1.00, 0.70, 0.99), "vocab": (0.95, 0.97, 0.97)},
    "v_opt": {"data_con": (0.58, 0.83, 0.85), "farseer": (0.67, 0.87, 0.92),
              "parallel": (-1.00, 0.69, 0.99), "vocab": (0.96, 0.97, 0.98)},
    "mspe": {"data_con": (0.73, 0.85, 0.86), "farseer": (0.60, 0.88, 0.93),
             "parallel": (-1.00, 0.77, 0.99), "vocab": (0.96, 0.98, 0.98)},
}
MSPE_STD = {"data_con": (0.37, 0.16, 0.11), "farseer": (0.11, 0.02, 0.00),
            "parallel": (0.00, 0.39, 0.00), "vocab": (0.02, 0.00, 0.00)}
BUDGETS = (0.01, 0.05, 0.1)
N_STARTS = bs.design.harness.N_STARTS


#: Labels of ``bayes`` with options, runnable beside the plain methods (``--methods``).
RULES3 = ("ratio", "gain", "half")
VARIANTS = {"bayes-rehearsal": ("bayes", {"rehearsal": 128, "rules": RULES3}),
            "bayes-rehearsal-2rules": ("bayes", {"rehearsal": 128}),
            "bayes-3rules": ("bayes", {"rules": RULES3}),
            "bayes-plain": ("bayes", {"rehearsal": 0}),
            "bayes-starts64": ("bayes", {"refit_starts": 64}),
            "bayes-sim8": ("bayes", {"simulate": 8}),
            "bayes-sim16": ("bayes", {"simulate": 16}),
            # the same options; its rows were run with the gate that also asks the worlds'
            # typical (geometric) error ratio to reach the factor (design.posterior.overruled)
            "bayes-sim16g": ("bayes", {"simulate": 16})}


def resolve(label):
    """``(method, options)`` of a method name or a :data:`VARIANTS` label."""
    return VARIANTS.get(label, (label, {}))


def job(args):
    """One (task, law, method, seed): the harness's per-seed job, rows tagged with the key."""
    task_name, law_id, method, seed, data_dir = args
    task = bs.design.scalebench_task(task_name, law_id, data_dir=data_dir)
    name, options = resolve(method)
    rows = bs.design.seed_job((task, name, seed, "jax", options))
    return [dict(task=task_name, law=law_id, method=method, **r) for r in rows]


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def run_jobs(methods, seeds, tasks, executor, data_dir, laws=None, results=RESULTS):
    """Run the (task, law, method, seed) jobs not yet in ``results`` and append each finished
    one to it; returns the wall seconds of the run."""
    start = time.perf_counter()
    done = set()
    if results.exists():
        old = pd.read_csv(results)
        done = set(map(tuple, old[KEY].astype(str).to_numpy()))
    todo = [(t, law, m, s, data_dir) for s in seeds for t in tasks
            for law in bs.scalebench.task_laws(t) for m in methods
            if (t, law, m, str(s)) not in done and (laws is None or law in laws)]
    print(f"{len(todo)} jobs to run ({len(done)} done)", flush=True)
    results.parent.mkdir(parents=True, exist_ok=True)
    with executor:
        for i, (_, result) in enumerate(executor.submit_iter(job, todo)):
            rows = pd.DataFrame(result, columns=COLS)
            rows.to_csv(results, mode="a", header=not results.exists(), index=False)
            r = rows.iloc[-1]
            print(f"[{i + 1}/{len(todo)}] {r.task} {r.law} {r.method} seed {r.seed}: "
                  f"R2 {rows.r2_protocol.round(3).tolist()} ({r.seconds:.0f} s)", flush=True)
    wall = time.perf_counter() - start
    print(f"{len(todo)} jobs in {wall:.0f} s wall", flush=True)
    return wall


def summarise():
    df = pd.read_csv(RESULTS).drop_duplicates(KEY + ["budget"], keep="last")
    df["t"] = df.task.map(SHORT)
    lines = ["# ScaleBench: budget-aware selection, our harness beside the paper's Table 2", "",
             "Generated by `python analyses/scalebench.py --summary` from `results.csv`",
             "(written by `nice -n 10 python analyses/scalebench.py --workers 2`). R^2 on the",
             "target region (test.csv), clipped to [-1, 1]; per cell: mean over the task's laws",
             "and the seeds,",
             "± the std over seeds of the law-mean; `n` = (laws x seeds) done. Paper values: its",
             "Table 2 (SOURCE.md). Refit: 64 starts uniform in the bounds, L-BFGS in the",
             "unconstrained coordinates (one compiled JAX program; see docs/design.md for how it",
             "compares with the benchmark's scipy L-BFGS-B). A seed whose laws are not all done",
             "averages the laws done. `bayes-rehearsal`: `bayes` with `rehearsal=128` over the",
             "plans of three greedy rules (ratio, gain, cost power 1/2; each plan's start lottery",
             "weighed in, docs/design.md); `bayes-rehearsal-2rules`: the same over the ratio and",
             "gain plans; `bayes-3rules`: the three rules' plans without the rehearsal;",
             "`bayes-plain`: `bayes` (its defaults), rerun with this version of the code.", ""]
    methods = shown_methods(df)
    ours = [m for m in methods if m.startswith("bayes")]
    for stat, title in (("r2_protocol", "Protocol refit R^2: ours (paper's Table 2)"),
                        ("r2_posterior", "Posterior-median R^2"),
                        ("coverage90", "Coverage of the 90% predictive intervals")):
        paper_cols = stat == "r2_protocol"
        head = ["task", "budget"] + methods + (
            ["MSPE (paper)"] + [f"{m} - MSPE" for m in ours] if paper_cols else [])
        lines += [f"## {title}", "", "| " + " | ".join(head) + " |",
                  "|" + "---|" * len(head)]
        for task, t in SHORT.items():
            for j, b in enumerate(BUDGETS):
                cells, mean = [], {}
                for m in methods:
                    sub = df[(df.method == m) & (df.t == t) & np.isclose(df.budget, b)]
                    cell = "-"
                    if len(sub):
                        per_seed = sub.groupby("seed")[stat].mean()
                        cell = f"{per_seed.mean():.2f}±{per_seed.std(ddof=0):.2f} n={len(sub)}"
                        mean[m] = per_seed.mean()
                    if paper_cols and m in PAPER:
                        cell += f" ({PAPER[m][t][j]:.2f})"
                    cells.append(cell)
                if paper_cols:
                    mspe = PAPER["mspe"][t][j]
                    cells += [f"{mspe:.2f}±{MSPE_STD[t][j]:.2f}"] + [
                        f"{mean[m] - mspe:+.2f}" if m in mean else "-" for m in ours]
                lines.append(f"| {t} | {int(b * 100)}% | " + " | ".join(cells) + " |")
        lines.append("")
    lines += variants_table(df)
    lines += affordability_table()
    jobs = df.groupby(KEY + ["t"], as_index=False).seconds.max()  # a job's rows are cumulative
    rt = jobs.groupby(["method", "t"]).seconds.agg(["sum", "mean", "count"])
    lines += ["## Runtime (seconds of one seed job, one process; sum over the jobs done)", "",
              "Wall seconds as the jobs ran on a 2-core machine shared with other jobs (load",
              "average up to 12), so they overstate the cost; CPU seconds per job before and after",
              "the greedy's parameter-space evaluation, and the projection of the whole",
              "benchmark, are in docs/design.md \"Runtime\" (`--time-jobs`).", "",
              "| method | task | jobs | mean s/job | total s |", "|---|---|---|---|---|"]
    for (m, t), r in rt.iterrows():
        lines.append(f"| {m} | {t} | {int(r['count'])} | {r['mean']:.1f} | {r['sum']:.0f} |")
    if TIMED.exists():
        lines += ["", "## Timed runs from scratch", "",
                  ("`python analyses/scalebench.py --methods M --seeds S --executor local "
                   "--workers W --compile-cache <empty dir> --results <new file>` on an otherwise "
                   "idle machine (`timed_runs.json`); rows identical: of the run's rows also in "
                   "`results.csv`, those with the same R^2 (to 1e-9) and runs bought."), "",
                  ("| methods | seeds | tasks | executor, workers, cores | jobs | wall | CPU | "
                   "rows identical |"), "|---|---|---|---|---|---|---|---|"]
        for r in json.loads(TIMED.read_text()):
            lines.append(f"| {r['methods']} | {r['seeds']} | {r['tasks']} | {r['executor']}, "
                         f"{r['workers']}, {r['cores']} | {r['jobs']} | "
                         f"{r['wall_s'] / 60:.1f} min | {r['cpu_s'] / 60:.1f} min | "
                         f"{r['rows_identical']} of "
                         f"{r['rows_compared']} |")
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")
    figures(df)
    print("\n".join(lines))


def affordability_table(data_dir=None) -> list[str]:
    """Per task and budget, how many of each group's pool runs fit the budget on their own
    (the cheapest group counts): where none does, nothing can be bought and every method scores
    the protocol's -1 for a failed fit, the paper's MSPE included."""
    lines = ["## Runs a budget can buy", "",
             ("Per task and budget, the pool runs whose cost alone fits the budget (fraction x "
              "the group's pool cost), in the group with fewest, and the cheapest run's cost as "
              "a multiple of the budget. With none, no method can buy a run: the refit fails and "
              "the protocol scores -1.00, whatever the method."), "",
             "| task | budget | affordable runs | cheapest run / budget |", "|---|---|---|---|"]
    for task, short in SHORT.items():
        groups = bs.design.scalebench_task(task, "sl_1", data_dir=data_dir).groups()
        for b in BUDGETS:
            n = min(int(np.sum(g.cost <= b * g.cost.sum())) for g in groups)
            ratio = max(float(g.cost.min() / (b * g.cost.sum())) for g in groups)
            lines.append(f"| {short} | {int(b * 100)}% | {n} | {ratio:.3g} |")
    return lines + [""]


def shown_methods(df) -> list[str]:
    """The methods of the summary's tables and figures: the benchmark's and ours, and the
    ``bayes-rehearsal`` variant where it has run."""
    return METHODS + [v for v in ("bayes-rehearsal",) if v in set(df.method)]


def variants_table(df) -> list[str]:
    """Each ``bayes`` variant of :data:`VARIANTS` beside ``bayes`` (``bayes-plain`` where it was
    rerun) on the same (law, seed) jobs: mean r2_protocol at each budget."""
    lines = ["## bayes variants against bayes on the same jobs", "",
             "Mean r2_protocol over the (law, seed) jobs the variant has run; the reference is",
             "`bayes-plain` (rerun with the variants' code) where it has run those jobs, else",
             "`bayes`.", "", "| task | variant | jobs | reference | 1% | 5% | 10% |",
             "|---|---|---|---|---|---|---|"]
    for t in SHORT.values():
        for v in VARIANTS:
            if v == "bayes-plain":
                continue
            sub = df[(df.t == t) & (df.method == v)]
            if sub.empty:
                continue
            jobs = sub[["law", "seed"]].drop_duplicates()
            for ref in ("bayes-plain", "bayes"):
                base = df[(df.t == t) & (df.method == ref)].merge(jobs)
                if base[["law", "seed"]].drop_duplicates().shape[0] == len(jobs):
                    break
            before = base.groupby("budget").r2_protocol.mean()
            after = sub.groupby("budget").r2_protocol.mean()
            cells = [f"{before[b]:.2f} -> {after[b]:.2f}" for b in after.index]
            lines.append(f"| {t} | {v} | {len(jobs)} | {ref} | " + " | ".join(cells) + " |")
    return lines + [""]


def figures(df):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for task, t in SHORT.items():
        sub = df[df.task == task]
        if sub.empty:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for m in shown_methods(df):
            s = sub[sub.method == m]
            if s.empty:
                continue
            mean = s.groupby("budget").r2_protocol.mean()
            ax.plot(mean.index * 100, mean.values, marker="o", label=m)
        ax.scatter(np.array(BUDGETS) * 100, PAPER["mspe"][t], marker="*", s=150, color="k",
                   zorder=5, label="MSPE (paper)")
        ax.set_xscale("log")
        ax.set_xticks([b * 100 for b in BUDGETS], [f"{b * 100:g}" for b in BUDGETS])
        ax.set_xlabel("budget (% of the pool's cost)")
        ax.set_ylabel("target-region R^2")
        ax.set_title(task)
        ax.set_ylim(-1.05, 1.05)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(OUT / f"{task}.png", dpi=120)
        plt.close(fig)


def speed(data_dir):
    """Refit time and quality, jax against scipy, on 20 random runs of a few laws."""

    for task, law_id in [("vocab_scaling_law", "sl_3"), ("data_constrained_scaling_law", "sl_4"),
                         ("farseer_scaling_law", "sl_1")]:
        law = bs.scalebench.get(task, law_id)
        train, test = bs.scalebench.load(task, data_dir)
        target = bs.scalebench.TARGETS[task]
        sub = train.iloc[np.random.default_rng(0).choice(len(train), 20, replace=False)]
        x = {v: sub[law.column(v)].to_numpy(float) for v in law.variables}
        xt = {v: test[law.column(v)].to_numpy(float) for v in law.variables}
        for method in ("jax", "scipy"):
            th0 = fitting.uniform_starts(law, 64, np.random.default_rng(1))
            fitting.least_squares(law, x, sub[target].to_numpy(), th0, method=method)  # compile
            t0 = time.perf_counter()
            st = fitting.least_squares(law, x, sub[target].to_numpy(), th0, method=method)
            dt = time.perf_counter() - t0
            pred = np.asarray(fitting.predictor(law)(st.best[None], xt))[0]
            print(f"{task} {law_id} {method}: {dt:.2f} s, SSE {st.sse.min():.3e}, "
                  f"test R2 {fitting.r2_clipped(test[target], pred):.3f}")
    # The same purchases (cheapest, seed 0) scored with either refit.
    task = bs.design.scalebench_task("data_constrained_scaling_law", "sl_4", data_dir=data_dir)
    for method in ("scipy", "jax"):
        res = bs.design.run(task, method="cheapest", seeds=[0], fit_method=method)
        print(f"cheapest data_constrained sl_4 seed 0, {method} refit: R2 "
              f"{res.r2_protocol.round(3).tolist()} with {res.n_runs.tolist()} runs")


def intervals(data_dir, seeds=range(10)):
    """``bayes``'s r2_posterior and coverage90 with either predictive of the same posterior (the law
    at parameter draws, or each mode's delta-method Gaussian) on farseer and parallel; writes
    ``intervals.md``."""
    rows = []
    for task_name in ("farseer_scaling_law", "parallel_scaling_law"):
        for law_id in bs.scalebench.task_laws(task_name):
            task = bs.design.scalebench_task(task_name, law_id, data_dir=data_dir)
            for kind in ("draws", "linear"):
                res = bs.design.run(task, "bayes", seeds=seeds, intervals=kind)
                rows.append(res.assign(task=SHORT[task_name], law=law_id, intervals=kind))
                print(task_name, law_id, kind, res.groupby("budget").coverage90.mean().round(2)
                      .tolist(), flush=True)
    df = pd.concat(rows)
    m = df.groupby(["task", "budget", "intervals"])[["r2_posterior", "coverage90"]].mean()
    lines = ["# bayes's predictive intervals: parameter draws against the delta method", "",
             (f"Generated by `python analyses/scalebench.py --intervals` (bayes, seeds "
              f"{min(seeds)}-{max(seeds)}, every law; the purchases and the refit are the same, "
              "only the predictive read from the Laplace mixture differs; means over laws and "
              "seeds)."),
             "", "| task | budget | r2_posterior draws | delta | coverage90 draws | delta |",
             "|---|---|---|---|---|---|"]
    for (t, b), r in m.unstack("intervals").iterrows():
        lines.append(f"| {t} | {b:.0%} | {r['r2_posterior', 'draws']:.2f} | "
                     f"{r['r2_posterior', 'linear']:.2f} | {r['coverage90', 'draws']:.2f} | "
                     f"{r['coverage90', 'linear']:.2f} |")
    (OUT / "intervals.md").write_text("\n".join(lines))
    print("\n".join(lines))


def diagnose(task_name, law_id, seed, method, data_dir, redraws=3):
    """Seed by seed: what ``method`` bought at each checkpoint, the protocol refit's best minima
    (SSE and the target R^2 each would score) and ``redraws`` refits of the same runs from fresh
    draws of the 64 starts: tells a purchase that cannot forecast the targets from a refit that
    missed its best minimum."""

    task = bs.design.scalebench_task(task_name, law_id, data_dir=data_dir)
    law = task.law

    def r2(g, theta):
        return fitting.r2_clipped(g.y_test, np.asarray(fitting.predictor(law)(theta[None],
                                                                              g.x_test))[0])

    for budget, states, fits in bs.design.checkpoints((task, method, int(seed), "jax", {})):
        for st, (starts, _) in zip(states, fits):
            g, obs = st.group, st.observed
            print(f"{budget:.0%} {g.name}: {len(obs)} runs, {st.spent / st.total:.2%} of the pool, "
                  f"{len(np.unique(g.cost[obs]))} distinct costs")
            if starts is None:
                continue
            best = np.argsort(starts.sse)[:5]
            print("  protocol refit: SSE", np.round(starts.sse[best], 7).tolist(), "R2",
                  [round(r2(g, starts.theta[i]), 2) for i in best])
            near = starts.sse < 1.5 * starts.sse.min()
            u = np.abs(np.asarray(fitting.to_unconstrained(law, starts.theta)))
            pinned = [p.name for p, f in zip(law.params, (u[~near] > 8).mean(0)) if f > 0.5]
            print(f"  {near.sum()} of {len(near)} starts within 1.5x of its best SSE; parameters "
                  f"on a bound (|u| > 8) in most of the others: {pinned}")
            x = {v: a[obs] for v, a in g.x.items()}
            for k in range(redraws):
                th0 = fitting.uniform_starts(law, N_STARTS, np.random.default_rng(10_000 + k))
                again = fitting.least_squares(law, x, g.y[obs], th0)
                print(f"  fresh starts {k}: SSE {again.sse.min():.7f}, R2 {r2(g, again.best):.2f}")


def refit_starts(task_name, law_id, seeds, methods, data_dir, many=1024):
    """Is a low target R^2 the method's choice of runs or the protocol's refit? For each method,
    seed and checkpoint: the protocol's score (best of its 64 starts) beside that of the refit of
    the same runs from ``many`` uniform starts (its lowest SSE), and how many of those starts end
    within 1.05x of it (``methods``: names or :data:`VARIANTS` labels). Writes
    ``refit_starts_<task>_<law>_<methods>.md`` and prints the table."""
    task = bs.design.scalebench_task(task_name, law_id, data_dir=data_dir)
    law = task.law

    def r2(g, theta):
        return fitting.r2_clipped(g.y_test, np.asarray(fitting.predictor(law)(theta[None],
                                                                              g.x_test))[0])

    rows = []
    for method in methods:
        for seed in seeds:
            name, options = resolve(method)
            for budget, states, fits in bs.design.checkpoints((task, name, int(seed), "jax",
                                                               options)):
                for st, (starts, _) in zip(states, fits):
                    if starts is None or not starts.ok:
                        continue
                    g, obs = st.group, st.observed
                    th0 = fitting.uniform_starts(law, many, np.random.default_rng(20_000 + seed))
                    big = fitting.least_squares(law, {v: a[obs] for v, a in g.x.items()},
                                                g.y[obs], th0)
                    rows.append({"method": method, "seed": seed, "budget": budget,
                                 "n_runs": len(obs), "sse_protocol": float(starts.sse.min()),
                                 "r2_protocol": r2(g, starts.best),
                                 "sse_many": float(big.sse.min()), "r2_many": r2(g, big.best),
                                 "near_many": int((big.sse < 1.05 * big.sse.min()).sum())})
                    print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    mean = df.groupby(["method", "budget"])[["r2_protocol", "r2_many"]].mean().reset_index()
    command = (f"`nice -n 10 python analyses/scalebench.py --refit-starts {task_name} {law_id} "
               f"--seeds {min(seeds)}-{max(seeds)} --methods {','.join(methods)}`")
    per_seed = (f"Per seed and checkpoint (`near_many`: starts of the {many} within 1.05x of "
                "their best SSE):")
    text = "\n".join([
        f"# {SHORT.get(task_name, task_name)} {law_id}: the protocol's refit against {many} starts",
        "", command, "", per_seed, "", markdown_table(df), "", "Mean over seeds:", "",
        markdown_table(mean), ""])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"refit_starts_{SHORT.get(task_name, task_name)}_{law_id}_{'_'.join(methods)}.md"
     ).write_text(text)
    print(mean.to_string())
    return 0


def basin(task_name, law_id, seeds, method, data_dir, many=1024):
    """Does the benchmark's own fitter (scipy L-BFGS-B in the natural coordinates) reach the best
    basin more often than ours? At every checkpoint of ``method``'s purchases: the best SSE of
    ``many`` uniform starts (ours), then the same 64 uniform starts with either fitter: how many
    end within 1.05x of that SSE, the best SSE relative to it and the target R^2. Writes
    ``basin_<task>_<law>.md``."""
    task = bs.design.scalebench_task(task_name, law_id, data_dir=data_dir)
    law = task.law
    rows = []
    for seed in seeds:
        for budget, states, _ in bs.design.checkpoints((task, method, int(seed), "jax", {})):
            for st in states:
                g, obs = st.group, st.observed
                x, y = {v: a[obs] for v, a in g.x.items()}, g.y[obs]
                best = fitting.least_squares(law, x, y, fitting.uniform_starts(
                    law, many, np.random.default_rng(20_000 + seed))).sse.min()
                th0 = fitting.uniform_starts(law, N_STARTS, np.random.default_rng(30_000 + seed))
                row = {"seed": seed, "budget": budget, "n_runs": len(obs)}
                for fit_method in ("jax", "scipy"):
                    fit = fitting.least_squares(law, x, y, th0, method=fit_method)
                    pred = np.asarray(fitting.predictor(law)(fit.best[None], g.x_test))[0]
                    row[f"in_basin_{fit_method}"] = int((fit.sse < 1.05 * best).sum())
                    row[f"sse_ratio_{fit_method}"] = float(fit.sse.min() / best)
                    row[f"r2_{fit_method}"] = fitting.r2_clipped(g.y_test, pred)
                rows.append(row)
                print(row, flush=True)
    df = pd.DataFrame(rows)
    command = (f"`nice -n 10 python analyses/scalebench.py --basin {task_name} {law_id} --seeds "
               f"{min(seeds)}-{max(seeds)} --methods {method}`")
    title = (f"# {SHORT.get(task_name, task_name)} {law_id}: 64 starts of either fitter against "
             f"the best of {many}")
    legend = (f"`in_basin_*`: starts of the 64 (the same draw for both) ending within 1.05x of "
              f"the best SSE of {many} uniform starts of ours; `sse_ratio_*`: the fitter's best "
              "SSE over that.")
    text = "\n".join([
        title, "", command, "", legend, "", markdown_table(df), "", "Mean over checkpoints:", "",
        markdown_table(df.drop(columns=["seed", "budget", "n_runs"]).mean().to_frame().T), ""])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"basin_{SHORT.get(task_name, task_name)}_{law_id}.md").write_text(text)
    return 0


def purchases(task_name, law_id, seeds, methods, data_dir, many=512):
    """What each method bought and how the protocol's refit fares on it, per seed and checkpoint:
    runs, distinct model sizes, the spread of the law's inputs (log10 range), the share of
    ``many`` uniform starts ending within 1.05x of their best SSE (``hit``), the probability
    that 64 starts miss that basin (``miss64``), the target R^2 of the best start (``r2_best``),
    the expected R^2 of the best of 64 starts over the start draws (``r2_expected``,
    :func:`fitting.best_of_weights`) and the score of the protocol's own draw (``r2_protocol``).
    Writes ``purchases_<task>_<law>.md``."""
    task = bs.design.scalebench_task(task_name, law_id, data_dir=data_dir)
    law = task.law
    rows = []
    for method in methods:
        for seed in seeds:
            name, options = resolve(method)
            for budget, states, fits in bs.design.checkpoints((task, name, int(seed), "jax",
                                                               options)):
                for st, (starts, _) in zip(states, fits):
                    if starts is None or not starts.ok:
                        continue
                    g, obs = st.group, st.observed
                    x = {v: a[obs] for v, a in g.x.items()}
                    big = fitting.least_squares(law, x, g.y[obs], fitting.uniform_starts(
                        law, many, np.random.default_rng(20_000 + seed)))
                    ok = np.isfinite(big.sse)
                    pred = np.asarray(fitting.predictor(law)(big.theta[ok], g.x_test))
                    r2s = np.full(many, -1.0)
                    r2s[ok] = [fitting.r2_clipped(g.y_test, p) for p in pred]
                    hit = float(np.mean(big.sse < 1.05 * big.sse[ok].min()))
                    row = {"method": method, "seed": seed, "budget": budget, "n_runs": len(obs),
                           "cost_share": st.spent / st.total}
                    for v in law.variables:
                        row[f"{v}_distinct"] = len(np.unique(x[v]))
                        row[f"{v}_log10_range"] = float(np.ptp(np.log10(x[v])))
                    row.update(hit=hit, miss64=(1 - hit) ** N_STARTS,
                               r2_best=float(r2s[np.argmin(np.where(ok, big.sse, np.inf))]),
                               r2_expected=float(fitting.best_of_weights(big.sse, N_STARTS) @ r2s),
                               r2_protocol=fitting.r2_clipped(g.y_test, np.asarray(
                                   fitting.predictor(law)(starts.best[None], g.x_test))[0]))
                    rows.append(row)
                    print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()},
                          flush=True)
    write_purchases(pd.DataFrame(rows), task_name, law_id, many)
    return 0


def write_purchases(df, task_name, law_id, many=512):
    """Merge ``df`` (rows of :func:`purchases`) into ``purchases_<task>_<law>.csv`` (its
    (method, seed) pairs replace their earlier rows) and write the table and its means as
    ``.md``."""
    stem = OUT / f"purchases_{SHORT.get(task_name, task_name)}_{law_id}"
    if stem.with_suffix(".csv").exists():
        old = pd.read_csv(stem.with_suffix(".csv"))
        new = set(zip(df.method, df.seed))
        df = pd.concat([old[[k not in new for k in zip(old.method, old.seed)]], df],
                       ignore_index=True).sort_values(["method", "seed", "budget"])
    OUT.mkdir(parents=True, exist_ok=True)
    df.to_csv(stem.with_suffix(".csv"), index=False)
    mean = df.groupby(["method", "budget"]).mean(numeric_only=True).drop(columns="seed")
    command = (f"`nice -n 10 python analyses/scalebench.py --purchases {task_name} {law_id} "
               "--seeds <seeds> --methods <methods>` (rows of every method run, merged)")
    title = (f"# {SHORT.get(task_name, task_name)} {law_id}: what was bought and how the "
             "protocol's refit fares on it")
    legend = (f"`hit`: share of {many} uniform starts ending within 1.05x of their best SSE; "
              "`miss64` = (1 - hit)^64; `r2_best`: target R^2 of the best of them; "
              "`r2_expected`: expected R^2 of the best of 64 starts drawn from them; "
              "`r2_protocol`: the protocol's own draw.")
    text = "\n".join([title, "", command, "", legend, "",
        markdown_table(df.round(4)), "", "Mean over seeds:", "",
        markdown_table(mean.round(3).reset_index()), ""])
    stem.with_suffix(".md").write_text(text)
    print(mean.round(3).to_string())


def time_jobs(specs, method, data_dir):
    """Run ``TASK:LAW:SEED`` jobs of ``method`` one after another in this process and print, per
    job, the runs bought at each checkpoint, a digest of the purchases (to compare two versions of
    the engine: the same digest means the same runs), and its CPU and wall seconds (CPU seconds
    are the fair figure on a machine shared with other jobs)."""
    for spec in specs:
        task_name, law_id, seed = spec.split(":")
        task = bs.design.scalebench_task(task_name, law_id, data_dir=data_dir)
        t0, c0 = time.perf_counter(), time.process_time()
        bought, digest = [], hashlib.sha256()
        name, options = resolve(method)
        for _, states, _ in bs.design.checkpoints((task, name, int(seed), "jax", options)):
            bought.append(sum(len(st.observed) for st in states))
            for st in states:
                digest.update(np.sort(st.observed).astype(np.int64).tobytes())
        print(f"{spec} {method}: runs {bought}, purchases {digest.hexdigest()[:12]}, "
              f"CPU {time.process_time() - c0:.1f} s, wall {time.perf_counter() - t0:.1f} s",
              flush=True)
    return 0


def enumerate_purchases(task_name, law_id, budget, data_dir, cheapest=8, max_runs=3):
    """Every purchase of 2..``max_runs`` runs among the group's ``cheapest`` runs that fits in
    ``budget`` (the same rows bought in every group, whose pools list the same runs), scored by the
    protocol's refit (starts of seed 0): what the best affordable purchase would score."""
    from itertools import combinations


    task = bs.design.scalebench_task(task_name, law_id, data_dir=data_dir)
    groups, law = task.groups(), task.law
    frac = groups[0].cost / groups[0].cost.sum()
    idx = np.argsort(frac)[:cheapest]
    out = []
    for k in range(2, max_runs + 1):
        for c in map(list, combinations(idx, k)):
            if frac[c].sum() > float(budget):
                continue
            y, pred = [], []
            for g in groups:
                st = fitting.least_squares(law, {v: a[c] for v, a in g.x.items()}, g.y[c],
                                           fitting.uniform_starts(law, N_STARTS,
                                                                  np.random.default_rng(0)))
                pred.append(np.asarray(fitting.predictor(law)(st.best[None], g.x_test))[0])
                y.append(g.y_test)
            runs = [tuple(f"{v}={g.x[v][i]:.4g}" for v in law.variables) for i in c]
            out.append((fitting.r2_clipped(np.concatenate(y), np.concatenate(pred)), runs))
    for r2, runs in sorted(out, key=lambda r: -r[0]):
        print(f"{r2:6.2f}  {runs}")


def main(argv=None, compile_cache=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--tasks", default=",".join(RUN_ORDER))
    ap.add_argument("--laws", help="law ids to run (default: every law of each task)")
    scaleout.add_arguments(ap, executor="local", workers=1)
    ap.set_defaults(compile_cache=compile_cache)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--results", type=Path, default=RESULTS,
                    help="the results file the jobs are appended to (default: out/scalebench/"
                    "results.csv, which the summary reads); another file, e.g. for a timed run "
                    "from scratch, is not summarised")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--intervals", action="store_true")
    ap.add_argument("--diagnose", nargs=3, metavar=("TASK", "LAW", "SEED"))
    ap.add_argument("--enumerate", nargs=3, metavar=("TASK", "LAW", "BUDGET"))
    ap.add_argument("--refit-starts", nargs=2, metavar=("TASK", "LAW"))
    ap.add_argument("--time-jobs", nargs="+", metavar="TASK:LAW:SEED")
    ap.add_argument("--basin", nargs=2, metavar=("TASK", "LAW"))
    ap.add_argument("--purchases", nargs=2, metavar=("TASK", "LAW"))
    ap.add_argument("--scorers-run", action="store_true",
                    help="run --methods on --tasks/--seeds under both scorers (scorers.csv)")
    ap.add_argument("--rescore-peer", action="store_true",
                    help="refit the peer code's recorded purchases (peer/) with both scorers")
    ap.add_argument("--compare-peer", action="store_true",
                    help="write harness_agreement.md and mspe.md")
    ap.add_argument("--paired", nargs=2, metavar=("A", "B"),
                    help="method A against method B, paired, on the jobs of --results "
                    "(paired_A_B.md beside it)")
    a = ap.parse_args(argv)
    if a.compile_cache:
        scaleout.use_compile_cache(a.compile_cache)  # this process and the workers it starts
    if a.paired:
        import scalebench_peer as peer

        print(peer.paired_report(a.results, *a.paired))
        return 0
    if a.scorers_run or a.rescore_peer or a.compare_peer:
        import scalebench_peer as peer

        if a.scorers_run:
            peer.run_scorers(a.methods.split(","), parse_seeds(a.seeds), a.tasks.split(","),
                             a.data_dir, a.laws.split(",") if a.laws else None, resolve=resolve)
        if a.rescore_peer:
            peer.rescore_peer(a.data_dir)
        if a.compare_peer:
            peer.compare_report(a.data_dir)
        return 0
    if a.speed:
        return speed(a.data_dir)
    if a.diagnose:
        return diagnose(*a.diagnose, a.methods.split(",")[0] if a.methods != ",".join(METHODS)
                        else "bayes", a.data_dir)
    if a.enumerate:
        return enumerate_purchases(*a.enumerate, a.data_dir)
    if a.refit_starts:
        return refit_starts(*a.refit_starts, parse_seeds(a.seeds), a.methods.split(","),
                            a.data_dir)
    if a.purchases:
        return purchases(*a.purchases, parse_seeds(a.seeds), a.methods.split(","), a.data_dir)
    if a.basin:
        return basin(*a.basin, parse_seeds(a.seeds), a.methods.split(",")[0], a.data_dir)
    if a.time_jobs:
        return time_jobs(a.time_jobs, a.methods.split(",")[0] if a.methods != ",".join(METHODS)
                         else "bayes", a.data_dir)
    if a.intervals:
        return intervals(a.data_dir, parse_seeds(a.seeds))
    if not a.summary:
        executor = scaleout.from_arguments(a)
        fresh = not a.results.exists()
        cpu = cpu_seconds()
        wall = run_jobs(a.methods.split(","), parse_seeds(a.seeds), a.tasks.split(","),
                        executor, a.data_dir, a.laws.split(",") if a.laws else None, a.results)
        if fresh and a.results.resolve() != RESULTS.resolve():
            record_timed_run(a, pd.read_csv(a.results), wall, cpu_seconds() - cpu)
    if a.results.resolve() == RESULTS.resolve():
        summarise()


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the local pool's workers)."""
    import resource

    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def record_timed_run(a, rows, wall, cpu):
    """Append a run from scratch (a results file that did not exist) to :data:`TIMED`: what
    ran, on what, its wall and CPU seconds, and whether its rows equal those of
    ``results.csv``."""
    done = pd.read_csv(RESULTS).drop_duplicates(KEY + ["budget"], keep="last")
    both = rows.merge(done, on=KEY + ["budget"], suffixes=("", "_committed"))
    same = int((np.isclose(both.r2_protocol, both.r2_protocol_committed, rtol=0, atol=1e-9)
                & (both.n_runs == both.n_runs_committed)).sum())
    runs = json.loads(TIMED.read_text()) if TIMED.exists() else []
    runs.append({"methods": a.methods, "seeds": a.seeds, "tasks": a.tasks,
                 "executor": a.executor, "workers": a.workers, "cores": os.cpu_count(),
                 "jobs": int(rows.groupby(KEY).ngroups), "wall_s": round(wall, 1),
                 "cpu_s": round(cpu, 1),
                 "rows_compared": len(both), "rows_identical": same,
                 "date": time.strftime("%Y-%m-%d")})
    TIMED.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    # The workers' BLAS on one thread: the acquisition's products are small (candidates x
    # targets x parameters), and a second BLAS thread per worker on a busy 2-core machine made
    # one greedy step 10x slower (47 ms against 4.4 ms, docs/design.md "Runtime").
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    # Compiled programs persist across reruns and are shared by the workers; only when run as a
    # script, so importing it or calling main (tests) does not change the process's compiler.
    sys.exit(main(compile_cache=os.environ.get("JAX_COMPILATION_CACHE_DIR",
                                               Path.home() / ".cache" / "bayes_scaling" / "jax")))
