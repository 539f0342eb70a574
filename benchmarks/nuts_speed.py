"""NUTS speed on the hard case: the Form-3 (`ptpp_gated_floor`) posterior on two PTPP levels.

The table: 4 model sizes x PTPP {15, 31} x replay {0.1, 0.25, 0.5} x 6 adaptation budgets
(0.5 .. 30 tokens per parameter) = 144 rows, losses from `law.example` times exp(0.005 eps).
Both configurations draw 4 chains x 1000 samples after 1000 warm-up steps, in the same process:

- default: `bs.fit_posterior(law, df)` (log-normal priors from the init ranges, centred sampling
  coordinates, chains started near the posterior mode, whitened by its Laplace covariance, dense
  mass matrix, target acceptance 0.99);
- naive: plain Normal priors on the natural scale, NumPyro's default init (uniform in (-2, 2) on
  the unconstrained scale), no sampling coordinates, no whitening, diagonal mass matrix,
  target acceptance 0.8.

Wall time includes compilation and the mode search. ESS/s is the minimum bulk ESS over the
parameters divided by the wall time. `--chain-methods` also times the default configuration with
"sequential" chains (one after another) and with "parallel" chains on 4 host devices (one per chain, sharing the cores) (a subprocess, since
the device count must be set before JAX starts).

Usage:
    .venv/bin/python benchmarks/nuts_speed.py [--skip-naive] [--chain-methods] [--write]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def hard_case(noise=0.005, seed=0):
    import bayes_scaling as bs

    law = bs.laws.get("ptpp_gated_floor")
    rows = [dict(N=n, ptpp=p, replay=r, D=a * n) for n in (2e4, 4e4, 8e4, 1.6e5) for p in (15, 31)
            for r in (0.1, 0.25, 0.5) for a in (0.5, 1, 2, 5, 12, 30)]
    df = pd.DataFrame(rows)
    rng = np.random.default_rng(seed)
    df["loss"] = np.asarray(law(law.example, df)) * np.exp(noise * rng.standard_normal(len(df)))
    return law, df


def run(config, chain_method="vectorized", seed=0):
    import bayes_scaling as bs
    from bayes_scaling import bayes as B

    law, df = hard_case()
    kw = dict(num_chains=4, num_warmup=1000, num_samples=1000, seed=seed, progress_bar=False,
              chain_method=chain_method)
    if config == "naive":
        kw.update(priors=B.plain_priors(law), coordinates=None, init="uniform", whiten=False,
                  dense_mass=False, target_accept=0.8)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bs.fit_posterior(law, df, **kw)
    wall = time.perf_counter() - t
    d = post.diagnostics
    geometry = sampled_geometry(post, df) if config == "default" else None
    return {"config": config, "chain_method": chain_method, "wall_s": wall, "geometry": geometry,
            "mode_search_s": d["seconds_modes"], "max_rhat": d["max_rhat"],
            "min_ess_bulk": d["min_ess_bulk"], "min_ess_tail": d["min_ess_tail"],
            "divergences": d["divergences"], "ess_per_s": d["min_ess_bulk"] / wall,
            "mean_leapfrog": float(np.asarray(post.idata.sample_stats["n_steps"]).mean()),
            "ok": post.ok}


def sampled_geometry(post, df):
    """Shape of the posterior in the coordinates NUTS samples: per coordinate the skewness and
    excess kurtosis of the draws (0 and 0 for a Gaussian, which NUTS with a dense mass matrix
    samples in a few steps) and the mean z-score of the divergent draws (where they happen)."""
    import jax
    import jax.numpy as jnp
    from bayes_scaling import bayes as B

    spec = post.spec
    ref = B.data_pytree(spec, df)["ref"]
    names = [c if isinstance(c, str) else c.name for c in spec.sampled]
    theta = {k: jnp.asarray(np.asarray(post.idata.posterior[k]).reshape(-1)) for k in spec.names}
    S = np.asarray(jax.vmap(lambda t: spec.s(t, ref))(theta))
    div = np.asarray(post.idata.sample_stats["diverging"]).reshape(-1)
    z = (S - S.mean(0)) / S.std(0)
    rows = []
    for i, n in enumerate(names):
        rows.append({"coordinate": n, "skew": float((z[:, i] ** 3).mean()),
                     "excess_kurtosis": float((z[:, i] ** 4).mean() - 3.0),
                     "divergent_mean_z": float(z[div, i].mean()) if div.any() else float("nan")})
    return rows


def geometry_table(rows):
    lines = ["| sampled coordinate | skewness | excess kurtosis | mean z of divergent draws |",
             "|---|---|---|---|"]
    for r in rows:
        dz = "—" if r["divergent_mean_z"] != r["divergent_mean_z"] else f"{r['divergent_mean_z']:+.2f}"
        lines.append(f"| {r['coordinate']} | {r['skew']:+.2f} | {r['excess_kurtosis']:+.2f} | {dz} |")
    return "\n".join(lines)


def _subprocess(config, chain_method, devices):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    out = subprocess.run([sys.executable, __file__, "--one", config, chain_method],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results):
    lines = ["| config | chains | wall (s) | of which mode search (s) | max R-hat | min bulk ESS "
             "| min tail ESS | divergences | mean leapfrog steps | min ESS / s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['config']} | {r['chain_method']} | {r['wall_s']:.0f} | "
                     f"{r['mode_search_s']:.0f} | {r['max_rhat']:.3f} | {r['min_ess_bulk']:.0f} | "
                     f"{r['min_ess_tail']:.0f} | {r['divergences']} | {r['mean_leapfrog']:.0f} | "
                     f"{r['ess_per_s']:.2f} |")
    return "\n".join(lines)


def seeds_table(rows):
    lines = ["| seed | wall (s) | max R-hat | min bulk ESS | min tail ESS | divergences | ok |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['wall_s']:.0f} | {r['max_rhat']:.3f} | "
                     f"{r['min_ess_bulk']:.0f} | {r['min_ess_tail']:.0f} | {r['divergences']} | "
                     f"{'yes' if r['ok'] else 'no'} |")
    return "\n".join(lines)


def write_seeds_section(rows, command):
    from _report import replace_section

    div = sum(r["divergences"] for r in rows)
    section = ("## NUTS across seeds\n\n"
               "The default configuration (vectorised chains, 4 x 1000) on the same Form-3 table, "
               f"one fit per seed. Command:\n\n    {command}\n\n" + seeds_table(rows)
               + f"\n\n{div} divergent transitions in {len(rows) * 4000} draws; "
               f"{sum(r['ok'] for r in rows)} of {len(rows)} fits pass every diagnostic.\n")
    replace_section("NUTS across seeds", section)


def refits(n, seed0=0):
    """Same-shape refits in one process: Chinchilla on 40 simulated rows, fitted ``n`` times (new
    noise each time), with the chains' program taking the data as arguments (the default) and,
    alternately, with the data as constants of the chains' programs (the engine before
    18cfc4e), which compiles new programs for every table. Returns one row per
    fit: variant, index, wall seconds."""
    import jax
    import bayes_scaling as bs
    from bayes_scaling.bayes import progress

    law = bs.laws.get("chinchilla")
    grid = pd.DataFrame([{"N": n_, "D": n_ * t} for n_ in (1e7, 2e7, 4e7, 8e7, 1.6e8)
                         for t in (5, 10, 20, 40, 80, 160, 320, 640)])
    truth = np.asarray(law(law.example, grid))
    engine = progress.Chains.run

    def constants(self, seed, z0, args, kwargs, num_samples, **kw):
        # the chains' programs with this table as constants: new programs for every table
        start, advance = self._start, self._advance
        self._start = jax.jit(lambda k, z, a, b: start(k, z, args, kwargs))
        self._advance = jax.jit(lambda s, m, a, b: advance(s, m, args, kwargs))
        try:
            return engine(self, seed, z0, args, kwargs, num_samples, **kw)
        finally:
            self._start, self._advance = start, advance

    variants = {"arguments": engine, "constants": constants}
    rows = []
    for i in range(n):
        for name, method in variants.items():
            rng = np.random.default_rng(seed0 + 1000 * i + (name == "constants"))
            df = grid.assign(loss=truth * np.exp(0.01 * rng.standard_normal(len(grid))))
            progress.Chains.run = method
            try:
                t = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    bs.fit_posterior(law, df, seed=i, progress_bar=False)
                rows.append({"variant": name, "fit": i, "wall_s": time.perf_counter() - t})
            finally:
                progress.Chains.run = engine
            print(f"{name:9s} fit {i}: {rows[-1]['wall_s']:.1f} s", flush=True)
    return rows


def refits_section(rows, command):
    df = pd.DataFrame(rows)
    later = df[df["fit"] > 0].groupby("variant")["wall_s"].median()
    first = df[df["fit"] == 0].set_index("variant")["wall_s"]
    load = os.getloadavg()
    return ("## NUTS refits of the same shape in one process\n\n"
            "Chinchilla on 40 simulated rows (new noise per fit), default settings, fits "
            "alternating between the chains' program taking the data as arguments (the engine "
            "since 18cfc4e) and the data baked into the program as constants (before), in one "
            f"process. Command:\n\n    {command}\n\n"
            "| program | first fit (s) | median of later fits (s) |\n|---|---|---|\n"
            + "".join(f"| data as {v} | {first[v]:.1f} | {later[v]:.1f} |\n"
                      for v in ("arguments", "constants"))
            + f"\nLater fits: {later['arguments'] / later['constants']:.2f}x the time with the "
            f"data as arguments ({len(df) // 2} fits each; load average "
            f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} at the end).\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--chain-methods", action="store_true")
    ap.add_argument("--write", action="store_true", help="replace the NUTS speed section of "
                    "BENCHMARKS.md with the results")
    ap.add_argument("--seeds", type=int, default=0, help="instead: run the default "
                    "(vectorised) configuration with seeds 0..N-1 and report each seed's "
                    "diagnostics (divergences are rare events; one seed says little)")
    ap.add_argument("--refits", type=int, default=0, help="instead: N same-shape refits of a "
                    "small Chinchilla table in one process, the chains' program with the data as "
                    "arguments against the data as constants (section 'NUTS refits of the same "
                    "shape in one process')")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.refits:
        md = refits_section(refits(args.refits), ".venv/bin/python benchmarks/nuts_speed.py "
                            + " ".join(sys.argv[1:]))
        print(md)
        if args.write:
            from _report import replace_section
            replace_section("NUTS refits of the same shape in one process", md)
        return
    if args.one:
        print(json.dumps(run(*args.one)))
        return
    if args.seeds:
        rows = []
        for seed in range(args.seeds):
            rows.append({**run("default", seed=seed), "seed": seed})
            print(seeds_table(rows), flush=True)
        if args.write:
            write_seeds_section(rows, ".venv/bin/python benchmarks/nuts_speed.py "
                                + " ".join(sys.argv[1:]))
        return
    results = [run("default")]
    print(table(results), flush=True)
    print(geometry_table(results[0]["geometry"]), flush=True)
    if args.chain_methods:
        results.append(run("default", "sequential"))
        results.append(_subprocess("default", "parallel", 4))
        print(table(results), flush=True)
    if not args.skip_naive:
        results.append(run("naive"))
    md = table(results)
    print(md)
    if args.write:
        threads = os.environ.get("OMP_NUM_THREADS")
        prefix = (f"XLA_FLAGS='{os.environ.get('XLA_FLAGS', '')}' OMP_NUM_THREADS={threads} "
                  if threads else "")
        write_section(md, results, prefix + ".venv/bin/python benchmarks/nuts_speed.py "
                      + " ".join(sys.argv[1:]))


def write_section(md, results, command):
    default = next(r for r in results if r["config"] == "default" and r["chain_method"] == "vectorized")
    naive = next((r for r in results if r["config"] == "naive"), None)
    ratio = ""
    if naive:
        ratio = (f"\nDefault vs naive: {default['wall_s'] / naive['wall_s']:.2f}x the wall time, "
                 f"{default['ess_per_s'] / max(naive['ess_per_s'], 1e-9):.0f}x the ESS per second.\n")
    section = ("## NUTS speed\n\n"
               "Form-3 (`ptpp_gated_floor`) posterior on the synthetic two-PTPP table (144 rows), "
               "4 chains x 1000 draws after 1000 warm-up steps. Command:\n\n"
               f"    {command}\n\n"
               + md + "\n" + ratio)
    if default.get("geometry"):
        section += ("\nWhere the default configuration's steps go: the shape of its draws in the "
                    "sampled coordinates (a Gaussian has skewness 0 and excess kurtosis 0; the "
                    "step size is set by the narrowest region and the tree length by the widest, "
                    "so heavy tails cost leapfrog steps):\n\n" + geometry_table(default["geometry"])
                    + "\n")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from _report import replace_section
    replace_section("NUTS speed", section)


if __name__ == "__main__":
    main()
