"""The default priors' truncated normal (bayes_scaling.bayes.priors.TruncNormal): its density is
NumPyro's TruncatedNormal (of theta, or of log theta with the 1/theta Jacobian) for every
default prior of every packaged law, and its draws follow that density."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import numpyro.distributions as dist

import bayes_scaling as bs
from bayes_scaling.bayes.priors import SCALE, TruncNormal, default_prior, log_scale, prior_loc_scale

PARAMS = {p.name + "@" + n: p for n in sorted(bs.laws.names())
          if bs.laws.get(n).fn.__module__.startswith("bayes_scaling.")
          for p in (*bs.laws.get(n).params, SCALE)}


def _numpyro_prior(p):
    m, s = prior_loc_scale(p)
    if log_scale(p):
        low = math.log(p.lower) if p.lower > 0 else None
        high = math.log(p.upper) if math.isfinite(p.upper) else None
    else:
        low = p.lower if math.isfinite(p.lower) else None
        high = p.upper if math.isfinite(p.upper) else None
    base = (dist.Normal(m, s) if low is None and high is None
            else dist.TruncatedNormal(m, s, low=low, high=high))
    return (dist.TransformedDistribution(base, dist.transforms.ExpTransform())
            if log_scale(p) else base), low, high


@pytest.mark.parametrize("key", sorted(PARAMS)[::3])
def test_default_prior_density_is_numpyros_truncated_normal(key):
    p = PARAMS[key]
    ours, (ref, low, high) = default_prior(p), _numpyro_prior(p)
    assert isinstance(ours, TruncNormal)
    m, s = prior_loc_scale(p)
    lo = m - 4 * s if low is None else max(low, m - 4 * s)
    hi = m + 4 * s if high is None else min(high, m + 4 * s)
    x = np.linspace(lo, hi, 41)[1:-1]
    x = np.exp(x) if log_scale(p) else x
    np.testing.assert_allclose(np.asarray(ours.log_prob(jnp.asarray(x))),
                               np.asarray(ref.log_prob(jnp.asarray(x))), atol=1e-10)


@pytest.mark.parametrize("args", [(0.3, 0.4, 0.0, 5.0), (2.0, 1.0, -5.0, -4.0), (-3.0, 1.0, 0.0, None),
                                  (1.0, 0.7, None, 2.0), (0.5, 1.2, None, None)])
def test_truncated_normal_draws_follow_its_density(args):
    loc, scale, low, high = args
    d = TruncNormal(loc, scale, low, high)
    x = np.asarray(d.sample(jax.random.PRNGKey(0), (20000,)))
    a = -np.inf if low is None else (low - loc) / scale
    b = np.inf if high is None else (high - loc) / scale
    assert np.all((x >= (low if low is not None else -np.inf)) & (x <= (high if high is not None else np.inf)))
    assert stats.kstest(x, stats.truncnorm(a, b, loc=loc, scale=scale).cdf).pvalue > 1e-3
    # the density integrates to one over the support
    grid = np.linspace(max(loc - 10 * scale, a * scale + loc if low is not None else -np.inf),
                       min(loc + 10 * scale, b * scale + loc if high is not None else np.inf), 200001)
    total = np.trapezoid(np.exp(np.asarray(d.log_prob(jnp.asarray(grid)))), grid)
    assert total == pytest.approx(1.0, abs=1e-6)
    # log-space: the density of theta with log theta truncated normal
    e = TruncNormal(loc, scale, low, high, log=True)
    y = np.asarray(e.sample(jax.random.PRNGKey(1), (20000,)))
    assert stats.kstest(np.log(y), stats.truncnorm(a, b, loc=loc, scale=scale).cdf).pvalue > 1e-3
    t = np.exp(grid)
    assert np.trapezoid(np.exp(np.asarray(e.log_prob(jnp.asarray(t)))), t) == pytest.approx(1.0, abs=1e-5)
