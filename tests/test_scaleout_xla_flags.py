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


def _flags_after_import(env):
    """``XLA_FLAGS`` and ``bs.fast_compile`` in a new process that imports the package."""
    code = ("import os, bayes_scaling as bs; "
            "print(bs.fast_compile, repr(os.environ.get('XLA_FLAGS')))")
    env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    fast, flags = out.stdout.strip().split(" ", 1)
    return fast == "True", eval(flags)


def test_the_package_compiles_with_the_faster_emitter_unless_told_otherwise():
    """On import, before JAX starts: the option is added to the flags already there; a user's own
    setting of it stands; ``BAYES_SCALING_XLA_DEFAULTS=1`` leaves ``XLA_FLAGS`` alone. In a
    process whose JAX has started (this one) nothing changes: XLA has read its options."""
    from scaleout import FAST_COMPILE_JAXLIB, FAST_COMPILE_XLA, use_fast_compile
    import jaxlib.version

    measured = tuple(jaxlib.version.__version_info__[:2]) in FAST_COMPILE_JAXLIB
    base = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false", "BAYES_SCALING_XLA_DEFAULTS": None}
    fast, flags = _flags_after_import(base)
    assert fast == measured
    assert flags.split() == ["--xla_cpu_multi_thread_eigen=false"] + [FAST_COMPILE_XLA] * measured

    own = "--xla_cpu_use_fusion_emitters=true"
    assert _flags_after_import({**base, "XLA_FLAGS": own}) == (False, own)
    assert _flags_after_import({**base, "BAYES_SCALING_XLA_DEFAULTS": "1"}) == (
        False, "--xla_cpu_multi_thread_eigen=false")

    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    assert use_fast_compile(environ=env) is False
    assert env == {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
