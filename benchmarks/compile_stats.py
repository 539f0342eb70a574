"""A pytest plugin counting JAX's compilations per test module (the test suite's time is mostly
XLA compilation, and compile counts do not depend on the machine's load).

    python -m pytest -p benchmarks.compile_stats --compile-stats=out.json ...

writes, per test module, the number and seconds of jaxpr traces, lowerings and XLA backend
compilations, the persistent compilation cache's hits and misses, and the module's wall seconds
and CPU seconds (this process's threads plus its finished subprocesses: unlike wall seconds, about
the same on a busy machine). Under pytest-xdist each worker writes ``out.<worker>.json``. The
terminal summary prints the totals, and

    python benchmarks/compile_stats.py out.gw0.json out.gw1.json ...

sums such files and prints the totals and the modules by CPU seconds (a module whose tests ran
on several workers: the sum of its workers' figures).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict

import jax

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile",
          "/jax/compilation_cache/cache_retrieval_time_sec": "cache_load"}
COUNTS = {"/jax/compilation_cache/cache_hits": "cache_hits",
          "/jax/compilation_cache/cache_misses": "cache_misses"}

_stats: dict = defaultdict(lambda: defaultdict(float))
_current = ["(collection)"]


def _on_duration(event, duration, **_):
    if event in EVENTS:
        s = _stats[_current[0]]
        s[EVENTS[event] + "_n"] += 1
        s[EVENTS[event] + "_s"] += duration


def _on_event(event, **_):
    if event in COUNTS:
        _stats[_current[0]][COUNTS[event]] += 1


def pytest_addoption(parser):
    parser.addoption("--compile-stats", default=None,
                     help="write JAX compile counts and seconds per test module to this JSON")


def pytest_configure(config):
    if config.getoption("--compile-stats"):
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)


def _cpu():
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def pytest_runtest_protocol(item, nextitem):
    module = item.nodeid.split("::")[0]
    if module != _current[0]:
        _current[0] = module
        _stats[module]["start"] = _stats[module].get("start") or time.monotonic()
        _stats[module]["start_cpu"] = _stats[module].get("start_cpu") or _cpu()


def pytest_runtest_logfinish(nodeid, location):
    s = _stats[nodeid.split("::")[0]]
    s["wall_s"] = time.monotonic() - s["start"]
    s["cpu_s"] = _cpu() - s["start_cpu"]


def _totals():
    keys = sorted({k for s in _stats.values() for k in s if not k.startswith("start")})
    return {k: round(sum(s.get(k, 0.0) for s in _stats.values()), 2) for k in keys}


def pytest_sessionfinish(session):
    path = session.config.getoption("--compile-stats")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        root, ext = os.path.splitext(path)
        path = f"{root}.{worker}{ext}"
    per = {m: {k: round(v, 3) for k, v in s.items()
                if not k.startswith("start")} for m, s in _stats.items()}
    with open(path, "w") as f:
        json.dump({"total": _totals(), "modules": per}, f, indent=1)


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("--compile-stats") and not os.environ.get("PYTEST_XDIST_WORKER"):
        t = _totals()
        if t:
            terminalreporter.write_line("JAX compile stats (this process): " + json.dumps(t))


def main(paths):
    total, modules = defaultdict(float), defaultdict(lambda: defaultdict(float))
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        for k, v in d["total"].items():
            total[k] += v
        for m, s in d["modules"].items():  # a module dealt out to several workers: their sum
            for k, v in s.items():
                modules[m][k] += v
    print("totals:", json.dumps({k: round(v, 1) for k, v in sorted(total.items())}))
    print("| module | CPU s | wall s | programs | compiled | loaded from cache | compile s |")
    print("|---|---|---|---|---|---|---|")
    for m, s in sorted(modules.items(), key=lambda kv: -kv[1].get("cpu_s", 0.0)):
        print(f"| {m} | {s.get('cpu_s', 0):.0f} | {s.get('wall_s', 0):.0f} "
              f"| {s.get('compile_n', 0):.0f} | {s.get('cache_misses', 0):.0f} "
              f"| {s.get('cache_hits', 0):.0f} | {s.get('compile_s', 0):.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
