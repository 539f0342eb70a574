"""Workers hold their numerical libraries to their share of the cores (scaleout.worker_env)."""
import os

import pytest

from scaleout import get_executor, worker_env
from scaleout.base import ONE_THREAD_XLA

ONE = "--xla_cpu_multi_thread_eigen=false"


def thread_settings(_):
    """A job: the thread settings its worker process started with."""
    return os.environ.get("OMP_NUM_THREADS"), os.environ.get("XLA_FLAGS", "")


def test_one_cpu_is_one_thread_and_keeps_the_callers_xla_flags():
    env = worker_env(1, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    flags = env["XLA_FLAGS"].split()
    assert flags[0] == "--xla_force_host_platform_device_count=4"
    assert flags[1:] == list(ONE_THREAD_XLA)


def test_flags_already_set_are_not_repeated_or_overridden():
    env = worker_env(0.5, {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=true"})
    assert env["XLA_FLAGS"].split().count("--xla_cpu_multi_thread_eigen=true") == 1
    assert ONE not in env["XLA_FLAGS"]  # the caller's explicit choice wins


@pytest.mark.parametrize("threads", [None, 2, 4.0])
def test_two_or_more_threads_leave_the_defaults(threads):
    assert worker_env(threads, {"XLA_FLAGS": "--x"}) == {}


def test_local_workers_start_with_their_share_of_the_cores():
    cores = os.cpu_count() or 1
    with get_executor("local", workers=cores) as ex:  # one core each
        omp, xla = ex.map(thread_settings, [0])[0]
    assert omp == "1" and ONE in xla.split()
    if cores >= 2:  # one worker on several cores: this process's settings, nothing added
        with get_executor("local", workers=1) as ex:
            omp, xla = ex.map(thread_settings, [0])[0]
        assert (omp, xla) == (os.environ.get("OMP_NUM_THREADS"), os.environ.get("XLA_FLAGS", ""))


def test_ray_tasks_of_one_cpu_get_one_thread():
    pytest.importorskip("ray")
    from scaleout.ray_executor import with_worker_env

    env = with_worker_env({"env_vars": {"OMP_NUM_THREADS": "3"}}, 1)["env_vars"]
    assert env["OMP_NUM_THREADS"] == "3"  # what the caller sets wins
    assert ONE in env["XLA_FLAGS"].split() and env["MKL_NUM_THREADS"] == "1"
    assert with_worker_env(None, 2) == {"env_vars": {}}  # two CPUs: the defaults
