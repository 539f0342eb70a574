"""``greedy_refit`` evaluates each candidate in the parameter space; its picks and values must be
those of the plain greedy that recomputes ``refit_error`` (and conditions the modes' spread) from
scratch for every candidate; the spread enters as the factor of ``LaplaceMixture.spread_factor``."""
import numpy as np
import pytest
from conftest import offset_power_law

from bayes_scaling.design.acquisition import greedy_refit, refit_error
from bayes_scaling.design.fitting import from_unconstrained, to_unconstrained
from bayes_scaling.design.posterior import LaplaceMixture, kernel


def _problem(seed, n_rows=40, nt=5, P=3, n_modes=3):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 3, n_rows))
    x[:nt] = rng.uniform(3.2, 4.0, nt)
    K = 0.2 ** 2 * kernel(x[:, None], x[:, None], length=0.8)
    s2 = 0.03 ** 2
    obs = [nt + 2, nt + 11, nt + 23]
    modes = []
    for m in range(n_modes):
        J = np.stack([x ** k * (1 + 0.3 * m * np.sin(x + k)) for k in range(P)], 1)
        L = np.diag(rng.uniform(0.5, 2.0, P))
        modes.append((1.0 / n_modes, J, np.linalg.inv(J[obs].T @ J[obs] / s2 + L), L))
    F = 0.05 * rng.standard_normal((n_rows, n_modes))
    cand = np.array([i for i in range(nt, n_rows) if i not in obs])
    cost = rng.uniform(0.5, 2.0, len(cand))
    return modes, nt, obs, cand, K, s2, cost, F


def _brute_force(modes, nt, obs, cand, K, s2, cost, room, F, cost_power):
    """The greedy of the definition: every candidate's error recomputed with the run added."""

    def error(o, D):
        e = 0.0
        for w, J, _, L in modes:
            S = np.linalg.inv(J[o].T @ J[o] / s2 + L)
            e += w * refit_error(J, S, o, nt, K, s2)
        return e + np.trace(D[:nt, :nt])

    o, D = list(obs), F @ F.T
    cur = error(o, D)
    avail, picks, values = np.ones(len(cand), bool), [], []
    while True:
        ok = avail & (cost <= room * (1 + 1e-12))
        if not ok.any():
            break
        best, best_score, best_err = None, 0.0, None
        for i in np.flatnonzero(ok):
            c = cand[i]
            Dc = D - np.outer(D[:, c], D[c]) / (D[c, c] + s2)
            err = error(o + [int(c)], Dc)
            score = (cur - err) / cost[i] ** cost_power
            if score > best_score:
                best, best_score, best_err = i, score, err
        if best is None:
            break
        c = cand[best]
        D = D - np.outer(D[:, c], D[c]) / (D[c, c] + s2)
        o.append(int(c))
        picks.append(int(best))
        values.append(best_err)
        cur = best_err
        avail[best] = False
        room -= cost[best]
    return picks, values


@pytest.mark.parametrize("seed,cost_power", [(0, 1.0), (1, 0.0), (2, 1.0)])
def test_fast_greedy_matches_the_recomputed_greedy(seed, cost_power):
    modes, nt, obs, cand, K, s2, cost, F = _problem(seed)
    room = 6.0
    picks, values, v0 = greedy_refit([(w, J, S) for w, J, S, _ in modes], nt, obs, cand, K, s2,
                                     cost, room, spread=F, cost_power=cost_power)
    ref_picks, ref_values = _brute_force(modes, nt, obs, cand, K, s2, cost, room, F, cost_power)
    assert len(picks) >= 2
    assert picks == ref_picks
    np.testing.assert_allclose(values, ref_values, rtol=1e-9)
    S0 = [(w, J, S) for w, J, S, _ in modes]
    assert v0 == pytest.approx(sum(w * refit_error(J, S, obs, nt, K, s2) for w, J, S in S0)
                               + np.sum(F[:nt] ** 2), rel=1e-12)


def test_a_spread_the_candidates_resolve_is_bought_first():
    """Two modes that disagree at the targets and at one cheap candidate only: with the spread the
    first pick is that candidate; without it, another run."""
    modes, nt, obs, cand, K, s2, cost, _ = _problem(3, n_modes=1)
    F = np.zeros((len(K), 1))
    F[:nt, 0] = 1.0
    F[cand[7], 0] = 1.0
    J_modes = [(1.0, J, S) for _, J, S, _ in modes]
    with_spread = greedy_refit(J_modes, nt, obs, cand, K, s2, cost, 6.0, spread=F)[0]
    without = greedy_refit(J_modes, nt, obs, cand, K, s2, cost, 6.0)[0]
    assert with_spread[0] == 7
    assert without[0] != 7 and without[0] == with_spread[1]


def test_spread_factor_reproduces_the_modes_covariance():
    """``F F'`` of :meth:`LaplaceMixture.spread_factor` is the weighted covariance of the modes'
    predictions, computed here from the law at each mode's centre."""
    law = offset_power_law("spread")
    thetas = np.array([[1.0, 300.0, 0.3], [1.2, 150.0, 0.25], [0.8, 600.0, 0.35]])
    u = np.asarray(to_unconstrained(law, thetas))
    w = np.array([0.5, 0.3, 0.2])
    x = {"N": np.geomspace(1e5, 1e9, 12)}
    mix = LaplaceMixture(law, u, np.stack([np.eye(3)] * 3), w, 1e-4, 1e-3,
                         np.zeros((1, 1)), x)
    F = mix.spread_factor(x)
    th = np.asarray(from_unconstrained(law, u))
    means = np.array([t[0] + t[1] * x["N"] ** -t[2] for t in th])
    dev = means - w @ means
    np.testing.assert_allclose(F @ F.T, (w[:, None] * dev).T @ dev, rtol=1e-9, atol=1e-15)
    assert np.linalg.matrix_rank(F @ F.T) == 2  # three modes, one constraint: rank two
