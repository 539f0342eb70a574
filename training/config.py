"""Sweep configuration shared by every job kind: the common keys and their defaults, reading a
TOML file, the checks every kind makes, and the hash that identifies a job's settings.

Each sweep family (``training.pretrain``, ``training.m3``) adds its own sections to
``DEFAULTS`` and validates them; ``training.kinds`` picks the family from the file's sections.
"""
from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

from .model import Size

#: Keys every sweep config may set, with their defaults (``None``: required or family-specific).
DEFAULTS = {
    "name": None, "corpus": None, "out_dir": None, "seeds": [0], "attn": "sdpa",
    "batch_size": 16, "eval_sequences": 256, "checkpoint_every": 200,
    "cooldown_fraction": 0.2, "weight_decay": 0.1, "grad_clip": 1.0,
}
#: The settings every job spec copies from its config.
SPEC_KEYS = ("corpus", "attn", "batch_size", "eval_sequences", "checkpoint_every",
             "cooldown_fraction", "weight_decay", "grad_clip")


class ConfigError(ValueError):
    """The sweep configuration is invalid."""


def read_toml(path: str | Path) -> dict:
    """The raw contents of a config file; a missing file or invalid TOML raises ConfigError."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from e


def merge_defaults(path, raw: dict, sections: dict, out_dir, required) -> dict:
    """``raw`` over ``DEFAULTS`` plus a family's ``sections`` (their defaults): unknown keys and
    missing ``required`` ones raise ConfigError; ``out_dir`` (when given) overrides the file's."""
    defaults = {**DEFAULTS, **sections}
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


def check_common(cfg: dict, path: str | Path) -> None:
    """Checks shared by every sweep kind: cooldown, batch, evaluation, attention, sizes."""
    if not 0 < cfg["cooldown_fraction"] < 1:
        raise ConfigError(f"cooldown_fraction must be in (0, 1), got {cfg['cooldown_fraction']}")
    for k in ("batch_size", "eval_sequences"):
        if not isinstance(cfg[k], int) or cfg[k] < 1:
            raise ConfigError(f"{k} must be a positive integer, got {cfg[k]!r}")
    if cfg["attn"] not in ("sdpa", "eager"):
        raise ConfigError(f"attn must be 'sdpa' or 'eager', got {cfg['attn']!r}")
    for name, s in (cfg.get("sizes") or {}).items():
        try:
            Size(**s)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"sizes.{name}: {e} (need n_layer, d_model, n_head)") from e


def spec_settings(cfg: dict) -> dict:
    """The settings of ``cfg`` that every job spec carries (``SPEC_KEYS``)."""
    return {k: cfg[k] for k in SPEC_KEYS}


def spec_hash(spec: dict) -> str:
    """Hash of a job spec: everything that determines the job's results."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
