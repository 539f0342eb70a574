"""A table the law fits almost exactly makes a funnel in ``sigma``: the ladder's non-centred retry.

Where the log residuals at the fit are far below any noise a prior expects, the data pin the
parameters to within a multiple of ``sigma``, and ``sigma``'s posterior spans decades (its prior,
pushed down). NUTS with one step size cannot serve the funnel's neck and mouth (BFMI below 0.3).
The ladder then samples ``s_j = c_j + exp(delta) w_j`` (``delta`` the distance of ``log sigma``
from its centre, ``model.unwhiten``); checked here:

- the map, its inverse and its log-Jacobian ``(d - 1) delta`` against automatic differentiation;
- the funnel statistic is near 1 on Neal's funnel and near 0 on a Gaussian;
- the whitening of funnel draws makes their non-centred form white;
- five runs on a law's exact curve: the default posterior passes every check, through the
  non-centred retry, and its intervals hold the parameters the table was made from.
"""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes import ladder, nuts
from bayes_scaling.bayes.model import unwhiten, whiten_funnel
from bayes_scaling.laws import Law, Param


def _neal(n, d=4, seed=0):
    """Neal's funnel: log sigma ~ N(0, 1.5), the others N(0, sigma^2), log sigma first."""
    rng = np.random.default_rng(seed)
    ls = 1.5 * rng.standard_normal(n)
    return np.column_stack([ls, np.exp(ls)[:, None] * rng.standard_normal((n, d - 1))])


def test_the_funnel_map_its_inverse_and_its_log_jacobian():
    rng = np.random.default_rng(1)
    d, f = 4, 2
    center = rng.normal(size=d)
    a = rng.normal(size=(d, d))
    chol = np.linalg.cholesky(a @ a.T + d * np.eye(d))
    z = rng.normal(size=d)
    s, jac = unwhiten(jnp.asarray(z), jnp.asarray(center), jnp.asarray(chol), f)
    # the batch form gives the same point, and the inverse gives back z
    assert np.allclose(unwhiten(z[None], center, chol, f, np)[0][0], s, atol=1e-12)
    w = whiten_funnel(np.asarray(s)[None], center, f)[0]
    assert np.allclose(np.linalg.solve(chol, w), z, atol=1e-10)
    # log |ds/dz| = (d - 1) delta + log |chol|: the map's Jacobian up to a constant
    J = jax.jacfwd(lambda v: unwhiten(v, jnp.asarray(center), jnp.asarray(chol), f)[0])(
        jnp.asarray(z))
    logdet = np.linalg.slogdet(np.asarray(J))[1]
    assert logdet == pytest.approx(float(jac) + np.linalg.slogdet(chol)[1], abs=1e-9)
    # without a funnel index it is the plain whitening
    s0, jac0 = unwhiten(jnp.asarray(z), jnp.asarray(center), jnp.asarray(chol), None)
    assert np.allclose(s0, center + chol @ z) and jac0 == 0.0


def test_the_funnel_statistic_tells_a_funnel_from_a_gaussian():
    funnel = _neal(4000)
    assert ladder.funnel_correlation(funnel, 0) > 0.9
    gauss = np.random.default_rng(2).standard_normal((4000, 4))
    assert abs(ladder.funnel_correlation(gauss, 0)) < 0.1


def test_funnel_draws_whiten_to_a_white_non_centred_form():
    s = _neal(6000, seed=3).reshape(2, 3000, 4)
    rng = np.random.default_rng(0)
    center, chol, z0 = nuts.draws_whitening(s, {"diverging": np.zeros((2, 3000), bool)}, 4, rng,
                                            funnel=0)
    w = whiten_funnel(s.reshape(-1, 4), center, 0)
    z = np.linalg.solve(chol, (w - w.mean(0)).T).T
    assert np.allclose(np.cov(z, rowvar=False), np.eye(4), atol=1e-8)
    # the starts map back onto draws
    starts = unwhiten(z0, center, chol, 0, np)[0]
    pool = s.reshape(-1, 4)
    assert all(np.any(np.all(np.isclose(pool, x), 1)) for x in starts)


TRUE = dict(E=1.8, A=400.0, a=0.34)
EXACT = Law(
    name="funnel_exact_test_law", variables=("N",), equation="E + A N^-a",
    params=(Param("E", 0.0, 10.0, (0.5, 3.0)), Param("A", 1e-3, 1e8, (1.0, 1e4), log_init=True),
            Param("a", 0.0, 2.0, (0.05, 0.8))),
    fn=lambda p, x: p["E"] + p["A"] * x["N"] ** -p["a"])


def test_a_table_on_the_law_s_exact_curve_converges_through_the_non_centred_retry():
    N = np.geomspace(1e7, 1e9, 5)
    df = pd.DataFrame({"N": N, "loss": TRUE["E"] + TRUE["A"] * N ** -TRUE["a"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bs.MultimodalWarning)
        post = bs.fit_posterior(EXACT, df, seed=0, progress_bar=False)
    d = post.diagnostics
    assert post.ok and d["divergences"] == 0 and d["max_rhat"] <= 1.01
    actions = [a["action"] for a in d["attempts"]]
    assert actions[0] == "first" and ladder.NON_CENTRED in actions
    assert "non-centred on sigma" in d["attempts"][-1]["settings"]["whitened_by"]
    q = post.idata.posterior
    for name, v in TRUE.items():
        lo, hi = np.quantile(np.asarray(q[name]).ravel(), [0.05, 0.95])
        assert lo < v < hi, (name, lo, hi)
    # the spread of E is that of a table pinned to far below a percent
    assert float(np.asarray(q["E"]).std()) < 0.05


def test_a_table_fitted_to_the_rounding_of_float64_is_refused_before_sampling_with_the_fix():
    # 15 rows on the exact curve: the MAP's sigma is ~1e-15, where the density is rounding noise
    # (sampled anyway: 4 attempts, R-hat 3-5, every iteration at the maximum tree depth)
    N = np.geomspace(1e7, 1e9, 15)
    df = pd.DataFrame({"N": N, "loss": TRUE["E"] + TRUE["A"] * N ** -TRUE["a"]})
    with pytest.raises(bs.BayesScalingError) as e:
        bs.fit_posterior(EXACT, df, seed=0, progress_bar=False)
    msg = str(e.value)
    assert "fits these 15 rows exactly" in msg and "scale=0.001" in msg and "sigma" in msg
    # the same rows with the noise stated: the scale is not learnt, and nothing is refused
    from bayes_scaling.bayes.api import _check_noise
    _check_noise(EXACT, {"sigma": 1e-15}, 0.001, 15)
    _check_noise(EXACT, {"sigma": 1e-6}, None, 5)  # a funnel the ladder samples
