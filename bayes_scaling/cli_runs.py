"""The ``bayes-scaling`` commands that run jobs: training sweeps (``train``), the analyses
(``analyses``) and the ScaleBench selection protocol (``design``)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

import scaleout

from . import design, scalebench
from .cli_input import source_tree_script


def cmd_train(args) -> int:
    # training/ is a separate package (DESIGN.md rule 7): run it as its own process.
    cmd = [sys.executable, "-m", "training", "sweep", args.config, "--workers", str(args.workers)]
    for flag, value in (("--executor", args.executor), ("--ray-address", args.ray_address),
                        ("--out-dir", args.out_dir), ("--export", args.export)):
        if value is not None:
            cmd += [flag, value]
    return subprocess.call(cmd)


def cmd_analyses(args) -> int:
    cmd = [sys.executable, str(source_tree_script("analyses", "run_all.py"))]
    if args.quick:
        cmd.append("--quick")
    if args.only:
        cmd += ["--only", *args.only]
    if args.jobs is not None:
        cmd += ["--jobs", str(args.jobs)]
    return subprocess.call(cmd)


def cmd_design(args) -> None:
    folder = Path(args.task_dir)
    task_name = folder.name
    laws = args.laws or list(scalebench.task_laws(task_name))
    tables = []
    with scaleout.from_arguments(args) as executor:
        for law_id in laws:
            task = design.scalebench_task(task_name, law_id, data_dir=folder.parent,
                                          budgets=args.budgets)
            for method in args.methods:
                res = design.run(task, method=method, seeds=range(args.seeds), executor=executor)
                tables.append(res.assign(task=task_name, law=law_id, method=method))
    table = pd.concat(tables, ignore_index=True)
    if args.out:
        table.to_csv(args.out, index=False)
    summary = table.groupby(["method", "budget"])[["r2_protocol", "r2_posterior", "coverage90"]]
    print(summary.mean().round(3).to_string())


def add_design_parser(sub) -> None:
    s = sub.add_parser("design", help="run selection methods on a ScaleBench task folder "
                                      "(train.csv, test.csv) and write one row per seed and budget")
    s.add_argument("task_dir", help="a ScaleBench task folder, e.g. .../vocab_scaling_law")
    s.add_argument("--laws", nargs="*", help="law ids (default: every law of the task)")
    s.add_argument("--methods", nargs="*", default=["bayes"], choices=list(design.METHODS))
    s.add_argument("--seeds", type=int, default=10, help="seeds 0 .. n-1")
    s.add_argument("--budgets", type=float, nargs="*", default=[0.01, 0.05, 0.1])
    s.add_argument("--out", help="write the table as CSV")
    scaleout.add_arguments(s, executor="serial", workers=2, what="seeds")
    s.set_defaults(func=cmd_design)
