"""The M3 recipe optimiser (Akimoto et al., *M3 Scaling Law*, Section 4 and Appendix D.6-D.7).

For a compute budget ``C = M D`` (M: non-embedding FLOPs per token, D = k D_T / r: total tokens, M3
Eq. 24) and a target corpus of ``D_T`` tokens, the loss-minimising model scale, epochs, average
target-language ratio and final-stage ratio within each approach (mono 1-stage, multi 1-stage,
multi 2-stage), and the best approach (:func:`recipe`, :func:`recipe_grid`).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..errors import BayesScalingError
from ..laws import Law
from ..programs import Programs
from ..bayes.predictive import ParamDraws, as_draws, law_inputs
from .result import json_default

__all__ = ["APPROACHES", "Recipe", "chinchilla_optimal", "pattern_search", "recipe",
           "recipe_columns", "recipe_grid", "search_box"]

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


def recipe_columns(u, approach, C, D_T):
    """Decision vector -> recipe columns.

    ``u`` (..., d) = (log(D / D_T) [, log r]) for the one-stage approaches and
    (log(D / D_T), log r_f, log(r / r_f)) for multi 2-stage: total tokens relative to the corpus,
    the ratios; then ``k = r D / D_T`` (M3 Eq. 24) and ``M = C / D``. Searching in D rather than k
    removes the k-r valley (at fixed D, trading k against r only changes the repetition terms).
    Every coordinate moves the loss everywhere: mono 1-stage is the corner r_f = r/r_f = 1, from
    which both a lower r (at r_f = 1) and a lower r_f are one step away. (A coordinate such as
    ``(r_f - r) / (1 - r)`` has no effect at r = 1, which makes r = 1 a false local minimum.)

    ``k < 1`` means training once on the first ``k D_T`` tokens of the corpus (a subset): it is
    evaluated as ``k = 1`` on a corpus of ``k D_T`` tokens, so a data-rich corpus (D_T > D*(C))
    gets the single-epoch Chinchilla optimum.
    """
    D_rel = jnp.exp(u[..., 0])
    if approach == "mono_1stage":
        r = jnp.ones_like(D_rel)
        r_f = r
    elif approach == "multi_1stage":
        r = jnp.exp(u[..., 1])
        r_f = r
    else:
        r_f = jnp.exp(u[..., 1])
        r = jnp.exp(u[..., 1] + u[..., 2])
    k = r * D_rel
    D = D_rel * D_T
    M = C / D
    k_eff = jnp.maximum(k, 1.0)
    DT_eff = D_T * jnp.minimum(k, 1.0)
    r1 = r if approach != "multi_2stage" else jnp.zeros_like(r)
    return {"M": M, "D": D, "D_T": DT_eff, "k": k_eff, "r": r, "r_f": r_f, "r1": r1,
            "k_nominal": k}


def _recipe_inputs(law: Law, cols):
    return law_inputs(law, cols, where="a recipe (it sets M, D, D_T, k, r, r_f, r1)",
                      fix="use a law on those columns, e.g. 'm3' or 'chinchilla_m3'")


_RECIPE_FNS = Programs(8, "recipes")


def _recipe_fn(law: Law, approach: str, mean_over_draws: bool):
    """jit(params, C (B, 1), D_T (B, 1), u (B, P, d), M, k and r bounds) -> loss (B, P); +inf
    outside the bounds."""
    key = (law.fn, tuple(sorted(law.column_map.items())), tuple(law.variables), approach,
           mean_over_draws)

    def build():
        def f(params, C, D_T, u, m_lo, m_hi, k_lo=0.0, k_hi=jnp.inf, r_lo=0.0, r_hi=1.0):
            cols = recipe_columns(u, approach, C, D_T)
            if mean_over_draws:  # params (S, 1, 1) against (1, P): expected loss over draws
                cols = {k: v[None] for k, v in cols.items()}
                p = {k: v[:, None, None] for k, v in params.items()}
            else:  # params (B,) matched with rows (B, P)
                p = {k: v[:, None] for k, v in params.items()}
            L = law.fn(p, _recipe_inputs(law, cols))
            M, k, r = cols["M"], cols["k_nominal"], cols["r"]
            bad = (~jnp.isfinite(L) | (M < m_lo) | (M > m_hi) | (k < k_lo * (1 - 1e-12))
                   | (k > k_hi * (1 + 1e-12)) | (r < r_lo * (1 - 1e-12))
                   | (r > r_hi * (1 + 1e-12)))
            L = jnp.where(bad, jnp.inf, L)
            return jnp.mean(L, axis=0) if mean_over_draws else L

        return jax.jit(f)

    return _RECIPE_FNS.get(key, build)


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


def pattern_search(fun, lo, hi, B, g0, g, n_zoom, n_starts=3):
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
            with np.errstate(invalid="ignore"):   # inf - inf where no start is feasible
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


def search_box(approach, k_bounds, r_bounds):
    """Search box of u (:func:`recipe_columns`): D/D_T = k / r spans [k_lo, k_hi / r_lo]; log r
    (one stage) spans log r_bounds; log r_f spans [log r_lo, 0] and log(r / r_f) [log r_lo, 0] (two
    stages; the corner where r < r_lo is outside the bounds: +inf)."""
    lo = [math.log(k_bounds[0])]
    hi = [math.log(k_bounds[1]) - (0.0 if approach == "mono_1stage" else math.log(r_bounds[0]))]
    if approach == "multi_1stage":
        lo.append(math.log(r_bounds[0]))
        hi.append(math.log(r_bounds[1]))
    if approach == "multi_2stage":
        lo += [math.log(r_bounds[0])] * 2
        hi += [0.0, 0.0]
    return np.array(lo), np.array(hi)


def _optimise(draws: ParamDraws, C, D_T, approach, *, per_draw, k_bounds, r_bounds, M_bounds,
              chunk=256):
    """Optimal settings for every (cell [, draw]): per-draw optima or the expected-loss decision.

    Returns a dict of arrays shaped (cells,) (decision) or (S, cells) (per draw).
    """
    C = np.atleast_1d(np.asarray(C, float))
    D_T = np.atleast_1d(np.asarray(D_T, float))
    n_cells = C.size
    lo, hi = search_box(approach, k_bounds, r_bounds)
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
        u, f = pattern_search(lambda uu: fn(pb, Cb, Db, uu, m_lo, m_hi, k_lo, k_hi, *r_bounds),
                              lo, hi, idx_p.size, g0, g, n_zoom)
        us.append(u[: idx.size])
        fs.append(f[: idx.size])
    u = np.concatenate(us)
    f = np.concatenate(fs)
    cols = {k: np.asarray(v) for k, v in recipe_columns(
        jnp.asarray(u), approach, jnp.asarray(C[cells]), jnp.asarray(D_T[cells])).items()}
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
            json.dump(d, fh, indent=1, default=json_default)

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

    The search runs over (log D/D_T, log r) for one stage and (log D/D_T, log r_f, log(r/r_f))
    for two (D: total tokens; every coordinate moves the loss, so mono 1-stage, the corner
    r = r_f = 1, is no false local minimum of the two-stage search): a grid whose lowest local
    minima each start a sequence of zoomed grids, vectorised over draws and cells. The decision
    for a posterior minimises the posterior expected loss; intervals come from the per-draw
    optima.

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
        if ap == "multi_1stage":
            u.append(math.log(row["r"]))
        if ap == "multi_2stage":
            u += [math.log(row["r_f"]), math.log(row["r"] / row["r_f"])]
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
