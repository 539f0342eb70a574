"""Speed-up of the Form-3 calibration study on a Ray cluster over the same study run serially.

A reduced `analyses/bayes_calibration.py --nuts --only ptpp_gated_floor`: ``--n`` prior-drawn
tables (default 4) of the two-PTPP design, each fitted with `fit_posterior`'s NUTS (4 chains x
``--samples`` draws after ``--warmup`` warm-up steps, default 500 + 500). In one process: first
serially, then with each table's fit a Ray task on a local cluster sized to the machine (started
and stopped by the executor). Wall times include compilation (once per distinct program in this
process; once per Ray worker) and the cluster's start. The per-dataset tables are compared (the
fits' own `seconds` column aside); the script exits with status 1 when they differ.

Threads: with ``--chains-on parallel`` (the analysis's setting) each fit's 4 chains run on 4
host devices, so the serial run already spreads one fit over every core; with ``--chains-on
vectorized`` a fit is one program on one device, and the serial baseline uses about one core
(both runs print the driver's CPU seconds per wall second). The serial run keeps XLA's default
thread pool (what a user gets); each worker runs on one thread (``scaleout.worker_env``), its
host-device count included.

With ``--compile-cache`` each side starts from an empty persistent compilation cache of its own
(a temporary directory): the serial process loads the samplers NumPyro rebuilds for every fit
instead of compiling them again, and the workers share theirs, the first job running alone so
that the others load what it compiled (``scaleout.WorkerExecutor``).

Usage:
    .venv/bin/python benchmarks/scaleout_speed.py [--n 4] [--warmup 500] [--samples 500]
        [--chains-on parallel|vectorized] [--executor ray|local] [--compile-cache] [--write]
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

from _report import serial_then_executor, write_speedup
from bayes_calibration import plausible, ptpp_design

from bayes_scaling.bayes import use_chain_devices
from bayes_scaling.calibration import calibrate

CHAINS = 4


def run(n: int, executor, fit_kwargs) -> tuple[pd.DataFrame, float, float]:
    """The per-dataset table, the wall time and the CPU seconds this process used."""
    grid, new = ptpp_design()
    t, cpu = time.perf_counter(), time.process_time()
    res = calibrate("ptpp_gated_floor", grid, n_datasets=n, new_rows=new, method="nuts", seed=0,
                    fit_kwargs=fit_kwargs, accept=plausible, executor=executor)
    return res["table"], time.perf_counter() - t, time.process_time() - cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4, help="simulated tables (default 4)")
    ap.add_argument("--warmup", type=int, default=500, help="NUTS warm-up steps (default 500)")
    ap.add_argument("--samples", type=int, default=500, help="NUTS draws per chain (default 500)")
    ap.add_argument("--chains-on", choices=("parallel", "vectorized"), default="parallel",
                    help="one host device per chain (default), or all chains in one program")
    ap.add_argument("--executor", choices=("ray", "local"), default="ray")
    ap.add_argument("--compile-cache", action="store_true",
                    help="each side with an empty persistent compilation cache of its own")
    ap.add_argument("--write", action="store_true", help="record the result in BENCHMARKS.md")
    args = ap.parse_args(argv)
    if args.chains_on == "parallel":
        use_chain_devices(CHAINS)  # before JAX starts; workers get the same devices per chain
    fit_kwargs = {"n_starts": 8, "num_chains": CHAINS, "num_warmup": args.warmup,
                  "num_samples": args.samples, "chain_method": args.chains_on}
    serial, t_serial, cpu_serial, parallel, t_par, t_start = serial_then_executor(
        lambda ex: run(args.n, ex, fit_kwargs), args.executor, args.compile_cache)
    for name, table in (("serial", serial), (args.executor, parallel)):
        if "error" in table:  # a fit that raised is a row with its error, not a timing
            failed = table.dropna(subset=["error"])
            print(f"{name}: {len(failed)} of {len(table)} fits raised:\n"
                  + failed[["dataset", "error"]].to_string(index=False))
            return 1
    a, b = serial.drop(columns="seconds"), parallel.drop(columns="seconds")
    differ = [int(i) for i in serial["dataset"] if not a.iloc[[i]].equals(b.iloc[[i]])]
    same = f"datasets whose rows differ: {differ}" if differ else "per-dataset tables identical"
    ratio = t_serial / t_par
    print(f"speed-up {ratio:.2f}x on {os.cpu_count()} cores; {same}")
    if args.write:
        fit_s = serial["seconds"].median()
        command = (f"benchmarks/scaleout_speed.py --n {args.n} --warmup {args.warmup} --samples "
                   f"{args.samples} --chains-on {args.chains_on} --executor {args.executor} "
                   + "--compile-cache " * args.compile_cache + "--write")
        chains = (f"chains in parallel on {CHAINS} host devices" if args.chains_on == "parallel"
                  else "chains vectorised in one program")
        heading = (f"Scale-out: calibration study on {args.executor}, chains {args.chains_on}"
                   + ", compilation cache" * args.compile_cache)
        write_speedup(
            heading, command,
            (f"Reduced Form-3 NUTS calibration ({args.n} prior-drawn tables, {CHAINS} chains x "
             f"{args.samples} draws after {args.warmup} warm-up steps, {chains}) on "
             f"{os.cpu_count()} cores, in one process: serially, then one {args.executor} task "
             "per table" + (" (each side with an empty compilation cache of its own; the first "
                            "task alone)." if args.compile_cache else ".")),
            args.executor, (t_serial, cpu_serial / t_serial), (t_par, t_start),
            (f"Speed-up {ratio:.2f}x; {same} (fit times aside). Median posterior fit "
             f"{fit_s:.0f} s (the serial run's `seconds`)."))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
