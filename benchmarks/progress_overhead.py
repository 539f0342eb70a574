"""What the NUTS progress bar costs: Chinchilla's default posterior on Epoch's 240 points, fitted
in one process with the bar and without it in turn (the same compiled programs; seeds 1..R),
after a first fit that compiles. Prints each pair's seconds and the median ratio with / without.
The bar itself goes to stderr.

Usage:
    .venv/bin/python benchmarks/progress_overhead.py [--repeats 6] 2>/dev/null
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import bayes_scaling as bs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=6)
    a = ap.parse_args()
    df = bs.datasets.load("chinchilla_epoch").query("epoch_kept")[["N", "D", "loss"]]
    bs.fit_posterior("chinchilla", df, seed=0, progress_bar=False)
    times = {False: [], True: []}
    for r in range(a.repeats):
        for bar in (False, True):
            t0 = time.perf_counter()
            bs.fit_posterior("chinchilla", df, seed=r + 1, progress_bar=bar)
            times[bar].append(time.perf_counter() - t0)
    ratio = np.array(times[True]) / np.array(times[False])
    print("| fit | seconds per pair |")
    print("|---|---|")
    print(f"| without the bar | {', '.join(f'{t:.2f}' for t in times[False])} |")
    print(f"| with the bar | {', '.join(f'{t:.2f}' for t in times[True])} |")
    print(f"median ratio with / without: {np.median(ratio):.2f} ({a.repeats} pairs)")


if __name__ == "__main__":
    main()
