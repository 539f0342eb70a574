"""Modes of the posterior: multi-start MAP, damped Newton in the sampling coordinates, the Laplace
approximation and draws from it.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..errors import FitError
from ..fit import feasible_starts, lbfgs_multistart
from .distributions import HUBER_C
from .likelihood import STUDENT_DF
from .model import cached, log_joint_batch, map_objective, map_objective_batch, to_s_batch
from .spec import Spec, data_pytree, make_spec


@dataclass
class Mode:
    """A local mode of the sampled density with its Laplace approximation."""

    s: np.ndarray
    log_density: float
    cov: np.ndarray
    chol: np.ndarray  # a square root of cov (chol @ chol.T == cov), not necessarily triangular
    log_mass: float  # log density + 0.5 log det(2 pi cov): Laplace estimate of the mode's mass
    hessian_ok: bool


def laplace(spec, data, s) -> Mode:
    lj, _, H = (np.asarray(a) for a in _newton_pieces(spec)(jnp.asarray(s), data))
    lj = float(lj)
    H = 0.5 * (H + H.T)
    ok = bool(np.all(np.isfinite(H)))
    if ok:
        w, V = np.linalg.eigh(H)
        ok = bool(w.min() > 0)
    else:
        w, V = np.ones(len(s)), np.eye(len(s))
    # floor the curvature (a flat or non-convex direction gets unit scale)
    w = np.maximum(w, max(1e-8 * w.max(), 1e-6) if ok else 1.0)
    if not ok:
        w = np.maximum(w, 1.0)
    cov = (V / w) @ V.T
    cov = 0.5 * (cov + cov.T)
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        # eigenvalues spanning ~1e16 defeat Cholesky; the symmetric square root from the
        # eigendecomposition serves every use of chol (chol @ z, solves against it)
        chol = (V / np.sqrt(w)) @ V.T
    log_mass = lj + 0.5 * (len(s) * math.log(2 * math.pi) - np.sum(np.log(w)))
    return Mode(np.asarray(s), lj, cov, chol, log_mass, ok)


# at most this many batches of candidate starts are drawn by map_stage's screen
SCREEN = 8


def screened_inits(spec, args, n_starts, seed):
    """``n_starts`` initial values from the init ranges where the posterior density is finite.

    A start where it is not finite (a law with signed coefficients drawn from wide bounds often
    predicts a negative loss at some row) cannot move, so L-BFGS wastes it. Candidates are drawn
    in batches of ``n_starts`` (``sample_inits``: the first batch is the plain draw of ``seed``,
    batch ``k`` that of ``[seed, k]``) until ``n_starts`` have a finite density or ``SCREEN``
    batches were drawn; the first finite ones are kept, in draw order, so they are as spread as
    the ranges are, and a table where every start is finite keeps the plain draw. When too few
    are finite, the first non-finite ones are moved to where the law predicts at least half of
    every row's loss (:func:`~bayes_scaling.fit.feasible_starts`): init ranges a user
    chose wide for a signed coefficient (a decay term ``- C S`` with ``C`` drawn from (0, 1) on a
    table where ``S`` reaches 200) can leave no finite start in hundreds of draws. Non-finite
    ones fill what is still missing."""
    f = map_objective_batch(spec)
    kept, spare = [], []
    for k in range(SCREEN):
        cand = spec.space.sample_inits(n_starts, seed if k == 0 else [seed, k])
        ok = np.isfinite(np.asarray(f(spec.space.u_compiled(jnp.asarray(cand)), args)))
        kept += list(cand[ok])
        spare += list(cand[~ok])
        if len(kept) >= n_starts:
            break
    if len(kept) < n_starts:
        spare = np.stack(spare[:n_starts])
        moved = feasible_starts(spec.space, spare, args["data"], log_y=True)
        ok = np.isfinite(np.asarray(f(spec.space.u_compiled(jnp.asarray(moved)), args)))
        kept += list(moved[ok])
        spare = list(spare[~ok])
    return np.stack((kept + spare)[:n_starts])


def map_stage(spec, data, n_starts, seed, max_iter, inits=None):
    """Multi-start L-BFGS for the MAP in natural coordinates (the same optimiser as ``fit_map``)
    from ``inits`` or from :func:`screened_inits`."""
    n = float(np.sum(data["w"]))
    args = {"data": data, "n": jnp.asarray(n)}
    if inits is None:
        theta0 = screened_inits(spec, args, n_starts, seed)
    else:
        theta0 = np.atleast_2d(np.asarray(inits, float))
    u0 = np.asarray(spec.space.u_compiled(jnp.asarray(theta0)))
    u_map, v_map, it_map, g_map = lbfgs_multistart(map_objective(spec), u0, args,
                                                   max_iter=max_iter)
    finite = np.isfinite(v_map) & np.all(np.isfinite(u_map), 1)
    if not finite.any():
        raise FitError(f"all {len(u0)} starts of the posterior mode of {spec.law.name} ended "
                       "non-finite; check the table, the priors and the init ranges")
    best = int(np.argmin(np.where(finite, v_map, np.inf)))
    th = np.asarray(spec.space.theta_compiled(jnp.asarray(u_map)))
    theta_map = {p.name: float(th[best, i]) for i, p in enumerate(spec.free)}
    starts = pd.DataFrame({f"init_{p.name}": theta0[:, i] for i, p in enumerate(spec.free)})
    for i, p in enumerate(spec.free):
        starts[p.name] = th[:, i]
    starts["neg_log_post"] = v_map * n
    starts["n_iter"] = it_map
    starts["converged"] = finite & (g_map < 1e-5)
    return theta_map, float(v_map[best] * n), starts, (u_map[finite], v_map[finite])


def _newton_pieces(spec: Spec):
    def f(s, data):
        lp = spec.log_joint_s(s, data)
        return lp, jax.grad(spec.log_joint_s)(s, data), -jax.hessian(spec.log_joint_s)(s, data)
    return cached("newton", spec, lambda: jax.jit(f))


def _newton(spec, data, s, max_steps=100, tol=1e-9):
    """Damped Newton ascent of the sampled density from ``s`` (curvature floored to stay PD)."""
    pieces = _newton_pieces(spec)
    lp, g, H = (np.asarray(a) for a in pieces(jnp.asarray(s), data))
    if not np.isfinite(lp):
        return s, -np.inf
    for _ in range(max_steps):
        H = 0.5 * (H + H.T)
        if not np.all(np.isfinite(H)) or not np.all(np.isfinite(g)):
            break
        w, V = np.linalg.eigh(H)
        w = np.maximum(np.abs(w), max(1e-8 * np.abs(w).max(), 1e-10))
        step = V @ ((V.T @ g) / w)
        t, moved = 1.0, False
        while t > 1e-8:
            lp_new, g_new, H_new = (np.asarray(a) for a in pieces(jnp.asarray(s + t * step), data))
            if np.isfinite(lp_new) and lp_new >= lp + 1e-4 * t * float(g @ step):
                moved = True
                break
            t *= 0.5
        if not moved:
            break
        s, gain = s + t * step, lp_new - lp
        lp, g, H = lp_new, g_new, H_new
        if gain < tol and np.max(np.abs(t * step)) < 1e-7:
            break
    return s, float(lp)


def refine_mode(spec, data, s) -> Mode:
    """The mode of the sampled density nearest ``s`` (damped Newton) with its Laplace fit."""
    return laplace(spec, data, _newton(spec, data, np.asarray(s))[0])


# |u| beyond which a bounded parameter's value rounds onto its bound (sigmoid(37) == 1.0 in
# float64), and the smaller limits tried in turn when the value still rounds there
_U_LIMITS = (30.0, 15.0, 8.0)


def _sampling_starts(spec, data, u):
    """``u`` (starts in the unconstrained coordinates, one per row) in the sampling coordinates.

    An optimiser's endpoint can sit so far out in ``u`` that its value rounds onto a bound
    (a MAP at a parameter's upper bound: ``u = 40`` gives ``sigmoid(u) == 1.0``); the sampling
    coordinates of that value are infinite, and whether any start escapes it depended on the
    seed. Such a start's bounded parameters are pulled in to ``|u| <= 30`` (then 15, 8): the
    same point to within 1e-13 of the bounds' range, with finite coordinates; Newton then moves
    it to the mode of the sampled density."""
    to_s = to_s_batch(spec)
    s0 = np.array(to_s(jnp.asarray(u), data["ref"]))
    for c in _U_LIMITS:
        bad = ~np.all(np.isfinite(s0), axis=1)
        if not bad.any():
            break
        v = u[bad].copy()
        for i, p in enumerate(spec.space.free):
            if p.kind in ("interval", "log_interval"):
                v[:, i] = np.clip(v[:, i], -c, c)
            elif p.kind in ("lower", "upper"):
                v[:, i] = np.maximum(v[:, i], -c)
        s0[bad] = np.asarray(to_s(jnp.asarray(v), data["ref"]))
    return s0


def find_modes(spec, data, u_ok, values, max_starts=4):
    """Modes of the sampled density: damped Newton from the best distinct MAP endpoints (mapped
    into the sampling coordinates); distinct modes sorted by Laplace mass."""
    order = np.argsort(values)
    starts = []
    for j in order:
        if all(np.max(np.abs(u_ok[j] - u_ok[k])) > 1e-3 for k in starts):
            starts.append(j)
        if len(starts) >= max_starts:
            break
    return modes_from(spec, data, _sampling_starts(spec, data, np.asarray(u_ok[starts], float)))


def modes_from(spec, data, s0):
    """Distinct modes (sorted by Laplace mass) that damped Newton reaches from the points
    ``s0`` of the sampling space."""
    found = [_newton(spec, data, np.asarray(si, float)) for si in s0]
    found = [(si, lp) for si, lp in found if np.isfinite(lp)]
    if not found:
        raise FitError(f"no finite mode of the sampled density of {spec.law.name}")
    return _distinct_modes(spec, data, np.stack([f[0] for f in found]),
                           np.array([-f[1] for f in found]))


def map_estimate(law, df, *, priors=None, likelihood="huber", fixed=None, scale=None,
                 huber_c=HUBER_C, student_df=STUDENT_DF, n_starts=16, seed=0, max_iter=1000,
                 inits=None):
    """The posterior mode (MAP) in natural coordinates, by the multi-start L-BFGS of ``fit_map``.

    Natural coordinates are ``log theta`` for positive parameters and ``theta`` otherwise (where
    the default priors are Normal). With ``priors="flat"`` and ``scale=delta / huber_c`` this is
    the ``fit_map(law, df, delta=delta)`` Huber fit.

    Returns:
        (params, neg_log_posterior, starts): every parameter (fixed ones included) and ``sigma``;
        the minimised value; one row per start.
    """
    spec = make_spec(law, priors=priors, likelihood=likelihood, fixed=fixed, scale=scale,
                     c=huber_c, student_df=student_df, coordinates=None)
    data = data_pytree(spec, spec.space.validate(df))
    theta, nlp, starts, _ = map_stage(spec, data, n_starts, seed, max_iter, inits)
    params = {**theta, **spec.fixed}
    params["sigma"] = theta.get("sigma", spec.scale)
    return {k: params[k] for k in (*spec.law.param_names, "sigma")}, nlp, starts


def _distinct_modes(spec, data, s, neg_lp, max_modes=5, min_rel_mass=1e-3):
    """Group optimiser endpoints into distinct modes; keep those with >= min_rel_mass of the best.

    Two endpoints are one mode when the straight segment between them never drops more than
    ``3`` nats below the lower endpoint (no barrier), checked on 16 points of the segment.
    """
    order = np.argsort(neg_lp)
    kept_s, kept_v = [], []
    for j in order:
        if len(kept_s) >= max_modes:
            break
        if any(not _barrier(spec, data, s[j], neg_lp[j], ks, kv) for ks, kv in zip(kept_s, kept_v)):
            continue
        kept_s.append(s[j])
        kept_v.append(neg_lp[j])
    modes = [laplace(spec, data, sj) for sj in kept_s]
    modes.sort(key=lambda m: -m.log_mass)
    top = modes[0].log_mass
    return [m for m in modes if m.log_mass - top >= math.log(min_rel_mass)]


def _barrier(spec, data, s1, v1, s2, v2, depth=3.0):
    t = np.linspace(0.0, 1.0, 18)[1:-1, None]
    seg = (1 - t) * s1[None] + t * s2[None]
    lp = np.asarray(log_joint_batch(spec)(jnp.asarray(seg), data))
    return bool(np.min(lp) < -max(v1, v2) - depth)


def sample_laplace(spec, data, mode: Mode, num_chains, num_samples, seed):
    """Draws from the Laplace approximation in the sampling space, and its Pareto-k.

    ``k_hat`` is the Pareto shape of the importance ratios p(s)/q(s) (Yao et al. 2018, "Yes, but
    did it work?"): below 0.7 the Gaussian is a usable approximation of the posterior.
    """
    import arviz as az

    rng = np.random.default_rng(seed)
    z = rng.standard_normal((num_chains * num_samples, len(mode.s)))
    s = mode.s + z @ mode.chol.T
    log_p = np.asarray(log_joint_batch(spec)(jnp.asarray(s), data))
    log_q = -0.5 * np.sum(z * z, 1)
    lw = np.where(np.isfinite(log_p), log_p - log_q, -np.inf)
    lw = lw - np.max(lw[np.isfinite(lw)]) if np.isfinite(lw).any() else lw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, k_hat = az.psislw(np.where(np.isfinite(lw), lw, -1e10))
    return s.reshape(num_chains, num_samples, -1), float(k_hat), float(np.mean(~np.isfinite(log_p)))


@dataclass
class Basins:
    """A soft partition of the sampling space among the sampled modes: mode ``k`` owns the share
    ``r_k(x) = g_k(x) / sum_j g_j(x)`` of every point, with ``g_k`` the Gaussian of its draws
    (their mean and covariance); ``sum_k r_k = 1``. :meth:`assign` gives the largest share.

    With sides (``side_of`` labels points, ``sides[k]`` is mode ``k``'s side), the sum runs over
    the modes on the point's side only: a mode sampled in coordinates covering one side of the
    space owns nothing on another."""

    means: np.ndarray  # (K, d)
    chols: np.ndarray  # (K, d, d): Cholesky factors of the covariances
    sides: np.ndarray | None = None  # (K,) side label of each mode
    side_of: Callable | None = None  # (n, d) points -> (n,) side labels

    @classmethod
    def fit(cls, draws, sides=None, side_of=None) -> "Basins":
        d = draws[0].shape[-1]
        means, chols = [], []
        for x in draws:
            cov = np.atleast_2d(np.cov(x, rowvar=False)) + 1e-12 * np.eye(d)
            means.append(x.mean(0))
            chols.append(np.linalg.cholesky(cov))
        return cls(np.stack(means), np.stack(chols),
                   None if sides is None else np.asarray(sides), side_of)

    def log_gauss(self, x, k):
        """log N(x | mean_k, cov_k) for the rows of ``x``."""
        z = np.linalg.solve(self.chols[k], (x - self.means[k]).T).T
        half_logdet = np.sum(np.log(np.diag(self.chols[k])))
        return -0.5 * np.sum(z * z, 1) - half_logdet - 0.5 * x.shape[1] * math.log(2 * math.pi)

    def log_shares(self, x):
        """``log r_k(x)``: an array (K, n)."""
        lg = np.stack([self.log_gauss(x, k) for k in range(len(self.means))])
        if self.sides is not None:
            lg = np.where(self.sides[:, None] == np.asarray(self.side_of(x))[None], lg, -np.inf)
        norm = np.logaddexp.reduce(lg, 0)
        return np.where(np.isfinite(norm), lg - norm, -np.inf)

    def assign(self, x):
        """Index of the mode with the largest share of every row of ``x``."""
        return np.argmax(self.log_shares(x), 0)

    def draw(self, k, n, rng):
        return self.means[k] + rng.standard_normal((n, self.means.shape[1])) @ self.chols[k].T


def basin_log_masses(log_density, draws, rng, tol=1e-10, max_iter=1000, sides=None,
                     side_of=None):
    """Log posterior mass of each mode, by bridge sampling (Meng & Wong 1996, Eq. (4.1); the
    iterative optimal bridge as in Gronau et al. 2017, "A tutorial on bridge sampling", Eq. (10)).

    ``log_density`` maps an ``(n, d)`` array of points to the unnormalised log posterior;
    ``draws[k]`` are posterior draws from mode ``k`` (its chains pooled). The modes share the
    space softly (:class:`Basins`, fitted on the first half of each mode's draws); mode ``k``'s
    mass is ``Z_k = integral of p r_k``, bridged between the second half of its draws and as
    many draws from its Gaussian ``g_k``. The shares add up to 1, so the ``Z_k`` add up to the
    whole normalising constant, and ``Z_k / sum Z`` is each mode's posterior probability. The
    ratio bridged, ``p r_k / g_k = p / sum_j g_j``, stays bounded wherever some mode's Gaussian
    covers the posterior (a hard cut would let one mode's Gaussian tail reach into another mode's
    peak). Unlike the Laplace mass, this is exact in the limit of many draws whatever the shape
    of a well-separated mode (skewed, heavy-tailed, curved). With ``sides`` and ``side_of`` (see
    :class:`Basins`) the shares are split by side first: exact for modes sampled one side each,
    however the sides meet.

    Returns:
        (log_masses, basins): the log ``Z_k`` (unnormalised, like the density) and the shares.
    """
    halves = [(x[: len(x) // 2], x[len(x) // 2:]) for x in draws]
    basins = Basins.fit([h[0] for h in halves], sides, side_of)
    out = []
    for k, (_, x1) in enumerate(halves):
        x2 = basins.draw(k, len(x1), rng)
        l1 = _log_ratio(log_density, basins, k, x1)
        l2 = _log_ratio(log_density, basins, k, x2)
        log_s1 = log_s2 = math.log(0.5)
        fin = l2[np.isfinite(l2)]
        if fin.size == 0:
            out.append(-np.inf)
            continue
        log_r = float(np.logaddexp.reduce(fin) - math.log(len(l2)))  # importance-sampling start
        for _ in range(max_iter):
            num = np.logaddexp.reduce(l2 - np.logaddexp(log_s1 + l2, log_s2 + log_r))
            den = np.logaddexp.reduce(-np.logaddexp(log_s1 + l1, log_s2 + log_r))
            new = float(num - den)  # the 1/N2 and 1/N1 cancel (N1 == N2)
            if abs(new - log_r) < tol:
                log_r = new
                break
            log_r = new
        out.append(log_r)
    return np.asarray(out), basins


def _log_ratio(log_density, basins, k, x):
    """``log p(x) r_k(x) - log g_k(x)`` (``-inf`` outside the support)."""
    lp = np.asarray(log_density(x), float)
    ratio = lp + basins.log_shares(x)[k] - basins.log_gauss(x, k)
    return np.where(np.isfinite(lp), ratio, -np.inf)
