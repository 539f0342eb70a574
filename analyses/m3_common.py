"""What the M3 analyses share: the loss table and the training grid, the laws of the paper's
Table 2 with their fitting mode, the splits moved to our grid, the settings (a)-(d) and the
Table 2 protocol on the library (``bs.fit_two_phase``, ``bs.evaluate.axis_splits``).

Akimoto et al., *M3 Scaling Law* (arXiv 2410.12325); used by ``analyses/m3_paper.py``.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

import bayes_scaling as bs
from bayes_scaling import evaluate as ev
from bayes_scaling.errors import BayesScalingError, FitError, SplitSkipped
from bayes_scaling.fit import MapFit
from bayes_scaling.laws import Law
from training import m3 as training_m3
from training import sweep

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "bayes_scaling" / "datasets" / "bible_m3.csv"
CONFIG = ROOT / "training" / "configs" / "m3.toml"
PAIRS = ("fr-en", "ar-en")
ALL_APPROACHES = ("mono_1stage", "multi_1stage", "multi_2stage", "multi_3stage")
DELTA = 1e-3          # M3 App. C.1: Huber delta on log residuals
PAPER_STARTS = 50     # M3 App. C.1: 50 random starts, best kept
MIN_ROWS = 10         # M3 App. C.2: at least 10 rows on each side of a split
PHASE1_MIN = 8        # our rule: fewer phase-1 rows than this -> no two-phase fit (see fit)
NOISE = 0.01          # nats: tolerance of one run-vs-run comparison (tests/test_m3_table.py)
SHORT = {"mono_1stage": "mono 1-stage", "multi_1stage": "multi 1-stage",
         "multi_2stage": "multi 2-stage", "multi_3stage": "multi 3-stage"}
ABBR = {"mono_1stage": "mono", "multi_1stage": "multi-1", "multi_2stage": "multi-2",
        "multi_3stage": "multi-3"}
COLORS = {"mono_1stage": "#4C72B0", "multi_1stage": "#DD8452", "multi_2stage": "#55A868",
          "multi_3stage": "#8172B3"}


#: label -> (registered law, fitting mode). "two": the paper's two-phase fit (App. C.2.4); "one":
#: all parameters jointly (Sedova and the two-stage-only baselines, App. C.3; and Chinchilla, which
#: *is* the phase-1 base: it is fitted on every training row of the split).
LAWS: dict[str, tuple[str, str]] = {
    "Chinchilla": ("chinchilla_m3", "one"),
    "He": ("he", "two"),
    "He + Dual PL": ("he_dual", "two"),
    "Muennighoff": ("muennighoff_m3", "two"),
    "ATLAS": ("atlas", "two"),
    "Sedova": ("sedova", "one"),
    "M3": ("m3", "two"),
    "M3 -Dual PL": ("m3_nodual", "two"),
    "M3 -g": ("m3_nog", "two"),
    "M3 + R_M*(k)": ("m3_rmk", "two"),
    "M3 + R_M*(k) h_Lp": ("m3_rmk_hlp", "two"),
    "M3 h_Lp": ("m3_hlp", "two"),
    "M3 + gamma2(r1)": ("m3_r1", "two"),
    "D-CPT Law": ("dcpt_m3", "one"),
    "PTPP-F1": ("ptpp_floor_m3", "one"),
    "PTPP-F2": ("ptpp_gated_m3", "one"),
    "PTPP-F3": ("ptpp_gated_floor_m3", "one"),
    "Zhang": ("zhang", "one"),
    # Table 16 (App. D.5): where the (k, r) dependence goes, R_M* (Eq. 23) or g (Eq. 9)
    "R_M*(k,r) + g=1": ("m3_rmkr_nog", "two"),
    "R_M*(k,r) + g(r,R_D)": ("m3_rmkr", "two"),
    "R_M*(k) + g(r,R_D)": ("m3_rmk_g", "two"),
}


def law_of(label) -> Law:
    return bs.laws.get(LAWS[label][0] if label in LAWS else label)

# ==================================================================================================
# Splits: the paper's Table 7 axes with thresholds moved to our grid


#: How each of the paper's thresholds moves to our grid (axis -> threshold map).
_TO_OURS = {"D_T": lambda t: t - 1, "D": lambda t: t - 13, "k": lambda t: t // 4}


def _ours(s: ev.Split) -> ev.Split:
    thr = _TO_OURS.get(s.axis, lambda t: t)(s.threshold)
    name = f"{s.name.split('_')[0]}_{'ge' if s.op == '>=' else 'le'}{thr:g}"
    return ev.Split(name, s.axis, s.column, s.op, thr)


#: Our 18 splits (paper Table 7 -> ours). C and M use the paper's thresholds (our f_C = -3..0 and
#: f_M = -2..3 span the same factors); D_T is shifted down one factor (our f_D = -6..0: a
#: ``DT_ge0`` test side would hold 7 rows per pair); D moves from log2 D >= 34/33/32 to our
#: 2^21/2^20/2^19 tokens (our D = 2^18..2^21); r is unchanged (same ratios 1/8..1); k moves from
#: >= 32/64/128 to >= 8/16/32 (our k = 1..64). The test side is always the extrapolation direction.
SPLITS: tuple[ev.Split, ...] = tuple(_ours(s) for s in ev.M3_SPLITS)
PAPER_SPLIT = {_ours(s).name: s.name for s in ev.M3_SPLITS}
#: (d): the paper's Table 8 choice (no k axis, no r_le0.25, no r_ge1), same reasons on our grid.
SPLITS_D = tuple(s for s in SPLITS if s.axis != "k" and s.name not in ("r_le0.25", "r_ge1"))
SPLITS_C = tuple(s for s in SPLITS if s.axis != "r")
AXES = ("C", "M", "D_T", "D", "r", "k")


@dataclass
class Setting:
    key: str
    title: str
    select: object            # df -> boolean mask
    laws: tuple
    splits: tuple
    scored: tuple = ()        # (d): (name, df -> mask) test subsets scored separately


SETTINGS = {
    "a": Setting("a", "(a) All data (1-stage + 2-stage)", lambda d: d["n_stages"] <= 2,
                 ("Chinchilla", "He", "He + Dual PL", "Muennighoff", "ATLAS", "Sedova", "M3",
                  "M3 -Dual PL", "M3 -g", "M3 h_Lp", "M3 + gamma2(r1)"), SPLITS),
    "b": Setting("b", "(b) 1-stage data only", lambda d: d["n_stages"] == 1,
                 ("Chinchilla", "He", "Muennighoff", "ATLAS", "Sedova", "M3"), SPLITS),
    "c": Setting("c", "(c) Multi-epoch only (monolingual, 1-stage)",
                 lambda d: (d["n_stages"] == 1) & (d["r"] >= 1),
                 ("Muennighoff", "ATLAS", "Sedova", "M3 + R_M*(k)", "M3", "M3 + R_M*(k) h_Lp",
                  "M3 h_Lp"), SPLITS_C),
    "d": Setting("d", "(d) Multi-lingual only (single-epoch, k = 1, r < 1, 1- and 2-stage)",
                 lambda d: (d["n_stages"] <= 2) & (d["k"] <= 1) & (d["r"] < 1),
                 ("He", "He + Dual PL", "Sedova", "M3", "M3 -Dual PL"), SPLITS_D,
                 scored=(("d1", lambda d: d["n_stages"] == 1),
                         ("d2", lambda d: d["n_stages"] == 2))),
    "d2o": Setting("d2o", "(d2) 2-stage-only baselines (fitted and scored on 2-stage rows only, "
                          "k = 1, r < 1)",
                   lambda d: (d["n_stages"] == 2) & (d["k"] <= 1) & (d["r"] < 1),
                   ("D-CPT Law", "PTPP-F1", "PTPP-F2", "PTPP-F3", "Zhang"), SPLITS_D),
    "t16": Setting("t16", "Table 16: routes for the (k, r) dependence (setting (a) rows)",
                   lambda d: d["n_stages"] <= 2,
                   ("R_M*(k,r) + g=1", "R_M*(k,r) + g(r,R_D)", "R_M*(k) + g(r,R_D)", "M3",
                    "M3 -g"), SPLITS),
}


#: The paper's Avg column of Table 2 (and Table 14 for h_Lp, its monolingual rows in (c)), averaged
#: over ja/id/sw, for reference.
PAPER_AVG = {
    "a": {"Chinchilla": .19, "He": -.03, "Muennighoff": .25, "ATLAS": .35, "Sedova": .62,
          "M3": .67, "M3 -Dual PL": .60, "M3 -g": .48, "M3 h_Lp": .69},
    "b": {"Chinchilla": .13, "He": -.10, "Muennighoff": .35, "ATLAS": .43, "Sedova": .61,
          "M3": .72},
    "c": {"Muennighoff": .75, "ATLAS": .68, "Sedova": .61, "M3 + R_M*(k)": .85, "M3": .75,
          "M3 + R_M*(k) h_Lp": .85, "M3 h_Lp": .77},
    "d1": {"He": .26, "He + Dual PL": .85, "Sedova": .44, "M3": .85, "M3 -Dual PL": .33},
    "d2": {"He": .42, "He + Dual PL": .56, "Sedova": .75, "M3": .63, "M3 -Dual PL": .52},
    "d3": {"He": .34, "He + Dual PL": .70, "Sedova": .59, "M3": .74, "M3 -Dual PL": .42},
    "d2o": {"D-CPT Law": .60, "PTPP-F1": .70, "PTPP-F2": .53, "PTPP-F3": .55, "Zhang": -.38},
    "t16": {"R_M*(k,r) + g=1": .64, "R_M*(k,r) + g(r,R_D)": .67, "R_M*(k) + g(r,R_D)": .68,
            "M3": .67, "M3 -g": .48},
}

#: The paper's #P (Table 2; Tables 14-15 for h_Lp and gamma2(r1)) per setting, for reference.
_NP = {"Chinchilla": 5, "He": 6, "He + Dual PL": 7, "Muennighoff": 7, "ATLAS": 7, "Sedova": 9,
       "M3": 11, "M3 -Dual PL": 10, "M3 -g": 9, "M3 h_Lp": 12, "M3 + gamma2(r1)": 13,
       "D-CPT Law": 8, "PTPP-F1": 10, "PTPP-F2": 10, "PTPP-F3": 12, "Zhang": 6}
PAPER_NP = {"a": _NP, "b": _NP,
            "c": {**_NP, "M3": 7, "M3 + R_M*(k)": 9, "M3 + R_M*(k) h_Lp": 10, "M3 h_Lp": 8},
            "d": {**_NP, "M3": 8, "M3 -Dual PL": 7}, "d2o": _NP,
            "t16": {**_NP, "R_M*(k,r) + g=1": 12, "R_M*(k,r) + g(r,R_D)": 14,
                    "R_M*(k) + g(r,R_D)": 13}}


def condition(s: ev.Split) -> str:
    col = {"log2_D": "log2 D"}.get(s.column, s.column)
    return f"{col} {s.op} {s.threshold:g}"


# ==================================================================================================
# Data


def load_table(path=None) -> pd.DataFrame:
    """The committed ``bible_m3`` table (through ``bs.datasets`` when no path is given), with
    ``ptpp = D_1 / N_nonemb``: first-stage tokens per non-embedding parameter, the input of the
    PTPP two-stage baselines (M3 App. C.3)."""
    if path is None:
        try:
            df = bs.datasets.load("bible_m3")
        except BayesScalingError:
            df = pd.read_csv(TABLE)
    else:
        df = pd.read_csv(path)
    return df.assign(ptpp=df["D_1"] / df["N_nonemb"])


@functools.cache
def _jobs(config: Path) -> tuple:
    return tuple(training_m3.plan(sweep.load_config(config)))


def planned_grid(config=CONFIG, pairs=PAIRS) -> pd.DataFrame:
    """Every run the sweep config plans (``training.m3.plan``; one-, two- and three-stage) as
    loss-table rows without a loss (``training.m3.row``): one seed, the config's first language
    pair relabelled as each of ``pairs``."""
    jobs = [j for j in _jobs(Path(config)) if j["seed"] == _jobs(Path(config))[0]["seed"]]
    first = jobs[0]["pair"]
    nan = {"loss": np.nan, "loss_helper": np.nan}
    g = pd.DataFrame([training_m3.row(j, b, nan, 0.0) for j in jobs if j["pair"] == first
                      for b in j["branches"]])
    return pd.concat([g.assign(pair=p) for p in pairs], ignore_index=True)


def planned_counts(config=CONFIG) -> dict:
    """Planned runs per approach and pair."""
    return planned_grid(config, pairs=("x",)).groupby("approach").size().to_dict()


def inventory(df: pd.DataFrame) -> pd.DataFrame:
    planned = planned_counts()
    inv = df.groupby(["pair", "approach"]).size().unstack("approach", fill_value=0)
    inv = inv.reindex(index=[p for p in PAIRS if p in inv.index] +
                      [p for p in inv.index if p not in PAIRS],
                      columns=list(ALL_APPROACHES), fill_value=0)
    inv["total"] = inv.sum(axis=1)
    plan_row = pd.DataFrame([{**{a: planned.get(a, 0) for a in ALL_APPROACHES},
                              "total": sum(planned.values())}], index=["planned (per pair)"])
    return pd.concat([inv, plan_row])


# ==================================================================================================
# Fitting


def phase1_mask(df: pd.DataFrame) -> np.ndarray:
    """M3 App. C.2.4 phase 1: monolingual (r = 1), low-epoch (k <= 4), single-stage rows."""
    return ((df["r"] >= 1) & (df["k"] <= 4) & (df["n_stages"] == 1)).to_numpy()


def fit(law, train, pool=None, *, n_starts=PAPER_STARTS, seed=0, phase1_missing="skip") -> MapFit:
    """The fit of every protocol here, one- or two-phase by the law's mode (:data:`LAWS`).

    Two-phase (M3 App. C.2.4): ``bs.fit_two_phase`` with base ``chinchilla_m3`` fitted on the
    monolingual k <= 4 single-stage rows of ``train`` (plus those of ``pool``: rows on the training
    side of the split outside the setting, used by setting (d) whose own rows are all
    multilingual), the rest of the law fitted on ``train`` with the base fixed.

    With fewer than :data:`PHASE1_MIN` phase-1 rows (the ``r_ge0.5`` and ``r_ge1`` splits hold out
    every monolingual row), ``phase1_missing`` decides:

    - ``"skip"`` (default): the two-phase fit is impossible by the paper's own definition (phase 1
      uses "only ... data from the training set"): :class:`~bayes_scaling.errors.SplitSkipped` is
      raised and, by App. C.2.3's rule for skipped splits, the split is excluded for every law;
    - ``"one-phase"``: the law is fitted in one phase instead, flagged in ``settings["phase"]``.

    Any error other than the package's is reported as a :class:`~bayes_scaling.errors.FitError`.
    """
    law = law_of(law) if isinstance(law, str) else law
    kw = {"delta": DELTA, "n_starts": n_starts, "seed": seed}
    mode = next((m for name, m in LAWS.values() if name == law.name), "two")
    try:
        if mode == "one":
            f = bs.fit_map(law, train, **kw)
            f.settings["phase"] = "one-phase"
            return f
        p1 = train[phase1_mask(train)]
        if pool is not None and len(pool):
            p1 = pd.concat([p1, pool[phase1_mask(pool)]])
            p1 = p1[~p1.index.duplicated()]
        if len(p1) < PHASE1_MIN:
            if phase1_missing == "skip":
                raise SplitSkipped(f"{len(p1)} phase-1 rows on the training side "
                                   f"(< {PHASE1_MIN}): no two-phase fit")
            f = bs.fit_map(law, train, **kw)
            f.settings["phase"] = f"one-phase fallback ({len(p1)} phase-1 rows)"
            return f
        f, base = bs.fit_two_phase(law, train, base_law="chinchilla_m3", phase1=p1, **kw)
        f.settings["phase"] = "two-phase"
        f.settings["two_phase"]["base_ridge"] = base.ridge()
        return f
    except BayesScalingError:
        raise
    except Exception as exc:  # noqa: BLE001  (any other error is a failed fit, reported)
        raise FitError(f"{type(exc).__name__}: {exc}") from exc


def make_fitter(n_starts=PAPER_STARTS, seed=0, phase1_missing="skip"):
    """:func:`fit` with its settings bound: the ``fitter`` of ``bs.evaluate.axis_splits``."""
    f = functools.partial(fit, n_starts=n_starts, seed=seed, phase1_missing=phase1_missing)
    f.__name__ = "m3_common.fit"
    return f


# ==================================================================================================
# The Table 2 protocol


def setting_rows(df: pd.DataFrame, setting: Setting) -> pd.DataFrame:
    return df[np.asarray(setting.select(df), bool)]

def table2(df: pd.DataFrame, setting="a", *, laws=None, splits=None, fitter=None,
           min_rows=MIN_ROWS, group="pair"):
    """The Table 2 protocol of one setting on ``df``: an :class:`bs.evaluate.Evaluation` (settings
    a-c; ``bs.evaluate.axis_splits``) or, for setting d, ``{"d1": Evaluation, "d2": ..., "d3":
    table}`` (one fit per split, scored separately on the 1- and 2-stage test rows)."""
    st = SETTINGS[setting] if isinstance(setting, str) else setting
    labels = tuple(laws or st.laws)
    splits = tuple(splits or st.splits)
    fitter = fitter or make_fitter()
    rows = setting_rows(df, st)
    named = {lab: law_of(lab) for lab in labels}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not st.scored:
            return ev.axis_splits(named, rows, splits, delta=DELTA, min_rows=min_rows,
                                  group=group, fitter=fitter)
        # (d): one fit per split on every training row, phase-1 rows from the whole table's
        # training side; 1- and 2-stage test rows scored separately (d1, d2), macro-averaged (d3)
        out = ev.axis_splits(named, rows, splits, delta=DELTA, min_rows=min_rows, group=group,
                             fitter=fitter, pool=df, scored=dict(st.scored))
    axes = list(dict.fromkeys(s.axis for s in splits))
    t1, t2 = out["d1"].table.set_index("label"), out["d2"].table.set_index("label")
    d3 = (t1[axes].add(t2[axes]) / 2).reset_index()   # macro-average; NaN when either is
    d3["Avg"] = d3[axes].mean(axis=1)
    out["d3"] = d3
    return out



def n_free(label, rows: pd.DataFrame) -> int:
    """#P of the paper's Table 2: the parameters of the law that move its prediction on ``rows``
    (a non-zero derivative on some row at the law's example values). A parameter a setting cannot
    see is not free there: R_D,high*, psi, gamma, gamma2 of M3 at r = 1 (setting (c): 7 of 11);
    R_D*, R_D,high*, psi at k = 1 (setting (d): 8)."""
    law = law_of(label)
    p = {k: jnp.asarray(float(v)) for k, v in law.example.items()}
    grad = _jacobian(label)(p, law.inputs(rows))
    return int(sum(bool(np.any(np.asarray(g) != 0)) for g in grad.values()))


@functools.cache
def _jacobian(label):
    """The law's Jacobian in its parameters, compiled once per label (for any rows)."""
    return jax.jit(jax.jacfwd(law_of(label).fn))


def grid_consts(config=CONFIG):
    m = sweep.load_config(config)["m3"]
    return float(m["C0"]), float(m["D_T0"]), float(m["M0"])


def md_table(df, digits=3):
    return ev.markdown_table(df, digits=digits) if len(df) else "_(none)_"
