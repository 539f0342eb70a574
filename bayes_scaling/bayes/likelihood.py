"""The observation model of log losses: which likelihoods exist and their distributions."""
from __future__ import annotations

import jax

import numpyro.distributions as dist

from ..errors import BayesScalingError
from .distributions import HUBER_C, Huber, huber_standard_sample


LIKELIHOODS = ("huber", "student_t", "normal")
STUDENT_DF = 4.0


def likelihood_dist(likelihood: str, loc, scale, *, c=HUBER_C, student_df=STUDENT_DF):
    """The observation distribution of ``log L`` around ``loc = log f(theta, x)``."""
    if likelihood == "huber":
        return Huber(loc, scale, c)
    if likelihood == "student_t":
        return dist.StudentT(student_df, loc, scale)
    if likelihood == "normal":
        return dist.Normal(loc, scale)
    raise BayesScalingError(f"likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")


def standard_noise(likelihood, key, shape, c, student_df):
    if likelihood == "huber":
        return huber_standard_sample(key, shape, c)
    if likelihood == "student_t":
        return jax.random.t(key, student_df, shape)
    return jax.random.normal(key, shape)
