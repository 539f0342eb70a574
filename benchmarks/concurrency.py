"""Do two fitting processes on this machine finish twice the work of one? Alone, side by side,
and side by side each pinned to a core of its own.

Each process runs the reduced Form-3 NUTS calibration of `scaleout_speed.py` serially on
``--n`` prior-drawn tables (default 2; 4 chains x 500 draws after 500 warm-up steps, chains
vectorised, one XLA thread: `scaleout.worker_env(1)`), compilation included. First one process
alone, then two at once, then two at once pinned to cores 0 and 1 (``os.sched_setaffinity``).
The throughput of a pair is ``2 x alone / (the slower of the pair)``: 2.0 means the cores add up.

This separates the machine from the executors: a Ray or local-pool speed-up cannot exceed what
two plain processes reach here, and it also pays one compilation per worker.

Usage:
    .venv/bin/python benchmarks/concurrency.py [--n 2] [--write]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "analyses"), str(ROOT / "benchmarks")]

from _report import replace_section

from scaleout import worker_env


def child(n: int, core: int | None) -> None:
    """One process's work: ``n`` tables fitted serially; prints its wall seconds."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    from scaleout_speed import run  # imports JAX: after the affinity is set

    fit_kwargs = {"n_starts": 8, "num_chains": 4, "num_warmup": 500, "num_samples": 500,
                  "chain_method": "vectorized"}
    t = time.perf_counter()
    run(n, "serial", fit_kwargs)
    print(f"{time.perf_counter() - t:.3f}", flush=True)


def spawn(n: int, cores) -> list[float]:
    """Wall seconds of one process per entry of ``cores`` (None: not pinned), run at once."""
    env = {**os.environ, **worker_env(1)}
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(n)]
                              + ([] if c is None else ["--core", str(c)]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) for c in cores]
    return [float(p.communicate()[0].split()[-1]) for p in procs]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2, help="tables per process (default 2)")
    ap.add_argument("--write", action="store_true", help="record the result in BENCHMARKS.md")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--core", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        return child(args.child, args.core)
    if (os.cpu_count() or 1) < 2:
        print("needs 2 cores")
        return 1
    alone = spawn(args.n, [None])[0]
    rows = [("one process alone", [alone], 1.0)]
    for name, cores in (("two at once", [None, None]), ("two at once, pinned", [0, 1])):
        walls = spawn(args.n, cores)
        rows.append((name, walls, 2 * alone / max(walls)))
    lines = [f"| {name} | {' / '.join(f'{w:.0f}' for w in walls)} | {tp:.2f} |"
             for name, walls, tp in rows]
    print("\n".join(lines))
    if args.write:
        replace_section("Concurrency: two fitting processes on two cores", "\n".join([
            "## Concurrency: two fitting processes on two cores", "",
            f"    .venv/bin/python benchmarks/concurrency.py --n {args.n} --write", "",
            f"Each process fits {args.n} prior-drawn Form-3 tables serially (NUTS, 4 chains x "
            "500 draws after 500 warm-up steps, chains vectorised, one XLA thread), compilation "
            f"included, on {os.cpu_count()} cores. Throughput = 2 x alone / the slower of the "
            "pair.", "",
            "| run | wall (s) | throughput (x one process) |", "|---|---|---|", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
