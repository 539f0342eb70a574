"""Which runs to buy: budget-aware experiment design and the ScaleBench protocol as a harness.

    task = bs.design.Task(name=..., train=df, test=df, law=law, target="loss", cost="6ND",
                          group=None, budgets=(0.01, 0.05, 0.1))
    res = bs.design.run(task, method="bayes", seeds=range(10))      # one row per (seed, budget)
    task = bs.design.scalebench_task("vocab_scaling_law", "sl_3")
    rec = bs.design.recommend(pool, law=..., cost="6*N*D", targets="N >= 1e9", budget="10%")

Methods (:data:`METHODS`): ScaleBench's baselines ``random``, ``cheapest``, ``cost_random``,
``d_opt``, ``v_opt``, the benchmark paper's ``mspe`` and ours, ``bayes``; every method's purchases
are scored by the same refit (``scorers``: the benchmark's scipy refit and the compiled one). The
math is in docs/design.md.
"""
from .fitting import least_squares, r2_clipped, uniform_starts  # noqa: F401
from .harness import checkpoints, run, seed_job  # noqa: F401
from .methods import METHODS  # noqa: F401
from .posterior import LaplaceMixture  # noqa: F401
from .recommend import cost_formula, recommend, recommend_figure, split_pool  # noqa: F401
from .task import ColumnProduct, Task, scalebench_task  # noqa: F401

__all__ = ["ColumnProduct", "LaplaceMixture", "METHODS", "Task", "checkpoints", "least_squares",
           "cost_formula", "r2_clipped", "recommend", "recommend_figure", "split_pool",
           "run", "scalebench_task", "seed_job", "uniform_starts"]
