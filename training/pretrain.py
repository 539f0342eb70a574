"""The PTPP sweep family: pre-training stages and continual pre-training with replay.

Two job kinds (each a pure function of its spec, which holds the config and the seed):

* ``pre``: pre-training of one size on the source mixture, from the previous stage's trunk
  checkpoint to the next PTPP stage; the stage's annealed checkpoint is saved and evaluated on
  both validation sets (the ``D = 0`` rows).
* ``cpt``: continual pre-training from one stage checkpoint with mixture ``(1 - r)`` target +
  ``r`` source (re-warmed LR, fresh optimizer state); an annealed branch is evaluated at each ATPP.

PTPP and ATPP are tokens per non-embedding parameter (``N_nonemb``).
"""
from __future__ import annotations

import time
import zlib
from pathlib import Path

import torch

from .config import ConfigError, check_common, merge_defaults, spec_settings
from .loop import WSD, Batches, Mixture, branch_start, eval_windows, evaluate, run_branches
from .model import CONTEXT, Size, build, param_counts
from .runner import finish, job_setup, load_corpora, resume, save_atomic, trunk_saver

TABLE = "ptpp"
#: The config sections of this family, beside ``config.DEFAULTS``.
SECTIONS = {"sizes": None, "pretrain": None, "cpt": None}
PRETRAIN_KEYS = {"mixture", "ptpp", "lr", "warmup_ptpp"}
CPT_KEYS = {"target", "replay", "atpp", "lr", "warmup_atpp"}


def load_config(path: Path, raw: dict, out_dir: str | None = None) -> dict:
    """Validate a PTPP sweep config (``[sizes]``, ``[pretrain]``, ``[cpt]`` and the shared keys)."""
    cfg = merge_defaults(path, raw, SECTIONS, out_dir,
                         ("name", "corpus", "out_dir", "sizes", "pretrain", "cpt"))
    for sec, keys in (("pretrain", PRETRAIN_KEYS), ("cpt", CPT_KEYS)):
        if not isinstance(cfg[sec], dict) or set(cfg[sec]) != keys:
            raise ConfigError(f"{path}: [{sec}] must have exactly the keys {sorted(keys)}, "
                              f"got {sorted(cfg[sec]) if isinstance(cfg[sec], dict) else cfg[sec]}")
    p, c = cfg["pretrain"], cfg["cpt"]
    if not p["ptpp"] or sorted(p["ptpp"]) != list(p["ptpp"]) or min(p["ptpp"]) <= 0:
        raise ConfigError(f"pretrain.ptpp must be positive and increasing, got {p['ptpp']}")
    if not c["replay"] or not all(0 < r <= 1 for r in c["replay"]):
        raise ConfigError(f"cpt.replay values must be in (0, 1], got {c['replay']}")
    if not c["atpp"] or sorted(c["atpp"]) != list(c["atpp"]) or min(c["atpp"]) <= 0:
        raise ConfigError(f"cpt.atpp must be positive and increasing, got {c['atpp']}")
    if c["target"] in p["mixture"]:
        raise ConfigError(f"cpt.target {c['target']!r} must not be in the pre-training mixture")
    check_common(cfg, path)
    return cfg


# ----------------------------------------------------------------------------- plan

def plan(cfg: dict) -> list[dict]:
    """All job specs in priority order.

    PTPP stages below the last for every size first (pre-training, then CPT), then the last stage
    size by size from the smallest (its pre-training jobs first, as they are the long ones).
    """
    sizes = []
    for name, s in cfg["sizes"].items():
        n, n_ne = param_counts(build(Size(**s), 0))
        sizes.append((n_ne, name, Size(**s), n))
    sizes.sort()
    tok = cfg["batch_size"] * CONTEXT
    common = spec_settings(cfg)
    common["source"] = cfg["pretrain"]["mixture"]
    common["target"] = cfg["cpt"]["target"]
    stages = cfg["pretrain"]["ptpp"]
    jobs: dict[tuple, dict] = {}
    for seed in cfg["seeds"]:
        for n_ne, name, size, n in sizes:
            base = {**common, "seed": seed, "size": name, "n_layer": size.n_layer,
                    "d_model": size.d_model, "n_head": size.n_head, "N": n, "N_nonemb": n_ne,
                    "lr": cfg["pretrain"]["lr"],
                    "warmup": max(1, round(cfg["pretrain"]["warmup_ptpp"] * n_ne / tok))}
            prev, prev_steps = None, 0
            for p in stages:
                jid = f"pre-{name}-seed{seed}-p{p:g}"
                jobs[("pre", seed, name, p)] = {
                    **base, "kind": "pre", "id": jid, "ptpp": p, "prev": prev,
                    "trunk": f"trunk-{name}-seed{seed}", "stage_ckpt": f"{jid}.pt",
                    "steps": max(2, round(p * n_ne / tok)), "prev_steps": prev_steps,
                    "deps": [prev] if prev else []}
                prev, prev_steps = jid, jobs[("pre", seed, name, p)]["steps"]
                for r in cfg["cpt"]["replay"]:
                    cid = f"cpt-{name}-seed{seed}-p{p:g}-r{r:g}"
                    atpp = cfg["cpt"]["atpp"]
                    jobs[("cpt", seed, name, p, r)] = {
                        **base, "kind": "cpt", "id": cid, "ptpp": p, "replay": r,
                        "lr": cfg["cpt"]["lr"], "stage_ckpt": f"{jid}.pt",
                        "warmup": max(1, round(cfg["cpt"]["warmup_atpp"] * n_ne / tok)),
                        "atpp": list(atpp),
                        "pretrain_steps": jobs[("pre", seed, name, p)]["steps"],
                        "branches": sorted({max(2, round(a * n_ne / tok)) for a in atpp}),
                        "deps": [jid]}
    order = []
    early, last = stages[:-1], stages[-1]
    for seed in cfg["seeds"]:
        for p in early:
            order += [jobs[("pre", seed, s[1], p)] for s in sizes]
        for p in early:
            order += [jobs[("cpt", seed, s[1], p, r)] for s in sizes for r in cfg["cpt"]["replay"]]
        order += [jobs[("pre", seed, s[1], last)] for s in sizes]
        order += [jobs[("cpt", seed, s[1], last, r)] for s in sizes for r in cfg["cpt"]["replay"]]
    return order


def pre_tokens(spec: dict) -> int:
    """Training tokens of a ``pre`` job: the trunk from the previous stage's branch point on."""
    s, prev = spec["steps"], spec["prev_steps"]
    return (s - (branch_start(prev, spec["cooldown_fraction"]) if prev else 0)) * \
        spec["batch_size"] * CONTEXT


def cpt_tokens(spec: dict) -> int:
    """Training tokens of a ``cpt`` job: the trunk plus every non-final cooldown branch."""
    b, f = spec["branches"], spec["cooldown_fraction"]
    return (b[-1] + sum(t - branch_start(t, f) for t in b[:-1])) * spec["batch_size"] * CONTEXT


# ----------------------------------------------------------------------------- one job

def _context(spec: dict, store_path: str, ckpt_dir: str):
    """Shared start of both kinds: setup, training corpora, validation windows, row builder."""
    store, ckpt, model, opt, on_step = job_setup(spec, store_path, ckpt_dir, TABLE)
    data = load_corpora(spec["corpus"])
    train_c = {k: v["train"] for k, v in data.items() if "train" in v}
    val_c = {k: v["val"] for k, v in data.items() if "val" in v}
    windows = {"source": eval_windows(val_c, spec["source"], spec["eval_sequences"], CONTEXT),
               "target": eval_windows(val_c, {spec["target"]: 1.0}, spec["eval_sequences"],
                                      CONTEXT)}
    tok = spec["batch_size"] * CONTEXT

    def rows(key, annealed, D, extra):
        """One row per validation domain: ``{f"{key}/{domain}": row}``."""
        return {f"{key}/{d}": {
            "loss": evaluate(annealed, w), "N": spec["N"], "N_nonemb": spec["N_nonemb"],
            "D": D, "ptpp": spec["ptpp"], "domain": d, "run_id": spec["id"],
            "seed": spec["seed"], "size": spec["size"], "n_layer": spec["n_layer"],
            "d_model": spec["d_model"], "n_head": spec["n_head"], "batch_tokens": tok,
            "lr_peak": spec["lr"], **extra} for d, w in windows.items()}

    return store, ckpt, model, opt, on_step, train_c, rows


def run_pre(spec: dict, store_path: str, ckpt_dir: str) -> str:
    """Run one ``pre`` job to completion (resuming from its trunk checkpoint)."""
    t0 = time.time()
    store, ckpt, model, opt, on_step, train_c, rows = _context(spec, store_path, ckpt_dir)
    tok = spec["batch_size"] * CONTEXT
    done = store.keys(spec["id"])
    batches = Batches(train_c, spec["batch_size"], CONTEXT, spec["seed"],
                      zlib.crc32(spec["trunk"].encode()))
    trunk_path = ckpt / f"{spec['trunk']}.pt"
    if not trunk_path.exists() and spec["prev"]:
        raise RuntimeError(f"{spec['id']}: trunk checkpoint {trunk_path} is missing")
    step = resume(trunk_path, model, opt)

    def on_branch(total, annealed):
        save_atomic(annealed.state_dict(), ckpt / spec["stage_ckpt"])
        extra = {"replay": float("nan"), "atpp": 0.0, "phase": "pretrain",
                 "pretrain_tokens": total * tok, "steps": total,
                 "ptpp_actual": total * tok / spec["N_nonemb"],
                 "wall_seconds": round(time.time() - t0, 1)}
        store.add_rows(spec["id"], rows(spec["id"], annealed, 0, extra))

    skip = {spec["steps"]} if len(done) == 2 else set()
    run_branches(model, opt, batches, Mixture.constant(spec["source"]),
                 WSD(spec["lr"], spec["warmup"]), step, [spec["steps"]],
                 spec["cooldown_fraction"], on_branch, trunk_saver(trunk_path, model, opt), skip,
                 spec["checkpoint_every"], spec["grad_clip"], on_step)
    return finish(store, spec, pre_tokens(spec), t0)


def run_cpt(spec: dict, store_path: str, ckpt_dir: str) -> str:
    """Run one ``cpt`` job to completion (resuming from its trunk checkpoint)."""
    t0 = time.time()
    store, ckpt, model, opt, on_step, train_c, rows = _context(spec, store_path, ckpt_dir)
    tok = spec["batch_size"] * CONTEXT
    done = store.keys(spec["id"])
    r = spec["replay"]
    src = sum(spec["source"].values())
    weights = {spec["target"]: 1.0 - r, **{k: r * v / src for k, v in spec["source"].items()}}
    batches = Batches(train_c, spec["batch_size"], CONTEXT, spec["seed"],
                      zlib.crc32(spec["id"].encode()))
    trunk_path = ckpt / f"{spec['id']}.trunk.pt"
    model.load_state_dict(torch.load(ckpt / spec["stage_ckpt"], weights_only=False))
    step = resume(trunk_path, model, opt)
    nominal = dict(zip(spec["branches"], spec["atpp"]))
    pretrain_tokens = spec["pretrain_steps"] * tok

    def on_branch(total, annealed):
        D = total * tok
        extra = {"replay": r, "atpp": D / spec["N_nonemb"],
                 "atpp_nominal": nominal.get(total, float("nan")), "phase": "cpt",
                 "steps": total, "pretrain_tokens": pretrain_tokens,
                 "ptpp_actual": pretrain_tokens / spec["N_nonemb"],
                 "wall_seconds": round(time.time() - t0, 1)}
        store.add_rows(spec["id"], rows(f"{spec['id']}/{total}", annealed, D, extra))

    skip = {t for t in spec["branches"]
            if {f"{spec['id']}/{t}/source", f"{spec['id']}/{t}/target"} <= done}
    run_branches(model, opt, batches, Mixture.constant(weights), WSD(spec["lr"], spec["warmup"]),
                 step, spec["branches"], spec["cooldown_fraction"], on_branch,
                 trunk_saver(trunk_path, model, opt), skip, spec["checkpoint_every"],
                 spec["grad_clip"], on_step)
    trunk_path.unlink(missing_ok=True)
    return finish(store, spec, cpt_tokens(spec), t0)
