"""The posterior suite: a reference posterior and the default engine's result on every
(law, table) pair the project can form, stored as summaries so it can be rerun whenever the
engine changes (in the spirit of posteriordb).

Cases (``--list`` prints them in the order they run; ``--only REGEX`` and ``--max-cases`` pick):

- ``sim/<law>/r<k>``: a table simulated from a law with known parameters drawn from its default
  priors (``sigma`` too; draws whose losses are not a loss table are redrawn: ``prior_truth``),
  40 rows of a real table's design, Huber noise of the drawn ``sigma`` (the likelihood's own
  noise); the default posterior's 90% intervals are scored for coverage of the true values
  (simulation-based calibration: over the drawn truths they must cover 90%);
- ``scalebench/<task>[/<group>]/<law>``: the 31 ScaleBench laws on their task's pool (each group
  of a grouped task alone; the vocabulary task's target, the unigram-normalised loss, is
  negative: ``fit_posterior`` fits it shifted, ``target_shift``);
- ``paper/<table>/<subset>/<law>``: every registered law on the bundled tables it applies to,
  with the papers' subsets (chinchilla_epoch's ``epoch_kept`` rows; Gadre's c4_val per training
  corpus; datablations; mixing_laws_cpt per domain; bible_ptpp per domain on the training PTPPs
  15 and 31; bible_m3 per language pair on the M3 paper's setting of each law, the two-phase laws
  with the Chinchilla base fixed at its MAP fit on the phase-1 rows);
- ``extra/<table>/...``: the Chinchilla law on the extra tables of ``../shared/datasets`` where
  its columns exist (porian_isoflop per configuration, misfitting_li2025's final checkpoints,
  polypythia's loss curves); regmix is listed and skipped (no N or D variation);
- ``user/<table>/<law>``: six laws written as a new user would write them
  (``benchmarks/user_laws.py``: Kaplan et al. 2020 Eq. 1.5, Chinchilla with a user's own bounds,
  a powered sum, compute alone, log-linear, power terms of either sign; none registered, none
  declaring linear coefficients, coordinate blocks or prior references) on three real tables
  (chinchilla_epoch's kept rows, Gadre's c4_val rows of the rpj corpus, one porian_isoflop
  configuration): what the default engine does with a law it was never told about; and a
  law of other inputs on its own table (Ye et al.'s data mixing law on three validation domains
  of their three-domain mixtures, proportions that are 0 on some runs).

Per case and role (one JSON line each in ``benchmarks/out/posteriors/results.jsonl``):

- ``reference``: ``bs.fit_posterior`` with ``REFERENCE`` (8 chains of 2000 warm-up steps and
  1000 draws: twice the default warm-up and total draws; acceptance target 0.995), marked ``no reference`` when it fails its own checks;
  stored as mean, sd, 5/50/95% quantiles, MCSE of the mean, bulk ESS and R-hat of each
  parameter and of the law's value at ``value_rows`` (the table's largest row and the same row
  with every size column times 10);
- ``default``: ``bs.fit_posterior(law, table, seed=s, progress_bar=False)`` at seeds 0, 1, 2
  with the same summaries, whether it converged (and why not), its wall time and, on simulated
  tables, which true values its 90% intervals cover.

Each (case, role) runs in a subprocess with a wall-clock cap, a reference also with a cap of
``--ref-cpu`` CPU seconds (300: about five minutes of one core, whatever the machine's load); a
run over its cap is marked ``timeout``, not retried. The summary compares each default run with the reference:
``|mean_default - mean_ref| / sqrt(mcse_default^2 + mcse_ref^2)`` per parameter (within 3 is
agreement), and writes ``summary.md``.

Usage:
    nice -n 15 .venv/bin/python benchmarks/posteriors.py [--only REGEX] [--max-cases N]
        [--roles reference default] [--redo-default [--no-reference]] [--ref-timeout S]
        [--summary-only]
    .venv/bin/python benchmarks/posteriors.py --list
    .venv/bin/python benchmarks/posteriors.py --probe CASE SEED [--probe-draws 200]

``--redo-default`` reruns the default engine (seeds 0, 1, 2) on every selected case with a
finished reference (with ``--no-reference``, every selected case), once per engine version (the
last commit that changed ``bayes_scaling/``, ``+dirty`` with uncommitted changes there): a
default line already measured on it is kept. The summary reads the latest line of each (case,
role, seed).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import time
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bayes_scaling as bs  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from user_laws import BY_NAME as USER_BY_NAME, LAWS as USER_LAWS, LR_LAW, SIMULATED_LAWS  # noqa: E402

OUT = ROOT / "benchmarks" / "out" / "posteriors"
RESULTS = OUT / "results.jsonl"
SUMMARY = OUT / "summary.md"
SHARED = ROOT.parent / "shared" / "datasets"

SEEDS = (0, 1, 2)
REFERENCE = dict(num_chains=8, num_warmup=2000, num_samples=1000, target_accept=0.995)
REFERENCE_SEED = 12345
SIM_ROWS = 40
INTERVAL = 0.9
MCSE_Z = 3.0
#: goals of the suite's totals
GOALS = dict(converged=97.0, within=95.0, coverage=(85.0, 95.0), seconds=10.0)
QUANTILES = (0.05, 0.5, 0.95)


# ==================================================================================================
# Cases


@dataclass
class Built:
    """What a case fits: the table, the law's fixed parameters, and (simulated) the truth."""

    table: pd.DataFrame
    fixed: dict = field(default_factory=dict)
    truth: dict | None = None
    note: str = ""


@dataclass
class Case:
    name: str
    family: str          # the law family the totals are grouped by
    kind: str            # simulated | scalebench | paper | extra | user
    law_name: str        # a registered law's name, or "<task>/<id>" of a ScaleBench law
    build: Callable[[], Built] | None = None
    skip: str | None = None

    def law(self):
        if self.law_name.startswith("user_"):
            return USER_BY_NAME[self.law_name[len("user_"):]]
        if "/" in self.law_name:
            task, law_id = self.law_name.rsplit("/", 1)
            return bs.scalebench.get(task, law_id)
        return bs.laws.get(self.law_name)


def _family(law_name: str) -> str:
    if "/" in law_name:
        return "scalebench:" + law_name.rsplit("/", 1)[0].replace("_scaling_law", "")
    if law_name.startswith(("ptpp", "dcpt")):
        return "ptpp" + ("_m3" if law_name.endswith("_m3") else "")
    if law_name in ("chinchilla",):
        return "chinchilla"
    if law_name == "muennighoff":
        return "muennighoff"
    return "m3"


def _sample_rows(df, n, seed):
    if len(df) <= n:
        return df.reset_index(drop=True)
    idx = np.random.default_rng(seed).choice(len(df), n, replace=False)
    return df.iloc[np.sort(idx)].reset_index(drop=True)


# --- real tables ----------------------------------------------------------------------------------
def epoch():
    df = bs.datasets.load("chinchilla_epoch")
    return df[df["epoch_kept"]].reset_index(drop=True)


def gadre(train_set):
    g = bs.datasets.load("gadre_overtraining")
    return g[(g["domain"] == "c4_val") & (g["train_set"] == train_set)].reset_index(drop=True)


def mixing(domain):
    df = bs.datasets.load("mixing_laws_cpt")
    return df[~df["is_base"] & (df["D"] > 0) & (df["domain"] == domain)].reset_index(drop=True)


#: mixing_laws_cpt holds one model size: the N term of D-CPT is a constant there (as in
#: analyses/forecast_honesty.py)
CONSTANT_N_TERM = {"A": 1e-9, "alpha": 0.5}


def bible_ptpp(domain):
    """The PTPP paper's fitting rows: adaptation rows (D > 0) at the training PTPPs 15 and 31."""
    df = bs.datasets.load("bible_ptpp")
    return df[(df["D"] > 0) & (df["domain"] == domain)
              & df["ptpp"].isin((15, 31))].reset_index(drop=True)


def bible_m3(pair):
    df = bs.datasets.load("bible_m3")
    df = df.assign(ptpp=df["D_1"] / df["N_nonemb"])  # as analyses/m3_common.load_table
    return df[df["pair"] == pair].reset_index(drop=True)


#: The M3 paper's setting of each law (analyses/m3_common.SETTINGS) and its fitting mode.
M3_ROWS = {
    "a": lambda d: d["n_stages"] <= 2,
    "c": lambda d: (d["n_stages"] == 1) & (d["r"] >= 1),
    "d2o": lambda d: (d["n_stages"] == 2) & (d["k"] <= 1) & (d["r"] < 1),
}
M3_LAWS = {  # law: (setting, mode)
    "chinchilla_m3": ("a", "one"), "he": ("a", "two"), "he_dual": ("a", "two"),
    "muennighoff_m3": ("a", "two"), "atlas": ("a", "two"), "sedova": ("a", "one"),
    "m3": ("a", "two"), "m3_nodual": ("a", "two"), "m3_nog": ("a", "two"),
    "m3_hlp": ("a", "two"), "m3_r1": ("a", "two"), "m3_rmk": ("c", "two"),
    "m3_rmk_hlp": ("c", "two"), "m3_rmkr_nog": ("a", "two"), "m3_rmkr": ("a", "two"),
    "m3_rmk_g": ("a", "two"), "dcpt_m3": ("d2o", "one"), "ptpp_floor_m3": ("d2o", "one"),
    "ptpp_gated_m3": ("d2o", "one"), "ptpp_gated_floor_m3": ("d2o", "one"), "zhang": ("d2o", "one"),
}
M3_BASE = ("A", "B", "alpha", "beta", "E")


def m3_phase1(df):
    """M3 App. C.2.4 phase 1: monolingual (r = 1), low-epoch (k <= 4), single-stage rows."""
    return df[(df["r"] >= 1) & (df["k"] <= 4) & (df["n_stages"] == 1)]


def _m3_build(law_name, pair):
    setting, mode = M3_LAWS[law_name]

    def build():
        df = bible_m3(pair)
        table = df[np.asarray(M3_ROWS[setting](df), bool)].reset_index(drop=True)
        fixed, note = {}, f"M3 setting ({setting}) rows of {pair}"
        if mode == "two":
            base = bs.fit_map("chinchilla_m3", m3_phase1(df), delta=1e-3, n_starts=16, seed=0)
            fixed = {k: float(base.params[k]) for k in M3_BASE}
            note += "; base (A, B, alpha, beta, E) fixed at the chinchilla_m3 MAP fit on the phase-1 rows"
        return Built(table, fixed, None, note)

    return build


# --- simulated tables -----------------------------------------------------------------------------
def _sim_design(law_name):
    """The real table whose rows (inputs only) a simulated table of ``law_name`` is laid on."""
    if law_name == "chinchilla":
        return epoch()
    if law_name == "muennighoff":
        return bs.datasets.load("datablations")
    if law_name == "dcpt":
        return mixing("target")
    if law_name in ("ptpp_floor", "ptpp_gated_floor"):
        return bible_ptpp("target")
    if law_name == "he":
        return bible_m3("fr-en").pipe(lambda d: d[d["n_stages"] <= 1]).reset_index(drop=True)
    raise KeyError(law_name)


SIM_LAWS = ("chinchilla", "muennighoff", "dcpt", "ptpp_floor", "he", "ptpp_gated_floor")
#: A simulated table is a language-model loss table: every row's noiseless loss in this range (nats)
SIM_LOSS_RANGE = (0.5, 20.0)
SIM_TRIES = 2000
#: How the simulated tables' truths are chosen; lines of simulated cases written under another
#: choice (before: the law's example or a MAP fit) stay in the results file and are not read.
SIM_TRUTH = "prior"


def simulate(law, design, truth, sigma, seed):
    """``design`` with ``loss = f(truth, x) exp(sigma eps)``, ``eps`` drawn from the Huber
    likelihood's standard density (the model's own noise), seeded."""
    import jax

    mean = np.asarray(law(truth, design), float)
    eps = np.asarray(bs.bayes.standard_noise("huber", jax.random.PRNGKey(seed), (len(design),)))
    return design.assign(loss=mean * np.exp(sigma * eps))


def prior_truth(law, design, seed, tries=SIM_TRIES):
    """A truth drawn from the default priors (every parameter and ``sigma``): the draws of
    simulation-based calibration, so the default posterior's 90% intervals must cover 90% of
    them on average. Draws whose noiseless losses on ``design`` are not all in
    :data:`SIM_LOSS_RANGE` (not a loss table) are redrawn.

    Returns:
        (truth, draws tried).
    """
    import jax

    priors = bs.bayes.default_priors(law)
    lo, hi = SIM_LOSS_RANGE
    for k in range(tries):
        truth = bs.bayes.draw_prior(priors, jax.random.PRNGKey(1_000_003 * seed + k))
        with np.errstate(all="ignore"):
            mean = np.asarray(law({n: truth[n] for n in law.param_names}, design), float)
        if np.all(np.isfinite(mean)) and mean.min() >= lo and mean.max() <= hi:
            return truth, k + 1
    raise RuntimeError(f"no prior draw of {law.name} gives losses in {SIM_LOSS_RANGE} on the "
                       f"design in {tries} tries")


def _sim_build(law_name, rep):
    def build():
        law = bs.laws.get(law_name)
        design = _sample_rows(_sim_design(law_name), SIM_ROWS, 1000 + rep)
        truth, tried = prior_truth(law, design, zlib.crc32(law_name.encode()) % 100_000 + rep)
        table = simulate(law, design, truth, truth["sigma"], 2000 + rep)
        return Built(table, {}, truth,
                     f"truth drawn from the default priors ({tried} draw(s) for losses in "
                     f"{SIM_LOSS_RANGE[0]}-{SIM_LOSS_RANGE[1]}); {len(table)} rows; Huber noise "
                     f"sigma {truth['sigma']:.3g}")

    return build


# --- ScaleBench -----------------------------------------------------------------------------------
def _scalebench_build(task, group):
    def build():
        train, _ = bs.scalebench.load(task)
        if group is not None:
            train = train[train["group"] == group]
        table = train.rename(columns={bs.scalebench.TARGETS[task]: "loss"}) \
            if bs.scalebench.TARGETS[task] != "loss" else train
        return Built(table.reset_index(drop=True), {}, None, f"{task} pool"
                     + (f", group {group}" if group else ""))

    return build


# --- extra tables ---------------------------------------------------------------------------------
PORIAN_KEY = ("dataset", "hparams", "warmup", "decay", "param_count", "loss_type")
PYTHIA_N = {"14m-seed1": 14_067_712, "70m-seed1": 70_426_624, "160m-seed5": 162_322_944}
PYTHIA_TOKENS_PER_STEP = 2_097_152


def porian(key):
    df = pd.read_csv(SHARED / "porian_isoflop" / "porian_isoflop_points.csv")
    sel = np.ones(len(df), bool)
    for k, v in zip(PORIAN_KEY, key):
        sel &= df[k].astype(str).to_numpy() == v
    return df[sel].rename(columns={"n": "N", "t": "D"})[["loss", "N", "D", "flops"]] \
        .reset_index(drop=True)


def porian_keys():
    path = SHARED / "porian_isoflop" / "porian_isoflop_points.csv"
    if not path.exists():
        return []
    df = pd.read_csv(path, usecols=list(PORIAN_KEY))
    return [tuple(map(str, k)) for k in df.drop_duplicates().itertuples(index=False)]


def misfitting():
    """Final checkpoints; of the learning rates tried for a (model, token budget), the best."""
    df = pd.read_csv(SHARED / "misfitting_li2025" / "scaling_results_last_ckpt_only.csv")
    best = df.loc[df.groupby(["model", "train_tokens"])["loss"].idxmin()]
    return best[["loss", "N", "D", "model", "train_tokens", "peak_lr"]].reset_index(drop=True)


def misfitting_every_lr():
    """Final checkpoints at every peak learning rate tried, the rate as a column: 253 runs (of the
    file's 261 rows, 8 repeat another's loss, N, D and rate under another sweep's id)."""
    df = pd.read_csv(SHARED / "misfitting_li2025" / "scaling_results_last_ckpt_only.csv")
    df = df.drop_duplicates(["loss", "N", "D", "peak_lr"])
    return df[["loss", "N", "D", "peak_lr", "model"]].rename(columns={"peak_lr": "lr"}) \
        .reset_index(drop=True)


def _user_sim_build(name):
    def build():
        law, truth, design = SIMULATED_LAWS[name]
        sigma = 0.01
        table = simulate(law, design(), truth, sigma, zlib.crc32(name.encode()) % 100_000)
        return Built(table, {}, {**truth, "sigma": sigma},
                     f"simulated from stated values; {len(table)} rows; Huber noise sigma {sigma}")

    return build


def polypythia(points=20, first_step=1000):
    """Per size, the mean training loss over 100 steps around ``points`` log-spaced steps from
    ``first_step`` to the end (tokens = steps x 2,097,152): loss-curve points of three runs."""
    rows = []
    for name, n in PYTHIA_N.items():
        d = pd.read_csv(SHARED / "polypythia_train_loss" / f"{name}.tsv", sep="\t")
        d = d.dropna().sort_values("step")
        steps = np.unique(np.geomspace(first_step, d["step"].max(), points).round())
        for s in steps:
            w = d[(d["step"] > s - 100) & (d["step"] <= s)]
            if len(w):
                rows.append(dict(loss=float(w["train/lm_loss"].mean()), N=float(n),
                                 D=float(s) * PYTHIA_TOKENS_PER_STEP, step=int(s), run=name))
    return pd.DataFrame(rows)


# Laws a user would write (benchmarks/user_laws.py: no declared structure) on three real tables
USER_TABLES = (
    ("chinchilla_epoch", epoch, "epoch_kept rows"),
    ("gadre_overtraining", lambda: gadre("rpj"), "c4_val, train_set rpj"),
    ("porian_isoflop", lambda: porian(("rw", "base", "long", "kaplan", "kaplan", "train")),
     "IsoFLOP points (n, t) of one configuration"),
)


def data_mixing(domain, path="3Mix/410M.txt"):
    """Ye et al.'s three-domain mixtures (Github, Books3, Pile-CC; 32 runs of 410M parameters):
    the loss on the validation ``domain`` at the last checkpoint, against the training
    proportions r1, r2, r3 read from the run's name (``<id>-<r1>-<r2>-<r3>``)."""
    rows = []
    for line in open(SHARED / "data_mixing_laws" / "data" / path):
        ckpt, valid, loss = line.rstrip("\n").split("\t")
        run, step = ckpt.rstrip("/").split("/")[-2:]
        r = [float(v) for v in run.split("-")[1:]]
        rows.append(dict(run=run, step=int(step), domain=valid.split("/")[-1].split(".")[-2],
                         loss=float(loss), **{f"r{i + 1}": v for i, v in enumerate(r)}))
    df = pd.DataFrame(rows).drop_duplicates()
    df = df[df["domain"] == domain]
    return df[df["step"] == df["step"].max()].reset_index(drop=True)


#: Tables whose inputs only their own law reads: (table, loader, note, law of OWN_INPUT_LAWS)
OWN_TABLES = tuple(
    (f"data_mixing_laws-3mix-410m-{dom}", lambda dom=dom: data_mixing(dom),
     f"3Mix 410M runs, {dom} validation loss at the last checkpoint; proportions 0 on some runs",
     "mixing")
    for dom in ("Github", "Books3", "Pile-CC"))


def _fixed_build(load, fixed=None, note=""):
    return lambda: Built(load(), dict(fixed or {}), None, note)


def cases() -> list[Case]:
    """Every case, in the order they run: simulated tables (first replicate of each family, then
    the second), ScaleBench, the papers' tables, the extra tables, further simulated replicates."""
    out: list[Case] = []

    def sim(rep):
        for name in SIM_LAWS:
            out.append(Case(f"sim/{name}/r{rep}", _family(name), "simulated", name,
                            _sim_build(name, rep)))

    sim(0)
    sim(1)
    for task in bs.scalebench.TASKS:
        laws = bs.scalebench.task_laws(task)
        groups = [None]
        if task == "parallel_scaling_law":
            groups = ["stack", "pile"]
        for law_id in laws:
            for g in groups:
                tag = f"{task}/{g}/{law_id}" if g else f"{task}/{law_id}"
                out.append(Case(f"scalebench/{tag}", _family(f"{task}/x"), "scalebench",
                                f"{task}/{law_id}", _scalebench_build(task, g)))
    paper = [("chinchilla_epoch/kept", "chinchilla", _fixed_build(epoch, note="epoch_kept rows"))]
    paper += [("datablations/all", "muennighoff", _fixed_build(
        lambda: bs.datasets.load("datablations"), note="the 182-run fit set"))]
    paper += [(f"gadre_overtraining/c4_val-{ts}", "chinchilla",
               _fixed_build(lambda ts=ts: gadre(ts), note=f"c4_val, train_set {ts}"))
              for ts in ("c4_original", "rpj", "rw_original")]
    paper += [(f"mixing_laws_cpt/{dom}", "dcpt",
               _fixed_build(lambda dom=dom: mixing(dom), CONSTANT_N_TERM,
                            f"{dom} CPT rows; one model size, so A and alpha fixed"))
              for dom in ("target", "source")]
    paper += [(f"bible_ptpp/{dom}-ptpp15-31", law,
               _fixed_build(lambda dom=dom: bible_ptpp(dom), note=f"{dom}, D > 0, PTPP 15 and 31"))
              for dom in ("target", "source")
              for law in ("ptpp_floor", "ptpp_gated", "ptpp_gated_floor", "dcpt")]
    paper += [(f"bible_m3/{pair}-{M3_LAWS[law][0]}", law, _m3_build(law, pair))
              for law in M3_LAWS for pair in ("fr-en", "ar-en")]
    for tag, law, build in paper:
        out.append(Case(f"paper/{tag}/{law}", _family(law), "paper", law, build))
    out.append(Case("extra/misfitting_li2025/final-best-lr/chinchilla", "chinchilla", "extra",
                    "chinchilla", _fixed_build(misfitting, note="final checkpoints, best LR")))
    out.append(Case("extra/polypythia_train_loss/3-sizes/chinchilla", "chinchilla", "extra",
                    "chinchilla", _fixed_build(polypythia, note=(
                        "training-loss curves of one cosine schedule per size (not separately "
                        "trained runs), 20 log-spaced steps per size"))))
    for key in porian_keys():
        out.append(Case("extra/porian_isoflop/" + "-".join(key) + "/chinchilla", "chinchilla",
                        "extra", "chinchilla",
                        _fixed_build(lambda key=key: porian(key), note="IsoFLOP points (n, t)")))
    for table, load, note in USER_TABLES:
        for name in USER_LAWS:
            out.append(Case(f"user/{table}/{name}", "user", "user", f"user_{name}",
                            _fixed_build(load, note=note)))
    for table, load, note, name in OWN_TABLES:
        out.append(Case(f"user/{table}/{name}", "user", "user", f"user_{name}",
                        _fixed_build(load, note=note)))
    for name in SIMULATED_LAWS:
        out.append(Case(f"user/simulated/{name}", "user", "user", f"user_{name}",
                        _user_sim_build(name)))
    out.append(Case("user/misfitting_li2025/final-every-lr/lr_penalty", "user", "user",
                    LR_LAW.name, _fixed_build(misfitting_every_lr, note=(
                        "final checkpoints at every peak learning rate (253 distinct runs)"))))
    out.append(Case("extra/regmix/chinchilla", "chinchilla", "extra", "chinchilla",
                    skip="each RegMix table holds one model size and one token budget (the 60M "
                         "runs' budget is not stated): no N or D variation for L(N, D)"))
    for rep in (2, 3):
        sim(rep)
    return out


# ==================================================================================================
# Summaries of one posterior


def draw_summary(x) -> dict:
    """Mean, sd, 5/50/95% quantiles, MCSE of the mean, bulk ESS and R-hat of draws
    ``x`` of shape (chains, draws)."""
    import arviz as az

    x = np.asarray(x, float)
    flat = x.reshape(-1)
    q = np.quantile(flat, QUANTILES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcse = float(az.mcse(x, method="mean"))
        ess = float(az.ess(x, method="bulk"))
        rhat = float(az.rhat(x)) if x.shape[0] > 1 else float("nan")
    return dict(mean=float(flat.mean()), sd=float(flat.std(ddof=1)), q05=float(q[0]),
                q50=float(q[1]), q95=float(q[2]), mcse=mcse, ess_bulk=ess, r_hat=rhat)


def size_columns(law, table) -> list[str]:
    """The law's input columns whose every value exceeds 1 (sizes, tokens, PTPP, FLOPs)."""
    out = []
    for v in law.variables:
        c = law.column(v)
        if c in table and np.all(np.asarray(table[c], float) > 1):
            out.append(c)
    return out


def value_rows(law, table) -> pd.DataFrame:
    """Where the law's value is summarised: the table's largest row (the largest sum of log size
    columns) and that row with every size column times 10."""
    cols = [law.column(v) for v in law.variables]
    sizes = size_columns(law, table)
    t = table[cols]
    score = np.log(t[sizes].astype(float)).sum(axis=1) if sizes else pd.Series(0.0, index=t.index)
    big = t.loc[[score.idxmax()]].reset_index(drop=True)
    ext = big.copy()
    for c in sizes:
        ext[c] = ext[c] * 10.0
    return pd.concat([big, ext], ignore_index=True).set_axis(["largest", "x10"])


def posterior_summary(post, law, table) -> dict:
    """The stored summaries of a posterior: its parameters and the law's value at
    :func:`value_rows`."""
    pst = post.idata.posterior
    params = {n: draw_summary(np.asarray(pst[n])) for n in post.param_names}
    rows = value_rows(law, table)
    C = pst.sizes["chain"]
    values = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = post.predict_draws(rows.reset_index(drop=True), kind="mean", discrepancy="off",
                                   allow_unconverged=True)
        f = np.asarray(f).reshape(C, -1, len(rows))
        for j, label in enumerate(rows.index):
            values[label] = draw_summary(f[..., j])
    except Exception as exc:  # noqa: BLE001  (recorded, the parameters still count)
        values["error"] = f"{type(exc).__name__}: {exc}"
    return dict(params=params, values=values,
                value_rows=rows.reset_index().rename(columns={"index": "row"})
                .to_dict(orient="records"))


def coverage(params: dict, truth: dict, level=INTERVAL) -> dict:
    """``{name: whether the central interval holds the true value}`` for each parameter with a
    true value; the interval is q05..q95 of the stored summaries (``level`` 0.9)."""
    if abs(level - 0.9) > 1e-12:
        raise ValueError("the stored summaries hold the 5% and 95% quantiles only (level 0.9)")
    return {k: bool(s["q05"] <= truth[k] <= s["q95"]) for k, s in params.items() if k in truth}


def mcse_distance(a: dict, b: dict) -> float:
    """``|mean_a - mean_b| / sqrt(mcse_a^2 + mcse_b^2)``: how many Monte-Carlo standard errors of
    the difference separate two runs' estimates of a posterior mean (``inf`` when the means differ
    and both MCSEs are 0; ``nan`` when one is not finite)."""
    d = abs(a["mean"] - b["mean"])
    s = math.hypot(a["mcse"], b["mcse"])
    if not (math.isfinite(d) and math.isfinite(s)):
        return float("nan")
    if s == 0:
        return 0.0 if d == 0 else float("inf")
    return d / s


# ==================================================================================================
# Running one (case, role)


def _git(*args) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, text=True, capture_output=True,
                          check=True).stdout.strip()


def git_commit() -> str:
    """The short HEAD commit."""
    try:
        return _git("rev-parse", "--short", "HEAD")
    except Exception:  # noqa: BLE001
        return "unknown"


def engine_version() -> str:
    """The engine measured: the last commit that changed ``bayes_scaling/``, with ``+dirty`` when
    it has uncommitted changes (the engine is then that commit plus them). ``--redo-default``
    reruns what was not measured on this version."""
    try:
        head = _git("log", "-1", "--format=%h", "--", "bayes_scaling")
        dirty = _git("status", "--porcelain", "--", "bayes_scaling")
        return head + ("+dirty" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"


def load_average() -> str:
    try:
        return subprocess.run(["uptime"], text=True, capture_output=True).stdout.strip() \
            .split("load average:")[-1].strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def append(record: dict, path: Path = RESULTS) -> None:
    if record["case"].startswith("sim/"):
        record = {**record, "sim_truth": SIM_TRUTH}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(record, default=_jsonable) + "\n")


def _jsonable(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.bool_):
        return bool(x)
    return str(x)


def read_results(path: Path = RESULTS) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a killed run: the job is run again
            if rec["case"].startswith("sim/") and rec.get("sim_truth") != SIM_TRUTH:
                continue  # a simulated table of another truth: kept in the file, not read
            out.append(rec)
    return out


def latest(records) -> dict:
    """The last record of each ``(case, role, seed)``."""
    out = {}
    for r in records:
        out[(r["case"], r["role"], r["seed"])] = r
    return out


def pending(case: Case, role: str, records, *, redo_engine=None) -> list[int]:
    """The seeds of ``role`` still to run for ``case``: none when the case is skipped; for
    ``redo_engine`` (the default role rerun), the seeds without a line measured on that engine
    version (:func:`engine_version`)."""
    seeds = [REFERENCE_SEED] if role == "reference" else list(SEEDS)
    done = [r for r in records if r["case"] == case.name and r["role"] == role]
    if role == "default" and redo_engine is not None:
        done = [r for r in done if r.get("engine", r.get("commit")) == redo_engine]
    have = {r["seed"] for r in done}
    return [s for s in seeds if s not in have]


def run_role(case: Case, role: str, seeds, path: Path = RESULTS) -> None:
    """Fit ``case`` for ``role`` at ``seeds``, appending one line per seed."""
    warnings.simplefilter("ignore")
    law = case.law()
    built = case.build()
    base = dict(case=case.name, role=role, family=case.family, kind=case.kind, law=law.name,
                n_rows=len(built.table), fixed=built.fixed, note=built.note, truth=built.truth,
                commit=git_commit(), engine=engine_version(), host=platform.node(),
                command=os.environ.get("POSTERIOR_SUITE_COMMAND", ""))
    for seed in seeds:
        kw = dict(REFERENCE) if role == "reference" else {}
        rec = dict(base, seed=seed, settings=kw, load=load_average())
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            post = bs.fit_posterior(law, built.table, seed=seed, fixed=built.fixed or None,
                                    progress_bar=False, allow_unconverged=True, **kw)
        except Exception as exc:  # noqa: BLE001  (a failure is a result)
            rec.update(status="error", error=f"{type(exc).__name__}: {exc}"[:2000],
                       seconds=time.perf_counter() - t0)
            append(rec, path)
            continue
        seconds = time.perf_counter() - t0
        diag = post.diagnostics
        rec.update(seconds=seconds, cpu_seconds=time.process_time() - c0, converged=post.ok, failed=list(diag.get("failed", [])),
                   notes=list(diag.get("notes", [])), modes=int(diag.get("modes_found", 1)),
                   divergences=diag.get("divergences"), max_rhat=diag.get("max_rhat"))
        rec.update(posterior_summary(post, law, built.table))
        if role == "reference":
            rec["status"] = "ok" if post.ok else "no reference"
        else:
            rec["status"] = "converged" if post.ok else "not converged"
            if built.truth:
                rec["covered"] = coverage(rec["params"], built.truth)
        append(rec, path)


def probe(case: Case, seed: int, draws: int) -> None:
    """A short look at why a case is slow or refused: the default engine with ``draws`` warm-up
    steps and draws, no retries, on one seed; prints the time, the sampling coordinates, the
    notes, each chain's mean tree depth and step size, each parameter's R-hat and ESS, its
    5/50/95% quantiles and its strongest correlation with another parameter. Nothing is saved."""
    import arviz as az

    warnings.simplefilter("ignore")
    law, built = case.law(), case.build()
    t0 = time.perf_counter()
    post = bs.fit_posterior(law, built.table, seed=seed, fixed=built.fixed or None,
                            num_warmup=draws, num_samples=draws, retries=0, progress_bar=False,
                            allow_unconverged=True)
    ss = post.idata.sample_stats
    print(f"{case.name}, seed {seed}, {draws} + {draws} draws: {time.perf_counter() - t0:.0f} s; "
          f"coordinates {post.settings.get('coordinates')}")
    for note in post.diagnostics.get("notes", []):
        print("  note:", note)
    print("  tree depth per chain:", np.round(ss["tree_depth"].mean("draw").values, 2).tolist(),
          "step size:", np.round(ss["step_size"].mean("draw").values, 4).tolist(),
          "divergences:", int(ss["diverging"].sum()))
    names = list(post.param_names)
    x = np.stack([post.draws(n) for n in names], 1)
    corr = np.corrcoef(x.T) - np.eye(len(names))
    diag = az.summary(post.idata, var_names=names, kind="diagnostics")
    for j, n in enumerate(names):
        k = int(np.nanargmax(np.abs(corr[j])))
        q = np.quantile(x[:, j], [0.05, 0.5, 0.95])
        print(f"  {n}: R-hat {diag.loc[n, 'r_hat']:.3f}, ESS {diag.loc[n, 'ess_bulk']:.0f} / "
              f"{diag.loc[n, 'ess_tail']:.0f}; 5/50/95% {q[0]:.4g} / {q[1]:.4g} / {q[2]:.4g}; "
              f"corr {corr[j, k]:+.2f} with {names[k]}")


COMMAND = [""]  # the driver's command line, recorded with each run


def run_subprocess(case: Case, role: str, seeds, timeout: float, path: Path = RESULTS,
                   cpu_cap: float | None = None) -> str:
    """Run :func:`run_role` in a fresh process with a wall-clock cap ``timeout`` and, when given,
    a cap on its CPU seconds (all threads; the kernel stops it past ``cpu_cap``: a cap on the
    work, whatever the machine's load); on a cap or a crash, a line saying so for each seed that
    wrote none."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", case.name, role,
           *map(str, seeds), "--results", str(path)]
    if cpu_cap:
        cmd += ["--cpu-cap", str(int(math.ceil(cpu_cap)))]
    t0 = time.perf_counter()
    n_before = len(read_results(path))
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            env={**os.environ, "POSTERIOR_SUITE_COMMAND": COMMAND[0]})
    try:
        out, _ = proc.communicate(timeout=timeout)
        how = ("cpu cap" if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and cpu_cap
               else "exit %d" % proc.returncode)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        how = "timeout"
    except BaseException:  # Ctrl-C or SIGTERM (see main): the worker must not outlive its driver
        os.killpg(proc.pid, 9)
        proc.wait()
        raise
    written = {r["seed"] for r in read_results(path)[n_before:] if r["case"] == case.name
               and r["role"] == role}
    for s in seeds:
        if s not in written:
            status = "timeout" if how in ("timeout", "cpu cap") else "error"
            if how == "timeout":
                why = f"over the {timeout:.0f} s wall-clock cap"
            elif how == "cpu cap":
                why = f"over the {cpu_cap:.0f} CPU-second cap"
            else:
                why = f"worker {how}: {(out or '')[-1500:]}"
            append(dict(case=case.name, role=role, seed=s, family=case.family, kind=case.kind,
                        law=case.law_name, status=status, commit=git_commit(),
                        engine=engine_version(),
                        seconds=time.perf_counter() - t0, load=load_average(), error=why,
                        command=COMMAND[0]), path)
    return how


# ==================================================================================================
# The summary


def compare(records) -> pd.DataFrame:
    """One row per default (case, seed): convergence, seconds, the MCSE distances of its
    parameters from the reference and, on simulated tables, the coverage of the truth."""
    last = latest(records)
    rows = []
    for (case, role, seed), r in last.items():
        if role != "default":
            continue
        ref = next((v for (c, ro, _), v in last.items() if c == case and ro == "reference"), None)
        row = dict(case=case, family=r.get("family"), kind=r.get("kind"), seed=seed,
                   status=r["status"], converged=r["status"] == "converged",
                   seconds=float(r["seconds"]) if r.get("seconds") is not None else np.nan,
                   cpu_seconds=float(r["cpu_seconds"]) if r.get("cpu_seconds") is not None
                   else np.nan,
                   commit=r.get("commit"), engine=r.get("engine", r.get("commit")),
                   failed="; ".join(r.get("failed", []) or ([r["error"]] if r.get("error") else [])),
                   ref_status=None if ref is None else ref["status"])
        if ref is not None and ref["status"] == "ok" and "params" in r:
            z = {k: mcse_distance(s, ref["params"][k]) for k, s in r["params"].items()
                 if k in ref["params"]}
            zv = {k: mcse_distance(s, ref["values"][k]) for k, s in r.get("values", {}).items()
                  if isinstance(s, dict) and isinstance(ref["values"].get(k), dict)}
            row.update(n_params=len(z), n_within=sum(v <= MCSE_Z for v in z.values()),
                       max_z=max(z.values()) if z else np.nan,
                       n_values=len(zv), n_values_within=sum(v <= MCSE_Z for v in zv.values()))
        if r.get("covered"):
            row.update(n_truth=len(r["covered"]), n_covered=sum(r["covered"].values()))
        rows.append(row)
    return pd.DataFrame(rows)


def paired(records, engine: str) -> str:
    """The default runs measured on ``engine`` against the same (case, seed) on the engine
    measured before it (the latest earlier line of another engine): a markdown table per case
    and a totals line (runs converged, median seconds, the paired ratio of seconds)."""
    before, after = {}, {}
    for r in records:
        if r.get("role") != "default" or r.get("status") not in ("converged", "not converged"):
            continue
        key = (r["case"], r["seed"])
        if r.get("engine") == engine:
            after[key] = r
        elif key not in after:  # the engine before it, not a rerun of an older one after it
            before[key] = r
    keys = sorted(k for k in after if k in before)
    if not keys:
        return f"no (case, seed) measured on {engine} and before it"
    lines = [f"Default runs on engine {engine} against the engine before it, same case and seed "
             f"({len(keys)} runs):", "",
             "| case | converged before | after | seconds before (seeds) | after |", "|---|---|---|---|---|"]
    ratios = []
    for case in dict.fromkeys(c for c, _ in keys):
        ks = [k for k in keys if k[0] == case]
        b, a = [before[k] for k in ks], [after[k] for k in ks]
        ratios += [x["seconds"] / y["seconds"] for x, y in zip(a, b) if y["seconds"] > 0]
        conv = [f"{sum(r['status'] == 'converged' for r in g)}/{len(g)}" for g in (b, a)]
        secs = [", ".join(f"{r['seconds']:.0f}" for r in g) for g in (b, a)]
        lines.append(f"| {case} | {conv[0]} | {conv[1]} | {secs[0]} | {secs[1]} |")
    nb = sum(before[k]["status"] == "converged" for k in keys)
    na = sum(after[k]["status"] == "converged" for k in keys)
    lines += ["", f"Converged: {nb}/{len(keys)} before, {na}/{len(keys)} after. Median seconds "
              f"{_median([before[k]['seconds'] for k in keys]):.1f} before, "
              f"{_median([after[k]['seconds'] for k in keys]):.1f} after; median paired ratio "
              f"{_median(ratios):.2f}, faster in {sum(x < 1 for x in ratios)} of {len(ratios)}."]
    return "\n".join(lines)


def _pct(a, b):
    return f"{100 * a / b:.1f}% ({a}/{b})" if b else "-"


def totals(cmp: pd.DataFrame) -> dict:
    def s(col):
        return int(cmp[col].fillna(0).sum()) if col in cmp else 0

    runs = cmp[cmp["status"].isin(["converged", "not converged"])] if len(cmp) else cmp
    return dict(
        runs=len(cmp), fitted=len(runs), converged=int(cmp["converged"].sum()) if len(cmp) else 0,
        params=s("n_params"), within=s("n_within"), values=s("n_values"),
        values_within=s("n_values_within"), truth=s("n_truth"), covered=s("n_covered"),
        median_seconds=_median(runs["seconds"]) if len(runs) else float("nan"),
        median_seconds_warm=_median(runs.loc[runs["seed"] != SEEDS[0], "seconds"])
        if len(runs) else float("nan"),
        median_cpu_seconds=_median(runs["cpu_seconds"]) if len(runs) and "cpu_seconds" in runs
        else float("nan"))


def _median(x) -> float:
    x = pd.to_numeric(pd.Series(x), errors="coerce").dropna()
    return float(x.median()) if len(x) else float("nan")


def write_summary(records, command: str, all_cases, path: Path = SUMMARY) -> str:
    cmp = compare(records)
    last = latest(records)
    refs = {c: r for (c, ro, _), r in last.items() if ro == "reference"}
    names = [c.name for c in all_cases]
    skipped = [c for c in all_cases if c.skip]
    ran = sorted(set(cmp["case"]) | set(refs)) if len(cmp) else sorted(refs)
    t = totals(cmp) if len(cmp) else None
    commits = sorted(set(cmp["commit"].dropna())) if len(cmp) else []
    engines = sorted(set(cmp["engine"].dropna())) if len(cmp) else []
    loads = sorted({r.get("load", "?") for r in last.values() if r["role"] == "default"})
    commands = sorted({r.get("command") for r in last.values() if r.get("command")}) or [command]
    lines = ["# Posterior suite", "",
             "Commands of the runs summarised (in a repository checkout; the summary: "
             "`.venv/bin/python benchmarks/posteriors.py --summary-only`):", "",
             *[f"    {c}" for c in commands], "",
             f"Seeds {', '.join(map(str, SEEDS))} for the default engine; the reference: seed "
             f"{REFERENCE_SEED}, {REFERENCE}.",
             f"Default engine measured at HEAD {', '.join(commits) or '-'} (engine: last change "
             f"to bayes_scaling/ at {', '.join(engines) or '-'}); machine "
             f"{platform.node() or '?'}, {os.cpu_count()} cores; load averages (1, 5, 15 min) "
             f"at the default runs: {_load_range(loads)}.", "",
             f"Cases: {len(ran)} of {len(names)} ran ({len(skipped)} listed as skipped with a "
             f"reason; the rest not reached in this run's time box).", ""]
    if t:
        # the calibration check: truths drawn from the priors the posterior uses; the user/
        # tables simulated from stated values are reported beside it
        prior_drawn = totals(cmp[cmp["case"].str.startswith("sim/")])
        stated = totals(cmp[cmp["case"].str.startswith("user/simulated/")])
        cov = _pct(prior_drawn["covered"], prior_drawn["truth"])
        lines += ["## Totals", "",
                  "| measure | value | goal |", "|---|---|---|",
                  f"| (case, seed) runs converged | {_pct(t['converged'], t['runs'])} | "
                  f">= {GOALS['converged']:g}% |",
                  f"| parameters within {MCSE_Z:g} MCSE of the reference | "
                  f"{_pct(t['within'], t['params'])} | >= {GOALS['within']:g}% |",
                  f"| law values (largest row, x10) within {MCSE_Z:g} MCSE | "
                  f"{_pct(t['values_within'], t['values'])} | - |",
                  f"| simulated: true values in the default 90% intervals | {cov} | "
                  f"{GOALS['coverage'][0]:g}-{GOALS['coverage'][1]:g}% |",
                  f"| laws of other studies, tables simulated from stated values: true values "
                  f"in the default 90% intervals | {_pct(stated['covered'], stated['truth'])} | - |",
                  f"| median seconds per (case, seed) | {t['median_seconds']:.1f} | "
                  f"<= {GOALS['seconds']:g} s |",
                  f"| ... of seeds 1, 2 (compiled programs reused in the process) | "
                  f"{t['median_seconds_warm']:.1f} | - |",
                  f"| median CPU seconds per (case, seed) (all threads) | "
                  f"{t['median_cpu_seconds']:.1f} | - |", "",
                  f"Coverage counts one interval per (simulated table, seed, parameter): "
                  f"{cmp.loc[cmp['case'].str.startswith('sim/'), 'case'].nunique()} tables with "
                  "truths drawn from the priors (and "
                  f"{cmp.loc[cmp['case'].str.startswith('user/simulated/'), 'case'].nunique()} "
                  "from stated values), whose three seeds share the table (not independent draws). "
                  "Seconds are wall-clock on a shared machine (see the load above); CPU seconds "
                  "count every thread of the fitting process.", ""]
        lines += ["## Per family", "", "| family | runs | converged | within 3 MCSE | "
                  "coverage | median s |", "|---|---|---|---|---|---|"]
        for fam, g in cmp.groupby("family"):
            tt = totals(g)
            lines.append(f"| {fam} | {tt['runs']} | {_pct(tt['converged'], tt['runs'])} | "
                         f"{_pct(tt['within'], tt['params'])} | {_pct(tt['covered'], tt['truth'])}"
                         f" | {tt['median_seconds']:.1f} |")
        lines += [""]
    lines += ["## Per case", "",
              "| case | rows | reference | ref s | default: converged | seconds (seeds) | "
              "within 3 MCSE | max z | covered | failures |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in names:
        if c not in ran:
            continue
        ref = refs.get(c)
        g = cmp[cmp["case"] == c] if len(cmp) else cmp
        n_rows = (ref or {}).get("n_rows") or next(
            (r.get("n_rows") for (cc, _, _), r in last.items() if cc == c and r.get("n_rows")), "")
        ref_s = "-" if ref is None else ref["status"]
        ref_t = "-" if ref is None or ref.get("seconds") is None else f"{ref['seconds']:.0f}"
        if len(g):
            tt = totals(g)
            secs = ", ".join("-" if pd.isna(x) else f"{x:.0f}" for x in g.sort_values("seed")["seconds"])
            fails = "; ".join(sorted({f for f in g["failed"] if f}))[:300]
            mz = g["max_z"].max() if "max_z" in g and g["max_z"].notna().any() else float("nan")
            row = (f"{tt['converged']}/{tt['runs']} | {secs} | {_pct(tt['within'], tt['params'])}"
                   f" | {mz:.1f} | {_pct(tt['covered'], tt['truth'])} | {fails}")
        else:
            row = "- | - | - | - | - | not run"
        lines.append(f"| {c} | {n_rows} | {ref_s} | {ref_t} | {row} |")
    no_ref = [c for c, r in refs.items() if r["status"] != "ok"]
    if no_ref:
        lines += ["", "## References that failed their own checks (no comparison)", ""]
        for c in no_ref:
            r = refs[c]
            why = "; ".join(r.get("failed", []) or [r.get("error", "")])[:400]
            lines.append(f"- `{c}`: {r['status']}: {why}")
    if skipped:
        lines += ["", "## Skipped cases", ""]
        by_reason = {}
        for c in skipped:
            by_reason.setdefault(c.skip, []).append(c.name)
        for why, names_ in by_reason.items():
            lines.append(f"- {', '.join(f'`{n}`' for n in names_)}: {why}")
    text = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def _load_range(loads):
    firsts = []
    for s in loads:
        try:
            firsts.append(float(s.split(",")[0]))
        except ValueError:
            pass
    return f"1-min {min(firsts):.1f} .. {max(firsts):.1f}" if firsts else "-"


# ==================================================================================================
# Command line


def select(all_cases, only=None, max_cases=None):
    out = [c for c in all_cases if only is None or re.search(only, c.name)]
    return out[:max_cases] if max_cases else out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--only", help="run the cases whose name matches this regular expression")
    ap.add_argument("--max-cases", type=int, help="run at most this many (selected) cases")
    ap.add_argument("--roles", nargs="+", default=["reference", "default"],
                    choices=["reference", "default"])
    ap.add_argument("--redo-default", action="store_true",
                    help="rerun the default engine on cases with a reference (once per commit)")
    ap.add_argument("--ref-cpu", type=float, default=300.0,
                    help="cap of one reference run in CPU seconds (all threads)")
    ap.add_argument("--ref-timeout", type=float, default=2400.0,
                    help="wall-clock cap of one reference run, seconds")
    ap.add_argument("--default-timeout", type=float, default=3600.0,
                    help="wall-clock cap of the three default runs of a case, seconds")
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--paired", metavar="ENGINE",
                    help="print the default runs measured on ENGINE against the same (case, "
                         "seed) on the engine before it, and exit")
    ap.add_argument("--write", action="store_true",
                    help="also put the totals in BENCHMARKS.md's 'Posterior suite' section")
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--no-reference", action="store_true",
                    help="with --redo-default, also the selected cases without a reference "
                         "(vocab's: none is affordable)")
    ap.add_argument("--summary", default=str(SUMMARY))
    ap.add_argument("--probe", nargs=2, metavar=("CASE", "SEED"),
                    help="a short diagnostic run of one case (see --probe-draws), and exit")
    ap.add_argument("--probe-draws", type=int, default=200)
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--cpu-cap", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    path = Path(args.results)
    all_cases = cases()
    by_name = {c.name: c for c in all_cases}
    if args.worker:
        if args.cpu_cap:  # the process's CPU seconds so far count against it
            import resource

            resource.setrlimit(resource.RLIMIT_CPU, (args.cpu_cap, args.cpu_cap + 5))
        name, role, *seeds = args.worker
        run_role(by_name[name], role, [int(s) for s in seeds], path)
        return
    if args.paired:
        print(paired(read_results(path), args.paired))
        return
    if args.probe:
        probe(by_name[args.probe[0]], int(args.probe[1]), args.probe_draws)
        return
    chosen = select(all_cases, args.only, args.max_cases)
    if args.list:
        for c in chosen:
            print(f"{c.name}\t{c.law_name}\t{c.kind}" + (f"\tSKIP: {c.skip}" if c.skip else ""))
        return
    command = "nice -n 15 .venv/bin/python benchmarks/posteriors.py " + " ".join(
        repr(a) if re.search(r"[^\w./=-]", a) else a
        for a in (argv if argv is not None else sys.argv[1:]))
    COMMAND[0] = command
    if not args.summary_only:
        # a SIGTERM unwinds the driver as Ctrl-C does, so that run_subprocess stops its worker
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        roles = ["default"] if args.redo_default else args.roles
        redo = engine_version() if args.redo_default else None
        for c in chosen:
            if c.skip:
                continue
            records = read_results(path)
            for role in roles:
                needs_ref = role == "default" and args.redo_default and not args.no_reference
                if needs_ref and not any(r["case"] == c.name and r["role"] == "reference"
                                         for r in records):
                    continue
                seeds = pending(c, role, records, redo_engine=redo)
                if not seeds:
                    continue
                cap = args.ref_timeout if role == "reference" else args.default_timeout
                t0 = time.time()
                how = run_subprocess(c, role, seeds, cap, path,
                                     cpu_cap=args.ref_cpu if role == "reference" else None)
                print(f"{time.strftime('%H:%M:%S')} {c.name} {role} {seeds}: {how} "
                      f"({time.time() - t0:.0f} s)", flush=True)
                write_summary(read_results(path), command, all_cases, Path(args.summary))
    text = write_summary(read_results(path), command, all_cases, Path(args.summary))
    print(text)
    if args.write:
        from _report import replace_section

        totals_md = text.split("## Totals", 1)[-1].split("## Per family", 1)[0].strip()
        head = text.split("## Totals", 1)[0].split("\n", 2)[-1].strip()
        replace_section("Posterior suite", "\n".join([
            "## Posterior suite", "",
            "A reference posterior (8 chains, twice the default warm-up and draws) and the default "
            "engine (`bs.fit_posterior(law, table, seed=s)`, s = 0, 1, 2) on every (law, table) "
            "case; per-case tables in `benchmarks/out/posteriors/summary.md`, every run in "
            "`results.jsonl` beside it.", "", head, "", totals_md]))


if __name__ == "__main__":
    main()
