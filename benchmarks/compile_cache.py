"""What the test suite's NUTS fit compiles, and what a persistent JAX compilation cache saves.

The fit is the test suite's `chin_nuts` (tests/test_bayes.py): Chinchilla on a 6 x 6 (N, D) grid,
2 chains x 300 draws after 300 warm-up steps, seed 1. It runs `--fits` times in one process and
prints, per fit, the programs JAX asked XLA for, the ones actually compiled (persistent cache
misses, or all of them without a cache), their seconds, the share compiled inside NumPyro's
`initialize_model` (the model tracing that a potential-function kernel would skip), the wall
time, and a checksum of the draws (equal across fits and cache settings: a cached program is the
same program).

Usage (run twice with the same --cache to see a fresh process on a warm cache):
    .venv/bin/python benchmarks/compile_cache.py [--cache DIR] [--fits 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import jax
from numpyro.infer import hmc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from conftest import simulate
from test_bayes import CHIN_TRUE, chin_grid

import bayes_scaling as bs

COMPILE = "/jax/core/compile/backend_compile_duration"
counts = {"requested": 0, "hits": 0, "seconds": 0.0, "init_n": 0, "init_s": 0.0}
inside_init = [False]


def on_duration(event, duration, **_):
    if event == COMPILE:
        counts["requested"] += 1
        counts["seconds"] += duration
        if inside_init[0]:
            counts["init_n"] += 1
            counts["init_s"] += duration


def on_event(event, **_):
    if event == "/jax/compilation_cache/cache_hits":
        counts["hits"] += 1


def counting_initialize_model(initialize_model):
    def wrapped(*args, **kwargs):
        inside_init[0] = True
        try:
            return initialize_model(*args, **kwargs)
        finally:
            inside_init[0] = False
    return wrapped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=None, help="persistent compilation cache directory")
    ap.add_argument("--fits", type=int, default=2)
    a = ap.parse_args()
    if a.cache:
        jax.config.update("jax_compilation_cache_dir", a.cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    hmc.initialize_model = counting_initialize_model(hmc.initialize_model)
    df = simulate("chinchilla", chin_grid(), params=CHIN_TRUE, noise=0.01, seed=3)
    print("| fit | programs | compiled | compile s | in initialize_model (n, s) | wall s "
          "| sum of alpha draws |")
    print("|---|---|---|---|---|---|---|")
    for k in range(a.fits):
        before = dict(counts)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            post = bs.fit_posterior("chinchilla", df, num_chains=2, num_warmup=300,
                                    num_samples=300, seed=1, progress_bar=False)
        wall = time.perf_counter() - t0
        d = {key: counts[key] - before[key] for key in counts}
        print(f"| {k + 1} | {d['requested']} | {d['requested'] - d['hits']} | {d['seconds']:.1f} "
              f"| {d['init_n']}, {d['init_s']:.1f} | {wall:.1f} "
              f"| {float(post.draws('alpha').sum()):.12f} |")


if __name__ == "__main__":
    main()
