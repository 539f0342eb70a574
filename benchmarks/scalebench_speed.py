"""Speed-up of a fixed set of ScaleBench jobs on a Ray cluster (or local pool) over serial.

A job is one (task, law, method, seed) of the ScaleBench protocol (`bs.design.seed_job`: buy runs
with the method, refit at each budget, score), as `analyses/scalebench.py` runs them. Default:
the ``bayes`` method on every law of ``parallel_scaling_law`` for seed 0 (10 jobs, one law each,
so the serial run compiles as many programs as the workers together). In one process: first
serially, then each job a task on a local cluster sized to the machine (started and stopped by
the executor). Wall times include compilation and the cluster's start. The rows of both runs are
compared (the `seconds` column aside); the script exits with status 1 when they differ.

Threads: the serial run is one process, whose XLA programs may use every core for one fit (it
prints the CPU seconds it used per wall second); Ray runs one task per CPU, each on one thread
(``scaleout.worker_env``: OpenMP and XLA).

With ``--compile-cache`` each side starts from an empty persistent compilation cache of its own
(a temporary directory), shared by the workers, the first job running alone (as in
``benchmarks/scaleout_speed.py``).

Usage:
    .venv/bin/python benchmarks/scalebench_speed.py [--task T] [--laws sl_1,sl_2]
        [--methods bayes] [--seeds 0] [--data-dir DIR] [--executor ray|local] [--compile-cache]
        [--write]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _report import serial_then_executor, write_speedup

import bayes_scaling as bs
from scaleout import get_executor

KEY = ["task", "law", "method", "seed"]


def job(item) -> list[dict]:
    """One (task, law, method, seed): the protocol's rows for every budget, tagged with the key."""
    task, law, method, seed, data_dir = item
    rows = bs.design.seed_job((bs.design.scalebench_task(task, law, data_dir), method, seed,
                               "jax", {}))
    return [dict(task=task, law=law, method=method, **r) for r in rows]


def run(items, executor) -> tuple[pd.DataFrame, float, float]:
    """The jobs' rows, the wall time and the CPU seconds this process used."""
    t, cpu = time.perf_counter(), time.process_time()
    with get_executor(executor) as ex:
        results = ex.map(job, items)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    return pd.DataFrame([r for rs in results for r in rs]), wall, cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="parallel_scaling_law")
    ap.add_argument("--laws", default=None, help="comma-separated (default: every law of --task)")
    ap.add_argument("--methods", default="bayes", help="comma-separated (default: bayes)")
    ap.add_argument("--seeds", default="0", help="comma-separated (default: 0)")
    ap.add_argument("--data-dir", default=None,
                    help="ScaleBench folder (default: $BAYES_SCALING_SCALEBENCH, else "
                         "shared/datasets/scalebench beside the checkout)")
    ap.add_argument("--executor", choices=("ray", "local"), default="ray")
    ap.add_argument("--compile-cache", action="store_true",
                    help="each side with an empty persistent compilation cache of its own")
    ap.add_argument("--write", action="store_true", help="record the result in BENCHMARKS.md")
    args = ap.parse_args(argv)
    laws = args.laws.split(",") if args.laws else list(bs.scalebench.task_laws(args.task))
    data_dir = str(bs.scalebench.data_dir(args.data_dir))  # resolved here, read by every worker
    items = [(args.task, law, m, int(s), data_dir) for s in args.seeds.split(",") for law in laws
             for m in args.methods.split(",")]
    print(f"{len(items)} jobs: {args.task}, {len(laws)} laws, methods {args.methods}, "
          f"seeds {args.seeds}", flush=True)
    serial, t_serial, cpu_serial, parallel, t_par, t_start = serial_then_executor(
        lambda ex: run(items, ex), args.executor, args.compile_cache)
    a, b = (d.drop(columns="seconds").sort_values(KEY + ["budget"]).reset_index(drop=True)
            for d in (serial, parallel))
    differ = sorted({tuple(a.loc[i, KEY]) for i in a.index if not a.iloc[[i]].equals(b.iloc[[i]])})
    same = f"jobs whose rows differ: {differ}" if differ else "rows identical"
    ratio = t_serial / t_par
    print(f"speed-up {ratio:.2f}x on {os.cpu_count()} cores; {same}")
    if args.write:
        command = (f"benchmarks/scalebench_speed.py --task {args.task} --methods {args.methods} "
                   f"--seeds {args.seeds} --executor {args.executor} "
                   + "--compile-cache " * args.compile_cache + "--write"
                   + (f" --laws {args.laws}" if args.laws else ""))
        job_s = serial.groupby(KEY)["seconds"].max()
        write_speedup(
            f"Scale-out: ScaleBench on {args.executor}" + ", compilation cache" * args.compile_cache,
            command,
            (f"{len(items)} ScaleBench jobs ({args.task}, {len(laws)} laws, methods "
             f"{args.methods}, seeds {args.seeds}) on {os.cpu_count()} cores, in one process: "
             f"serially, then one {args.executor} task per job"
             + (" (each side with an empty compilation cache of its own; the first task alone)."
                if args.compile_cache else ".")),
            args.executor, (t_serial, cpu_serial / t_serial), (t_par, t_start),
            (f"Speed-up {ratio:.2f}x; {same} (job times aside). Median job {job_s.median():.0f} s, "
             f"mean {job_s.mean():.0f} s (the serial run's `seconds`)."))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
