"""MSPE: the expected reduction of the mean squared prediction error at the target rows, over the
modes of a multi-start fit (Li et al. 2026, arXiv 2604.22753, Section 4; docs/design.md, "mspe").

After a multi-start least-squares fit of the runs bought, the starts whose SSE is within 1.5 times
the best are grouped into modes ``k`` (starts whose target forecasts agree), each with a weight
``w_k``, its forecasts ``f_k`` at the target rows and a Laplace covariance
``S_k = (J_k' J_k / s2 + P0)^-1`` of the parameters (positive parameters in log coordinates,
``P0`` the prior precision of a quarter of each (log-)range, ``s2`` the noise estimate). The
mean squared prediction error at the targets is

    MSPE = sum_k w_k tr(J_t,k S_k J_t,k')  +  sum_k w_k |f_k - f_bar|^2        (intra + inter),

``f_bar = sum_k w_k f_k``. Observing a run ``x`` (``y = f_k(x) + eps`` under mode ``k``) lowers:

- the intra term by ``sum_k w_k |J_t,k S_k j_k(x)|^2 / v_k(x)``, ``v_k(x) = s2 + j_k' S_k j_k``
  (each mode's linear-Gaussian update: the V-optimal reduction);
- the inter term by ``V_inter - E_y[V_inter(y)]``: given ``y`` each mode's weight becomes
  ``w_k(y) ~ w_k N(y; f_k(x), v_k(x))`` and its target forecasts ``f_k + g_k (y - f_k(x))`` with
  the gain ``g_k = J_t,k S_k j_k(x) / v_k(x)``; ``y`` is drawn from the modes' predictive mixture
  and the expectation taken on a grid of ``y`` spanning every mode's predictive.

A run's score is the sum of the two reductions over ``(cost / C)^0.4``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..laws import Law
from .fitting import Starts, jacobian_theta, predictor

GOOD_SSE = 1.5  # starts within this factor of the best SSE take part in the modes
MAX_MODES = 8
COST_POWER = 0.4
GRID = 512  # points of the grid over the next observation


def noise_variance(sse: float, n: int, pool_y) -> float:
    """``s2 = (2 Var(y_pool) + SSE / 2) / (n / 2 + 1)``: the posterior mean of the noise variance
    under an inverse-gamma prior of shape 2 and scale 2 Var(y_pool), ``n`` runs bought."""
    return (2.0 * float(np.var(pool_y)) + 0.5 * sse) / (0.5 * n + 1.0)


def prior_sd(law: Law) -> np.ndarray:
    """A quarter of each parameter's log-range (positive lower bound) or range (otherwise)."""
    lo = np.array([p.lower for p in law.params])
    hi = np.array([p.upper for p in law.params])
    pos = lo > 0
    return np.where(pos, np.log(np.where(pos, hi / np.where(pos, lo, 1.0), 1.0)) / 4,
                    (hi - lo) / 4)


@dataclass
class Modes:
    """The modes of a fit at the candidate and target rows (``K`` modes, ``P`` parameters)."""

    weights: np.ndarray  # (K,)
    f_target: np.ndarray  # (K, T) forecasts at the target rows
    f_cand: np.ndarray  # (K, N) predictions at the candidate rows
    J_target: np.ndarray  # (K, T, P)
    J_cand: np.ndarray  # (K, N, P)
    cov: np.ndarray  # (K, P, P)
    s2: float

    def mspe(self) -> tuple[float, float]:
        """``(intra, inter)`` terms of the current MSPE at the targets."""
        intra = sum(w * np.einsum("tp,pq,tq->", J, S, J)
                    for w, J, S in zip(self.weights, self.J_target, self.cov))
        fbar = self.weights @ self.f_target
        inter = float(self.weights @ np.sum((self.f_target - fbar) ** 2, axis=1))
        return float(intra), inter


def modes(law: Law, starts: Starts, x_obs: dict, y_obs, pool_y, x_cand: dict,
          x_target: dict) -> Modes:
    """Group the good starts of ``starts`` (a fit to ``(x_obs, y_obs)``) into modes and build each
    mode's Laplace covariance. Two starts are one mode when their target forecasts differ
    nowhere by more than 1e-3 of the pool targets' standard deviation; a mode weighs
    ``exp(-(SSE_k - SSE_min) / (2 s2))`` (its best start's SSE); at most :data:`MAX_MODES`, best
    SSE first. A group with no target rows has one mode (nothing tells its starts apart)."""
    ok = np.isfinite(starts.sse)
    best = float(starts.sse[ok].min())
    order = [i for i in np.argsort(np.where(ok, starts.sse, np.inf))
             if ok[i] and starts.sse[i] <= GOOD_SSE * best + 1e-300]
    n = len(np.asarray(y_obs))
    s2 = noise_variance(best, n, pool_y)
    tol = 1e-3 * max(float(np.std(pool_y)), 1e-300)
    kept, ft = [], []
    preds = np.asarray(predictor(law)(starts.theta[order], x_target))
    for i, p in zip(order, preds):
        if not np.all(np.isfinite(p)) or any(np.max(np.abs(p - q), initial=0.0) < tol for q in ft):
            continue
        kept.append(i)
        ft.append(p)
        if len(kept) == MAX_MODES:
            break
    if not kept:  # no good start forecasts finite values: the best start alone
        kept = [order[0]]
        ft = [np.nan_to_num(preds[0])]
    lo = np.array([p.lower for p in law.params])
    pos = lo > 0
    P0 = np.diag(1.0 / prior_sd(law) ** 2)
    fc, Jt, Jc, covs = [], [], [], []
    for i in kept:
        theta = starts.theta[i]
        scale = np.where(pos, theta, 1.0)  # d/d log(theta) for positive parameters
        f_c, J_c = _jac(law, theta, x_cand)
        _, J_t = _jac(law, theta, x_target)
        _, J_o = _jac(law, theta, x_obs)
        J_o = J_o * scale
        H = J_o.T @ J_o / s2 + P0
        w, V = np.linalg.eigh(H)
        covs.append((V / np.maximum(w, max(1e-10 * w[-1], 1e-30))) @ V.T)
        fc.append(f_c)
        Jt.append(J_t * scale)
        Jc.append(J_c * scale)
    sse = starts.sse[kept]
    logw = -(sse - sse.min()) / (2.0 * s2)
    w = np.exp(logw - logw.max())
    return Modes(w / w.sum(), np.array(ft), np.array(fc), np.array(Jt), np.array(Jc),
                 np.array(covs), s2)


def _jac(law, theta, x):
    f, J = jacobian_theta(law)(theta, x)
    return (np.nan_to_num(np.asarray(f)),
            np.nan_to_num(np.asarray(J), nan=0.0, posinf=0.0, neginf=0.0))


def reductions(m: Modes) -> tuple[np.ndarray, np.ndarray]:
    """``(intra, inter)``: the expected reduction of each MSPE term by observing each candidate
    row (arrays over the candidates; the module docstring gives the formulas)."""
    K = len(m.weights)
    # Per mode: S j_c (K, N, P), v = s2 + j' S j (K, N), cross = J_t S j_c (K, T, N)
    Sj = np.einsum("kpq,knq->knp", m.cov, m.J_cand)
    v = m.s2 + np.maximum(np.einsum("knp,knp->kn", m.J_cand, Sj), 0.0)
    cross = np.einsum("ktp,knp->ktn", m.J_target, Sj)
    intra = np.einsum("k,kn->n", m.weights, np.sum(cross ** 2, axis=1) / v)
    if K == 1:
        return intra, np.zeros_like(intra)
    g = cross / v[:, None, :]  # (K, T, N) gains
    a = m.f_target[:, :, None] - g * m.f_cand[:, None, :]  # target forecast at y = 0
    # Pairwise: |f_k(y) - f_l(y)|^2 = A_kl + 2 B_kl y + C_kl y^2 for each candidate.
    da = a[:, None] - a[None, :]  # (K, K, T, N)
    dg = g[:, None] - g[None, :]
    A = np.einsum("kltn,kltn->kln", da, da)
    B = np.einsum("kltn,kltn->kln", da, dg)
    C = np.einsum("kltn,kltn->kln", dg, dg)
    # y on a grid spanning every mode's predictive N(f_k(x), v_k(x)) to +-8 sd, weighted by the
    # mixture's density (a fine grid: the modes' weights can switch sharply within one sd).
    sd = np.sqrt(v)
    lo = np.min(m.f_cand - 8 * sd, axis=0)
    hi = np.max(m.f_cand + 8 * sd, axis=0)
    y = lo + (hi - lo) * np.linspace(0.0, 1.0, GRID)[:, None]  # (G, N)
    # log of w_l N(y; f_l(x), v_l(x)) at each node: (G, L, N)
    logp = (np.log(m.weights)[None, :, None] - 0.5 * np.log(2 * np.pi * v)[None]
            - 0.5 * (y[:, None, :] - m.f_cand[None]) ** 2 / v[None])
    top = logp.max(axis=1, keepdims=True)
    p = np.exp(logp - top)
    dens = p.sum(axis=1) * np.exp(top[:, 0])  # mixture density (G, N)
    W = p / p.sum(axis=1, keepdims=True)  # weights after y
    after = 0.5 * (np.einsum("gkn,gln,kln->gn", W, W, A, optimize=True)
                   + 2 * y * np.einsum("gkn,gln,kln->gn", W, W, B, optimize=True)
                   + y ** 2 * np.einsum("gkn,gln,kln->gn", W, W, C, optimize=True))
    expected = np.sum(dens * after, axis=0) / np.sum(dens, axis=0)
    fbar = m.weights @ m.f_target
    before = float(m.weights @ np.sum((m.f_target - fbar) ** 2, axis=1))
    return intra, before - expected


def scores(m: Modes, cost, total: float, cost_power: float = COST_POWER) -> np.ndarray:
    """Each candidate's MSPE reduction (intra + inter) over ``(cost / total)^cost_power``."""
    intra, inter = reductions(m)
    s = (intra + inter) / np.maximum(np.asarray(cost) / total, 1e-300) ** cost_power
    return np.where(np.isfinite(s), s, -np.inf)
