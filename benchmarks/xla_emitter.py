"""Cold and warm command latency with XLA's older CPU fusion emitter (the package's default on the
jaxlib releases it was measured on, ``scaleout.FAST_COMPILE_XLA``) against XLA's own default
(``BAYES_SCALING_XLA_DEFAULTS=1``), run in turn in the same session.

Commands on Epoch's 240 Chinchilla points (``bs.datasets.load("chinchilla_epoch")``, rows
``epoch_kept``): ``posterior`` (NUTS), ``posterior --method laplace`` and ``fit``, each a whole
process. Cold: a fresh ``XDG_CACHE_HOME`` (an empty compilation cache) for every run; warm: the
same command again on the cache its cold run filled. The two settings alternate, so drifts in the
machine's load fall on both.

Usage:
    .venv/bin/python benchmarks/xla_emitter.py [--repeats 2]
"""
from __future__ import annotations

import argparse
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
CLI = str(Path(sys.executable).with_name("bayes-scaling"))
COMMANDS = {
    "posterior": ["posterior", "--law", "chinchilla", "train.csv", "--out", "p.nc"],
    "posterior --method laplace": ["posterior", "--method", "laplace", "--law", "chinchilla",
                                   "train.csv", "--out", "l.nc"],
    "fit": ["fit", "--law", "chinchilla", "--delta", "1e-3", "train.csv"],
}
SETTINGS = {"older emitter (default)": "0", "XLA's default": "1"}


def timed(args, env, cwd) -> float:
    t0 = time.perf_counter()
    subprocess.run([CLI, *args], env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    import bayes_scaling as bs

    work = Path(tempfile.mkdtemp(prefix="xla-emitter-"))
    df = bs.datasets.load("chinchilla_epoch")
    df[df["epoch_kept"]][["loss", "N", "D"]].to_csv(work / "train.csv", index=False)
    times = {(c, s, k): [] for c in COMMANDS for s in SETTINGS for k in ("cold", "warm")}
    for _ in range(a.repeats):
        for cmd, args in COMMANDS.items():
            for setting, flag in SETTINGS.items():
                cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
                # the parent's own settings (its import gave it a compilation cache and the
                # emitter option through the environment) are not the children's
                env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS" and not
                       k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
                env.update(XDG_CACHE_HOME=str(cache), BAYES_SCALING_XLA_DEFAULTS=flag)
                times[cmd, setting, "cold"].append(timed(args, env, work))
                times[cmd, setting, "warm"].append(timed(args, env, work))
                shutil.rmtree(cache)
    print(f"median of {a.repeats} run(s), seconds of wall time; load average at the end: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    base, new = list(SETTINGS)[1], list(SETTINGS)[0]
    print(f"| command | {new}: cold / warm | {base}: cold / warm | ratio cold / warm |")
    print("|---|---|---|---|")
    for cmd in COMMANDS:
        m = {(s, k): float(np.median(times[cmd, s, k])) for s in SETTINGS for k in ("cold", "warm")}
        print(f"| `{cmd}` | {m[new, 'cold']:.1f} / {m[new, 'warm']:.1f} | {m[base, 'cold']:.1f} / "
              f"{m[base, 'warm']:.1f} | {m[new, 'cold'] / m[base, 'cold']:.2f} / "
              f"{m[new, 'warm'] / m[base, 'warm']:.2f} |")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
