"""Decisions from fitted laws: adaptation plans and training recipes.

Two problems, each solved for a point fit (``MapFit``) and for a posterior alike:

**Adaptation plan** (Goffinet et al., *PTPP-Aware Adaptation Scaling Laws*, Section 4, Figure 2).
For a checkpoint of ``N`` parameters pre-trained at ``PTPP`` tokens per parameter, find the
smallest adaptation budget ATPP = D / N and a replay ratio r solving::

    min_{ATPP, r}  ATPP   s.t.   Delta L_src(N, D, r, PTPP) <= delta,   L_tgt(N, D, r, PTPP) <= tau,
    Delta L_src = L_src(N, D, r, PTPP) - L_src,0,

where ``L_src,0`` is the source loss of the un-adapted checkpoint (the paper's
``L_src(N, 0, 1, PTPP)``). With ``prob = p`` the constraints become chance constraints over the
posterior draws: ``P(Delta L_src <= delta) >= p`` and ``P(L_tgt <= tau) >= p``
(:func:`adaptation`).

**Training recipe** (Akimoto et al., *M3 Scaling Law*, Section 4 and Appendix D.6-D.7). For a
compute budget ``C = M D`` (M: non-embedding FLOPs per token, D = k D_T / r: total tokens, M3
Eq. 24) and a target corpus of ``D_T`` tokens, the loss-minimising model scale, epochs, average
target-language ratio and final-stage ratio within each approach (mono 1-stage, multi 1-stage,
multi 2-stage), and the best approach (:func:`recipe`, :func:`recipe_grid`).

**Target against helper loss** (beyond the M3 paper: its Section 7's future work). For each limit
on the helper language's loss, the lowest target loss reachable with probability p, the limit
holding with probability p (:func:`pareto_front`, the recipe search under a chance constraint).

Both work through a law's public interface only (DESIGN.md rule 1): ``predict_draws`` for the
plans, per-draw parameter values for the recipe optimiser (:func:`as_draws`).

Modules: ``result`` (Plan, PlanPoint, InfeasiblePlanError), ``adaptation`` (the plan search),
``extrapolation`` (plans against the fitted data), ``figure`` (the PTPP paper's Figure 2),
``recipe`` (the M3 recipe optimiser), ``pareto`` (target against helper loss); the draws and
forecasts come from :mod:`bayes_scaling.bayes.predictive`.
"""
from ..bayes.predictive import ParamDraws, as_draws, order_statistic, predict_draws
from .adaptation import adaptation, checkpoint_rows, pretraining_fit
from .extrapolation import ExtrapolationError
from .figure import plot_adaptation
from .pareto import helper_law, pareto_front
from .recipe import APPROACHES, Recipe, chinchilla_optimal, recipe, recipe_grid
from .result import InfeasiblePlanError, Plan, PlanPoint, parse_forgetting

__all__ = [
    "APPROACHES",
    "ExtrapolationError",
    "InfeasiblePlanError",
    "ParamDraws",
    "Plan",
    "PlanPoint",
    "Recipe",
    "adaptation",
    "as_draws",
    "checkpoint_rows",
    "chinchilla_optimal",
    "helper_law",
    "order_statistic",
    "parse_forgetting",
    "pareto_front",
    "plot_adaptation",
    "predict_draws",
    "pretraining_fit",
    "recipe",
    "recipe_grid",
]
