"""Default and user priors of a law's parameters (and of the likelihood's scale ``sigma``)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

import numpyro.distributions as dist
from numpyro.distributions import constraints

from ..laws import Param, get as get_law


SCALE = Param("sigma", 0.0, math.inf, (1e-3, 0.1), True,
              "scale of the log residuals (the likelihood's sigma; delta = c sigma for Huber)")


# The init range of a parameter is its default prior's central 90% interval (mean +- 1.645 sd).
PRIOR_Z = 1.6448536269514722


def log_scale(p: Param) -> bool:
    """Whether ``p`` lives on a log scale: positive bounds and a positive init range.

    Coefficients, exponents and the irreducible loss all do; their default priors are Normal in
    ``log theta`` (the space NUTS samples them in, so a weakly identified one has Gaussian tails
    there instead of the exponential tail a prior on ``theta`` would have towards 0).
    """
    return p.lower >= 0 and p.init[0] > 0


def prior_loc_scale(p: Param):
    lo, hi = p.init
    if log_scale(p):
        m, half = 0.5 * (math.log(lo) + math.log(hi)), 0.5 * (math.log(hi) - math.log(lo))
        return m, max(half / PRIOR_Z, 0.05)
    m = 0.5 * (lo + hi)
    return m, max(0.5 * (hi - lo) / PRIOR_Z, 0.05 * max(abs(m), 1.0))


@functools.lru_cache(maxsize=None)
def default_prior(p: Param) -> dist.Distribution:
    """The weakly informative default prior of one parameter, built from its bounds and init range.

    The init range ``(lo, hi)`` of a parameter is the range its authors consider plausible; the
    default prior makes it the central 90% interval (mean +- 1.645 sd) and truncates to the bounds:

    - positive parameters (``lower >= 0`` and ``lo > 0``: coefficients, exponents, E):
      ``log theta ~ Normal((log lo + log hi)/2, (log hi - log lo)/(2 * 1.645))`` on
      ``[log lower, log upper]``;
    - others (``zeta``, a ``lam`` whose init range starts at 0, signed offsets):
      ``theta ~ Normal((lo + hi)/2, (hi - lo)/(2 * 1.645))`` on ``[lower, upper]``.

    Values outside the init range stay possible (10% of the prior mass), so the data can move any
    parameter out of it, but a non-identified direction cannot run off into degenerate corners
    (an exponent of 1e-4 that turns a power term into a second copy of E).

    Cached per Param: the same prior object every time, so compiled programs (keyed by the
    priors' identities) are reused across fits.
    """
    m, s = prior_loc_scale(p)
    if log_scale(p):
        low = math.log(p.lower) if p.lower > 0 else None
        high = math.log(p.upper) if math.isfinite(p.upper) else None
        return TruncNormal(m, s, low, high, log=True)
    low = p.lower if math.isfinite(p.lower) else None
    high = p.upper if math.isfinite(p.upper) else None
    return TruncNormal(m, s, low, high)


class TruncNormal(dist.Distribution):
    """``Normal(loc, scale)`` truncated to ``[low, high]`` (either may be ``None``), of ``theta``
    or, with ``log``, of ``log theta`` (then the density is of ``theta``: the log-normal's
    ``1 / theta`` included). The default priors' distribution: its normalising constant is a
    number computed once here (NumPyro's ``TruncatedNormal`` computes it inside every program
    that reads the density, a fifth of the operations a fit traces); its density is NumPyro's.
    """

    reparametrized_params = []

    def __init__(self, loc: float, scale: float, low: float | None = None,
                 high: float | None = None, log: bool = False):
        from scipy.special import log_ndtr, ndtr

        self.loc, self.scale, self.low, self.high, self.log = (
            float(loc), float(scale), low, high, bool(log))
        a = -math.inf if low is None else (low - self.loc) / self.scale
        b = math.inf if high is None else (high - self.loc) / self.scale
        # log(Phi(b) - Phi(a)), accurate in either tail
        if b <= 0:
            mass = float(log_ndtr(b)) + math.log1p(-math.exp(float(log_ndtr(a) - log_ndtr(b))))
        else:
            mass = float(log_ndtr(-a)) + math.log1p(-math.exp(float(log_ndtr(-b) - log_ndtr(-a))))
        self._log_norm = math.log(self.scale) + 0.5 * math.log(2 * math.pi) + mass
        self._cdf = (float(ndtr(a)), float(ndtr(b)))
        lo = -math.inf if low is None else low
        hi = math.inf if high is None else high
        if log:
            lo, hi = math.exp(lo) if low is not None else 0.0, math.exp(hi)
        self._support = (constraints.interval(lo, hi) if math.isfinite(hi) else
                         constraints.greater_than(lo) if math.isfinite(lo) else constraints.real)
        super().__init__(batch_shape=(), event_shape=())

    @property
    def support(self):
        return self._support

    def log_prob(self, value):
        x = jnp.log(value) if self.log else value
        z = (x - self.loc) / self.scale
        lp = -0.5 * z * z - self._log_norm
        return lp - x if self.log else lp

    def sample(self, key, sample_shape=()):
        from jax.scipy.special import ndtri

        u = jax.random.uniform(key, sample_shape, minval=self._cdf[0], maxval=self._cdf[1])
        x = self.loc + self.scale * ndtri(u)
        lo = -jnp.inf if self.low is None else self.low
        hi = jnp.inf if self.high is None else self.high
        x = jnp.clip(x, lo, hi)
        return jnp.exp(x) if self.log else x

    def __repr__(self):
        bounds = f"[{self.low}, {self.high}]"
        return f"TruncNormal({'log ' if self.log else ''}{self.loc:.4g}, {self.scale:.4g}, {bounds})"


def plain_priors(law) -> dict[str, dist.Distribution]:
    """A naive alternative to :func:`default_priors`, kept as a baseline for benchmarks: every
    parameter ``theta ~ Normal((lo + hi)/2, (hi - lo)/2)`` on its natural scale (the init range
    as mean +- 1 sd, scale parameters included), truncated to the bounds."""
    law = get_law(law)
    out = {}
    for p in (*law.params, SCALE):
        lo, hi = p.init
        low = p.lower if math.isfinite(p.lower) else None
        high = p.upper if math.isfinite(p.upper) else None
        out[p.name] = _truncnorm(0.5 * (lo + hi), max(0.5 * (hi - lo), 1e-12), low, high)
    return out


def _truncnorm(m, s, low, high):
    if low is None and high is None:
        return dist.Normal(m, s)
    return dist.TruncatedNormal(m, s, low=low, high=high)


@dataclass(frozen=True, eq=False)
class AtReference:
    """The prior of a power term's coefficient ``c`` stated for the term at a reference value
    ``v_ref`` of its variable: ``c v_ref^-exponent ~ base``, given the exponent (so
    ``c | exponent ~ base scaled by v_ref^exponent``).

    Why: a coefficient alone is the term's value at ``v = 1``, a point far outside the data for a
    PTPP floor ``F / PTPP^eta`` (PTPP 1 is no checkpoint anyone adapts). With independent priors on
    ``F`` and ``eta``, the floor at realistic PTPPs is ``F`` times a factor that spans orders of
    magnitude with ``eta``, and a large ``eta`` becomes a way to switch the floor off: on two PTPP
    levels the posterior then reaches ``eta`` of 10 to 50 in long excursions along a banana
    (``log F - eta log PTPP`` pinned while ``log eta`` wanders). Stated at ``v_ref`` the floor's
    size and its decay are a priori independent.
    """

    base: dist.Distribution
    exponent: str
    log_ref: float

    def term(self, name: str) -> str:
        """How the stated quantity reads, e.g. ``(F 20^-eta)``."""
        return f"({name} {math.exp(self.log_ref):g}^-{self.exponent})"

    def given(self, exponent_value) -> dist.Distribution:
        """The prior of the coefficient for this value of the exponent."""
        return dist.TransformedDistribution(
            self.base, dist.transforms.AffineTransform(0.0, jnp.exp(exponent_value * self.log_ref)))


@functools.cache
def _at_reference(p: Param, exponent: str, reference: float) -> AtReference:
    return AtReference(default_prior(p), exponent, math.log(reference))


def default_priors(law) -> dict[str, dist.Distribution]:
    """``{name: prior}`` for every parameter of ``law`` plus the scale ``sigma``; a coefficient
    the law states at a reference (``Law.prior_references``) gets an :class:`AtReference` prior."""
    law = get_law(law)
    out = {p.name: default_prior(p) for p in law.params}
    params = {p.name: p for p in law.params}
    for coef, exponent, ref in law.prior_references:
        out[coef] = _at_reference(params[coef], exponent, float(ref))
    out["sigma"] = default_prior(SCALE)
    return out


def prior_given(priors: dict, name: str, values: Mapping):
    """The prior of ``name`` as a distribution, given the other parameters' ``values`` (only an
    :class:`AtReference` prior depends on them)."""
    d = priors[name]
    return d.given(values[d.exponent]) if isinstance(d, AtReference) else d


def prior_order(priors: dict, names) -> list:
    """``names`` in an order where every conditional (:class:`AtReference`) prior comes after the
    parameters it depends on."""
    return sorted(names, key=lambda n: isinstance(priors[n], AtReference))


def draw_prior(priors: dict, key, fixed: Mapping | None = None, shape: tuple = ()) -> dict:
    """Draws of every parameter in ``priors`` (``fixed`` values given), conditional priors
    after the parameters they depend on: one draw (floats), or with ``shape`` arrays of that
    many independent draws (in one call per parameter)."""
    names = prior_order(priors, priors)
    keys = jax.random.split(key, len(names))
    shape = tuple(shape)
    out = dict(fixed or {})
    for k, n in zip(keys, names):
        if n not in out:
            d = prior_given(priors, n, out)  # a conditional prior has the batch shape of its given
            x = d.sample(k, () if d.batch_shape else shape)
            out[n] = np.asarray(x, float) if shape else float(x)
    return out


def prior_table(law) -> pd.DataFrame:
    """The default priors of ``law`` as a table: bounds, init range, prior, its 5%/50%/95% quantiles."""
    law = get_law(law)
    rows = []
    pri = default_priors(law)
    for p in (*law.params, SCALE):
        d = pri[p.name]
        if isinstance(d, AtReference):  # the marginal, over the exponent's prior
            k1, k2 = jax.random.split(jax.random.PRNGKey(0))
            draws = np.asarray(d.given(pri[d.exponent].sample(k1, (20000,))).sample(k2))
        else:
            draws = np.asarray(d.sample(jax.random.PRNGKey(0), (20000,)))
        q = np.quantile(draws, [0.05, 0.5, 0.95])
        lo, hi = p.init
        m, s = prior_loc_scale(p)
        term = d.term(p.name) if isinstance(d, AtReference) else p.name
        desc = f"{'log ' if log_scale(p) else ''}{term} ~ N({m:.3g}, {s:.3g})"
        if math.isfinite(p.lower) or math.isfinite(p.upper):
            desc += f" on [{p.lower:g}, {p.upper:g}]"
        rows.append(dict(param=p.name, lower=p.lower, upper=p.upper, init=f"{lo:g} .. {hi:g}",
                         prior=desc, q05=q[0], median=q[1], q95=q[2], doc=p.doc))
    return pd.DataFrame(rows)
