"""Recipes that trade the target language's loss against the helper language's: a Pareto front.

The M3 paper optimises the target language's loss alone (Section 4) and leaves the helper
language's loss to future work (Section 7). Here the helper's loss is a chance constraint, as
forgetting is in the adaptation planner: for a compute budget ``C`` and a target corpus of ``D_T``
tokens, and for each limit ``lambda`` on the helper loss, the lowest target loss reachable with
probability ``p``::

    min_{M, k, r, r_f}  q_p(L_target)   s.t.   q_p(L_helper) <= lambda,   C = M D,  D = k D_T / r

where ``q_p`` is the ``ceil(p S)``-th smallest of the ``S`` posterior draws
(:func:`~bayes_scaling.bayes.predictive.order_statistic`): ``q_p(L_helper) <= lambda`` says
``P(L_helper <= lambda) >= p`` counted over draws, and ``q_p(L_target)`` is the target loss
reached with probability ``p``. The decision variables, the search box and the multi-start
pattern search are those of the recipe optimiser (:mod:`bayes_scaling.plan.recipe`, M3 Eq. 24).

The helper language's share of the training tokens is ``1 - r`` on average and ``1 - r_f`` in the
final stage; a helper law reads them from the columns ``r_helper`` and ``r_f_helper`` (and its
tokens from ``D_helper = (1 - r) D``). For example the He + Dual-PL law (M3 Eq. 8) read through
``r -> r_helper, r_f -> r_f_helper`` (:func:`helper_law`) says the helper's loss grows as its
final-stage share shrinks: a forgetting-style limit on the helper pushes ``r_f`` below 1.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..bayes.predictive import ParamDraws, as_draws, law_inputs, order_statistic
from ..errors import BayesScalingError
from ..laws import Law
from ..programs import Programs
from ..laws import get as get_law
from .recipe import pattern_search, recipe_columns, search_box

__all__ = ["HELPER_FLOOR", "helper_columns", "helper_law", "pareto_front"]

#: Smallest helper share: a final stage without the helper (r_f = 1) is read as a share of 1e-9
#: (the PTPP paper's clip of r to [1e-9, 1 - 1e-9]), not as "no final stage".
HELPER_FLOOR = 1e-9

APPROACHES = ("multi_1stage", "multi_2stage")
_GRID = {2: (41, 9, 14), 3: (17, 7, 18)}   # first grid, zoom grid, zooms per dimension count


def helper_columns(cols: dict) -> dict:
    """Recipe columns plus the helper language's: ``r_helper = 1 - r``, ``r_f_helper = 1 - r_f``
    (both at least :data:`HELPER_FLOOR`) and ``D_helper = (1 - r) D``."""
    r, r_f = cols["r"], cols["r_f"]
    return {**cols, "r_helper": jnp.maximum(1.0 - r, HELPER_FLOOR),
            "r_f_helper": jnp.maximum(1.0 - r_f, HELPER_FLOOR), "D_helper": (1.0 - r) * cols["D"]}


def helper_law(law="he_dual", name=None) -> Law:
    """``law`` (default He + Dual PL, M3 Eq. 8) read through the helper's shares:
    ``r -> r_helper`` and ``r_f -> r_f_helper``. Fit it on a table's helper losses after adding
    those columns (``r_helper = 1 - r``, ``r_f_helper = 1 - r_f``)."""
    base = get_law(law)
    mapping = {v: f"{v}_helper" for v in ("r", "r_f") if v in base.variables}
    if not mapping:
        raise BayesScalingError(f"law {base.name} reads no language ratio (r, r_f): it cannot "
                                "tell the helper's share; use e.g. 'he' or 'he_dual'")
    return base.renamed(name or f"{base.name}_helper", **mapping)


_JIT = Programs(8, "pareto laws")


def _losses(draws: ParamDraws, cols: dict, where: str) -> jnp.ndarray:
    """Loss of every draw (axis 0) at every point of ``cols`` (leading axes kept)."""
    x = law_inputs(draws.law, cols, where=where,
                   fix="use a law on the recipe columns (M, D, D_T, k, r, r_f, r1) or the helper's "
                       "(r_helper, r_f_helper, D_helper)")
    shape = np.broadcast_shapes(*(np.shape(v) for v in x.values()))
    p = {k: jnp.asarray(v).reshape((-1,) + (1,) * len(shape)) for k, v in draws.params.items()}
    fn = _JIT.get(draws.law.fn, lambda: jax.jit(draws.law.fn))
    return fn(p, {k: jnp.broadcast_to(jnp.asarray(v, float), shape) for k, v in x.items()})


def _quantiles(target, helper, C, D_T, approach, u, p, M_bounds):
    """q_p of the target and the helper loss at decision vectors ``u`` (..., d), the losses of
    every draw and the recipe columns."""
    cols = helper_columns(recipe_columns(jnp.asarray(u), approach, C, D_T))
    Lt = np.asarray(_losses(target, cols, "a Pareto recipe (target law)"), float)
    Lh = np.asarray(_losses(helper, cols, "a Pareto recipe (helper law)"), float)
    bad = ~(np.isfinite(Lt) & np.isfinite(Lh)).all(axis=0)
    M = np.asarray(cols["M"])
    bad |= (M < M_bounds[0]) | (M > M_bounds[1])
    qt = np.where(bad, np.inf, order_statistic(Lt, p))
    qh = np.where(bad, np.inf, order_statistic(Lh, p))
    return qt, qh, Lt, Lh, cols


def pareto_front(target, helper, *, C: float, D_T: float, helper_limits, prob: float = 0.5,
                 approaches=APPROACHES, k_bounds=(1e-6, 1e4), r_bounds=(1e-3, 1.0),
                 M_bounds=None, interval: float = 0.9, max_draws: int | None = 200) -> pd.DataFrame:
    """The best target loss reachable with probability ``prob`` under each helper-loss limit.

    Args:
        target: ``MapFit``, ``Posterior`` or :class:`ParamDraws` of the target language's law on
            the recipe columns (e.g. ``m3``).
        helper: the same for the helper language's loss, on the helper columns
            (:func:`helper_columns`; e.g. :func:`helper_law`). Its draws are paired with the
            target's by index (both thinned to the smaller count); each constraint is marginal,
            so the pairing does not change the answer.
        C, D_T: compute budget (FLOPs) and target corpus tokens (scalars).
        helper_limits: the limits ``lambda`` on the helper loss (any order).
        prob: the probability ``p`` of both the constraint and the reported target loss
            (``1/2``: the median forecast).
        approaches: subset of ``("multi_1stage", "multi_2stage")`` (mono 1-stage trains no helper).
        k_bounds, r_bounds, M_bounds: the recipe optimiser's search box.
        interval: width of the central intervals over draws reported at each recipe.
        max_draws: thin posteriors to at most this many draws.

    Returns:
        One row per limit (sorted by limit): ``helper_limit``, ``feasible``, ``approach``,
        ``target_loss`` (``q_p`` of the target loss), ``helper_loss`` (``q_p`` of the helper
        loss, ``<= helper_limit``), their central intervals (``target_lower`` ...
        ``helper_upper``), the recipe (``M``, ``k``, ``r``, ``r_f``, ``D``) and ``p_helper``
        (fraction of draws meeting the limit). Because a recipe meeting a limit meets every looser
        one, each row keeps the best recipe found for any limit up to its own: the front is
        non-increasing in the limit. An infeasible limit has ``feasible = False`` and NaNs.
    """
    if np.ndim(C) or np.ndim(D_T) or not (C > 0 and D_T > 0):
        raise BayesScalingError(f"C and D_T must be positive scalars, got C={C!r}, D_T={D_T!r}")
    if not 0 < prob < 1:
        raise BayesScalingError(f"prob must lie in (0, 1), got {prob!r}")
    limits = np.sort(np.asarray(helper_limits, float).ravel())
    if limits.size == 0 or not np.all(np.isfinite(limits)):
        raise BayesScalingError(f"helper_limits must be finite numbers, got {helper_limits!r}")
    bad = [a for a in approaches if a not in APPROACHES]
    if bad or not approaches:
        raise BayesScalingError(f"unknown approaches {bad}; choose from {APPROACHES} (mono "
                                "1-stage trains no helper language)")
    if not (0 < k_bounds[0] < k_bounds[1] < np.inf and 0 < r_bounds[0] < r_bounds[1] <= 1):
        raise BayesScalingError(f"need 0 < k_lo < k_hi < inf and 0 < r_lo < r_hi <= 1, got "
                                f"k_bounds={k_bounds}, r_bounds={r_bounds}")
    t, h = as_draws(target, max_draws), as_draws(helper, max_draws)
    S = min(t.n_draws, h.n_draws)
    t = ParamDraws(t.law, {k: np.asarray(v)[:S] for k, v in t.params.items()})
    h = ParamDraws(h.law, {k: np.asarray(v)[:S] for k, v in h.params.items()})
    mb = (0.0, np.inf) if M_bounds is None else (float(M_bounds[0]), float(M_bounds[1]))
    k_lo, k_hi = float(k_bounds[0]), float(k_bounds[1])
    r_lo, r_hi = float(r_bounds[0]), float(r_bounds[1])
    B = limits.size
    best = {"f": np.full(B, np.inf), "u": [None] * B, "approach": [None] * B}
    for ap in approaches:
        lo, hi = search_box(ap, k_bounds, r_bounds)
        g0, g, n_zoom = _GRID[lo.size]

        def fun(u, ap=ap):  # (B, P, d) -> (B, P): q_p(target) where q_p(helper) <= limit
            qt, qh, _, _, cols = _quantiles(t, h, C, D_T, ap, u, prob, mb)
            k, r = np.asarray(cols["k_nominal"]), np.asarray(cols["r"])
            out = ((k < k_lo * (1 - 1e-12)) | (k > k_hi * (1 + 1e-12))
                   | (r < r_lo * (1 - 1e-12)) | (r > r_hi * (1 + 1e-12)))
            return np.where(~out & (qh <= limits[:, None]), qt, np.inf)

        u, f = pattern_search(fun, lo, hi, B, g0, g, n_zoom)
        for i in np.flatnonzero(f < best["f"]):
            best["f"][i], best["u"][i], best["approach"][i] = f[i], u[i], ap
    # a recipe meeting a limit meets every looser one: keep the best found up to each limit
    for i in range(1, B):
        if best["f"][i - 1] < best["f"][i]:
            best["f"][i], best["u"][i] = best["f"][i - 1], best["u"][i - 1]
            best["approach"][i] = best["approach"][i - 1]
    a = (1 - interval) / 2
    rows = []
    for i, lim in enumerate(limits):
        row = {"helper_limit": float(lim), "feasible": bool(np.isfinite(best["f"][i]))}
        if not row["feasible"]:
            rows.append({**row, "approach": None})
            continue
        ap = best["approach"][i]
        qt, qh, Lt, Lh, cols = _quantiles(t, h, C, D_T, ap, best["u"][i][None], prob, mb)
        Lt, Lh = Lt[:, 0], Lh[:, 0]
        row.update({"approach": ap, "target_loss": float(qt[0]), "helper_loss": float(qh[0]),
                    "target_lower": float(np.quantile(Lt, a)),
                    "target_upper": float(np.quantile(Lt, 1 - a)),
                    "helper_lower": float(np.quantile(Lh, a)),
                    "helper_upper": float(np.quantile(Lh, 1 - a)),
                    "p_helper": float(np.mean(Lh <= lim)),
                    **{c: float(np.asarray(cols[k])[0])
                       for c, k in (("M", "M"), ("k", "k_nominal"), ("r", "r"), ("r_f", "r_f"),
                                    ("D", "D"))}})
        rows.append(row)
    return pd.DataFrame(rows).assign(C=float(C), D_T=float(D_T), prob=prob, n_draws=S)

