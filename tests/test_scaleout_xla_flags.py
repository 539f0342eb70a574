"""The one-thread XLA options a worker gets leave the options after them in force: XLA stops
reading ``XLA_FLAGS`` at the first word that is not a ``--`` option, so a bad word there silently
dropped, for example, the host-device count of parallel chains appended after it."""
import os
import subprocess
import sys

from scaleout import worker_env


def test_options_after_the_one_thread_ones_still_apply():
    flags = worker_env(1, {})["XLA_FLAGS"] + " --xla_force_host_platform_device_count=3"
    assert all(f.startswith("--") for f in flags.split())
    out = subprocess.run([sys.executable, "-c", "import jax; print(jax.local_device_count())"],
                         env=dict(os.environ, XLA_FLAGS=flags), capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "3"


def test_chain_devices_asked_for_after_jax_started_leave_xla_flags_as_they_were():
    """In a process whose JAX has started (this one), use_chain_devices cannot change the device
    count; it must not leave a count in XLA_FLAGS for the subprocesses it starts (the in-process
    `bayes-scaling posterior` did, and a later test's subprocess got 2 devices instead of 4)."""
    import jax

    from bayes_scaling.bayes import use_chain_devices

    before, n = os.environ.get("XLA_FLAGS"), jax.local_device_count()
    assert use_chain_devices(n + 2) == n
    assert os.environ.get("XLA_FLAGS") == before
