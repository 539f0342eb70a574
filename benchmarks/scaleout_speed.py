"""Speed-up of the Form-3 calibration study on a Ray cluster over the same study run serially.

A reduced `analyses/bayes_calibration.py --nuts --only ptpp_gated_floor`: ``--n`` prior-drawn
tables (default 4) of the two-PTPP design, each fitted with `fit_posterior`'s default NUTS (4
chains x 1000 draws after 1000 warm-up steps, chains in parallel on 4 host devices). In one
process: first serially, then with each table's fit a Ray task on a local cluster sized to the
machine (started and stopped by the executor). Wall times include compilation (once in this
process; once per Ray worker) and the cluster's start. The script then compares the per-dataset
tables (the fits' own `seconds` column aside) and names the datasets whose rows differ.

Usage:
    .venv/bin/python benchmarks/scaleout_speed.py [--n 4] [--executor ray|local] [--write]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "analyses"), str(ROOT / "benchmarks")]

from _report import replace_section
from bayes_calibration import plausible, ptpp_design

from bayes_scaling.bayes import use_chain_devices
from bayes_scaling.calibration import calibrate
from scaleout import get_executor

CHAINS = 4


def run(n: int, executor) -> tuple[pd.DataFrame, float]:
    grid, new = ptpp_design()
    t = time.perf_counter()
    res = calibrate("ptpp_gated_floor", grid, n_datasets=n, new_rows=new, method="nuts", seed=0,
                    fit_kwargs={"n_starts": 8, "num_chains": CHAINS}, accept=plausible,
                    executor=executor)
    return res["table"], time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4, help="simulated tables (default 4)")
    ap.add_argument("--executor", choices=("ray", "local"), default="ray")
    ap.add_argument("--write", action="store_true", help="record the result in BENCHMARKS.md")
    args = ap.parse_args(argv)
    use_chain_devices(CHAINS)  # before JAX starts; workers inherit the same devices per chain
    serial, t_serial = run(args.n, "serial")
    print(f"serial: {t_serial:.0f} s", flush=True)
    options = ({"runtime_env": {"env_vars": {"XLA_FLAGS": os.environ["XLA_FLAGS"]}}}
               if args.executor == "ray" else {})
    t = time.perf_counter()
    with get_executor(args.executor, **options) as ex:
        t_start = time.perf_counter() - t
        parallel, t_par = run(args.n, ex)
    t_par += t_start
    print(f"{args.executor}: {t_par:.0f} s (of which {t_start:.0f} s starting the workers)")
    a, b = serial.drop(columns="seconds"), parallel.drop(columns="seconds")
    differ = [int(i) for i in serial["dataset"] if not a.iloc[[i]].equals(b.iloc[[i]])]
    same = f"datasets whose rows differ: {differ}" if differ else "per-dataset tables equal"
    ratio = t_serial / t_par
    print(f"speed-up {ratio:.2f}x on {os.cpu_count()} cores; {same}")
    if args.write:
        fit_s = serial["seconds"].median()
        replace_section(f"Scale-out: calibration study on {args.executor}", "\n".join([
            f"## Scale-out: calibration study on {args.executor}", "",
            (f"    .venv/bin/python benchmarks/scaleout_speed.py --n {args.n} --executor "
             f"{args.executor} --write"), "",
            (f"Reduced Form-3 NUTS calibration ({args.n} prior-drawn tables, {CHAINS} chains x "
             f"1000 draws after 1000 warm-up steps, chains in parallel on {CHAINS} host devices) "
             f"on {os.cpu_count()} cores, in one process:"), "",
            "| run | wall (s) |", "|---|---|",
            f"| serial | {t_serial:.0f} |",
            f"| {args.executor} (incl. {t_start:.0f} s starting workers) | {t_par:.0f} |", "",
            (f"Speed-up {ratio:.2f}x; {same} (fit times aside). Median posterior fit "
             f"{fit_s:.0f} s (the serial run's `seconds` column)."),
        ]))


if __name__ == "__main__":
    main()
