"""The PTPP paper's adaptation plan (Goffinet et al., *PTPP-Aware Adaptation Scaling Laws*,
Section 4, Figure 2): the smallest adaptation budget and a replay ratio meeting a forgetting and a
target-loss constraint, deterministic or chance-constrained over posterior draws."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from ..data import REPLAY_CLIP
from ..errors import BayesScalingError, DataError
from ..fit import fit_map
from ..bayes.predictive import ParamDraws, order_statistic, predict_draws
from .extrapolation import ExtrapolationError, fitted_replay, outside, ranges
from .result import InfeasiblePlanError, Plan, PlanPoint, parse_forgetting

__all__ = ["REPLAY_CLIP", "PlanProblem", "adaptation", "checkpoint_rows", "pretraining_fit",
           "source_base_loss", "thin_draws"]

SOURCE_BASE_ATPP = 1e9  # "D -> infinity" of the law-based default for L_src,0 (see adaptation)


class PlanProblem:
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


def thin_draws(obj, max_draws):
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
    except DataError as e:
        raise DataError(f"the {which} law cannot be evaluated on plan rows (columns N, D, replay, "
                        f"ptpp): {e}") from None
    return np.where(np.isfinite(out), out, np.inf)


def _ok(prob: PlanProblem, r, D, q):
    """(n, 3) booleans at points (r, D): [both, target, forgetting] constraints hold at quantile q."""
    gt, gs = prob.g(r, D)
    ot = order_statistic(gt, q) <= 0
    os_ = order_statistic(gs, q) <= 0
    return np.stack([ot & os_, ot, os_], -1)


def _min_D(prob: PlanProblem, r, q, D_lo, D_hi, n_grid=33, n_bisect=42):
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


def _base_vec(prob: PlanProblem, S: int) -> np.ndarray:
    """L_src,0 as one value per source draw."""
    b = np.asarray(prob.base, float)
    return np.full(S, float(b)) if b.ndim == 0 else b.ravel()


def _point(prob: PlanProblem, kind, q, r, D, interval, D_lo):
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


def source_base_loss(source, source_base, N, ptpp, D_hi=None, rtol=1e-6):
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
        rows = checkpoint_rows(source_base, N, ptpp, rtol, n_col=source.law.column("N"))
        if rows.empty:
            raise DataError(
                f"no pre-adaptation source rows (D == 0, domain == 'source') at N={N:g}, "
                f"PTPP={ptpp:g} in the source_base table. Pass the checkpoint's measured loss "
                "(source_base=<float>), or a pre-training law fitted to the table's other "
                "checkpoints: source_base=bs.plan.pretraining_fit(table)")
        vals = rows["loss"].to_numpy(float)
        return float(vals.mean()), vals, f"data: mean of {len(vals)} pre-adaptation source row(s)"
    if hasattr(source_base, "law"):
        at = pd.DataFrame({"N": [N], "D": [ptpp * N]})
        v = float(np.median(predict_draws(source_base, at)))
        return v, np.array([v]), (f"pre-training law ({source_base.law.name} in N and PTPP*N) "
                                  f"evaluated at N={N:g}, PTPP={ptpp:g}")
    v = float(source_base)
    if not (math.isfinite(v) and v > 0):
        raise BayesScalingError(f"source_base must be a positive loss, got {source_base!r}")
    return v, np.array([v]), "given"


def checkpoint_rows(table: pd.DataFrame, N=None, ptpp=None, rtol=1e-6,
                    n_col: str = "N") -> pd.DataFrame:
    """The pre-adaptation source rows of ``table`` (``D == 0``, ``ptpp > 0`` and, when the table
    has a ``domain`` column, ``domain == "source"``): pre-training losses of checkpoints; with
    ``N`` and ``ptpp``, only those of that checkpoint (model size read from column ``n_col``)."""
    need = {"loss", "D", n_col, "ptpp"}
    if not need <= set(table.columns):
        raise DataError(f"source_base table needs columns {sorted(need)}; it has "
                        f"{list(table.columns)}")
    m = (table["D"] == 0) & (table["ptpp"] > 0)
    if "domain" in table.columns:
        m &= table["domain"] == "source"
    if N is not None:
        m &= np.isclose(table[n_col], N, rtol=rtol) & np.isclose(table["ptpp"], ptpp, rtol=rtol)
    return table[m]


def pretraining_fit(table: pd.DataFrame, *, delta: float = 0.02, n_starts: int = 32,
                    seed: int = 0, min_rows: int = 6, n_col: str = "N"):
    """A pre-training law for ``L_src,0`` fitted to a table's pre-adaptation source rows.

    Those rows (:func:`checkpoint_rows`) are pre-training losses of checkpoints with N parameters
    trained on PTPP * N tokens, so the Chinchilla law ``L0 = E + A/N^alpha + B/(PTPP N)^beta``
    (Hoffmann et al. 2022; M3 Eq. 2) is fitted to them (Huber on log residuals, ``delta``), with
    the model size read from column ``n_col``. Pass the result as
    ``adaptation(..., source_base=fit)``: it is evaluated at (N, PTPP * N).

    Raises:
        DataError: fewer than ``min_rows`` rows, or fewer than 2 sizes or 2 stages.
    """
    rows = checkpoint_rows(table, n_col=n_col)
    have = sorted({(float(a), float(b)) for a, b in zip(rows[n_col], rows["ptpp"])})
    if len(rows) < min_rows or rows[n_col].nunique() < 2 or rows["ptpp"].nunique() < 2:
        raise DataError(
            "too few pre-adaptation source rows (D == 0, domain == 'source') to fit a pre-training "
            f"law across sizes and stages ({len(rows)} rows at (N, ptpp) = {have[:12]}; need >= "
            f"{min_rows} over >= 2 sizes and >= 2 stages). Pass source_base=<float> instead.")
    t = pd.DataFrame({"N": rows[n_col].to_numpy(float),
                      "D": (rows["ptpp"] * rows[n_col]).to_numpy(float),
                      "loss": rows["loss"].to_numpy(float)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_map("chinchilla", t, delta=delta, n_starts=n_starts, seed=seed)


def adaptation(target, source, *, N: float, ptpp: float, max_forgetting, target_loss: float,
               prob: float | None = None, replay_bounds=None, atpp_bounds=(1e-2, 1e3),
               source_base=None, interval: float = 0.9, max_draws: int | None = None,
               n_replay: int = 41, allow_extrapolation: bool = False) -> Plan:
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

    Extrapolation: a plan whose model size N, tokens D, replay or PTPP lies outside the rows a
    fit was fitted on (known for posteriors and ``ParamDraws`` with ``data_range``; checked on
    the columns each law reads) rests on the law's form alone. By default such a plan is refused
    (:class:`ExtrapolationError`, naming each distance: a factor for N, D and PTPP, a difference
    for replay); with ``allow_extrapolation=True`` it is returned with the distances in
    ``plan.extrapolation`` and labelled in its ``repr``.

    The pre-adaptation source loss ``L_src,0`` (the paper's ``L_src(N, 0, 1, PTPP)``; the law itself
    diverges at D = 0):

    - ``source_base=<float>``: used as given (e.g. the measured loss of the checkpoint);
    - ``source_base=<DataFrame>``: the mean loss of its rows with D == 0 (and ``domain ==
      "source"`` when that column exists) at this N and PTPP (the un-adapted checkpoint);
    - ``source_base=<fit>``: a pre-training law in (N, D) (a ``MapFit``, posterior or
      :class:`ParamDraws`, e.g. :func:`pretraining_fit` of a table whose other checkpoints were
      measured), evaluated at (N, PTPP * N) (median over draws);
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
        replay_bounds, atpp_bounds: the search box; ``replay_bounds=None`` (default) is the
            replay range both fits were fitted on, or [0, 1] when it is not known.
        source_base: see above.
        interval: width of the reported central intervals.
        max_draws: thin ``ParamDraws`` to at most this many draws.
        n_replay: replay grid size of the first pass.
        allow_extrapolation: return (labelled) plans outside the fitted data instead of refusing.

    Returns:
        :class:`Plan`.

    Raises:
        InfeasiblePlanError: nothing in the box meets the constraints; carries the closest plan
            and the thresholds it meets. ExtrapolationError: the plan lies outside the fitted
            data (see above). BayesScalingError/DataError: bad arguments, or a law that reads
            neither replay nor ptpp.
    """
    # --- validate ------------------------------------------------------------------------------
    for name, v in (("N", N), ("ptpp", ptpp), ("target_loss", target_loss)):
        if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) and v > 0):
            raise BayesScalingError(f"{name} must be a positive number, got {v!r}")
    fval, frel = parse_forgetting(max_forgetting)
    for which, fit in (("target", target), ("source", source)):
        law = getattr(fit, "law", None)
        if law is not None and not {"replay", "ptpp"} & {law.column(v) for v in law.variables}:
            raise BayesScalingError(
                f"the {which} law {law.name} reads neither replay nor ptpp, so every adaptation "
                "plan looks the same to it; pass a fit of a law of adaptation runs (e.g. dcpt, "
                "ptpp_gated_floor)")
    rngs = ranges({"target": target, "source": source})
    if replay_bounds is None:
        replay_bounds = fitted_replay(rngs) or (0.0, 1.0)
    r_lo, r_hi = (float(b) for b in replay_bounds)
    if not (0.0 <= r_lo <= r_hi <= 1.0):
        raise BayesScalingError(
            f"replay_bounds must satisfy 0 <= lo <= hi <= 1, got {replay_bounds}")
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

    target, source = thin_draws(target, max_draws), thin_draws(source, max_draws)
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan = _adaptation(target, source, N, ptpp, tau, fval, frel, max_forgetting, prob,
                               r_lo, r_hi, a_lo, a_hi, D_lo, D_hi, source_base, interval,
                               max_draws, n_replay)
            _check_extrapolation(plan, rngs, allow_extrapolation)
            return plan
    finally:
        _reemit_once(caught)


def _check_extrapolation(plan: Plan, rngs: dict, allow: bool) -> None:
    """Label ``plan`` with its distances outside the fitted data; refuse it unless ``allow``."""
    points = (("deterministic", plan.deterministic), ("chance", plan.chance))
    plan.extrapolation = [
        f"{kind} plan: {m}" for kind, p in points if p is not None
        for m in outside({"N": plan.N, "D": p.D, "replay": p.replay, "ptpp": plan.ptpp}, rngs)]
    plan.settings["allow_extrapolation"] = bool(allow)
    if plan.extrapolation:
        plan.settings["extrapolation_intervals"] = (
            "a posterior's draws at points beyond its fitted range include its model-discrepancy "
            "term (rehearsed on its training table; docs/forecasting.md); point fits carry none")
    plan.settings["range_unknown"] = [r for r in ("target", "source") if r not in rngs]
    if plan.extrapolation and not allow:
        raise ExtrapolationError(
            "the plan lies outside the data its laws were fitted on: "
            + "; ".join(plan.extrapolation) + ". Narrow replay_bounds/atpp_bounds to the fitted "
            "range, fit on data that cover the plan, or pass allow_extrapolation=True "
            "(--allow-extrapolation) to accept a plan labelled as extrapolated.",
            plan=plan, distances=plan.extrapolation)


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
    base_vals, base_draws, base_method = source_base_loss(source, source_base, N, ptpp, D_hi)
    problem = PlanProblem(target, source, N, ptpp, tau, fval, frel, base_vals)
    if prob is not None:
        S = min(_safe_predict(problem.target, problem.rows([0.5], [D_lo]), "target").shape[0],
                _safe_predict(problem.source, problem.rows([0.5], [D_lo]), "source").shape[0])
        if S < 2:
            raise BayesScalingError(
                f"a chance-constrained plan (probability {prob}) needs posterior draws, and a "
                "point fit has one draw: give posteriors (bayes-scaling posterior), or plan "
                "without a probability",
                python_hint="use bs.fit_posterior (or ParamDraws), or prob=None")

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


def _closest(prob: PlanProblem, q, r_lo, r_hi, D_lo, D_hi, interval, kind, n=41):
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
