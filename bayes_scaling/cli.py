"""The ``bayes-scaling`` command line.

    bayes-scaling laws                                    list laws with equations and parameters
    bayes-scaling fit --law NAME table.csv --delta D      robust MAP fit; prints params and metrics
    bayes-scaling demo                                    Chinchilla's posterior and 70B forecast
    bayes-scaling datasets                                list bundled loss tables
    bayes-scaling posterior --law NAME table.csv --out p.nc   posterior (NUTS or Laplace), saved
    bayes-scaling forecast p.nc new.csv [--interval 0.9]  forecast intervals at new rows
    bayes-scaling plan --target T --source S --N N --ptpp P --max-forgetting 2% --target-loss L
                       [--prob 0.9]                       adaptation plan (PTPP paper Sec. 4)
    bayes-scaling train CONFIG [--workers N]              run/resume a training sweep (training/)
    bayes-scaling analyses [--quick] [--only NAME ...] [--jobs N]  regenerate analyses/out/
    bayes-scaling design pool.csv --law NAME --targets "N >= 1e9" --budget 10% [--cost 6*N*D]
                       [--done COL|QUERY] [--out rec.csv] [--figure rec.png]   next runs to buy
    bayes-scaling design TASK_DIR [--methods bayes ...]  ScaleBench selection protocol
    bayes-scaling compare table.csv --laws A B [--method laplace]   PSIS-LOO and stacking weights

Bad input ends with one line on stderr, ``error: ...`` (what, where, how to fix), and exit code 2.
``--law-module my_laws.py`` (fit, posterior, forecast, plan, design, compare) imports a Python
file that registers laws with ``bayes_scaling.laws.register``, so they can be used by name.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import warnings

import scaleout

from .cli_commands import (
    cmd_datasets,
    cmd_demo,
    cmd_fit,
    cmd_forecast,
    cmd_laws,
    cmd_plan,
    cmd_posterior,
    step,
)
from .cli_input import (import_law_modules, nonnegative_int, positive_int, positive_number,
                        positive_seconds, probability)
from .cli_runs import add_compare_parser, add_design_parser, cmd_analyses, cmd_train
from .errors import BayesScalingError, LawError

LAW_MODULE_COMMANDS = ("fit", "posterior", "forecast", "plan", "design", "compare")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bayes-scaling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("laws", help="list registered laws with equations and parameters")
    s.set_defaults(func=cmd_laws)

    SHIFT_HELP = ("a signed target (a loss minus a baseline) is fitted as loss + C: C, or 0 to "
                  "refuse a loss at or below 0 (default: C picked from the table when some loss "
                  "is at or below 0)")
    s = sub.add_parser("fit", help="robust MAP fit of a law to a loss table")
    s.add_argument("table", help="CSV loss table in canonical columns, or dataset:NAME")
    s.add_argument("--law", required=True, help="registered law name (see `bayes-scaling laws`)")
    s.add_argument("--delta", type=float, required=True,
                   help="Huber threshold on log residuals, > 0: 0.02 in the PTPP paper, 1e-3 in "
                        "the M3 paper")
    s.add_argument("--n-starts", type=positive_int, default=64,
                   help="multi-start size: initial points drawn from each parameter's init range "
                        "(default 64)")
    s.add_argument("--seed", type=int, default=0, help="seed of the initial points (default 0)")
    s.add_argument("--method", choices=["jax", "scipy"], default="jax",
                   help="jax: all starts in one compiled L-BFGS program (default); scipy: the "
                        "papers' loop of L-BFGS-B runs")
    s.add_argument("--fixed", nargs="*", metavar="NAME=VALUE",
                   help="parameters held fixed, inside their bounds (see `bayes-scaling laws`)")
    s.add_argument("--query",
                   help="pandas query selecting rows, e.g. \"domain == 'target' and D > 0\"")
    s.add_argument("--target-shift", type=float, metavar="C", help=SHIFT_HELP)
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
    s.add_argument("--scale", type=positive_number, metavar="SIGMA",
                   help="fix the likelihood's scale of the log residuals (e.g. 0.001: 0.1%%) "
                        "instead of learning it; for a table with no noise to learn it from")
    s.add_argument("--chains", type=positive_int, default=4,
                   help="NUTS chains, run in parallel, one per CPU device (default 4)")
    s.add_argument("--warmup", type=nonnegative_int, default=1000,
                   help="NUTS warm-up iterations per chain (default 1000)")
    s.add_argument("--samples", type=positive_int, default=1000,
                   help="draws kept per chain (default 1000; Laplace draws chains x samples)")
    s.add_argument("--seed", type=int, default=0,
                   help="seed of the mode search and the sampler (default 0)")
    s.add_argument("--query", help="pandas query selecting rows")
    s.add_argument("--target-shift", type=float, metavar="C", help=SHIFT_HELP)
    s.add_argument("--time-limit", type=positive_seconds, metavar="SECONDS",
                   help="stop sampling once this many seconds have passed (a run drawing then "
                        "stops and keeps its draws; a retry predicted to pass them is not made) "
                        "and refuse, saying so (default: no limit)")
    s.add_argument("--allow-unconverged", action="store_true",
                   help="keep a posterior that fails its convergence checks, labelled NOT "
                        "CONVERGED (by default it is an error and nothing is written)")
    s.add_argument("--figure", help="write observed losses and the posterior's 90%% band (PNG)")
    s.set_defaults(func=cmd_posterior)

    s = sub.add_parser("forecast", help="forecast intervals of a saved posterior at new rows")
    s.add_argument("posterior", help="posterior .nc written by `bayes-scaling posterior`")
    s.add_argument("table", help="CSV of new rows (the law's columns)")
    s.add_argument("--interval", type=probability, default=0.9,
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

    s = sub.add_parser("demo", help="Chinchilla on Epoch's bundled points: a posterior, the "
                                    "forecast at 70B parameters and 1.4T tokens with its 90%% "
                                    "interval and where its width comes from, a fan chart")
    s.add_argument("--draws", type=positive_int, default=1000,
                   help="posterior draws (default 1000; NUTS: per chain, after as many warm-up)")
    s.add_argument("--method", choices=("laplace", "nuts"), default="laplace",
                   help="posterior approximation (default laplace)")
    s.add_argument("--seed", type=int, default=0, help="seed of the posterior and forecasts")
    s.add_argument("--figure", default="demo_fan_chart.png",
                   help="where to write the fan chart (PNG; default demo_fan_chart.png)")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("datasets", help="list bundled loss tables")
    s.set_defaults(func=cmd_datasets)

    s = sub.add_parser("train", help="run or resume a training sweep from a TOML config")
    s.add_argument("config", help="sweep config, e.g. training/configs/ptpp.toml")
    scaleout.add_arguments(s, executor=None, workers=1, what="runs", compile_cache=False)
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
    add_compare_parser(sub)

    for name in LAW_MODULE_COMMANDS:
        sub.choices[name].add_argument(
            "--law-module", action="append", metavar="FILE.py",
            help="import this Python file first; the laws it registers "
                 "(bayes_scaling.laws.register) can then be named (repeatable)")
    return p


@contextlib.contextmanager
def each_warning_once():
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
        with each_warning_once():
            import_law_modules(getattr(args, "law_module", None))
            # plan's own steps print nothing while it loads and searches
            with step("plan") if args.command == "plan" else contextlib.nullcontext():
                rc = args.func(args)
    except BayesScalingError as e:
        hint = ""
        if (isinstance(e, LawError) and args.command in LAW_MODULE_COMMANDS
                and e.message.startswith("unknown law") and "--law-module" not in e.message):
            hint = "; for a law of your own, pass --law-module FILE.py (the file that registers it)"
        print(f"error: {e.message}{hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
