"""A sweep: a grid of runs from a TOML file, a results store, resumable execution.

Jobs (each a pure function of its spec, which holds the config and the seed):

* ``pre``: pre-training of one size on the source mixture, from the previous stage's trunk
  checkpoint to the next PTPP stage; the stage's annealed checkpoint is saved and evaluated on
  both validation sets (the ``D = 0`` rows).
* ``cpt``: continual pre-training from one stage checkpoint with mixture ``(1 - r)`` target +
  ``r`` source (re-warmed LR, fresh optimizer state); an annealed branch is evaluated at each ATPP.
* ``m3``: pre-training from scratch of a target language with a helper language (multi-epoch,
  multi-lingual, multi-stage); planned and run by ``training.m3`` from a config with an ``[m3]``
  table, through the same store and runner.

Every evaluation is appended to a SQLite store in one transaction (``INSERT OR IGNORE`` on a
unique key), so a killed sweep, restarted with the same command, skips recorded evaluations and
resumes unfinished jobs from their last trunk checkpoint. Execution goes through a backend
(``slots``, ``submit(fn, *args) -> Future``, ``shutdown()``): ``InlineBackend`` runs jobs in the
calling process, ``LocalBackend`` in local worker processes; another backend (e.g. a cluster
queue) only needs the same three members and a filesystem shared with the store.
"""
from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing as mp
import os
import sqlite3
import sys
import time
import tomllib
import zlib
from pathlib import Path

CANONICAL = ["loss", "N", "N_nonemb", "D", "ptpp", "replay", "domain", "atpp"]


class ConfigError(ValueError):
    """The sweep configuration is invalid."""


# ----------------------------------------------------------------------------- config

DEFAULTS = {
    "name": None, "corpus": None, "out_dir": None, "seeds": [0], "attn": "sdpa",
    "batch_size": 16, "eval_sequences": 256, "checkpoint_every": 200,
    "cooldown_fraction": 0.2, "weight_decay": 0.1, "grad_clip": 1.0,
    "sizes": None, "pretrain": None, "cpt": None,
}
PRETRAIN_KEYS = {"mixture", "ptpp", "lr", "warmup_ptpp"}
CPT_KEYS = {"target", "replay", "atpp", "lr", "warmup_atpp"}


def merge_defaults(path, raw: dict, defaults: dict, out_dir, required) -> dict:
    """``raw`` over ``defaults``: unknown keys and missing ``required`` ones raise ConfigError;
    ``out_dir`` (when given) overrides the file's."""
    unknown = set(raw) - set(defaults)
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}; allowed {sorted(defaults)}")
    cfg = {**defaults, **raw}
    if out_dir is not None:
        cfg["out_dir"] = out_dir
    for key in required:
        if cfg[key] is None:
            raise ConfigError(f"{path}: missing required key {key!r}")
    return cfg


def load_config(path: str | Path, out_dir: str | None = None) -> dict:
    """Read and validate a sweep TOML file; ``out_dir`` overrides the file's ``out_dir``.

    A file with an ``[m3]`` table is an M3 sweep (validated by ``training.m3.load_config``).
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    with open(path, "rb") as f:
        try:
            raw = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from e
    if "m3" in raw:
        from . import m3
        return m3.load_config(path, raw, out_dir)
    cfg = merge_defaults(path, raw, DEFAULTS, out_dir,
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


def check_common(cfg: dict, path: str | Path) -> None:
    """Checks shared by every sweep kind: cooldown, batch, evaluation, attention, sizes."""
    if not 0 < cfg["cooldown_fraction"] < 1:
        raise ConfigError(f"cooldown_fraction must be in (0, 1), got {cfg['cooldown_fraction']}")
    for k in ("batch_size", "eval_sequences"):
        if not isinstance(cfg[k], int) or cfg[k] < 1:
            raise ConfigError(f"{k} must be a positive integer, got {cfg[k]!r}")
    if cfg["attn"] not in ("sdpa", "eager"):
        raise ConfigError(f"attn must be 'sdpa' or 'eager', got {cfg['attn']!r}")
    from .model import Size
    for name, s in (cfg.get("sizes") or {}).items():
        try:
            Size(**s)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"sizes.{name}: {e} (need n_layer, d_model, n_head)") from e


def spec_hash(spec: dict) -> str:
    """Hash of a job spec: everything that determines the job's results."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- plan

def plan(cfg: dict) -> list[dict]:
    """All job specs in priority order.

    PTPP stages below the last for every size first (pre-training, then CPT), then the last stage
    size by size from the smallest (its pre-training jobs first, as they are the long ones).
    An M3 config is planned by ``training.m3.plan`` (cheapest jobs first).
    """
    if cfg.get("m3") is not None:
        from . import m3
        return m3.plan(cfg)
    from .model import Size, build, param_counts

    sizes = []
    for name, s in cfg["sizes"].items():
        n, n_ne = param_counts(build(Size(**s), 0))
        sizes.append((n_ne, name, Size(**s), n))
    sizes.sort()
    tok = cfg["batch_size"] * 128
    common = {k: cfg[k] for k in ("corpus", "attn", "batch_size", "eval_sequences",
                                  "checkpoint_every", "cooldown_fraction", "weight_decay",
                                  "grad_clip")}
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


def job_tokens(spec: dict) -> int:
    """Training tokens a job processes (trunk plus cooldown branches), for progress and ETA."""
    if spec["kind"] == "m3":
        from . import m3
        return m3.job_tokens(spec)
    tok = spec["batch_size"] * 128
    f = spec["cooldown_fraction"]
    from .loop import branch_start
    if spec["kind"] == "pre":
        s, prev = spec["steps"], spec["prev_steps"]
        return (s - (branch_start(prev, f) if prev else 0)) * tok
    b = spec["branches"]
    return (b[-1] + sum(t - branch_start(t, f) for t in b[:-1])) * tok


# ----------------------------------------------------------------------------- store

class Store:
    """SQLite results store: evaluation rows, finished jobs, progress and job spec hashes."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with self._con() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            con.execute("CREATE TABLE IF NOT EXISTS rows (key TEXT PRIMARY KEY, job TEXT, "
                        "data TEXT, written REAL)")
            con.execute("CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, wall REAL)")
            con.execute("CREATE TABLE IF NOT EXISTS progress (job TEXT PRIMARY KEY, tokens INT)")
            con.execute("CREATE TABLE IF NOT EXISTS specs (job TEXT PRIMARY KEY, hash TEXT)")

    def claim(self, jobs: list[dict]) -> None:
        """Record each job's spec hash; a job already recorded with another spec is an error.

        Jobs are checked one by one, so a grid can be extended or trimmed (sizes, stages, replay
        ratios) without invalidating finished work, but a changed setting cannot mix results.
        """
        with self._con() as con:
            con.executemany("INSERT OR IGNORE INTO specs VALUES (?, ?)",
                            [(j["id"], spec_hash(j)) for j in jobs])
            have = dict(con.execute("SELECT job, hash FROM specs"))
        changed = [j["id"] for j in jobs if have[j["id"]] != spec_hash(j)]
        if changed:
            raise ConfigError(
                f"store {self.path} holds results of {len(changed)} jobs made with different "
                f"settings ({', '.join(changed[:3])}, ...); use another out_dir for a new grid")

    def _con(self):
        return sqlite3.connect(self.path, timeout=120)

    def set_meta(self, key: str, value: str) -> None:
        with self._con() as con:
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def meta(self, key: str) -> str | None:
        with self._con() as con:
            got = con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return got[0] if got else None

    def add_rows(self, job: str, rows: dict[str, dict]) -> None:
        """Append rows atomically (one transaction); keys already present are ignored."""
        now = time.time()
        with self._con() as con:
            con.executemany("INSERT OR IGNORE INTO rows VALUES (?, ?, ?, ?)",
                            [(k, job, json.dumps(v), now) for k, v in rows.items()])

    def keys(self, job: str) -> set[str]:
        with self._con() as con:
            return {k for (k,) in con.execute("SELECT key FROM rows WHERE job=?", (job,))}

    def finish(self, job: str, wall: float) -> None:
        with self._con() as con:
            con.execute("INSERT OR REPLACE INTO jobs VALUES (?, ?)", (job, wall))

    def finished(self) -> dict[str, float]:
        with self._con() as con:
            return dict(con.execute("SELECT job, wall FROM jobs"))

    def set_progress(self, job: str, tokens: int) -> None:
        with self._con() as con:
            con.execute("INSERT OR REPLACE INTO progress VALUES (?, ?)", (job, tokens))

    def progress(self) -> int:
        with self._con() as con:
            return con.execute("SELECT COALESCE(SUM(tokens), 0) FROM progress").fetchone()[0]

    def frame(self):
        """All rows as a DataFrame: canonical columns first, then pass-through columns."""
        import pandas as pd
        with self._con() as con:
            data = [json.loads(d) for (d,) in con.execute("SELECT data FROM rows ORDER BY key")]
        df = pd.DataFrame(data)
        if self.meta("table") == "m3" or "approach" in df.columns:
            from . import m3
            return m3.frame(df)
        if df.empty:
            return pd.DataFrame(columns=CANONICAL)
        df["is_base"] = df["D"] == 0  # pre-adaptation rows: replay is NaN (no adaptation yet)
        df = df[CANONICAL + [c for c in df.columns if c not in CANONICAL]]
        return df.sort_values(["seed", "N_nonemb", "ptpp", "replay", "domain", "D"],
                              na_position="first").reset_index(drop=True)


def export(store_path: str | Path, out_csv: str | Path) -> int:
    """Write the store's rows to a CSV (atomically); returns the number of rows."""
    if not Path(store_path).exists():
        raise FileNotFoundError(f"no results store at {store_path}")
    df = Store(store_path).frame()
    out_csv = Path(out_csv)
    tmp = out_csv.with_name(out_csv.name + ".tmp")
    df.to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, out_csv)
    return len(df)


# ----------------------------------------------------------------------------- one job

_CORPORA: dict = {}


def _corpora(name: str):
    from . import corpora
    if name not in _CORPORA:
        _CORPORA[name] = corpora.load(name)
    return _CORPORA[name]


def _save(obj, path: Path) -> None:
    import torch
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def job_setup(spec: dict, store_path: str, ckpt_dir: str, watch_parent: bool):
    """What every job starts from: ``(store, ckpt dir, fresh model, optimizer, on_step)``.

    ``on_step`` records progress every 5 s and, with ``watch_parent`` (worker processes), exits
    if the sweep process that started the job died, so a killed sweep leaves no job running.
    """
    from .loop import make_optimizer
    from .model import CONTEXT, Size, build

    parent = os.getppid()
    store, ckpt = Store(store_path), Path(ckpt_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    tok = spec["batch_size"] * CONTEXT
    size = Size(spec["n_layer"], spec["d_model"], spec["n_head"])
    model = build(size, spec["seed"], spec["attn"])
    opt = make_optimizer(model, spec["weight_decay"])
    counter = {"steps": 0, "t": time.time()}

    def on_step(step):
        counter["steps"] += 1
        if watch_parent and os.getppid() != parent:  # the sweep process died
            os._exit(1)
        if time.time() - counter["t"] > 5:
            counter["t"] = time.time()
            store.set_progress(spec["id"], counter["steps"] * tok)

    return store, ckpt, model, opt, on_step


def resume(trunk_path: Path, model, opt) -> int:
    """Load a trunk checkpoint into ``model``/``opt`` if there is one; returns its step (or 0)."""
    import torch
    if not trunk_path.exists():
        return 0
    state = torch.load(trunk_path, weights_only=False)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"]


def trunk_saver(trunk_path: Path, model, opt):
    """``save_trunk(step)`` for ``run_branches``: atomic checkpoint of model, optimizer, step."""
    def save_trunk(s):
        _save({"model": model.state_dict(), "opt": opt.state_dict(), "step": s}, trunk_path)
    return save_trunk


def run_job(spec: dict, store_path: str, ckpt_dir: str, watch_parent: bool = False) -> str:
    """Run one job to completion (resuming from its checkpoint) and record its rows.

    With ``watch_parent`` (worker processes) the job exits if the sweep process that started it
    dies, so a killed sweep leaves no job running unsupervised.
    """
    if spec["kind"] == "m3":
        from . import m3
        return m3.run_job(spec, store_path, ckpt_dir, watch_parent)
    import torch

    from .loop import WSD, Batches, Mixture, eval_windows, evaluate, run_branches
    from .model import CONTEXT

    t0 = time.time()
    store, ckpt, model, opt, on_step = job_setup(spec, store_path, ckpt_dir, watch_parent)
    data = _corpora(spec["corpus"])
    train_c = {k: v["train"] for k, v in data.items() if "train" in v}
    val_c = {k: v["val"] for k, v in data.items() if "val" in v}
    windows = {"source": eval_windows(val_c, spec["source"], spec["eval_sequences"], CONTEXT),
               "target": eval_windows(val_c, {spec["target"]: 1.0}, spec["eval_sequences"],
                                      CONTEXT)}
    tok = spec["batch_size"] * CONTEXT
    stream = zlib.crc32(spec["id"].encode())

    def row(domain, loss, D, extra):
        return {"loss": loss, "N": spec["N"], "N_nonemb": spec["N_nonemb"], "D": D,
                "ptpp": spec["ptpp"], "domain": domain, "run_id": spec["id"],
                "seed": spec["seed"], "size": spec["size"], "n_layer": spec["n_layer"],
                "d_model": spec["d_model"], "n_head": spec["n_head"],
                "batch_tokens": tok, "lr_peak": spec["lr"], **extra}

    done = store.keys(spec["id"])
    if spec["kind"] == "pre":
        mixture = Mixture.constant(spec["source"])
        batches = Batches(train_c, spec["batch_size"], CONTEXT, spec["seed"],
                          zlib.crc32(spec["trunk"].encode()))
        trunk_path = ckpt / f"{spec['trunk']}.pt"
        if not trunk_path.exists() and spec["prev"]:
            raise RuntimeError(f"{spec['id']}: trunk checkpoint {trunk_path} is missing")
        step = resume(trunk_path, model, opt)
        save_trunk = trunk_saver(trunk_path, model, opt)

        def on_branch(total, annealed):
            _save(annealed.state_dict(), ckpt / spec["stage_ckpt"])
            extra = {"replay": float("nan"), "atpp": 0.0, "phase": "pretrain",
                     "pretrain_tokens": total * tok, "steps": total,
                     "ptpp_actual": total * tok / spec["N_nonemb"],
                     "wall_seconds": round(time.time() - t0, 1)}
            store.add_rows(spec["id"], {f"{spec['id']}/{d}": row(d, evaluate(annealed, w), 0,
                                                                    extra)
                                        for d, w in windows.items()})

        skip = {spec["steps"]} if len(done) == 2 else set()
        run_branches(model, opt, batches, mixture,
                     WSD(spec["lr"], spec["warmup"]), step, [spec["steps"]],
                     spec["cooldown_fraction"], on_branch, save_trunk, skip,
                     spec["checkpoint_every"], spec["grad_clip"], on_step)
    else:
        r = spec["replay"]
        src = sum(spec["source"].values())
        weights = {spec["target"]: 1.0 - r, **{k: r * v / src for k, v in spec["source"].items()}}
        mixture = Mixture.constant(weights)
        batches = Batches(train_c, spec["batch_size"], CONTEXT, spec["seed"], stream)
        trunk_path = ckpt / f"{spec['id']}.trunk.pt"
        stage = torch.load(ckpt / spec["stage_ckpt"], weights_only=False)
        model.load_state_dict(stage)
        step = resume(trunk_path, model, opt)
        save_trunk = trunk_saver(trunk_path, model, opt)

        nominal = dict(zip(spec["branches"], spec["atpp"]))

        def on_branch(total, annealed):
            D = total * tok
            extra = {"replay": r, "atpp": D / spec["N_nonemb"],
                     "atpp_nominal": nominal.get(total, float("nan")), "phase": "cpt",
                     "steps": total, "pretrain_tokens": spec["pretrain_steps"] * tok,
                     "ptpp_actual": spec["pretrain_steps"] * tok / spec["N_nonemb"], "wall_seconds": round(time.time() - t0, 1)}
            store.add_rows(spec["id"], {f"{spec['id']}/{total}/{d}": row(d, evaluate(annealed, w),
                                                                         D, extra)
                                        for d, w in windows.items()})

        skip = {t for t in spec["branches"]
                if {f"{spec['id']}/{t}/source", f"{spec['id']}/{t}/target"} <= done}
        run_branches(model, opt, batches, mixture, WSD(spec["lr"], spec["warmup"]), step,
                     spec["branches"], spec["cooldown_fraction"], on_branch, save_trunk, skip,
                     spec["checkpoint_every"], spec["grad_clip"], on_step)
        trunk_path.unlink(missing_ok=True)
    store.set_progress(spec["id"], job_tokens(spec))
    store.finish(spec["id"], time.time() - t0)
    return spec["id"]


# ----------------------------------------------------------------------------- backends

def _init_worker(threads: int) -> None:
    import torch
    torch.set_num_threads(threads)


class InlineBackend:
    """Runs each job in the calling process, one at a time (``--workers 1``)."""

    slots = 1

    def submit(self, fn, *args) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            fut.set_exception(e)
        return fut

    def shutdown(self) -> None:
        pass


class LocalBackend:
    """Runs jobs in ``workers`` local processes, splitting the CPU cores between them."""

    def __init__(self, workers: int):
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}")
        threads = max(1, (os.cpu_count() or 1) // workers)
        self.pool = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                                           initializer=_init_worker, initargs=(threads,))
        self.slots = workers

    def submit(self, fn, *args) -> cf.Future:
        return self.pool.submit(fn, *args, True)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


# ----------------------------------------------------------------------------- driver

def run_sweep(config: str | Path, workers: int = 1, out_dir: str | None = None,
              backend=None, progress: bool = True) -> Path:
    """Run (or resume) the sweep of a config; returns the results store path."""
    from tqdm import tqdm

    from . import corpora

    cfg = load_config(config, out_dir)
    out = Path(cfg["out_dir"])
    store_path = out / "results.sqlite"
    store = Store(store_path)
    (out / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n")
    data = corpora.load(cfg["corpus"])  # fetch / verify once, before any worker starts
    jobs = plan(cfg)
    if cfg.get("m3") is not None:
        from . import m3
        m3.check_corpora(jobs, data)  # target cuts fit, the helper is never repeated
        store.set_meta("table", "m3")
    store.claim(jobs)
    finished = set(store.finished())
    todo = [j for j in jobs if j["id"] not in finished]
    if backend is None:
        backend = InlineBackend() if workers == 1 else LocalBackend(workers)
    total = sum(job_tokens(j) for j in jobs)
    bar = tqdm(total=total, initial=min(total, store.progress()), unit="tok", unit_scale=True,
               disable=not progress, mininterval=1 if sys.stderr.isatty() else 60,
               desc=cfg["name"], smoothing=0.05)
    running: dict[cf.Future, dict] = {}
    try:
        while todo or running:
            for j in list(todo):
                if len(running) >= backend.slots:
                    break
                if all(d in finished for d in j["deps"]):
                    running[backend.submit(run_job, j, str(store_path), str(out / "ckpt"))] = j
                    todo.remove(j)
            if not running:
                raise RuntimeError(f"jobs {[j['id'] for j in todo]} wait on unfinished deps")
            done, _ = cf.wait(running, timeout=10, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                j = running.pop(fut)
                fut.result()  # re-raise a job's failure here
                finished.add(j["id"])
                bar.write(f"{time.strftime('%H:%M:%S')} done {j['id']}")
            bar.update(max(0, min(total, store.progress()) - bar.n))
    finally:
        bar.close()
        backend.shutdown()
    return store_path
