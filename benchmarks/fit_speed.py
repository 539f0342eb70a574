"""Speed of the vectorised JAX multi-start fit against the papers' recipe, in one process.

Problems: Epoch's 240 Chinchilla points (Huber delta = 1e-3), a synthetic PTPP Form-3 table
(4 sizes x PTPP {15, 31, 279} x replay {0.1, 0.25, 0.5} x 6 budgets; delta = 0.02) and Sedova's
9-parameter law on the fr-en rows of ``bible_m3`` (delta = 1e-3), 50 starts each.
Methods, all from the same 50 initial points:
  jax        fit_map(method="jax"): every start in one compiled L-BFGS program, the starts one
             after another (compiled once; the first call's compile time is reported separately
             as "jax (cold)")
  lockstep   the same program with the starts vmapped (``bs.fit.STARTS_IN_LOCKSTEP``)
  scipy      fit_map(method="scipy"): a Python loop of scipy L-BFGS-B with exact JAX gradients
  papers     the papers' recipe: scipy L-BFGS-B per start with finite-difference gradients
Prints wall time, best objective and the speed-up of jax over each baseline. Run:

    .venv/bin/python benchmarks/fit_speed.py [--starts 50] [--repeats 2]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import bayes_scaling as bs  # noqa: E402
from bayes_scaling.fit import Problem  # noqa: E402
from conftest import form3_grid, simulate  # noqa: E402


def papers_recipe(law, df, delta, inits):
    """scipy L-BFGS-B, one start at a time, finite-difference gradients (scipy's default)."""
    prob, _ = Problem.build(law, df)
    val = jax.jit(lambda th: prob.objective_theta(th, delta))
    fun = lambda th: float(val(jnp.asarray(th)))  # noqa: E731
    bounds = [(p.lower + 1e-12 if np.isfinite(p.lower) else None,
               p.upper - 1e-12 if np.isfinite(p.upper) else None) for p in prob.space.free]
    best = np.inf
    lo = [b[0] if b[0] is not None else -np.inf for b in bounds]
    hi = [b[1] if b[1] is not None else np.inf for b in bounds]
    for th0 in inits:
        try:
            res = minimize(fun, np.clip(th0, lo, hi), method="L-BFGS-B", bounds=bounds,
                           options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-12})
        except ValueError:  # scipy's finite differences step a hair outside a bound: a failed start
            continue
        if np.isfinite(res.fun):
            best = min(best, res.fun)
    return best


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--problems", nargs="*", default=["epoch_chinchilla", "form3_synthetic", "m3_sedova"])
    a = ap.parse_args(argv)

    ep = bs.datasets.load("chinchilla_epoch")
    problems = {
        "epoch_chinchilla": ("chinchilla", ep[ep["epoch_kept"]].reset_index(drop=True), 1e-3),
        "form3_synthetic": ("ptpp_gated_floor", simulate("ptpp_gated_floor", form3_grid(), noise=0.003,
                                                         seed=1), 0.02),
    }
    if "m3_sedova" in a.problems:
        m3 = bs.datasets.load("bible_m3")
        m3 = m3[(m3["pair"] == "fr-en") & (m3["n_stages"] <= 2)].reset_index(drop=True)
        problems["m3_sedova"] = ("sedova", m3, 1e-3)
    print(f"{'problem':18s} {'method':12s} {'seconds':>9s} {'best objective':>16s} {'jax speed-up':>13s}")
    for pname, (law, df, delta) in problems.items():
        if pname not in a.problems:
            continue
        prob, _ = Problem.build(law, df)
        inits = prob.space.sample_inits(a.starts, 0)
        kw = dict(delta=delta, inits=inits)
        t0 = time.perf_counter()
        cold = bs.fit_map(law, df, **kw)
        t_cold = time.perf_counter() - t0
        t_jax, fj = timed(lambda: bs.fit_map(law, df, method="jax", **kw), a.repeats)
        bs.fit.STARTS_IN_LOCKSTEP = True
        try:
            bs.fit_map(law, df, **kw)  # compile
            t_ls, fl = timed(lambda: bs.fit_map(law, df, method="jax", **kw), a.repeats)
        finally:
            bs.fit.STARTS_IN_LOCKSTEP = False
        t_sp, fs = timed(lambda: bs.fit_map(law, df, method="scipy", **kw), a.repeats)
        t_pp, best_pp = timed(lambda: papers_recipe(law, df, delta, inits), 1)
        rows = [("jax (cold)", t_cold, cold.objective), ("jax", t_jax, fj.objective),
                ("lockstep", t_ls, fl.objective), ("scipy", t_sp, fs.objective), ("papers", t_pp, best_pp)]
        for m, t, obj in rows:
            print(f"{pname:18s} {m:12s} {t:9.2f} {obj:16.10g} {t / t_jax:12.1f}x")
        ok = fj.objective <= min(fs.objective, best_pp) * (1 + 1e-9)
        print(f"{pname:18s} jax objective no worse than both baselines (rel 1e-9): {ok}")


if __name__ == "__main__":
    main()
