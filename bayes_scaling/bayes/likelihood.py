"""The observation model of log losses: the likelihood of ``bayes_scaling.objective`` as the
Bayesian layer uses it (default Huber threshold ``HUBER_C``, draws, a NumPyro distribution).

A row's log residual ``r = log L - log f(theta, x)`` has density ``p(r | sigma)``:

- ``"huber"``: ``-rho_c(r / sigma) - log sigma - log Z(c)`` (DESIGN.md rule 2; with flat priors
  and a fixed sigma its mode is the ``fit_map`` Huber fit with ``delta = c sigma``: ``fit_map``
  minimises the same ``objective.penalty`` at unit scale with ``c = delta``);
- ``"student_t"``: Student-t with ``student_df`` degrees of freedom and scale ``sigma``;
- ``"normal"``: Normal with sd ``sigma``.

:func:`log_likelihood` is used by the model's density (``Spec``), the NumPyro model (through
:class:`Observation`), NUTS, the Laplace path and every evaluation of held-out rows
(``bayes_scaling.evaluate.posterior_loglik``); :func:`standard_noise` draws from the same
densities for forecasts.
"""
from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import numpyro.distributions as dist
from numpyro.distributions import constraints

from .. import objective
from ..objective import LIKELIHOODS, STUDENT_DF, check_likelihood  # noqa: F401  (re-exported)
from .distributions import HUBER_C, huber_standard_sample


def log_likelihood(r, scale, likelihood="huber", *, c=HUBER_C, student_df=STUDENT_DF):
    """Pointwise ``log p(r | scale)`` of log residuals ``r = log L - log f(theta, x)``
    (:func:`bayes_scaling.objective.log_likelihood` with the Huber threshold ``HUBER_C``)."""
    return objective.log_likelihood(r, scale, likelihood, c=c, student_df=student_df)


#: the smallest number of draws :func:`standard_noise` compiles a program for: 2^16 Huber draws
#: take about 4 ms, one more compilation about 0.6-0.9 s (a rehearsal's predictives of 12800 to
#: 51200 draws then share one program, not three)
NOISE_MIN_BUCKET = 1 << 16


def noise_bucket(n: int) -> int:
    """The number of draws :func:`standard_noise` generates for ``n``: the next power of two, at
    least :data:`NOISE_MIN_BUCKET`."""
    return max(NOISE_MIN_BUCKET, 1 << (max(int(n), 1) - 1).bit_length())


@partial(jax.jit, static_argnames=("likelihood", "size"))
def _flat_noise(likelihood, key, size, c, student_df):
    if likelihood == "huber":
        return huber_standard_sample(key, (size,), c)
    if likelihood == "student_t":
        return jax.random.t(key, student_df, (size,))
    return jax.random.normal(key, (size,))


def standard_noise(likelihood, key, shape, c=HUBER_C, student_df=STUDENT_DF):
    """Draws of ``r / sigma`` under ``likelihood`` (the density of :func:`log_likelihood`), of
    shape ``shape`` (a tuple).

    One compiled program per likelihood and bucket of draws (:func:`noise_bucket`: the next power
    of two), not per shape: a new table size or number of posterior draws reuses it. The
    program draws the whole bucket and the first ``prod(shape)`` draws are kept, which are the
    draws of ``shape`` itself: JAX's counter-based generator makes the ``i``-th draw a function of
    the key and ``i`` alone (``jax_threefry_partitionable``, JAX's default;
    ``tests/test_predictive.py`` checks it). Compiling the Huber sampler takes about 0.6-0.9 s
    on the CPU backend, as much as a small law's whole Laplace fit."""
    shape = tuple(int(d) for d in shape)
    n = math.prod(shape)
    flat = _flat_noise(check_likelihood(likelihood), key, noise_bucket(n), c, student_df)
    if isinstance(flat, jax.core.Tracer):  # inside a traced function: part of its program
        return flat[:n].reshape(shape)
    # eagerly, cut on the host: an eager slice would compile a program per shape again
    return jnp.asarray(np.asarray(flat)[:n].reshape(shape))


class Observation(dist.Distribution):
    """The distribution of ``log L`` around ``loc = log f(theta, x)``: :func:`log_likelihood` of
    ``value - loc`` as a NumPyro distribution (the NumPyro model's observation site)."""

    support = constraints.real
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}

    def __init__(self, likelihood, loc, scale, *, c=HUBER_C, student_df=STUDENT_DF,
                 validate_args=None):
        self.likelihood = check_likelihood(likelihood)
        self.loc, self.scale = jnp.asarray(loc), jnp.asarray(scale)
        self.c, self.student_df = float(c), float(student_df)
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(loc), jnp.shape(scale))
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    def log_prob(self, value):
        return log_likelihood(value - self.loc, self.scale, self.likelihood, c=self.c,
                              student_df=self.student_df)

    def sample(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape
        return self.loc + self.scale * standard_noise(self.likelihood, key, shape, self.c,
                                                      self.student_df)
