"""Distributions the Bayesian layer needs that NumPyro lacks: draws from the Huber density, the
improper flat prior, and a prior seen on the real line through a parameter's transform.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

import numpyro.distributions as dist
from numpyro.distributions import constraints

from ..errors import BayesScalingError
from ..laws import Param
from ..objective import huber_log_normaliser


HUBER_C = 1.345  # threshold in units of sigma: 95% efficiency under Gaussian noise (Huber 1964)


class FlatPrior(dist.Distribution):
    """The improper flat prior on a parameter's natural coordinate (``log theta`` for positive
    parameters, ``theta`` otherwise), as a density on ``theta``: ``-log theta`` or 0.

    Used for the MAP-equals-Huber-fit identity (``priors="flat"``); NUTS on a flat prior can only
    work when the likelihood alone makes the posterior proper.
    """

    support = constraints.real

    def __init__(self, log=False):
        self.log = bool(log)
        super().__init__(batch_shape=(), event_shape=())

    def log_prob(self, value):
        return -jnp.log(value) if self.log else jnp.zeros_like(value)

    def sample(self, key, sample_shape=()):
        raise BayesScalingError("a flat prior cannot be sampled; give a proper prior")


FLAT_PRIORS = {True: FlatPrior(True), False: FlatPrior(False)}


def log_abs_det_jacobian(p: Param, u):
    """log |d theta / d u| of :meth:`Param.from_unconstrained`."""
    k = p.kind
    if k == "interval":
        return math.log(p.upper - p.lower) - jax.nn.softplus(u) - jax.nn.softplus(-u)
    if k == "log_interval":
        lo, hi = math.log(p.lower), math.log(p.upper)
        return (lo + (hi - lo) * jax.nn.sigmoid(u) + math.log(hi - lo)
                - jax.nn.softplus(u) - jax.nn.softplus(-u))
    if k in ("lower", "upper"):
        return u
    if k == "real":
        return jnp.zeros_like(u)
    # any other transform: elementwise derivative by forward-mode autodiff
    u = jnp.asarray(u)
    return jnp.log(jnp.abs(jax.jvp(p.from_unconstrained, (u,), (jnp.ones_like(u),))[1]))


class OnUnconstrained(dist.Distribution):
    """A prior on a parameter's natural value, seen on the real line through the Param transform.

    ``log_prob(u) = prior.log_prob(theta(u)) + log |d theta / d u|``, the density NUTS samples.
    Sampling draws from the prior and maps the draws with :meth:`Param.to_unconstrained` (draws
    outside the bounds, possible only for user priors wider than the bounds, are clipped inside).
    """

    support = constraints.real

    def __init__(self, prior: dist.Distribution, param: Param):
        self.prior, self.param = prior, param
        super().__init__(batch_shape=(), event_shape=())

    def log_prob(self, u):
        theta = self.param.from_unconstrained(u)
        return self.prior.log_prob(theta) + log_abs_det_jacobian(self.param, u)

    def sample(self, key, sample_shape=()):
        theta = self.prior.sample(key, sample_shape)
        lo, hi, rel = self.param.lower, self.param.upper, 1e-9
        if math.isfinite(lo):
            theta = jnp.maximum(theta, lo + rel * max(1.0, abs(lo)))
        if math.isfinite(hi):
            theta = jnp.minimum(theta, hi - rel * max(1.0, abs(hi)))
        return self.param.to_unconstrained(theta)


def huber_standard_sample(key, shape, c=HUBER_C):
    """Draws from the standard Huber density ``exp(-rho_c(z)) / Z(c)`` (mixture sampling)."""
    from jax.scipy.special import ndtr, ndtri

    k1, k2, k3, k4 = jax.random.split(key, 4)
    z_core = jnp.sqrt(2.0 * jnp.pi) * (2.0 * ndtr(c) - 1.0)
    p_core = z_core / jnp.exp(huber_log_normaliser(c))
    uc = jax.random.uniform(k1, shape, minval=ndtr(-c), maxval=ndtr(c))
    core = ndtri(uc)
    tail = c + jax.random.exponential(k2, shape) / c
    sign = jnp.where(jax.random.bernoulli(k3, 0.5, shape), 1.0, -1.0)
    return jnp.where(jax.random.uniform(k4, shape) < p_core, core, sign * tail)
