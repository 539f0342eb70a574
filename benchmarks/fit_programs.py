"""How many XLA programs one fit and one forecast ask for, in a fresh process.

The fits are the test suite's Chinchilla fits (tests/test_bayes.py: a 6 x 6 (N, D) grid, seed 3):
a Laplace fit, a NUTS fit (2 chains x 300 draws after 300 warm-up steps, seed 1), a second NUTS
fit of the same model, and a forecast of the NUTS posterior on the table and on its first 20
rows. Each stage prints the programs JAX asked XLA for (no persistent cache: each one is a
compilation), their compile seconds (these grow with the machine's load; the counts do not), its
wall seconds, and a checksum of the draws (the sum of the alpha draws).

Usage, from the checkout root (``--nuts-only``: the NUTS fit alone, first in its process):
    PYTHONPATH=. python benchmarks/fit_programs.py [--nuts-only]
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))

from conftest import simulate  # noqa: E402
from test_bayes import CHIN_TRUE, chin_grid  # noqa: E402

import bayes_scaling as bs  # noqa: E402

COMPILE = "/jax/core/compile/backend_compile_duration"
counts = {"n": 0, "s": 0.0}


def on_duration(event, duration, **_):
    if event == COMPILE:
        counts["n"] += 1
        counts["s"] += duration


def stage(label, run):
    n0, s0, t0 = counts["n"], counts["s"], time.perf_counter()
    out = run()
    print(f"| {label} | {counts['n'] - n0} | {counts['s'] - s0:.1f} "
          f"| {time.perf_counter() - t0:.1f} | {checksum(out)} |")
    return out


def checksum(out):
    if isinstance(out, bs.Posterior):
        return repr(float(np.asarray(out.idata.posterior["alpha"]).sum()))
    return repr(float(np.asarray(out["median"]).sum()))


def main(nuts_only=False):
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    df = simulate("chinchilla", chin_grid(), params=CHIN_TRUE, noise=0.01, seed=3)
    nuts = dict(num_chains=2, num_warmup=300, num_samples=300, seed=1, progress_bar=False)
    print("| stage | programs | compile s | wall s | checksum |")
    print("|---|---|---|---|---|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not nuts_only:
            stage("Laplace fit", lambda: bs.fit_posterior("chinchilla", df, method="laplace",
                                                          num_chains=2, num_samples=300, seed=1))
        post = stage("NUTS fit", lambda: bs.fit_posterior("chinchilla", df, **nuts))
        if nuts_only:
            return
        stage("NUTS fit again", lambda: bs.fit_posterior("chinchilla", df, **nuts))
        stage("forecast (36 rows)", lambda: post.forecast(df, allow_unconverged=True))
        stage("forecast (20 rows)", lambda: post.forecast(df.iloc[:20], allow_unconverged=True))


if __name__ == "__main__":
    main("--nuts-only" in sys.argv[1:])
