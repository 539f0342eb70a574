"""The modelling commands of ``bayes-scaling``: laws, datasets, fit, demo, posterior, forecast,
plan."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import time
import warnings

import numpy as np
import pandas as pd

from . import checks, datasets, laws, plan
from .bayes import fit_posterior, forecast_summary, use_chain_devices
from .cli_input import check_writable, load_fit_file, load_posterior_file, parse_fixed, read_table
from .errors import BayesScalingError, ConvergenceWarning
from .fit import fit_map
from .plots import fit_plot, forecast_plot


@contextlib.contextmanager
def step(what: str):
    """One status line on stderr before a long step and one with its time after it."""
    print(f"{what} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    yield
    print(f"{what}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def print_fit(fit, df) -> None:
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


def cmd_laws(args) -> None:
    for name in laws.names():
        print(laws.get(name).describe())
        print()


def cmd_fit(args) -> None:
    fixed = parse_fixed(args.fixed)
    checks.check_fit_options(args.law, delta=args.delta, n_starts=args.n_starts, fixed=fixed)
    check_writable(args.out, "--out")
    check_writable(args.figure, "--figure")
    df = read_table(args.table, args.query)
    with step(f"MAP fit of {args.law} ({args.n_starts} starts)"):
        fit = fit_map(args.law, df, delta=args.delta, n_starts=args.n_starts, seed=args.seed,
                      fixed=fixed or None, method=args.method, target_shift=args.target_shift)
    print_fit(fit, df)
    print_shift(fit)
    if args.out:
        fit.save(args.out)
        print(f"saved {args.out}")
    if args.figure:
        fit_plot(fit, df, path=args.figure)
        print(f"saved {args.figure}")


#: The demo's forecast target: Chinchilla itself (Hoffmann et al. 2022), a model the table does not
#: contain: 70B parameters trained on 1.4T tokens.
DEMO_TARGET = {"N": 70e9, "D": 1.4e12}
#: Tokens per parameter of the demo's fan chart: Chinchilla's compute-optimal rule of thumb.
DEMO_TOKENS_PER_PARAM = 20.0
#: Epoch AI's published estimate of the law on the same points (Besiroglu et al. 2024).
EPOCH_ESTIMATE = {"E": 1.817, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}


def _sides(signature: str) -> str:
    """A discrepancy signature (``"D+,N+"``, ``"hull N+0.9 D+0.4"``) in words."""
    if not signature:
        return "inside the table"
    if signature.startswith("hull"):
        return "beyond the table's hull (each input within its range, the combination not)"
    parts = []
    for side, word in (("+", "above"), ("-", "below")):
        cols = sorted((s[:-1] for s in signature.split(",") if s.endswith(side)), reverse=True)
        if cols:
            parts.append(f"{' and '.join(cols)} {word}")
    return ", ".join(parts) + " its range"


def _giga(x: float) -> str:
    return f"{x / 1e12:.3g}T" if x >= 1e12 else f"{x / 1e9:.3g}B"


def cmd_demo(args) -> None:
    """Chinchilla's law on Epoch's points: a posterior, the forecast at Chinchilla itself (70B
    parameters, 1.4T tokens) with its 90% interval, how far that extrapolates, where the
    interval's width comes from, and a fan chart along 20 tokens per parameter."""
    from .bayes.intervals import extrapolation, fitted_table, input_columns
    from .plots import fan_chart

    check_writable(args.figure, "--figure")
    df = datasets.load("chinchilla_epoch")
    kept = df[df["epoch_kept"]].reset_index(drop=True)
    print(f"Chinchilla's law L = E + A/N^alpha + B/D^beta on the {len(kept)} runs of Hoffmann et "
          f"al. (2022) that Epoch AI\nre-extracted and kept (N up to {_giga(kept.N.max())} "
          f"parameters, D up to {_giga(kept.D.max())} tokens); Huber likelihood on log losses.")
    what = ("posterior: mode search, then " + (f"NUTS (2 chains x {args.draws} draws)"
            if args.method == "nuts" else f"Laplace ({args.draws} draws)"))
    with step(what), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported below
        if args.method == "nuts":
            use_chain_devices(2)
        post = fit_posterior("chinchilla", kept, method=args.method, seed=args.seed,
                             num_chains=2 if args.method == "nuts" else 1,
                             num_warmup=args.draws, num_samples=args.draws,
                             progress_bar=False, allow_unconverged=True)
    print(f"\n{post!r}" + ("" if post.ok else f"  <- {unconverged_label(post)}; shown labelled"))
    print(f"\n  {'':6s} {'median':>8s}  {'90% interval':^20s}  {'Epoch':>7s}")
    for name in [*post.param_names]:
        lo, med, hi = np.quantile(post.draws(name), [0.05, 0.5, 0.95])
        ref = f"{EPOCH_ESTIMATE[name]:7.4g}" if name in EPOCH_ESTIMATE else ""
        print(f"  {name:6s} {med:8.4g}  [{lo:8.4g}, {hi:8.4g}]  {ref}")

    target = pd.DataFrame({k: [v] for k, v in DEMO_TARGET.items()})
    with step("forecast at 70B parameters, 1.4T tokens (rehearsing the extrapolation on the "
              "table)"):
        full = post.forecast(target, 0.9, seed=args.seed)
    params = post.forecast(target, 0.9, kind="mean", discrepancy="off", seed=args.seed)
    noise = post.forecast(target, 0.9, discrepancy="off", seed=args.seed)
    f = full.iloc[0]
    big = kept.loc[(kept.N * kept.D).idxmax()]
    _, sig = extrapolation(fitted_table(post), target, input_columns(post.law))
    print(f"\nForecast for Chinchilla itself, N = 70B parameters, D = 1.4T tokens (not in the "
          f"table):\n  loss {f['median']:.3f}, 90% interval [{f['lower']:.3f}, {f['upper']:.3f}]"
          f"  (a new measurement; the law's median {params['median'].iloc[0]:.3f})")
    print(f"  extrapolation: distance {f['extrapolation']:.2f} fitted widths (log space) beyond "
          f"the table, {_sides(sig[0])}\n  the table's largest run (by compute): N = "
          f"{_giga(big.N)}, D = {_giga(big.D)} tokens, "
          f"{DEMO_TARGET['N'] * DEMO_TARGET['D'] / (big.N * big.D):.0f}x less compute")
    rows = [("parameter uncertainty (the law's value)", params),
            ("+ observation noise", noise), ("+ model discrepancy (the default interval)", full)]
    var = [float(r["sd"].iloc[0]) ** 2 for _, r in rows]
    print("\n  Why it is that wide: the 90% interval as each source is added")
    print(f"  {'':44s} {'width':>6s}  {'share of variance':>17s}")
    for i, (label, r) in enumerate(rows):
        share = (var[i] - (var[i - 1] if i else 0.0)) / var[-1]
        print(f"  {label:44s} {float(r['upper'].iloc[0] - r['lower'].iloc[0]):6.3f}  "
              f"{100 * share:16.0f}%")
    unit = ("decade" if str(f["discrepancy_basis"]).startswith("tau prior only")
            else "fitted width")
    print(f"  discrepancy: tau {f['discrepancy_tau']:.3g} per {unit}, shift "
          f"{f['discrepancy_shift']:+.3g} (log loss)\n  its basis: {f['discrepancy_basis']}")

    C = 6.0 * kept.N * kept.D
    N = np.geomspace(np.sqrt(C.min() / (6 * DEMO_TOKENS_PER_PARAM)), 1.5 * DEMO_TARGET["N"], 200)
    line = pd.DataFrame({"N": N, "D": DEMO_TOKENS_PER_PARAM * N})
    line["C"] = 6.0 * line.N * line.D
    with step(f"fan chart along D = {DEMO_TOKENS_PER_PARAM:g} N ({len(line)} points)"):
        fan_chart(post, line, "C", data=kept.assign(C=C), points=target.assign(C=6.0 * target.N
                                                                               * target.D),
                  xlabel="training compute C = 6 N D (FLOPs)", seed=args.seed, path=args.figure,
                  title=f"Chinchilla's law on Epoch's {len(kept)} runs: forecast along D = "
                        f"{DEMO_TOKENS_PER_PARAM:g} N, and Chinchilla (70B, 1.4T)")
    print(f"\nfan chart (50/80/90% bands along D = {DEMO_TOKENS_PER_PARAM:g} N, the runs, the "
          f"70B forecast): {os.path.abspath(args.figure)}")


def cmd_datasets(args) -> None:
    for name in datasets.names():
        df = datasets.load(name)
        print(f"{name:24s} {len(df):6d} rows   columns: {', '.join(map(str, df.columns[:12]))}")


# the posterior's advice speaks Python; its command-line spelling
CLI_SPELLING = {"method='nuts'": "--method nuts", "num_warmup/num_samples": "--warmup/--samples",
                "num_samples": "--samples"}


def cli_advice(post) -> str:
    advice = (post.diagnostics.get("advice") or ["see the diagnostics"])[0]
    for python, cli in CLI_SPELLING.items():
        advice = advice.replace(python, cli)
    return re.sub(r"fixed=\{'(\w+)': value\}", r"--fixed \1=VALUE", advice)


def unconverged_label(post) -> str:
    failed = post.diagnostics.get("failed") or ["see the diagnostics"]
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"NOT CONVERGED: {failed[0]}{more}"


def cmd_posterior(args) -> None:
    checks.check_fit_options(args.law, num_chains=args.chains, num_warmup=args.warmup,
                             num_samples=args.samples)
    check_writable(args.out, "--out")
    check_writable(args.figure, "--figure")
    df = read_table(args.table, args.query)
    use_chain_devices(args.chains)  # one CPU device per chain: parallel chains
    what = (f"posterior of {args.law}: mode search, then "
            + (f"NUTS ({args.chains} chains x {args.warmup} warmup + {args.samples} draws)"
               if args.method == "nuts" else f"Laplace ({args.chains * args.samples} draws)"))
    with step(what), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported below, once
        post = fit_posterior(args.law, df, method=args.method, likelihood=args.likelihood,
                             num_chains=args.chains, num_warmup=args.warmup,
                             num_samples=args.samples, seed=args.seed,
                             time_limit=args.time_limit, target_shift=args.target_shift,
                             scale=args.scale,
                             progress_bar=sys.stderr.isatty())  # no bar lines in a log
    if not post.ok:
        if not args.allow_unconverged:
            raise BayesScalingError(
                f"the posterior of {post.law.name} failed its checks ({unconverged_label(post)}); "
                f"nothing was written. Try: {cli_advice(post)}; or pass --allow-unconverged to "
                "keep it, labelled NOT CONVERGED")
        post.idata.posterior.attrs["bayes_scaling_status"] = unconverged_label(post)
        print(f"warning: {unconverged_label(post)}; kept because of --allow-unconverged",
              file=sys.stderr)
        print(unconverged_label(post))
    post.save(args.out)
    print(repr(post))
    print(post.summary().to_string())
    print_shift(post)
    print(f"saved {args.out}")
    if args.figure:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit_plot(post, df, path=args.figure)
        print(f"saved {args.figure}")


def print_shift(fit) -> None:
    """Say so when a signed target was fitted as ``loss + c`` (``target_shift``)."""
    if fit.target_shift:
        print(f"signed target: fitted as loss + {fit.target_shift:g} (the likelihood is on log "
              "loss; parameters and forecasts are in the target's own units, in-sample log "
              "metrics of loss + c)")


def cmd_forecast(args) -> None:
    check_writable(args.out, "--out")
    check_writable(args.figure, "--figure")
    post = load_posterior_file(args.posterior)
    new = read_table(args.table, None)
    if not post.ok and not args.allow_unconverged:
        raise BayesScalingError(
            f"{args.posterior} failed its convergence checks ({unconverged_label(post)}); its "
            "intervals may be wrong. Refit it (see `bayes-scaling posterior`), or pass "
            "--allow-unconverged to forecast anyway, labelled NOT CONVERGED")
    with step(f"forecast of {len(new)} rows"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # labelled below
        fc = post.forecast(new, interval=args.interval, kind=args.kind, seed=args.seed,
                           allow_unconverged=args.allow_unconverged)
    table = pd.concat([new.reset_index(drop=True), fc.reset_index(drop=True)], axis=1)
    if not post.ok:
        print(f"warning: {unconverged_label(post)}; forecast kept because of "
              "--allow-unconverged (column posterior_status)", file=sys.stderr)
    if args.out is not None:
        table.to_csv(args.out, index=False)
        print(f"saved {args.out}")
    else:
        print(table.to_csv(index=False), end="")
    print(forecast_summary(table), file=sys.stderr if args.out is None else sys.stdout)
    if args.figure:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            forecast_plot(post, new, interval=args.interval, kind=args.kind, path=args.figure)
        print(f"saved {args.figure}", file=sys.stderr if args.out is None else sys.stdout)


def cmd_plan(args) -> None:
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
            base = read_table(base, None)
            if plan.checkpoint_rows(base, args.N, args.ptpp).empty:  # checkpoint not measured
                base = plan.pretraining_fit(base)
    # an infeasible request raises InfeasiblePlanError, whose message names the closest plan
    pl = plan.adaptation(load_fit_file(args.target), load_fit_file(args.source), N=args.N,
                         ptpp=args.ptpp, max_forgetting=forgetting, target_loss=args.target_loss,
                         prob=args.prob, replay_bounds=args.replay_bounds,
                         atpp_bounds=tuple(args.atpp_bounds), source_base=base,
                         allow_extrapolation=args.allow_extrapolation)
    print(repr(pl))
    if args.out:
        pl.save(args.out)
        print(f"saved {args.out}")
    if args.figure:
        plan.plot_adaptation(pl, path=args.figure)
        print(f"saved {args.figure}")
