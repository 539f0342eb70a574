"""The one predictive (bayes_scaling.bayes.predictive): the reader of a law's inputs and the noise model.

Parameter draws are generated around Chinchilla's published fit; the predictive draws of a
ParamDraws must be those of the Posterior it was read from, and the noise must follow the
likelihood's own standard density (checked against closed forms, not against the sampler).
"""
import dataclasses
import math

import arviz as az
import jax
import numpy as np
import pandas as pd
import pytest
from scipy import stats

import bayes_scaling as bs
from bayes_scaling.bayes import predictive as pr

LAW = bs.laws.get("chinchilla")
TRUTH = dict(E=1.69, A=406.4, alpha=0.34, B=410.7, beta=0.28)
ROWS = pd.DataFrame({"N": [1e8, 4e8, 1e9, 7e9], "D": [2e9, 8e9, 2e10, 1.4e11]})


def posterior(likelihood, S=400, with_sigma=True, seed=0):
    """A Posterior of Chinchilla built from known draws (no sampling)."""
    rng = np.random.default_rng(seed)
    draws = {k: v * np.exp(0.01 * rng.standard_normal((1, S))) for k, v in TRUTH.items()}
    free = list(TRUTH)
    if with_sigma:
        draws["sigma"] = 0.02 * np.exp(0.1 * rng.standard_normal((1, S)))
        free.append("sigma")
    settings = {"free": free, "fixed": {}, "likelihood": likelihood, "c": 1.345,
                "student_df": 4.0, "scale": 0.03, "method": "laplace"}
    return bs.Posterior(LAW, az.from_dict(posterior=draws), map=dict(TRUTH),
                        diagnostics={"ok": True}, modes=pd.DataFrame(), settings=settings,
                        data_hash="")


@pytest.mark.parametrize("likelihood", ["huber", "student_t", "normal"])
def test_draws_of_a_posterior_predict_what_the_posterior_predicts(likelihood):
    post = posterior(likelihood)
    d = pr.as_draws(post)
    assert d.likelihood == likelihood and d.n_draws == 400
    for kind in ("mean", "predictive"):
        np.testing.assert_allclose(d.predict_draws(ROWS, kind, seed=5),
                                   post.predict_draws(ROWS, kind, seed=5), rtol=1e-12)


def test_fixed_scale_is_the_noise_scale():
    post = posterior("normal", with_sigma=False)
    d = pr.as_draws(post)
    np.testing.assert_allclose(d.sigma, 0.03)
    np.testing.assert_allclose(d.predict_draws(ROWS, "predictive", seed=1),
                               post.predict_draws(ROWS, "predictive", seed=1), rtol=1e-12)


def huber_tail_mass(c):
    """P(|eps| > c) under exp(-rho_c(eps)) / Z(c): core sqrt(2 pi)(2 Phi(c) - 1), tails
    2 exp(-c^2 / 2) / c (integral of exp(c^2 / 2 - c |z|) beyond c)."""
    core = math.sqrt(2 * math.pi) * (2 * stats.norm.cdf(c) - 1)
    tail = 2 * math.exp(-c**2 / 2) / c
    return tail / (core + tail)


def test_noise_follows_the_likelihood():
    n, sigma = 40_000, 0.05
    mean = np.ones((1, n))
    key = jax.random.PRNGKey(0)
    z = {kind: np.log(pr.observation_draws(mean, [sigma], kind, key))[0] / sigma
         for kind in ("huber", "student_t", "normal")}
    assert stats.kstest(z["student_t"], stats.t(4.0).cdf).statistic < 0.01
    assert stats.kstest(z["normal"], stats.norm.cdf).statistic < 0.01
    assert np.mean(np.abs(z["huber"]) > 1.345) == pytest.approx(huber_tail_mass(1.345), abs=6e-3)
    # the tails of the three differ as their densities do
    q = {k: np.quantile(np.abs(v), 0.999) for k, v in z.items()}
    assert q["normal"] < q["huber"] < q["student_t"]


@pytest.mark.parametrize("likelihood", ["huber", "student_t", "normal"])
def test_noise_of_any_shape_is_its_own_draws_from_one_program_per_bucket(likelihood):
    """standard_noise draws a power-of-two bucket and keeps the first prod(shape) draws: they
    must be the draws of that shape generated directly (to rounding: XLA may fuse the two
    programs differently), and shapes of one bucket must share one compiled program."""
    from bayes_scaling.bayes import likelihood as lk

    key = jax.random.PRNGKey(7)
    direct = {"huber": lambda k, s: bs.bayes.distributions.huber_standard_sample(k, s, 1.345),
              "student_t": lambda k, s: jax.random.t(k, 4.0, s),
              "normal": jax.random.normal}[likelihood]
    for shape in [(3,), (40, 25), (9, 1000), (2, 3, 5)]:
        got = np.asarray(lk.standard_noise(likelihood, key, shape, c=1.345, student_df=4.0))
        assert got.shape == shape
        want = jax.jit(direct, static_argnums=1)(key, shape)
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-13, atol=1e-15)
    b = lk.NOISE_MIN_BUCKET
    assert lk.noise_bucket(1) == lk.noise_bucket(b) == b and lk.noise_bucket(b + 1) == 2 * b
    assert lk.noise_bucket(3 * b) == 4 * b
    lk._flat_noise.clear_cache()
    for shape in [(40, 25), (1000,), (8, 100), (1, 1)]:  # 1000, 1000, 800, 1 draws: one bucket
        lk.standard_noise(likelihood, key, shape)
    assert lk._flat_noise._cache_size() == 1


def test_law_inputs_reads_tables_and_traced_columns():
    dcpt = bs.laws.get("dcpt")
    got = pr.law_inputs(LAW, ROWS)
    np.testing.assert_array_equal(np.asarray(got["N"]), ROWS["N"].to_numpy())
    with pytest.raises(bs.DataError, match=r"reads column\(s\) \['replay'\].*the plan rows"):
        pr.law_inputs(dcpt, ROWS, where="the plan rows")
    # a column with a default may be absent: it takes the default, shaped like the columns
    law = dataclasses.replace(LAW, name="chinchilla_at_1e9", defaults={"N": 1e9})
    x = pr.law_inputs(law, {"D": np.full((3, 2), 2e10)})
    np.testing.assert_array_equal(np.asarray(x["N"]), np.full((3, 2), 1e9))
    d = pr.ParamDraws(law, {k: [v] for k, v in TRUTH.items()})
    np.testing.assert_allclose(d.predict_draws(ROWS[["D"]])[0],
                               np.asarray(LAW(TRUTH, ROWS.assign(N=1e9))), rtol=1e-12)


def test_bad_likelihood_and_kind_are_refused():
    with pytest.raises(bs.BayesScalingError, match="likelihood must be one of"):
        pr.ParamDraws(LAW, {k: [v] for k, v in TRUTH.items()}, sigma=0.1, likelihood="cauchy")
    d = pr.ParamDraws(LAW, {k: [v] for k, v in TRUTH.items()})
    with pytest.raises(bs.BayesScalingError, match="needs sigma draws"):
        d.predict_draws(ROWS, "predictive")
    with pytest.raises(bs.BayesScalingError, match="kind must be"):
        d.predict_draws(ROWS, "median")


def test_rows_may_be_a_series_or_a_dict_of_columns():
    """``post.forecast({"N": 7e10, "D": 1.4e12})``: a dict of scalars is one row, a dict of lists
    a table, a Series one row; the same draws as the DataFrame of those rows."""
    post = posterior("huber")
    want = post.predict_draws(ROWS.iloc[[2]], "mean")
    for rows in (ROWS.iloc[2], ROWS.iloc[2].to_dict(), {"N": [1e9], "D": [2e10]}):
        np.testing.assert_allclose(post.predict_draws(rows, "mean"), want, rtol=1e-12)
    whole = post.forecast(ROWS)
    np.testing.assert_allclose(post.forecast(ROWS.to_dict("list"))["median"], whole["median"],
                               rtol=1e-12)
    with pytest.raises(bs.DataError, match=r"different lengths \{'N': 2, 'D': 3\}"):
        post.forecast({"N": [1e9, 2e9], "D": [1e10, 2e10, 3e10]})
    with pytest.raises(bs.DataError, match="expected a DataFrame, a Series .* got list"):
        post.forecast([1e9, 2e10])
    with pytest.raises(bs.DataError, match="coverage needs the measured 'loss' of each row"):
        post.coverage(ROWS)
