"""The ``bayes-scaling`` commands that run jobs: training sweeps (``train``), the analyses
(``analyses``), experiment design (``design``: the next runs to buy from a user's pool, or the
ScaleBench selection protocol on a task folder) and model comparison (``compare``)."""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd

import scaleout

from . import design, scalebench
from .bayes import fit_posterior
from .cli_input import (
    check_writable,
    load_posterior_file,
    nonnegative_int,
    positive_int,
    read_table,
    source_tree_script,
)
from .compare import compare as loo_compare
from .errors import ConvergenceWarning, OptionError
from .laws import get as get_law


def cmd_train(args) -> int:
    # training/ is a separate package (DESIGN.md rule 7): run it as its own process.
    cmd = [sys.executable, "-m", "training", "sweep", args.config, "--workers", str(args.workers)]
    for flag, value in (("--executor", args.executor), ("--ray-address", args.ray_address),
                        ("--out-dir", args.out_dir), ("--export", args.export)):
        if value is not None:
            cmd += [flag, value]
    return subprocess.call(cmd)


def cmd_analyses(args) -> int:
    cmd = [sys.executable, str(source_tree_script("analyses", "run_all.py"))]
    if args.quick:
        cmd.append("--quick")
    if args.only:
        cmd += ["--only", *args.only]
    if args.jobs is not None:
        cmd += ["--jobs", str(args.jobs)]
    return subprocess.call(cmd)


def cmd_design(args) -> None:
    if not Path(args.source).is_dir():
        return cmd_recommend(args)
    if args.law or args.budget:
        raise OptionError(f"{args.source} is a ScaleBench task folder: --law, --budget, --cost, "
                          "--targets belong to a pool CSV (the folder's laws are --laws)")
    folder = Path(args.source)
    task_name = folder.name
    laws = args.laws or list(scalebench.task_laws(task_name))
    tables = []
    with scaleout.from_arguments(args) as executor:
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


#: Columns ``design`` prints for a recommendation (the law's columns go after ``row``).
SHOWN = ["cost", "cum_cost", "expected_reduction", "reduction_per_cost", "expected_rmse_after"]


def cmd_recommend(args) -> None:
    """``design POOL.csv --law ... --budget ...``: the next runs to buy, printed in order, with a
    CSV (``--out``) and a figure (``--figure``)."""
    missing = [f for f, v in (("--law", args.law), ("--budget", args.budget),
                              ("--targets", args.targets)) if not v]
    if missing:
        raise OptionError(f"design on a pool CSV needs {', '.join(missing)} (e.g. --law "
                          "chinchilla --targets \"N >= 1e9\" --budget 10%%)".replace("%%", "%"))
    check_writable(args.out, "--out")
    check_writable(args.figure, "--figure")
    pool = read_table(args.source, args.query)
    targets = args.targets
    if targets.endswith(".csv") or Path(targets).is_file():
        targets = read_table(targets, None)
    law = get_law(args.law)
    rec = design.recommend(pool, law=law, cost=args.cost, targets=targets, budget=args.budget,
                           loss=args.loss, done=args.done, n_starts=args.n_starts, seed=args.seed,
                           **({} if args.simulate is None else {"simulate": args.simulate}))
    a = rec.attrs
    print(f"{law.name}: {a['n_done']} runs done, {a['n_candidates']} candidates, "
          f"{a['n_targets']} target rows; budget {a['budget']:.4g} (cost {args.cost})")
    print(f"expected squared error of the refit at the targets: {a['initial_error']:.4g} now "
          f"(rmse {(a['initial_error'] / a['n_targets']) ** 0.5:.4g} per target row)")
    if rec.empty:
        print("no affordable candidate lowers the expected error at the targets: buy nothing, "
              "or add candidates nearer the targets")
    else:
        cols = ["step", "row", *[law.column(v) for v in law.variables if law.column(v) in rec],
                *SHOWN]
        print(rec[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"spent {rec['cum_cost'].iloc[-1]:.4g} of {a['budget']:.4g}; greedy rule: "
              f"{a['greedy']}")
        if a.get("simulated_by_rule"):
            crit = a["criterion_rule"]
            print("plans refitted in simulated worlds, mean squared error at the targets: "
                  + ", ".join(f"{r} {e:.4g}" for r, e in a["simulated_by_rule"].items()))
            print("  per world, typically (geometric mean of the paired ratios) "
                  + ", ".join(f"{r} {t:.3g}x" for r, t in a["simulated_typical_ratio"].items())
                  + f" the criterion's plan ({crit}); "
                  + ("kept: no plan was 2x better both on average and typically, with the "
                     "paired evidence clear" if a["greedy"] == crit else
                     f"{a['greedy']} replaces it"))
    if args.out:
        rec.to_csv(args.out, index=False)
        print(f"saved {args.out}")
    if args.figure:
        design.recommend_figure(pool, rec, law=law, cost=args.cost, targets=targets,
                                loss=args.loss, done=args.done, path=args.figure)
        print(f"saved {args.figure}")


def add_design_parser(sub) -> None:
    s = sub.add_parser(
        "design", help="the next runs to buy from a pool CSV (runs done have a loss, candidates "
                       "an empty one), or the selection methods on a ScaleBench task folder "
                       "(train.csv, test.csv), one row per seed and budget")
    s.add_argument("source", metavar="POOL_OR_TASK_DIR",
                   help="a pool CSV (or dataset:NAME), or a ScaleBench task folder, e.g. "
                        ".../vocab_scaling_law")
    g = s.add_argument_group("a pool CSV: which runs to buy next")
    g.add_argument("--law", help="registered law name (or one from --law-module)")
    g.add_argument("--budget", help="cost to spend: a number, or a share of the candidates' "
                                    "total cost such as 10%%")
    g.add_argument("--targets", help="target rows: a CSV with the law's columns, or a pandas "
                                     "query selecting rows of the pool, e.g. \"N >= 1e9\"")
    g.add_argument("--cost", default="6*N*D",
                   help="cost of a run: a column, or an arithmetic formula of columns "
                        "(default 6*N*D)")
    g.add_argument("--loss", default="loss", help="the loss column (default loss); empty for "
                                                  "candidates unless --done is given")
    g.add_argument("--done", help="the runs done: a marker column (1/yes/done) or a pandas "
                                  "query, e.g. \"N < 4e8\"; the rest are candidates")
    g.add_argument("--query", help="pandas query selecting the pool's rows first")
    g.add_argument("--n-starts", type=positive_int, default=64, help="starts of the fit (default 64)")
    g.add_argument("--seed", type=int, default=0, help="seed of the starts (default 0)")
    g.add_argument("--simulate", type=nonnegative_int, metavar="M",
                   help="worlds drawn from the posterior in which the candidate plans are "
                        "refitted and compared (default: the method's; 0: the linearised "
                        "criterion alone; docs/design.md)")
    g.add_argument("--figure", help="write the pool and the runs to buy (PNG)")
    g = s.add_argument_group("a ScaleBench task folder: the selection protocol")
    g.add_argument("--laws", nargs="*", help="law ids (default: every law of the task)")
    g.add_argument("--methods", nargs="*", default=["bayes"], choices=list(design.METHODS))
    g.add_argument("--seeds", type=int, default=10, help="seeds 0 .. n-1")
    g.add_argument("--budgets", type=float, nargs="*", default=[0.01, 0.05, 0.1])
    s.add_argument("--out", help="write the table (recommendation or protocol rows) as CSV")
    scaleout.add_arguments(s, executor="serial", workers=2, what="seeds")
    s.set_defaults(func=cmd_design)


def cmd_compare(args) -> None:
    """Fit (or read) one posterior per law on the same table and rank them by PSIS-LOO."""
    check_writable(args.out, "--out")
    posts = {}
    if args.posteriors:
        if args.laws or args.table:
            raise OptionError("give either saved --posteriors or a table with --laws, not both")
        for path in args.posteriors:
            post = load_posterior_file(path)
            posts[f"{post.law.name} ({Path(path).name})" if post.law.name in posts
                  else post.law.name] = post
    else:
        if not args.table or not args.laws or len(args.laws) < 2:
            raise OptionError("compare needs a table and at least two --laws (or two or more "
                              "saved --posteriors)")
        twice = sorted({n for n in args.laws if args.laws.count(n) > 1})
        if twice:
            raise OptionError(f"--laws names {', '.join(twice)} more than once; give each law "
                              "once (at least two different laws)")
        df = read_table(args.table, args.query)
        for name in args.laws:
            print(f"posterior of {name} ({args.method}) ...", file=sys.stderr, flush=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # labelled below
                posts[name] = fit_posterior(name, df, method=args.method, seed=args.seed,
                                            num_chains=args.chains, num_warmup=args.warmup,
                                            num_samples=args.samples, allow_unconverged=True,
                                            progress_bar=False)
    table = loo_compare(posts)
    status = {k: ("ok" if getattr(p, "ok", True) else "failed its checks")
              for k, p in posts.items()}
    table["status"] = [status[k] for k in table.index]
    cols = ["rank", "elpd_loo", "se", "p_loo", "elpd_diff", "dse", "weight", "max_pareto_k",
            "n_bad_k", "status"]
    print(f"PSIS-LOO of each row's log loss ({len(posts)} models; weight: stacking)")
    print(table[cols].to_string(float_format=lambda v: f"{v:.4g}"))
    bad = [k for k, v in status.items() if v != "ok"]
    if bad:
        print(f"note: {', '.join(bad)} failed the posterior's checks; their LOO is shown, "
              "labelled", file=sys.stderr)
    if args.out:
        table.to_csv(args.out)
        print(f"saved {args.out}")


def add_compare_parser(sub) -> None:
    s = sub.add_parser("compare", help="rank several laws on one table by PSIS-LOO (elpd, "
                                       "Pareto k) with stacking weights")
    s.add_argument("table", nargs="?", help="CSV loss table, or dataset:NAME")
    s.add_argument("--laws", nargs="*", help="two or more law names")
    s.add_argument("--posteriors", nargs="*", metavar="P.nc",
                   help="saved posteriors fitted to the same rows, instead of a table and laws")
    s.add_argument("--method", choices=["nuts", "laplace"], default="nuts",
                   help="nuts (default) or laplace (fast, approximate)")
    s.add_argument("--chains", type=positive_int, default=4, help="NUTS chains (default 4)")
    s.add_argument("--warmup", type=nonnegative_int, default=1000,
                   help="NUTS warm-up iterations per chain (default 1000)")
    s.add_argument("--samples", type=positive_int, default=1000,
                   help="draws kept per chain (default 1000; Laplace draws chains x samples)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--query", help="pandas query selecting rows")
    s.add_argument("--out", help="write the comparison table as CSV")
    s.set_defaults(func=cmd_compare)
