"""The one objective (DESIGN.md rule 2): Huber on log residuals, and the matching likelihood.

MAP objective (PTPP paper Sec. 2 "Fitting constraints"; M3 paper Appendix C.1, Eq. 18):

    J(theta) = sum_i Huber_delta(log Lhat_i(theta) - log L_i),
    Huber_delta(r) = r^2 / 2             if |r| <= delta
                   = delta (|r| - delta/2) otherwise.

Huber likelihood with scale sigma and threshold c (in units of sigma):

    log p(r | sigma, c) = -rho_c(r / sigma) - log sigma - log Z(c),
    Z(c) = sqrt(2 pi) (2 Phi(c) - 1) + 2 exp(-c^2 / 2) / c.

Since rho_c(r / sigma) = Huber_{c sigma}(r) / sigma^2, the log-likelihood of all rows is
-J(theta; delta = c sigma) / sigma^2 + const: with flat priors and a fixed sigma, the posterior mode
*is* the Huber fit with ``delta = c * sigma``. This is how the fitted scale relates to delta.

The one density of log residuals. Every noise model is ``log p(r | sigma) = -penalty(r / sigma) -
log_normaliser(sigma)``, with :func:`penalty` and :func:`log_normaliser` defined here for
``"huber"`` (``rho_c``), ``"student_t"`` and ``"normal"``; :func:`log_likelihood` is their sum
(``bayes.likelihood`` reads it with the default ``c``), and the MAP objective is the same penalty at
unit scale with ``c = delta``: ``J = sum_i penalty(r_i, 1, "huber", c=delta)``
(:func:`huber_objective`, ``fit_map``). These functions import nothing of the Bayesian layer, so
``fit`` and ``bayes`` share them without an import cycle.
"""
from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np

from .errors import BayesScalingError

LIKELIHOODS = ("huber", "student_t", "normal")
STUDENT_DF = 4.0


def huber(r, delta):
    """Elementwise Huber_delta(r) (quadratic inside |r| <= delta, linear outside)."""
    a = jnp.abs(r)
    return jnp.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def log_residuals(pred, y):
    """r_i = log Lhat_i - log L_i."""
    return jnp.log(pred) - jnp.log(y)


@jax.jit
def huber_objective(pred, y, delta):
    """Summed Huber loss of the log residuals: the MAP objective J (the Huber likelihood's penalty
    at unit scale with ``c = delta``)."""
    return jnp.sum(penalty(log_residuals(pred, y), 1.0, "huber", c=delta))


def huber_log_normaliser(c):
    """log Z(c) for the density proportional to exp(-rho_c(z)) on the real line."""
    c = jnp.asarray(c, dtype=jnp.float64)
    gauss = jnp.sqrt(2.0 * jnp.pi) * jss.erf(c / jnp.sqrt(2.0))
    return jnp.log(gauss + 2.0 * jnp.exp(-0.5 * c * c) / c)


def huber_logpdf(r, scale, c):
    """Pointwise log density of residual ``r`` under the Huber likelihood (scale, threshold c)."""
    return log_likelihood(r, scale, "huber", c=c)


def check_likelihood(likelihood: str) -> str:
    if likelihood not in LIKELIHOODS:
        raise BayesScalingError(f"likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")
    return likelihood


def penalty(r, scale, likelihood="huber", *, c, student_df=STUDENT_DF):
    """The part of ``-log p(r | scale)`` that depends on ``r``: ``rho_c(r / scale)`` (Huber),
    ``(nu + 1)/2 log(1 + z^2 / nu)`` (Student-t, ``nu = student_df``) or ``z^2 / 2`` (Normal),
    ``z = r / scale``."""
    z = r / scale
    if check_likelihood(likelihood) == "huber":
        return huber(z, c)
    if likelihood == "student_t":
        return 0.5 * (student_df + 1.0) * jnp.log1p(z**2.0 / student_df)
    return 0.5 * z**2


def log_normaliser(scale, likelihood="huber", *, c, student_df=STUDENT_DF):
    """``log scale + log Z``: the rest of ``-log p(r | scale)``, so the density integrates to 1."""
    if check_likelihood(likelihood) == "huber":
        return jnp.log(scale) + huber_log_normaliser(c)
    if likelihood == "student_t":
        return (jnp.log(scale) + 0.5 * jnp.log(student_df) + 0.5 * jnp.log(jnp.pi)
                + jss.gammaln(0.5 * student_df) - jss.gammaln(0.5 * (student_df + 1.0)))
    return jnp.log(jnp.sqrt(2 * jnp.pi) * scale)


def log_likelihood(r, scale, likelihood="huber", *, c, student_df=STUDENT_DF):
    """Pointwise ``log p(r | scale) = -penalty - log_normaliser`` of log residuals ``r``."""
    return (-penalty(r, scale, likelihood, c=c, student_df=student_df)
            - log_normaliser(scale, likelihood, c=c, student_df=student_df))


def data_hash(df, columns) -> str:
    """A short sha256 of the values of ``columns`` (records which data a result was fitted on)."""
    h = hashlib.sha256()
    for col in sorted(columns):
        h.update(col.encode())
        h.update(np.ascontiguousarray(np.asarray(df[col], dtype=np.float64)).tobytes())
    return h.hexdigest()[:16]
