"""The ``bayes-scaling`` command line.

    bayes-scaling laws                                    list laws with equations and parameters
    bayes-scaling fit --law NAME table.csv --delta D      robust MAP fit; prints params and metrics
    bayes-scaling demo                                    fit Chinchilla on Epoch's bundled points
    bayes-scaling datasets                                list bundled loss tables
    bayes-scaling posterior --law NAME table.csv --out p.nc   posterior (NUTS or Laplace), saved
    bayes-scaling forecast p.nc new.csv [--interval 0.9]  forecast intervals at new rows
    bayes-scaling plan --target T --source S --N N --ptpp P --max-forgetting 2% --target-loss L
                       [--prob 0.9]                       adaptation plan (PTPP paper Sec. 4)
    bayes-scaling train CONFIG [--workers N]              run/resume a training sweep (training/)
    bayes-scaling analyses [--quick] [--only NAME ...] [--jobs N]  regenerate analyses/out/
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from . import design, scalebench
from .errors import BayesScalingError


def _read_table(path: str, query: str | None) -> pd.DataFrame:
    if path.startswith("dataset:"):
        from . import datasets

        df = datasets.load(path.split(":", 1)[1])
    else:
        df = pd.read_csv(path)
    if query:
        df = df.query(query)
    return df


def _print_fit(fit, df, delta) -> None:
    from .metrics import score

    print(fit.law.describe().splitlines()[0])
    print(f"rows: {fit.n_rows}   starts: {len(fit.starts)} ({fit.n_failed} non-finite, "
          f"{int(fit.starts['converged'].sum())} converged)   delta: {delta:g}   "
          f"time: {fit.settings['seconds']:.2f} s")
    print(f"objective (summed Huber of log residuals): {fit.objective:.6g}")
    w = max(len(k) for k in fit.params)
    for k, v in fit.params.items():
        tag = "  (fixed)" if k in fit.settings["fixed"] else ""
        print(f"  {k:>{w}s} = {v:.6g}{tag}")
    m = score(df["loss"], fit.predict(df), delta=delta)
    print("in-sample metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in m.items()))


def cmd_laws(args) -> None:
    from . import laws

    for name in laws.names():
        print(laws.get(name).describe())
        print()


def cmd_fit(args) -> None:
    from .fit import fit_map

    df = _read_table(args.table, args.query)
    fixed = {}
    for item in args.fixed or ():
        k, _, v = item.partition("=")
        fixed[k] = float(v)
    fit = fit_map(args.law, df, delta=args.delta, n_starts=args.n_starts, seed=args.seed,
                  fixed=fixed or None, method=args.method)
    _print_fit(fit, df, args.delta)
    if args.out:
        fit.save(args.out)
        print(f"saved {args.out}")


def cmd_demo(args) -> None:
    from . import datasets
    from .fit import fit_map

    df = datasets.load("chinchilla_epoch")
    kept = df[df["epoch_kept"]]
    print("Chinchilla law on Epoch AI's re-extraction of Hoffmann et al. (2022), the 240 points Epoch "
          "kept; Huber(delta=1e-3) on log residuals, as Epoch fitted it.\n"
          "Epoch's published estimate: A=482.01 B=2085.43 E=1.817 alpha=0.3478 beta=0.3658\n")
    fit = fit_map("chinchilla", kept, delta=1e-3, n_starts=args.n_starts, seed=args.seed)
    _print_fit(fit, kept, 1e-3)


def cmd_datasets(args) -> None:
    from . import datasets

    for name in datasets.names():
        df = datasets.load(name)
        print(f"{name:24s} {len(df):6d} rows   columns: {', '.join(map(str, df.columns[:12]))}")


def cmd_posterior(args) -> None:
    from .bayes import posterior_command, use_chain_devices

    use_chain_devices(args.chains)  # one CPU device per chain: parallel chains

    posterior_command(args.law, _read_table(args.table, args.query), args.out, method=args.method,
                      likelihood=args.likelihood, num_chains=args.chains,
                      num_warmup=args.warmup, num_samples=args.samples, seed=args.seed)


def cmd_forecast(args) -> None:
    from .bayes import forecast_command

    forecast_command(args.posterior, args.table, interval=args.interval, kind=args.kind,
                     out=args.out, seed=args.seed)


def _load_fit(path: str):
    """A saved Posterior (.nc) or MapFit (.json)."""
    from .bayes import load_posterior
    from .fit import MapFit

    if not Path(path).exists():
        raise BayesScalingError(f"{path}: no such file (a posterior .nc from `bayes-scaling "
                                "posterior` or a fit .json from `bayes-scaling fit --out`)")
    return MapFit.load(path) if path.endswith(".json") else load_posterior(path)


def cmd_plan(args) -> None:
    from . import plan as P

    forgetting = args.max_forgetting  # "2%" relative; a plain number is absolute
    try:
        forgetting = float(forgetting)
    except ValueError:
        pass  # adaptation parses (or clearly refuses) the percentage string
    base = args.source_base
    if base is not None:
        try:
            base = float(base)
        except ValueError:
            base = _read_table(base, None)
    # an infeasible request raises InfeasiblePlanError, whose message names the closest plan
    pl = P.adaptation(_load_fit(args.target), _load_fit(args.source), N=args.N, ptpp=args.ptpp,
                      max_forgetting=forgetting, target_loss=args.target_loss, prob=args.prob,
                      replay_bounds=tuple(args.replay_bounds),
                      atpp_bounds=tuple(args.atpp_bounds), source_base=base)
    print(repr(pl))
    if args.out:
        pl.save(args.out)
        print(f"saved {args.out}")
    if args.figure:
        P.plot_adaptation(pl, path=args.figure)
        print(f"saved {args.figure}")


def _source_tree_script(*parts) -> Path:
    path = Path(__file__).resolve().parents[1].joinpath(*parts)
    if not path.exists():
        raise BayesScalingError(f"{'/'.join(parts)} is not here: it ships with the source checkout, "
                                "not with an installed wheel; run from a clone of the repository")
    return path


def cmd_train(args) -> int:
    # training/ is a separate package (DESIGN.md rule 7): run it as its own process.
    cmd = [sys.executable, "-m", "training", "sweep", args.config, "--workers", str(args.workers)]
    if args.export:
        cmd += ["--export", args.export]
    return subprocess.call(cmd)


def cmd_analyses(args) -> int:
    cmd = [sys.executable, str(_source_tree_script("analyses", "run_all.py"))]
    if args.quick:
        cmd.append("--quick")
    if args.only:
        cmd += ["--only", *args.only]
    if args.jobs is not None:
        cmd += ["--jobs", str(args.jobs)]
    return subprocess.call(cmd)


def cmd_design(args) -> None:
    folder = Path(args.task_dir)
    task_name = folder.name
    laws = args.laws or list(scalebench.task_laws(task_name))
    tables = []
    for law_id in laws:
        task = design.scalebench_task(task_name, law_id, data_dir=folder.parent,
                                         budgets=args.budgets)
        for method in args.methods:
            res = design.run(task, method=method, seeds=range(args.seeds))
            tables.append(res.assign(task=task_name, law=law_id, method=method))
    table = pd.concat(tables, ignore_index=True)
    if args.out:
        table.to_csv(args.out, index=False)
    summary = table.groupby(["method", "budget"])[["r2_protocol", "r2_posterior", "coverage90"]]
    print(summary.mean().round(3).to_string())


def add_design_parser(sub) -> None:
    s = sub.add_parser("design", help="run selection methods on a ScaleBench task folder "
                                      "(train.csv, test.csv) and write one row per seed and budget")
    s.add_argument("task_dir", help="a ScaleBench task folder, e.g. .../vocab_scaling_law")
    s.add_argument("--laws", nargs="*", help="law ids (default: every law of the task)")
    s.add_argument("--methods", nargs="*", default=["bayes"], choices=list(design.METHODS))
    s.add_argument("--seeds", type=int, default=10, help="seeds 0 .. n-1")
    s.add_argument("--budgets", type=float, nargs="*", default=[0.01, 0.05, 0.1])
    s.add_argument("--out", help="write the table as CSV")
    s.set_defaults(func=cmd_design)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bayes-scaling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("laws", help="list registered laws with equations and parameters")
    s.set_defaults(func=cmd_laws)

    s = sub.add_parser("fit", help="robust MAP fit of a law to a loss table")
    s.add_argument("table", help="CSV loss table in canonical columns, or dataset:NAME")
    s.add_argument("--law", required=True, help="registered law name (see `bayes-scaling laws`)")
    s.add_argument("--delta", type=float, required=True,
                   help="Huber threshold on log residuals: 0.02 in the PTPP paper, 1e-3 in the M3 paper")
    s.add_argument("--n-starts", type=int, default=64)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--method", choices=["jax", "scipy"], default="jax")
    s.add_argument("--fixed", nargs="*", metavar="NAME=VALUE", help="parameters held fixed")
    s.add_argument("--query", help="pandas query selecting rows, e.g. \"domain == 'target' and D > 0\"")
    s.add_argument("--out", help="write the fit as JSON")
    s.set_defaults(func=cmd_fit)

    s = sub.add_parser("posterior", help="posterior of a law on a loss table (NUTS or Laplace)")
    s.add_argument("table", help="CSV loss table in canonical columns, or dataset:NAME")
    s.add_argument("--law", required=True, help="registered law name")
    s.add_argument("--out", required=True, help="netCDF file for the posterior (plus a .json)")
    s.add_argument("--method", choices=["nuts", "laplace"], default="nuts")
    s.add_argument("--likelihood", choices=["huber", "student_t", "normal"], default="huber")
    s.add_argument("--chains", type=int, default=4)
    s.add_argument("--warmup", type=int, default=1000)
    s.add_argument("--samples", type=int, default=1000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--query", help="pandas query selecting rows")
    s.set_defaults(func=cmd_posterior)

    s = sub.add_parser("forecast", help="forecast intervals of a saved posterior at new rows")
    s.add_argument("posterior", help="posterior .nc written by `bayes-scaling posterior`")
    s.add_argument("table", help="CSV of new rows (the law's columns)")
    s.add_argument("--interval", type=float, default=0.9)
    s.add_argument("--kind", choices=["predictive", "mean"], default="predictive")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", help="write the table here instead of printing it")
    s.set_defaults(func=cmd_forecast)

    s = sub.add_parser("plan", help="smallest adaptation budget meeting a target-loss and a "
                                    "forgetting constraint (PTPP paper Sec. 4)")
    s.add_argument("--target", required=True, help="target-domain posterior .nc or fit .json")
    s.add_argument("--source", required=True, help="source-domain posterior .nc or fit .json")
    s.add_argument("--N", type=float, required=True, help="model size (as in the fitted table)")
    s.add_argument("--ptpp", type=float, required=True, help="pre-training tokens per parameter")
    s.add_argument("--max-forgetting", required=True,
                   help="allowed source-loss increase: absolute (0.02) or relative (2%%)")
    s.add_argument("--target-loss", type=float, required=True, help="target-loss threshold tau")
    s.add_argument("--prob", type=float, help="chance constraints at this probability")
    s.add_argument("--source-base", help="pre-adaptation source loss: a number, or a loss table "
                                         "(CSV or dataset:NAME) with D == 0 rows")
    s.add_argument("--replay-bounds", type=float, nargs=2, default=(0.0, 1.0))
    s.add_argument("--atpp-bounds", type=float, nargs=2, default=(1e-2, 1e3))
    s.add_argument("--out", help="write the plan as JSON")
    s.add_argument("--figure", help="write the paper's Figure 2 for the plan (PNG)")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("demo", help="fit Chinchilla on the bundled Epoch points and print metrics")
    s.add_argument("--n-starts", type=int, default=64)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("datasets", help="list bundled loss tables")
    s.set_defaults(func=cmd_datasets)

    s = sub.add_parser("train", help="run or resume a training sweep from a TOML config")
    s.add_argument("config", help="sweep config, e.g. training/configs/ptpp.toml")
    s.add_argument("--workers", type=int, default=1, help="independent runs in parallel")
    s.add_argument("--export", help="also write the loss table to this CSV at the end")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("analyses", help="regenerate the tables and figures under analyses/out/")
    s.add_argument("--quick", action="store_true", help="fast subset")
    s.add_argument("--only", nargs="*", help="analysis script names without .py")
    s.add_argument("--jobs", type=int, help="scripts run at once (default 2)")
    s.set_defaults(func=cmd_analyses)
    add_design_parser(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc = args.func(args)
    except BayesScalingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
