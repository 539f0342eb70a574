"""Where a command-line call's time goes inside JAX: one `bayes-scaling` command run in this
process, with the seconds of importing the package, of the command, and of JAX's work on the
command's programs as JAX's monitoring events report them (tracing, lowering to MLIR, compiling
or loading from the persistent cache), with their counts.

Run it twice with the same ``XDG_CACHE_HOME`` to see a warm process (every program loaded from
the persistent cache: what remains is tracing and lowering, which no cache keeps):

    XDG_CACHE_HOME=.probe-cache PYTHONPATH=. python benchmarks/cli_programs.py \
        posterior --law chinchilla --method laplace train.csv --out lap.nc
"""
from __future__ import annotations

import collections
import sys
import time

t0 = time.perf_counter()
import jax  # noqa: E402

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile or load"}
totals = collections.Counter()


def on_duration(event, duration, **_):
    if event in EVENTS:
        totals[EVENTS[event], "s"] += duration
        totals[EVENTS[event], "n"] += 1


def main():
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    from bayes_scaling.cli import main as cli

    t1 = time.perf_counter()
    try:
        cli(sys.argv[1:])
    except SystemExit as e:
        if e.code:
            raise
    t2 = time.perf_counter()
    print(f"import {t1 - t0:.2f} s, command {t2 - t1:.2f} s", file=sys.stderr)
    for name in EVENTS.values():
        print(f"  {name}: {totals[name, 's']:.2f} s over {totals[name, 'n']} programs",
              file=sys.stderr)


if __name__ == "__main__":
    main()
