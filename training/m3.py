"""M3 runs: pre-training from scratch for a low-resource target language with a helper language.

The small-scale analogue of Akimoto et al., *M3 Scaling Law* (arXiv 2410.12325), Section 2 and
Appendix B. A config with an ``[m3]`` table (``training/configs/m3.toml``) is this sweep family
(``training.kinds``): it plans one job kind, ``m3``, run through the same sweep driver
(``training.sweep``) and results store as the PTPP sweep.

**Factor parametrisation** (paper Section 2.3, Eq. 15). A setup is four integers
``(f_r, f_M, f_k, f_C)``::

    r = 2^-f_r,  M = M0 2^-f_M,  k = 2^f_k,  C = 2^f_C C0,
    D_T = 2^f_D D_T0  with  f_D = -f_r + f_M - f_k + f_C,

and ``M0 = C0 / D_T0``, so the total token count is ``D = C / M = 2^(f_M + f_C) D_T0`` and the
target tokens seen are ``r D = k D_T`` (``D`` and ``D_T`` are exact: ``D_T0`` is a power of two
and a multiple of the context). ``M`` is the model scale in non-embedding FLOPs per token,
``training.model.model_scale(size, N_nonemb)`` (``6 N_nonemb + 12 n_layer d_model S``, S = 128,
the paper's Table 4); each ``f_M`` is served by one model shape from the config whose actual ``M``
is within ``M_tolerance`` of the nominal ``M0 2^-f_M``. Rows report the actual ``M`` and
``C = M D`` (exactly ``M D``), with the nominal values beside them (``M_nominal``, ``C_nominal``)
and the factors (``f_C``, ``f_D``: setups sharing them share the nominal ``(C, D_T)``).

**Approaches.**

* ``mono_1stage`` (``f_r = 0``) and ``multi_1stage`` (``f_r > 0``): one constant ratio ``r``.
  Setups sharing ``(f_r, f_M, f_D)`` differ only in length (``f_C`` and ``f_k`` move together),
  and a run of length ``D`` is a prefix of the longer ones (same data order, same warmup, constant
  learning rate until its own cooldown), so they are one job: a constant-LR trunk with an
  annealed cooldown branch ending at each length (``loop.run_branches``); every branch is exactly
  the run a standalone WSD schedule of that length would give. (The paper likewise reused
  intermediate checkpoints with a multi-step schedule.)
* ``multi_2stage``: ratio ``r1`` then ``r2 > r1``, stage proportions from the average ratio
  (paper Section 2.3): ``s1 = (r2 - r) / (r2 - r1)``, ``s2 = 1 - s1``, so ``s1 r1 + s2 r2 = r``.
* ``multi_3stage`` (paper Appendix B.4): ``(r1, r2, r3)`` with the stages-1-2 average ``r12``:
  ``s12 = (r3 - r) / (r3 - r12)``, ``s3 = 1 - s12``, ``s1 = s12 (r2 - r12) / (r2 - r1)``,
  ``s2 = s12 - s1``; patterns A (``(r1, r2)`` the closest candidates bracketing ``r12``),
  B (``r1 = 0``, ``r2`` the smallest candidate above ``r12``) and C (``r1 = 0``, ``r2`` the
  largest candidate below ``r3``; dropped when equal to B), each with the same ``(r, r_f)`` as a
  two-stage run of the grid.

Every stage is its own warmup-stable-decay segment (``loop.Staged``): linear warmup to the peak
(re-warmed at each stage boundary, as the paper does after Ibrahim et al. 2024), constant, then
linear decay to 0 over the stage's last ``cooldown_fraction``; the optimizer state carries over
(one run, only the mixture changes). Stage boundaries are rounded to whole steps and per-stage
target counts to whole sequences; the final stage takes the remainder, so the run sees exactly
``k D_T`` target tokens (``r`` exact; realised per-stage ratios are in ``r1_actual``,
``r_f_actual``).

**Data** (``loop.EpochBatches``): the target corpus is the first ``D_T (+1)`` tokens of the target
language's training books, cut into ``D_T / 128`` windows; each epoch is a new permutation of them
(seeded by ``(seed, language, epoch)``); helper sequences are windows of one permutation of the
helper's training books, never repeated (planning fails with a clear message if a run would need
more). Target and helper sequences are interleaved evenly at each stage's exact ratio. The data
order depends on the seed and languages only, not on the run, so runs share their prefixes.

**Evaluation**: each annealed point is evaluated on ``eval_sequences`` fixed windows of the target
language's held-out books (``loss``, nats per byte-token) and of the helper's (``loss_helper``).
"""
from __future__ import annotations

import collections
import math
import time
import zlib
from fractions import Fraction
from itertools import pairwise, product
from pathlib import Path

from .config import ConfigError, check_common, merge_defaults, spec_settings
from .loop import (
    WSD,
    EpochBatches,
    Mixture,
    Staged,
    branch_start,
    eval_windows,
    evaluate,
    run_branches,
)
from .model import CONTEXT, Size, build, model_scale, param_counts
from .runner import finish, job_setup, load_corpora, resume, trunk_saver

TABLE = "m3"
APPROACHES = ("mono_1stage", "multi_1stage", "multi_2stage", "multi_3stage")
# paper Section 2.3 / Appendix B: candidate stage ratios
R1_CANDIDATES = (Fraction(1, 2), Fraction(1, 4), Fraction(1, 8), Fraction(1, 16), Fraction(1, 32),
                 Fraction(0))
R2_CANDIDATES = (Fraction(1, 4), Fraction(1, 2), Fraction(3, 4), Fraction(1))
# Cost model of one single-threaded worker with a core to itself, in CPU seconds (measured on this
# project's 2-core machine, see training/configs/m3.toml): an optimizer step of batch 16 x 128
# costs STEP_SECONDS[0] + STEP_SECONDS[1] * n_layer + STEP_SECONDS[2] * F, with F = 6 N_nonemb
# + 6 n_layer d_model S the FLOPs per token it was measured against; evaluating one window
# costs EVAL_STEP_FRACTION / batch_size of a step; each job has JOB_SECONDS of fixed overhead.
# Used to order jobs (cheapest first) and for the estimate ``python -m training plan`` prints.
STEP_SECONDS = (0.015, 0.006, 6.0e-8)
EVAL_STEP_FRACTION = 1 / 3
JOB_SECONDS = 2.0

#: The config sections of this family, beside ``config.DEFAULTS``.
SECTIONS = {"m3": None}
M3_KEYS = {"pairs", "lr", "warmup_steps", "C0", "D_T0", "M0", "M_tolerance", "models",
           "one_stage", "two_stage", "three_stage"}
RANGE_KEYS = ("f_C", "f_M", "f_r", "f_k", "f_D", "log2_D")


# ----------------------------------------------------------------------------- factors

def setup(f_r: int, f_M: int, f_k: int, f_C: int, C0: int, D_T0: int, M0: int) -> dict:
    """The paper's Eq. 15: nominal ``r, M, k, C, D_T`` and ``D = C / M`` (exact integers)."""
    f_D = -f_r + f_M - f_k + f_C
    return {"f_r": f_r, "f_M": f_M, "f_k": f_k, "f_C": f_C, "f_D": f_D,
            "r": Fraction(1, 2 ** f_r), "k": 2 ** f_k,
            "M_nominal": Fraction(M0) * Fraction(2) ** -f_M,
            "C_nominal": Fraction(C0) * Fraction(2) ** f_C,
            "D_T": Fraction(D_T0) * Fraction(2) ** f_D,
            "D": Fraction(D_T0) * Fraction(2) ** (f_M + f_C)}


def two_stage_proportions(r, r1, r2) -> tuple[Fraction, Fraction]:
    """``(s1, s2)`` with ``s1 r1 + s2 r2 = r``: ``s1 = (r2 - r) / (r2 - r1)`` (paper Section 2.3)."""
    r, r1, r2 = Fraction(r), Fraction(r1), Fraction(r2)
    if not r1 < r < r2:
        raise ValueError(f"two-stage ratios need r1 < r < r2, got r1={r1}, r={r}, r2={r2}")
    s1 = (r2 - r) / (r2 - r1)
    return s1, 1 - s1


def three_stage_proportions(r, r12, r3, r1, r2) -> tuple[Fraction, Fraction, Fraction]:
    """``(s1, s2, s3)`` of the paper's Eqs. 16-17 (Appendix B.4)."""
    s12, s3 = two_stage_proportions(r, r12, r3)
    f1, _ = two_stage_proportions(r12, r1, r2)
    return s12 * f1, s12 * (1 - f1), s3


def three_stage_patterns(r12, r3) -> dict[str, tuple[Fraction, Fraction]]:
    """Patterns A, B, C of the paper's Appendix B.4: ``{name: (r1, r2)}``."""
    r12, r3 = Fraction(r12), Fraction(r3)
    above = sorted(x for x in R2_CANDIDATES if r12 < x < r3)
    below = [x for x in R1_CANDIDATES if x < r12]
    if not above or not below:
        raise ValueError(f"no valid (r1, r2) around r12={r12} below r3={r3}")
    pats = {"A": (max(below), above[0]), "B": (Fraction(0), above[0])}
    if above[-1] != above[0]:
        pats["C"] = (Fraction(0), above[-1])
    return pats


def realize(proportions, ratios, steps: int, batch_size: int, n_target: int) -> list[list[int]]:
    """Whole-step stage table ``[[first_step, n_target_i, n_seqs_i], ...]``.

    Boundaries are ``round(cumulative s * steps)``; stage ``i < last`` gets ``round(r_i n_seqs_i)``
    target sequences and the final stage the remainder, so the total is exactly ``n_target``.
    """
    if sum(proportions) != 1:
        raise ValueError(f"stage proportions must sum to 1, got {proportions}")
    cum, bounds = Fraction(0), [0]
    for s in proportions[:-1]:
        cum += s
        bounds.append(round(cum * steps))
    bounds.append(steps)

    ratios = [Fraction(r) for r in ratios]

    def build(bounds):
        n = [(b1 - b0) * batch_size for b0, b1 in pairwise(bounds)]
        if min(n) <= 0:
            return None
        t = [round(r * k) for r, k in zip(ratios, n)]
        diff = n_target - sum(t)
        if diff:  # absorbed by the largest stage whose ratio is strictly inside (0, 1)
            inner = sorted((k, i) for i, (r, k) in enumerate(zip(ratios, n)) if 0 < r < 1
                           and 0 <= t[i] + diff <= k)
            if not inner:
                return None
            t[inner[-1][1]] += diff
        return [[b, ti, k] for b, ti, k in zip(bounds, t, n)]

    # Rounding a boundary can leave no stage able to absorb the rounding of the target counts
    # (e.g. r1 = 0, r2 = 1); then move the last boundary a step at a time until it fits.
    for shift in (0, -1, 1, -2, 2, -3, 3):
        b = bounds[:-2] + [bounds[-2] + shift, steps] if len(bounds) > 2 else bounds
        table = build(b)
        if table is not None:
            return table
    raise ValueError(f"stages {proportions} x {ratios} do not fit {steps} steps with "
                     f"{n_target} target sequences")


# ----------------------------------------------------------------------------- config

def load_config(path: Path, raw: dict, out_dir: str | None = None) -> dict:
    """Validate an M3 sweep config (the ``[m3]`` table and the shared keys)."""
    cfg = merge_defaults(path, raw, SECTIONS, out_dir, ("name", "corpus", "out_dir"))
    check_common(cfg, path)
    m = cfg["m3"]
    if not isinstance(m, dict) or set(m) != M3_KEYS:
        got = sorted(m) if isinstance(m, dict) else m
        raise ConfigError(f"{path}: [m3] must have exactly the keys {sorted(M3_KEYS)}, got {got}")
    for k in ("C0", "D_T0", "M0"):
        if not isinstance(m[k], int) or m[k] < 1:
            raise ConfigError(f"m3.{k} must be a positive integer, got {m[k]!r}")
    if m["C0"] != m["M0"] * m["D_T0"]:
        raise ConfigError(f"m3.C0 must equal M0 * D_T0 (paper B.3: M0 = C0 / D_T0), got "
                          f"{m['C0']} != {m['M0']} * {m['D_T0']}")
    if m["D_T0"] & (m["D_T0"] - 1):
        raise ConfigError(f"m3.D_T0 must be a power of two, got {m['D_T0']}")
    if not m["pairs"] or any(set(p) != {"target", "helper"} or p["target"] == p["helper"]
                             for p in m["pairs"]):
        raise ConfigError(f"m3.pairs must be a list of {{target, helper}} with two different "
                          f"languages, got {m['pairs']}")
    if not isinstance(m["warmup_steps"], int) or m["warmup_steps"] < 1 or m["lr"] <= 0:
        raise ConfigError("m3.warmup_steps must be a positive integer and m3.lr positive")
    seen = set()
    for spec in m["models"]:
        if set(spec) != {"f_M", "n_layer", "d_model", "n_head"} or spec["f_M"] in seen:
            raise ConfigError(f"m3.models entries need f_M, n_layer, d_model, n_head (one per "
                              f"f_M), got {spec}")
        seen.add(spec["f_M"])
        try:
            Size(spec["n_layer"], spec["d_model"], spec["n_head"])
        except ValueError as e:
            raise ConfigError(f"m3.models f_M={spec['f_M']}: {e}") from e
    grids = [("one_stage", g, set(RANGE_KEYS)) for g in _grids(m["one_stage"])]
    grids += [("two_stage", g, set(RANGE_KEYS) | {"r1", "r2"}) for g in _grids(m["two_stage"])]
    for name, g, keys in grids:
        if not isinstance(g, dict) or set(g) != keys:
            raise ConfigError(f"each [[m3.{name}]] grid must have exactly the keys "
                              f"{sorted(keys)}, got {sorted(g) if isinstance(g, dict) else g}")
        for k in RANGE_KEYS:
            v = g[k]
            if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
                    and v[0] <= v[1]):
                raise ConfigError(f"m3.{name}.{k} must be an inclusive integer range [lo, hi], "
                                  f"got {v!r}")
        if g["f_r"][0] < (0 if name == "one_stage" else 1) or g["f_k"][0] < 0:
            raise ConfigError(f"m3.{name}: f_k >= 0 and f_r >= {0 if name == 'one_stage' else 1}")
    for ts in _grids(m["two_stage"]):
        if not all(_frac(x) in R1_CANDIDATES for x in ts["r1"]) or \
                not all(_frac(x) in R2_CANDIDATES for x in ts["r2"]):
            raise ConfigError(f"m3.two_stage r1 must be among {[str(x) for x in R1_CANDIDATES]} "
                              f"and r2 among {[str(x) for x in R2_CANDIDATES]} (paper 2.3)")
    for pt in m["three_stage"]:
        if set(pt) != {"f_C", "f_M", "f_r", "f_k", "r3", "r12"}:
            raise ConfigError(f"m3.three_stage entries need f_C, f_M, f_r, f_k, r3, r12; got {pt}")
    if not plan(cfg, where=str(path)):  # plan-time checks: shapes, divisibility, three-stage
        raise ConfigError(f"{path}: the M3 grid is empty")
    return cfg


def _grids(g) -> list[dict]:
    """A grid section is one table or an array of tables (their union)."""
    return [g] if isinstance(g, dict) else list(g)


def _factors(grid: dict):
    """Every integer ``(f_r, f_M, f_k, f_C)`` in a grid's inclusive ranges."""
    return product(*(range(grid[k][0], grid[k][1] + 1) for k in ("f_r", "f_M", "f_k", "f_C")))


def _number(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


def _frac(x) -> Fraction:
    return Fraction(x).limit_denominator(1 << 10)


def _in(v: int, rng: list[int]) -> bool:
    return rng[0] <= v <= rng[1]


# ----------------------------------------------------------------------------- plan

def _models(cfg: dict) -> dict[int, dict]:
    """``{f_M: shape and counts}``, each checked against its nominal M."""
    m = cfg["m3"]
    out = {}
    for spec in m["models"]:
        size = Size(spec["n_layer"], spec["d_model"], spec["n_head"])
        n, n_ne = param_counts(build(size, 0))
        M = model_scale(size, n_ne)  # an integer: exact in the CSV
        nominal = m["M0"] * 2.0 ** -spec["f_M"]
        if abs(M / nominal - 1) > m["M_tolerance"]:
            raise ConfigError(f"m3.models f_M={spec['f_M']}: M = {M:.0f} is more than "
                              f"{m['M_tolerance']:.0%} from the nominal M0 2^-f_M = {nominal:.0f}")
        out[spec["f_M"]] = {"size": f"fM{spec['f_M']}", "n_layer": size.n_layer,
                            "d_model": size.d_model, "n_head": size.n_head, "N": n,
                            "N_nonemb": n_ne, "M": M}
    return out


def _stage_lr(table: list[list[int]], steps: int, lr: float, warmup: int, f: float) -> list:
    """Per-stage LR segments ``[[first_step, warmup, decay_start or None, decay_steps], ...]``.

    The final stage has no decay here (``run_branches`` adds it); the warmup of a stage is
    ``min(warmup_steps, stage_steps // 5)`` (at least 1).
    """
    out = []
    ends = [t[0] for t in table[1:]] + [steps]
    for (first, _, _), end in zip(table, ends):
        n = end - first
        w = max(1, min(warmup, n // 5))
        if end == steps:
            out.append([first, w, None, 0])
        else:
            cd = max(1, round(f * n))
            out.append([first, w, n - cd, cd])
    return out


def plan(cfg: dict, where: str = "config") -> list[dict]:
    """All M3 job specs in execution order (``order_jobs``); ``where`` names the config in
    errors."""
    m = cfg["m3"]
    C0, D_T0, M0 = m["C0"], m["D_T0"], m["M0"]
    models = _models(cfg)
    B, S = cfg["batch_size"], CONTEXT
    tok = B * S
    f = cfg["cooldown_fraction"]
    common = spec_settings(cfg)
    common.update(kind="m3", lr=m["lr"], deps=[], C0=C0, D_T0=D_T0, M0=M0)

    def point(f_r, f_M, f_k, f_C, grid):
        if f_M not in models:
            return None
        s = setup(f_r, f_M, f_k, f_C, C0, D_T0, M0)
        if not (_in(s["f_D"], grid["f_D"]) and _in(f_k, grid["f_k"])):
            return None
        if not _in(round(math.log2(s["D"])), grid["log2_D"]):
            return None
        if s["D"] % tok or s["D_T"] % S or s["D_T"].denominator != 1:
            raise ConfigError(f"{where}: D = {s['D']} or D_T = {s['D_T']} of setup "
                              f"(f_r={f_r}, f_M={f_M}, f_k={f_k}, f_C={f_C}) is not a whole "
                              f"number of steps ({tok} tokens) / windows ({S} tokens)")
        return s

    def branch(s, model):
        D, M = int(s["D"]), model["M"]
        return {"f_C": s["f_C"], "f_k": s["f_k"], "k": s["k"], "steps": D // tok, "D": D,
                "C": M * D, "C_nominal": _number(s["C_nominal"]),
                "M_nominal": _number(s["M_nominal"])}

    def base(pair, seed, s, model, approach):
        return {**common, **model, "pair": f"{pair['target']}-{pair['helper']}",
                "target": pair["target"], "helper": pair["helper"], "seed": seed,
                "approach": approach, "f_r": s["f_r"], "f_M": s["f_M"], "f_D": s["f_D"],
                "r": [s["r"].numerator, s["r"].denominator], "D_T": int(s["D_T"]),
                "n_target_seqs": int(s["D_T"]) // S * s["k"]}

    jobs = []
    # the union of the grids' setups
    pts1 = {}
    for g in _grids(m["one_stage"]):
        for fs in _factors(g):
            s = point(*fs, g)
            if s is not None:
                pts1[fs] = s
    pts2 = {}
    for g in _grids(m["two_stage"]):
        for fs in _factors(g):
            s = point(*fs, g)
            if s is None:
                continue
            for r1, r2 in product(map(_frac, g["r1"]), map(_frac, g["r2"])):
                if r1 < s["r"] < r2:
                    pts2[fs + (r1, r2)] = s
    for seed, pair in product(cfg["seeds"], m["pairs"]):
        pname = f"{pair['target']}-{pair['helper']}"
        # one-stage: trunks over (f_r, f_M, f_D), branches over f_C
        trunks: dict[tuple, list] = {}
        for s in pts1.values():
            trunks.setdefault((s["f_r"], s["f_M"], s["f_D"]), []).append(s)
        for (f_r, f_M, f_D), pts in sorted(trunks.items()):
            pts.sort(key=lambda p: p["D"])
            model = models[f_M]
            approach = "mono_1stage" if f_r == 0 else "multi_1stage"
            spec = base(pair, seed, pts[-1], model, approach)
            branches = [branch(p, model) for p in pts]
            r = pts[-1]["r"]
            # one unbounded stage of ratio r (exact per branch: every branch length is a whole
            # number of 1/r sequences)
            spec.update(id=f"m3-{pname}-1s-fr{f_r}-fM{f_M}-fD{f_D}-s{seed}", n_stages=1,
                        ratios=[[r.numerator, r.denominator]],
                        stages=[[0, r.numerator, r.denominator]], branches=branches,
                        lr_stages=[[0, max(1, min(m["warmup_steps"],
                                                  branches[0]["steps"] // 5)), None, 0]])
            del spec["n_target_seqs"]
            jobs.append(spec)
        # two-stage: one job per (setup, r1, r2)
        multi = [(key, s, key[4:], "multi_2stage", None) for key, s in sorted(pts2.items())]
        for pt in m["three_stage"]:
            s = setup(pt["f_r"], pt["f_M"], pt["f_k"], pt["f_C"], C0, D_T0, M0)
            r3, r12 = _frac(pt["r3"]), _frac(pt["r12"])
            companion = [k for k in pts2 if k[:4] == (pt["f_r"], pt["f_M"], pt["f_k"], pt["f_C"])
                         and k[5] == r3]
            if not companion or pt["f_M"] not in models:
                raise ConfigError(f"{where}: three-stage point {pt} has no two-stage run with "
                                  f"the same setup and final ratio r2 = r3 in the grid")
            if not r12 < s["r"] < r3:
                raise ConfigError(f"{where}: three-stage point {pt} needs r12 < r < r3")
            for name, (r1, r2) in three_stage_patterns(r12, r3).items():
                multi.append(((pt["f_r"], pt["f_M"], pt["f_k"], pt["f_C"], r1, r2, r3, r12), s,
                              (r1, r2, r3), "multi_3stage", name))
        for key, s, ratios, approach, pattern in multi:
            model = models[s["f_M"]]
            spec = base(pair, seed, s, model, approach)
            b = branch(s, model)
            steps = b["steps"]
            if approach == "multi_2stage":
                props = two_stage_proportions(s["r"], *ratios)
                tag = f"2s-r1_{float(ratios[0]):g}-r2_{float(ratios[1]):g}"
            else:
                props = three_stage_proportions(s["r"], key[7], ratios[2], ratios[0], ratios[1])
                tag = (f"3s{pattern}-r12_{float(key[7]):g}-r1_{float(ratios[0]):g}-"
                       f"r2_{float(ratios[1]):g}-r3_{float(ratios[2]):g}")
            table = realize(props, ratios, steps, B, spec["n_target_seqs"])
            lr_st = _stage_lr(table, steps, m["lr"], m["warmup_steps"], f)
            last = steps - table[-1][0]
            spec.update(
                id=f"m3-{pname}-fC{s['f_C']}-fM{s['f_M']}-fr{s['f_r']}-fk{s['f_k']}-{tag}-s{seed}",
                n_stages=len(ratios), ratios=[[x.numerator, x.denominator] for x in ratios],
                proportions=[[x.numerator, x.denominator] for x in props],
                stages=table, branches=[b], lr_stages=lr_st,
                final_cooldown=max(1, round(f * last)), pattern=pattern,
                r12=None if pattern is None else [key[7].numerator, key[7].denominator])
            del spec["n_target_seqs"]
            jobs.append(spec)
    ids = [j["id"] for j in jobs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{where}: duplicate M3 job ids")
    return order_jobs(jobs)


def order_jobs(jobs: list[dict]) -> list[dict]:
    """Cheapest first, shared fairly: within each (pair, approach) jobs go cheapest first, and
    the groups are interleaved by their cumulative estimated cost, so the first rows of a sweep
    cover every pair and approach at their cheapest settings."""
    rank = {a: i for i, a in enumerate(APPROACHES)}
    groups: dict[tuple, list] = {}
    for j in sorted(jobs, key=lambda j: (estimate_seconds(j), j["id"])):
        groups.setdefault((j["pair"], j["approach"]), []).append(j)
    keyed = []
    for (pair, approach), js in groups.items():
        spent = 0.0
        for j in js:
            spent += estimate_seconds(j)
            keyed.append(((round(spent, 6), rank[approach], pair, j["id"]), j))
    return [j for _, j in sorted(keyed, key=lambda kj: kj[0])]


# ----------------------------------------------------------------------------- cost

def job_steps(spec: dict) -> int:
    """Optimizer steps a job runs: the trunk plus every non-final cooldown branch."""
    b = [x["steps"] for x in spec["branches"]]
    if spec["n_stages"] > 1:
        return b[-1]
    return b[-1] + sum(t - branch_start(t, spec["cooldown_fraction"]) for t in b[:-1])


def job_tokens(spec: dict) -> int:
    return job_steps(spec) * spec["batch_size"] * CONTEXT


def estimate_seconds(spec: dict) -> float:
    """Estimated CPU seconds of a job on one single-threaded worker (see ``STEP_SECONDS``)."""
    a, per_layer, b = STEP_SECONDS
    flops = 6 * (spec["N_nonemb"] + spec["n_layer"] * spec["d_model"] * CONTEXT)
    step = a + per_layer * spec["n_layer"] + b * flops
    evals = len(spec["branches"]) * 2 * spec["eval_sequences"]  # target + helper windows
    return (job_steps(spec) + evals * EVAL_STEP_FRACTION / spec["batch_size"]) * step + JOB_SECONDS


def summary(jobs: list[dict]) -> str:
    """Runs (annealed points) and estimated CPU hours per pair and approach."""
    runs, cost = collections.Counter(), collections.Counter()
    for j in jobs:
        runs[(j["pair"], j["approach"])] += len(j["branches"])
        cost[(j["pair"], j["approach"])] += estimate_seconds(j)
    lines = ["| pair | approach | runs | est. CPU h |", "|---|---|---|---|"]
    for key in sorted(runs):
        lines.append(f"| {key[0]} | {key[1]} | {runs[key]} | {cost[key] / 3600:.2f} |")
    lines.append(f"| all | all | {sum(runs.values())} | {sum(cost.values()) / 3600:.2f} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- corpora

def corpus_slices(spec: dict, data: dict):
    """(target training tokens cut to D_T + 1, helper training tokens or None)."""
    tgt = data[spec["target"]]["train"]
    if len(tgt) < spec["D_T"] + 1:
        raise ValueError(f"{spec['id']}: target {spec['target']!r} has {len(tgt)} training "
                         f"tokens, fewer than D_T + 1 = {spec['D_T'] + 1}")
    mono = all(p == q for _, p, q in spec["stages"])
    return tgt[:spec["D_T"] + 1], None if mono else data[spec["helper"]]["train"]


def make_batches(spec: dict, data: dict):
    """The job's ``EpochBatches`` (fails if the helper would repeat) and its ``Mixture``."""
    target, helper = corpus_slices(spec, data)
    batches = EpochBatches(target, helper, spec["stages"], spec["batch_size"], CONTEXT,
                           spec["seed"],
                           salt=zlib.crc32(spec["pair"].encode()),
                           total_steps=spec["branches"][-1]["steps"],
                           names=(spec["target"], spec["helper"]))
    mixture = Mixture(tuple((first, {spec["target"]: p / q, spec["helper"]: 1 - p / q})
                            for first, p, q in spec["stages"]))
    return batches, mixture


def check_corpora(jobs: list[dict], data: dict) -> None:
    """Before any worker starts: every job's target cut and helper budget fit the corpora."""
    for j in jobs:
        for lang in (j["target"], j["helper"]):
            if lang not in data or "train" not in data[lang] or "val" not in data[lang]:
                raise ConfigError(f"{j['id']}: corpus has no {lang}.train/{lang}.val text")
        try:
            make_batches(j, data)
        except ValueError as e:
            raise ConfigError(str(e)) from e


def learning_rate(spec: dict) -> Staged:
    """The job's learning rate: one WSD segment per stage (re-warmed at each boundary)."""
    return Staged(tuple((first, WSD(spec["lr"], w, ds, dn)) for first, w, ds, dn
                        in spec["lr_stages"]))


# ----------------------------------------------------------------------------- one job

def run_job(spec: dict, store_path: str, ckpt_dir: str) -> str:
    """Run one M3 job (resuming from its trunk checkpoint) and record one row per annealed point."""
    t0 = time.time()
    store, ckpt, model, opt, on_step = job_setup(spec, store_path, ckpt_dir, TABLE)
    data = load_corpora(spec["corpus"])
    val = {k: v["val"] for k, v in data.items() if "val" in v}
    windows = {"loss": eval_windows(val, {spec["target"]: 1.0}, spec["eval_sequences"], CONTEXT),
               "loss_helper": eval_windows(val, {spec["helper"]: 1.0}, spec["eval_sequences"],
                                           CONTEXT)}
    batches, mixture = make_batches(spec, data)
    trunk_path = ckpt / f"{spec['id']}.trunk.pt"
    step = resume(trunk_path, model, opt)
    by_steps = {b["steps"]: b for b in spec["branches"]}
    done = store.keys(spec["id"])
    key = {s: f"{spec['id']}/fC{b['f_C']}" for s, b in by_steps.items()}

    def on_branch(total, annealed):
        store.add_rows(spec["id"], {key[total]: row(spec, by_steps[total], {
            name: evaluate(annealed, w) for name, w in windows.items()},
            time.time() - t0)})

    final = spec.get("final_cooldown")
    branch_at = (lambda total: total - final) if final else None
    run_branches(model, opt, batches, mixture, learning_rate(spec), step, list(by_steps),
                 spec["cooldown_fraction"], on_branch, trunk_saver(trunk_path, model, opt),
                 {s for s in by_steps if key[s] in done}, spec["checkpoint_every"],
                 spec["grad_clip"], on_step, branch_at=branch_at)
    trunk_path.unlink(missing_ok=True)
    return finish(store, spec, job_tokens(spec), t0)


def _ratio(x) -> float:
    return x[0] / x[1]


def row(spec: dict, b: dict, losses: dict, wall: float) -> dict:
    """One loss-table row (canonical columns first; see ``CANONICAL``)."""
    nan = float("nan")
    n = spec["n_stages"]
    ratios = [_ratio(x) for x in spec["ratios"]]
    r = _ratio(spec["r"])
    D = b["D"]
    table = spec["stages"]
    realized = [p / q for _, p, q in table]
    if n == 1:
        s = [1.0]
        D_1, D_2 = float(D), 0.0
    else:
        s = [_ratio(x) for x in spec["proportions"]]
        D_2 = float((b["steps"] - table[-1][0]) * spec["batch_size"] * CONTEXT)
        D_1 = D - D_2
    return {
        "loss": losses["loss"], "N": spec["N"], "N_nonemb": spec["N_nonemb"], "M": spec["M"],
        "D": D, "D_T": spec["D_T"], "k": b["k"], "r": r, "r_f": ratios[-1],
        "r1": ratios[0], "r2": ratios[1] if n > 1 else nan, "n_stages": n,
        "approach": spec["approach"], "C": b["C"], "pair": spec["pair"],
        "target": spec["target"], "seed": spec["seed"],
        "helper": spec["helper"], "loss_helper": losses["loss_helper"],
        "r3": ratios[2] if n > 2 else nan, "r12": _ratio(spec["r12"]) if spec.get("r12") else nan,
        "pattern": spec.get("pattern") or "",
        "s1": s[0], "s2": s[1] if n > 1 else nan, "s3": s[2] if n > 2 else nan,
        "D_1": D_1, "D_2": D_2, "r1_actual": realized[0], "r_f_actual": realized[-1],
        "f_C": b["f_C"], "f_M": spec["f_M"], "f_r": spec["f_r"], "f_k": b["f_k"],
        "f_D": spec["f_D"], "C_nominal": b["C_nominal"], "M_nominal": b["M_nominal"],
        "run_id": f"{spec['id']}/fC{b['f_C']}", "job": spec["id"], "size": spec["size"],
        "n_layer": spec["n_layer"], "d_model": spec["d_model"], "n_head": spec["n_head"],
        "steps": b["steps"], "batch_tokens": spec["batch_size"] * CONTEXT, "lr_peak": spec["lr"],
        "warmup_steps": spec["lr_stages"][0][1], "wall_seconds": round(wall, 1),
    }

