"""Where a plan stands against the data its laws were fitted on.

A law's forecast is only as good as the data behind it: a plan whose model size, tokens, replay or
PTPP lie outside the fitted rows rests on the law's functional form alone. :func:`outside`
measures how far each plan point lies beyond each fit's range; :func:`adaptation` refuses such a
plan by default (:class:`ExtrapolationError`) and labels it when extrapolation is allowed.
"""
from __future__ import annotations

from ..errors import BayesScalingError
from ..bayes.predictive import fitted_range

__all__ = ["PLAN_COLUMNS", "ExtrapolationError", "fitted_replay", "outside", "ranges"]

#: The columns of a plan row, checked against each fit's range.
PLAN_COLUMNS = ("N", "D", "replay", "ptpp")
_NAMES = {"N": "model size N", "D": "adaptation tokens D", "replay": "replay",
          "ptpp": "pre-training PTPP"}


class ExtrapolationError(BayesScalingError, ValueError):
    """A plan lies outside the range of the data its laws were fitted on.

    Attributes:
        plan: the plan, labelled with ``plan.extrapolation`` (the distances).
        distances: one message per column and fit outside its range.
    """

    def __init__(self, message, plan=None, distances=()):
        super().__init__(message)
        self.plan = plan
        self.distances = list(distances)


def ranges(fits: dict) -> dict[str, dict[str, tuple[float, float]]]:
    """``{role: {column: (lo, hi)}}`` over :data:`PLAN_COLUMNS` for the fits whose fitted rows
    are known (a posterior; ``ParamDraws`` with ``data_range``); a law reading a column only
    through a default is not checked on it."""
    out = {}
    for role, fit in fits.items():
        rng = fitted_range(fit)
        if rng is None:
            continue
        law = fit.law
        reads = {law.column(v) for v in law.variables}
        out[role] = {c: rng[c] for c in PLAN_COLUMNS if c in rng and c in reads}
    return out


def fitted_replay(rngs: dict) -> tuple[float, float] | None:
    """The replay range every fit covers (the intersection), ``None`` when no fit records one.

    Raises:
        BayesScalingError: the fits' replay ranges do not overlap.
    """
    spans = [r["replay"] for r in rngs.values() if "replay" in r]
    if not spans:
        return None
    lo, hi = max(s[0] for s in spans), min(s[1] for s in spans)
    if lo > hi:
        have = "; ".join(f"{role}: [{r['replay'][0]:g}, {r['replay'][1]:g}]"
                         for role, r in rngs.items() if "replay" in r)
        raise BayesScalingError(f"the fits cover disjoint replay ranges ({have}); pass "
                                "replay_bounds explicitly")
    return float(lo), float(hi)


def _distance(col: str, v: float, lo: float, hi: float, rtol: float) -> str | None:
    if lo * (1 - rtol) <= v <= hi * (1 + rtol):
        return None
    if col == "replay":  # a ratio: the distance is absolute
        return f"{v - hi:.3g} above" if v > hi else f"{lo - v:.3g} below"
    return f"{v / hi:.3g}x above" if v > hi else f"{lo / v:.3g}x below"


def outside(row: dict, rngs: dict, rtol: float = 1e-6) -> list[str]:
    """Messages for every column of ``row`` (``N, D, replay, ptpp``) outside a fit's range,
    naming the distance: a factor for N, D and PTPP, an absolute difference for replay."""
    out = []
    for role, rng in rngs.items():
        for col, (lo, hi) in rng.items():
            d = _distance(col, float(row[col]), lo, hi, rtol)
            if d is not None:
                out.append(f"{_NAMES[col]} = {row[col]:.4g} is {d} the {role} fit's range "
                           f"[{lo:.4g}, {hi:.4g}]")
    return out
