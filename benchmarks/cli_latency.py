"""Command-line latency: `bayes-scaling fit`, `posterior --method laplace`, `posterior` (NUTS) and
`forecast` of 3 rows, each timed as a whole process (start-up, import, compilation, work, exit),
beside two yardsticks timed in the same run:

- plain NumPyro: the Chinchilla law (Hoffmann et al. 2022, Eq. 2) with Student-t (4 degrees of
  freedom) noise on log loss, weakly informative priors, NUTS with 4 chains x 1000 warm-up + 1000
  draws from NumPyro's default start, vectorised chains, in a process of its own;
- Epoch's method: the Huber (delta = 1e-3) fit of the log-sum-exp law by scipy's L-BFGS-B, then
  a bootstrap of it (``--boot`` resamples of the rows, each refitted from the full fit).

The table is Epoch AI's re-extraction of Chinchilla's points (`bs.datasets.load("chinchilla_epoch")`,
rows `epoch_kept`, 240 rows); the forecast rows are N = 1e9, 7e10, 1e12 at D = 2e10, 1.4e12, 2e13.

Cold: every command starts from an empty persistent compilation cache of its own (a fresh
`XDG_CACHE_HOME`; the package keeps its cache there by default). Warm: the same commands again
with the cache the cold runs filled. `--repeats` runs of each (the median is reported). The
forecast reads the NUTS posterior written by the cold run. Effective draws per second: the
minimum bulk ESS over the parameters divided by the process's wall time.

Usage:
    .venv/bin/python benchmarks/cli_latency.py [--repeats 1] [--boot 100] [--write]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLI = [str(Path(sys.executable).with_name("bayes-scaling"))]
NEW = {"N": [1e9, 7e10, 1e12], "D": [2e10, 1.4e12, 2e13]}

NUMPYRO = r"""
import json, sys, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np, pandas as pd
import numpyro, numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS
import arviz as az

df = pd.read_csv(sys.argv[1])
logN, logD = jnp.log(df["N"].to_numpy()), jnp.log(df["D"].to_numpy())
y = jnp.log(df["loss"].to_numpy())

def model():
    logE = numpyro.sample("logE", dist.Normal(0.5, 1.0))
    logA = numpyro.sample("logA", dist.Normal(6.0, 3.0))
    logB = numpyro.sample("logB", dist.Normal(7.0, 3.0))
    alpha = numpyro.sample("alpha", dist.Uniform(0.05, 1.0))
    beta = numpyro.sample("beta", dist.Uniform(0.05, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.1))
    mu = jax.nn.logsumexp(jnp.stack([jnp.broadcast_to(logE, logN.shape), logA - alpha * logN,
                                     logB - beta * logD]), 0)
    numpyro.sample("y", dist.StudentT(4.0, mu, sigma), obs=y)

mcmc = MCMC(NUTS(model), num_warmup=1000, num_samples=1000, num_chains=4,
            chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.PRNGKey(0))
ess = az.ess(az.from_numpyro(mcmc))
print(json.dumps({"min_ess": float(min(float(ess[v]) for v in ess.data_vars)),
                  "seconds": time.perf_counter() - t0}))
"""

BOOTSTRAP = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np, pandas as pd
from scipy.optimize import minimize
from scipy.special import huber, logsumexp

df = pd.read_csv(sys.argv[1])
B = int(sys.argv[2])
logN, logD, y = np.log(df["N"].to_numpy()), np.log(df["D"].to_numpy()), np.log(df["loss"].to_numpy())

def objective(p, i):
    a, b, e, alpha, beta = p
    pred = logsumexp([a - alpha * logN[i], b - beta * logD[i], np.full(len(i), e)], axis=0)
    return huber(1e-3, pred - y[i]).sum()

rows = np.arange(len(y))
# Epoch's grid of starts for the full fit, then each bootstrap refit from the full fit
grid = [(a, b, e, al, be) for a in (0, 10, 20) for b in (0, 10, 20) for e in (-1, 0.5, 1.5)
        for al in (0, 0.5, 1.0) for be in (0, 0.5, 1.0)]
fits = [minimize(objective, g, args=(rows,), method="L-BFGS-B") for g in grid]
best = min(fits, key=lambda r: r.fun).x
rng = np.random.default_rng(0)
boot = np.array([minimize(objective, best, args=(rng.choice(rows, len(rows)),),
                          method="L-BFGS-B").x for _ in range(B)])
print(json.dumps({"seconds": time.perf_counter() - t0, "alpha_sd": float(boot[:, 3].std())}))
"""


def timed(cmd, env, cwd):
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{out.stderr[-3000:]}")
    return wall, out.stdout


def min_ess(path) -> float:
    import arviz as az

    idata = az.from_netcdf(str(path))
    ess = az.ess(idata)
    return float(min(float(ess[v]) for v in ess.data_vars))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--boot", type=int, default=100)
    ap.add_argument("--write", action="store_true", help="record the results in BENCHMARKS.md")
    a = ap.parse_args()
    import pandas as pd

    import bayes_scaling as bs

    work = Path(tempfile.mkdtemp(prefix="cli_latency_"))
    df = bs.datasets.load("chinchilla_epoch")
    df[df["epoch_kept"]].to_csv(work / "train.csv", index=False)
    pd.DataFrame(NEW).to_csv(work / "new.csv", index=False)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))
            and k != "BAYES_SCALING_NO_CACHE"}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), base.get("PYTHONPATH", "")])
    commands = {
        "fit": ["fit", "--law", "chinchilla", "--delta", "1e-3", "train.csv"],
        "posterior --method laplace": ["posterior", "--law", "chinchilla", "--method", "laplace",
                                       "train.csv", "--out", "lap.nc"],
        "posterior": ["posterior", "--law", "chinchilla", "train.csv", "--out", "nuts.nc"],
        "forecast (3 rows)": ["forecast", "nuts.nc", "new.csv"],
    }
    times = {(k, s): [] for k in commands for s in ("cold", "warm")}
    for rep in range(a.repeats):
        cache = work / f"cache{rep}"
        for state in ("cold", "warm"):
            for name, args in commands.items():
                if state == "cold":  # a fresh cache for every cold command
                    shutil.rmtree(cache, ignore_errors=True)
                env = {**base, "XDG_CACHE_HOME": str(cache)}
                wall, _ = timed(CLI + args, env, work)
                times[name, state].append(wall)
                print(f"{name:28s} {state}: {wall:6.1f} s", flush=True)
            if state == "cold":  # warm: the cache every command filled, in one folder
                shutil.rmtree(cache, ignore_errors=True)
                for args in commands.values():
                    timed(CLI + args, {**base, "XDG_CACHE_HOME": str(cache)}, work)
    ess_ours = min_ess(work / "nuts.nc")
    wall_np, out = timed([sys.executable, "-c", NUMPYRO, "train.csv"], base, work)
    np_res = json.loads(out.strip().splitlines()[-1])
    wall_boot, out = timed([sys.executable, "-c", BOOTSTRAP, "train.csv", str(a.boot)], base, work)
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(f"plain NumPyro (4 chains, Student-t): {wall_np:.1f} s, min ESS {np_res['min_ess']:.0f}")
    print(f"scipy bootstrap of the MAP ({a.boot} resamples): {wall_boot:.1f} s")
    lines = ["| command | cold (s) | warm (s) | warm / NumPyro | warm / bootstrap |",
             "|---|---|---|---|---|"]
    for name in commands:
        c, w = med[name, "cold"], med[name, "warm"]
        lines.append(f"| `{name}` | {c:.1f} | {w:.1f} | {w / wall_np:.2f} | {w / wall_boot:.2f} |")
    lines.append(f"| plain NumPyro, 4 chains x (1000 + 1000), Student-t | - | {wall_np:.1f} | 1 "
                 f"| {wall_np / wall_boot:.2f} |")
    lines.append(f"| scipy L-BFGS-B Huber fit + {a.boot} bootstrap refits (Epoch's method) | - "
                 f"| {wall_boot:.1f} | {wall_boot / wall_np:.2f} | 1 |")
    ess = [f"effective draws per second (min bulk ESS / process wall time): `posterior` "
           f"{ess_ours / med['posterior', 'warm']:.0f} (ESS {ess_ours:.0f}, warm), plain NumPyro "
           f"{np_res['min_ess'] / wall_np:.0f} (ESS {np_res['min_ess']:.0f}). The yardsticks keep "
           "no persistent cache: their one time stands in the warm column"]
    print("\n".join(lines + ess))
    if a.write:
        from benchmarks._report import replace_section

        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        replace_section("Command-line latency", "\n".join([
            "## Command-line latency", "",
            f"    .venv/bin/python benchmarks/cli_latency.py --repeats {a.repeats} --boot {a.boot}"
            " --write", "",
            "Whole processes on Epoch's 240 Chinchilla points (seed 0), median of "
            f"{a.repeats} run(s); cold: an empty compilation cache, warm: the cache the cold "
            f"runs filled. Machine state at the end of the run: `{load.split(',  ')[-1].strip()}`"
            " (`uptime`; the machine's two cores were shared with other jobs).", "",
            *lines, "", *ess]))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
