import gc
import os
from pathlib import Path

from scaleout import use_compile_cache, use_fast_compile, worker_env

# The suite runs as two pytest-xdist workers on two cores: each test process holds its numerical
# libraries (XLA, BLAS, torch's OpenMP) to one thread, as an executor's one-CPU worker does, so
# the two do not each spread over both cores, and the programs a test compiles have the same
# compilation-cache key as those of the local and Ray workers and CLI processes it starts.
#
# XLA's CPU compiler takes most of the suite's time (compiling, not running, the programs). Its
# older fusion emitter compiles them about 30% faster (scaleout.FAST_COMPILE_XLA; the package
# sets it on import as well; here it is set before JAX starts, with the one-thread options).
use_fast_compile()
os.environ.update(worker_env(1))  # before JAX starts: XLA reads its options once

import jax
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs

ROOT = Path(__file__).resolve().parents[1]


def process_running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: whether the pid exists at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def committed_table(path) -> pd.DataFrame:
    """A committed loss table (a sweep's CSV), or a skip with the reason when it has no rows yet."""
    path = Path(path)
    if not path.exists():
        pytest.skip(f"{path.name} is not committed yet")
    df = pd.read_csv(path)
    if df.empty:
        pytest.skip(f"{path.name} has no rows yet")
    return df


def form3_grid(sizes=(2e4, 4e4, 8e4, 1.6e5), ptpps=(15, 31, 279), replays=(0.1, 0.25, 0.5),
               atpps=(0.5, 1, 2, 5, 12, 30)):
    """The PTPP paper's grid shape: sizes x PTPP stages x replay ratios x adaptation budgets."""
    rows = [dict(N=n, ptpp=p, replay=r, D=a * n) for n in sizes for p in ptpps for r in replays
            for a in atpps]
    return pd.DataFrame(rows)


def simulate(law, grid, params=None, noise=0.002, seed=0):
    """Loss = law(params) * exp(noise * eps): data from a known law with known parameters."""
    law = bs.laws.get(law)
    params = dict(law.example if params is None else params)
    rng = np.random.default_rng(seed)
    clean = np.asarray(law(params, grid))
    out = grid.copy()
    out["loss"] = clean * np.exp(noise * rng.standard_normal(len(grid)))
    out["clean"] = clean
    return out


def quiet_posterior(law, df, **kw):
    """``bs.fit_posterior`` with its warnings silenced (a test asserts on the diagnostics)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bs.fit_posterior(law, df, **kw)


def chinchilla_fn(p, x):
    """Chinchilla's loss ``E + A N^-alpha + B D^-beta`` (Hoffmann et al. 2022, Eq. 2)."""
    return p["E"] + p["A"] * x["N"] ** -p["alpha"] + p["B"] * x["D"] ** -p["beta"]


def toy_chinchilla_law(**column_map) -> bs.laws.Law:
    """Chinchilla as a user would bring it (specs plus one module-level, picklable function),
    reading ``N`` and ``D`` from the columns ``column_map`` names."""
    return bs.laws.Law(
        name="toy_chinchilla",
        params=(bs.laws.Param("E", 0.0, 5.0, (0.0, 5.0)),
                bs.laws.Param("A", 1.0, 1e4, (1.0, 1e4), True),
                bs.laws.Param("alpha", 0.05, 1.0, (0.05, 1.0), True),
                bs.laws.Param("B", 1.0, 1e4, (1.0, 1e4), True),
                bs.laws.Param("beta", 0.05, 1.0, (0.05, 1.0), True)),
        variables=("N", "D"), fn=chinchilla_fn, equation="E + A N^-alpha + B D^-beta",
        column_map=dict(column_map))


def offset_power_law(name: str = "toy_power") -> bs.laws.Law:
    """``E + A N^-alpha`` with the offset's lower bound at 0 (a law a test brings itself)."""
    return bs.laws.Law(
        name=name, variables=("N",), equation="E + A N^-alpha",
        params=(bs.laws.Param("E", 0.0, 5.0, (0.0, 5.0)),
                bs.laws.Param("A", 1.0, 1e4, (1.0, 1e4), True),
                bs.laws.Param("alpha", 0.05, 1.0, (0.05, 1.0), True)),
        fn=lambda p, x: p["E"] + p["A"] * x["N"] ** -p["alpha"])


def learning_rate_law(name: str = "toy_lr") -> bs.laws.Law:
    """``E + A N^-alpha + c (loglr + 3)^2``: a law of one's own with a negative input (the log10
    learning rate), which figures and distances must not read in log space."""
    return bs.laws.Law(
        name=name, variables=("N", "loglr"), equation="E + A / N^alpha + c (loglr + 3)^2",
        params=(bs.laws.Param("E", 0.0, 10.0, (1.0, 3.0)),
                bs.laws.Param("A", 1e-3, 1e6, (1.0, 1e3), log_init=True),
                bs.laws.Param("alpha", 0.0, 2.0, (0.1, 0.8)),
                bs.laws.Param("c", 0.0, 10.0, (0.01, 1.0))),
        fn=lambda p, x: p["E"] + p["A"] / x["N"] ** p["alpha"] + p["c"] * (x["loglr"] + 3.0) ** 2)


def pytest_configure(config):
    """One persistent JAX compilation cache for the run, in pytest's cache directory (``pytest
    --cache-clear`` empties it): a program compiled once, by any test, pytest-xdist worker, CLI
    subprocess or Ray worker (they inherit the environment), is loaded rather than compiled
    again, including the programs :func:`_release_compiled_programs` drops and the samplers NumPyro
    builds afresh on every run. Entries are keyed by the program's full text and JAX's version; the
    size bound switches on the cache's file lock, so parallel workers never read a half-written
    entry. ``pytest -p no:cacheprovider`` runs without it."""
    if getattr(config, "cache", None) is None:  # pytest -p no:cacheprovider
        return
    use_compile_cache(config.cache.mkdir("jax"))


@pytest.fixture(scope="session")
def epoch():
    df = bs.datasets.load("chinchilla_epoch")
    return df, df[df["epoch_kept"]].reset_index(drop=True)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster of 2 CPUs for the whole run (each start costs seconds); its workers
    import this checkout and the test modules' jobs."""
    ray = pytest.importorskip("ray")
    path = os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module. The suite compiles thousands of
    programs; kept alive in one process their code mappings accumulate until the compiler
    aborts late in the run. Programs a later module needs are compiled again."""
    yield
    jax.clear_caches()
    gc.collect()


def assert_exact_change_of_variables(spec, data, points, rel=1e-9, abs=1e-9):
    """The sampled density is the unconstrained one times the Jacobian of the coordinate map:
    ``log_joint_s(s) == log_joint(u(s)) + log |det du/ds|`` at every sampling vector of
    ``points`` (the Jacobian by automatic differentiation, against each block's own)."""
    import jax.numpy as jnp

    ref = data["ref"]

    def to_u(s):
        return spec.u(spec.theta_s(s, ref))

    for s in points:
        s = jnp.asarray(s)
        jac = jnp.linalg.slogdet(jax.jacfwd(to_u)(s))[1]
        assert float(spec.log_joint_s(s, data)) == pytest.approx(
            float(spec.log_joint(to_u(s), data) + jac), rel=rel, abs=abs), s
