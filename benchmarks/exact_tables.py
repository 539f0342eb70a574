"""Tables a law fits exactly (simulated without noise): where sigma's posterior sits, and what
``fit_posterior`` does with them (docs/priors.md, "Convergence checks and the escalation ladder").

    .venv/bin/python benchmarks/exact_tables.py

Prints, for n rows on the exact curve ``E + A N^-a`` (E 1.8, A 400, a 0.34, N from 1e7 to 1e9),
the MAP's sigma; then the default posterior of 5 such rows (seconds, attempts, checks) and the
answer to 15 rows on Chinchilla's exact surface, with the scale left free and fixed at 0.001.
"""
import time
import warnings

import numpy as np
import pandas as pd

import bayes_scaling as bs
from bayes_scaling.bayes.modes import map_stage
from bayes_scaling.bayes.spec import data_pytree, make_spec
from bayes_scaling.laws import Law, Param

LAW = Law(
    name="exact_curve_benchmark_law", variables=("N",), equation="E + A N^-a",
    params=(Param("E", 0.0, 10.0, (0.5, 3.0)), Param("A", 1e-3, 1e8, (1.0, 1e4), log_init=True),
            Param("a", 0.0, 2.0, (0.05, 0.8))),
    fn=lambda p, x: p["E"] + p["A"] * x["N"] ** -p["a"])


def curve(n):
    N = np.geomspace(1e7, 1e9, n)
    return pd.DataFrame({"N": N, "loss": 1.8 + 400.0 * N ** -0.34})


def chinchilla_surface():
    N = np.array([70e6, 160e6, 410e6, 1e9, 2.8e9])
    D = np.array([1.4e9, 3.2e9, 8.2e9, 20e9, 56e9])
    df = pd.DataFrame({"N": np.repeat(N, 3), "D": np.concatenate([D * k for k in (1, 2, 4)])})
    df["loss"] = 1.69 + 406.4 / df.N ** 0.34 + 410.7 / df.D ** 0.28
    return df


def main():
    warnings.simplefilter("ignore")
    print("| rows | MAP sigma |\n|---|---|")
    for n in (5, 6, 7, 8, 10, 15):
        spec = make_spec(LAW)
        v = spec.space.validate(curve(n))
        print(f"| {n} | {map_stage(spec, data_pytree(spec, v), 32, 0, 500)[0]['sigma']:.2g} |")
    t = time.perf_counter()
    post = bs.fit_posterior(LAW, curve(5), seed=0, progress_bar=False, allow_unconverged=True)
    d = post.diagnostics
    print(f"\n5 rows, default posterior, seed 0: {time.perf_counter() - t:.1f} s, ok {d['ok']}, "
          f"R-hat {d['max_rhat']:.4f}, bulk ESS {d['min_ess_bulk']:.0f}, divergences "
          f"{d['divergences']}; attempts: " + ", ".join(a["action"] for a in d["attempts"]))
    t = time.perf_counter()
    try:
        bs.fit_posterior("chinchilla", chinchilla_surface(), seed=0, progress_bar=False)
        said = "not refused"
    except bs.BayesScalingError as e:
        said = f"refused: {str(e)[:110]}..."
    print(f"15 Chinchilla rows, scale free: {time.perf_counter() - t:.1f} s, {said}")
    t = time.perf_counter()
    post = bs.fit_posterior("chinchilla", chinchilla_surface(), seed=0, progress_bar=False,
                            scale=0.001, allow_unconverged=True)
    print(f"15 Chinchilla rows, scale=0.001: {time.perf_counter() - t:.1f} s, ok "
          f"{post.diagnostics['ok']}")


if __name__ == "__main__":
    main()
