"""Posteriors on the bundled real tables: Epoch's Chinchilla points and the datablations ridge.

1. Epoch Chinchilla (the 240 points Epoch kept): posterior 95% intervals of alpha, beta, E under
   the default model (Huber likelihood, c = 1.345, sigma fitted) and a Student-t likelihood,
   side by side with Epoch's bootstrap intervals (Besiroglu et al. 2024).
2. datablations (Muennighoff et al. 2023, 182 runs): the posterior of (R_D*, R_N*) with the base
   (A, B, E, alpha = beta) frozen at the published values, as in the published fit. It shows the
   ridge along which point fits wander: the published (15.39, 5.31) and a point near (55, 2.15).

Writes analyses/out/bayes_real/summary.md, epoch_fit.png, datablations_ridge.png,
datablations_fit.png. ``--quick`` uses the Laplace approximation instead of NUTS.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bayes_scaling as bs  # noqa: E402
from bayes_scaling import bayes as B  # noqa: E402

OUT = ROOT / "analyses" / "out" / "bayes_real"
EPOCH_BOOTSTRAP = {"alpha": (0.317, 0.373), "beta": (0.331, 0.415), "E": (1.769, 1.871)}
MUEN_BASE = {k: bs.laws.get("muennighoff").example[k] for k in ("A", "B", "E", "alpha", "beta")}
RIDGE_POINTS = {"published": (15.387756, 5.309743), "ridge": (55.0, 2.15)}


def _fit(law, df, quick, **kw):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bs.fit_posterior(law, df, method="laplace" if quick else "nuts",
                                progress_bar=False, **kw)
    return post, time.perf_counter() - t


def _diag(post, secs):
    d = post.diagnostics
    if post.method == "nuts":
        return (f"NUTS 4x1000: max R-hat {d['max_rhat']:.3f}, min bulk ESS {d['min_ess_bulk']:.0f}, "
                f"min tail ESS {d['min_ess_tail']:.0f}, {d['divergences']} divergences, "
                f"{secs:.0f} s, {'converged' if post.ok else 'NOT converged'}")
    return f"Laplace: Pareto k {d['pareto_k']:.2f}, {secs:.0f} s"


def epoch(quick):
    df = bs.datasets.load("chinchilla_epoch")
    kept = df[df["epoch_kept"]].reset_index(drop=True)
    lines = ["## Epoch Chinchilla (240 points): 95% intervals", ""]
    posts = {}
    for lik in ("huber", "student_t"):
        posts[lik] = _fit("chinchilla", kept, quick, likelihood=lik, seed=0)
    lines += ["| parameter | Epoch bootstrap | posterior (Huber, default) | posterior (Student-t) |",
              "|---|---|---|---|"]
    for k, (lo, hi) in EPOCH_BOOTSTRAP.items():
        cells = []
        for lik, (post, _) in posts.items():
            x = post.draws(k)
            q = np.quantile(x, [0.025, 0.5, 0.975])
            cells.append(f"{q[0]:.3f} – {q[2]:.3f} (median {q[1]:.3f})")
        lines.append(f"| {k} | {lo:.3f} – {hi:.3f} | {cells[0]} | {cells[1]} |")
    lines.append("")
    for lik, (post, secs) in posts.items():
        lines.append(f"- {lik}: {_diag(post, secs)}; sigma (log-residual scale) "
                     f"{np.median(post.draws('sigma')):.4f}, MAP "
                     + ", ".join(f"{k}={v:.4g}" for k, v in post.map.items()))
    bs.plots.fit_plot(posts["huber"][0], kept, path=OUT / "epoch_fit.png")
    return lines


def datablations(quick):
    from bayes_scaling.objective import huber

    df = bs.datasets.load("datablations")
    law = bs.laws.get("muennighoff")
    post, secs = _fit(law, df, quick, fixed=MUEN_BASE, seed=0)
    rd, rn = post.draws("RD_star"), post.draws("RN_star")
    lines = ["## datablations: posterior of (R_D*, R_N*), base frozen at the published values", "",
             f"- {_diag(post, secs)}",
             f"- R_D*: median {np.median(rd):.2f}, 95% interval {np.quantile(rd, 0.025):.2f} – "
             f"{np.quantile(rd, 0.975):.2f}; R_N*: median {np.median(rn):.2f}, 95% interval "
             f"{np.quantile(rn, 0.025):.2f} – {np.quantile(rn, 0.975):.2f}",
             f"- correlation of log R_D* and log R_N* over the draws: "
             f"{np.corrcoef(np.log(rd), np.log(rn))[0, 1]:+.2f} (the ridge)", "",
             "| point (R_D*, R_N*) | Huber objective (delta 1e-3) | log posterior density "
             "(unnormalised, sigma at its median) | draws within 20% of it (both coordinates) |",
             "|---|---|---|---|"]
    sigma = float(np.median(post.draws("sigma")))
    spec = B.make_spec(law, fixed=MUEN_BASE, coordinates=None)
    data = B.data_pytree(spec, df)
    for name, (a, b) in RIDGE_POINTS.items():
        p = {**MUEN_BASE, "RD_star": a, "RN_star": b}
        r = np.log(np.asarray(law(p, df))) - np.log(df["loss"].to_numpy())
        J = float(np.sum(np.asarray(huber(r, 1e-3))))
        u = spec.u({"RD_star": a, "RN_star": b, "sigma": sigma})
        lp = float(spec.log_joint(u, data, jacobian=False))
        near = float(np.mean((np.abs(rd / a - 1) < 0.2) & (np.abs(rn / b - 1) < 0.2)))
        lines.append(f"| {name} ({a:g}, {b:g}) | {J:.6f} | {lp:.2f} | {near:.1%} |")
    _ridge_plot(rd, rn, OUT / "datablations_ridge.png")
    bs.plots.parity_plot(post, df, path=OUT / "datablations_fit.png")
    return lines


def _ridge_plot(rd, rn, path):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 4.5), constrained_layout=True)
    ax = fig.subplots()
    ax.scatter(rd, rn, s=3, alpha=0.25, color="C0", label="posterior draws")
    for (name, (a, b)), m in zip(RIDGE_POINTS.items(), ("*", "D")):
        ax.scatter([a], [b], s=90, marker=m, color="C3" if name == "published" else "C1",
                   edgecolor="k", label=f"{name} ({a:g}, {b:g})", zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("R_D*")
    ax.set_ylabel("R_N*")
    ax.set_title("datablations: posterior of (R_D*, R_N*), base frozen", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    fig.savefig(str(path), dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Laplace instead of NUTS")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    lines = ["# Posteriors on real tables", "",
             f"Generated by `analyses/bayes_real.py{' --quick' if args.quick else ''}`.", ""]
    lines += epoch(args.quick) + [""] + datablations(args.quick)
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
