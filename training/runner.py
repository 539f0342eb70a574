"""What every job kind does around its training loop: load the corpora once per process, start
from a fresh model and optimizer, resume from a trunk checkpoint, save checkpoints atomically,
report progress and record the finished job."""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

import torch

from . import corpora
from .loop import make_optimizer
from .model import CONTEXT, Size, build
from .store import Store, write_atomically

_LOADED: dict = {}


def load_corpora(name: str) -> dict:
    """``corpora.load(name)``, loaded once per process."""
    if name not in _LOADED:
        _LOADED[name] = corpora.load(name)
    return _LOADED[name]


def save_atomic(obj, path: Path) -> None:
    """``torch.save`` through a temporary file (:func:`store.write_atomically`), so a kill never
    leaves a truncated checkpoint and two writers of one checkpoint never collide."""
    write_atomically(path, lambda tmp: torch.save(obj, tmp))


def job_setup(spec: dict, store_path: str, ckpt_dir: str, table: str):
    """What every job starts from: ``(store, ckpt dir, fresh model, optimizer, on_step)``.

    The store is marked as holding a ``table`` loss table (``training.tables``). ``on_step``
    records progress every 5 s and, in a worker process, exits if the process that started the
    worker died, so a killed sweep leaves no job running unsupervised.
    """
    watch_parent = mp.parent_process() is not None
    parent = os.getppid()
    store, ckpt = Store(store_path), Path(ckpt_dir)
    store.set_meta("table", table)
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
    if not trunk_path.exists():
        return 0
    state = torch.load(trunk_path, weights_only=False)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"]


def trunk_saver(trunk_path: Path, model, opt):
    """``save_trunk(step)`` for ``run_branches``: atomic checkpoint of model, optimizer, step."""
    def save_trunk(s):
        save_atomic({"model": model.state_dict(), "opt": opt.state_dict(), "step": s}, trunk_path)
    return save_trunk


def finish(store: Store, spec: dict, tokens: int, t0: float) -> str:
    """Record a finished job (its full token count as progress, its wall time); its id."""
    store.set_progress(spec["id"], tokens)
    store.finish(spec["id"], time.time() - t0)
    return spec["id"]
