"""The registry of sweep families and job kinds.

A *family* is a kind of sweep config, selected by the config section that only it has: it
validates its config, plans its jobs and, optionally, checks the corpora before any worker starts
and summarises a plan. A *job kind* (a job spec's ``kind``) says how to run one job and how many
tokens it trains on. Adding a kind of run means one module with these functions and an entry here.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import m3, pretrain


@dataclass(frozen=True)
class JobKind:
    """How to run one job of a kind, ``run(spec, store_path, ckpt_dir) -> job id``, and its
    training token count, ``tokens(spec)`` (for progress)."""

    run: Callable[[dict, str, str], str]
    tokens: Callable[[dict], int]


@dataclass(frozen=True)
class Family:
    """A sweep family: the config ``section`` that selects it, the ``table`` its jobs write
    (``training.tables``), its config validation and planner."""

    section: str
    table: str
    load_config: Callable[[Path, dict, str | None], dict]
    plan: Callable[[dict], list[dict]]
    check_corpora: Callable[[list[dict], dict], None] | None = None
    summary: Callable[[list[dict]], str] | None = None


JOB_KINDS = {
    "pre": JobKind(pretrain.run_pre, pretrain.pre_tokens),
    "cpt": JobKind(pretrain.run_cpt, pretrain.cpt_tokens),
    "m3": JobKind(m3.run_job, m3.job_tokens),
}
#: Checked in order; the last is the default, so a config with no family's section is reported
#: by that family's validation (missing keys).
FAMILIES = (
    Family("m3", m3.TABLE, m3.load_config, m3.plan, m3.check_corpora, m3.summary),
    Family("pretrain", pretrain.TABLE, pretrain.load_config, pretrain.plan),
)


def family(cfg: dict) -> Family:
    """The family of a (raw or validated) config: the first whose section it has."""
    return next((f for f in FAMILIES if f.section in cfg), FAMILIES[-1])


def job_kind(spec: dict) -> JobKind:
    """The registered kind of a job spec."""
    return JOB_KINDS[spec["kind"]]
