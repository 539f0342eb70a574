"""How much of a fit's time is XLA compiling, and what XLA's older CPU fusion emitter
(``--xla_cpu_use_fusion_emitters=false``, the option `tests/conftest.py` gives the test suite)
saves of it.

Each child process, fresh and without a persistent compilation cache, on one XLA thread
(`scaleout.worker_env(1)`), fits two tables of the test suite: Form 3 (`ptpp_gated_floor`) by
Laplace on a simulated PTPP 15/31 grid, then Chinchilla by NUTS (2 chains x 300 draws after 300
warm-up steps). It reports the seconds the XLA compiler took (JAX's
``backend_compile_duration`` events), the wall seconds, and the MAP of ``zeta`` and the posterior
mean of ``alpha`` with its Monte Carlo standard error (the two options must agree on the first
and, within Monte Carlo error, on the second: the sampler's path changes with the last digit). Children with and without the option alternate, ``--pairs`` times, so that the load of
the machine falls on both alike; the ratios are of the medians.

Usage:
    .venv/bin/python benchmarks/fusion_emitter.py [--pairs 3] [--write]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from _report import replace_section

from scaleout import worker_env

OPTION = "--xla_cpu_use_fusion_emitters=false"
DEFAULT = "--xla_cpu_use_fusion_emitters=true"  # XLA's default, stated (conftest sets OPTION)


def child() -> None:
    import jax.monitoring

    compile_s = [0.0]

    def listen(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compile_s[0] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    from conftest import form3_grid, simulate

    import bayes_scaling as bs

    warnings.simplefilter("ignore")
    t = time.perf_counter()
    law = bs.laws.get("ptpp_gated_floor")
    df = simulate(law, form3_grid(ptpps=(15, 31)), params=dict(law.example), noise=0.005, seed=4)
    zeta = bs.fit_posterior(law, df, method="laplace", n_starts=8, seed=0).map["zeta"]
    chin = bs.laws.get("chinchilla")
    grid = form3_grid()[["N", "D"]].drop_duplicates().reset_index(drop=True)
    cdf = simulate(chin, grid, noise=0.01, seed=1)
    post = bs.fit_posterior(chin, cdf, seed=0, num_chains=2, num_warmup=300, num_samples=300,
                            progress_bar=False)
    print(json.dumps({"compile": compile_s[0], "wall": time.perf_counter() - t, "zeta": zeta,
                      "alpha": float(post.draws("alpha").mean()),
                      "mcse": float(post.summary().loc["alpha", "mcse_mean"])}), flush=True)


def spawn(option: bool) -> dict:
    env = {**os.environ, "XLA_FLAGS": OPTION if option else DEFAULT}
    env.update(worker_env(1, env))
    out = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="children per option (default 3)")
    ap.add_argument("--write", action="store_true", help="record the result in BENCHMARKS.md")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child()
    runs = {False: [], True: []}
    for _ in range(args.pairs):
        for option in (False, True):
            runs[option].append(spawn(option))
    med = {o: {k: float(np.median([r[k] for r in rs])) for k in ("compile", "wall")}
           for o, rs in runs.items()}
    def each(rs, key, fmt):
        return " / ".join(format(r[key], fmt) for r in rs)

    lines = [f"| {name} | {each(runs[o], 'compile', '.1f')} | {each(runs[o], 'wall', '.1f')} | "
             f"{runs[o][0]['zeta']:.12g} | {each(runs[o], 'alpha', '.4f')} | "
             f"{each(runs[o], 'mcse', '.4f')} |"
             for o, name in ((False, "default"), (True, f"`{OPTION}`"))]
    ratio = (f"Median compile seconds {med[True]['compile']:.1f} against "
             f"{med[False]['compile']:.1f} ({med[True]['compile'] / med[False]['compile']:.2f}x); "
             f"median wall seconds {med[True]['wall']:.1f} against {med[False]['wall']:.1f} "
             f"({med[True]['wall'] / med[False]['wall']:.2f}x).")
    head = ("| XLA option | compile s (each child) | wall s (each child) | MAP zeta | "
            "posterior mean of alpha | its MCSE |")
    table = [head, "|---|---|---|---|---|---|", *lines]
    print("\n".join(table) + "\n\n" + ratio)
    if args.write:
        replace_section("Test-suite time: XLA's fusion emitter", "\n".join([
            "## Test-suite time: XLA's fusion emitter", "",
            f"    .venv/bin/python benchmarks/fusion_emitter.py --pairs {args.pairs} --write", "",
            ("Fresh child processes without a compilation cache, one XLA thread, alternating: "
             "a Form-3 Laplace fit and a Chinchilla NUTS fit (2 x 300 draws) of the test suite's "
             f"tables, on {os.cpu_count()} cores."), "", *table, "", ratio]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
