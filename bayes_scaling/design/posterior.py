"""A cheap posterior of a law given the runs bought: a Laplace mixture over the fit's modes, with
Gaussian noise and a model-discrepancy term (docs/design.md, "The posterior").

    y_i = f(x_i; theta) + delta(x_i) + eps_i,   eps_i ~ N(0, sigma^2),
    delta ~ GP(0, s_d^2 k),  k(a, b) = exp(-|z_a - z_b|^2 / (2 l^2)),
    theta: uniform in the law's box (log-uniform for positive scale parameters),

with ``z`` the log inputs standardised over the pool. The posterior of theta is approximated by
one Gaussian per distinct local minimum of the least-squares fit (in the unconstrained
coordinates of :class:`~bayes_scaling.laws.Param`, where the box prior is a standard logistic
density), weighted by its Laplace evidence. ``sigma^2`` is the posterior mean under an
inverse-gamma prior IG(a0, a0 s0^2), s0^2 = 1e-3 Var(pool targets), and
``s_d = max(sigma, 0.1 sd(pool targets))``: a misfit the runs bought cannot reveal near them but
that grows away from them.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from scipy.spatial.distance import cdist

from ..data import input_space
from ..laws import Law
from .fitting import (Starts, from_unconstrained, jacobian_u, least_squares, predictor,
                      to_unconstrained, uniform_starts)

U_CLIP = 30.0  # unconstrained coordinates of a parameter sitting on its bound
MAX_MODES = 4
LOGW_DROP = 10.0  # modes whose log weight is more than this below the best are dropped
A0, S0_REL = 2.0, 1e-3
#: Worlds the plans of ``bayes`` and ``recommend`` are refitted in (``simulate``; docs/design.md).
WORLDS = 16
DISC_REL = 0.1  # prior scale of the law's misfit away from the runs: 10% of the pool's spread


def noise_variance(sse: float, n: int, pool_y) -> float:
    """Posterior mean of sigma^2 under IG(a0, a0 s0^2): ``(a0 s0^2 + SSE/2) / (a0 + n/2 - 1)``."""
    s0 = S0_REL * float(np.var(pool_y)) + 1e-12
    return (A0 * s0 + 0.5 * sse) / (A0 + 0.5 * n - 1.0)


def log_inputs(law: Law, x: dict, ref: dict) -> np.ndarray:
    """Inputs standardised by the pool ``ref`` (constant columns dropped): (rows, dims); in log
    space where the pool's column is positive (:func:`~bayes_scaling.data.input_space`)."""
    cols = []
    for v in law.variables:
        lr = input_space(ref[v])
        sd = lr.std()
        if sd > 0:
            cols.append((input_space(ref[v], x[v]) - lr.mean()) / sd)
    return np.stack(cols, -1) if cols else np.zeros((len(next(iter(x.values()))), 1))


def kernel(za, zb, length=1.0) -> np.ndarray:
    """Squared-exponential kernel ``exp(-|a - b|^2 / (2 l^2))`` between the rows of ``za`` and
    ``zb``."""
    return np.exp(-0.5 * cdist(za, zb, "sqeuclidean") / length ** 2)


@dataclass
class LaplaceMixture:
    """Gaussian modes in the unconstrained coordinates, their weights, noise and discrepancy."""

    law: Law
    u: np.ndarray  # (K, P) mode centres
    cov: np.ndarray  # (K, P, P)
    weights: np.ndarray  # (K,)
    sigma2: float
    disc2: float  # discrepancy amplitude s_d^2
    z_obs: np.ndarray  # standardised log inputs of the observed runs
    x_ref: dict  # the pool, which standardises inputs

    @classmethod
    def from_starts(cls, law: Law, pool, observed, starts: Starts, *, discrepancy: float = 1.0):
        """Build from a multi-start least-squares fit of ``law`` to the runs ``observed`` (indices
        into ``pool``, a :class:`~bayes_scaling.design.task.Group`, which also gives the input
        scale and the target variance of the noise prior). Jacobians are taken over the whole
        pool (one compiled program per law, whatever the number of runs bought)."""
        observed = np.asarray(observed, dtype=int)
        ok = np.isfinite(starts.sse)
        order = np.argsort(np.where(ok, starts.sse, np.inf))[: int(ok.sum())]
        sigma2 = noise_variance(float(starts.sse[order[0]]), len(observed), pool.y)
        keep, preds = [], []
        for i in order:
            if (starts.sse[i] - starts.sse[order[0]]) / (2 * sigma2) > LOGW_DROP:
                break
            p = np.asarray(predictor(law)(starts.theta[i][None], pool.x))[0]
            if not np.all(np.isfinite(p)):
                continue
            if any(np.max(np.abs(p - q)) < 0.1 * np.sqrt(sigma2) for q in preds):
                continue
            keep.append(i)
            preds.append(p)
            if len(keep) == MAX_MODES:
                break
        if not keep:  # every start predicts a non-finite value somewhere in the pool
            keep = [order[0]]
        xj = {k: jnp.asarray(v) for k, v in pool.x.items()}
        us, covs, logw = [], [], []
        for i in keep:
            u = np.clip(np.asarray(to_unconstrained(law, jnp.asarray(starts.theta[i]))),
                        -U_CLIP, U_CLIP)
            _, J = jacobian_u(law)(jnp.asarray(u), xj)
            J = np.nan_to_num(np.asarray(J)[observed], nan=0.0, posinf=0.0, neginf=0.0)
            s = 1.0 / (1.0 + np.exp(-u))
            H = J.T @ J / sigma2 + np.diag(s * (1.0 - s) + 1e-12)
            w, V = np.linalg.eigh(H)
            w = np.maximum(w, 1e-10 * max(w.max(), 1e-12))
            logprior = float(np.sum(np.log(s + 1e-300) + np.log1p(-s + 1e-300)))
            logw.append(-starts.sse[i] / (2 * sigma2) + logprior - 0.5 * np.sum(np.log(w)))
            us.append(u)
            covs.append((V / w) @ V.T)
        logw = np.array(logw)
        wts = np.exp(logw - logw.max())
        z_pool = log_inputs(law, pool.x, pool.x)
        disc2 = discrepancy * max(sigma2, (DISC_REL * np.std(pool.y)) ** 2)
        return cls(law, np.array(us), np.array(covs), wts / wts.sum(), sigma2, disc2,
                   z_pool[observed], pool.x)

    # --- the discrepancy GP, conditioned on the observed runs -------------------------------------
    def discrepancy_cov(self, za, zb=None) -> np.ndarray:
        """Posterior covariance of delta between rows (standardised log inputs) ``za`` and ``zb``
        after the observed runs (noise sigma^2): ``s_d^2 (K_ab - K_aO (K_OO + r I)^-1 K_Ob)``."""
        zb = za if zb is None else zb
        Koo = kernel(self.z_obs, self.z_obs) + (self.sigma2 / self.disc2) * np.eye(len(self.z_obs))
        Kao, Kbo = kernel(za, self.z_obs), kernel(zb, self.z_obs)
        return self.disc2 * (kernel(za, zb) - Kao @ np.linalg.solve(Koo, Kbo.T))

    def z(self, x: dict) -> np.ndarray:
        return log_inputs(self.law, x, self.x_ref)

    # --- predictions -----------------------------------------------------------------------------
    def draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` parameter draws (natural space) from the mixture."""
        k = rng.choice(len(self.weights), size=n, p=self.weights)
        eps = rng.standard_normal((n, self.u.shape[1]))
        L = np.linalg.cholesky(self.cov + 1e-12 * np.eye(self.u.shape[1]))
        u = self.u[k] + np.einsum("nij,nj->ni", L[k], eps)
        return np.asarray(from_unconstrained(self.law, jnp.asarray(u)))

    def predictive(self, x: dict, n: int = 1000, rng=None, linear: bool = False) -> np.ndarray:
        """Draws of a new observation at rows ``x`` (law + discrepancy + noise): (n, rows).

        ``linear=False``: the law at parameter draws from each mode's Gaussian. ``linear=True``:
        each mode's delta-method Gaussian in prediction space, ``N(f(u_m), J_m S_m J_m')``, the
        approximation the acquisition uses; a parameter pinned at a bound (flat direction in the
        logit coordinates, near-zero prior curvature) then stays there instead of being drawn
        anywhere in its box."""
        rng = np.random.default_rng(0) if rng is None else rng
        xj = {k: jnp.asarray(v) for k, v in x.items()}
        if linear:
            k = rng.choice(len(self.weights), size=n, p=self.weights)
            theta = from_unconstrained(self.law, jnp.asarray(self.u))
            mu = np.asarray(predictor(self.law)(theta, xj))
            sd = np.sqrt(np.clip([np.einsum("rp,pq,rq->r", J, S, J)
                                  for J, S in zip(self.jacobians(x), self.cov)], 0, None))
            f = mu[k] + sd[k] * rng.standard_normal((n, mu.shape[1]))
        else:
            f = np.asarray(predictor(self.law)(jnp.asarray(self.draws(n, rng)), xj))
        z = self.z(x)
        extra = np.clip(np.diag(self.discrepancy_cov(z)), 0, None) + self.sigma2
        return f + np.sqrt(extra) * rng.standard_normal(f.shape)

    def quantiles(self, x: dict, qs=(0.05, 0.5, 0.95), n: int = 1000, rng=None,
                  linear: bool = False) -> np.ndarray:
        """Predictive quantiles at rows ``x``: (len(qs), rows); non-finite draws are dropped."""
        d = self.predictive(x, n, rng, linear=linear)
        d = np.where(np.isfinite(d), d, np.nan)
        return np.nanquantile(d, qs, axis=0)

    def jacobians(self, x: dict) -> list[np.ndarray]:
        """Each mode's Jacobian of the law over rows ``x`` in the unconstrained coordinates."""
        xj = {k: jnp.asarray(v) for k, v in x.items()}
        return [np.nan_to_num(np.asarray(jacobian_u(self.law)(jnp.asarray(u), xj)[1]))
                for u in self.u]

    def spread_factor(self, x: dict) -> np.ndarray:
        """``F`` (rows, modes) with ``F F'`` the covariance of the modes' predictions over rows
        ``x``, ``sum_k w_k (m_k - m)(m_k - m)^T`` (``m_k`` the law at mode ``k``'s centre, ``m``
        their weighted mean): ``F = (sqrt(w_k) (m_k - m))_k``."""
        theta = from_unconstrained(self.law, jnp.asarray(self.u))
        means = np.nan_to_num(np.asarray(predictor(self.law)(
            theta, {k: jnp.asarray(v) for k, v in x.items()})))
        return (np.sqrt(self.weights)[:, None] * (means - self.weights @ means)).T

    def joint_cov(self, x: dict) -> np.ndarray:
        """Covariance of the law's value plus discrepancy over rows ``x`` under the mixture, in the
        linear-Gaussian approximation of each mode (law of total covariance):
        ``sum_k w_k J_k S_k J_k^T + sum_k w_k (m_k - m)(m_k - m)^T + Cov_delta``."""
        xj = {k: jnp.asarray(v) for k, v in x.items()}
        means, C = [], 0.0
        for u, S, w in zip(self.u, self.cov, self.weights):
            m, J = jacobian_u(self.law)(jnp.asarray(u), xj)
            J = np.nan_to_num(np.asarray(J))
            means.append(np.nan_to_num(np.asarray(m)))
            C = C + w * (J @ S @ J.T)
        means = np.array(means)
        dev = means - self.weights @ means
        C = C + (self.weights[:, None] * dev).T @ dev
        return C + self.discrepancy_cov(self.z(x))

    # --- designs judged by the refit they lead to ------------------------------------------------
    def refit_errors(self, x_pool: dict, done, designs: list, x_targets: dict, worlds: int,
                     starts: int, rng: np.random.Generator) -> np.ndarray:
        """The summed squared error at the targets of the least-squares refit of the law (the
        best SSE of ``starts`` uniform starts, as the protocol refits) after each design, in
        each of ``worlds`` worlds drawn from this posterior (docs/design.md, "Plans judged in
        simulated worlds"); their mean over the worlds estimates the design's expected error.

        In world ``m`` the truth is the law at a draw ``theta_m`` of the mixture plus a draw
        ``delta_m`` of the discrepancy GP (unconditioned, amplitude ``s_d^2``) over the runs done,
        every design's runs and the targets; runs are observed with the noise ``sigma^2``. Each
        design (indices into ``x_pool``: the runs it adds to those done, ``done``) is refitted on
        its runs plus those done and scored against the world's truth at the targets. Every
        design meets the same worlds and starts (a paired comparison). Returns the summed
        squared errors, (designs, worlds), ``inf`` where a refit failed; :func:`overruled` reads
        them."""
        done = np.asarray(done, int)
        theta = self.draws(worlds, rng)
        theta0 = uniform_starts(self.law, starts, rng)
        nt = len(next(iter(x_targets.values())))
        union = np.unique(np.concatenate([done] + [np.asarray(d, int) for d in designs]))
        rows = {v: np.concatenate([x_targets[v], x_pool[v][union]]) for v in x_targets}
        z = self.z(rows)
        chol = np.linalg.cholesky(self.disc2 * (kernel(z, z) + 1e-12 * np.eye(len(z))))
        truth = np.asarray(predictor(self.law)(theta, rows)) + (
            chol @ rng.standard_normal((len(z), worlds))).T
        obs = truth[:, nt:] + np.sqrt(self.sigma2) * rng.standard_normal((worlds, len(union)))
        errors = np.full((len(designs), worlds), np.inf)
        for d, design in enumerate(designs):
            bought = np.concatenate([done, np.asarray(design, int)])
            cols = np.searchsorted(union, bought)
            x = {v: a[bought] for v, a in x_pool.items()}
            for m in range(worlds):
                if not np.all(np.isfinite(obs[m, cols])):
                    continue
                st = least_squares(self.law, x, obs[m, cols], theta0)
                if st.ok:
                    f = np.asarray(predictor(self.law)(st.best[None], x_targets))[0]
                    errors[d, m] = float(np.sum((f - truth[m, :nt]) ** 2))
        return errors


def log_ratios(errors, default: int = 0) -> np.ndarray:
    """The paired evidence against design ``default``: ``log(e_default / e_d)`` per design
    (rows) and world (columns) of ``errors`` (:meth:`LaplaceMixture.refit_errors`), positive
    where design ``d`` did better. A world where a refit failed (``inf``) counts against its
    design by twice the largest finite ratio seen, plus one; worlds where both failed count 0."""
    e = np.maximum(np.asarray(errors, float), 1e-300)
    with np.errstate(invalid="ignore"):
        r = np.log(e[default]) - np.log(e)
    ok = np.isfinite(r)
    big = 2 * (np.max(np.abs(r[ok])) if ok.any() else 1.0) + 1
    return np.where(np.isnan(r), 0.0, np.clip(r, -big, big))


def overruled(errors, default: int, factor: float = 2.0, t: float = 1.0) -> int:
    """The design the simulated worlds choose over the linearised criterion's choice
    ``default`` (rows of ``errors``: designs, columns: worlds, as
    :meth:`LaplaceMixture.refit_errors` returns them): among the designs ``factor`` times better
    than ``default`` both on average (mean error) and typically (the mean of the paired log
    error ratio, :func:`log_ratios`, at least ``log factor``), with that mean above ``t``
    standard errors, the one with the lowest mean error; else ``default``. A handful of worlds
    is a noisy estimate: plans the worlds score alike are the criterion's to choose between, and
    a few wild worlds do not decide alone (the mean error of two plans whose refits both blow up
    in some worlds is those worlds')."""
    e = np.asarray(errors, float)
    if e.shape[1] < 2:
        return default
    means = e.mean(1)
    r = log_ratios(e, default)
    best = default
    for d in range(len(e)):
        if d == default or not (means[d] * factor <= means[default]):
            continue
        m = r[d].mean()
        if (m >= np.log(factor) and m > t * r[d].std(ddof=1) / np.sqrt(e.shape[1])
                and means[d] < means[best]):
            best = d
    return best
