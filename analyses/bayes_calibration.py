"""Calibration of posterior intervals on data simulated from the default priors.

For `chinchilla` (a 6 x 6 grid of N in 2e7 .. 5e9 and D in 4e8 .. 2e11) and `ptpp_gated_floor`
(the two-PTPP table: 4 sizes x PTPP {15, 31} x replay {0.1, 0.25, 0.5} x 6 budgets), draw every
parameter and the noise scale from the default priors, simulate losses with Huber noise, fit the
posterior and check whether the central 90% interval contains the true parameter and the true
law value at new rows (the design plus an extrapolation to 4x the largest N and D). If the
intervals are calibrated each check is a Bernoulli(0.9) draw.

Writes analyses/out/bayes_calibration/summary_<method>.md and results_<method>.csv (with
``--only LAW``: summary_<method>_<LAW>.md and results_<method>_<LAW>.csv). Default: 50 datasets per law
with the Laplace approximation; ``--nuts`` samples with NUTS at ``fit_posterior``'s defaults
(4 chains x 1000 draws after 1000 warm-up steps, one CPU device per chain; ``--chains``,
``--warmup``, ``--samples`` change them); ``--quick``: 8 datasets. ``--executor local`` or
``ray`` runs the per-dataset fits in parallel (``--workers`` local processes; a Ray cluster:
``--ray-address auto`` joins a running one, no address starts a local one) with the same outputs:
tables and seeds are drawn before the fits, and each worker gets the same CPU devices per chain.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bayes_scaling.bayes import use_chain_devices  # noqa: E402
from bayes_scaling.calibration import calibrate  # noqa: E402
import scaleout  # noqa: E402

OUT = ROOT / "analyses" / "out" / "bayes_calibration"


def chinchilla_design():
    grid = pd.DataFrame([dict(N=a, D=b) for a in np.geomspace(2e7, 5e9, 6)
                         for b in np.geomspace(4e8, 2e11, 6)])
    new = pd.DataFrame([dict(N=a, D=b) for a in np.geomspace(2e7, 2e10, 5)
                        for b in np.geomspace(4e8, 8e11, 5)])
    return grid, new


def ptpp_design():
    rows = [dict(N=n, ptpp=p, replay=r, D=a * n) for n in (2e4, 4e4, 8e4, 1.6e5) for p in (15, 31)
            for r in (0.1, 0.25, 0.5) for a in (0.5, 1, 2, 5, 12, 30)]
    grid = pd.DataFrame(rows)
    new = pd.DataFrame([dict(N=n, ptpp=p, replay=r, D=a * n) for n in (4e4, 6.4e5)
                        for p in (15, 31, 62) for r in (0.1, 0.5) for a in (1, 30, 120)])
    return grid, new


LOSS_RANGE = (0.5, 10.0)


def plausible(table) -> bool:
    """Keep simulated tables whose losses all lie in LOSS_RANGE (nats per token): the tables a
    scaling-law fit meets. A test on the data alone, so coverage stays exact (see
    bayes_scaling.calibration)."""
    y = table["loss"].to_numpy(float)
    return bool(np.all(np.isfinite(y)) and np.all((y >= LOSS_RANGE[0]) & (y <= LOSS_RANGE[1])))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 datasets per law")
    ap.add_argument("--n", type=int, default=50, help="datasets per law")
    ap.add_argument("--nuts", action="store_true", help="NUTS instead of Laplace")
    ap.add_argument("--chains", type=int, default=4, help="NUTS chains (default 4)")
    ap.add_argument("--warmup", type=int, default=1000, help="NUTS warm-up steps (default 1000)")
    ap.add_argument("--samples", type=int, default=1000, help="NUTS draws per chain (default 1000)")
    ap.add_argument("--only", nargs="*", default=None)
    scaleout.add_arguments(ap, executor="serial", workers=None, what="per-dataset fits")
    args = ap.parse_args(argv)
    n = 8 if args.quick else args.n
    OUT.mkdir(parents=True, exist_ok=True)
    method = "nuts" if args.nuts else "laplace"
    fit_kwargs = {"n_starts": 8}
    if args.nuts:
        use_chain_devices(args.chains)
        fit_kwargs.update(num_chains=args.chains, num_warmup=args.warmup, num_samples=args.samples)
    results, tables = [], []
    options = {}
    if args.executor == "ray" and "XLA_FLAGS" in os.environ:  # the chains' devices, on every node
        options["runtime_env"] = {"env_vars": {"XLA_FLAGS": os.environ["XLA_FLAGS"]}}
    with scaleout.from_arguments(args, **options) as executor:
        for law, design in (("chinchilla", chinchilla_design), ("ptpp_gated_floor", ptpp_design)):
            if args.only and law not in args.only:
                continue
            grid, new = design()
            t = time.perf_counter()
            res = calibrate(law, grid, n_datasets=n, new_rows=new, method=method, seed=0,
                            fit_kwargs=fit_kwargs, progress=True, accept=plausible,
                            executor=executor)
            print(f"{law}: params {res['coverage_params']:.3f}, predictions "
                  f"{res['coverage_predictions']:.3f}, {time.perf_counter() - t:.0f} s",
                  flush=True)
            results.append(res)
            tab = res["table"].copy()
            tab.insert(0, "law", law)
            tables.append(tab)
    # a run restricted by --only writes its own files, so it never drops another law's results
    tag = method + ("_" + "_".join(args.only) if args.only else "")
    pd.concat(tables).to_csv(OUT / f"results_{tag}.csv", index=False)
    command = "analyses/bayes_calibration.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    settings = (f"NUTS, {args.chains} chains x {args.samples} draws after {args.warmup} warm-up "
                "steps" if args.nuts else "Laplace approximation")
    lines = ["# Calibration of 90% credible intervals on data simulated from the prior", "",
             f"Generated by `{command}` ({settings}). A check passes when the central 90% "
             "interval contains the truth; calibrated intervals pass 90% of the time (binomial "
             "sd over k checks: sqrt(0.09 / k)). Only simulated tables whose losses all lie in "
             f"[{LOSS_RANGE[0]:g}, {LOSS_RANGE[1]:g}] nats are fitted (a test on the data alone, "
             "which leaves coverage exact; draws redrawn: column 'redrawn').", "",
             "| law | datasets fitted (failed) | redrawn | not converged | parameters: coverage "
             "(checks) | predictions at new rows: coverage (checks) | seconds |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        k_par = r["n_fitted"] * len(r["coverage_by_param"])
        k_pred = len(r["coverage_predictions_by_dataset"])
        lines.append(f"| {r['law']} | {r['n_fitted']} ({r['n_failed']}) | {r['n_rejected']} | "
                     f"{r['n_not_ok']} | {r['coverage_params']:.1%} ({k_par}) | "
                     f"{r['coverage_predictions']:.1%} ({k_pred} datasets) | {r['seconds']:.0f} |")
    lines += ["", "Per parameter:", ""]
    for r in results:
        lines.append(f"- {r['law']}: " + ", ".join(f"{k} {v:.0%}"
                                                   for k, v in r["coverage_by_param"].items()))
    if args.nuts:
        lines += ["", "Convergence per dataset (thresholds: R-hat <= 1.01, bulk and tail ESS >= "
                  "100 per chain, no divergences):", "",
                  "| law | median max R-hat | R-hat > 1.01 | median min bulk ESS | datasets with "
                  "divergences | parameter coverage, converged / not converged |",
                  "|---|---|---|---|---|---|"]
        for r in results:
            t = r["table"].dropna(subset=["max_rhat"])
            cov = t.filter(regex="^in_").astype(float).mean(axis=1)
            ok = t["ok"].astype(bool)
            split = " / ".join(f"{cov[m].mean():.1%} ({int(m.sum())})" if m.any() else "none"
                               for m in (ok, ~ok))
            lines.append(f"| {r['law']} | {t['max_rhat'].median():.3f} | "
                         f"{int((t['max_rhat'] > 1.01).sum())} | {t['min_ess_bulk'].median():.0f} | "
                         f"{int((t['divergences'] > 0).sum())} | {split} |")
    (OUT / f"summary_{tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
