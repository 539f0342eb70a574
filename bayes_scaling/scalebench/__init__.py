"""ScaleBench (Li et al. 2026, arXiv 2604.22753): the laws of four of its tasks and its data.

``task_laws(task)`` gives the task's laws (:mod:`.laws`); ``load(task)`` its candidate pool and
target region as DataFrames with the original columns. The data folder is ``data_dir``, else the
``BAYES_SCALING_SCALEBENCH`` environment variable, else ``../shared/datasets/scalebench`` relative
to the repository root.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ..errors import DataError
from .laws import COLUMNS, TASKS, get, task_laws  # noqa: F401

ENV_VAR = "BAYES_SCALING_SCALEBENCH"

#: target column of each task (SOURCE.md).
TARGETS = {
    "data_constrained_scaling_law": "loss",
    "farseer_scaling_law": "loss",
    "parallel_scaling_law": "loss",
    "vocab_scaling_law": "unigram_normalized_loss",
}


def data_dir(path=None) -> Path:
    """The ScaleBench folder: ``path``, else ``$BAYES_SCALING_SCALEBENCH``, else
    ``<repo>/../shared/datasets/scalebench``."""
    if path is not None:
        return Path(path)
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    return Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "scalebench"


def load(task: str, folder=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(train, test)`` of one task: the candidate pool and the target region (original
    columns)."""
    if task not in TASKS:
        raise DataError(f"unknown ScaleBench task {task!r}; the tasks are {', '.join(TASKS)}")
    folder = data_dir(folder) / task
    if not folder.is_dir():
        raise DataError(f"ScaleBench folder {folder} not found; pass the folder holding the "
                        f"task folders or set {ENV_VAR}")
    return pd.read_csv(folder / "train.csv"), pd.read_csv(folder / "test.csv")


def golden(task: str, folder=None) -> dict:
    """The benchmark's reference values of every law of ``task`` (``golden.json``)."""
    return json.loads((data_dir(folder) / task / "golden.json").read_text())
