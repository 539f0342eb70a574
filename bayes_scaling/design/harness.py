"""The ScaleBench protocol as a harness: buy runs with a method, refit, score, per seed.

Protocol (Li et al. 2026, arXiv 2604.22753; SOURCE.md), for each seed and each group:

1. Budget ``b * C`` at each checkpoint ``b`` (``C`` the group pool's total cost). Runs are bought
   one at a time, in batches of the method's ``batch`` once ``n_params`` runs are in; a run whose
   cost would exceed the current checkpoint's budget is held over and bought first at the first
   later checkpoint whose budget it fits (no checkpoint spends more than its budget).
2. At each checkpoint the law is refitted to the bought runs (:func:`fitting.least_squares`: 64
   starts uniform in the bounds) and scored by the clipped R^2 on the target rows of every group
   concatenated (``r2_protocol``; -1 when a fit fails).
   ``scorers`` (:data:`SCORERS`) rescore the same purchases from the same starts with other refits,
   side by side (``r2_<scorer>`` columns): ``"compiled"`` (the refit above) and ``"benchmark"``
   (the benchmark's own scipy L-BFGS-B loop; a refit with no finite start is scored at the
   parameter vector the benchmark's fitter falls back to, :func:`fitting.benchmark_fallback`).
   ``held_over="next"`` and ``group_order="sorted"`` reproduce the benchmark's other two
   conventions (a held-over run bought at the next checkpoint whatever its cost; groups taken
   sorted by name); docs/design.md, "One scorer for every method".
3. Beside it, our Laplace-mixture posterior of the same runs (:mod:`.posterior`): R^2 of its
   predictive median (``r2_posterior``) and the share of target rows inside its 90% intervals
   (``coverage90``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import BayesScalingError
from . import methods as _methods
from .fitting import benchmark_fallback, least_squares, predictor, r2_clipped, uniform_starts
from .posterior import LaplaceMixture
from .task import Group, Task

N_STARTS = 64
INTERVALS = ("draws", "linear")
COLUMNS = ["seed", "budget", "n_runs", "cost_spent", "r2_protocol", "r2_posterior", "coverage90",
           "seconds"]
#: The refits a method's purchases can be scored by: name -> least-squares method.
SCORERS = {"compiled": "jax", "benchmark": "scipy"}
HELD_OVER = ("fits", "next")
GROUP_ORDERS = ("appearance", "sorted")


@dataclass
class State:
    """What a method sees of one group while it buys: the pool, what is bought, the budget."""

    task: Task
    group: Group
    rng: np.random.Generator
    candidates: np.ndarray
    observed: np.ndarray
    spent: float
    total: float
    final_budget: float
    budget: float = 0.0  # the current checkpoint's budget
    memory: dict = field(default_factory=dict)

    @property
    def law(self):
        return self.task.law

    @property
    def n_params(self) -> int:
        return len(self.task.law.params)

    def affordable(self, limit: float | None = None) -> np.ndarray:
        """Candidates whose cost fits in ``limit - spent`` (default: the whole pool's cost)."""
        limit = self.total if limit is None else limit
        c = self.group.cost[self.candidates]
        return self.candidates[c <= limit - self.spent + 1e-12 * self.total]


def run(task: Task, method: str = "bayes", seeds=range(10), executor=None,
        fit_method: str = "jax", intervals: str = "draws", scorers=(), held_over: str = "fits",
        group_order: str = "appearance", **options) -> pd.DataFrame:
    """Run ``method`` on ``task`` for every seed; one row per (seed, budget).

    Args:
        task: a :class:`Task`.
        method: one of :data:`bayes_scaling.design.methods.METHODS`.
        seeds: the seeds (each seeds the method's draws and the refit's starts).
        executor: None (serial) or any object with ``.map(fn, items)``; the per-seed job
            :func:`seed_job` is a top-level function of picklable arguments.
        fit_method: ``"jax"`` or ``"scipy"`` refit (:func:`fitting.least_squares`).
        intervals: how ``r2_posterior`` and ``coverage90`` read the posterior: ``"draws"`` (the
            law at parameter draws) or ``"linear"`` (each mode's delta-method Gaussian;
            :meth:`.posterior.LaplaceMixture.predictive`). The purchases do not depend on it.
        scorers: names in :data:`SCORERS`; each adds a column ``r2_<name>``: the same purchases
            refitted from the same starts by that refit (the method's own fit never scores it).
        held_over: ``"fits"`` (a run held over is bought at the first later checkpoint it fits
            in) or ``"next"`` (the benchmark's: at the next checkpoint, whatever its cost).
        group_order: ``"appearance"`` (order in the pool) or ``"sorted"`` (the benchmark's: by
            name); the order seeds each group's random stream.
        options: passed to the method's constructor (e.g. ``batch=4``).

    Returns:
        DataFrame with columns ``seed, budget, n_runs, cost_spent, r2_protocol, r2_posterior,
        coverage90, seconds``. With groups, R^2 and coverage are over every group's target rows
        together, and ``n_runs`` and ``cost_spent`` sum over the groups.
    """
    _methods.make(method, **options)  # fail early on an unknown method or option
    if intervals not in INTERVALS:
        raise BayesScalingError(f"intervals must be one of {INTERVALS}, got {intervals!r}")
    protocol = check_protocol(scorers, held_over, group_order)
    jobs = [(task, method, int(s), fit_method, dict(options), intervals, protocol) for s in seeds]
    results = map(seed_job, jobs) if executor is None else executor.map(seed_job, jobs)
    rows = [r for rs in results for r in rs]
    return pd.DataFrame(rows, columns=COLUMNS + [f"r2_{n}" for n in protocol["scorers"]])


def check_protocol(scorers=(), held_over="fits", group_order="appearance") -> dict:
    """The protocol options of a job (:func:`run`), checked: ``{"scorers", "held_over",
    "group_order"}``."""
    scorers = (scorers,) if isinstance(scorers, str) else tuple(scorers)
    bad = [s for s in scorers if s not in SCORERS]
    if bad:
        raise BayesScalingError(f"scorers must be among {sorted(SCORERS)}, got {bad}")
    if held_over not in HELD_OVER:
        raise BayesScalingError(f"held_over must be one of {HELD_OVER}, got {held_over!r}")
    if group_order not in GROUP_ORDERS:
        raise BayesScalingError(f"group_order must be one of {GROUP_ORDERS}, got {group_order!r}")
    return {"scorers": scorers, "held_over": held_over, "group_order": group_order}


def seed_job(job) -> list[dict]:
    """One seed of the protocol: ``job = (task, method, seed, fit_method, options[, intervals[,
    protocol]])`` (``intervals`` as in :func:`run`, default ``"draws"``; ``protocol`` a dict of
    :func:`check_protocol`)."""
    linear = (job[5] if len(job) > 5 else "draws") == "linear"
    protocol = job[6] if len(job) > 6 else check_protocol()
    t0 = time.perf_counter()
    rows = []
    for budget, states, fits in checkpoints(job):
        row = _score(job[2], budget, states, fits, t0, linear)
        for name in protocol["scorers"]:
            row[f"r2_{name}"] = rescore(states, fits, name, job[3])
        rows.append(row)
    return rows


def rescore(states, fits, scorer: str, fit_method: str = "jax") -> float:
    """R^2 at the target rows of every group of the runs bought (``states``), refitted by
    ``scorer`` (:data:`SCORERS`) from the same starts as the protocol's refit (``fits``); the
    refit itself when it is the same one. A benchmark refit with no finite start is scored at
    :func:`fitting.benchmark_fallback`, as the benchmark does; a compiled one is left out (-1
    when every group is)."""
    y, pred = [], []
    for st, (starts, _) in zip(states, fits):
        if starts is None:
            continue
        if SCORERS[scorer] != fit_method:
            x = {v: a[st.observed] for v, a in st.group.x.items()}
            starts = least_squares(st.law, x, st.group.y[st.observed], starts.theta0,
                                   method=SCORERS[scorer])
        theta = starts.best
        if theta is None and scorer == "benchmark":
            theta = benchmark_fallback(st.law)
        if theta is None:
            continue
        p = np.asarray(predictor(st.law)(theta[None], st.group.x_test))[0]
        if np.all(np.isfinite(p)):
            y.append(st.group.y_test)
            pred.append(p)
    return r2_clipped(np.concatenate(y), np.concatenate(pred)) if y else -1.0


def checkpoints(job):
    """The protocol of one seed, checkpoint by checkpoint (``job`` as in :func:`seed_job`): yields
    ``(budget, states, fits)``, ``states`` each group's :class:`State` (its ``observed`` runs are
    those bought so far) and ``fits`` each group's ``(starts, posterior)``: every start of the
    protocol's refit (:class:`.fitting.Starts`) and our posterior, ``(None, None)`` when the group
    has bought nothing."""
    task, method, seed, fit_method, options = job[:5]
    protocol = job[6] if len(job) > 6 else check_protocol()
    groups = task.groups()
    if protocol["group_order"] == "sorted":
        groups = sorted(groups, key=lambda g: g.name)
    states, pending, methods = [], [], []
    for i, g in enumerate(groups):
        total = float(g.cost.sum())
        states.append(State(task, g, np.random.default_rng(seed * 100_000 + i),
                            np.arange(len(g.y)), np.array([], dtype=int), 0.0, total,
                            max(task.budgets) * total))
        pending.append(np.array([], dtype=int))
        methods.append(_methods.make(method, **options))
    for budget in task.budgets:
        fits = []
        for i, (st, m) in enumerate(zip(states, methods)):
            target = st.budget = budget * st.total
            while len(pending[i]) and (protocol["held_over"] == "next" or (
                    st.spent + st.group.cost[pending[i][0]] <= target + 1e-12 * st.total)):
                st.spent += st.group.cost[pending[i][0]]
                st.observed = np.append(st.observed, pending[i][0]).astype(int)
                pending[i] = pending[i][1:]
            while not len(pending[i]) and st.spent < target - 1e-12 * st.total and len(
                    st.candidates):
                batch = 1 if len(st.observed) < st.n_params else m.batch
                chosen = np.asarray(m.propose(st, min(batch, len(st.candidates))), dtype=int)
                if len(chosen) == 0:
                    break
                st.candidates = st.candidates[~np.isin(st.candidates, chosen)]
                deferred = []
                for idx in chosen:
                    c = st.group.cost[idx]
                    if st.spent + c > target + 1e-12 * st.total:
                        deferred.append(idx)
                    else:
                        st.spent += c
                        st.observed = np.append(st.observed, idx)
                if deferred:
                    pending[i] = np.array(deferred, dtype=int)
                    break
            fits.append(_fit_group(st, fit_method))
        yield budget, states, fits


def _fit_group(st: State, fit_method: str):
    """The protocol's refit of one group's bought runs and our posterior of them."""
    if len(st.observed) == 0:
        return None, None
    law, g = st.law, st.group
    x = {v: a[st.observed] for v, a in g.x.items()}
    y = g.y[st.observed]
    starts = least_squares(law, x, y, uniform_starts(law, N_STARTS, st.rng), method=fit_method)
    post = LaplaceMixture.from_starts(law, g, st.observed, starts) if starts.ok else None
    return starts, post


def _score(seed, budget, states, fits, t0, linear=False) -> dict:
    y, pred, med, lo, hi = [], [], [], [], []
    for st, (starts, post) in zip(states, fits):
        theta = None if starts is None else starts.best
        g = st.group
        if theta is None or not len(g.y_test):  # no fit, or no target rows to score it on
            continue
        p = np.asarray(predictor(st.law)(theta[None], g.x_test))[0]
        if not np.all(np.isfinite(p)):
            continue
        y.append(g.y_test)
        pred.append(p)
        q = post.quantiles(g.x_test, (0.05, 0.5, 0.95), rng=np.random.default_rng(seed),
                           linear=linear)
        lo.append(q[0])
        med.append(q[1])
        hi.append(q[2])
    row = dict(seed=seed, budget=budget, n_runs=int(sum(len(s.observed) for s in states)),
               cost_spent=float(sum(s.spent for s in states)),
               r2_protocol=-1.0, r2_posterior=-1.0, coverage90=np.nan,
               seconds=time.perf_counter() - t0)
    if y:
        yc = np.concatenate(y)
        row["r2_protocol"] = r2_clipped(yc, np.concatenate(pred))
        row["r2_posterior"] = r2_clipped(yc, np.concatenate(med))
        row["coverage90"] = float(np.mean((yc >= np.concatenate(lo)) & (yc <= np.concatenate(hi))))
    return row
