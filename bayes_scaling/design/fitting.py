"""Least-squares fits of a law on raw targets, as ScaleBench scores a selection (SOURCE.md).

The benchmark's refit: sum of squared residuals of the raw target, L-BFGS-B inside the bounds,
``n_starts`` (64) initial points drawn uniformly in the bounds, at most 2000 iterations each, the
best start kept; a fit with no finite start fails. Two implementations:

- ``method="jax"`` (default): every start in one compiled program
  (:func:`bayes_scaling.fit.lbfgs_multistart`), each parameter mapped to the real line by its
  :class:`~bayes_scaling.laws.Param` transform so the bounds always hold; one program per law and
  row bucket serves every refit.
- ``method="scipy"``: the benchmark's loop of scipy L-BFGS-B runs with box bounds (jitted value
  and gradient), kept as the reference.

``analyses/scalebench.py --speed`` measures both (time and R^2); docs/design.md quotes it.
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field, replace

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize

from ..errors import DataError
from ..fit import lbfgs_multistart
from ..params import pad_rows
from ..laws import Law
from ..programs import Programs


def per_law(build):
    """Cache ``build(law)`` per law function and parameter specs (a :class:`Law` holds dicts, so it
    is not hashable itself): one compiled program per law, reused by every refit (the most
    recently used laws' only, ``bayes_scaling.programs``)."""
    cache = Programs(8, build.__name__)

    @functools.wraps(build)
    def get(law: Law):
        return cache.get((law.fn, law.params), lambda: build(law))

    return get


@dataclass(frozen=True)
class Starts:
    """Every start of a multi-start fit: final points, their objectives, and the best one."""

    theta: np.ndarray  # (n_starts, n_params), natural space
    sse: np.ndarray  # (n_starts,), inf where the start failed
    theta0: np.ndarray | None = field(default=None, repr=False)  # the initial points

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.sse).any())

    @property
    def best(self) -> np.ndarray | None:
        """The best start's parameters, or None when every start failed."""
        if not self.ok:
            return None
        return self.theta[int(np.argmin(self.sse))]


def uniform_starts(law: Law, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` points drawn uniformly in the law's bounds (the benchmark's draw, one row per start,
    nudged strictly inside the bounds so the unconstraining transforms stay finite)."""
    lo = np.array([p.lower for p in law.params])
    hi = np.array([p.upper for p in law.params])
    margin = 1e-9 * (hi - lo)
    return np.clip(lo + (hi - lo) * rng.random((n, len(lo))), lo + margin, hi - margin)


#: The seed of the benchmark's fitter, whose generator draws the point a failed refit returns.
BENCHMARK_FITTER_SEED = 42


def benchmark_fallback(law: Law) -> np.ndarray:
    """The parameter vector the benchmark's fitter returns when every start of a refit failed: one
    uniform draw in the bounds from a generator seeded with its fitter's seed (42), the same for
    every refit of a law (SOURCE.md; the project's own refit scores such a checkpoint -1)."""
    lo = np.array([p.lower for p in law.params])
    hi = np.array([p.upper for p in law.params])
    return lo + (hi - lo) * np.random.default_rng(BENCHMARK_FITTER_SEED).random(len(lo))


def prior_starts(law: Law, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` points from each parameter's init range (log-uniform for positive scale parameters)."""
    return np.stack([p.sample_init(rng, n) for p in law.params], -1)


def least_squares(law: Law, x: dict, y: np.ndarray, theta0: np.ndarray, *, method: str = "jax",
                  max_iter: int = 2000) -> Starts:
    """Minimise the sum of squared residuals of ``law`` on ``(x, y)`` from every row of ``theta0``.

    Args:
        law: the law; ``x`` its variables as numpy arrays, ``y`` the raw targets.
        theta0: ``(n_starts, n_params)`` initial points inside the bounds.
        method: ``"jax"`` (one compiled program) or ``"scipy"`` (loop of L-BFGS-B runs).
    """
    y = np.asarray(y, dtype=float)
    if len(y) == 0:
        raise DataError(f"least_squares of law {law.name}: no runs to fit (0 rows); a refit needs "
                        "at least one bought run")
    if method == "jax":
        return replace(_least_squares_jax(law, x, y, theta0, max_iter), theta0=np.asarray(theta0))
    if method == "scipy":
        return replace(_least_squares_scipy(law, x, y, theta0, max_iter),
                       theta0=np.asarray(theta0))
    raise ValueError(f"method must be 'jax' or 'scipy', got {method!r}")


def to_unconstrained(law: Law, theta) -> jnp.ndarray:
    return jnp.stack([p.to_unconstrained(theta[..., i]) for i, p in enumerate(law.params)], -1)


def from_unconstrained(law: Law, u) -> jnp.ndarray:
    return jnp.stack([p.from_unconstrained(u[..., i]) for i, p in enumerate(law.params)], -1)


def params_dict(law: Law, theta) -> dict:
    return {p.name: theta[..., i] for i, p in enumerate(law.params)}


@per_law
def _sse_objective(law: Law):
    """``f(u, args)``: weighted SSE at ``theta(u)`` over ``args["scale"]`` (O(1) for the optimiser).
    One function object per law, so its compiled program is reused across refits."""

    def f(u, args):
        pred = law.fn(params_dict(law, from_unconstrained(law, u)), args["x"])
        r = jnp.where(args["w"] > 0, pred - args["y"], 0.0)
        return jnp.sum(r * r) / args["scale"]

    return f


def _least_squares_jax(law, x, y, theta0, max_iter):
    xj = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in x.items()}
    xp, yp, w = pad_rows(xj, jnp.asarray(y))
    scale = max(float(np.sum((y - y.mean()) ** 2)), 1e-12 * max(1.0, float(np.sum(y * y))))
    args = {"x": xp, "y": yp, "w": w, "scale": jnp.asarray(scale)}
    u0 = to_unconstrained(law, jnp.asarray(theta0))
    u, val, _, _ = lbfgs_multistart(_sse_objective(law), u0, args, max_iter=max_iter)
    theta = np.asarray(from_unconstrained(law, jnp.asarray(u)))
    sse = np.asarray(val) * scale
    bad = ~np.isfinite(sse) | ~np.all(np.isfinite(theta), axis=1)
    return Starts(theta, np.where(bad, np.inf, sse))


@per_law
def _sse_value_and_grad(law: Law):
    def sse(theta, x, y):
        r = law.fn(params_dict(law, theta), x) - y
        return jnp.sum(r * r)

    return jax.jit(jax.value_and_grad(sse))


def _least_squares_scipy(law, x, y, theta0, max_iter):
    vg = _sse_value_and_grad(law)
    xj = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in x.items()}
    yj = jnp.asarray(y)

    def fun(th):
        v, g = vg(jnp.asarray(th), xj, yj)
        v, g = float(v), np.asarray(g, dtype=float)
        if not (math.isfinite(v) and np.all(np.isfinite(g))):
            return 1e300, np.zeros_like(th)
        return v, g

    bounds = [(p.lower, p.upper) for p in law.params]
    theta, sse = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for th0 in theta0:
            res = minimize(fun, th0, jac=True, method="L-BFGS-B", bounds=bounds,
                           options={"maxiter": max_iter, "ftol": 1e-15, "gtol": 1e-10})
            theta.append(res.x)
            sse.append(res.fun if res.fun < 1e300 else np.inf)
    return Starts(np.array(theta), np.array(sse, dtype=float))


def r2_clipped(y, pred) -> float:
    """The benchmark's score: ``1 - SSE / SST`` on the target rows, clipped to [-1, 1]; -1 when a
    prediction is not finite."""
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    if len(y) == 0 or not np.all(np.isfinite(pred)):
        return -1.0
    sst = max(float(np.sum((y - y.mean()) ** 2)), 1e-300)
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / sst
    return float(np.clip(r2, -1.0, 1.0)) if math.isfinite(r2) else -1.0


class RowPadded:
    """A jitted ``f(a, x)`` over the rows of ``x`` (a dict of columns), called on the rows padded
    to a row bucket (:func:`~bayes_scaling.params.pad_rows`: copies of the first row) and cut
    back after, in NumPy: a method that evaluates the law on a growing set of bought runs or a
    shrinking pool (``mspe``, ``v_opt``) compiles one program per bucket, not one per row count.
    Before, a vocab job of ``mspe`` compiled one per purchase, and a process running several held
    so many that LLVM could no longer map new code ("Cannot allocate memory")."""

    def __init__(self, jitted, cut):
        self.jitted, self.cut = jitted, cut

    def __call__(self, a, x):
        cols = {k: np.asarray(v) for k, v in x.items()}
        n = len(next(iter(cols.values())))
        padded = pad_rows(cols, np.zeros(n))[0] if n else cols  # no row to copy: as it is
        return self.cut(jax.tree_util.tree_map(np.asarray, self.jitted(a, padded)), n)


def _cut_rows(out, n):
    """``(pred, J)`` cut to the first ``n`` rows."""
    return out[0][:n], out[1][:n]


@per_law
def predictor(law: Law):
    """Jitted ``theta -> law(theta, x)`` for one parameter vector (or a batch along axis 0)."""

    def one(theta, x):
        return law.fn(params_dict(law, theta), x)

    return RowPadded(jax.jit(jax.vmap(one, in_axes=(0, None))), lambda out, n: out[..., :n])


@per_law
def jacobian_u(law: Law):
    """Jitted ``u -> (pred, d pred / d u)`` over rows: predictions and their Jacobian with respect
    to the unconstrained coordinates (rows, n_params)."""

    def pred(u, x):
        return law.fn(params_dict(law, from_unconstrained(law, u)), x)

    def both(u, x):
        return pred(u, x), jax.jacfwd(pred)(u, x)

    return RowPadded(jax.jit(both), _cut_rows)


@per_law
def jacobian_theta(law: Law):
    """Jitted ``theta -> (pred, d pred / d theta)`` over rows (natural coordinates)."""

    def pred(theta, x):
        return law.fn(params_dict(law, theta), x)

    def both(theta, x):
        return pred(theta, x), jax.jacfwd(pred)(theta, x)

    return RowPadded(jax.jit(both), _cut_rows)


def best_of_weights(sse, k: int) -> np.ndarray:
    """Probability that each of ``R`` starts is the best of ``k`` drawn uniformly with
    replacement from them: the distribution of the protocol's ``k``-start refit over its start
    draws, estimated from a larger pool of ``R`` starts (ties by index; failed starts, ``inf``,
    are the best only when every drawn start failed).

    With the starts ranked by SSE (rank ``r = 1..R``), the best of ``k`` has rank ``r`` with
    probability ``((R - r + 1) / R)^k - ((R - r) / R)^k``.
    """
    sse = np.asarray(sse, float)
    R = len(sse)
    order = np.argsort(np.where(np.isfinite(sse), sse, np.inf), kind="stable")
    left = (R - np.arange(R)) / R  # share of starts ranked at or below r
    p = left ** k - np.append(left[1:], 0.0) ** k
    out = np.empty(R)
    out[order] = p
    return out


@dataclass(frozen=True)
class Lottery:
    """What the ``k``-start refit's draw of starts costs at the targets (:func:`start_lottery`)."""

    excess: float  # expected summed squared deviation of the best of k from the best of R
    hit: float  # share of the R starts ending in the best start's basin (SSE within ``tol``)


def start_lottery(law: Law, x: dict, y, x_target: dict, theta0, k: int,
                  tol: float = 1.05) -> Lottery:
    """Refit ``law`` to ``(x, y)`` from the ``R`` rows of ``theta0`` and measure the start lottery
    of a refit that keeps the best of ``k`` uniform starts (the protocol's, ``k = 64``): with
    ``f_i`` start ``i``'s forecasts at ``x_target``, ``f*`` the best start's and ``pi_i`` the
    probability that start ``i`` is the best of ``k`` (:func:`best_of_weights`),

        excess = sum_i pi_i |f_i - f*|^2,

    the expected summed squared deviation of that refit's target forecasts from those of the
    refit that reaches the best basin found. A start whose forecasts are not finite counts as the
    largest finite deviation (every deviation when none is finite: ``excess = inf``). ``hit``:
    the share of starts whose SSE is within ``tol`` times the best (plus 1e-10 of the targets'
    sum of squares about their mean, for a table the law fits exactly)."""
    st = least_squares(law, x, y, theta0)
    if not st.ok:
        return Lottery(np.inf, 0.0)
    pred = np.asarray(predictor(law)(st.theta, x_target))
    dev = np.sum((pred - pred[int(np.argmin(st.sse))]) ** 2, axis=1)
    good = np.isfinite(dev) & np.isfinite(st.sse)
    dev = np.where(good, dev, dev[good].max() if good.any() else np.inf)
    pi = best_of_weights(st.sse, k)
    y = np.asarray(y, float)
    floor = 1e-10 * float(np.sum((y - y.mean()) ** 2))
    return Lottery(float(pi @ dev), float(np.mean(st.sse <= tol * st.sse.min() + floor)))
