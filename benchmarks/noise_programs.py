"""Compiled programs of the predictive's noise draws: one per power-of-two bucket of draws
(``bs.bayes.likelihood.standard_noise``) against one per shape (the baseline, the same sampler
jitted with its shape static, as it was before), in one process without the persistent
compilation cache.

The shapes are those a Laplace posterior's rehearsal asks for on Epoch's Chinchilla table (400
draws x the held-out rows padded to 32, 64 and 128, 39 calls), then forecasts of 1 to 20 rows
with 4000 draws. Both sides draw the same numbers (checked here to rounding).

Usage:
    BAYES_SCALING_NO_CACHE=1 .venv/bin/python benchmarks/noise_programs.py
"""
from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from bayes_scaling.bayes import likelihood as lk  # noqa: E402
from bayes_scaling.bayes.distributions import huber_standard_sample  # noqa: E402

SHAPES = ([(400, 128)] * 12 + [(400, 32)] * 19 + [(400, 64)] * 8
          + [(4000, m) for m in (1, 2, 3, 5, 8, 13, 20)])


@partial(jax.jit, static_argnames=("shape",))
def per_shape(key, shape, c):
    return huber_standard_sample(key, shape, c)


def run(draw) -> tuple[float, list]:
    compiled = [0.0, 0]

    def on(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled[0] += duration
            compiled[1] += 1

    jax.monitoring.register_event_duration_secs_listener(on)
    key = jax.random.PRNGKey(0)
    t0 = time.perf_counter()
    out = [np.asarray(draw(jax.random.fold_in(key, k), s)) for k, s in enumerate(SHAPES)]
    seconds = time.perf_counter() - t0
    jax.monitoring.unregister_event_duration_listener(on)
    return seconds, compiled, out


def main():
    base_s, base_c, base = run(lambda k, s: per_shape(k, s, 1.345))
    new_s, new_c, new = run(lambda k, s: lk.standard_noise("huber", k, s, c=1.345))
    assert all(np.allclose(a, b, rtol=1e-13, atol=1e-15) for a, b in zip(base, new))
    print(f"{len(SHAPES)} calls, {len(set(SHAPES))} shapes, the same draws to rounding")
    print("| noise draws | programs compiled | compile s | wall s |")
    print("|---|---|---|---|")
    print(f"| one program per shape (baseline) | {base_c[1]} | {base_c[0]:.2f} | {base_s:.2f} |")
    print(f"| one per bucket of draws | {new_c[1]} | {new_c[0]:.2f} | {new_s:.2f} |")
    print(f"ratio (bucket / shape): compile s {new_c[0] / base_c[0]:.2f}, "
          f"wall s {new_s / base_s:.2f}")


if __name__ == "__main__":
    main()
