"""Workers that share a directory of compiled programs (``compile_cache``): a program one worker
compiled is loaded, not compiled, by a worker started later; the executor options of the command
lines are declared once (``scaleout.add_arguments``)."""
from __future__ import annotations

import argparse

import pytest

from scaleout import add_arguments, compile_cache_env, get_executor

PROGRAM = "/jax/core/compile/backend_compile_duration"
LOADED = "/jax/compilation_cache/cache_retrieval_time_sec"


def compile_once(width: int) -> dict:
    """In a fresh worker: compile one program of its own; the programs asked for (JAX reports a
    compile event for each, loaded or not), those loaded from the persistent cache, and the
    cache directory the worker used."""
    import jax
    import jax.numpy as jnp

    counts = {"programs": 0, "loaded": 0}

    def on(event, duration, **_):
        if event == PROGRAM:
            counts["programs"] += 1
        elif event == LOADED:
            counts["loaded"] += 1

    jax.monitoring.register_event_duration_secs_listener(on)
    x = jnp.linspace(0.0, 1.0, width)
    jax.jit(lambda v: jnp.sin(v) * 1.7 + jnp.cumsum(v) / width)(x).block_until_ready()
    return {**counts, "dir": jax.config.jax_compilation_cache_dir}


def timed_compile(width: int) -> dict:
    import time

    start = time.time()
    return {**compile_once(width), "start": start, "end": time.time()}


def test_a_program_compiled_by_one_worker_is_loaded_by_the_next(tmp_path):
    cache = tmp_path / "programs"
    with get_executor("local", workers=1, compile_cache=cache) as ex:
        first = ex.map(compile_once, [37])[0]
    assert first["dir"] == str(cache)
    assert first["programs"] >= 1 and first["loaded"] == 0
    assert any(cache.iterdir()), "the worker wrote no program to the cache"
    with get_executor("local", workers=1, compile_cache=cache) as ex:  # new worker processes
        second = ex.map(compile_once, [37])[0]
    assert second["loaded"] == second["programs"] == first["programs"]  # none compiled again


def test_with_a_cache_the_first_job_runs_alone_and_the_others_load_its_programs(tmp_path):
    with get_executor("local", workers=2, compile_cache=tmp_path) as ex:
        first, *rest = ex.map(timed_compile, [53, 53, 53])
    assert first["programs"] >= 1 and first["loaded"] == 0
    for job in rest:  # started after the first ended; nothing compiled again
        assert job["start"] >= first["end"]
        assert job["programs"] == job["loaded"]
    with get_executor("local", workers=2, compile_cache=tmp_path, first_alone=False) as ex:
        assert not ex.first_alone


def test_ray_workers_get_the_cache_in_their_environment():
    pytest.importorskip("ray")
    from scaleout.ray_executor import with_worker_env

    env = with_worker_env(None, 1, "shared/programs")["env_vars"]
    assert {k: env[k] for k in compile_cache_env("x")} == compile_cache_env("shared/programs")
    # what the caller sets wins
    mine = with_worker_env({"env_vars": {"JAX_COMPILATION_CACHE_DIR": "mine"}}, 1, "shared")
    assert mine["env_vars"]["JAX_COMPILATION_CACHE_DIR"] == "mine"


def test_the_command_line_options_are_declared_once():
    ap = argparse.ArgumentParser()
    add_arguments(ap, executor="local", workers=None)
    args = ap.parse_args(["--compile-cache", "c", "--ray-address", "auto"])
    assert (args.executor, args.workers, args.ray_address, args.compile_cache) == \
        ("local", None, "auto", "c")
    with pytest.raises(SystemExit):
        ap.parse_args(["--executor", "dask"])
