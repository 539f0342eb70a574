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

Both work through a law's public interface only (DESIGN.md rule 1): ``predict_draws`` for the
plans, per-draw parameter values for the recipe optimiser (:func:`as_draws`).
"""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .errors import BayesScalingError, DataError
from .laws import Law
from .laws import get as get_law

__all__ = [
    "ParamDraws", "as_draws", "predict_draws",
    "InfeasiblePlanError", "PlanPoint", "Plan", "adaptation", "plot_adaptation",
    "parse_forgetting", "order_statistic",
    "APPROACHES", "Recipe", "recipe", "recipe_grid", "chinchilla_optimal",
]

REPLAY_CLIP = (1e-9, 1.0 - 1e-9)  # the PTPP paper clips r to [1e-9, 1 - 1e-9]
SOURCE_BASE_ATPP = 1e9  # "D -> infinity" of the law-based default for L_src,0 (see adaptation)


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


# ==================================================================================================
# Draws: one interface for a point fit, a posterior, or any set of parameter draws.


@dataclass
class ParamDraws:
    """``S`` parameter vectors of one law: the common currency of planning and anchor selection.

    A ``MapFit`` is one draw; a posterior is its MCMC/Laplace draws; tests and bootstrap fits can
    build one directly. ``predict_draws`` has the same signature as ``Posterior.predict_draws``.

    Attributes:
        law: the law.
        params: ``{name: array of shape (S,)}`` for every law parameter.
        sigma: optional ``(S,)`` scale of the log-residual likelihood (the posterior's ``sigma``).
    """

    law: Law
    params: dict
    sigma: np.ndarray | None = None

    def __post_init__(self):
        self.law = get_law(self.law)
        missing = set(self.law.param_names) - set(self.params)
        if missing:
            raise BayesScalingError(f"draws of {self.law.name} miss parameters {sorted(missing)}")
        arrs = {k: np.atleast_1d(np.asarray(self.params[k], dtype=float)).ravel()
                for k in self.law.param_names}
        sizes = {v.size for v in arrs.values()}
        if len(sizes) != 1:
            raise BayesScalingError(f"every parameter needs the same number of draws; got sizes {sizes}")
        self.params = arrs
        if self.sigma is not None:
            self.sigma = np.broadcast_to(np.asarray(self.sigma, float).ravel(), (self.n_draws,)).copy()

    @property
    def n_draws(self) -> int:
        return next(iter(self.params.values())).size

    def evaluate(self, x: Mapping[str, np.ndarray]):
        """Law value for each draw at inputs ``x`` (variable -> array, broadcast against (S, 1))."""
        return _jit_fn(self.law.fn)(self.params, {k: np.asarray(v) for k, v in x.items()})

    def predict_draws(self, df, kind: str = "mean", seed: int = 0) -> np.ndarray:
        """``(S, n)`` law values at the rows of ``df`` for every draw.

        ``kind="mean"`` is the law itself (the expected loss); ``"predictive"`` multiplies by
        ``exp(sigma_s * eps)``, eps ~ N(0, 1): a Gaussian stand-in for the log-residual likelihood.
        """
        x = {}
        n = len(df)
        for v in self.law.variables:  # law.inputs without the eager jnp conversion
            col = self.law.column(v)
            if col in df:
                x[v] = np.asarray(df[col], dtype=np.float64)
            elif v in self.law.defaults:
                x[v] = np.full(n, float(self.law.defaults[v]))
            else:
                raise KeyError(f"law {self.law.name} needs column {col!r} (variable {v!r})")
        out = np.asarray(self.evaluate(x))
        if kind == "mean":
            return out
        if kind == "predictive":
            if self.sigma is None:
                raise BayesScalingError("kind='predictive' needs sigma draws")
            eps = np.random.default_rng(seed).standard_normal(out.shape)
            return out * np.exp(self.sigma[:, None] * eps)
        raise BayesScalingError(f"kind must be 'mean' or 'predictive', got {kind!r}")

    def thin(self, max_draws: int | None) -> "ParamDraws":
        """At most ``max_draws`` evenly spaced draws (all of them when ``None``)."""
        if max_draws is None or self.n_draws <= max_draws:
            return self
        idx = np.unique(np.linspace(0, self.n_draws - 1, int(max_draws)).round().astype(int))
        return ParamDraws(self.law, {k: v[idx] for k, v in self.params.items()},
                          None if self.sigma is None else self.sigma[idx])


_JIT_CACHE: dict = {}


def _jit_fn(fn):
    """jit(params {name: (S,)}, x {var: array}) -> fn with every parameter as an (S, 1) column."""
    if fn not in _JIT_CACHE:
        _JIT_CACHE[fn] = jax.jit(lambda p, x: fn({k: v[:, None] for k, v in p.items()}, x))
    return _JIT_CACHE[fn]


def as_draws(obj, max_draws: int | None = None) -> ParamDraws:
    """Parameter draws of a ``MapFit`` (one draw), a ``Posterior`` or a :class:`ParamDraws`.

    A posterior is read from ``obj.idata.posterior`` (chains and draws stacked); a law parameter
    absent there (held fixed during inference) is taken from ``obj.settings["fixed"]`` or
    ``obj.map``. The likelihood
    scale ``sigma`` is read when the posterior has it.
    """
    if isinstance(obj, ParamDraws):
        return obj.thin(max_draws)
    law = getattr(obj, "law", None)
    if law is None:
        raise BayesScalingError(f"expected a MapFit, a Posterior or ParamDraws; got {type(obj).__name__}")
    idata = getattr(obj, "idata", None)
    if idata is not None and hasattr(idata, "posterior"):
        post = idata.posterior
        m = getattr(obj, "map", None)
        fixed = dict(m) if isinstance(m, Mapping) else dict(getattr(m, "params", None) or {})
        fixed.update(getattr(obj, "fixed", None) or {})
        fixed.update((getattr(obj, "settings", None) or {}).get("fixed", None) or {})
        params = {}
        for name in law.param_names:
            if name in post:
                params[name] = np.asarray(post[name]).reshape(-1)
            elif name in fixed:
                params[name] = None
            else:
                raise BayesScalingError(f"posterior has no draws of {name!r} and no fixed value")
        n = max(v.size for v in params.values() if v is not None)
        params = {k: (np.full(n, float(fixed[k])) if v is None else v) for k, v in params.items()}
        sigma = np.asarray(post["sigma"]).reshape(-1) if "sigma" in post else None
        return ParamDraws(law, params, sigma).thin(max_draws)
    params = getattr(obj, "params", None)
    if isinstance(params, Mapping):
        return ParamDraws(law, {k: np.array([float(v)]) for k, v in params.items()})
    raise BayesScalingError(f"cannot read parameter draws from {type(obj).__name__}: it has neither "
                            "idata.posterior nor a params dict")


def predict_draws(obj, df) -> np.ndarray:
    """``(S, n)`` expected losses at the rows of ``df``: ``obj.predict_draws(df, kind="mean")``.

    Works for anything with ``predict_draws`` (a posterior, a ``MapFit``, :class:`ParamDraws`) and
    falls back to ``obj.predict(df)`` as a single draw.
    """
    if hasattr(obj, "predict_draws"):
        out = obj.predict_draws(df, kind="mean")
    elif hasattr(obj, "predict"):
        out = obj.predict(df)
    else:
        raise BayesScalingError(f"{type(obj).__name__} has neither predict_draws nor predict")
    out = np.asarray(out, dtype=float)
    return out[None, :] if out.ndim == 1 else out


def order_statistic(x: np.ndarray, p: float, axis: int = 0) -> np.ndarray:
    """The ``ceil(p S)``-th smallest of ``S`` values along ``axis``.

    ``order_statistic(g, p) <= 0`` holds exactly when at least a fraction ``p`` of the draws have
    ``g <= 0``: the chance constraint ``P(g <= 0) >= p`` counted over draws. ``p = 1/2`` is the
    (lower) median.
    """
    x = np.asarray(x, dtype=float)
    S = x.shape[axis]
    k = min(S, max(1, math.ceil(p * S - 1e-9)))
    return np.take(np.partition(x, k - 1, axis=axis), k - 1, axis=axis)


# ==================================================================================================
# Adaptation plans (PTPP paper Section 4).


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
            json.dump(self.to_dict(), fh, indent=1, default=_json_default)

    @classmethod
    def load(cls, path) -> "Plan":
        with open(path) as fh:
            d = json.load(fh)
        d["deterministic"] = PlanPoint(**d["deterministic"])
        d["chance"] = None if d["chance"] is None else PlanPoint(**d["chance"])
        d["curves"] = pd.DataFrame(d["curves"])
        return cls(**d)


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


class _Problem:
    """The two forecasts and the constraint quantities g <= 0 at arbitrary (replay, D) points."""

    def __init__(self, target, source, N, ptpp, tau, fval, frel, base):
        self.target, self.source = target, source
        self.N, self.ptpp, self.tau, self.fval, self.frel = N, ptpp, tau, fval, frel
        self.base = base  # (S_src, 1) or scalar

    def rows(self, r, D) -> pd.DataFrame:
        r = np.clip(np.asarray(r, float).ravel(), *REPLAY_CLIP)
        D = np.asarray(D, float).ravel()
        return pd.DataFrame({"N": np.full(D.size, self.N), "D": D, "replay": r,
                             "ptpp": np.full(D.size, self.ptpp)})

    def losses(self, r, D):
        """(S_tgt, n), (S_src, n) losses; rows padded to a power of two so compiled shapes repeat."""
        r = np.asarray(r, float).ravel()
        D = np.asarray(D, float).ravel()
        n = D.size
        m = max(16, 1 << (n - 1).bit_length())
        df = self.rows(np.pad(r, (0, m - n), mode="edge"), np.pad(D, (0, m - n), mode="edge"))
        return (_safe_predict(self.target, df, "target")[:, :n],
                _safe_predict(self.source, df, "source")[:, :n])

    def delta(self):
        return self.fval * self.base if self.frel else self.fval

    def g(self, r, D):
        """Per-draw constraint quantities: g_t = L_tgt - tau, g_s = L_src - L0 - delta (<= 0 is ok)."""
        Lt, Ls = self.losses(r, D)
        return Lt - self.tau, Ls - self.base - self.delta()


def _thin_obj(obj, max_draws):
    if max_draws is None:
        return obj
    if isinstance(obj, ParamDraws):
        return obj.thin(max_draws)
    return obj  # other posteriors are used with all their draws


def _safe_predict(obj, df, which):
    """Law values at plan rows, whose columns are the law's variables (``N``, ``D``, ``replay``,
    ``ptpp``): each is read under the column the law maps it to (``Law.column_map``)."""
    try:
        out = predict_draws(obj, df.rename(columns=dict(obj.law.column_map)))
    except KeyError as e:
        raise DataError(f"the {which} law cannot be evaluated on plan rows (columns N, D, replay, "
                        f"ptpp): {e}") from None
    return np.where(np.isfinite(out), out, np.inf)


def _ok(prob: _Problem, r, D, q):
    """(n, 3) booleans at points (r, D): [both, target, forgetting] constraints hold at quantile q."""
    gt, gs = prob.g(r, D)
    ot = order_statistic(gt, q) <= 0
    os_ = order_statistic(gs, q) <= 0
    return np.stack([ot & os_, ot, os_], -1)


def _min_D(prob: _Problem, r, q, D_lo, D_hi, n_grid=33, n_bisect=42):
    """Minimal D in [D_lo, D_hi] meeting [both, target, forgetting] constraints, per replay in ``r``.

    A coarse log grid finds, for every replay and constraint set, the first grid point where the
    constraints hold; vectorised bisection on log D between it and the previous grid point then
    locates the boundary to ~1e-13 relative. Returns ``(R, 3)`` (``inf`` where infeasible) and the
    coarse grid's ``(R, G, 3)`` feasibility.
    """
    r = np.atleast_1d(np.asarray(r, float))
    R = r.size
    grid = np.geomspace(D_lo, D_hi, n_grid)
    ok = _ok(prob, np.repeat(r, n_grid), np.tile(grid, R), q).reshape(R, n_grid, 3)
    any_ok = ok.any(axis=1)
    first = np.argmax(ok, axis=1)  # (R, 3)
    lo = np.log(grid[np.maximum(first - 1, 0)])
    hi = np.log(grid[first])
    active = any_ok & (first > 0)
    rr = np.repeat(r[:, None], 3, axis=1)
    kinds = np.broadcast_to(np.arange(3), (R, 3))
    if active.any():
        for _ in range(n_bisect):
            mid = 0.5 * (lo + hi)
            ok_mid = _ok(prob, rr[active], np.exp(mid[active]), q)
            ok_k = ok_mid[np.arange(ok_mid.shape[0]), kinds[active]]
            h, l_ = hi[active], lo[active]
            hi[active] = np.where(ok_k, mid[active], h)
            lo[active] = np.where(ok_k, l_, mid[active])
            if np.max(hi - lo) < 1e-13:
                break
    out = np.where(any_ok, np.exp(hi), np.inf)
    out = np.where(any_ok & (first == 0), D_lo, out)
    return out, ok


def _optimise_replay(prob, q, r_lo, r_hi, D_lo, D_hi, n_replay=41, n_zoom=5):
    """min over replay of the minimal feasible D: coarse replay grid, then zoomed grids around the best.

    Returns (r*, D*, first-pass grid r, first-pass (R, 3) minimal D).
    """
    r_grid = np.linspace(r_lo, r_hi, n_replay)
    Dmin, _ = _min_D(prob, r_grid, q, D_lo, D_hi)
    first_pass = (r_grid, Dmin)
    best_D = Dmin[:, 0]
    i = int(np.argmin(best_D))
    if not np.isfinite(best_D[i]):
        return None, None, *first_pass
    r_star, D_star = r_grid[i], best_D[i]
    h = (r_hi - r_lo) / (n_replay - 1)
    for _ in range(n_zoom):
        if h <= 0:
            break
        rz = np.clip(np.linspace(r_star - 1.5 * h, r_star + 1.5 * h, 13), r_lo, r_hi)
        Dz, _ = _min_D(prob, rz, q, D_lo, D_hi)
        j = int(np.argmin(Dz[:, 0]))
        if Dz[j, 0] <= D_star:
            r_star, D_star = rz[j], Dz[j, 0]
        h = 3 * h / 12
    return float(r_star), float(D_star), *first_pass


def _summary(x, interval):
    x = np.asarray(x, float).ravel()
    a = (1 - interval) / 2
    return {"median": float(order_statistic(x, 0.5)), "mean": float(np.mean(x)),
            "lower": float(np.quantile(x, a)), "upper": float(np.quantile(x, 1 - a))}


def _base_vec(prob: _Problem, S: int) -> np.ndarray:
    """L_src,0 as one value per source draw."""
    b = np.asarray(prob.base, float)
    return np.full(S, float(b)) if b.ndim == 0 else b.ravel()


def _point(prob: _Problem, kind, q, r, D, interval, D_lo):
    Lt, Ls = prob.losses([r], [D])
    Lt, Ls = Lt[:, 0], Ls[:, 0]
    base = _base_vec(prob, Ls.size)
    delta = prob.fval * base if prob.frel else np.full_like(Ls, prob.fval)
    dl = Ls - base
    p_t = float(np.mean(Lt <= prob.tau))
    p_f = float(np.mean(dl - delta <= 0))
    # Which constraint binds: the one that fails just below D (or the ATPP bound).
    if D <= D_lo * (1 + 1e-9):
        binding = "bound"
    else:
        ok = _ok(prob, [r], [D * (1 - 1e-6)], q)[0]
        binding = "+".join(n for n, o in (("target", ok[1]), ("forgetting", ok[2])) if not o) or "grid"
    return PlanPoint(kind=kind, q=q, replay=float(r), atpp=float(D / prob.N), D=float(D),
                     flops=float(6.0 * prob.N * D), target_loss=_summary(Lt, interval),
                     source_loss=_summary(Ls, interval), forgetting=_summary(dl, interval),
                     forgetting_rel=_summary(dl / base, interval), p_target=p_t, p_forgetting=p_f,
                     p_both=p_t * p_f, binding=binding)


def _source_base(source, source_base, N, ptpp, D_hi=None, rtol=1e-6):
    """L_src,0 as (values broadcastable against (S_src, n), draws for the summary, method)."""
    if source_base is None:
        df = pd.DataFrame({"N": [N], "D": [SOURCE_BASE_ATPP * N], "replay": [REPLAY_CLIP[1]],
                           "ptpp": [ptpp]})
        v = _safe_predict(source, df, "source")  # (S, 1)
        if D_hi is not None:
            at_hi = _safe_predict(source, df.assign(D=D_hi), "source")
            gap = float(np.median((at_hi - v) / v))
            if gap > 0.01:
                warnings.warn(
                    f"the law-based pre-adaptation source loss (r = 1, D -> inf) is {100 * gap:.1f}% "
                    "below the law's own value at the largest ATPP searched: the source law's data "
                    "term decays slowly, so this conservative default inflates forgetting. Pass "
                    "the checkpoint's measured source loss (or a table with D = 0 rows) as "
                    "source_base.", stacklevel=3)
        return v, v[:, 0], ("law default: L_src(N, D -> inf, r = 1, PTPP), the converged source-only "
                            "loss, a lower bound on the checkpoint's (conservative)")
    if isinstance(source_base, pd.DataFrame):
        df = source_base
        n_col = source.law.column("N")  # the table's model size, as the source law reads it
        need = {"loss", "D", n_col, "ptpp"}
        if not need <= set(df.columns):
            raise DataError(f"source_base table needs columns {sorted(need)}; it has {list(df.columns)}")
        base = (df["D"] == 0) & (df["ptpp"] > 0)
        if "domain" in df.columns:
            base &= df["domain"] == "source"
        m = base & np.isclose(df[n_col], N, rtol=rtol) & np.isclose(df["ptpp"], ptpp, rtol=rtol)
        if m.any():
            vals = df.loc[m, "loss"].to_numpy(float)
            return float(vals.mean()), vals, f"data: mean of {m.sum()} pre-adaptation source row(s)"
        return _pretraining_base(df[base], N, ptpp, n_col)
    v = float(source_base)
    if not (math.isfinite(v) and v > 0):
        raise BayesScalingError(f"source_base must be a positive loss, got {source_base!r}")
    return v, np.array([v]), "given"


def _pretraining_base(rows: pd.DataFrame, N, ptpp, n_col="N", min_rows=6):
    """L_src,0 at (N, PTPP) from the table's other pre-adaptation source rows (model size in
    column ``n_col``).

    Those rows are pre-training losses of checkpoints with N parameters trained on PTPP * N tokens,
    so the Chinchilla law ``L0 = E + A/N^alpha + B/(PTPP N)^beta`` (Hoffmann et al. 2022; M3 Eq. 2)
    is fitted to them (Huber on log residuals, delta = 0.02) and evaluated at (N, PTPP * N).
    """
    from .fit import fit_map

    have = sorted({(float(a), float(b)) for a, b in zip(rows[n_col], rows["ptpp"])})
    if len(rows) < min_rows or rows[n_col].nunique() < 2 or rows["ptpp"].nunique() < 2:
        raise DataError(
            f"no pre-adaptation source rows (D == 0, domain == 'source') at N={N:g}, PTPP={ptpp:g} "
            f"in the source_base table, and too few others to fit a pre-training law across sizes "
            f"and stages ({len(rows)} rows at (N, ptpp) = {have[:12]}; need >= {min_rows} over >= 2 "
            "sizes and >= 2 stages). Pass source_base=<float> instead.")
    t = pd.DataFrame({"N": rows[n_col].to_numpy(float),
                      "D": (rows["ptpp"] * rows[n_col]).to_numpy(float),
                      "loss": rows["loss"].to_numpy(float)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = fit_map("chinchilla", t, delta=0.02, n_starts=32, seed=0)
    v = float(fit.predict(pd.DataFrame({"N": [N], "D": [ptpp * N]}))[0])
    return v, np.array([v]), (f"pre-training law (Chinchilla in N and PTPP*N) fitted to {len(t)} "
                              f"pre-adaptation source rows, evaluated at N={N:g}, PTPP={ptpp:g}")


def adaptation(target, source, *, N: float, ptpp: float, max_forgetting, target_loss: float,
               prob: float | None = None, replay_bounds=(0.0, 1.0), atpp_bounds=(1e-2, 1e3),
               source_base=None, interval: float = 0.9, max_draws: int | None = None,
               n_replay: int = 41) -> Plan:
    """The PTPP paper's Section 4 plan: smallest ATPP and a replay ratio meeting both constraints.

    Solves (PTPP paper, Sec. 4)::

        min ATPP = D / N   s.t.   Delta L_src(N, D, r, PTPP) <= delta,   L_tgt(N, D, r, PTPP) <= tau

    over ``r`` in ``replay_bounds`` and ``ATPP`` in ``atpp_bounds``, with the law forecasts of
    ``target`` and ``source`` (each a ``MapFit``, a ``Posterior`` or :class:`ParamDraws` of any law
    reading the columns N, D, replay, ptpp). Replay values are clipped to [1e-9, 1 - 1e-9] as in
    the paper.

    Deterministic plan: the constraints on the median forecast over draws (for a point fit, the
    fit itself). Chance-constrained plan (``prob = p``): ``P(Delta L_src <= delta) >= p`` and
    ``P(L_tgt <= tau) >= p``, each counted over the draws. Both are one computation: a constraint
    ``g <= 0`` holds with probability >= p over S draws iff the ceil(pS)-th smallest g_s is <= 0
    (:func:`order_statistic`), the median forecast being p = 1/2. Hence for p >= 1/2 the
    chance-constrained feasible set lies inside the deterministic one and the chance plan is never
    cheaper.

    Search: for each replay on a grid, the minimal D meeting both constraints is found by a coarse
    log-grid scan (first feasible point) refined by vectorised bisection on log D (every draw and
    every replay at once, one ``predict_draws`` call per step); the replay is then refined by
    zooming grids around the best value. No monotonicity in D is assumed beyond the coarse grid.

    The pre-adaptation source loss ``L_src,0`` (the paper's ``L_src(N, 0, 1, PTPP)``; the law itself
    diverges at D = 0):

    - ``source_base=<float>``: used as given (e.g. the measured loss of the checkpoint);
    - ``source_base=<DataFrame>``: the mean loss of its rows with D == 0 (and ``domain ==
      "source"`` when that column exists) at this N and PTPP (the un-adapted checkpoint); when the
      table has no such row, its other D == 0 source rows are pre-training losses, so the
      Chinchilla law ``L0 = E + A/N^alpha + B/(PTPP N)^beta`` fitted to them is evaluated at
      (N, PTPP * N) (at least 6 rows over 2 sizes and 2 stages);
    - ``None`` (default): the law's own limit ``L_src(N, D -> inf, r = 1, PTPP)`` per draw (evaluated
      at ATPP = 1e9 with r = 1 - 1e-9), the loss continued source-only training converges to.
      Continued source-only training can only lower the checkpoint's loss, so this is a lower bound
      on L_src,0: forgetting is over-estimated and plans are conservative. When the fitted data
      exponent is small the limit sits far below any practical loss and a warning says so; pass
      the measured value (or the table) whenever you have it.

    Args:
        target, source: forecasts of the target- and source-domain losses.
        N, ptpp: model size and pre-training tokens per parameter of the checkpoint.
        max_forgetting: absolute loss increase (float) or relative string like ``"+2%"``.
        target_loss: tau.
        prob: chance-constraint probability in (0, 1), needs several draws; ``None``: deterministic.
        replay_bounds, atpp_bounds: the search box.
        source_base: see above.
        interval: width of the reported central intervals.
        max_draws: thin ``ParamDraws`` to at most this many draws.
        n_replay: replay grid size of the first pass.

    Returns:
        :class:`Plan`.

    Raises:
        InfeasiblePlanError: nothing in the box meets the constraints; carries the closest plan
            and the thresholds it meets. BayesScalingError/DataError: bad arguments.
    """
    # --- validate ------------------------------------------------------------------------------
    for name, v in (("N", N), ("ptpp", ptpp), ("target_loss", target_loss)):
        if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) and v > 0):
            raise BayesScalingError(f"{name} must be a positive number, got {v!r}")
    fval, frel = parse_forgetting(max_forgetting)
    r_lo, r_hi = (float(b) for b in replay_bounds)
    if not (0.0 <= r_lo <= r_hi <= 1.0):
        raise BayesScalingError(f"replay_bounds must satisfy 0 <= lo <= hi <= 1, got {replay_bounds}")
    a_lo, a_hi = (float(b) for b in atpp_bounds)
    if not (0 < a_lo < a_hi and math.isfinite(a_hi)):
        raise BayesScalingError(f"atpp_bounds must satisfy 0 < lo < hi < inf, got {atpp_bounds}")
    if not (0 < interval < 1):
        raise BayesScalingError(f"interval must be in (0, 1), got {interval}")
    if prob is not None:
        if not (0 < prob < 1):
            raise BayesScalingError(f"prob must be in (0, 1), got {prob}")
    N, ptpp, tau = float(N), float(ptpp), float(target_loss)
    D_lo, D_hi = a_lo * N, a_hi * N

    target, source = _thin_obj(target, max_draws), _thin_obj(source, max_draws)
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            return _adaptation(target, source, N, ptpp, tau, fval, frel, max_forgetting, prob,
                               r_lo, r_hi, a_lo, a_hi, D_lo, D_hi, source_base, interval,
                               max_draws, n_replay)
    finally:
        _reemit_once(caught)


def _reemit_once(caught):
    """Re-issue recorded warnings once each (a posterior warns on every predict_draws call)."""
    seen = set()
    for w in caught:
        key = (w.category, str(w.message))
        if key not in seen:
            seen.add(key)
            warnings.warn(w.message, w.category, stacklevel=3)


def _adaptation(target, source, N, ptpp, tau, fval, frel, max_forgetting, prob, r_lo, r_hi, a_lo,
                a_hi, D_lo, D_hi, source_base, interval, max_draws, n_replay):
    base_vals, base_draws, base_method = _source_base(source, source_base, N, ptpp, D_hi)
    problem = _Problem(target, source, N, ptpp, tau, fval, frel, base_vals)
    if prob is not None:
        S = min(_safe_predict(problem.target, problem.rows([0.5], [D_lo]), "target").shape[0],
                _safe_predict(problem.source, problem.rows([0.5], [D_lo]), "source").shape[0])
        if S < 2:
            raise BayesScalingError(f"prob={prob} needs posterior draws; a point fit has one draw. "
                                    "Use bs.fit_posterior (or ParamDraws), or prob=None.")

    # --- solve ---------------------------------------------------------------------------------
    points, curves = {}, {}
    for kind, q in (("deterministic", 0.5), ("chance", prob)):
        if q is None:
            continue
        r_star, D_star, r_grid, Dmin = _optimise_replay(problem, q, r_lo, r_hi, D_lo, D_hi, n_replay)
        curves["replay"] = r_grid
        tag = "median" if kind == "deterministic" else "prob"
        for j, name in enumerate(("both", "target", "forgetting")):
            curves[f"atpp_{name}_{tag}"] = Dmin[:, j] / N
        if r_star is None:
            closest, needed = _closest(problem, q, r_lo, r_hi, D_lo, D_hi, interval, kind)
            what = "the median forecast" if kind == "deterministic" else f"probability {q:g}"
            raise InfeasiblePlanError(
                f"no replay in [{r_lo:g}, {r_hi:g}] and ATPP in [{a_lo:g}, {a_hi:g}] meets "
                f"forgetting <= {max_forgetting} and target loss <= {tau:g} at {what}. Closest plan: "
                f"replay={100 * closest.replay:.1f}%, ATPP={closest.atpp:.4g}, which meets target "
                f"loss <= {needed['target_loss']:.6g} and forgetting <= {needed['max_forgetting']}. "
                "Relax the thresholds to those values, widen atpp_bounds/replay_bounds"
                + (", or lower prob" if kind == "chance" else "")
                + ("" if source_base is not None else
                   ", or pass the measured pre-adaptation source loss as source_base (the default "
                   "L_src,0 is a conservative lower bound)") + ".",
                closest=closest, needed=needed)
        points[kind] = _point(problem, kind, q, r_star, D_star, interval, D_lo)

    sb = _summary(base_draws, interval)
    return Plan(
        N=N, ptpp=ptpp, target_loss=tau, max_forgetting=max_forgetting, delta_rel=frel, prob=prob,
        interval=interval, source_base=sb, source_base_method=base_method,
        deterministic=points["deterministic"], chance=points.get("chance"),
        curves=pd.DataFrame(curves),
        settings={"replay_bounds": [r_lo, r_hi], "atpp_bounds": [a_lo, a_hi], "n_replay": n_replay,
                  "target_law": getattr(getattr(target, "law", None), "name", None),
                  "source_law": getattr(getattr(source, "law", None), "name", None),
                  "max_draws": max_draws},
        _fits=(target, source),
    )


def _closest(prob: _Problem, q, r_lo, r_hi, D_lo, D_hi, interval, kind, n=41):
    """Grid point with the smallest relative constraint excess, and the thresholds it meets."""
    r = np.linspace(r_lo, r_hi, n)
    D = np.geomspace(D_lo, D_hi, n)
    rr, DD = np.repeat(r, n), np.tile(D, n)
    gt, gs = prob.g(rr, DD)
    qt, qs = order_statistic(gt, q), order_statistic(gs, q)
    scale = float(np.median(np.asarray(prob.base, float)))
    excess = np.maximum(np.maximum(qt / prob.tau, qs / scale), 0.0)
    i = int(np.lexsort((DD, excess))[0])
    point = _point(prob, kind, q, rr[i], DD[i], interval, D_lo)
    # Thresholds met at quantile q at this point (never tighter than those requested).
    Lt, Ls = prob.losses([rr[i]], [DD[i]])
    need_t = max(float(order_statistic(Lt[:, 0], q)), prob.tau)
    base = _base_vec(prob, Ls.shape[0])
    dl = Ls[:, 0] - base
    need_f = max(float(order_statistic(dl / base if prob.frel else dl, q)), prob.fval)
    spec = f"{100 * need_f:+.10g}%" if prob.frel else need_f
    return point, {"target_loss": need_t, "max_forgetting": spec}


# --- figure: the PTPP paper's Figure 2, with probabilities ---------------------------------------


def plot_adaptation(plan: Plan, target=None, source=None, *, n_grid: int = 61, max_draws: int = 400,
                    prob_levels: Sequence[float] = (0.5, 0.9), path=None):
    """The PTPP paper's Figure 2 for ``plan``, with the chance-constrained optimum added.

    Left: forgetting landscape (median forecast, relative to L_src,0 when ``max_forgetting`` was
    relative) over replay x ATPP, with the forgetting boundary ``Delta L_src = delta``. Right: the
    target loss landscape with the boundary ``L_tgt = tau``. On both: the minimal-ATPP curve over
    replay, the deterministic optimum (star), the chance-constrained optimum (diamond) and
    probability contours ``P(constraint holds) in prob_levels`` (and ``plan.prob``).

    ``target``/``source`` default to the fits the plan was computed from (not stored by
    :meth:`Plan.save`). Returns the matplotlib figure (and writes it to ``path`` if given).
    """
    import matplotlib.pyplot as plt

    tf, sf = plan._fits if plan._fits else (None, None)
    target, source = target if target is not None else tf, source if source is not None else sf
    if target is None or source is None:
        raise BayesScalingError("plot_adaptation needs the target and source fits (a loaded Plan does "
                                "not carry them): plot_adaptation(plan, target, source)")
    target, source = _thin_obj(target, max_draws), _thin_obj(source, max_draws)
    fval, frel = parse_forgetting(plan.max_forgetting)
    r_lo, r_hi = plan.settings["replay_bounds"]
    a_lo, a_hi = plan.settings["atpp_bounds"]
    r = np.linspace(r_lo, r_hi, n_grid)
    a = np.geomspace(a_lo, a_hi, n_grid)
    RR, AA = np.meshgrid(r, a)
    if plan.source_base_method.startswith("law"):
        base, _, _ = _source_base(source, None, plan.N, plan.ptpp)
    else:
        base = plan.source_base["mean"]
    prob = _Problem(target, source, plan.N, plan.ptpp, plan.target_loss, fval, frel, base)
    Lt, Ls = prob.losses(RR.ravel(), AA.ravel() * plan.N)
    b = np.asarray(base, float)
    dl = Ls - b
    forget = dl / b if frel else dl
    delta = fval
    shape = RR.shape
    f_med = order_statistic(forget, 0.5).reshape(shape)
    t_med = order_statistic(Lt, 0.5).reshape(shape)
    p_f = np.mean(forget <= delta, axis=0).reshape(shape)
    p_t = np.mean(Lt <= plan.target_loss, axis=0).reshape(shape)
    levels = sorted(set(list(prob_levels) + ([plan.prob] if plan.prob else [])))

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2), constrained_layout=True,
                             gridspec_kw={"width_ratios": [1.15, 1.15, 1.0]})
    panels = (
        (axes[0], 100 * f_med if frel else f_med, p_f, 100 * delta if frel else delta,
         "forgetting " + ("(% of $L_{src,0}$, median)" if frel else "(nats, median)"), "coolwarm"),
        (axes[1], t_med, p_t, plan.target_loss, "target loss (median forecast)", "viridis"),
    )
    c = plan.curves
    for ax, Z, P, thr, label, cmap in panels:
        zmin = float(np.nanmin(Z))
        zmax = thr + 1.5 * max(thr - zmin, 1e-12)  # colour range centred on the threshold
        lv = np.linspace(zmin, zmax, 31)
        cf = ax.contourf(100 * RR, AA, np.clip(Z, zmin, zmax), levels=lv, cmap=cmap, extend="max")
        fig.colorbar(cf, ax=ax, label=label)
        ax.contour(100 * RR, AA, Z, levels=[thr], colors="k", linewidths=1.5)
        cs = ax.contour(100 * RR, AA, P, levels=levels, colors="w", linestyles="--", linewidths=1)
        ax.clabel(cs, fmt=lambda v: f"P={v:g}", fontsize=8)
        ok = np.isfinite(c["atpp_both_median"])
        ax.plot(100 * c["replay"][ok], c["atpp_both_median"][ok], color="k", lw=2.5,
                label="min ATPP (median forecast)")
        if "atpp_both_prob" in c:
            okp = np.isfinite(c["atpp_both_prob"])
            ax.plot(100 * c["replay"][okp], c["atpp_both_prob"][okp], color="m", lw=2, ls="-.",
                    label=f"min ATPP (p={plan.prob:g})")
        d = plan.deterministic
        ax.plot(100 * d.replay, d.atpp, marker="*", ms=18, color="gold", mec="k", ls="none",
                label=f"deterministic: {d.atpp:.3g} ATPP, {100 * d.replay:.0f}% replay")
        if plan.chance is not None:
            ch = plan.chance
            ax.plot(100 * ch.replay, ch.atpp, marker="D", ms=10, color="m", mec="k", ls="none",
                    label=f"p={plan.prob:g}: {ch.atpp:.3g} ATPP, {100 * ch.replay:.0f}% replay")
        ax.set_yscale("log")
        ax.set_xlabel("replay (%)")
        ax.set_ylabel("ATPP (adaptation tokens per parameter)")
        ax.set_ylim(a_lo, a_hi)
    fs = plan.max_forgetting if isinstance(plan.max_forgetting, str) else f"{plan.max_forgetting:+g}"
    axes[0].set_title(f"forgetting landscape (black: forgetting = {fs})")
    axes[1].set_title(f"target loss landscape (black: loss = {plan.target_loss:g})")

    # Right: the target loss along the median-forecast frontier (the paper's right panel).
    ax = axes[2]
    ok = np.isfinite(c["atpp_both_median"]).to_numpy()
    rf = c["replay"].to_numpy()[ok]
    if rf.size:
        Ltf, _ = prob.losses(rf, c["atpp_both_median"].to_numpy()[ok] * plan.N)
        a_ = (1 - plan.interval) / 2
        ax.fill_between(100 * rf, np.quantile(Ltf, a_, axis=0), np.quantile(Ltf, 1 - a_, axis=0),
                        color="k", alpha=0.15, label=f"{100 * plan.interval:.0f}% interval")
        ax.plot(100 * rf, order_statistic(Ltf, 0.5), color="k", lw=2, label="median, on the frontier")
        if "atpp_both_prob" in c:
            okp = np.isfinite(c["atpp_both_prob"]).to_numpy()
            if okp.any():
                Ltp, _ = prob.losses(c["replay"].to_numpy()[okp],
                                     c["atpp_both_prob"].to_numpy()[okp] * plan.N)
                ax.plot(100 * c["replay"].to_numpy()[okp], order_statistic(Ltp, 0.5), color="m",
                        lw=2, ls="-.", label=f"median, on the p={plan.prob:g} frontier")
    ax.axhline(plan.target_loss, color="r", ls=":", label=f"target loss {plan.target_loss:g}")
    d = plan.deterministic
    ax.plot(100 * d.replay, d.target_loss["median"], marker="*", ms=18, color="gold", mec="k",
            ls="none")
    if plan.chance is not None:
        ax.plot(100 * plan.chance.replay, plan.chance.target_loss["median"], marker="D", ms=10,
                color="m", mec="k", ls="none")
    ax.set_xlabel("replay (%)")
    ax.set_ylabel("target loss at the minimal ATPP")
    ax.set_title("resulting target loss along the frontier")
    ax.legend(loc="best", fontsize=7)
    h, l_ = axes[1].get_legend_handles_labels()
    fig.legend(h, l_, loc="lower center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, -0.06))
    fig.suptitle(f"Adaptation plan, N={plan.N:.3g}, PTPP={plan.ptpp:g} (dashed white: probability "
                 "the constraint holds)")
    if path is not None:
        fig.savefig(path, dpi=130, bbox_inches="tight")
    return fig


# ==================================================================================================
# The M3 recipe optimiser (M3 paper Section 4, Appendix D.6-D.7).

APPROACHES = ("mono_1stage", "multi_1stage", "multi_2stage")
_NDIM = {"mono_1stage": 1, "multi_1stage": 2, "multi_2stage": 3}


def chinchilla_optimal(A, B, alpha, beta, C):
    """Compute-optimal split of ``C = M D`` for ``L = E + A/M^alpha + B/D^beta`` (M3 Eqs. 43-44).

    ``D*(C) = G^-1 C^(alpha/(alpha+beta))`` and ``M*(C) = G C^(beta/(alpha+beta))`` with
    ``G = (alpha A / (beta B))^(1/(alpha+beta))``. Returns ``(M*, D*)``.
    """
    G = (alpha * A / (beta * B)) ** (1.0 / (alpha + beta))
    C = np.asarray(C, float)
    return G * C ** (beta / (alpha + beta)), C ** (alpha / (alpha + beta)) / G


def _settings(u, approach, C, D_T):
    """Decision vector -> recipe columns.

    ``u`` (..., d) = (log(D / D_T) [, log r [, t]]): total tokens relative to the corpus, the
    average ratio, and ``t`` with ``r_f = r + t (1 - r)``; then ``k = r D / D_T`` (M3 Eq. 24) and
    ``M = C / D``. Searching in D rather than k removes the k-r valley (at fixed D, trading k
    against r only changes the repetition terms).

    ``k < 1`` means training once on the first ``k D_T`` tokens of the corpus (a subset): it is
    evaluated as ``k = 1`` on a corpus of ``k D_T`` tokens, so a data-rich corpus (D_T > D*(C))
    gets the single-epoch Chinchilla optimum.
    """
    D_rel = jnp.exp(u[..., 0])
    if approach == "mono_1stage":
        r = jnp.ones_like(D_rel)
        r_f = r
    else:
        r = jnp.exp(u[..., 1])
        r_f = r if approach == "multi_1stage" else r + u[..., 2] * (1.0 - r)
    k = r * D_rel
    D = D_rel * D_T
    M = C / D
    k_eff = jnp.maximum(k, 1.0)
    DT_eff = D_T * jnp.minimum(k, 1.0)
    r1 = r if approach != "multi_2stage" else jnp.zeros_like(r)
    return {"M": M, "D": D, "D_T": DT_eff, "k": k_eff, "r": r, "r_f": r_f, "r1": r1,
            "k_nominal": k}


def _recipe_inputs(law: Law, cols):
    x = {}
    for v in law.variables:
        col = law.column(v)
        if col in cols:
            x[v] = cols[col]
        elif v in law.defaults:
            x[v] = jnp.full_like(cols["M"], float(law.defaults[v]))
        else:
            raise BayesScalingError(
                f"law {law.name} reads column {col!r}, which a recipe does not define (a recipe sets "
                "M, D, D_T, k, r, r_f, r1); use a law on those columns, e.g. 'm3' or 'chinchilla_m3'")
    return x


_RECIPE_FNS: dict = {}


def _recipe_fn(law: Law, approach: str, mean_over_draws: bool):
    """jit(params, C (B, 1), D_T (B, 1), u (B, P, d), M and k bounds) -> loss (B, P); +inf outside."""
    key = (law.fn, tuple(sorted(law.column_map.items())), tuple(law.variables), approach,
           mean_over_draws)
    if key not in _RECIPE_FNS:
        def f(params, C, D_T, u, m_lo, m_hi, k_lo=0.0, k_hi=jnp.inf):
            cols = _settings(u, approach, C, D_T)
            if mean_over_draws:  # params (S, 1, 1) against (1, P): expected loss over draws
                cols = {k: v[None] for k, v in cols.items()}
                p = {k: v[:, None, None] for k, v in params.items()}
            else:  # params (B,) matched with rows (B, P)
                p = {k: v[:, None] for k, v in params.items()}
            L = law.fn(p, _recipe_inputs(law, cols))
            M, k = cols["M"], cols["k_nominal"]
            bad = (~jnp.isfinite(L) | (M < m_lo) | (M > m_hi) | (k < k_lo * (1 - 1e-12))
                   | (k > k_hi * (1 + 1e-12)))
            L = jnp.where(bad, jnp.inf, L)
            return jnp.mean(L, axis=0) if mean_over_draws else L

        _RECIPE_FNS[key] = jax.jit(f)
    return _RECIPE_FNS[key]


def _grid_local_minima(f, g0, d, n_starts):
    """Indices (B, n_starts) of the lowest local minima of ``f`` (B, g0^d) on a g0^d grid.

    A grid point is a local minimum when it is not above any of its 2d axis neighbours; when a
    row has fewer than ``n_starts`` of them, its best point fills the remaining slots.
    """
    B = f.shape[0]
    F = f.reshape((B,) + (g0,) * d)
    is_min = np.ones_like(F, bool)
    for ax in range(1, d + 1):
        pad = [(0, 0)] * (d + 1)
        pad[ax] = (1, 1)
        Fp = np.pad(F, pad, constant_values=np.inf)
        lo = np.take(Fp, np.arange(0, g0), axis=ax)
        hi = np.take(Fp, np.arange(2, g0 + 2), axis=ax)
        is_min &= (F <= lo) & (F <= hi)
    masked = np.where(is_min.reshape(B, -1) & np.isfinite(f), f, np.inf)
    order = np.argsort(masked, axis=1)[:, :n_starts]
    ok = np.take_along_axis(masked, order, axis=1) < np.inf
    best = np.argmin(f, axis=1)
    return np.where(ok, order, best[:, None])


def _zoom(fun, lo, hi, B, g0, g, n_zoom, n_starts=3):
    """Minimise ``fun(u (B', P, d)) -> (B', P)`` over the box [lo, hi] for every batch element.

    Multi-start pattern search: a ``g0^d`` grid over the whole box; its ``n_starts`` lowest local
    minima each start a sequence of ``g^d`` grids over +-1.5 spacings around the incumbent, which
    recentre on the best point and shrink by 3/(g-1) only when the incumbent does not improve;
    then a full-range scan of each coordinate through the incumbent and another round of zooms.
    The best end point wins. Vectorised over batch and starts. Returns (u* (B, d), f* (B,)).
    """
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    d = lo.size
    lin = np.linspace(-1.0, 1.0, g0)
    offs = np.stack(np.meshgrid(*([lin] * d), indexing="ij"), -1).reshape(-1, d)
    u0 = (lo + hi) / 2 + (hi - lo) / 2 * offs                        # (P0, d)
    f0 = np.asarray(fun(jnp.asarray(np.broadcast_to(u0, (B,) + u0.shape))))
    f0 = np.where(np.isfinite(f0), f0, np.inf)
    K = min(n_starts, u0.shape[0])
    starts = _grid_local_minima(f0, g0, d, K)                         # (B, K)
    centre = u0[starts].reshape(B * K, d)
    best_f = np.take_along_axis(f0, starts, axis=1).reshape(B * K)
    best_u = centre.copy()
    half = np.broadcast_to(1.5 * (hi - lo) / (g0 - 1), (B * K, d)).copy()
    lin = np.linspace(-1.0, 1.0, g)
    offs = np.stack(np.meshgrid(*([lin] * d), indexing="ij"), -1).reshape(-1, d)
    rows = np.arange(B * K)

    def fun_k(u):  # (B*K, P, d) -> (B*K, P): each start sees its own batch element
        return np.asarray(fun(jnp.asarray(u.reshape(B, K * u.shape[1], d)))).reshape(B * K, -1)

    def zoom(centre, half, best_u, best_f, n_iter):
        # pattern search: recentre on the best grid point; shrink only when the incumbent stays
        for _ in range(n_iter):
            u = np.clip(centre[:, None, :] + half[:, None, :] * offs[None], lo, hi)
            f = fun_k(u)
            f = np.where(np.isfinite(f), f, np.inf)
            i = np.argmin(f, axis=1)
            fi = f[rows, i]
            better = fi < best_f - 1e-15 * np.abs(best_f)
            best_u = np.where(better[:, None], u[rows, i], best_u)
            best_f = np.where(better, fi, best_f)
            centre = best_u.copy()
            half = np.where(better[:, None], half, np.minimum(3.0 * half / (g - 1), (hi - lo) / 2))
        return best_u, best_f

    best_u, best_f = zoom(centre, half, best_u, best_f, n_zoom + n_zoom // 2)
    # polish: a full-range scan of each coordinate through the incumbent, then zoom again
    line = np.linspace(0.0, 1.0, 65)
    for j in range(d):
        u = np.repeat(best_u[:, None, :], line.size, axis=1)
        u[:, :, j] = lo[j] + (hi[j] - lo[j]) * line
        f = fun_k(u)
        f = np.where(np.isfinite(f), f, np.inf)
        i = np.argmin(f, axis=1)
        better = f[rows, i] < best_f
        best_u = np.where(better[:, None], u[rows, i], best_u)
        best_f = np.where(better, f[rows, i], best_f)
    half = np.broadcast_to(1.5 * (hi - lo) / 64, (B * K, d)).copy()
    best_u, best_f = zoom(best_u.copy(), half, best_u, best_f, n_zoom)
    best_f = best_f.reshape(B, K)
    j = np.argmin(best_f, axis=1)
    return best_u.reshape(B, K, d)[np.arange(B), j], best_f[np.arange(B), j]


def _bounds(approach, k_bounds, r_bounds):
    """Search box in u = (log D/D_T, log r, t): D/D_T = k / r spans [k_lo, k_hi / r_lo]."""
    lo = [math.log(k_bounds[0])]
    hi = [math.log(k_bounds[1]) - (0.0 if approach == "mono_1stage" else math.log(r_bounds[0]))]
    if approach != "mono_1stage":
        lo.append(math.log(r_bounds[0]))
        hi.append(math.log(r_bounds[1]))
    if approach == "multi_2stage":
        lo.append(0.0)
        hi.append(1.0)
    return np.array(lo), np.array(hi)


def _optimise(draws: ParamDraws, C, D_T, approach, *, per_draw, k_bounds, r_bounds, M_bounds,
              chunk=256):
    """Optimal settings for every (cell [, draw]): per-draw optima or the expected-loss decision.

    Returns a dict of arrays shaped (cells,) (decision) or (S, cells) (per draw).
    """
    C = np.atleast_1d(np.asarray(C, float))
    D_T = np.atleast_1d(np.asarray(D_T, float))
    n_cells = C.size
    lo, hi = _bounds(approach, k_bounds, r_bounds)
    d = lo.size
    # First-pass grid g0 per dimension, zoom grid g; the spacing shrinks by 3/(g-1) per zoom, to
    # ~1e-9 of the first-pass spacing after n_zoom zooms.
    g0, g, n_zoom = {1: (129, 17, 10), 2: (41, 9, 18), 3: (19, 7, 24)}[d]
    m_lo, m_hi = (0.0, np.inf) if M_bounds is None else (float(M_bounds[0]), float(M_bounds[1]))
    k_lo, k_hi = float(k_bounds[0]), float(k_bounds[1])
    S = draws.n_draws
    fn = _recipe_fn(draws.law, approach, mean_over_draws=not per_draw)
    if per_draw:
        cells = np.repeat(np.arange(n_cells)[None], S, 0).ravel()   # (S * cells,)
        drw = np.repeat(np.arange(S)[:, None], n_cells, 1).ravel()
    else:
        cells = np.arange(n_cells)
        drw = None
    total = cells.size
    chunk = min(chunk, total)
    us, fs = [], []
    for s in range(0, total, chunk):
        idx = np.arange(s, min(s + chunk, total))
        pad = chunk - idx.size
        idx_p = np.concatenate([idx, np.full(pad, idx[-1])]) if pad > 0 else idx
        Cb = jnp.asarray(C[cells[idx_p]])[:, None]
        Db = jnp.asarray(D_T[cells[idx_p]])[:, None]
        if per_draw:
            pb = {k: jnp.asarray(v[drw[idx_p]]) for k, v in draws.params.items()}
        else:
            pb = {k: jnp.asarray(v) for k, v in draws.params.items()}
        u, f = _zoom(lambda uu: fn(pb, Cb, Db, uu, m_lo, m_hi, k_lo, k_hi), lo, hi, idx_p.size,
                     g0, g, n_zoom)
        us.append(u[: idx.size])
        fs.append(f[: idx.size])
    u = np.concatenate(us)
    f = np.concatenate(fs)
    cols = {k: np.asarray(v) for k, v in _settings(jnp.asarray(u), approach, jnp.asarray(C[cells]),
                                                    jnp.asarray(D_T[cells])).items()}
    out = {"loss": f, "M": cols["M"], "k": cols["k_nominal"], "r": cols["r"], "r_f": cols["r_f"],
           "D": cols["D"]}
    kk = out["k"]
    at_bound = (kk <= k_lo * (1 + 1e-6)) | (kk >= k_hi * (1 - 1e-6))
    if d > 1:
        at_bound |= out["r"] <= r_bounds[0] * (1 + 1e-6)
    out["at_bound"] = at_bound
    if per_draw:
        out = {k: v.reshape(S, n_cells) for k, v in out.items()}
    return out


def _check_recipe_args(C, D_T, approaches, k_bounds, r_bounds):
    for name, v in (("C", C), ("D_T", D_T)):
        a = np.asarray(v, float)
        if a.size == 0 or not np.all(np.isfinite(a) & (a > 0)):
            raise BayesScalingError(f"{name} must be positive and finite, got {v!r}")
    bad = [a for a in approaches if a not in APPROACHES]
    if bad or not approaches:
        raise BayesScalingError(f"unknown approaches {bad}; choose from {APPROACHES}")
    if not (0 < k_bounds[0] < k_bounds[1] < np.inf):
        raise BayesScalingError(f"k_bounds must satisfy 0 < lo < hi < inf, got {k_bounds}")
    if not (0 < r_bounds[0] < r_bounds[1] <= 1):
        raise BayesScalingError(f"r_bounds must satisfy 0 < lo < hi <= 1, got {r_bounds}")


def _law_approaches(law: Law, approaches):
    """Approaches a law can tell apart: without an r (or r_f) input only mono 1-stage is meaningful."""
    reads = {law.column(v) for v in law.variables}
    ok = []
    for a in approaches:
        if a != "mono_1stage" and "r" not in reads:
            continue
        if a == "multi_2stage" and "r_f" not in reads:
            continue
        ok.append(a)
    return ok


def _winner(losses: np.ndarray, names, rtol=1e-9):
    """Index of the best approach along axis 0; ties (within rtol) go to the earlier (simpler) one."""
    best = np.min(losses, axis=0)
    win = np.argmax(losses <= best * (1 + rtol), axis=0)
    return win


@dataclass
class Recipe:
    """Optimal training recipes for one (C, D_T).

    Attributes:
        C, D_T: compute budget (FLOPs, ``C = M D``) and target corpus tokens.
        table: one row per approach: the decision (``loss``, ``M``, ``k``, ``r``, ``r_f``, ``D``:
            minimiser of the posterior expected loss; for a point fit, of the fitted law), the loss
            there with a central interval over draws (``loss_lower``/``loss_upper``), and with
            several draws the per-draw optima's intervals (``M_lower`` ... ``r_f_upper``,
            ``loss_opt_lower``/``_upper``) and ``p_best``: the fraction of draws in which this
            approach is the best.
        best: the approach with the lowest decision loss (ties go to the simpler approach).
        n_draws, interval: number of draws and interval width.
    """

    C: float
    D_T: float
    table: pd.DataFrame
    best: str
    n_draws: int
    interval: float
    law: str = ""

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    def __getitem__(self, approach) -> pd.Series:
        return self.table.set_index("approach").loc[approach]

    def __repr__(self):
        lines = [f"Recipe(C={self.C:.3e}, D_T={self.D_T:.3e}, law={self.law}, {self.n_draws} draw(s)): "
                 f"best = {self.best}"]
        for _, row in self.table.iterrows():
            s = (f"  {row['approach']:>12s}: loss={row['loss']:.4f} M={row['M']:.3e} k={row['k']:.3g} "
                 f"r={row['r']:.3g} r_f={row['r_f']:.3g} D={row['D']:.3e}")
            if self.n_draws > 1:
                s += (f"  loss in [{row['loss_lower']:.4f}, {row['loss_upper']:.4f}], "
                      f"k* in [{row['k_lower']:.3g}, {row['k_upper']:.3g}], p_best={row['p_best']:.2f}")
            lines.append(s)
        return "\n".join(lines)

    def save(self, path):
        d = {"C": self.C, "D_T": self.D_T, "best": self.best, "n_draws": self.n_draws,
             "interval": self.interval, "law": self.law, "table": self.table.to_dict(orient="list")}
        with open(path, "w") as fh:
            json.dump(d, fh, indent=1, default=_json_default)

    @classmethod
    def load(cls, path) -> "Recipe":
        with open(path) as fh:
            d = json.load(fh)
        d["table"] = pd.DataFrame(d["table"])
        return cls(**d)


def recipe(fit_or_posterior, *, C: float, D_T: float, approaches=APPROACHES, k_bounds=(1e-6, 1e4),
           r_bounds=(1e-3, 1.0), M_bounds=None, interval: float = 0.9,
           max_draws: int | None = 1000) -> Recipe:
    """Loss-minimising M, k, r, r_f per approach for compute ``C`` and target corpus ``D_T``.

    The M3 paper's Section 4 optimisation (Appendix D.6-D.7). With ``C = M D`` and
    ``D = k D_T / r`` (M3 Eq. 24) the model scale is ``M = C r / (k D_T)``, so each approach is a
    box-constrained problem in at most three variables:

    - ``mono_1stage``: r = r_f = 1; free: k.
    - ``multi_1stage``: r_f = r; free: k, r.
    - ``multi_2stage``: free: k, r and r_f in [r, 1] (two-stage with r1 = 0, r_f = r2; a two-stage
      schedule with final ratio r_f exists for every r_f >= r).

    ``k`` is continuous; ``k < 1`` means one pass over a ``k D_T`` subset of the corpus (evaluated as
    k = 1 on ``k D_T`` tokens), so for ``D_T > D*(C)`` the mono 1-stage optimum is the Chinchilla
    compute-optimal split ``D*(C) = G^-1 C^(alpha/(alpha+beta))`` (M3 Eq. 44; :func:`chinchilla_optimal`).
    The multi approaches include their limits (r -> 1 is mono; r_f = r is single-stage), so the
    best approach is chosen with ties going to the simpler one.

    The search runs over (log D/D_T, log r, (r_f - r)/(1 - r)) (D: total tokens): a grid whose
    lowest local minima each start a sequence of zoomed grids, vectorised over draws and cells. The decision for a posterior minimises the posterior expected loss;
    intervals come from the per-draw optima.

    Args:
        fit_or_posterior: ``MapFit``, ``Posterior`` or :class:`ParamDraws` of a law on the recipe
            columns (M, D, D_T, k, r, r_f), e.g. ``m3`` or ``chinchilla_m3``.
        C, D_T: scalars.
        approaches: subset of :data:`APPROACHES`. Approaches a law cannot express (no ``r`` or
            ``r_f`` input) are dropped.
        k_bounds, r_bounds: search box (epochs, average target-language ratio).
        M_bounds: optional ``(lo, hi)`` on the model scale.
        interval: central interval width.
        max_draws: thin posteriors to at most this many draws.

    Returns:
        :class:`Recipe`.
    """
    if np.ndim(C) or np.ndim(D_T):
        raise BayesScalingError("recipe takes scalar C and D_T; use recipe_grid for many cells")
    _check_recipe_args(C, D_T, approaches, k_bounds, r_bounds)
    draws = as_draws(fit_or_posterior, max_draws)
    use = _law_approaches(draws.law, approaches)
    if not use:
        raise BayesScalingError(f"law {draws.law.name} cannot express any of {approaches}")
    S = draws.n_draws
    a = (1 - interval) / 2
    rows, per = [], {}
    for ap in use:
        dec = _optimise(draws, C, D_T, ap, per_draw=False, k_bounds=k_bounds, r_bounds=r_bounds,
                        M_bounds=M_bounds)
        row = {"approach": ap, **{k: float(v[0]) for k, v in dec.items() if k != "at_bound"},
               "at_bound": bool(dec["at_bound"][0])}
        # Loss at the decision, per draw.
        u = [math.log(row["D"] / D_T)]
        if ap != "mono_1stage":
            u.append(math.log(row["r"]))
        if ap == "multi_2stage":
            u.append(0.0 if row["r"] >= 1 else (row["r_f"] - row["r"]) / (1 - row["r"]))
        fn = _recipe_fn(draws.law, ap, mean_over_draws=False)
        Ls = np.asarray(fn({k: jnp.asarray(v) for k, v in draws.params.items()},
                           jnp.full((S, 1), float(C)), jnp.full((S, 1), float(D_T)),
                           jnp.broadcast_to(jnp.asarray(u), (S, 1, len(u))), 0.0, np.inf))[:, 0]
        row["loss_lower"], row["loss_upper"] = (float(np.quantile(Ls, a)), float(np.quantile(Ls, 1 - a)))
        if S > 1:
            pd_ = _optimise(draws, C, D_T, ap, per_draw=True, k_bounds=k_bounds, r_bounds=r_bounds,
                            M_bounds=M_bounds)
            per[ap] = pd_["loss"][:, 0]
            for k in ("M", "k", "r", "r_f", "D"):
                row[f"{k}_lower"] = float(np.quantile(pd_[k][:, 0], a))
                row[f"{k}_upper"] = float(np.quantile(pd_[k][:, 0], 1 - a))
            row["loss_opt_lower"] = float(np.quantile(pd_["loss"][:, 0], a))
            row["loss_opt_upper"] = float(np.quantile(pd_["loss"][:, 0], 1 - a))
        rows.append(row)
    table = pd.DataFrame(rows)
    best = use[int(_winner(table["loss"].to_numpy()[:, None], use)[0])]
    if S > 1:
        L = np.stack([per[ap] for ap in use])
        win = _winner(L, use)
        table["p_best"] = [float(np.mean(win == i)) for i in range(len(use))]
    else:
        table["p_best"] = [1.0 if ap == best else 0.0 for ap in use]
    return Recipe(C=float(C), D_T=float(D_T), table=table, best=best, n_draws=S, interval=interval,
                  law=draws.law.name)


def recipe_grid(fit_or_posterior, *, C, D_T, approaches=APPROACHES, k_bounds=(1e-6, 1e4),
                r_bounds=(1e-3, 1.0), M_bounds=None, max_draws: int | None = 1000) -> pd.DataFrame:
    """:func:`recipe`'s decision for many cells at once (``C``, ``D_T`` broadcast together).

    Vectorised over cells; for a posterior the decision minimises the posterior expected loss (no
    per-draw intervals: call :func:`recipe` on the cells of interest for those). Returns a long
    DataFrame: one row per (cell, approach) with ``C``, ``D_T``, ``approach``, ``loss``, ``M``,
    ``k``, ``r``, ``r_f``, ``D``, ``at_bound``, and ``best`` (bool: the cell's best approach).
    """
    Cb, Db = np.broadcast_arrays(np.asarray(C, float), np.asarray(D_T, float))
    Cb, Db = Cb.ravel(), Db.ravel()
    _check_recipe_args(Cb, Db, approaches, k_bounds, r_bounds)
    draws = as_draws(fit_or_posterior, max_draws)
    use = _law_approaches(draws.law, approaches)
    if not use:
        raise BayesScalingError(f"law {draws.law.name} cannot express any of {approaches}")
    frames = []
    for ap in use:
        out = _optimise(draws, Cb, Db, ap, per_draw=False, k_bounds=k_bounds, r_bounds=r_bounds,
                        M_bounds=M_bounds)
        f = pd.DataFrame({"cell": np.arange(Cb.size), "C": Cb, "D_T": Db, "approach": ap, **out})
        frames.append(f)
    df = pd.concat(frames, ignore_index=True)
    L = np.stack([f["loss"].to_numpy() for f in frames])
    win = _winner(L, use)
    df["best"] = np.concatenate([win == i for i in range(len(use))])
    return df
