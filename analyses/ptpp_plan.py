"""The headline adaptation plan: the largest ``bible_ptpp`` model at PTPP 279.

    python analyses/ptpp_plan.py                                # defaults below
    python analyses/ptpp_plan.py --max-forgetting 2% --target-loss 2.2 --prob 0.9
    python analyses/ptpp_plan.py --synthetic                    # dry run on a synthetic table
    python analyses/ptpp_plan.py --scenario                     # the PTPP paper's scenario

``--scenario``: the PTPP paper's planning scenario (Sec. 4): forecast PTPP 279 from the PTPP 15
and 31 stages only, without and with anchors (every (replay, D) point of the smallest model at
PTPP 279, :data:`bs.evaluate.PAPER_ANCHORS`, added to both domains' fits), plan from each forecast,
and set the three plans beside the plan fitted on all three stages (``scenario.md``; each plan in
its own subfolder). Every plan asks for the same thresholds: the requested ones when the
all-stage fit can meet them, else what the all-stage fit's closest plan meets plus a stated margin
(``--margin-loss`` nats, ``--margin-forgetting`` percentage points; :func:`reachable_request`), so
that the three plans can be compared. A plan from a posterior that failed its convergence checks
says so in the first line of its summary.

The PTPP paper's Section 4 problem (Figure 2) on this project's own runs: the target (French)
loss with Form 3 (``ptpp_gated_floor``) and the source (English/Arabic) loss with Form 1
(``ptpp_floor``), as in the paper, each fitted to every adaptation row (D > 0) of its domain;
then ``bs.plan.adaptation`` for the largest model (N = non-embedding parameters, so ATPP is the
table's ``atpp``) at PTPP 279: the deterministic plan (median forecast) and the 90%
chance-constrained plan. The pre-adaptation source loss is the measured loss of the un-adapted
PTPP-279 checkpoint (its D = 0 row) when the table has it, else the pre-training law fitted to the
table's other D = 0 source rows (``bs.plan.adaptation``'s ``source_base=<table>``). Posteriors are
cached next to the outputs and refitted only when the rows change.

Default target loss: the median forecast at ATPP 16 with 25% replay (mid-grid), so the question
is "what is the cheapest way to reach what a mid-grid run reaches"; pass ``--target-loss`` to ask
your own. Writes ``analyses/out/ptpp_plan/[<tag>/]`` (``--synthetic``: ``ptpp_plan_synthetic/``):
plan.json, plan.csv, fig2_plan.png, summary.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bible_common as bc  # noqa: E402

from bayes_scaling import evaluate as ev  # noqa: E402
from bayes_scaling import plan as P  # noqa: E402

HERE = Path(__file__).resolve().parent


SCENARIOS = (("all_stages", "all", False), ("forecast", "15,31", False),
             ("forecast_anchors", "15,31", True))


def anchor_rows(df: pd.DataFrame, ptpp: float) -> pd.DataFrame:
    """The PTPP paper's anchors: every (replay, D) adaptation row of the smallest model at the
    planned stage (both domains)."""
    at = df[(df["D"] > 0) & np.isclose(df["ptpp"], ptpp)]
    return at[at["N"] == at["N"].min()]


def checks_line(fits: dict) -> str:
    """First line of a plan's summary when a posterior failed its convergence checks, else ''."""
    bad = [f"{dom} (`{post.law.name}`)" for dom, post in fits.items()
           if getattr(post, "diagnostics", None) and not post.ok]
    if not bad:
        return ""
    return (f"**Made from a posterior that failed its convergence checks: {', '.join(bad)}; "
            "its intervals and chance constraint are not to be trusted.**")


def reachable_request(needed: dict, margin_loss: float, margin_forgetting: float):
    """A request the all-stage plan can meet: the thresholds its closest plan meets
    (``InfeasiblePlanError.needed``) plus ``margin_loss`` nats on the target loss and
    ``margin_forgetting`` percentage points (or nats, for an absolute limit) on forgetting, rounded
    up to 1e-3. Returns ``(target_loss, max_forgetting)``."""
    tau = np.ceil((needed["target_loss"] + margin_loss) * 1e3) / 1e3
    value, relative = P.parse_forgetting(needed["max_forgetting"])
    if relative:
        return float(tau), f"+{np.ceil((100 * value + margin_forgetting) * 1e3) / 1e3:g}%"
    return float(tau), float(np.ceil((value + margin_forgetting) * 1e3) / 1e3)


def run_plan(df, args, out: Path, fit_stages="all", anchors=False) -> dict:
    """One adaptation plan (the target and source posteriors fitted on ``fit_stages``, plus the
    anchors when asked); writes summary.md (and plan.json, plan.csv, fig2_plan.png) to ``out``.
    Returns the numbers the scenario table shows."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cov = bc.coverage_report(df)
    adapt = df[df["D"] > 0]
    if fit_stages != "all":
        stages = [float(s) for s in fit_stages.split(",")]
        adapt = adapt[np.isin(adapt["ptpp"], stages)]
    n_anchor = 0
    if anchors:
        extra = anchor_rows(df, args.ptpp)
        n_anchor = len(extra) // max(1, extra["domain"].nunique())
        adapt = pd.concat([adapt, extra])
    if adapt.empty or adapt["ptpp"].nunique() < 2:
        msg = f"not enough stages to fit PTPP-aware laws: {cov}"
        (out / "summary.md").write_text(f"# Adaptation plan\n\nNot run: {msg}\n")
        print(msg)
        return {"status": f"not run: {msg}"}
    kw = json.loads(args.posterior_kw)
    N = float(df[bc.SIZE].max())  # largest model, non-embedding parameters
    fits, diag = {}, []
    for dom, lname in (("target", args.target_law), ("source", args.source_law)):
        d = adapt[adapt["domain"] == dom]
        fits[dom], how = bc.cached_posterior(bc.nonemb_law(lname), d, out / f"posterior_{dom}.nc",
                                             seed=0, kind=args.posterior, posterior_kw=kw)
        note = bc.diagnostics_note(fits[dom])
        if note:
            diag.append(note)
    first = checks_line(fits)
    base_rows = df[(df["D"] == 0) & (df["domain"] == "source")]
    source_base = (None if base_rows.empty
                   else df if len(P.checkpoint_rows(df, N, args.ptpp, n_col=bc.SIZE))
                   else P.pretraining_fit(df, n_col=bc.SIZE))
    tau = args.target_loss
    if tau is None:
        row = pd.DataFrame({bc.SIZE: [N], "D": [16 * N], "replay": [0.25], "ptpp": [args.ptpp]})
        tau = float(np.nanmedian(P.predict_draws(fits["target"], row)))
    stage_note = ("fitted on every stage present" if fit_stages == "all"
                  else f"fitted on PTPP {fit_stages} only (forecast)")
    if n_anchor:
        stage_note += f" plus {n_anchor} anchors per domain (smallest model at PTPP {args.ptpp:g})"
    stage_note += f" (PTPP {', '.join(f'{p:g}' for p in sorted(adapt['ptpp'].unique()))})"
    if diag:
        stage_note += "; " + "; ".join(diag)
    forecast = args.ptpp not in cov["stages"] or fit_stages != "all"
    if args.extrapolate:
        rb, ab = (0.0, 1.0), (0.1, 1000.0)
    else:  # the box the fitted rows cover
        rb = (float(adapt["replay"].min()), float(adapt["replay"].max()))
        atpp = adapt["D"] / adapt[bc.SIZE]
        ab = (float(atpp.min()), float(atpp.max()))
    box = f"replay in [{rb[0]:g}, {rb[1]:g}], ATPP in [{ab[0]:.3g}, {ab[1]:.3g}]"
    stage_note += f"; search box {box}" + (" (extrapolating)" if args.extrapolate else
                                           " (the range of the fitted rows)")
    head = [first, ""] if first else []
    result = {"fitted on": stage_note.split(" (PTPP")[0], "checks": "failed" if first else "passed",
              "target loss <=": tau, "forgetting <=": str(args.max_forgetting)}
    try:
        plan = P.adaptation(fits["target"], fits["source"], N=N, ptpp=args.ptpp,
                            max_forgetting=args.max_forgetting, target_loss=tau, prob=args.prob,
                            source_base=source_base, replay_bounds=rb, atpp_bounds=ab,
                            allow_extrapolation=args.extrapolate or forecast)
    except P.InfeasiblePlanError as e:
        text = "\n".join(head) + (
            f"# Adaptation plan, N = {N:.0f}, PTPP {args.ptpp:g}\n\n{stage_note}"
            + (" (a forecast: no PTPP-279 adaptation rows used)" if forecast else "")
            + f"; posterior: {how}; target loss <= {tau:.4f}"
            + (" (default: the median forecast at ATPP 16, 25% replay)"
               if args.target_loss is None else "") + f".\n\nInfeasible: {e}\n")
        (out / "summary.md").write_text(text)
        print(text)
        # an infeasible request is a result (written, with the closest plan), not an error
        return {**result, "status": "infeasible", "needed": e.needed}
    plan.save(out / "plan.json")
    plan.to_frame().to_csv(out / "plan.csv", index=False)
    P.plot_adaptation(plan, path=out / "fig2_plan.png")
    d, c = plan.deterministic, plan.chance
    lines = head + [
        f"# Adaptation plan: largest `bible_ptpp` model at PTPP {args.ptpp:g}"
        + (" (SYNTHETIC dry run)" if args.synthetic else ""), "",
        f"Target law `{args.target_law}`, source law `{args.source_law}`, {stage_note}"
        + (" -- a forecast of PTPP 279, not fitted on its rows" if forecast else "")
        + f". Posterior: {how}. N = {N:.0f} non-embedding parameters; rows used: "
        f"{len(adapt)}. Constraints: forgetting <= {args.max_forgetting}, target loss <= "
        f"{tau:.4f}" + (" (default: the median forecast at ATPP 16, 25% replay)"
                         if args.target_loss is None else "") +
        f". L_src,0 = {plan.source_base['median']:.4f} ({plan.source_base_method}). "
        f"Run time {time.time() - t0:.0f} s.", "",
        "| plan | ATPP | replay | FLOPs | target loss (90% int.) | forgetting (90% int.) "
        "| P(target) | P(forgetting) |",
        "|---|---|---|---|---|---|---|---|"]
    for p in (d, c):
        if p is None:
            continue
        f = p.forgetting_rel
        t = p.target_loss
        lines.append(f"| {p.kind} | {p.atpp:.3f} | {100 * p.replay:.1f}% | {p.flops:.3e} | "
                     f"{t['median']:.4f} [{t['lower']:.4f}, {t['upper']:.4f}] | "
                     f"{100 * f['median']:+.2f}% [{100 * f['lower']:+.2f}%, "
                     f"{100 * f['upper']:+.2f}%] | {p.p_target:.2f} | {p.p_forgetting:.2f} |")
        result[f"{p.kind}: ATPP, replay"] = f"{p.atpp:.3f}, {100 * p.replay:.1f}%"
    if c is not None:
        lines += ["", f"Price of certainty (p = {args.prob:g}): "
                      f"x{plan.price_of_certainty:.2f} FLOPs."]
    lines += ["", "Figure: `fig2_plan.png` (the PTPP paper's Figure 2 with probability contours)."]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print(repr(plan))
    print("\n".join(lines))
    return {**result, "status": "planned"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--scenario", action="store_true",
                    help="the PTPP paper's scenario: all stages, and PTPP 15, 31 without and with "
                         "anchors (subfolders, scenario.md)")
    ap.add_argument("--ptpp", type=float, default=279.0)
    ap.add_argument("--max-forgetting", default="+2%")
    ap.add_argument("--target-loss", type=float, default=None)
    ap.add_argument("--prob", type=float, default=0.9)
    ap.add_argument("--margin-loss", type=float, default=0.01,
                    help="--scenario: nats added to the target loss the all-stage fit can reach "
                         "when the request is out of its reach")
    ap.add_argument("--margin-forgetting", type=float, default=1.0,
                    help="--scenario: percentage points added to the forgetting the all-stage fit "
                         "can reach when the request is out of its reach")
    ap.add_argument("--target-law", default="ptpp_gated_floor")
    ap.add_argument("--source-law", default="ptpp_floor")
    ap.add_argument("--fit-stages", default="all", help="'all' or e.g. '15,31' (forecast mode)")
    ap.add_argument("--anchors", action="store_true",
                    help="add the smallest model's PTPP-279 rows to the fits (with --fit-stages)")
    ap.add_argument("--posterior", default="auto", choices=("auto", "nuts", "laplace"))
    ap.add_argument("--posterior-kw", default="{}")
    ap.add_argument("--tag", default="", help="write the results to a subfolder of this name")
    ap.add_argument("--extrapolate", action="store_true",
                    help="search replay in [0, 1] and ATPP in [0.1, 1000] instead of the ranges "
                         "the fitted rows cover (the laws are not validated outside them)")
    args = ap.parse_args(argv)
    base_out = HERE / "out" / ("ptpp_plan_synthetic" if args.synthetic else "ptpp_plan")
    out = base_out / args.tag if args.tag else base_out
    df = bc.load(args.synthetic)
    if not args.scenario:
        res = run_plan(df, args, out, args.fit_stages, args.anchors)
        return 1 if res["status"].startswith("not run") else 0
    request = "the requested thresholds"
    first = run_plan(df, args, out / SCENARIOS[0][0], SCENARIOS[0][1], SCENARIOS[0][2])
    if first["status"] == "infeasible":
        asked = f"target loss <= {first['target loss <=']:.4f}, forgetting <= {args.max_forgetting}"
        request = (f"{asked} is out of reach of the all-stage fit itself, so every plan asks for "
                   "what the all-stage fit's closest plan meets plus a margin of "
                   f"{args.margin_loss:g} nats and {args.margin_forgetting:g} percentage points")
    n_relax = 0
    for n_relax in range(3):  # the median plan's thresholds, then the chance plan's (cached fits)
        if first["status"] != "infeasible":
            break
        args.target_loss, args.max_forgetting = reachable_request(
            first["needed"], args.margin_loss, args.margin_forgetting)
        first = run_plan(df, args, out / SCENARIOS[0][0], SCENARIOS[0][1], SCENARIOS[0][2])
    if n_relax > 1:
        request += f" (relaxed {n_relax} times: the median plan's, then the chance plan's needs)"
    # one request for every scenario: the first plan's (by default the all-stage forecast's)
    args.target_loss = first.get("target loss <=", args.target_loss)
    rows = [{"scenario": SCENARIOS[0][0], **first}]
    for name, stages, anchors in SCENARIOS[1:]:
        rows.append({"scenario": name, **run_plan(df, args, out / name, stages, anchors)})
    table = pd.DataFrame(rows).drop(columns="needed", errors="ignore")
    cmd = "python analyses/ptpp_plan.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        f"Generated by: `{cmd.strip()}`", "",
        f"# The PTPP paper's planning scenario: PTPP {args.ptpp:g} planned from a forecast", "",
        "Each row is one adaptation plan for the largest `bible_ptpp` model at PTPP "
        f"{args.ptpp:g} (details, first line flagging failed posterior checks, and figure in the "
        "scenario's subfolder): fitted on all three stages; forecast from PTPP 15 and 31 only; "
        "the same forecast with the smallest model's PTPP-279 rows as anchors. Every plan asks "
        f"for target loss <= {args.target_loss:.4f} and forgetting <= {args.max_forgetting} "
        f"({request}).", "",
        ev.markdown_table(table, digits=4), ""])
    (out / "scenario.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
