"""Adaptation plans as results: :class:`Plan`, its :class:`PlanPoint` s, the forgetting threshold
parser and :class:`InfeasiblePlanError`."""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from ..errors import BayesScalingError

__all__ = ["InfeasiblePlanError", "Plan", "PlanPoint", "json_default", "parse_forgetting"]


class InfeasiblePlanError(BayesScalingError, ValueError):
    """No (replay, ATPP) inside the bounds meets the constraints.

    Attributes:
        closest: the :class:`PlanPoint` inside the bounds that comes closest (smallest relative
            constraint excess); it meets ``needed`` exactly.
        needed: ``{"target_loss": float, "max_forgetting": float or "+x%"}``: the thresholds the
            closest plan meets at the requested probability, never tighter than those requested
            (pass them back to ``adaptation`` to get a feasible plan).
    """

    def __init__(self, message, closest=None, needed=None):
        super().__init__(message)
        self.closest = closest
        self.needed = needed or {}



def parse_forgetting(spec) -> tuple[float, bool]:
    """``max_forgetting`` -> (value, relative).

    A number is absolute (nats/token); a string ``"2%"`` / ``"+2%"`` / ``"+2.5 %"`` is relative to
    the pre-adaptation source loss (``delta = 0.02 * L_src,0``).
    """
    if isinstance(spec, bool):
        raise BayesScalingError(f"max_forgetting must be a number or a percentage string, got {spec!r}")
    if isinstance(spec, (int, float, np.floating, np.integer)):
        v = float(spec)
        if not math.isfinite(v):
            raise BayesScalingError(f"max_forgetting must be finite, got {spec!r}")
        return v, False
    if isinstance(spec, str):
        m = re.fullmatch(r"\s*([+-]?\d+(?:\.\d*)?|[+-]?\.\d+)\s*%\s*", spec)
        if m:
            return float(m.group(1)) / 100.0, True
    raise BayesScalingError(
        f"max_forgetting {spec!r} not understood: give an absolute loss increase (e.g. 0.05) or a "
        "percentage of the pre-adaptation source loss (e.g. '+2%')")


@dataclass
class PlanPoint:
    """One plan: where it is, what it costs and what the posterior says will happen there.

    Loss summaries are dicts with ``median``, ``mean``, ``lower``, ``upper`` (central interval of
    the draws, ``Plan.interval`` wide). ``p_target``/``p_forgetting`` count the draws meeting each
    constraint; ``p_both`` is their product (target and source posteriors are independent).
    ``binding`` names the constraint(s) that set the ATPP, or ``"bound"`` when it is the lower
    ATPP bound.
    """

    kind: str
    q: float
    replay: float
    atpp: float
    D: float
    flops: float
    target_loss: dict
    source_loss: dict
    forgetting: dict
    forgetting_rel: dict
    p_target: float
    p_forgetting: float
    p_both: float
    binding: str = ""

    def row(self) -> dict:
        d = {"plan": self.kind, "quantile": self.q, "replay": self.replay, "atpp": self.atpp,
             "D": self.D, "flops": self.flops}
        for name in ("target_loss", "source_loss", "forgetting", "forgetting_rel"):
            for k, v in getattr(self, name).items():
                d[f"{name}_{k}"] = v
        d.update(p_target=self.p_target, p_forgetting=self.p_forgetting, p_both=self.p_both,
                 binding=self.binding)
        return d

    def line(self, relative: bool) -> str:
        t, f = self.target_loss, (self.forgetting_rel if relative else self.forgetting)
        fmt = (lambda v: f"{100 * v:+.2f}%") if relative else (lambda v: f"{v:+.4f}")
        return (f"ATPP={self.atpp:.4g}, replay={100 * self.replay:.1f}%, D={self.D:.4g}, "
                f"FLOPs={self.flops:.3e}; target loss {t['median']:.4f} [{t['lower']:.4f}, "
                f"{t['upper']:.4f}], forgetting {fmt(f['median'])} [{fmt(f['lower'])}, "
                f"{fmt(f['upper'])}]; P(target)={self.p_target:.3f}, "
                f"P(forgetting)={self.p_forgetting:.3f} (binding: {self.binding})")


@dataclass
class Plan:
    """An adaptation plan: the deterministic plan and, with ``prob``, the chance-constrained one.

    Attributes:
        N, ptpp: the checkpoint planned for.
        target_loss: the threshold tau; ``max_forgetting`` as given; ``delta_rel`` whether it is
            relative to ``source_base``.
        prob: requested probability of each constraint (``None``: deterministic only).
        source_base: summary (median, lower, upper) of the pre-adaptation source loss L_src,0 and
            ``source_base_method``: how it was obtained.
        deterministic: the plan from the median forecast (the chance-constrained plan at p = 1/2,
            i.e. what a point forecast gives).
        chance: the plan meeting each constraint with probability ``prob`` (or ``None``).
        curves: per replay on the search grid, the minimal D meeting the target constraint, the
            forgetting constraint and both, for the median forecast and at ``prob``.
        settings: bounds, grid sizes, laws, number of draws.
    """

    N: float
    ptpp: float
    target_loss: float
    max_forgetting: object
    delta_rel: bool
    prob: float | None
    interval: float
    source_base: dict
    source_base_method: str
    deterministic: PlanPoint
    chance: PlanPoint | None
    curves: pd.DataFrame
    settings: dict
    _fits: tuple = field(default=(None, None), repr=False, compare=False)

    # The plan to act on: the chance-constrained one when it was asked for.
    @property
    def best(self) -> PlanPoint:
        return self.chance if self.chance is not None else self.deterministic

    atpp = property(lambda self: self.best.atpp)
    replay = property(lambda self: self.best.replay)
    D = property(lambda self: self.best.D)
    flops = property(lambda self: self.best.flops)

    @property
    def price_of_certainty(self) -> float:
        """FLOPs of the chance-constrained plan over those of the deterministic plan (>= 1)."""
        return float("nan") if self.chance is None else self.chance.flops / self.deterministic.flops

    def to_frame(self) -> pd.DataFrame:
        """One row per plan (deterministic, chance-constrained) with every number of the plan."""
        rows = [p.row() for p in (self.deterministic, self.chance) if p is not None]
        df = pd.DataFrame(rows)
        df.insert(0, "N", self.N)
        df.insert(1, "ptpp", self.ptpp)
        return df

    def __repr__(self):
        fs = self.max_forgetting if isinstance(self.max_forgetting, str) else f"{self.max_forgetting:+g}"
        sb = self.source_base
        lines = [
            f"Plan(N={self.N:.4g}, PTPP={self.ptpp:g}: minimise ATPP s.t. forgetting <= {fs}, "
            f"target loss <= {self.target_loss:g})",
            f"  pre-adaptation source loss L_src,0 = {sb['median']:.4f} ({self.source_base_method})",
            f"  deterministic (median forecast): {self.deterministic.line(self.delta_rel)}",
        ]
        if self.chance is not None:
            lines.append(f"  chance-constrained (p={self.prob:g}): {self.chance.line(self.delta_rel)}")
            lines.append(f"  price of certainty: x{self.price_of_certainty:.3f} FLOPs")
        return "\n".join(lines)

    # --- persistence ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("N", "ptpp", "target_loss", "max_forgetting", "delta_rel",
                                           "prob", "interval", "source_base", "source_base_method",
                                           "settings")}
        d["deterministic"] = asdict(self.deterministic)
        d["chance"] = None if self.chance is None else asdict(self.chance)
        d["curves"] = self.curves.to_dict(orient="list")
        return d

    def save(self, path):
        """Write the plan as JSON (the fits themselves are not stored)."""
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh, indent=1, default=json_default)

    @classmethod
    def load(cls, path) -> Plan:
        with open(path) as fh:
            d = json.load(fh)
        d["deterministic"] = PlanPoint(**d["deterministic"])
        d["chance"] = None if d["chance"] is None else PlanPoint(**d["chance"])
        d["curves"] = pd.DataFrame(d["curves"])
        return cls(**d)


def json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)
