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

Bad input ends with one line on stderr, ``error: ...`` (what, where, how to fix), and exit code 2.
``--law-module my_laws.py`` (fit, posterior, forecast, plan) imports a Python file that registers
laws with ``bayes_scaling.laws.register``, so they can be used by name.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import pandas as pd

from scaleout import get_executor

from . import checks, design, scalebench
from .errors import BayesScalingError, ConvergenceWarning, DataError, LawError, OptionError

LAW_MODULE_COMMANDS = ("fit", "posterior", "forecast", "plan")


def _read_table(path: str, query: str | None) -> pd.DataFrame:
    """A loss table from a CSV path or ``dataset:NAME``, optionally filtered by a pandas query."""
    if path.startswith("dataset:"):
        from . import datasets

        df = datasets.load(path.split(":", 1)[1])
    else:
        if not Path(path).is_file():
            raise DataError(f"{path}: no such file; give a CSV loss table (a header row of column "
                            "names, one row per run) or dataset:NAME (see `bayes-scaling "
                            "datasets`)")
        try:
            df = pd.read_csv(path)
        except pd.errors.EmptyDataError:
            raise DataError(f"{path} is empty; a loss table needs a header row of column names "
                            "and one row per run") from None
        except (pd.errors.ParserError, UnicodeDecodeError) as e:
            raise DataError(f"{path} is not a readable CSV ({str(e).splitlines()[0]}); save it as "
                            "comma-separated text with one header row") from None
    if df.empty:
        raise DataError(f"{path} has a header ({', '.join(map(str, df.columns))}) but no rows; "
                        "add one row per measured run")
    if query:
        try:
            df = df.query(query)
        except (SyntaxError, NameError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataError(f"--query {query!r} is not a valid pandas query on {path} "
                            f"({type(e).__name__}: {e}); the columns are "
                            f"{', '.join(map(str, df.columns))}; e.g. --query \"domain == "
                            "'target' and D > 0\"") from None
        if df.empty:
            raise DataError(f"--query {query!r} selects no rows of {path}; loosen it")
    return df


def _check_writable(path: str | None, option: str) -> None:
    """Refuse an output path whose directory does not exist, before any computation."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise OptionError(f"{option} {path} is a directory; give a file name inside it")
    if not p.parent.is_dir():
        raise OptionError(f"{option} {path}: the directory {p.parent} does not exist; create it "
                          "first or write elsewhere")


def _law_error(e: LawError, path: str) -> BayesScalingError:
    return LawError(f"{path} was written with a law that is not registered here ({e.message}); "
                    "pass --law-module FILE.py, the file that registers it")


def _load_posterior(path: str):
    """A posterior saved by ``bayes-scaling posterior``, or one clear error."""
    from .bayes import load_posterior

    if not Path(path).is_file():
        raise DataError(f"{path}: no such file (a posterior .nc from `bayes-scaling posterior "
                        "--out`)")
    if path.endswith(".json"):
        raise DataError(f"{path} is a point fit (JSON from `bayes-scaling fit --out`), which has "
                        "no forecast distribution; forecast needs a posterior .nc from "
                        "`bayes-scaling posterior --out`")
    try:
        return load_posterior(path)
    except LawError as e:
        raise _law_error(e, path) from None
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"cannot read {path} as a posterior ({type(e).__name__}: {e}): it is "
                        "not a complete .nc written by `bayes-scaling posterior` (truncated or "
                        "corrupt?); write it again") from None


@contextlib.contextmanager
def _step(what: str):
    """One status line on stderr before a long step and one with its time after it."""
    print(f"{what} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    yield
    print(f"{what}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def _print_fit(fit, df) -> None:
    print(fit.law.describe().splitlines()[0])
    print(f"rows: {fit.n_rows}   starts: {len(fit.starts)} ({fit.n_failed} non-finite, "
          f"{int(fit.starts['converged'].sum())} converged)   delta: {fit.settings['delta']:g}   "
          f"time: {fit.settings['seconds']:.2f} s")
    print(f"objective (summed Huber of log residuals): {fit.objective:.6g}")
    w = max(len(k) for k in fit.params)
    for k, v in fit.params.items():
        tag = "  (fixed)" if k in fit.settings["fixed"] else ""
        print(f"  {k:>{w}s} = {v:.6g}{tag}")
    m = fit.score(df)
    print("in-sample metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in m.items()))
    stuck = checks.at_bounds(fit.law, fit.params, fit.settings["fixed"])
    if stuck:
        print("warning: parameters on a bound: "
              + ", ".join(f"{k} = {fit.params[k]:.4g} (bound {b:g})" for k, b in stuck.items())
              + "; the table does not determine them, so these values are the bounds, not "
              "estimates: check the table's units and rows, hold them fixed with --fixed "
              "NAME=VALUE, or use a law with fewer parameters", file=sys.stderr)


def _parse_fixed(items) -> dict:
    fixed = {}
    for item in items or ():
        k, eq, v = item.partition("=")
        try:
            fixed[k] = float(v) if eq and k else None
        except ValueError:
            fixed[k] = None
        if fixed[k] is None:
            raise OptionError(f"--fixed expects NAME=VALUE (e.g. --fixed alpha=0.34), got {item!r}")
    return fixed


def cmd_laws(args) -> None:
    from . import laws

    for name in laws.names():
        print(laws.get(name).describe())
        print()


def cmd_fit(args) -> None:
    from .fit import fit_map

    fixed = _parse_fixed(args.fixed)
    checks.check_fit_options(args.law, delta=args.delta, n_starts=args.n_starts, fixed=fixed)
    _check_writable(args.out, "--out")
    _check_writable(args.figure, "--figure")
    df = _read_table(args.table, args.query)
    with _step(f"MAP fit of {args.law} ({args.n_starts} starts)"):
        fit = fit_map(args.law, df, delta=args.delta, n_starts=args.n_starts, seed=args.seed,
                      fixed=fixed or None, method=args.method)
    _print_fit(fit, df)
    if args.out:
        fit.save(args.out)
        print(f"saved {args.out}")
    if args.figure:
        from .plots import fit_plot

        fit_plot(fit, df, path=args.figure)
        print(f"saved {args.figure}")


def cmd_demo(args) -> None:
    from . import datasets
    from .fit import fit_map

    df = datasets.load("chinchilla_epoch")
    kept = df[df["epoch_kept"]]
    print("Chinchilla law on Epoch AI's re-extraction of Hoffmann et al. (2022), the 240 points Epoch "
          "kept; Huber(delta=1e-3) on log residuals, as Epoch fitted it.\n"
          "Epoch's published estimate: A=482.01 B=2085.43 E=1.817 alpha=0.3478 beta=0.3658\n")
    with _step(f"MAP fit of chinchilla ({args.n_starts} starts)"):
        fit = fit_map("chinchilla", kept, delta=1e-3, n_starts=args.n_starts, seed=args.seed)
    _print_fit(fit, kept)


def cmd_datasets(args) -> None:
    from . import datasets

    for name in datasets.names():
        df = datasets.load(name)
        print(f"{name:24s} {len(df):6d} rows   columns: {', '.join(map(str, df.columns[:12]))}")


# the posterior's advice speaks Python; its command-line spelling
CLI_SPELLING = {"method='nuts'": "--method nuts", "num_warmup/num_samples": "--warmup/--samples",
                "num_samples": "--samples"}


def _cli_advice(post) -> str:
    advice = (post.diagnostics.get("advice") or ["see the diagnostics"])[0]
    for python, cli in CLI_SPELLING.items():
        advice = advice.replace(python, cli)
    return advice


def _unconverged_label(post) -> str:
    failed = post.diagnostics.get("failed") or ["see the diagnostics"]
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"NOT CONVERGED: {failed[0]}{more}"


def cmd_posterior(args) -> None:
    from .bayes import fit_posterior, use_chain_devices

    checks.check_fit_options(args.law, num_chains=args.chains, num_warmup=args.warmup,
                             num_samples=args.samples)
    _check_writable(args.out, "--out")
    _check_writable(args.figure, "--figure")
    df = _read_table(args.table, args.query)
    use_chain_devices(args.chains)  # one CPU device per chain: parallel chains
    what = (f"posterior of {args.law}: mode search, then "
            + (f"NUTS ({args.chains} chains x {args.warmup} warmup + {args.samples} draws)"
               if args.method == "nuts" else f"Laplace ({args.chains * args.samples} draws)"))
    with _step(what), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported below, once
        post = fit_posterior(args.law, df, method=args.method, likelihood=args.likelihood,
                             num_chains=args.chains, num_warmup=args.warmup,
                             num_samples=args.samples, seed=args.seed,
                             progress_bar=sys.stderr.isatty())  # no bar lines in a log
    if not post.ok:
        if not args.allow_unconverged:
            raise BayesScalingError(
                f"the posterior of {post.law.name} failed its checks ({_unconverged_label(post)}); "
                f"nothing was written. Try: {_cli_advice(post)}; or pass --allow-unconverged to "
                "keep it, labelled NOT CONVERGED")
        post.idata.posterior.attrs["bayes_scaling_status"] = _unconverged_label(post)
        print(f"warning: {_unconverged_label(post)}; kept because of --allow-unconverged",
              file=sys.stderr)
        print(_unconverged_label(post))
    post.save(args.out)
    print(repr(post))
    print(post.summary().to_string())
    print(f"saved {args.out}")
    if args.figure:
        from .plots import fit_plot

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit_plot(post, df, path=args.figure)
        print(f"saved {args.figure}")


def cmd_forecast(args) -> None:
    _check_writable(args.out, "--out")
    _check_writable(args.figure, "--figure")
    post = _load_posterior(args.posterior)
    new = _read_table(args.table, None)
    if not post.ok and not args.allow_unconverged:
        raise BayesScalingError(
            f"{args.posterior} failed its convergence checks ({_unconverged_label(post)}); its "
            "intervals may be wrong. Refit it (see `bayes-scaling posterior`), or pass "
            "--allow-unconverged to forecast anyway, labelled NOT CONVERGED")
    with _step(f"forecast of {len(new)} rows"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # labelled below
        fc = post.forecast(new, interval=args.interval, kind=args.kind, seed=args.seed)
    table = pd.concat([new.reset_index(drop=True), fc.reset_index(drop=True)], axis=1)
    if not post.ok:
        table["posterior_status"] = "NOT CONVERGED"
        print(f"warning: {_unconverged_label(post)}; forecast kept because of "
              "--allow-unconverged (column posterior_status)", file=sys.stderr)
    if args.out is not None:
        table.to_csv(args.out, index=False)
        print(f"saved {args.out}")
    else:
        print(table.to_csv(index=False), end="")
    if args.figure:
        from .plots import forecast_plot

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            forecast_plot(post, new, interval=args.interval, kind=args.kind, path=args.figure)
        print(f"saved {args.figure}", file=sys.stderr if args.out is None else sys.stdout)


def _load_fit(path: str):
    """A saved Posterior (.nc) or MapFit (.json)."""
    from .fit import MapFit

    if not path.endswith(".json"):
        return _load_posterior(path)
    if not Path(path).is_file():
        raise DataError(f"{path}: no such file (a posterior .nc from `bayes-scaling "
                        "posterior` or a fit .json from `bayes-scaling fit --out`)")
    try:
        return MapFit.load(path)
    except LawError as e:
        raise _law_error(e, path) from None
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"cannot read {path} as a fit ({type(e).__name__}: {e}): it is not a "
                        "complete .json written by `bayes-scaling fit --out` (truncated or "
                        "edited?); write it again") from None


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
            if P.checkpoint_rows(base, args.N, args.ptpp).empty:  # the checkpoint is not measured
                base = P.pretraining_fit(base)
    # an infeasible request raises InfeasiblePlanError, whose message names the closest plan
    pl = P.adaptation(_load_fit(args.target), _load_fit(args.source), N=args.N, ptpp=args.ptpp,
                      max_forgetting=forgetting, target_loss=args.target_loss, prob=args.prob,
                      replay_bounds=args.replay_bounds, atpp_bounds=tuple(args.atpp_bounds),
                      source_base=base, allow_extrapolation=args.allow_extrapolation)
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
    for flag, value in (("--executor", args.executor), ("--ray-address", args.ray_address),
                        ("--out-dir", args.out_dir), ("--export", args.export)):
        if value is not None:
            cmd += [flag, value]
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


def _positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def _nonnegative_int(text: str) -> int:
    return _int_at_least(text, 0)


def _int_at_least(text: str, least: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"must be an integer >= {least}, got {v}")
    return v


def _interval(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"must be a probability in (0, 1), e.g. 0.9; got {text!r}")
    return v


def cmd_design(args) -> None:
    folder = Path(args.task_dir)
    task_name = folder.name
    laws = args.laws or list(scalebench.task_laws(task_name))
    tables = []
    with get_executor(args.executor, workers=args.workers, address=args.ray_address) as executor:
        for law_id in laws:
            task = design.scalebench_task(task_name, law_id, data_dir=folder.parent,
                                          budgets=args.budgets)
            for method in args.methods:
                res = design.run(task, method=method, seeds=range(args.seeds), executor=executor)
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
    s.add_argument("--executor", choices=("serial", "local", "ray"), default="serial",
                   help="where the seeds run: in this process, a local process pool "
                        "(--workers) or a Ray cluster")
    s.add_argument("--workers", type=int, default=2, help="processes of the local pool")
    s.add_argument("--ray-address", help="Ray cluster to join ('auto'); none: start one here")
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
                   help="Huber threshold on log residuals, > 0: 0.02 in the PTPP paper, 1e-3 in "
                        "the M3 paper")
    s.add_argument("--n-starts", type=_positive_int, default=64,
                   help="multi-start size: initial points drawn from each parameter's init range "
                        "(default 64)")
    s.add_argument("--seed", type=int, default=0, help="seed of the initial points (default 0)")
    s.add_argument("--method", choices=["jax", "scipy"], default="jax",
                   help="jax: all starts in one compiled L-BFGS program (default); scipy: the "
                        "papers' loop of L-BFGS-B runs")
    s.add_argument("--fixed", nargs="*", metavar="NAME=VALUE",
                   help="parameters held fixed, inside their bounds (see `bayes-scaling laws`)")
    s.add_argument("--query", help="pandas query selecting rows, e.g. \"domain == 'target' and D > 0\"")
    s.add_argument("--out", help="write the fit as JSON")
    s.add_argument("--figure", help="write observed losses and the fitted curves (PNG)")
    s.set_defaults(func=cmd_fit)

    s = sub.add_parser("posterior", help="posterior of a law on a loss table (NUTS or Laplace)")
    s.add_argument("table", help="CSV loss table in canonical columns, or dataset:NAME")
    s.add_argument("--law", required=True, help="registered law name (see `bayes-scaling laws`)")
    s.add_argument("--out", required=True, help="netCDF file (.nc) for the posterior")
    s.add_argument("--method", choices=["nuts", "laplace"], default="nuts",
                   help="nuts: MCMC (default); laplace: Gaussian at the mode, fast, approximate")
    s.add_argument("--likelihood", choices=["huber", "student_t", "normal"], default="huber",
                   help="noise model of the log residuals (default huber)")
    s.add_argument("--chains", type=_positive_int, default=4,
                   help="NUTS chains, run in parallel, one per CPU device (default 4)")
    s.add_argument("--warmup", type=_nonnegative_int, default=1000,
                   help="NUTS warm-up iterations per chain (default 1000)")
    s.add_argument("--samples", type=_positive_int, default=1000,
                   help="draws kept per chain (default 1000; Laplace draws chains x samples)")
    s.add_argument("--seed", type=int, default=0,
                   help="seed of the mode search and the sampler (default 0)")
    s.add_argument("--query", help="pandas query selecting rows")
    s.add_argument("--allow-unconverged", action="store_true",
                   help="keep a posterior that fails its convergence checks, labelled NOT "
                        "CONVERGED (by default it is an error and nothing is written)")
    s.add_argument("--figure", help="write observed losses and the posterior's 90%% band (PNG)")
    s.set_defaults(func=cmd_posterior)

    s = sub.add_parser("forecast", help="forecast intervals of a saved posterior at new rows")
    s.add_argument("posterior", help="posterior .nc written by `bayes-scaling posterior`")
    s.add_argument("table", help="CSV of new rows (the law's columns)")
    s.add_argument("--interval", type=_interval, default=0.9,
                   help="central interval probability (default 0.9)")
    s.add_argument("--kind", choices=["predictive", "mean"], default="predictive",
                   help="predictive: a new measured loss (default); mean: the law's value")
    s.add_argument("--seed", type=int, default=0, help="seed of the predictive noise (default 0)")
    s.add_argument("--out", help="write the table here (CSV) instead of printing it")
    s.add_argument("--allow-unconverged", action="store_true",
                   help="forecast from a posterior that failed its convergence checks, labelled "
                        "in a posterior_status column")
    s.add_argument("--figure", help="write the forecast bands at the new rows (PNG)")
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
                                         "(CSV or dataset:NAME) with D == 0 rows (of the "
                                         "checkpoint, else of others: a pre-training law is "
                                         "fitted to them)")
    s.add_argument("--replay-bounds", type=float, nargs=2, metavar=("LO", "HI"),
                   help="replay search range (default: the replay range both fits were fitted "
                        "on; 0 1 when a fit does not record it)")
    s.add_argument("--atpp-bounds", type=float, nargs=2, default=(1e-2, 1e3))
    s.add_argument("--allow-extrapolation", action="store_true",
                   help="accept a plan outside the fitted N, D, replay or PTPP range (labelled); "
                        "by default it is refused with the distance")
    s.add_argument("--out", help="write the plan as JSON")
    s.add_argument("--figure", help="write the paper's Figure 2 for the plan (PNG)")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("demo", help="fit Chinchilla on the bundled Epoch points and print metrics")
    s.add_argument("--n-starts", type=_positive_int, default=64,
                   help="multi-start size (default 64)")
    s.add_argument("--seed", type=int, default=0, help="seed of the initial points (default 0)")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("datasets", help="list bundled loss tables")
    s.set_defaults(func=cmd_datasets)

    s = sub.add_parser("train", help="run or resume a training sweep from a TOML config")
    s.add_argument("config", help="sweep config, e.g. training/configs/ptpp.toml")
    s.add_argument("--workers", type=int, default=1, help="independent runs in parallel")
    s.add_argument("--executor", choices=("serial", "local", "ray"),
                   help="where runs execute: serial, local (--workers processes) or ray "
                        "(default: serial for --workers 1, else local)")
    s.add_argument("--ray-address", help="Ray cluster to join ('auto'); none: start one here")
    s.add_argument("--out-dir", help="override the config's out_dir (on a cluster: a path every "
                                     "node reads)")
    s.add_argument("--export", help="also write the loss table to this CSV at the end")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("analyses", help="regenerate the tables and figures under analyses/out/")
    s.add_argument("--quick", action="store_true", help="fast subset")
    s.add_argument("--only", nargs="*", help="analysis script names without .py")
    s.add_argument("--jobs", type=int, help="scripts run at once (default 2)")
    s.set_defaults(func=cmd_analyses)
    add_design_parser(sub)

    for name in LAW_MODULE_COMMANDS:
        sub.choices[name].add_argument(
            "--law-module", action="append", metavar="FILE.py",
            help="import this Python file first; the laws it registers "
                 "(bayes_scaling.laws.register) can then be named (repeatable)")
    return p


def import_law_modules(paths) -> None:
    """Import each Python file in ``paths`` (run for its ``register`` calls); one clear error
    naming the file and line when it is missing or fails."""
    for path in paths or ():
        p = Path(path)
        if not p.is_file() or p.suffix != ".py":
            raise OptionError(f"--law-module {path}: no such Python file; give a .py file that "
                              "defines laws and registers them with bayes_scaling.laws.register")
        spec = importlib.util.spec_from_file_location(f"bayes_scaling_law_module_{p.stem}", p)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BayesScalingError:
            raise
        except Exception as e:  # noqa: BLE001  (the user's file: say where it failed)
            where = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(p)]
            line = f" line {where[-1].lineno}" if where else ""
            raise OptionError(
                f"--law-module {path}{line} failed: {type(e).__name__}: {e}") from None


@contextlib.contextmanager
def _each_warning_once():
    """Print each warning once per command, as one ``warning: ...`` block on stderr."""
    seen = set()

    def show(message, category, filename, lineno, file=None, line=None):
        if (category, str(message)) not in seen:
            seen.add((category, str(message)))
            print(f"warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse printed the usage error (or --help) already
        return int(e.code or 0)
    try:
        with _each_warning_once():
            import_law_modules(getattr(args, "law_module", None))
            # plan's own steps print nothing while it loads and searches
            with _step("plan") if args.command == "plan" else contextlib.nullcontext():
                rc = args.func(args)
    except BayesScalingError as e:
        hint = ""
        if (isinstance(e, LawError) and args.command in LAW_MODULE_COMMANDS
                and "--law-module" not in e.message):
            hint = "; for a law of your own, pass --law-module FILE.py (the file that registers it)"
        print(f"error: {e.message}{hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
