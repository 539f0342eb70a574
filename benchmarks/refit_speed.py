"""Many fits on tables of nearby sizes: padded rows (one compiled program) against unpadded rows
(one compilation per row count), in one process.

Held-out splits, anchor refits and calibration runs fit the same law to many tables whose row
counts differ by a few rows. ``bs.fit_map`` and ``bs.fit_posterior`` pad every table to the next
power of two (at least 32 rows) with zero-weight copies of its first row, so those fits share
their compiled programs; ``bayes_scaling.params.PAD_ROWS = False`` turns that off. Problems:

  map        ``bs.fit_map`` of Chinchilla (Huber 1e-3, 16 starts) on 6 subsets of Epoch's 240
             points with 150..225 rows (bucket 256)
  laplace    ``bs.fit_posterior(method="laplace")`` of Form 3 (``ptpp_gated_floor``) on 6 subsets
             of a synthetic two-PTPP table with 100..125 rows (bucket 128)

The unpadded configuration runs first (so it cannot profit from the padded one's programs); both
pay their own compilations. Prints the wall time per configuration and the ratio. Run:

    .venv/bin/python benchmarks/refit_speed.py [--write]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import bayes_scaling as bs  # noqa: E402
from bayes_scaling import params  # noqa: E402
from _report import replace_section  # noqa: E402
from conftest import form3_grid, simulate  # noqa: E402

SIZES = {"map": (150, 165, 180, 195, 210, 225), "laplace": (100, 105, 110, 115, 120, 125)}


def tables(problem):
    if problem == "map":
        df = bs.datasets.load("chinchilla_epoch")
        df = df[df["epoch_kept"]].reset_index(drop=True)
    else:
        df = simulate("ptpp_gated_floor", form3_grid(ptpps=(15, 31)), noise=0.005, seed=0)
    rng = np.random.default_rng(0)
    return [df.iloc[np.sort(rng.choice(len(df), n, replace=False))] for n in SIZES[problem]]


def fit_all(problem, subsets):
    out = []
    for sub in subsets:
        if problem == "map":
            out.append(bs.fit_map("chinchilla", sub, delta=1e-3, n_starts=16, seed=0).objective)
        else:
            post = bs.fit_posterior("ptpp_gated_floor", sub, method="laplace", seed=0,
                                    progress_bar=False)
            out.append(post.settings["map_neg_log_post"])
    return np.array(out)


def run(problem):
    subsets = tables(problem)
    res = {}
    for pad in (False, True):
        params.PAD_ROWS = pad
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            vals = fit_all(problem, subsets)
        res[pad] = (time.perf_counter() - t, vals)
    params.PAD_ROWS = True
    agree = float(np.max(np.abs(res[True][1] - res[False][1]) / np.abs(res[False][1])))
    return {"problem": problem, "fits": len(subsets), "unpadded_s": res[False][0],
            "padded_s": res[True][0], "ratio": res[False][0] / res[True][0], "max_rel_diff": agree}


def table(results):
    lines = ["| problem | fits | unpadded (s) | padded (s) | speed-up | max rel. difference of the optimum |",
             "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['problem']} | {r['fits']} | {r['unpadded_s']:.1f} | {r['padded_s']:.1f} | "
                     f"{r['ratio']:.1f}x | {r['max_rel_diff']:.1e} |")
    return "\n".join(lines)


def write_section(md):
    load = os.getloadavg()[0]
    replace_section("Refits of nearby sizes", (
        "## Refits of nearby sizes (row padding)\n\n"
        "Six fits per problem on subsets of different row counts, unpadded (one compilation "
        "per row count) against padded to a power of two (one compilation), in one process; "
        f"load average {load:.1f} on 2 cores when written. Command:\n\n"
        "    .venv/bin/python benchmarks/refit_speed.py --write\n\n" + md + "\n"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="record the table in BENCHMARKS.md")
    args = ap.parse_args()
    results = []
    for problem in ("map", "laplace"):
        results.append(run(problem))
        print(table(results), flush=True)
    if args.write:
        write_section(table(results))


if __name__ == "__main__":
    main()
