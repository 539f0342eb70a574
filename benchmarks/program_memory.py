"""Memory maps held by one process that fits many models, with the bounded caches of compiled
programs (``bayes_scaling.programs``) against caches that keep every program (the baseline).

Each compiled XLA program holds memory maps of its own; a Linux process may hold at most
``vm.max_map_count`` (65530 by default), past which the compiler fails ("LLVM compilation error:
Cannot allocate memory"). The workload: Laplace posteriors of Chinchilla on Epoch's 240 points,
one per model structure, where each structure fixes a different subset of the parameters at
their posterior medians (every subset of one to three of the five: 25 structures, each its own
compiled programs). Both runs fit the same models in the same process, the baseline first (every
cache made unbounded), then, after every program is dropped (``clear_programs(jax_caches=True)``),
the default bounds. Reported: the maps held after each fit, and the ratio of the last counts.

Usage:
    .venv/bin/python benchmarks/program_memory.py [--models 25] [--write]
"""
from __future__ import annotations

import argparse
import gc
import itertools
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def structures(medians: dict, k: int) -> list[dict]:
    names = ["A", "B", "E", "alpha", "beta"]
    subsets = [c for r in (1, 2, 3) for c in itertools.combinations(names, r)]
    return [{n: medians[n] for n in c} for c in subsets[:k]]


def run(fixed_sets, table, label) -> list[int]:
    import bayes_scaling as bs
    from bayes_scaling.programs import map_count

    held = []
    t0 = time.perf_counter()
    for i, fixed in enumerate(fixed_sets):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bs.fit_posterior("chinchilla", table, fixed=fixed, method="laplace", seed=0,
                             progress_bar=False)
        gc.collect()
        held.append(map_count()[0])
        print(f"{label}: model {i + 1}/{len(fixed_sets)} ({', '.join(fixed)} fixed): "
              f"{held[-1]} maps, {time.perf_counter() - t0:.0f} s", flush=True)
    return held


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=25)
    ap.add_argument("--write", action="store_true", help="record the result in BENCHMARKS.md")
    a = ap.parse_args(argv)
    import bayes_scaling as bs
    from bayes_scaling import programs

    if programs.map_count() is None:
        sys.exit("this benchmark reads /proc (Linux)")
    table = bs.datasets.load("chinchilla_epoch")
    table = table[table["epoch_kept"]] if "epoch_kept" in table else table
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bs.fit_posterior("chinchilla", table, method="laplace", seed=0, progress_bar=False)
    medians = {k: float(post.draws(k).mean()) for k in ("A", "B", "E", "alpha", "beta")}
    fixed_sets = structures(medians, a.models)
    programs.clear_programs(jax_caches=True)
    start = programs.map_count()[0]

    # the baseline: every cache keeps every program (and the guard never clears them)
    caches = list(programs._ALL)
    bounds = {c: c.maxsize for c in caches}
    share = programs.MAP_SHARE
    for c in caches:
        c.maxsize = 10 ** 9
    programs.MAP_SHARE = 10.0
    unbounded = run(fixed_sets, table, "unbounded")
    for c in caches:
        c.maxsize = bounds[c]
    programs.MAP_SHARE = share
    programs.clear_programs(jax_caches=True)
    gc.collect()
    after_clear = programs.map_count()[0]
    bounded = run(fixed_sets, table, "bounded")
    ratio = bounded[-1] / unbounded[-1]
    limit = programs.map_count()[1]
    lines = [
        "## Compiled programs held by a process that fits many models", "",
        "    .venv/bin/python benchmarks/program_memory.py" + (f" --models {a.models}"
                                                             if a.models != 25 else ""), "",
        f"Laplace posteriors of Chinchilla on Epoch's 240 points, {len(fixed_sets)} model "
        "structures (a different subset of the parameters fixed in each), fitted one after "
        "another in one process: first with every cache of compiled functions unbounded (the "
        "baseline), then, after dropping every program, with the default bounds "
        f"(`bayes_scaling.programs`). Memory maps held (the process limit here: {limit}); "
        f"{start} before the first fit, {after_clear} after dropping the baseline's programs.",
        "",
        "| after model | unbounded | bounded |", "|---|---|---|",
        *[f"| {i + 1} | {u} | {b} |" for i, (u, b) in enumerate(zip(unbounded, bounded))
          if i + 1 in (1, 5, 10, 15, 20, len(fixed_sets)) or i + 1 == len(fixed_sets)],
        "",
        f"Bounded / unbounded after the last model: {ratio:.2f}. The unbounded caches grow by "
        f"about {(unbounded[-1] - unbounded[0]) / max(len(fixed_sets) - 1, 1):.0f} maps per "
        "model structure, for as long as the process lives.",
    ]
    text = "\n".join(lines)
    print(text)
    if a.write:
        from _report import replace_section

        replace_section("Compiled programs held by a process that fits many models", text)


if __name__ == "__main__":
    main()
