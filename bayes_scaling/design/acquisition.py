"""The acquisition of every model-based purchase in the project: greedy expected reduction of the
target forecasts' uncertainty per unit cost (docs/design.md, "bayes").

Front ends: the ``bayes`` method of :mod:`.methods` (:func:`greedy_refit` by default,
:func:`greedy_linear` on the Laplace-mixture posterior's covariance with
``criterion="posterior"``) and :func:`bayes_scaling.anchors.select` (:func:`greedy_linear` on the
covariance of the log forecasts of a fitted posterior's draws).

- :func:`greedy_refit`: the expected squared error at the targets of the least-squares refit of a
  misspecified law (:func:`refit_error`), the quantity the ScaleBench protocol scores.

- :func:`greedy_linear`: ``C`` is the joint covariance of the target rows (first ``nt`` rows)
  and the candidates (the rest). Observing candidate ``c`` with noise variance ``s_c^2`` updates
  ``C <- C - C[:, c] C[c, :] / (C[c, c] + s_c^2)`` whatever its outcome (the Gaussian, or
  linearised, posterior), so the expected reduction of the weighted target variance is
  ``R(c) = sum_t w_t C[t, c]^2 / (C[c, c] + s_c^2)``; with ``criterion="entropy"`` it is the
  expected information gain about the targets, ``-1/2 log(1 - v_c' C_TT^-1 v_c / (C[c, c] +
  s_c^2))`` (matrix determinant lemma, ``v_c = C[T, c]``).
- :func:`greedy_importance`: the same variance criterion without the Gaussian assumption, by
  re-weighting posterior draws with simulated outcomes.

Both buy, one at a time, the affordable candidate maximising ``gain_c / cost_c^p`` (``p = 1``:
per unit cost; ``p = 0``: the gain alone) and condition on it before the next pick.
:func:`best_rule` runs both and keeps the sequence with the lower final criterion: the ratio rule
alone can spend the budget on many cheap, individually efficient runs and miss one expensive run
worth more, and taking the better of the two is what gives cost-aware greedy selection its
guarantee for submodular criteria (Krause & Guestrin 2005; Leskovec et al. 2007).
"""
from __future__ import annotations

import numpy as np

__all__ = ["RULES", "best_rule", "greedy_importance", "greedy_linear", "kept_rule"]

#: Cost power ``p`` of each greedy rule (``"half"``: an alternative plan the rehearsal of
#: ``bayes`` weighs against the other two).
RULES = {"ratio": 1.0, "gain": 0.0, "half": 0.5}


def best_rule(run, rules=("ratio", "gain")):
    """``run(cost_power) -> (picks, values, v0, ...)`` for each rule; returns the rule whose
    sequence ends with the lower criterion (the ratio rule on a tie), its result, and the final
    criterion of every rule."""
    runs = {r: run(RULES[r]) for r in rules}
    rule, final = kept_rule(runs)
    return rule, runs[rule], final


def kept_rule(runs: dict):
    """The rule whose plan (``runs``: rule -> ``(picks, values, v0, ...)``) ends with the lower
    criterion (the ratio rule on a tie), and every rule's final criterion."""
    final = {r: (v[1][-1] if v[1] else v[2]) for r, v in runs.items()}
    return min(final, key=lambda r: (final[r], r != "ratio")), final


def _affordable(avail, cost, room):
    return avail & (cost <= room * (1 + 1e-12))


def greedy_linear(C, nt: int, noise_var, cost, room: float, *, criterion: str = "variance",
                  weights=None, cost_power: float = 1.0, max_picks: int | None = None):
    """Greedy picks among the candidates (rows ``nt:`` of ``C``) within the budget ``room``.

    Args:
        C: joint covariance, target rows first: (nt + n_c, nt + n_c).
        nt: number of target rows.
        noise_var: observation noise variance, a number or one per candidate.
        cost: cost of each candidate (n_c,), positive.
        room: budget left.
        criterion: ``"variance"`` (weighted sum of target variances) or ``"entropy"``
            (1/2 log det of the target covariance).
        weights: target weights of the variance criterion (default 1 each).
        cost_power: ``p`` of the score ``gain / cost^p``.
        max_picks: stop after this many picks (default: when the budget or the gains run out).

    Returns:
        ``(picks, values, v0)``: candidate indices (0-based among the candidates) in order, the
        criterion after each pick and before the first.
    """
    C = np.array(C, dtype=float)
    n_c = len(C) - nt
    cost = np.asarray(cost, float)
    s2 = np.broadcast_to(np.asarray(noise_var, float), (n_c,))
    w = np.ones(nt) if weights is None else np.asarray(weights, float)
    T, Cd = np.arange(nt), nt + np.arange(n_c)
    jitter = 1e-10 * max(np.trace(C[:nt, :nt]) / max(nt, 1), 1e-300)

    def value(M):
        if criterion == "variance":
            return float(np.sum(w * np.diag(M)[:nt]))
        return 0.5 * np.linalg.slogdet(M[np.ix_(T, T)] + jitter * np.eye(nt))[1]

    v0 = value(C)
    avail = np.ones(n_c, bool)
    picks, values = [], []
    while max_picks is None or len(picks) < max_picks:
        ok = _affordable(avail, cost, room)
        if not ok.any():
            break
        V = C[np.ix_(T, Cd)]
        denom = np.diag(C)[Cd] + s2
        if criterion == "variance":
            gain = (w[:, None] * V ** 2).sum(0) / denom
        else:
            Wm = np.linalg.solve(C[np.ix_(T, T)] + jitter * np.eye(nt), V)
            gain = -0.5 * np.log1p(-np.clip((V * Wm).sum(0) / denom, 0.0, 1.0 - 1e-15))
        score = np.where(ok & np.isfinite(gain), gain / cost ** cost_power, -np.inf)
        c = int(np.argmax(score))
        if not (score[c] > 0):
            break
        col = C[:, nt + c].copy()
        C -= np.outer(col, col) / (col[nt + c] + s2[c])
        picks.append(c)
        values.append(value(C))
        avail[c] = False
        room -= cost[c]
    return picks, values, v0


def _weighted_target_var(LW, Ft, w):
    """mean_j sum_t w_t Var_{softmax(LW_j)}(Ft[:, t]) and the mean ESS; LW (..., J, S)."""
    LW = LW - LW.max(axis=-1, keepdims=True)
    W = np.exp(LW)
    W /= W.sum(axis=-1, keepdims=True)
    m1 = W @ Ft
    m2 = W @ (Ft ** 2)
    var = np.maximum(m2 - m1 ** 2, 0.0)
    ess = 1.0 / np.sum(W ** 2, axis=-1)
    return (var @ w).mean(axis=-1), ess.mean(axis=-1)


def greedy_importance(Fc, Ft, noise_var, cost, room: float, *, weights=None,
                      cost_power: float = 1.0, n_sim: int = 256, seed: int = 0, chunk: int = 8):
    """Greedy picks by the variance criterion from draws, without a Gaussian assumption.

    ``Fc`` (S, n_c) and ``Ft`` (S, nt) are the draws' values at the candidates and the targets.
    ``n_sim`` draws serve as pseudo-truths ``j`` with simulated outcomes ``y_jc = Fc[j, c] +
    s_c eps``; after observing a set A the posterior is the draws re-weighted by ``prod_{c in A}
    N(y_jc; Fc[s, c], s_c^2)`` (the pseudo-truth's own draw left out), and the criterion is the
    weighted target variance averaged over ``j``.

    Returns:
        ``(picks, values, v0, ess)``: as :func:`greedy_linear`, plus the mean effective sample
        size of the weights after each pick.
    """
    S, n_c = Fc.shape
    cost = np.asarray(cost, float)
    s2 = np.broadcast_to(np.asarray(noise_var, float), (n_c,))
    w = np.ones(Ft.shape[1]) if weights is None else np.asarray(weights, float)
    rng = np.random.default_rng(seed)
    J = min(int(n_sim), S)
    truth = rng.choice(S, size=J, replace=False)
    Y = Fc[truth] + np.sqrt(s2)[None, :] * rng.standard_normal((J, n_c))
    Ft_c = Ft - Ft.mean(axis=0)  # centring keeps m2 - m1^2 accurate
    LW = np.zeros((J, S))
    LW[np.arange(J), truth] = -np.inf
    cur = v0 = float(_weighted_target_var(LW, Ft_c, w)[0])
    avail = np.ones(n_c, bool)
    picks, values, esss = [], [], []
    while True:
        ok = _affordable(avail, cost, room)
        if not ok.any():
            break
        cand = np.flatnonzero(ok)
        vals = np.full(n_c, np.inf)
        ess_c = np.zeros(n_c)
        for s in range(0, cand.size, chunk):  # loop over candidate chunks, not draws
            cc = cand[s:s + chunk]
            ll = -0.5 * (Y[:, cc].T[:, :, None] - Fc[:, cc].T[:, None, :]) ** 2 / s2[cc, None, None]
            vals[cc], ess_c[cc] = _weighted_target_var(LW[None] + ll, Ft_c, w)
        gain = cur - vals
        score = np.where(ok, gain / cost ** cost_power, -np.inf)
        c = int(np.argmax(score))
        if not (gain[c] > 0):
            break
        LW = LW - 0.5 * (Y[:, c][:, None] - Fc[:, c][None, :]) ** 2 / s2[c]
        picks.append(c)
        values.append(float(vals[c]))
        esss.append(float(ess_c[c]))
        cur = float(vals[c])
        avail[c] = False
        room -= cost[c]
    return picks, values, v0, esss


def refit_error(J, S, obs, nt: int, K, noise_var: float) -> float:
    """Expected summed squared error at the targets of the regularised least-squares refit of the
    law, linearised at one mode, when the truth is the law plus a discrepancy (docs/design.md,
    "the refit's error").

    The refit's estimate is ``u_hat = S J_O' y_O / s2`` with ``S = (J_O' J_O / s2 + L)^-1``; with
    ``y_O = J_O u + delta_O + eps``, ``u`` from the prior of precision ``L``, ``delta ~ N(0, K)``,
    its error at target ``t`` is ``J_t (u_hat - u) - delta_t``, of expected square

        J_t S J_t'  +  K_tt - 2 g_t' K_Ot + g_t' K_OO g_t,      g_t = J_O S J_t' / s2.

    Args:
        J: Jacobian of the law at the mode over every row, targets first (rows, P).
        S: ``(J_O' J_O / s2 + L)^-1`` for the observed rows ``obs`` (indices into the rows).
        K: prior covariance of the discrepancy over every row.
    """
    Jt, Jo = J[:nt], J[obs]
    A = Jt @ S  # (nt, P)
    G = A @ Jo.T / noise_var  # (nt, n): the refit's weights on the observed runs
    disc = (np.trace(K[:nt, :nt]) - 2 * np.sum(G * K[np.ix_(np.arange(nt), obs)])
            + np.sum((G @ K[np.ix_(obs, obs)]) * G))
    return float(np.sum(A * Jt) + disc)


def greedy_refit(modes, nt: int, obs, cand, K, noise_var: float, cost, room: float, *,
                 spread=None, cost_power: float = 1.0, max_picks: int | None = None):
    """Greedy picks minimising the expected target error of the least-squares refit
    (:func:`refit_error`, averaged over the posterior's modes) per unit cost.

    Buying run ``c`` updates each mode's ``S`` by ``S - v v' / d`` (``v = S j_c``, ``d = s2 +
    j_c' v``) and adds ``c`` to the observed rows; the gain is the drop of the expected error.
    With ``spread``, a factor ``F`` of the covariance of the modes' predictions over the rows
    (``D = F F' = sum_m w_m (mu_m - mu)(mu_m - mu)'``), the error adds the target trace of ``D``,
    conditioned on each run bought as in :func:`greedy_linear`: a run the modes disagree on,
    where they disagree at the targets too, tells the refit which mode to land in. A run can
    *raise* the error (a run far from the targets pulls a misspecified law away from them): the
    greedy stops when no affordable run lowers it.

    Every candidate's error is evaluated through the parameter space (:class:`_RefitMode`): a
    step costs ``O(candidates x targets x parameters)`` per mode, whatever the number of runs
    bought, and ``D`` is kept as ``F M F'`` with a small ``M``.

    Args:
        modes: ``[(weight, J, S), ...]``: each mode's weight, its Jacobian over every row (targets
            first, then the pool) and ``S`` for the observed rows.
        nt: number of target rows; ``obs`` and ``cand``: row indices of the observed runs and the
            candidates (``cand`` in the order of ``cost``).
        K: prior covariance of the discrepancy over every row.
        spread: ``F`` (rows, r) with ``F F'`` the covariance of the modes' predictions over every
            row, or None.
        noise_var, cost, room, cost_power, max_picks: as :func:`greedy_linear`.

    Returns:
        ``(picks, values, v0)``: positions in ``cand`` in order, the expected error after each
        pick and before the first.
    """
    cand = np.asarray(cand, int)
    cost = np.asarray(cost, float)
    K = np.asarray(K, float)
    states = [(w, _RefitMode(J, S, obs, nt, K, noise_var)) for w, J, S in modes]
    F = None if spread is None else np.asarray(spread, float)
    M = None if F is None else np.eye(F.shape[1])
    trK = float(np.trace(K[:nt, :nt]))

    def spread_trace(M):
        return 0.0 if F is None else float(np.sum((F[:nt] @ M) * F[:nt]))

    cur = v0 = sum(w * st.error(trK) for w, st in states) + spread_trace(M)
    avail = np.ones(len(cand), bool)
    picks, values = [], []
    while max_picks is None or len(picks) < max_picks:
        ok = _affordable(avail, cost, room)
        if not ok.any():
            break
        c_idx = cand[ok]
        err = sum(w * st.errors_after(c_idx, trK) for w, st in states)
        if F is not None:
            FcM = F[c_idx] @ M
            err = err + spread_trace(M) - np.sum((FcM @ F[:nt].T) ** 2, 1) / (
                np.sum(FcM * F[c_idx], 1) + noise_var)
        gain = cur - err
        score = np.where(np.isfinite(gain), gain / cost[ok] ** cost_power, -np.inf)
        j = int(np.argmax(score))
        if not (score[j] > 0):
            break
        c = int(np.flatnonzero(ok)[j])
        for _, st in states:
            st.buy(int(cand[c]))
        if F is not None:
            Mf = M @ F[cand[c]]
            M = M - np.outer(Mf, Mf) / (F[cand[c]] @ Mf + noise_var)
        picks.append(c)
        cur = float(err[j])
        values.append(cur)
        avail[c] = False
        room -= cost[c]
    return picks, values, v0


class _RefitMode:
    """One mode of :func:`greedy_refit` in the parameter space: with the refit's weights
    ``A = S J_T' / s2`` on the parameters, ``Q = K_{., O} J_O`` and ``G = J_O' K_OO J_O``, the
    error of :func:`refit_error` is ``tr(J_T S J_T') + tr K_TT - 2 <A, Q_T'> + tr(A' G A)``, and
    buying run ``c`` changes ``S`` by a rank-one term, ``Q`` by ``K_{., c} j_c'`` and ``G`` by
    ``j_c q_c' + q_c j_c' + K_cc j_c j_c'`` (``q_c = Q_c``); every candidate's error after its
    purchase follows in closed form."""

    def __init__(self, J, S, obs, nt, K, s2):
        self.J, self.S = np.asarray(J, float), np.array(S, float)
        self.K, self.nt, self.s2 = K, nt, s2
        o = np.asarray(obs, int)
        self.Q = K[:, o] @ self.J[o]
        self.G = self.J[o].T @ self.Q[o]

    def error(self, trK: float) -> float:
        Jt = self.J[:self.nt]
        A = self.S @ Jt.T / self.s2
        return float(np.sum((Jt @ self.S) * Jt) + trK - 2 * np.sum(A * self.Q[:self.nt].T)
                     + np.sum(A * (self.G @ A)))

    def errors_after(self, c_idx, trK: float) -> np.ndarray:
        """The error after buying each candidate row of ``c_idx`` alone."""
        nt, s2, S, G = self.nt, self.s2, self.S, self.G
        Jt, Jc, Qt, Qc = self.J[:nt], self.J[c_idx], self.Q[:nt], self.Q[c_idx]
        ktc, kcc = self.K[np.ix_(c_idx, np.arange(nt))], self.K[c_idx, c_idx]
        A = S @ Jt.T / s2  # (P, nt)
        V = Jc @ S  # v_c' = j_c' S
        jv = np.sum(V * Jc, 1)
        d = s2 + jv
        JtV = V @ Jt.T  # (nc, nt): J_T v_c
        alpha = JtV / (d * s2)[:, None]  # after the purchase the weights are A - v_c alpha_c'
        var = np.sum((Jt @ S) * Jt) - np.sum(JtV ** 2, 1) / d
        jA, qA, Aa = Jc @ A, Qc @ A, alpha @ A.T  # j_c' A, q_c' A, (A alpha_c)'
        lin = (np.sum(A * Qt.T) + np.sum(jA * ktc, 1) - np.sum((V @ Qt.T) * alpha, 1)
               - jv * np.sum(alpha * ktc, 1))
        vq, aj, aq = np.sum(V * Qc, 1), np.sum(Aa * Jc, 1), np.sum(Aa * Qc, 1)
        quad_a = np.sum(A * (G @ A)) + 2 * np.sum(jA * qA, 1) + kcc * np.sum(jA ** 2, 1)
        cross = np.sum(Aa * (V @ G), 1) + aj * vq + aq * jv + kcc * aj * jv
        vgv = np.sum((V @ G) * V, 1) + 2 * jv * vq + kcc * jv ** 2
        quad = quad_a - 2 * cross + vgv * np.sum(alpha ** 2, 1)
        return var + trK - 2 * lin + quad

    def buy(self, c: int):
        j = self.J[c]
        v = self.S @ j
        self.S = self.S - np.outer(v, v) / (self.s2 + j @ v)
        q = self.Q[c].copy()
        self.G = self.G + np.outer(j, q) + np.outer(q, j) + self.K[c, c] * np.outer(j, j)
        self.Q = self.Q + np.outer(self.K[:, c], j)
