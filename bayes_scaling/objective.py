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
"""
from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np


def huber(r, delta):
    """Elementwise Huber_delta(r) (quadratic inside |r| <= delta, linear outside)."""
    a = jnp.abs(r)
    return jnp.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def log_residuals(pred, y):
    """r_i = log Lhat_i - log L_i."""
    return jnp.log(pred) - jnp.log(y)


def huber_objective(pred, y, delta):
    """Summed Huber loss of the log residuals: the MAP objective J."""
    return jnp.sum(huber(log_residuals(pred, y), delta))


def huber_log_normaliser(c):
    """log Z(c) for the density proportional to exp(-rho_c(z)) on the real line."""
    c = jnp.asarray(c, dtype=jnp.float64)
    gauss = jnp.sqrt(2.0 * jnp.pi) * jss.erf(c / jnp.sqrt(2.0))
    return jnp.log(gauss + 2.0 * jnp.exp(-0.5 * c * c) / c)


def huber_logpdf(r, scale, c):
    """Pointwise log density of residual ``r`` under the Huber likelihood (scale, threshold c)."""
    z = r / scale
    return -huber(z, c) - jnp.log(scale) - huber_log_normaliser(c)


def data_hash(df, columns) -> str:
    """A short sha256 of the values of ``columns`` (records which data a result was fitted on)."""
    import hashlib

    h = hashlib.sha256()
    for col in sorted(columns):
        h.update(col.encode())
        h.update(np.ascontiguousarray(np.asarray(df[col], dtype=np.float64)).tobytes())
    return h.hexdigest()[:16]
