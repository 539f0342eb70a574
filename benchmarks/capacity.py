"""Time for the full ScaleBench on a cluster, from the measured cost of each job.

A ScaleBench job is one (task, law, method, seed) of `bs.design.seed_job`; its cost is the
`seconds` column of `analyses/out/scalebench/results.csv` (written by `analyses/scalebench.py`;
a job's rows are cumulative, so its cost is its last row's). Jobs not measured take the mean of
their (task, method), else of their method. The full benchmark (every law of the four tasks, six
methods, ``--seeds`` seeds) is scheduled longest job first on ``--nodes`` x ``--cores`` single-core
slots (one Ray task per CPU), which is within 4/3 of the best schedule (Graham 1969).

Usage:
    .venv/bin/python benchmarks/capacity.py [--nodes 64] [--cores 2] [--seeds 10]
"""
from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bayes_scaling as bs

RESULTS = ROOT / "analyses" / "out" / "scalebench" / "results.csv"
TASKS = ("parallel_scaling_law", "farseer_scaling_law", "data_constrained_scaling_law",
         "vocab_scaling_law")
METHODS = ("random", "cheapest", "cost_random", "d_opt", "v_opt", "bayes")
KEY = ["task", "law", "method", "seed"]


def job_costs(results: pd.DataFrame, seeds: int) -> pd.Series:
    """Seconds of every job of the full benchmark: measured where it was run, else estimated."""
    measured = results.groupby(KEY)["seconds"].max()
    per_law = measured.groupby(["task", "law", "method"]).mean()
    per_task = measured.groupby(["task", "method"]).mean()
    per_method = measured.groupby("method").mean()
    cost = {}
    for task in TASKS:
        for law in bs.scalebench.task_laws(task):
            for method in METHODS:
                guess = per_law.get((task, law, method),
                                    per_task.get((task, method), per_method.get(method)))
                for seed in range(seeds):
                    cost[(task, law, method, seed)] = measured.get((task, law, method, seed),
                                                                   guess)
    return pd.Series(cost)


def makespan(costs, slots: int) -> float:
    """Wall time of running ``costs`` longest first, each on the slot that frees up first."""
    free = [0.0] * slots
    for c in sorted(costs, reverse=True):
        heapq.heapreplace(free, free[0] + c)
    return max(free)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--cores", type=int, default=2, help="CPU cores per node (default 2)")
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args(argv)
    results = pd.read_csv(RESULTS)
    n_measured = results.groupby(KEY).ngroups
    costs = job_costs(results, args.seeds)
    slots = args.nodes * args.cores
    total = costs.sum()
    wall = makespan(costs.to_numpy(), slots)
    by_task = costs.groupby(level=0).agg(["size", "sum"])
    print(f"{len(costs)} jobs ({n_measured} measured in {RESULTS.relative_to(ROOT)}), "
          f"{total:.3g} CPU s ({total / 3600:.1f} core-hours); longest job {costs.max():.0f} s")
    for task, r in by_task.iterrows():
        print(f"  {task}: {int(r['size'])} jobs, {r['sum'] / 3600:.1f} core-hours")
    print(f"{args.nodes} nodes x {args.cores} cores = {slots} slots: {wall:.0f} s "
          f"({wall / 60:.1f} min; lower bound {max(total / slots, costs.max()) / 60:.1f} min)")


if __name__ == "__main__":
    main()
