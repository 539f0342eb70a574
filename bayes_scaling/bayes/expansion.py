"""Model expansion: the law plus a second-order polynomial in its log inputs, integrated out.

The model of a row ``x`` (docs/forecasting.md, "Model expansion")::

    log L = log f(theta, x) + phi(x)' c + noise,     c ~ N(0, s^2 I)

``phi`` is every term of degree 1 and 2 of the centred scaled coordinates ``v = u - 1/2`` of the
law's input columns that vary in the fitted table (``u`` in ``[0, 1]`` over the fitted range,
:class:`~bayes_scaling.bayes.intervals.FittedRange`): ``v_k``, ``v_k^2`` and ``v_k v_l``. ``c`` is
what the law misses, up to second order, across its fitted range (in log loss); ``s`` its prior
scale (continuous model expansion: Gelman et al. 2013, *Bayesian Data Analysis*, Section 7.4).

Linearised in ``theta`` around the posterior mode (Jacobian ``J`` of ``log f`` at the fitted
rows), the law's parameters absorb what they can of ``phi``: with ``Q`` an orthonormal basis of
the complement of the columns of ``J``, ``z = Q' r`` (``r`` the log residuals at the mode) and
``Psi = Q' Phi``,

    z ~ N(Psi c, sigma^2 I)   =>   c | data ~ N(V Psi' z / sigma^2, V),
    V = (Psi' Psi / sigma^2 + I / s^2)^-1,

and a forecast row moves by ``phi_perp(x)' c`` with ``phi_perp(x) = phi(x) - j(x) A``,
``A = J^+ Phi`` (the parameters' shift when the expansion is present). The predictive draws are
the posterior's own draws times ``exp(phi_perp(x)' c_s)``, one ``c_s`` per draw shared by all
rows. ``sigma`` is the restricted maximum-likelihood estimate given ``s`` (the residuals'
scatter left once the expansion is allowed for), and :meth:`Expansion.log_evidence` the
restricted log marginal likelihood of ``s``, from which a pooled ``s`` is estimated across tables.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from ..errors import BayesScalingError
from .intervals import FittedRange, fitted_table, input_columns
from .predictive import law_inputs

__all__ = ["EXPANSION_SCALE", "Expansion", "expansion_scale", "expansion_terms"]

#: Prior scale ``s`` of the expansion coefficients (log loss across the fitted range): the scale
#: the restricted evidence of nine real datasets' training tables, pooled with each dataset
#: weighted equally, prefers on the grid 0.01..1 (``analyses/forecast_honesty.py --variants
#: expansion``; docs/forecasting.md, "Model expansion").
EXPANSION_SCALE = 0.5
_RANK_TOL = 1e-9


def expansion_scale(post) -> float:
    """The prior scale a posterior's expansion uses: ``settings["expansion_scale"]``, else
    :data:`EXPANSION_SCALE`.

    Raises:
        BayesScalingError: the scale is not a finite number >= 0.
    """
    value = post.settings.get("expansion_scale", EXPANSION_SCALE)
    try:
        scale = float(value)
    except (TypeError, ValueError):
        scale = float("nan")
    if not (np.isfinite(scale) and scale >= 0):
        raise BayesScalingError(f"settings['expansion_scale'] must be a finite number >= 0 (the "
                                f"prior sd of the expansion's coefficients), got {value!r}")
    return scale


def expansion_terms(V: np.ndarray, cols) -> tuple[np.ndarray, list[str]]:
    """The basis ``phi`` (``(n, m)``) of centred coordinates ``V`` (``(n, K)``) and term names."""
    K = V.shape[1]
    terms, names = [], []
    for k in range(K):
        terms.append(V[:, k])
        names.append(cols[k])
    for k, j in itertools.combinations_with_replacement(range(K), 2):
        terms.append(V[:, k] * V[:, j])
        names.append(f"{cols[k]}^2" if k == j else f"{cols[k]}*{cols[j]}")
    return np.stack(terms, 1) if terms else np.zeros((len(V), 0)), names


class Expansion:
    """The expansion of a posterior's law on its fitted table (built once per posterior)."""

    def __init__(self, post):
        self.post = post
        table = fitted_table(post)
        rng = FittedRange(table, input_columns(post.law))
        self.vary = np.ptp(rng.F, 0) > 0 if len(table) else np.zeros(len(rng.cols), bool)
        self.range = rng
        self.cols = [c for c, v in zip(rng.cols, self.vary) if v]
        self.free = [n for n in post.settings["free"] if n != "sigma"]
        self.theta = {k: float(v) for k, v in post.map.items() if k != "sigma"}
        Phi, self.names = self._phi(table)
        J, logf = self._jacobian(table)
        r = np.log(np.asarray(table["loss"], float)) - logf
        # column-scaled SVD of J: the complement Q, and A = J^+ Phi
        norms = np.linalg.norm(J, axis=0)
        norms = np.where(norms > 0, norms, 1.0)
        U, S, Wt = np.linalg.svd(J / norms, full_matrices=True)
        rank = int(np.sum(S > _RANK_TOL * max(S.max(initial=0.0), 1e-300)))
        self.A = ((Wt[:rank].T / S[:rank]) @ U[:, :rank].T @ Phi) / norms[:, None]
        Q = U[:, rank:]
        self.z, self.Psi = Q.T @ r, Q.T @ Phi
        d_u, d, _ = np.linalg.svd(self.Psi, full_matrices=False)
        keep = d > _RANK_TOL * max(d.max(initial=0.0), 1e-300)
        self.lam, self.w = d[keep] ** 2, d_u[:, keep].T @ self.z
        self.rest = float(self.z @ self.z - self.w @ self.w)
        self.dof = len(self.z) - len(self.lam)
        s_post = np.asarray(post.draws("sigma")) if "sigma" in post.param_names else None
        self.sigma_fit = float(np.median(s_post)) if s_post is not None else float(
            post.settings.get("scale") or 0.0)
        self._by_scale = {}  # s -> (sigma, coefficient mean, coefficient covariance)

    # --- pieces --------------------------------------------------------------------------------
    def _phi(self, df: pd.DataFrame):
        X = self.range.scale(df)[:, self.vary] - 0.5 if len(self.cols) else np.zeros((len(df), 0))
        return expansion_terms(X, self.cols)

    def _jacobian(self, df: pd.DataFrame):
        x = {k: jnp.asarray(v) for k, v in law_inputs(self.post.law, df).items()}
        fixed = {k: jnp.asarray(v) for k, v in self.theta.items() if k not in self.free}
        fn = self.post.law.fn

        def logf(vec):
            p = dict(fixed)
            p.update({k: vec[i] for i, k in enumerate(self.free)})
            return jnp.log(fn(p, x))

        vec = jnp.asarray([self.theta[k] for k in self.free], dtype=jnp.float64)
        J = np.asarray(jax.jacfwd(logf)(vec), float).reshape(len(df), len(self.free))
        return J, np.asarray(logf(vec), float).reshape(len(df))

    def _loglik(self, log_s2, s):
        s2 = np.exp(log_s2)
        v = s2 + s**2 * self.lam
        return -0.5 * (self.dof * log_s2 + np.sum(np.log(v)) + self.rest / s2
                       + np.sum(self.w**2 / v))

    # --- the expansion's posterior ---------------------------------------------------------------
    def _posterior(self, s: float):
        """``(sigma, mean, cov)`` at scale ``s``, computed once per scale (forecasts and plans
        ask for the same scale many times)."""
        if s not in self._by_scale:
            if self.dof < 3 or self.rest <= 0:
                sigma = self.sigma_fit
            else:
                res = minimize_scalar(lambda t: -self._loglik(t, s), bounds=(-40.0, 5.0),
                                      method="bounded")
                sigma = float(np.exp(0.5 * res.x))
            m = self.Psi.shape[1]
            if m == 0 or s <= 0:
                mean, V = np.zeros(m), np.zeros((m, m))
            else:
                s2 = max(sigma, 1e-12) ** 2
                V = np.linalg.inv(self.Psi.T @ self.Psi / s2 + np.eye(m) / s**2)
                V = 0.5 * (V + V.T)
                mean = V @ self.Psi.T @ self.z / s2
            self._by_scale[s] = (sigma, mean, V)
        return self._by_scale[s]

    def sigma(self, s: float) -> float:
        """Restricted maximum-likelihood noise sd given the expansion scale ``s`` (the fitted
        noise when the table leaves too few residual degrees of freedom)."""
        return self._posterior(s)[0]

    def log_evidence(self, s: float) -> float:
        """Restricted log marginal likelihood of ``s`` (noise profiled), up to a constant shared
        by every ``s`` of this table."""
        if self.dof < 3 or self.rest <= 0:
            return 0.0
        return float(self._loglik(2 * np.log(self.sigma(s)), s))

    def coefficients(self, s: float):
        """``(mean, cov)`` of ``c`` given the table at prior scale ``s``."""
        return self._posterior(s)[1:]

    def phi_perp(self, df: pd.DataFrame) -> np.ndarray:
        """``(n, m)``: what each coefficient moves the forecast of a row of ``df`` by, once the
        law's parameters have absorbed what they can of it."""
        Phi, _ = self._phi(df)
        J, _ = self._jacobian(df)
        return Phi - J @ self.A

    def draws(self, df: pd.DataFrame, s: float, n_draws: int, rng) -> np.ndarray:
        """``(S, n)`` log-loss shifts ``phi_perp(x)' c_s`` of the rows of ``df``."""
        mean, cov = self.coefficients(s)
        if not len(mean):
            return np.zeros((n_draws, len(df)))
        L = np.linalg.cholesky(cov + 1e-18 * np.eye(len(mean)))
        c = mean + rng.standard_normal((n_draws, len(mean))) @ L.T
        return c @ self.phi_perp(df).T

    def describe(self, s: float) -> str:
        return (f"second-order expansion in log {', log '.join(self.cols)} "
                f"({len(self.names)} terms, prior scale {s:g})" if self.cols else
                "no expansion: no input column varies in the fitted table")
