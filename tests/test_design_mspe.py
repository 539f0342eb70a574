"""bs.design's ``mspe`` method and the harness's scorers, on tasks generated from a known law."""
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.design import fitting
from bayes_scaling.design import mspe as M
from bayes_scaling.design.harness import State
from bayes_scaling.errors import BayesScalingError
from conftest import toy_chinchilla_law

TRUE = {"E": 1.8, "A": 400.0, "alpha": 0.34, "B": 410.0, "beta": 0.28}
LAW = toy_chinchilla_law(N="params", D="tokens")


def _table(sizes, tpps, noise=0.0, seed=0):
    df = pd.DataFrame([dict(params=n, tokens=n * t) for n in sizes for t in tpps])
    df["loss"] = np.asarray(LAW(TRUE, df)) + noise * np.random.default_rng(seed).standard_normal(
        len(df))
    return df


def _task(noise):
    train = _table([1e7, 2e7, 4e7, 8e7, 1.6e8], [2, 5, 10, 20, 40, 80], noise=noise)
    test = _table([1e9, 2e9], [20, 40], noise=noise, seed=1)
    return bs.design.Task(name="toy", train=train, test=test, law=LAW, target="loss",
                          cost="6ND", budgets=(0.05, 0.2, 0.5))


@pytest.fixture(scope="module")
def noisy():
    return _task(0.003)


def _modes(task, observed):
    g = task.groups()[0]
    x = {v: a[observed] for v, a in g.x.items()}
    starts = fitting.least_squares(LAW, x, g.y[observed],
                                   fitting.uniform_starts(LAW, 32, np.random.default_rng(0)))
    cand = np.setdiff1d(np.arange(len(g.y)), observed)
    return g, cand, M.modes(LAW, starts, x, g.y[observed], g.y,
                            {v: a[cand] for v, a in g.x.items()}, g.x_test)


def test_mspe_buys_within_each_budget_and_recovers_the_targets(noisy):
    res = bs.design.run(noisy, method="mspe", seeds=[0])
    total = noisy.costs(noisy.train).sum()
    assert (res.cost_spent <= res.budget * total * (1 + 1e-12)).all()
    assert res.n_runs.is_monotonic_increasing and res.n_runs.iloc[0] >= 1
    assert res.r2_protocol.iloc[-1] > 0.9


def test_intra_reduction_is_the_exact_drop_of_each_modes_target_variance(noisy):
    """The intra term of a candidate is the drop of sum_k w_k tr(J_t S_k J_t') when the candidate
    joins the fit (rank-one update of each mode's precision, Sherman-Morrison)."""
    g, cand, m = _modes(noisy, np.arange(0, 30, 3))
    intra, _ = M.reductions(m)
    for c in (0, 5, len(cand) - 1):
        drop = 0.0
        for w, Jt, Jc, S in zip(m.weights, m.J_target, m.J_cand, m.cov):
            after = np.linalg.inv(np.linalg.inv(S) + np.outer(Jc[c], Jc[c]) / m.s2)
            drop += w * (np.trace(Jt @ S @ Jt.T) - np.trace(Jt @ after @ Jt.T))
        assert intra[c] == pytest.approx(drop, rel=1e-6)


def test_inter_reduction_matches_a_direct_integral_over_the_next_observation():
    """Two modes that disagree at the targets: the expected disagreement after a run equals the
    integral, on a wide fine grid, of the disagreement after each y times the modes' predictive
    density (the posterior weights and shifted forecasts computed directly)."""
    rng = np.random.default_rng(1)
    K, T, N, P = 2, 3, 4, 2
    m = M.Modes(weights=np.array([0.6, 0.4]), f_target=rng.normal(size=(K, T)),
                f_cand=rng.normal(size=(K, N)), J_target=rng.normal(size=(K, T, P)),
                J_cand=rng.normal(size=(K, N, P)),
                cov=np.array([np.eye(P) * 0.3, np.eye(P) * 0.5]), s2=0.2)
    _, inter = M.reductions(m)
    before = m.mspe()[1]
    y = np.linspace(-20, 20, 40001)
    for c in range(N):
        v = np.array([m.s2 + m.J_cand[k, c] @ m.cov[k] @ m.J_cand[k, c] for k in range(K)])
        g = np.array([m.J_target[k] @ m.cov[k] @ m.J_cand[k, c] / v[k] for k in range(K)])
        joint = m.weights * np.exp(-0.5 * (y[:, None] - m.f_cand[:, c]) ** 2 / v) / np.sqrt(
            2 * np.pi * v)
        w = joint / joint.sum(1, keepdims=True)
        f = m.f_target[None] + g[None] * (y[:, None] - m.f_cand[:, c])[:, :, None]
        fbar = np.einsum("nk,nkt->nt", w, f)
        after = np.einsum("nk,nk->n", w, np.sum((f - fbar[:, None]) ** 2, axis=2))
        expected = np.trapezoid(joint.sum(1) * after, y)
        assert inter[c] == pytest.approx(before - expected, abs=1e-4 * before)
    # a run no mode can tell apart (zero Jacobian, equal predictions) leaves the disagreement
    m.J_cand[:, 0] = 0.0
    m.f_cand[:, 0] = 0.3
    assert M.reductions(m)[1][0] == pytest.approx(0.0, abs=1e-12)


def test_mspe_prefers_the_run_that_reduces_the_predicted_target_error(noisy):
    """After a pilot of small runs, at equal cost the score ranks candidates by their predicted
    drop of the target MSPE, and the run whose inputs are closest to the targets (largest model,
    most tokens) drops it more than twice as much as the run with the smallest ones."""
    g, cand, m = _modes(noisy, np.array([0, 1, 6, 7, 12]))
    intra, inter = M.reductions(m)
    s = M.scores(m, np.ones(len(cand)), 1.0)
    np.testing.assert_allclose(s, intra + inter)
    far = int(np.argmax(g.x["N"][cand] * g.x["D"][cand]))
    near = int(np.argmin(g.x["N"][cand] * g.x["D"][cand]))
    assert s[far] > 2 * s[near]
    # and the method buys the best-scoring affordable run
    st = State(noisy, g, np.random.default_rng(0), cand, np.array([0, 1, 6, 7, 12]),
               float(g.cost[[0, 1, 6, 7, 12]].sum()), float(g.cost.sum()), float(g.cost.sum()))
    st.memory["pilot_done"] = True
    starts = fitting.least_squares(LAW, {v: a[st.observed] for v, a in g.x.items()},
                                   g.y[st.observed],
                                   fitting.uniform_starts(LAW, 32, np.random.default_rng(0)))
    pick = bs.design.methods.Mspe(cost_power=0.0).choose(st, cand, starts, 1)
    assert pick[0] == cand[int(np.argmax(s))]


def test_both_scorers_agree_where_the_refit_recovers_the_law():
    res = bs.design.run(_task(0.0), method="mspe", seeds=[0], scorers=("compiled", "benchmark"))
    last = res.iloc[-1]
    assert last.r2_compiled > 0.999
    assert last.r2_benchmark == pytest.approx(last.r2_compiled, abs=1e-6)
    assert last.r2_compiled == pytest.approx(last.r2_protocol, abs=1e-12)


def test_benchmark_conventions_and_bad_options(noisy):
    # held over to the next checkpoint whatever its cost: cheapest then overspends a checkpoint
    fits = bs.design.run(noisy, method="cheapest", seeds=[0])
    nxt = bs.design.run(noisy, method="cheapest", seeds=[0], held_over="next")
    total = noisy.costs(noisy.train).sum()
    assert (fits.cost_spent <= fits.budget * total * (1 + 1e-12)).all()
    assert (nxt.n_runs >= fits.n_runs).all()
    # a failed benchmark refit is scored at one fixed draw in the bounds
    a, b = fitting.benchmark_fallback(LAW), fitting.benchmark_fallback(LAW)
    lo = np.array([p.lower for p in LAW.params])
    hi = np.array([p.upper for p in LAW.params])
    assert np.array_equal(a, b) and np.all((a >= lo) & (a <= hi))
    for bad in (dict(scorers=("scipy",)), dict(held_over="always"), dict(group_order="z")):
        with pytest.raises(BayesScalingError, match=list(bad)[0]):
            bs.design.run(noisy, method="random", seeds=[0], **bad)


def test_the_law_on_a_growing_set_of_runs_compiles_one_program_per_row_bucket():
    """``predictor`` and the Jacobians evaluate the law on the rows padded to a row bucket and cut
    back: the same values as on the rows themselves, and one compiled program for 33 to 64 rows
    (mspe on a vocab pool had compiled one per purchase, until LLVM could map no more code)."""
    import jax

    task = _task(0.003)
    g = task.groups()[0]
    theta = np.array([TRUE[p.name] for p in LAW.params])
    jac = fitting.jacobian_theta(LAW)
    pred = fitting.predictor(LAW)
    x_all = {v: np.concatenate([a, a]) for v, a in g.x.items()}  # 60 rows
    before = jac.jitted._cache_size()
    for n in (33, 40, 47, 55, 60):
        x = {v: a[:n] for v, a in x_all.items()}
        f, J = jac(theta, x)
        assert f.shape == (n,) and J.shape == (n, len(theta))
        direct = jax.jit(lambda t, x: LAW.fn(dict(zip([p.name for p in LAW.params], t)), x))
        np.testing.assert_allclose(f, np.asarray(direct(theta, x)), rtol=1e-12)
        np.testing.assert_allclose(pred(theta[None], x)[0], f, rtol=1e-12)
    assert jac.jitted._cache_size() - before <= 1
