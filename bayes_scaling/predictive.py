"""One predictive: parameter draws of a law and the loss forecasts they give.

A point fit (``MapFit``), a posterior or any set of parameter vectors becomes a
:class:`ParamDraws`, the common currency of planning (:mod:`bayes_scaling.plan`) and anchor
selection (:mod:`bayes_scaling.anchors`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import jax
import numpy as np

from .errors import BayesScalingError
from .laws import Law
from .laws import get as get_law

__all__ = ["ParamDraws", "as_draws", "order_statistic", "predict_draws"]


@dataclass
class ParamDraws:
    """``S`` parameter vectors of one law: the common currency of planning and anchor selection.

    A ``MapFit`` is one draw; a posterior is its MCMC/Laplace draws; tests and bootstrap fits can
    build one directly. ``predict_draws`` has the same signature as ``Posterior.predict_draws``.

    Attributes:
        law: the law.
        params: ``{name: array of shape (S,)}`` for every law parameter.
        sigma: optional ``(S,)`` scale of the log-residual likelihood (the posterior's ``sigma``).
    """

    law: Law
    params: dict
    sigma: np.ndarray | None = None

    def __post_init__(self):
        self.law = get_law(self.law)
        missing = set(self.law.param_names) - set(self.params)
        if missing:
            raise BayesScalingError(f"draws of {self.law.name} miss parameters {sorted(missing)}")
        arrs = {k: np.atleast_1d(np.asarray(self.params[k], dtype=float)).ravel()
                for k in self.law.param_names}
        sizes = {v.size for v in arrs.values()}
        if len(sizes) != 1:
            raise BayesScalingError(f"every parameter needs the same number of draws; got sizes {sizes}")
        self.params = arrs
        if self.sigma is not None:
            self.sigma = np.broadcast_to(np.asarray(self.sigma, float).ravel(), (self.n_draws,)).copy()

    @property
    def n_draws(self) -> int:
        return next(iter(self.params.values())).size

    def evaluate(self, x: Mapping[str, np.ndarray]):
        """Law value for each draw at inputs ``x`` (variable -> array, broadcast against (S, 1))."""
        return _jit_fn(self.law.fn)(self.params, {k: np.asarray(v) for k, v in x.items()})

    def predict_draws(self, df, kind: str = "mean", seed: int = 0) -> np.ndarray:
        """``(S, n)`` law values at the rows of ``df`` for every draw.

        ``kind="mean"`` is the law itself (the expected loss); ``"predictive"`` multiplies by
        ``exp(sigma_s * eps)``, eps ~ N(0, 1): a Gaussian stand-in for the log-residual likelihood.
        """
        x = {}
        n = len(df)
        for v in self.law.variables:  # law.inputs without the eager jnp conversion
            col = self.law.column(v)
            if col in df:
                x[v] = np.asarray(df[col], dtype=np.float64)
            elif v in self.law.defaults:
                x[v] = np.full(n, float(self.law.defaults[v]))
            else:
                raise KeyError(f"law {self.law.name} needs column {col!r} (variable {v!r})")
        out = np.asarray(self.evaluate(x))
        if kind == "mean":
            return out
        if kind == "predictive":
            if self.sigma is None:
                raise BayesScalingError("kind='predictive' needs sigma draws")
            eps = np.random.default_rng(seed).standard_normal(out.shape)
            return out * np.exp(self.sigma[:, None] * eps)
        raise BayesScalingError(f"kind must be 'mean' or 'predictive', got {kind!r}")

    def thin(self, max_draws: int | None) -> ParamDraws:
        """At most ``max_draws`` evenly spaced draws (all of them when ``None``)."""
        if max_draws is None or self.n_draws <= max_draws:
            return self
        idx = np.unique(np.linspace(0, self.n_draws - 1, int(max_draws)).round().astype(int))
        return ParamDraws(self.law, {k: v[idx] for k, v in self.params.items()},
                          None if self.sigma is None else self.sigma[idx])


_JIT_CACHE: dict = {}


def _jit_fn(fn):
    """jit(params {name: (S,)}, x {var: array}) -> fn with every parameter as an (S, 1) column."""
    if fn not in _JIT_CACHE:
        _JIT_CACHE[fn] = jax.jit(lambda p, x: fn({k: v[:, None] for k, v in p.items()}, x))
    return _JIT_CACHE[fn]


def as_draws(obj, max_draws: int | None = None) -> ParamDraws:
    """Parameter draws of a ``MapFit`` (one draw), a ``Posterior`` or a :class:`ParamDraws`.

    A posterior is read from ``obj.idata.posterior`` (chains and draws stacked); a law parameter
    absent there (held fixed during inference) is taken from ``obj.settings["fixed"]`` or
    ``obj.map``. The likelihood
    scale ``sigma`` is read when the posterior has it.
    """
    if isinstance(obj, ParamDraws):
        return obj.thin(max_draws)
    law = getattr(obj, "law", None)
    if law is None:
        raise BayesScalingError(f"expected a MapFit, a Posterior or ParamDraws; got {type(obj).__name__}")
    idata = getattr(obj, "idata", None)
    if idata is not None and hasattr(idata, "posterior"):
        post = idata.posterior
        m = getattr(obj, "map", None)
        fixed = dict(m) if isinstance(m, Mapping) else dict(getattr(m, "params", None) or {})
        fixed.update(getattr(obj, "fixed", None) or {})
        fixed.update((getattr(obj, "settings", None) or {}).get("fixed", None) or {})
        params = {}
        for name in law.param_names:
            if name in post:
                params[name] = np.asarray(post[name]).reshape(-1)
            elif name in fixed:
                params[name] = None
            else:
                raise BayesScalingError(f"posterior has no draws of {name!r} and no fixed value")
        n = max(v.size for v in params.values() if v is not None)
        params = {k: (np.full(n, float(fixed[k])) if v is None else v) for k, v in params.items()}
        sigma = np.asarray(post["sigma"]).reshape(-1) if "sigma" in post else None
        return ParamDraws(law, params, sigma).thin(max_draws)
    params = getattr(obj, "params", None)
    if isinstance(params, Mapping):
        return ParamDraws(law, {k: np.array([float(v)]) for k, v in params.items()})
    raise BayesScalingError(f"cannot read parameter draws from {type(obj).__name__}: it has neither "
                            "idata.posterior nor a params dict")


def predict_draws(obj, df) -> np.ndarray:
    """``(S, n)`` expected losses at the rows of ``df``: ``obj.predict_draws(df, kind="mean")``.

    Works for anything with ``predict_draws`` (a posterior, a ``MapFit``, :class:`ParamDraws`) and
    falls back to ``obj.predict(df)`` as a single draw.
    """
    if hasattr(obj, "predict_draws"):
        out = obj.predict_draws(df, kind="mean")
    elif hasattr(obj, "predict"):
        out = obj.predict(df)
    else:
        raise BayesScalingError(f"{type(obj).__name__} has neither predict_draws nor predict")
    out = np.asarray(out, dtype=float)
    return out[None, :] if out.ndim == 1 else out


def order_statistic(x: np.ndarray, p: float, axis: int = 0) -> np.ndarray:
    """The ``ceil(p S)``-th smallest of ``S`` values along ``axis``.

    ``order_statistic(g, p) <= 0`` holds exactly when at least a fraction ``p`` of the draws have
    ``g <= 0``: the chance constraint ``P(g <= 0) >= p`` counted over draws. ``p = 1/2`` is the
    (lower) median.
    """
    x = np.asarray(x, dtype=float)
    S = x.shape[axis]
    k = min(S, max(1, math.ceil(p * S - 1e-9)))
    return np.take(np.partition(x, k - 1, axis=axis), k - 1, axis=axis)
