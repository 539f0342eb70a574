"""The refit criterion of ``bayes``: the expected target error of the least-squares refit of a
misspecified law, checked against a Monte-Carlo refit and against its own brute-force update."""
import jax.numpy as jnp
import numpy as np
import pandas as pd

import bayes_scaling as bs
from bayes_scaling.design import fitting
from bayes_scaling.design.acquisition import greedy_refit, refit_error
from bayes_scaling.design.posterior import kernel
from conftest import offset_power_law


def _problem(seed=0, n_rows=30, nt=4, P=3):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 3, n_rows))
    x[:nt] = rng.uniform(3.2, 4.0, nt)  # targets beyond the pool, as in ScaleBench
    J = np.stack([x ** k for k in range(P)], 1)
    K = 0.3 ** 2 * kernel(x[:, None], x[:, None], length=0.7)
    return rng, x, J, K


def test_refit_error_is_the_mean_squared_error_of_a_simulated_refit():
    """Draw the truth (prior parameters, discrepancy, noise), refit by regularised least squares
    on the observed rows, and compare the mean squared target error with the formula."""
    rng, x, J, K = _problem()
    nt, s2, L = 4, 0.05 ** 2, np.diag([0.5, 1.0, 2.0])
    obs = np.array([5, 9, 14, 20, 27])
    Jo = J[obs]
    S = np.linalg.inv(Jo.T @ Jo / s2 + L)
    n = 40000
    u = rng.multivariate_normal(np.zeros(3), np.linalg.inv(L), n)
    delta = rng.multivariate_normal(np.zeros(len(x)), K + 1e-10 * np.eye(len(x)), n)
    y = u @ Jo.T + delta[:, obs] + np.sqrt(s2) * rng.standard_normal((n, len(obs)))
    u_hat = y @ Jo @ S.T / s2
    err = ((u_hat - u) @ J[:nt].T - delta[:, :nt]) ** 2
    mc = err.sum(1).mean()
    assert abs(refit_error(J, S, obs, nt, K, s2) - mc) < 0.03 * mc


def test_greedy_gain_equals_the_recomputed_error_and_buys_near_the_targets():
    """Each pick's expected error is the formula recomputed from scratch with the run added; and
    a discrepancy the far runs cannot see makes the greedy prefer the run nearest the targets."""
    _, x, J, K = _problem(1)
    nt, s2 = 4, 0.02 ** 2
    L = np.diag([1.0, 1.0, 1.0])
    obs = [4, 10, 16]
    cand = np.array([i for i in range(nt, len(x)) if i not in obs])
    S = np.linalg.inv(J[obs].T @ J[obs] / s2 + L)
    cost = np.ones(len(cand))
    picks, values, v0 = greedy_refit([(1.0, J, S)], nt, obs, cand, K, s2, cost, 5.0)
    assert len(picks) >= 1
    o = list(obs)
    for p, v in zip(picks, values):
        o.append(int(cand[p]))
        So = np.linalg.inv(J[o].T @ J[o] / s2 + L)
        assert np.isclose(v, refit_error(J, So, o, nt, K, s2), rtol=1e-8)
    assert values[0] < v0
    assert x[cand[picks[0]]] > np.quantile(x[cand], 0.8)  # the first buy is a run near the targets


def test_delta_method_intervals_keep_a_parameter_pinned_at_its_bound():
    """Data from a known law whose offset lies on its lower bound (E = 0): the delta-method
    predictive is centred on the law and its 90% intervals cover fresh rows of it."""
    law = offset_power_law("pinned")
    truth = {"E": 0.0, "A": 300.0, "alpha": 0.3}
    noise = 0.01
    rng = np.random.default_rng(3)

    def table(n):
        return pd.DataFrame({"N": n, "loss": 300.0 * n ** -0.3 + noise * rng.standard_normal(
            len(n))})

    df = table(np.geomspace(1e6, 1e8, 12))
    fresh = table(np.geomspace(1.5e6, 8e7, 9))
    group = bs.design.Task(name="p", train=df, test=fresh, law=law, cost=lambda d: d["N"]
                           ).groups()[0]
    starts = fitting.least_squares(law, group.x, group.y,
                                   fitting.uniform_starts(law, 32, np.random.default_rng(0)))
    post = bs.design.LaplaceMixture.from_starts(law, group, np.arange(len(df)), starts)
    lo, med, hi = post.quantiles(group.x_test, (0.05, 0.5, 0.95), n=4000, linear=True)
    clean = np.asarray(law.fn({k: jnp.asarray(v) for k, v in truth.items()}, group.x_test))
    assert np.max(np.abs(med - clean)) < 3 * noise
    assert 0.65 <= np.mean((group.y_test >= lo) & (group.y_test <= hi)) <= 1.0
