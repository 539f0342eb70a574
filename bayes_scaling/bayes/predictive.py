"""One predictive: parameter draws of a law, the one reader of a law's inputs and the one noise
model of a new observation.

A point fit (``MapFit``), a posterior or any set of parameter vectors becomes a
:class:`ParamDraws`, the common currency of planning (:mod:`bayes_scaling.plan`) and anchor
selection (:mod:`bayes_scaling.anchors`). Forecasts read a law's inputs through
:func:`law_inputs` and draw new observations from the fitted likelihood through
:func:`observation_draws`: ``L = f(theta_s, x) exp(sigma_s eps)`` with ``eps`` drawn from the
standard Huber, Student-t or Normal density of the likelihood on ``log L``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..errors import BayesScalingError, DataError
from ..laws import Law
from ..laws import get as get_law
from .distributions import HUBER_C
from .likelihood import LIKELIHOODS, STUDENT_DF, standard_noise

__all__ = ["ParamDraws", "as_draws", "fitted_range", "law_inputs", "observation_draws",
           "order_statistic", "predict_draws"]


def law_inputs(law: Law, table, *, where: str = "the table", fix: str = "") -> dict:
    """The law's variables read from ``table``: the one reader of a law's inputs for forecasts.

    ``table`` is a DataFrame of rows (read by :meth:`Law.inputs`) or a mapping of equally shaped
    arrays, traced ones included (the recipe optimiser's columns inside ``jax.jit``). A variable
    with a default and no column takes the default, shaped like the table's columns.

    Raises:
        DataError: a column the law reads without a default is missing; the message names the
            columns, ``where`` they were looked for, and ``fix``.
    """
    missing = [c for c in law.columns if c not in table]
    if missing:
        raise DataError(f"law {law.name} reads column(s) {missing}, which {where} does not define "
                        f"(it has {list(table.keys())})" + (f"; {fix}" if fix else ""))
    if isinstance(table, pd.DataFrame):
        return law.inputs(table)
    shape = jnp.shape(next(iter(table.values())))
    return {v: (jnp.asarray(table[law.column(v)]) if law.column(v) in table
                else jnp.full(shape, float(law.defaults[v]))) for v in law.variables}


def observation_draws(mean, sigma, likelihood: str, key, *, c: float = HUBER_C,
                      student_df: float = STUDENT_DF) -> np.ndarray:
    """New observations of the loss around ``mean`` (S, n): ``mean * exp(sigma_s * eps)``.

    The likelihood lives on ``log L`` with scale ``sigma_s`` per draw (``(S,)``), so a new
    measured loss is the law's value times ``exp(sigma_s eps)`` with ``eps`` from
    :func:`standard_noise` (``key``: a ``jax.random`` key).
    """
    mean = np.asarray(mean, float)
    eps = standard_noise(likelihood, key, mean.shape, c=c, student_df=student_df)
    return mean * np.exp(np.asarray(sigma, float).reshape(-1, 1) * np.asarray(eps))


@dataclass
class ParamDraws:
    """``S`` parameter vectors of one law and the likelihood they were fitted with.

    A ``MapFit`` is one draw; a posterior is its MCMC/Laplace draws; tests and bootstrap fits can
    build one directly. ``predict_draws`` has the same signature as ``Posterior.predict_draws``.

    Attributes:
        law: the law.
        params: ``{name: array of shape (S,)}`` for every law parameter.
        sigma: optional ``(S,)`` scale of the log-residual likelihood (the posterior's ``sigma``).
        likelihood: the likelihood on ``log L``: ``"huber"``, ``"student_t"`` or ``"normal"``.
        c, student_df: the Huber threshold and the Student-t degrees of freedom.
        data_range: optional ``{column: (min, max)}`` of the rows the draws were fitted on.
        target_shift: the ``c`` of a signed target fitted as ``loss + c`` (``law`` is then the
            law of ``loss + c``; :meth:`predict_draws` gives ``loss``).
    """

    law: Law
    params: dict
    sigma: np.ndarray | None = None
    likelihood: str = "normal"
    c: float = HUBER_C
    student_df: float = STUDENT_DF
    data_range: dict | None = None
    target_shift: float = 0.0

    def __post_init__(self):
        self.law = get_law(self.law)
        missing = set(self.law.param_names) - set(self.params)
        if missing:
            raise BayesScalingError(f"draws of {self.law.name} miss parameters {sorted(missing)}")
        arrs = {k: np.atleast_1d(np.asarray(self.params[k], dtype=float)).ravel()
                for k in self.law.param_names}
        sizes = {v.size for v in arrs.values()}
        if len(sizes) != 1:
            raise BayesScalingError(
                f"every parameter needs the same number of draws; got sizes {sizes}")
        self.params = arrs
        if self.sigma is not None:
            self.sigma = np.broadcast_to(np.asarray(self.sigma, float).ravel(),
                                         (self.n_draws,)).copy()
        if self.likelihood not in LIKELIHOODS:
            raise BayesScalingError(
                f"likelihood must be one of {LIKELIHOODS}, got {self.likelihood!r}")

    @property
    def n_draws(self) -> int:
        return next(iter(self.params.values())).size

    def evaluate(self, x: Mapping[str, np.ndarray]):
        """Law value for each draw at inputs ``x`` (variable -> array, broadcast against (S, 1))."""
        # every parameter as an (S, 1) column; the law's compiled formula (``Law.__call__``)
        return self.law({k: v[:, None] for k, v in self.params.items()},
                        {k: jnp.asarray(v) for k, v in x.items()})

    def predict_draws(self, df, kind: str = "mean", seed: int = 0) -> np.ndarray:
        """``(S, n)`` losses at the rows of ``df`` for every draw.

        ``kind="mean"`` is the law itself (the expected loss); ``"predictive"`` a new measured
        loss, drawn from the likelihood (:func:`observation_draws`) with the key that
        ``Posterior.predict_draws`` uses for the same ``seed``.
        """
        if kind not in ("mean", "predictive"):
            raise BayesScalingError(f"kind must be 'mean' or 'predictive', got {kind!r}")
        out = np.asarray(self.evaluate(law_inputs(self.law, df)))
        if kind == "predictive":
            if self.sigma is None:
                raise BayesScalingError("kind='predictive' needs sigma draws (the likelihood "
                                        "scale)")
            key, _ = jax.random.split(jax.random.PRNGKey(seed))
            out = observation_draws(out, self.sigma, self.likelihood, key, c=self.c,
                                    student_df=self.student_df)
        return out - self.target_shift if self.target_shift else out

    def thin(self, max_draws: int | None) -> ParamDraws:
        """At most ``max_draws`` evenly spaced draws (all of them when ``None``)."""
        if max_draws is None or self.n_draws <= max_draws:
            return self
        idx = np.unique(np.linspace(0, self.n_draws - 1, int(max_draws)).round().astype(int))
        return ParamDraws(self.law, {k: v[idx] for k, v in self.params.items()},
                          None if self.sigma is None else self.sigma[idx], self.likelihood,
                          self.c, self.student_df, self.data_range, self.target_shift)


def as_draws(obj, max_draws: int | None = None) -> ParamDraws:
    """Parameter draws of a ``MapFit`` (one draw), a ``Posterior`` or a :class:`ParamDraws`.

    A posterior is read from ``obj.idata.posterior`` (chains and draws stacked); a law parameter
    absent there (held fixed during inference) is taken from ``obj.settings["fixed"]`` or
    ``obj.map``. The likelihood comes from ``obj.settings`` (``likelihood``, ``c``,
    ``student_df``) and its scale from the ``sigma`` draws, or the fixed ``settings["scale"]``.
    """
    if isinstance(obj, ParamDraws):
        return obj.thin(max_draws)
    law = getattr(obj, "law", None)
    if law is None:
        raise BayesScalingError(
            f"expected a MapFit, a Posterior or ParamDraws; got {type(obj).__name__}")
    post = idata_group(obj, "posterior")
    if post is not None:
        m = getattr(obj, "map", None)
        settings = getattr(obj, "settings", None) or {}
        fixed = dict(m) if isinstance(m, Mapping) else dict(getattr(m, "params", None) or {})
        fixed.update(getattr(obj, "fixed", None) or {})
        fixed.update(settings.get("fixed", None) or {})
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
        sigma = (np.asarray(post["sigma"]).reshape(-1) if "sigma" in post
                 else settings.get("scale", None))
        return ParamDraws(law, params, sigma, settings.get("likelihood", "normal"),
                          float(settings.get("c", HUBER_C)),
                          float(settings.get("student_df", STUDENT_DF)),
                          fitted_range(obj), getattr(obj, "target_shift", 0.0)).thin(max_draws)
    params = getattr(obj, "params", None)
    if isinstance(params, Mapping):
        return ParamDraws(law, {k: np.array([float(v)]) for k, v in params.items()},
                          target_shift=getattr(obj, "target_shift", 0.0))
    raise BayesScalingError(f"cannot read parameter draws from {type(obj).__name__}: it has "
                            "neither idata.posterior nor a params dict")


def idata_group(obj, name: str):
    """Group ``name`` of ``obj``'s InferenceData (``None`` when it has none): through
    ``Posterior.group`` (a loaded posterior's file is read without ArviZ), else ``obj.idata``."""
    group = getattr(obj, "group", None)
    if callable(group):
        return group(name)
    return getattr(getattr(obj, "idata", None), name, None)


def fitted_range(obj) -> dict | None:
    """``{column: (min, max)}`` of the rows ``obj`` was fitted on, ``None`` when unknown.

    Read from :attr:`ParamDraws.data_range`, a posterior's ``idata.constant_data`` (its fitted
    input columns) or a fit's ``settings["data_range"]``.
    """
    if isinstance(obj, ParamDraws):
        return obj.data_range
    cd = idata_group(obj, "constant_data")
    if cd is not None:
        return {str(k): (float(np.min(cd[k])), float(np.max(cd[k]))) for k in cd.data_vars
                if k != "loss"}
    rng = (getattr(obj, "settings", None) or {}).get("data_range")
    return None if rng is None else {k: (float(v[0]), float(v[1])) for k, v in rng.items()}


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
