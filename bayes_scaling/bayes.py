"""The Bayesian layer: every law as a NumPyro model, posteriors by NUTS or Laplace, forecasts.

The model (one builder for every law, DESIGN.md rule 1). For a law ``f`` with free parameters
``theta`` and a loss table with rows ``(x_i, L_i)``::

    theta_j ~ prior_j                         (default: weakly informative, from bounds + init range)
    sigma   ~ LogNormal(log 0.01, log 10)     (scale of the log residuals; or fixed)
    log L_i | theta, sigma ~ Huber(log f(theta, x_i), sigma, c)     (or Student-t, or Normal)

with the Huber density of ``bayes_scaling.objective`` (DESIGN.md rule 2):
``log p(r) = -rho_c(r / sigma) - log sigma - log Z(c)``, ``r = log f - log L``. Because
``rho_c(r / sigma) = Huber_{c sigma}(r) / sigma^2``, the log-likelihood is
``-J(theta; delta = c sigma) / sigma^2 + const``: under flat priors and a fixed ``sigma`` the
posterior mode is the ``fit_map`` Huber fit with ``delta = c * sigma``.

Parameterisation. Each parameter is sampled on the real line through its own
:class:`~bayes_scaling.laws.Param` transform (the same one ``fit_map`` optimises in:
scaled logit, log of the excess over a lower bound, ...), with the log-Jacobian added, so NUTS
never leaves the bounds. Priors are distributions on the natural (bounded) value; a prior whose
support is wider than the bounds is truncated to them. NUTS runs on a whitened copy of that space,
``u = u_hat + L z``, where ``u_hat`` is the mode of the unconstrained posterior and ``L L^T`` its
Laplace covariance, so the linear part of the geometry (e.g. ``log A`` against ``alpha``) is
removed before warm-up starts and a dense mass matrix adapts the rest.

The posterior *mode* reported as ``Posterior.map`` is the mode in the natural parameters
(no Jacobian), found with the same multi-start L-BFGS program as ``fit_map``.

References: Carpenter et al. (2017) Stan, for the transform + Jacobian scheme; Vehtari et al.
(2021) "Rank-normalization, folding, and localization" for R-hat and bulk/tail ESS; Vehtari,
Gelman & Gabry (2017) for PSIS-LOO.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from . import data as _data
from .checks import check_fit_options
from .errors import BayesScalingError, ConvergenceWarning, FitError, MultimodalWarning
from .fit import lbfgs_multistart, pad_rows
from .laws import Law, Param
from .laws import get as get_law
from .objective import data_hash, huber_log_normaliser, huber_logpdf

LIKELIHOODS = ("huber", "student_t", "normal")
HUBER_C = 1.345  # threshold in units of sigma: 95% efficiency under Gaussian noise (Huber 1964)
STUDENT_DF = 4.0
SCALE = Param("sigma", 0.0, math.inf, (1e-3, 0.1), True,
              "scale of the log residuals (the likelihood's sigma; delta = c sigma for Huber)")

# The init range of a parameter is its default prior's central 90% interval (mean +- 1.645 sd).
PRIOR_Z = 1.6448536269514722

# Convergence thresholds (Vehtari et al. 2021): every one must hold for ``Posterior.ok``.
RHAT_MAX = 1.01
ESS_PER_CHAIN = 100
BFMI_MIN = 0.3




# ==================================================================================================
# Priors


def log_scale(p: Param) -> bool:
    """Whether ``p`` lives on a log scale: positive bounds and a positive init range.

    Coefficients, exponents and the irreducible loss all do; their default priors are Normal in
    ``log theta`` (the space NUTS samples them in, so a weakly identified one has Gaussian tails
    there instead of the exponential tail a prior on ``theta`` would have towards 0).
    """
    return p.lower >= 0 and p.init[0] > 0


def _prior_loc_scale(p: Param):
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
    m, s = _prior_loc_scale(p)
    if log_scale(p):
        low = math.log(p.lower) if p.lower > 0 else None
        high = math.log(p.upper) if math.isfinite(p.upper) else None
        return dist.TransformedDistribution(_truncnorm(m, s, low, high),
                                            dist.transforms.ExpTransform())
    low = p.lower if math.isfinite(p.lower) else None
    high = p.upper if math.isfinite(p.upper) else None
    return _truncnorm(m, s, low, high)


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


# Laws whose coefficient priors are stated at a reference value of a variable (by law function).
PRIOR_REFERENCES: dict[Callable, tuple] = {}
PTPP_REF = 20.0  # the Chinchilla-optimal budget: early-stage checkpoints sit around it


def register_prior_reference(fn: Callable, coef: str, exponent: str, reference: float):
    """Declare that the default prior of ``coef`` (a power term ``coef / v^exponent``) is stated
    for the term at ``v = reference`` (:class:`AtReference`), for every law whose function is
    ``fn``."""
    PRIOR_REFERENCES[fn] = PRIOR_REFERENCES.get(fn, ()) + ((coef, exponent, float(reference)),)


@functools.cache
def _at_reference(p: Param, exponent: str, reference: float) -> AtReference:
    return AtReference(default_prior(p), exponent, math.log(reference))


def default_priors(law) -> dict[str, dist.Distribution]:
    """``{name: prior}`` for every parameter of ``law`` plus the scale ``sigma``; a coefficient
    declared with :func:`register_prior_reference` gets an :class:`AtReference` prior."""
    law = get_law(law)
    out = {p.name: default_prior(p) for p in law.params}
    params = {p.name: p for p in law.params}
    for coef, exponent, ref in PRIOR_REFERENCES.get(law.fn, ()):
        out[coef] = _at_reference(params[coef], exponent, ref)
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


def draw_prior(priors: dict, key, fixed: Mapping | None = None) -> dict:
    """One draw of every parameter in ``priors`` (``fixed`` values given), conditional priors
    after the parameters they depend on."""
    names = prior_order(priors, priors)
    keys = jax.random.split(key, len(names))
    out = dict(fixed or {})
    for k, n in zip(keys, names):
        if n not in out:
            out[n] = float(prior_given(priors, n, out).sample(k))
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
        m, s = _prior_loc_scale(p)
        term = d.term(p.name) if isinstance(d, AtReference) else p.name
        desc = f"{'log ' if log_scale(p) else ''}{term} ~ N({m:.3g}, {s:.3g})"
        if math.isfinite(p.lower) or math.isfinite(p.upper):
            desc += f" on [{p.lower:g}, {p.upper:g}]"
        rows.append(dict(param=p.name, lower=p.lower, upper=p.upper, init=f"{lo:g} .. {hi:g}",
                         prior=desc, q05=q[0], median=q[1], q95=q[2], doc=p.doc))
    return pd.DataFrame(rows)


class FlatPrior(dist.Distribution):
    """The improper flat prior on a parameter's natural coordinate (``log theta`` for positive
    parameters, ``theta`` otherwise), as a density on ``theta``: ``-log theta`` or 0.

    Used for the MAP-equals-Huber-fit identity (``priors="flat"``); NUTS on a flat prior can only
    work when the likelihood alone makes the posterior proper.
    """

    support = constraints.real

    def __init__(self, log=False):
        self.log = bool(log)
        super().__init__(batch_shape=(), event_shape=())

    def log_prob(self, value):
        return -jnp.log(value) if self.log else jnp.zeros_like(value)

    def sample(self, key, sample_shape=()):
        raise BayesScalingError("a flat prior cannot be sampled; give a proper prior")


_FLAT = {True: FlatPrior(True), False: FlatPrior(False)}


# ==================================================================================================
# The transform of a Param as a distribution on the real line


def log_abs_det_jacobian(p: Param, u):
    """log |d theta / d u| of :meth:`Param.from_unconstrained`."""
    k = p.kind
    if k == "interval":
        return math.log(p.upper - p.lower) - jax.nn.softplus(u) - jax.nn.softplus(-u)
    if k == "log_interval":
        lo, hi = math.log(p.lower), math.log(p.upper)
        return (lo + (hi - lo) * jax.nn.sigmoid(u) + math.log(hi - lo)
                - jax.nn.softplus(u) - jax.nn.softplus(-u))
    if k in ("lower", "upper"):
        return u
    if k == "real":
        return jnp.zeros_like(u)
    # any other transform: elementwise derivative by forward-mode autodiff
    u = jnp.asarray(u)
    return jnp.log(jnp.abs(jax.jvp(p.from_unconstrained, (u,), (jnp.ones_like(u),))[1]))


class OnUnconstrained(dist.Distribution):
    """A prior on a parameter's natural value, seen on the real line through the Param transform.

    ``log_prob(u) = prior.log_prob(theta(u)) + log |d theta / d u|``, the density NUTS samples.
    Sampling draws from the prior and maps the draws with :meth:`Param.to_unconstrained` (draws
    outside the bounds, possible only for user priors wider than the bounds, are clipped inside).
    """

    support = constraints.real

    def __init__(self, prior: dist.Distribution, param: Param):
        self.prior, self.param = prior, param
        super().__init__(batch_shape=(), event_shape=())

    def log_prob(self, u):
        theta = self.param.from_unconstrained(u)
        return self.prior.log_prob(theta) + log_abs_det_jacobian(self.param, u)

    def sample(self, key, sample_shape=()):
        theta = self.prior.sample(key, sample_shape)
        lo, hi, rel = self.param.lower, self.param.upper, 1e-9
        if math.isfinite(lo):
            theta = jnp.maximum(theta, lo + rel * max(1.0, abs(lo)))
        if math.isfinite(hi):
            theta = jnp.minimum(theta, hi - rel * max(1.0, abs(hi)))
        return self.param.to_unconstrained(theta)


# ==================================================================================================
# Likelihoods on log residuals


class Huber(dist.Distribution):
    """Huber density on the real line: ``log p(v) = -rho_c((v - loc)/scale) - log scale - log Z(c)``.

    ``rho_c`` is quadratic for ``|z| <= c`` and linear beyond (see ``bayes_scaling.objective``);
    the density is a Gaussian core with exponential tails. Sampling draws from that mixture exactly.
    """

    support = constraints.real
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}

    def __init__(self, loc=0.0, scale=1.0, c=HUBER_C, validate_args=None):
        self.loc, self.scale = jnp.asarray(loc), jnp.asarray(scale)
        self.c = float(c)
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(loc), jnp.shape(scale))
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    def log_prob(self, value):
        return huber_logpdf(value - self.loc, self.scale, self.c)

    def sample(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape
        return self.loc + self.scale * huber_standard_sample(key, shape, self.c)

    @property
    def mean(self):
        return jnp.broadcast_to(self.loc, self.batch_shape)


def huber_standard_sample(key, shape, c=HUBER_C):
    """Draws from the standard Huber density ``exp(-rho_c(z)) / Z(c)`` (mixture sampling)."""
    from jax.scipy.special import ndtr, ndtri

    k1, k2, k3, k4 = jax.random.split(key, 4)
    z_core = jnp.sqrt(2.0 * jnp.pi) * (2.0 * ndtr(c) - 1.0)
    p_core = z_core / jnp.exp(huber_log_normaliser(c))
    uc = jax.random.uniform(k1, shape, minval=ndtr(-c), maxval=ndtr(c))
    core = ndtri(uc)
    tail = c + jax.random.exponential(k2, shape) / c
    sign = jnp.where(jax.random.bernoulli(k3, 0.5, shape), 1.0, -1.0)
    return jnp.where(jax.random.uniform(k4, shape) < p_core, core, sign * tail)


def likelihood_dist(likelihood: str, loc, scale, *, c=HUBER_C, student_df=STUDENT_DF):
    """The observation distribution of ``log L`` around ``loc = log f(theta, x)``."""
    if likelihood == "huber":
        return Huber(loc, scale, c)
    if likelihood == "student_t":
        return dist.StudentT(student_df, loc, scale)
    if likelihood == "normal":
        return dist.Normal(loc, scale)
    raise BayesScalingError(f"likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")


# ==================================================================================================
# The model specification and the NumPyro model


# ==================================================================================================
# Sampling coordinates: centring and non-centring declared for a law's structure


@dataclass(frozen=True)
class Coordinates:
    """Coordinates NUTS samples instead of some of a law's parameters (a reparameterisation).

    The model is unchanged (priors stay on the law's parameters; the log-Jacobian of the map is
    added), only the geometry the sampler sees is: weakly identified parameters often lie on a
    curved ridge that becomes a straight one in coordinates centred on the data.

    Attributes:
        name: short label.
        params: the law parameters computed from the coordinates.
        coords: the sampled coordinates, as :class:`Param` specs (their transform is used), or
            the name of a law parameter that is sampled as itself (with its own transform).
        to_params: ``(c, ref) -> {param: value}`` (``c`` a dict of coordinate values).
        from_params: ``(p, ref) -> {coord: value}``, the inverse (used to initialise).
        reference: ``x -> ref``: data summaries the coordinates are centred on.
        doc: the formulas.
        uses_law: the maps also read the law and every other parameter: they are called as
            ``to_params(c, ref, law, others)`` / ``from_params(p, ref, law, others)`` with
            ``others`` every other parameter value (fixed ones included). Such a block is applied
            last; its Jacobian is triangular (nothing else depends on its parameters).
        log_det: optional closed form of ``log |det d params / d coords|`` (same arguments as
            ``to_params``); otherwise it is computed by forward-mode autodiff.
        with_log_det: optional ``to_params`` returning ``(params, log_det)`` in one pass (used by
            the sampler's density, so shared work is done once).
        switch: optional ``(theta_of_s, s_hat, cov, ref, method) -> Coordinates | None``: looks
            at the posterior mode (``s_hat``, Laplace covariance ``cov`` in the sampling
            coordinates) and returns better coordinates for this table and inference ``method``
            (``"nuts"`` or ``"laplace"``), or ``None`` to keep these.
    """

    name: str
    params: tuple
    coords: tuple
    to_params: Callable = field(repr=False)
    from_params: Callable = field(repr=False)
    reference: Callable = field(repr=False)
    doc: str = ""
    uses_law: bool = False
    log_det: Callable | None = field(default=None, repr=False)
    with_log_det: Callable | None = field(default=None, repr=False)
    switch: Callable | None = field(default=None, repr=False)


def gate_coordinates(beta="beta", lam="lam", zeta="zeta", variable="ptpp") -> Coordinates:
    """Centred coordinates for a gated exponent ``beta_eff(v) = beta (1 - lam sigmoid(zeta log v))``.

    With ``v0`` the geometric mean of ``v`` over the table and ``s0 = sigmoid(zeta log v0)``,
    ``b = log beta_eff(v0) = log beta + log(1 - lam s0)`` (the exponent at the centre) replaces
    ``beta``; ``lam`` and ``zeta`` are sampled as themselves. Inverse:
    ``beta = exp(b) / (1 - lam s0)``; points with ``lam s0 >= 1`` (an exponent clipped to its
    floor at the centre) are outside the support.

    Why these and not more: the data pin the exponent at the centre hardest, and with ``beta``
    free it couples to ``lam`` and ``zeta`` along a curved ridge; ``b`` straightens it. The slope
    of ``log beta_eff`` in ``log v`` is also pinned on two PTPP levels, but as a coordinate
    (with ``zeta``) its map to ``lam`` has Jacobian ``1 / |zeta|``: the density is singular where
    the gate is flat (``zeta = 0``), and when the data cannot tell the gate's sign (its effect
    below the noise, as in most tables drawn from the prior) chains fall into that point and the
    step size collapses (1e-7 on such a table, with R-hat 2.5). ``lam`` and ``zeta`` keep the map
    regular.

    When the gate is visible, though, the data pin its slope, and in (``lam``, ``zeta``) that is a
    curved ridge that drives NUTS to its maximum tree depth. So this block has a ``switch``: when
    the slope at the posterior mode is more than ``GATE_VISIBLE_Z`` (4) Laplace standard
    deviations from 0, ``fit_posterior`` samples in :func:`gate_slope_coordinates` instead, whose
    singular point the chains then never approach.
    """

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x[variable]))}

    def to_params(c, r):
        g = c[lam] * jax.nn.sigmoid(c[zeta] * r["L0"])
        g = jnp.where(g < 1.0, g, jnp.nan)
        return {beta: jnp.exp(c["gate_log_exponent"]) / (1.0 - g), lam: c[lam], zeta: c[zeta]}

    def from_params(p, r):
        g = jnp.clip(p[lam] * jax.nn.sigmoid(p[zeta] * r["L0"]), 0.0, 1.0 - 1e-9)
        return {"gate_log_exponent": jnp.log(p[beta]) + jnp.log1p(-g), lam: p[lam], zeta: p[zeta]}

    def log_det(c, r):
        # only beta depends on b (d beta / d b = beta); lam and zeta map to themselves
        return jnp.log(to_params(c, r)[beta])

    def switch(theta_of_s, s_hat, cov, r, method):
        # the slope at the mode and its Laplace sd (delta method in the sampling coordinates)
        def kappa(sv):
            th = theta_of_s(sv)
            return gate_slope({"lam": th[lam], "zeta": th[zeta]}, r["L0"])

        k = float(kappa(s_hat))
        grad = np.asarray(jax.grad(kappa)(s_hat))
        sd = float(np.sqrt(max(grad @ cov @ grad, 0.0)))
        if not (np.isfinite(k) and abs(k) > GATE_VISIBLE_Z * sd):
            return None
        # NUTS: log |zeta| (no trajectory can leave the support); Laplace: zeta itself, where the
        # Gaussian fits better on the bible_ptpp fits (Pareto k 0.67 against 0.78, Form 2, target)
        sign = -np.sign(k) if method == "nuts" else None
        return gate_slope_coordinates(beta, lam, zeta, variable, sign=sign)

    coords = (Param("gate_log_exponent", init=(-3.0, 0.0), doc="log beta_eff at the centre"),
              lam, zeta)
    return Coordinates("gate", (beta, lam, zeta), coords, to_params, from_params, ref,
                       gate_coordinates.__doc__, log_det=log_det, switch=switch)


GATE_VISIBLE_Z = 4.0


def gate_slope(p, L0):
    """d log beta_eff / d log v at ``log v = L0``: ``-zeta (1 - s0) lam s0 / (1 - lam s0)``."""
    s0 = jax.nn.sigmoid(p["zeta"] * L0)
    g = p["lam"] * s0
    return -p["zeta"] * (1.0 - s0) * g / (1.0 - g)


def gate_slope_coordinates(beta="beta", lam="lam", zeta="zeta", variable="ptpp",
                           sign=None) -> Coordinates:
    """Coordinates for a gate the data can see: ``b = log beta_eff(v0)``, its slope
    ``kappa = d log beta_eff / d log v`` at ``v0`` (:func:`gate_slope`), and ``zeta`` (or, with
    ``sign`` given, ``log |zeta|``).

    Inverse: ``t = -kappa / zeta`` (> 0), ``lam = t / ((t + 1 - s0) s0)``,
    ``beta = exp(b) (t + 1 - s0) / (1 - s0)``. On two levels of ``v`` the data pin ``b`` and
    ``kappa``; the ridge that is curved in (``lam``, ``zeta``) is straight here. A slope requires
    ``kappa zeta < 0``. With ``zeta`` sampled as itself, points with ``kappa zeta >= 0`` are
    outside the support, and a NUTS trajectory can step across ``zeta = 0`` into them (a
    divergence). With ``sign`` (``-sign(kappa)`` at the posterior mode, chosen by
    :func:`gate_coordinates`' switch for NUTS), ``zeta = sign exp(gate_log_abs_zeta)``: the
    coordinates then cover exactly the support. The map to ``lam`` is singular at a flat gate
    (``zeta = 0``), which is why these are used only when the slope at the mode is clearly away
    from 0.
    """
    log_zeta = sign is not None
    sign = 1.0 if not log_zeta or sign >= 0 else -1.0
    zname = "gate_log_abs_zeta" if log_zeta else zeta

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x[variable]))}

    def to_params(c, r):
        z = sign * jnp.exp(c[zname]) if log_zeta else c[zname]
        s0 = jax.nn.sigmoid(z * r["L0"])
        t = -c["gate_slope"] / z
        t = jnp.where(t > 0, t, jnp.nan)
        lam_v = t / ((t + 1.0 - s0) * s0)
        beta_v = jnp.exp(c["gate_log_exponent"]) * (t + 1.0 - s0) / (1.0 - s0)
        return {beta: beta_v, lam: lam_v, zeta: z}

    def from_params(p, r):
        z = p[zeta]
        s0 = jax.nn.sigmoid(z * r["L0"])
        g = jnp.clip(p[lam] * s0, 1e-12, 1.0 - 1e-6)
        kappa = -z * (1.0 - s0) * g / (1.0 - g)
        return {"gate_log_exponent": jnp.log(p[beta]) + jnp.log1p(-g), "gate_slope": kappa,
                zname: jnp.log(jnp.abs(z)) if log_zeta else z}

    coords = (Param("gate_log_exponent", init=(-3.0, 0.0), doc="log beta_eff at the centre"),
              Param("gate_slope", init=(-0.5, 0.5), doc="d log beta_eff / d log v at the centre"),
              Param(zname, init=(-3.0, 1.0), doc="log |zeta| (zeta's sign fixed)") if log_zeta
              else zeta)
    return Coordinates("gate_slope", (beta, lam, zeta), coords, to_params, from_params, ref,
                       gate_slope_coordinates.__doc__)


def power_coordinates(coef="A", exponent="alpha", variable="N") -> Coordinates:
    """Centred coordinates for a power term ``coef / v^exponent``.

    ``coef_at_centre = log coef - exponent log v0`` (the term's log value at ``v0``, the
    geometric mean of ``v`` over the table) replaces ``coef``; the exponent is kept. The data pin
    the term near the centre of the table, so ``log coef`` and the exponent are otherwise tied by
    ``log coef = c + exponent log v0``: a line in ``(log coef, exponent)`` but a curve in the
    ``(log coef, log exponent)`` space exponents are sampled in. Here it is straight.
    """
    name = f"{coef}_at_centre"

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x[variable]))}

    def to_params(c, r):
        return {coef: jnp.exp(c[name] + c[exponent] * r["L0"]), exponent: c[exponent]}

    def from_params(p, r):
        return {name: jnp.log(p[coef]) - p[exponent] * r["L0"], exponent: p[exponent]}

    return Coordinates(f"power_{coef}", (coef, exponent),
                       (Param(name, init=(-5.0, 5.0), doc=f"log {coef}/{variable}^{exponent} at the "
                                                          "centre of the table"), exponent),
                       to_params, from_params, ref, power_coordinates.__doc__)


def _centre_row(x):
    """The table row closest to the centre of the table (standardised log coordinates)."""
    X = jnp.stack([jnp.log(jnp.maximum(x[v], 1e-300)) for v in sorted(x)], -1)
    z = (X - X.mean(0)) / (X.std(0) + 1e-12)
    i = jnp.argmin(jnp.sum(z * z, -1))
    return {v: x[v][i][None] for v in x}


_LEVEL_BLOCKS: dict = {}


def level_coordinates(coefs=("E",)) -> Coordinates:
    """Sample the law's level at the centre of the table and the shares of its linear terms.

    For parameters ``c_1..c_J`` that enter the law linearly, ``f = sum_j c_j g_j(x) + h(x)``
    (``g_j`` and ``h`` depend on the other parameters), with ``x0`` the table row closest to the
    centre of the table (in standardised log coordinates) and ``T_j = c_j g_j(x0)`` the terms there:

        log_level = log f(theta, x0)
        share_j   = log T_j - log T_1          for j = 2..J   (log-ratio to the first term)

    Inverse: ``w = softmax(0, share_2, .., share_J)``, ``c_j = (exp(log_level) - h(x0)) w_j /
    g_j(x0)``. Every ``c_j`` is positive by construction and the terms sum to the level exactly.

    Why: the data pin ``f`` near the centre to within the noise, so the positive terms
    (``E``, ``A/N^alpha``, a floor ``F/PTPP^eta`` on two PTPP levels, ...) must add up to a known
    number. With each ``log c_j`` a coordinate, that sum constraint is a sharply curved surface
    (a term's log is free while it is small and pinned once it carries the sum) and, with one
    term solved from the others, a wall where it reaches 0. Here the level is one coordinate, the
    split is a smooth log-ratio, and the coefficient of each power term moves with its exponent
    (``log c_j = log T_j - log g_j(x0)``), which also centres the power terms.
    """
    coefs = tuple(coefs)
    if coefs in _LEVEL_BLOCKS:
        return _LEVEL_BLOCKS[coefs]
    share_names = tuple(f"share_{c}" for c in coefs[1:])

    def ref(x):
        return {"x": _centre_row(x)}

    def split(r, law, others):
        # f is linear in the coefficients, f = h + g . c: one batched evaluation at c = 0, e_j
        basis = jnp.concatenate([jnp.zeros((1, len(coefs))), jnp.eye(len(coefs))])
        vals = jax.vmap(lambda cv: law.fn({**others, **{c: cv[j] for j, c in enumerate(coefs)}},
                                          r["x"])[0])(basis)
        return vals[1:] - vals[0], vals[0]

    def with_log_det(c, r, law, others):
        g, h = split(r, law, others)
        y = jnp.stack([jnp.zeros(())] + [c[n] for n in share_names])
        w = jax.nn.softmax(y)
        rest = jnp.exp(c["log_level"]) - h
        rest = jnp.where(rest > 0, rest, jnp.nan)
        vals = rest * w / g
        # d log c / d (log_level, shares) has determinant exp(log_level) / rest
        ld = c["log_level"] - jnp.log(rest) + jnp.sum(jnp.log(vals))
        return {n: vals[j] for j, n in enumerate(coefs)}, ld

    def to_params(c, r, law, others):
        return with_log_det(c, r, law, others)[0]

    def from_params(p, r, law, others):
        g, h = split(r, law, others)
        T = jnp.stack([p[n] for n in coefs]) * g
        out = {"log_level": jnp.log(jnp.sum(T) + h)}
        out.update({n: jnp.log(T[j + 1]) - jnp.log(T[0]) for j, n in enumerate(share_names)})
        return out

    coords = (Param("log_level", init=(-1.0, 3.0), doc="log of the law at the centre"),) + tuple(
        Param(n, init=(-5.0, 5.0), doc=f"log {n[6:]}-term / {coefs[0]}-term at the centre")
        for n in share_names)
    block = Coordinates("level", coefs, coords, to_params, from_params, ref,
                        level_coordinates.__doc__, uses_law=True, with_log_det=with_log_det)
    _LEVEL_BLOCKS[coefs] = block
    return block


# Laws declare their sampling coordinates by their function (renamed copies of a law share it).
SAMPLING_COORDINATES: dict[Callable, tuple] = {}
LINEAR_COEFFICIENTS: dict[Callable, tuple] = {}


def register_coordinates(fn: Callable, *blocks: Coordinates, linear: tuple = ()):
    """Declare sampling coordinates for every law whose function is ``fn``.

    ``linear`` names parameters that enter the law linearly (``f = c g + h``); the free ones are
    replaced by the level of the law at the centre of the table and the shares of their terms
    (:func:`level_coordinates`), and blocks that touch them are then not used."""
    SAMPLING_COORDINATES[fn] = tuple(blocks)
    LINEAR_COEFFICIENTS[fn] = tuple(linear)


def _register_builtin_coordinates():
    from .laws import ptpp

    size = power_coordinates("A", "alpha", "N")
    data = power_coordinates("B", "beta", "D")
    barrier = power_coordinates("C", "gamma", "replay")
    floor = power_coordinates("F", "eta", "ptpp")
    gate = gate_coordinates()
    lin = ("E", "A", "B", "C")
    register_coordinates(ptpp._dcpt, size, data, barrier, linear=lin)
    register_coordinates(ptpp._floor, size, data, barrier, floor, linear=lin + ("F",))
    register_coordinates(ptpp._gated, size, gate, barrier, linear=lin)
    register_coordinates(ptpp._gated_floor, size, gate, barrier, floor, linear=lin + ("F",))
    for fn in (ptpp._floor, ptpp._gated_floor):
        register_prior_reference(fn, "F", "eta", PTPP_REF)
    try:
        from .laws import m3
    except ImportError:  # pragma: no cover
        return
    register_coordinates(m3._chinchilla, size, data, linear=("E", "A", "B"))
    register_coordinates(m3._muennighoff, linear=("E",))


_register_builtin_coordinates()


# ==================================================================================================
# The model specification and the NumPyro model


@dataclass(frozen=True)
class Spec:
    """Everything that defines a model except the data: law, priors, likelihood, fixed values.

    ``free`` lists the inferred parameters (the law's non-fixed parameters, then ``sigma`` unless
    the scale is fixed); the unconstrained vector ``u`` has one entry per free parameter, each
    through its Param transform. ``blocks`` are sampling coordinates replacing some of them; the
    sampling vector ``s`` holds the blocks' coordinates (transformed), then the remaining ``u``.
    """

    law: Law
    free: tuple
    priors: Mapping[str, dist.Distribution]
    likelihood: str = "huber"
    fixed: Mapping[str, float] = field(default_factory=dict)
    scale: float | None = None
    c: float = HUBER_C
    student_df: float = STUDENT_DF
    blocks: tuple = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.free)

    @property
    def law_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.free if p.name != "sigma")

    def key(self):
        """Hashable structure of the model (one compiled program per key, whatever the data)."""
        return (self.law.name, self.law.fn, tuple(sorted(self.law.column_map.items())),
                self.names, tuple(sorted(self.fixed)), self.scale is None, self.likelihood,
                self.c, self.student_df, tuple((k, id(v)) for k, v in sorted(self.priors.items())),
                tuple(id(b) for b in self.blocks))

    # --- the unconstrained vector u (one entry per free parameter) -------------------------------
    def theta(self, u):
        """Natural values of the free parameters from ``u`` (last axis), as a dict of arrays."""
        return {p.name: p.from_unconstrained(u[..., i]) for i, p in enumerate(self.free)}

    def u(self, theta: Mapping[str, float]):
        return jnp.stack([p.to_unconstrained(jnp.asarray(theta[p.name], jnp.float64))
                          for p in self.free], -1)

    def log_jacobian(self, u):
        """log |d theta / d u|: the density of the unconstrained space."""
        return sum(log_abs_det_jacobian(p, u[..., i]) for i, p in enumerate(self.free))

    def log_jacobian_natural(self, u):
        """log |d theta / d xi| for the natural coordinates xi (log theta if :func:`log_scale`)."""
        return sum(jnp.log(p.from_unconstrained(u[..., i]))
                   for i, p in enumerate(self.free) if log_scale(p))

    # --- the sampling vector s -------------------------------------------------------------------
    @property
    def plain(self) -> tuple:
        taken = {n for b in self.blocks for n in b.params}
        return tuple(p for p in self.free if p.name not in taken)

    @property
    def sampled(self) -> tuple:
        """Params of the sampling vector: every block's coordinates, then the plain parameters."""
        return tuple(c for b in self.blocks for c in b.coords) + self.plain

    def theta_s(self, s, ref):
        """Natural values from one sampling vector ``s`` (1-D) and the data references."""
        return self._theta_s(s, ref, False)[0]

    def _theta_s(self, s, ref, with_jac):
        """(theta, log |d theta / d s|) in one pass over the blocks (the Jacobian when asked)."""
        vals = {p.name: p.from_unconstrained(s[i]) for i, p in enumerate(self.sampled)}
        jac = (sum(log_abs_det_jacobian(p, s[i]) for i, p in enumerate(self.sampled))
               if with_jac else 0.0)
        theta = {p.name: vals[p.name] for p in self.plain}
        for b in self.blocks:
            c = {cp.name: vals[cp.name] for cp in b.coords}
            args = (ref[b.name], self.law, self._others(theta, b, ref)) if b.uses_law else (
                ref[b.name],)
            if with_jac and b.with_log_det is not None:
                out, ld = b.with_log_det(c, *args)
            else:
                out = b.to_params(c, *args)
                ld = 0.0
                if with_jac and b.log_det is not None:
                    ld = b.log_det(c, *args)
                elif with_jac:
                    names = [cp.name for cp in b.coords]

                    def block(cv, b=b, args=args, names=names):
                        o = b.to_params({n: cv[j] for j, n in enumerate(names)}, *args)
                        return jnp.stack([o[nm] for nm in b.params])

                    cv = jnp.stack([c[n] for n in names])
                    ld = jnp.linalg.slogdet(jax.jacfwd(block)(cv))[1]
            theta.update(out)
            jac = jac + ld
        return theta, jac

    def _others(self, theta, block, ref):
        out = {k: v for k, v in theta.items() if k != "sigma" and k not in block.params}
        out.update(ref["__fixed__"])
        return out

    def s(self, theta, ref):
        """Sampling vector from natural values (the inverse of :meth:`theta_s`)."""
        vals = {p.name: jnp.asarray(theta[p.name], jnp.float64) for p in self.plain}
        for b in self.blocks:
            p = {n: jnp.asarray(theta[n], jnp.float64) for n in b.params}
            if b.uses_law:
                th = {k: jnp.asarray(v, jnp.float64) for k, v in theta.items()}
                vals.update(b.from_params(p, ref[b.name], self.law, self._others(th, b, ref)))
            else:
                vals.update(b.from_params(p, ref[b.name]))
        return jnp.stack([p.to_unconstrained(vals[p.name]) for p in self.sampled], -1)

    def log_jacobian_s(self, s, ref):
        """log |d theta / d s|: Param transforms plus each block's coordinate map (triangular:
        a block that reads other parameters holds them at their values)."""
        return self._theta_s(s, ref, True)[1]

    # --- densities -------------------------------------------------------------------------------
    def law_params(self, theta, fixed):
        p = {k: theta[k] for k in self.law_names}
        p.update(fixed)
        return p

    def sigma(self, theta, data):
        return theta["sigma"] if self.scale is None else data["scale"]

    def pointwise_loglik(self, theta, data):
        """log p(log L_i | theta, sigma) for every row (the log_likelihood group)."""
        mu = jnp.log(self.law.fn(self.law_params(theta, data["fixed"]), data["x"]))
        sigma = self.sigma(theta, data)
        r = mu - data["y"]
        if self.likelihood == "huber":
            ll = huber_logpdf(r, sigma, self.c)
        else:
            ll = likelihood_dist(self.likelihood, mu, sigma, student_df=self.student_df).log_prob(data["y"])
        return jnp.where(jnp.isfinite(ll), ll, -jnp.inf)

    def loglik(self, theta, data):
        """Summed log-likelihood of the table's rows (padding rows, weight 0, add nothing)."""
        return jnp.sum(jnp.where(data["w"] > 0, self.pointwise_loglik(theta, data), 0.0))

    def log_prior(self, theta):
        """Sum of the priors' log densities at the natural values (no Jacobian)."""
        values = {**self.fixed, **theta}
        return sum(prior_given(self.priors, p.name, values).log_prob(theta[p.name])
                   for p in self.free)

    def _inside(self, theta):
        ok = True
        for p in self.free:
            v = theta[p.name]
            ok = ok & (v > p.lower) & (v < p.upper) & jnp.isfinite(v)
        return ok

    def log_joint(self, u, data, jacobian=True):
        """Unnormalised log posterior at ``u``: in the unconstrained space (``jacobian=True``)
        or in the natural space (``False``, whose maximiser is the MAP)."""
        theta = self.theta(u)
        lp = self.log_prior(theta) + self.loglik(theta, data)
        if jacobian:
            lp = lp + self.log_jacobian(u)
        return jnp.where(jnp.isfinite(lp), lp, -jnp.inf)

    def log_joint_s(self, s, data):
        """Unnormalised log posterior density of the sampling vector ``s`` (what NUTS samples)."""
        theta, jac = self._theta_s(s, data["ref"], True)
        lp = self.log_prior(theta) + self.loglik(theta, data) + jac
        return jnp.where(jnp.isfinite(lp) & self._inside(theta), lp, -jnp.inf)


def make_spec(law, *, priors=None, likelihood="huber", fixed=None, scale=None, c=HUBER_C,
              student_df=STUDENT_DF, coordinates="auto", level=None) -> Spec:
    """Resolve the law, the fixed parameters and the priors into a :class:`Spec`.

    ``priors``: ``None`` (defaults), ``"flat"`` (improper flat priors on the law's parameters; the
    scale keeps its default prior unless fixed), or ``{name: distribution}`` overriding some
    defaults. Unknown names raise. ``coordinates``: ``"auto"`` (those declared for the law's
    function, skipping any block that touches a fixed parameter), ``None`` (plain Param
    transforms), or a tuple of :class:`Coordinates`. ``level``: linear coefficients to replace by
    the law's level at the centre of the table and their shares (:func:`level_coordinates`);
    with ``"auto"`` the law's declared free linear coefficients.
    """
    law = get_law(law)
    if likelihood not in LIKELIHOODS:
        raise BayesScalingError(f"likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")
    if "sigma" in law.param_names:
        raise BayesScalingError(f"law {law.name} has a parameter named 'sigma', which the "
                                "likelihood's scale uses; rename it")
    fixed = {k: float(v) for k, v in dict(fixed or {}).items()}
    unknown = set(fixed) - set(law.param_names)
    if unknown:
        raise BayesScalingError(f"fixed names {sorted(unknown)} are not parameters of {law.name}: "
                                f"{law.param_names}")
    if scale is not None and not scale > 0:
        raise BayesScalingError(f"a fixed scale must be positive, got {scale}")
    free = tuple(p for p in law.params if p.name not in fixed)
    if not free:
        raise BayesScalingError(f"every parameter of {law.name} is fixed; nothing to infer")
    if scale is None:
        free = free + (SCALE,)
    pri = default_priors(law)
    if isinstance(priors, str):
        if priors != "flat":
            raise BayesScalingError(f"priors must be None, 'flat' or a dict, got {priors!r}")
        pri.update({p.name: _FLAT[log_scale(p)] for p in law.params})
    elif priors is not None:
        unknown = set(priors) - set(law.param_names) - {"sigma"}
        if unknown:
            raise BayesScalingError(f"priors given for {sorted(unknown)}, which are not parameters "
                                    f"of {law.name} ({law.param_names}) or 'sigma'")
        pri.update(priors)
    pri = {p.name: pri[p.name] for p in free}
    if coordinates == "auto":
        blocks = tuple(b for b in SAMPLING_COORDINATES.get(law.fn, ())
                       if not set(b.params) & set(fixed))
        if level is None:
            level = tuple(c for c in LINEAR_COEFFICIENTS.get(law.fn, ()) if c not in fixed) or None
    elif coordinates is None:
        blocks = ()
    else:
        blocks = tuple(coordinates)
        missing = {n for b in blocks for n in b.params} - {p.name for p in free}
        if missing:
            raise BayesScalingError(f"coordinates replace {sorted(missing)}, which are not free "
                                    f"parameters of {law.name}")
    if level is not None:
        level = (level,) if isinstance(level, str) else tuple(level)
        if set(level) & set(fixed):
            raise BayesScalingError(f"level coefficients {level} include fixed ones")
        blocks = tuple(b for b in blocks if not set(b.params) & set(level))
        blocks = blocks + (level_coordinates(level),)
    taken = [n for b in blocks for n in b.params]
    if len(taken) != len(set(taken)):
        raise BayesScalingError(f"coordinate blocks overlap: {taken}")
    blocks = tuple(_resolve_block(b, law) for b in blocks)
    blocks = tuple(b for b in blocks if not b.uses_law) + tuple(b for b in blocks if b.uses_law)
    return Spec(law, free, pri, likelihood, fixed, None if scale is None else float(scale), c,
                student_df, blocks)


_RESOLVED: dict = {}


def _resolve_block(block: Coordinates, law: Law) -> Coordinates:
    """Replace coordinate names that refer to law parameters by the law's Param specs (cached, so
    a law's resolved blocks keep their identity and compiled programs are reused)."""
    key = (id(block), law.name, law.fn)
    if key not in _RESOLVED:
        coords = tuple(law.param(c) if isinstance(c, str) else c for c in block.coords)
        _RESOLVED[key] = (dataclasses.replace(block, coords=coords), block)
    return _RESOLVED[key][0]


def _data_pytree(spec: Spec, df: pd.DataFrame, pad: bool = True):
    """The table as the arrays every compiled density reads.

    With ``pad`` the rows are padded to ``row_bucket(n)`` (the next power of two, at least 32)
    with copies of the first row of weight ``w = 0``, which add nothing to any density: fits on
    tables of 100 and 120 rows (held-out splits, anchor refits) then share their compiled
    programs (``bayes_scaling.fit.PAD_ROWS = False`` turns it off everywhere, for benchmarks).
    The blocks' reference points are computed from the real rows only."""
    x = spec.law.inputs(df)
    y = jnp.log(jnp.asarray(df["loss"].to_numpy(dtype=float)))
    fixed = {k: jnp.asarray(v, jnp.float64) for k, v in spec.fixed.items()}
    ref = {b.name: b.reference(x) for b in spec.blocks}
    ref["__fixed__"] = fixed
    x, y, w = pad_rows(x, y, None if pad is not False else len(y))
    return {"x": x, "y": y, "w": w, "fixed": fixed, "ref": ref,
            "scale": jnp.asarray(spec.scale if spec.scale is not None else 1.0, jnp.float64)}


def build_model(law, *, priors=None, likelihood="huber", fixed=None, scale=None, c=HUBER_C,
                student_df=STUDENT_DF) -> Callable:
    """A NumPyro model function ``model(x, y=None)`` for ``law``.

    ``x`` is ``law.inputs(table)`` (a dict of arrays), ``y`` the observed ``log loss`` (or ``None``
    to simulate). Sample sites ``<name>_u`` hold each parameter on the real line (its Param
    transform, prior plus log-Jacobian); deterministic sites ``<name>`` hold the natural values;
    ``y`` is the observation site. ``numpyro.infer.Predictive(model, ...)`` works on it.

    The arguments are those of :func:`fit_posterior`.
    """
    spec = make_spec(law, priors=priors, likelihood=likelihood, fixed=fixed, scale=scale, c=c,
                     student_df=student_df)
    return _numpyro_model(spec)


def _numpyro_model(spec: Spec):
    fixed = {k: jnp.asarray(v, jnp.float64) for k, v in spec.fixed.items()}

    def model(x, y=None):
        theta = {}
        # conditional priors after the parameters they depend on
        free = {p.name: p for p in spec.free}
        for p in (free[n] for n in prior_order(spec.priors, free)):
            prior = prior_given(spec.priors, p.name, {**fixed, **theta})
            u = numpyro.sample(f"{p.name}_u", OnUnconstrained(prior, p))
            theta[p.name] = numpyro.deterministic(p.name, p.from_unconstrained(u))
        sigma = theta["sigma"] if spec.scale is None else spec.scale
        mu = jnp.log(spec.law.fn(spec.law_params(theta, fixed), x))
        n = mu.shape[-1]
        with numpyro.plate("rows", n):
            numpyro.sample("y", likelihood_dist(spec.likelihood, mu, sigma, c=spec.c,
                                                   student_df=spec.student_df),
                           obs=y)

    model.spec = spec
    return model


# ==================================================================================================
# Compiled pieces, cached per model structure (so new data of the same shape never recompiles)

_CACHE: dict = {}


def _cached(kind, spec: Spec, build):
    key = (kind, spec.key())
    if key not in _CACHE:
        _CACHE[key] = (build(), spec.priors)  # keep the priors alive: their ids are in the key
    return _CACHE[key][0]


def _map_objective(spec: Spec):
    """``f(u, args) = -log_joint(u) / n`` in the natural coordinates, for ``lbfgs_multistart``.

    The natural coordinates are ``log theta`` for scale parameters (``log_init``) and ``theta``
    otherwise: priors there are Normal-shaped, and a flat prior there makes the MAP the Huber fit.
    """

    def build():
        def f(u, args):
            theta = spec.theta(u)
            lp = spec.log_prior(theta) + spec.loglik(theta, args["data"])
            lp = lp + spec.log_jacobian_natural(u)
            return jnp.where(jnp.isfinite(lp), -lp / args["n"], jnp.inf)
        return f

    return _cached("map", spec, build)


def _log_joint_batch(spec: Spec):
    return _cached("lj", spec, lambda: jax.jit(jax.vmap(
        lambda s, data: spec.log_joint_s(s, data), in_axes=(0, None))))


def _to_s_batch(spec: Spec):
    return _cached("to_s", spec, lambda: jax.jit(jax.vmap(
        lambda u, ref: spec.s(spec.theta(u), ref), in_axes=(0, None))))


def _theta_s_batch(spec: Spec):
    return _cached("theta_s", spec, lambda: jax.jit(jax.vmap(
        lambda s, ref: spec.theta_s(s, ref), in_axes=(0, None))))


# ==================================================================================================
# Modes: multi-start optimisation, Laplace approximation, mode detection


@dataclass
class Mode:
    """A local mode of the sampled density with its Laplace approximation."""

    s: np.ndarray
    log_density: float
    cov: np.ndarray
    chol: np.ndarray  # a square root of cov (chol @ chol.T == cov), not necessarily triangular
    log_mass: float  # log density + 0.5 log det(2 pi cov): Laplace estimate of the mode's mass
    hessian_ok: bool


def _laplace(spec, data, s) -> Mode:
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


def _map_stage(spec, data, n_starts, seed, max_iter, inits=None):
    """Multi-start L-BFGS for the MAP in natural coordinates (the same optimiser as ``fit_map``)."""
    rng = np.random.default_rng(seed)
    if inits is None:
        theta0 = np.stack([p.sample_init(rng, n_starts) for p in spec.free], -1)
    else:
        theta0 = np.atleast_2d(np.asarray(inits, float))
    u0 = np.asarray(spec.u({p.name: theta0[:, i] for i, p in enumerate(spec.free)}))
    n = float(np.sum(data["w"]))
    args = {"data": data, "n": jnp.asarray(n)}
    u_map, v_map, it_map, g_map = lbfgs_multistart(_map_objective(spec), u0, args,
                                                   max_iter=max_iter)
    finite = np.isfinite(v_map) & np.all(np.isfinite(u_map), 1)
    if not finite.any():
        raise FitError(f"all {len(u0)} starts of the posterior mode of {spec.law.name} ended "
                       "non-finite; check the table, the priors and the init ranges")
    best = int(np.argmin(np.where(finite, v_map, np.inf)))
    theta_map = {k: float(v) for k, v in spec.theta(jnp.asarray(u_map[best])).items()}
    starts = pd.DataFrame({f"init_{p.name}": theta0[:, i] for i, p in enumerate(spec.free)})
    th = np.stack([np.asarray(v) for v in spec.theta(jnp.asarray(u_map)).values()], -1)
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
    return _cached("newton", spec, lambda: jax.jit(f))


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


def _find_modes(spec, data, u_ok, values, max_starts=4):
    """Modes of the sampled density: damped Newton from the best distinct MAP endpoints (mapped
    into the sampling coordinates); distinct modes sorted by Laplace mass."""
    order = np.argsort(values)
    starts = []
    for j in order:
        if all(np.max(np.abs(u_ok[j] - u_ok[k])) > 1e-3 for k in starts):
            starts.append(j)
        if len(starts) >= max_starts:
            break
    s0 = np.asarray(_to_s_batch(spec)(jnp.asarray(u_ok[starts]), data["ref"]))
    found = [_newton(spec, data, si) for si in s0]
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
    vdf = _data.validate(df, spec.law, min_rows=len(spec.law_names) + 1)
    data = _data_pytree(spec, vdf)
    theta, nlp, starts, _ = _map_stage(spec, data, n_starts, seed, max_iter, inits)
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
    modes = [_laplace(spec, data, sj) for sj in kept_s]
    modes.sort(key=lambda m: -m.log_mass)
    top = modes[0].log_mass
    return [m for m in modes if m.log_mass - top >= math.log(min_rel_mass)]


def _barrier(spec, data, s1, v1, s2, v2, depth=3.0):
    t = np.linspace(0.0, 1.0, 18)[1:-1, None]
    seg = (1 - t) * s1[None] + t * s2[None]
    lp = np.asarray(_log_joint_batch(spec)(jnp.asarray(seg), data))
    return bool(np.min(lp) < -max(v1, v2) - depth)


# ==================================================================================================
# NUTS on the whitened unconstrained space


def _whitened_model(spec: Spec):
    d = len(spec.sampled)

    def model(data, center, chol):
        z = numpyro.sample("z", dist.ImproperUniform(constraints.real_vector, (), (d,)))
        numpyro.factor("log_joint", spec.log_joint_s(center + chol @ z, data))

    return model


def _mcmc(spec, *, num_chains, num_warmup, num_samples, chain_method, dense_mass, target_accept,
          max_tree_depth, progress_bar, shapes=()):
    """A NumPyro MCMC object for ``spec``, cached so later fits of the same shape reuse its
    compiled program (the data, centre and whitening matrix are jitted arguments). ``shapes``
    (the data's array shapes) is part of the key: a cached MCMC object re-run on arrays of
    another shape fails inside NumPyro's vectorised chains."""
    from numpyro.infer import MCMC, NUTS

    def build():
        kernel = NUTS(_whitened_model(spec), dense_mass=dense_mass,
                      target_accept_prob=target_accept, max_tree_depth=max_tree_depth,
                      init_strategy=numpyro.infer.init_to_median)
        return MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                    chain_method=chain_method, progress_bar=progress_bar, jit_model_args=True)

    key = ("mcmc", num_chains, num_warmup, num_samples, chain_method, dense_mass, target_accept,
           max_tree_depth, progress_bar, shapes)
    return _cached(key, spec, build)


def _run_nuts(spec, data, center, chol, init_z, *, seed, **kw):
    shapes = tuple(np.shape(a) for a in jax.tree_util.tree_leaves(data))
    mcmc = _mcmc(spec, shapes=shapes, **kw)
    mcmc._warmup_state = None  # a cached object must warm up again on new data
    init_z = jnp.asarray(init_z)
    if kw["num_chains"] == 1:  # NumPyro takes one chain's start without the chain axis
        init_z = init_z[0]
    mcmc.run(jax.random.PRNGKey(seed), data, jnp.asarray(center), jnp.asarray(chol),
             init_params={"z": init_z},
             extra_fields=("diverging", "energy", "num_steps", "accept_prob",
                           "adapt_state.step_size", "potential_energy"))
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["z"])  # (chains, draws, d)
    extra = {k: np.asarray(v) for k, v in mcmc.get_extra_fields(group_by_chain=True).items()}
    s = center + np.einsum("ij,cdj->cdi", chol, z)
    return s, extra


def _sample_laplace(spec, data, mode: Mode, num_chains, num_samples, seed):
    """Draws from the Laplace approximation in the sampling space, and its Pareto-k.

    ``k_hat`` is the Pareto shape of the importance ratios p(s)/q(s) (Yao et al. 2018, "Yes, but
    did it work?"): below 0.7 the Gaussian is a usable approximation of the posterior.
    """
    import arviz as az

    rng = np.random.default_rng(seed)
    z = rng.standard_normal((num_chains * num_samples, len(mode.s)))
    s = mode.s + z @ mode.chol.T
    log_p = np.asarray(_log_joint_batch(spec)(jnp.asarray(s), data))
    log_q = -0.5 * np.sum(z * z, 1)
    lw = np.where(np.isfinite(log_p), log_p - log_q, -np.inf)
    lw = lw - np.max(lw[np.isfinite(lw)]) if np.isfinite(lw).any() else lw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, k_hat = az.psislw(np.where(np.isfinite(lw), lw, -1e10))
    return s.reshape(num_chains, num_samples, -1), float(k_hat), float(np.mean(~np.isfinite(log_p)))


# ==================================================================================================
# The result object


@dataclass
class Posterior:
    """Posterior draws of a law's parameters, with diagnostics, forecasts and persistence.

    Attributes:
        law: the law.
        idata: ArviZ InferenceData with ``posterior`` (every free parameter and ``sigma``),
            ``sample_stats`` (NUTS), ``log_likelihood`` (``y``: pointwise log density of each
            row's log loss, for LOO), ``observed_data`` (``y = log loss``) and ``constant_data``
            (the law's input columns).
        map: the posterior mode in natural coordinates (every parameter, fixed ones included,
            and ``sigma``).
        diagnostics: max R-hat, min bulk/tail ESS, divergences, BFMI, tree-depth hits (NUTS) or
            the Pareto k of the Laplace approximation, each with its threshold.
        modes: distinct local modes found by the optimiser (relative Laplace mass, parameters).
        settings: how it was fitted (law, likelihood, priors, fixed values, sampler settings).
        data_hash: hash of the fitted columns.
        spec: the model as it was sampled, sampling coordinates included (``None`` for a
            posterior loaded from disk).
    """

    law: Law
    idata: object
    map: dict
    diagnostics: dict
    modes: pd.DataFrame
    settings: dict
    data_hash: str
    spec: Spec | None = field(default=None, repr=False)

    # --- convergence -----------------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        """Whether every convergence diagnostic passed (see :attr:`diagnostics`)."""
        return bool(self.diagnostics.get("ok", False))

    @property
    def method(self) -> str:
        return self.settings["method"]

    @property
    def param_names(self) -> list[str]:
        return [n for n in self.settings["free"]]

    def summary(self, **kw) -> pd.DataFrame:
        """``az.summary`` of the parameters (mean, sd, HDI, MCSE, ESS, R-hat)."""
        import arviz as az

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return az.summary(self.idata, var_names=self.param_names, **kw)

    def draws(self, name=None):
        """Posterior draws flattened over chains: a dict of arrays (or one array for ``name``)."""
        post = self.idata.posterior
        names = self.param_names if name is None else [name]
        out = {n: np.asarray(post[n]).reshape(-1) for n in names}
        return out if name is None else out[name]

    def _param_draws(self, max_draws=None):
        d = self.draws()
        fixed = self.settings["fixed"]
        S = len(next(iter(d.values())))
        idx = np.arange(S)
        if max_draws is not None and S > max_draws:
            idx = np.linspace(0, S - 1, max_draws).round().astype(int)
        p = {k: jnp.asarray(v[idx]) for k, v in d.items() if k != "sigma"}
        for k, v in fixed.items():
            p[k] = jnp.full(len(idx), float(v))
        sigma = d["sigma"][idx] if "sigma" in d else np.full(len(idx), self.settings["scale"])
        return p, jnp.asarray(sigma)

    def _check_use(self):
        if not self.ok:
            warnings.warn(
                f"using a posterior of {self.law.name} that failed its convergence diagnostics "
                f"({'; '.join(self.diagnostics.get('failed', [])) or 'see .diagnostics'}); "
                "its intervals may be wrong", ConvergenceWarning, stacklevel=3)

    # --- predictions -----------------------------------------------------------------------------
    def predict_draws(self, df, kind="mean", *, seed=0, max_draws=None,
                      discrepancy=None) -> np.ndarray:
        """Predicted loss for every posterior draw and row: an array of shape ``(S, n)``.

        ``kind="mean"``: the law's value ``f(theta_s, x)``; ``"predictive"``: a new observation,
        ``f(theta_s, x) * exp(sigma_s * eps)`` with ``eps`` drawn from the likelihood (Huber,
        Student-t or Normal; seeded by ``seed``). ``max_draws`` thins the draws evenly.
        ``discrepancy``: a model-discrepancy scale ``tau`` (default: ``settings["discrepancy"]``,
        set by :func:`estimate_discrepancy`, else 0): both kinds are multiplied by
        ``exp(tau d(x) z)``, ``z ~ N(0, 1)``, with ``d`` the :func:`extrapolation_distance` of the
        row from the fitted table, so intervals widen with extrapolation and not inside the data.
        Vectorised over draws (one ``vmap``).
        """
        if kind not in ("mean", "predictive"):
            raise BayesScalingError(f"kind must be 'mean' or 'predictive', got {kind!r}")
        self._check_use()
        x = _forecast_inputs(self.law, df)
        p, sigma = self._param_draws(max_draws)
        out = np.asarray(_vmapped_law(self.law)(p, x))
        k_noise, k_disc = jax.random.split(jax.random.PRNGKey(seed))
        if kind == "predictive":
            eps = _standard_noise(self.settings["likelihood"], k_noise, out.shape,
                                  self.settings["c"], self.settings["student_df"])
            out = out * np.exp(np.asarray(sigma)[:, None] * np.asarray(eps))
        tau = self.settings.get("discrepancy", 0.0) if discrepancy is None else discrepancy
        if tau:
            d = extrapolation_distance(self, df)
            z = np.asarray(jax.random.normal(k_disc, out.shape))
            out = out * np.exp(tau * d[None, :] * z)
        return out

    def forecast(self, new_df, interval=0.9, kind="predictive", *, seed=0,
                 discrepancy=None) -> pd.DataFrame:
        """Posterior forecast at the rows of ``new_df``: mean, median, lower, upper, sd.

        ``lower``/``upper`` are the equal-tailed ``interval`` credible bounds. ``kind="mean"``
        gives the interval of the law's value (no observation noise), ``"predictive"`` (default)
        that of a new measured loss. The draws are :meth:`predict_draws`.
        """
        if not 0 < interval < 1:
            raise BayesScalingError(f"interval must be in (0, 1), got {interval}")
        y = self.predict_draws(new_df, kind, seed=seed, discrepancy=discrepancy)
        a = (1 - interval) / 2
        q = np.quantile(y, [a, 0.5, 1 - a], axis=0)
        return pd.DataFrame({"mean": y.mean(0), "median": q[1], "lower": q[0], "upper": q[2],
                             "sd": y.std(0)}, index=getattr(new_df, "index", None))

    def coverage(self, df, intervals=(0.5, 0.9), kind="predictive", *, seed=0,
                 discrepancy=None) -> dict:
        """Fraction of the rows of ``df`` whose ``loss`` lies in each central predictive interval."""
        y = self.predict_draws(df, kind, seed=seed, discrepancy=discrepancy)
        obs = np.asarray(df["loss"], float)
        out = {}
        for iv in intervals:
            a = (1 - iv) / 2
            lo, hi = np.quantile(y, [a, 1 - a], axis=0)
            out[iv] = float(np.mean((obs >= lo) & (obs <= hi)))
        return out

    # --- persistence -----------------------------------------------------------------------------
    def save(self, path):
        """Write the posterior as netCDF; the law, settings, MAP, diagnostics and modes go into the
        ``posterior`` group's ``bayes_scaling`` attribute (JSON)."""
        settings = {k: v for k, v in self.settings.items() if not k.startswith("_")}
        if self.settings.get("_discrepancy_axis") is not None:
            warnings.warn("the discrepancy axis (a function) is not saved; pass it again after "
                          "loading with with_discrepancy", stacklevel=2)
        meta = {"law": self.law.name, "map": self.map, "diagnostics": self.diagnostics,
                "settings": settings, "data_hash": self.data_hash,
                "modes": json.loads(self.modes.to_json(orient="records"))}
        self.idata.posterior.attrs["bayes_scaling"] = json.dumps(meta, default=_json_default)
        self.idata.to_netcdf(str(path))

    def __repr__(self):
        d = self.diagnostics
        status = "ok" if self.ok else "NOT CONVERGED"
        if self.method == "nuts":
            detail = (f"max R-hat {d.get('max_rhat', float('nan')):.3f}, min ESS "
                      f"{d.get('min_ess_bulk', float('nan')):.0f}, {d.get('divergences', 0)} divergences")
        else:
            detail = f"Laplace, Pareto k {d.get('pareto_k', float('nan')):.2f}"
        n = self.idata.posterior.sizes
        return (f"Posterior({self.law.name}, {self.settings['likelihood']}, {n['chain']}x{n['draw']} "
                f"draws; {detail}; {status})")


def extrapolation_distance(post, df, axis=None) -> np.ndarray:
    """How far each row of ``df`` lies outside the table ``post`` was fitted on.

    Per coordinate, in log space: the distance beyond the fitted range ``[min, max]``, divided by
    the width of that range (0 inside it; a coordinate that was constant in the fit counts in units
    of 1 in log space); the row's distance is the Euclidean norm over the coordinates. The
    coordinates are the law's variables, or ``axis(table) -> positive array`` (e.g. epochs
    ``lambda t: t.D / t.U``) when extrapolation happens along a derived quantity. The axis is
    stored in ``post.settings["discrepancy_axis"]`` by :func:`estimate_discrepancy`.
    """
    axis = axis if axis is not None else post.settings.get("_discrepancy_axis")
    cd = post.idata.constant_data
    fitted = pd.DataFrame({k: np.asarray(cd[k]) for k in cd.data_vars})
    if axis is not None:
        pairs = [(np.asarray(axis(fitted), float), np.asarray(axis(df), float))]
    else:
        law = post.law
        pairs = [(np.asarray(fitted[law.column(v)], float), np.asarray(df[law.column(v)], float))
                 for v in law.variables if law.column(v) in fitted and law.column(v) in df]
    out = np.zeros(len(df))
    for fit, new in pairs:
        fit, new = np.log(np.maximum(fit, 1e-300)), np.log(np.maximum(new, 1e-300))
        lo, hi = fit.min(), fit.max()
        width = hi - lo if hi > lo else 1.0
        beyond = np.maximum(new - hi, 0.0) + np.maximum(lo - new, 0.0)
        out += (beyond / width) ** 2
    return np.sqrt(out)


def estimate_discrepancy(law, df, heldout, *, axis=None, grid=None, **fit_kwargs) -> dict:
    """Scale ``tau`` of a model-discrepancy term that grows with extrapolation distance.

    The extrapolation is rehearsed inside ``df``: the posterior is fitted on the rows where
    ``heldout(df)`` is False and predicts the rows where it is True (e.g. the largest models of the
    *training* table). ``tau`` maximises the Gaussian likelihood of those rows' log residuals
    (observed minus posterior median) under variance ``var_post + var_noise + (tau d)^2``, with
    ``d`` their :func:`extrapolation_distance` (along ``axis``, default the law's variables) and
    the first two variances from the posterior predictive draws. Nothing outside ``df`` is used.
    Apply it with ``post.forecast(new, discrepancy=tau)`` or :func:`with_discrepancy`.

    Returns:
        dict with ``tau``, the inner split's sizes and its coverage before/after.
    """
    mask = np.asarray(heldout(df) if callable(heldout) else heldout, bool)
    if mask.all() or not mask.any():
        raise BayesScalingError("the inner hold-out must leave rows on both sides")
    inner, test = df[~mask], df[mask]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = fit_posterior(law, inner, **{"progress_bar": False, **fit_kwargs})
        y = np.log(post.predict_draws(test, "predictive", discrepancy=0.0))
    d = extrapolation_distance(post, test, axis)
    r = np.log(np.asarray(test["loss"], float)) - np.median(y, 0)
    v0 = y.var(0)
    grid = np.concatenate([[0.0], np.geomspace(1e-4, 2.0, 400)]) if grid is None else grid
    ll = [np.sum(-0.5 * np.log(v0 + (t * d) ** 2) - 0.5 * r**2 / (v0 + (t * d) ** 2)) for t in grid]
    tau = float(grid[int(np.argmax(ll))])
    post.settings["_discrepancy_axis"] = axis
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = post.coverage(test, (0.5, 0.9), discrepancy=0.0)
        after = post.coverage(test, (0.5, 0.9), discrepancy=tau)
    return {"tau": tau, "axis": axis, "n_inner_train": int((~mask).sum()),
            "n_inner_test": int(mask.sum()), "inner_distance_max": float(d.max()),
            "inner_coverage_before": before, "inner_coverage_after": after}


def with_discrepancy(post, tau, axis=None):
    """Make ``tau`` (and the extrapolation ``axis``) the default of ``post``'s forecasts."""
    post.settings["discrepancy"] = float(tau)
    post.settings["_discrepancy_axis"] = axis
    return post


def load_posterior(path, law=None) -> Posterior:
    """Read a posterior written by :meth:`Posterior.save` (pass ``law`` for an unregistered law)."""
    import arviz as az

    idata = az.from_netcdf(str(path))
    meta = json.loads(idata.posterior.attrs["bayes_scaling"])
    return Posterior(law=get_law(law or meta["law"]), idata=idata, map=meta["map"],
                     diagnostics=meta["diagnostics"], modes=pd.DataFrame(meta["modes"]),
                     settings=meta["settings"], data_hash=meta["data_hash"])


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


_VMAPPED: dict = {}


def _vmapped_law(law: Law):
    key = (law.name, law.fn, tuple(sorted(law.column_map.items())))
    if key not in _VMAPPED:
        _VMAPPED[key] = jax.jit(jax.vmap(law.fn, in_axes=(0, None)))
    return _VMAPPED[key]


def _standard_noise(likelihood, key, shape, c, student_df):
    if likelihood == "huber":
        return huber_standard_sample(key, shape, c)
    if likelihood == "student_t":
        return jax.random.t(key, student_df, shape)
    return jax.random.normal(key, shape)


def _forecast_inputs(law: Law, df):
    """The law's inputs from a table of new rows (no ``loss`` needed), validated."""
    if not isinstance(df, pd.DataFrame):
        df = pd.DataFrame(df)
    tmp = df.copy()
    if "loss" not in tmp:
        tmp["loss"] = 1.0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*repeat the same.*")
        tmp = _data.validate(tmp, law, min_rows=1)
    return law.inputs(tmp)


# ==================================================================================================
# Diagnostics


_MEANING = {
    "rhat": ("R-hat {v:.3f} > {t} for {p}: the chains disagree about it (not mixed, or several "
             "modes)", "run longer (num_warmup/num_samples), give {p} a more informative prior, or "
             "look at post.modes and az.plot_trace(post.idata, var_names=['{p}'])"),
    "ess_bulk": ("bulk ESS {v:.0f} < {t} for {p}: its posterior mean and intervals rest on few "
                 "effective draws", "draw more (num_samples) or reparameterise/tighten {p}"),
    "ess_tail": ("tail ESS {v:.0f} < {t} for {p}: its 5%/95% quantiles are unreliable",
                 "draw more (num_samples); check az.plot_pair for a funnel involving {p}"),
}


def _nuts_diagnostics(idata, names, num_chains, max_tree_depth) -> dict:
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = idata.posterior[list(names)]
        summ = pd.DataFrame({
            "r_hat": {n: float(az.rhat(post)[n]) for n in names},
            "ess_bulk": {n: float(az.ess(post, method="bulk")[n]) for n in names},
            "ess_tail": {n: float(az.ess(post, method="tail")[n]) for n in names},
        })
        bfmi = np.asarray(az.bfmi(idata))
    ss = idata.sample_stats
    div = int(np.asarray(ss["diverging"]).sum())
    depth_hits = float(np.mean(np.asarray(ss["tree_depth"]) >= max_tree_depth))
    ess_min = ESS_PER_CHAIN * num_chains

    def worst(col, pick):  # the parameter at the extreme ("" when the diagnostic is undefined)
        return str(getattr(summ[col], pick)()) if summ[col].notna().any() else ""

    d = {
        "method": "nuts",
        "max_rhat": float(summ["r_hat"].max()), "worst_rhat": worst("r_hat", "idxmax"),
        "min_ess_bulk": float(summ["ess_bulk"].min()), "worst_ess_bulk": worst("ess_bulk", "idxmin"),
        "min_ess_tail": float(summ["ess_tail"].min()), "worst_ess_tail": worst("ess_tail", "idxmin"),
        "divergences": div, "min_bfmi": float(bfmi.min()), "tree_depth_hits": depth_hits,
        "thresholds": {"rhat": RHAT_MAX, "ess": ess_min, "divergences": 0, "bfmi": BFMI_MIN},
        "per_param": json.loads(summ[["r_hat", "ess_bulk", "ess_tail"]].to_json(orient="index")),
    }
    failed, advice = [], []
    if summ["r_hat"].isna().all():
        failed.append("R-hat is undefined (too few chains or draws): convergence is not checked")
        advice.append("run at least 2 chains of a few hundred draws")
    for key, thr, bad in (("rhat", RHAT_MAX, summ["r_hat"] > RHAT_MAX),
                          ("ess_bulk", ess_min, summ["ess_bulk"] < ess_min),
                          ("ess_tail", ess_min, summ["ess_tail"] < ess_min)):
        col = "r_hat" if key == "rhat" else key
        for p in summ.index[bad.to_numpy()]:
            what, fix = _MEANING[key]
            failed.append(what.format(v=summ.loc[p, col], t=thr, p=p))
            advice.append(fix.format(p=p))
    if div:
        failed.append(f"{div} divergent transitions: the sampler met curvature it cannot follow, "
                      "so part of the posterior may be missed")
        advice.append("raise target_accept (e.g. 0.995), or give the parameters involved (see "
                      "az.plot_pair(post.idata, divergences=True)) more informative priors")
    if bfmi.min() < BFMI_MIN:
        failed.append(f"BFMI {bfmi.min():.2f} < {BFMI_MIN}: the energy of the chains moves slowly "
                      "(heavy tails or a funnel)")
        advice.append("reparameterise or tighten the prior of the heavy-tailed parameter")
    d["failed"], d["advice"], d["ok"] = failed, advice, not failed
    return d


def _warn_diagnostics(law_name, d):
    if d["ok"]:
        return
    lines = "\n  - ".join(d["failed"][:8])
    fixes = "\n  - ".join(dict.fromkeys(d["advice"]))
    warnings.warn(f"posterior of {law_name} failed convergence checks:\n  - {lines}\nWhat to try:"
                  f"\n  - {fixes}", ConvergenceWarning, stacklevel=3)


def _chain_groups(idata, names) -> list[list[int]]:
    """Group chains whose means agree (within 4 pooled within-chain sds on every parameter)."""
    post = idata.posterior
    C = post.sizes["chain"]
    means = np.stack([np.asarray(post[n]).mean(1) for n in names], 1)      # (C, P)
    sds = np.stack([np.asarray(post[n]).std(1).mean(0) for n in names])    # (P,)
    groups: list[list[int]] = []
    for c in range(C):
        for g in groups:
            if np.all(np.abs(means[c] - means[g[0]]) <= 4 * sds + 1e-12):
                g.append(c)
                break
        else:
            groups.append([c])
    return groups


# ==================================================================================================
# Inference


def _pointwise_batch(spec: Spec):
    return _cached("ll", spec, lambda: jax.jit(jax.vmap(
        lambda th, data: spec.pointwise_loglik(th, data), in_axes=(0, None))))


def fit_posterior(
    law,
    df: pd.DataFrame,
    *,
    priors=None,
    likelihood: str = "huber",
    num_chains: int = 4,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    seed: int = 0,
    method: str = "nuts",
    fixed: Mapping[str, float] | None = None,
    scale: float | None = None,
    huber_c: float = HUBER_C,
    student_df: float = STUDENT_DF,
    coordinates="auto",
    n_starts: int = 16,
    init: str = "map",
    whiten: bool = True,
    dense_mass: bool = True,
    target_accept: float = 0.99,
    max_tree_depth: int = 10,
    chain_method: str = "auto",
    progress_bar: bool = True,
    max_iter: int = 1000,
) -> Posterior:
    """Posterior of ``law``'s parameters given the loss table ``df``.

    Args:
        law: registered law name or :class:`~bayes_scaling.laws.Law`.
        df: loss table (validated as for ``fit_map``).
        priors: ``None`` (the defaults of :func:`default_prior`), ``"flat"``, or
            ``{name: numpyro distribution}`` overriding some of them (``"sigma"`` included), e.g.
            ``{"alpha": dist.Normal(0.35, 0.1)}``; a prior is truncated to its parameter's bounds.
        likelihood: ``"huber"`` (default; threshold ``huber_c`` in units of sigma, so the Huber
            delta of ``fit_map`` is ``huber_c * sigma``), ``"student_t"`` (``student_df`` degrees
            of freedom) or ``"normal"``, all on log residuals.
        num_chains, num_warmup, num_samples: NUTS settings (the Laplace path draws
            ``num_chains * num_samples``).
        seed: seeds the starts, the jitter and the sampler.
        method: ``"nuts"`` or ``"laplace"`` (Gaussian at the mode of the sampled density, checked
            by the Pareto k of its importance ratios).
        fixed: ``{name: value}`` parameters held fixed (e.g. a two-phase fit's base).
        scale: fix sigma (no prior on it) instead of inferring it.
        coordinates: sampling coordinates, ``"auto"`` (declared for the law, then adapted to
            the table by each block's ``switch``, e.g. :func:`gate_coordinates`), ``None`` or a
            tuple of :class:`Coordinates` (used as given). ``post.settings["coordinates"]``
            names the blocks sampled.
        n_starts: multi-start size of the mode search.
        init: ``"map"`` (chains start near the modes, jittered by half their Laplace sd) or
            ``"uniform"`` (NumPyro's default: uniform in (-2, 2) on the unconstrained scale).
        whiten: sample ``z`` with ``s = s_hat + L z`` (``L L^T`` the Laplace covariance).
        dense_mass, target_accept, max_tree_depth: NUTS settings (the high default acceptance
            target keeps the step small enough for the curved, weakly identified posteriors of
            the PTPP laws on few PTPP levels; see docs/priors.md).
        chain_method: ``"auto"`` (``"parallel"`` when the process has a device per chain,
            else ``"vectorized"``), ``"vectorized"`` (all chains in one program), ``"sequential"``
            or ``"parallel"`` (one chain per device). On CPU, devices are made by calling
            ``use_chain_devices(num_chains)`` before JAX starts (the CLI does it):
            parallel chains share the cores and each stops its trees on its own; on the Form-3
            benchmark this took 34 s against 55 s vectorized on 2 cores (BENCHMARKS.md).
        progress_bar: show NumPyro's progress bar while sampling.
        max_iter: L-BFGS iterations per start.

    Returns:
        :class:`Posterior`. A failed diagnostic raises a :class:`ConvergenceWarning` saying which
        parameter, what it means and what to try; several separated modes raise a
        :class:`MultimodalWarning` and are listed in ``post.modes``.
    """
    import arviz as az

    check_fit_options(law, n_starts=n_starts, fixed=fixed, num_chains=num_chains,
                      num_warmup=num_warmup, num_samples=num_samples)
    t0 = time.perf_counter()
    if method not in ("nuts", "laplace"):
        raise BayesScalingError(f"method must be 'nuts' or 'laplace', got {method!r}")
    if init not in ("map", "uniform"):
        raise BayesScalingError(f"init must be 'map' or 'uniform', got {init!r}")
    if chain_method not in ("auto", "vectorized", "sequential", "parallel"):
        raise BayesScalingError("chain_method must be 'auto', 'vectorized', 'sequential' or "
                                f"'parallel', got {chain_method!r}")
    if chain_method == "auto":
        chain_method = ("parallel" if num_chains > 1 and jax.local_device_count() >= num_chains
                        else "vectorized")
    kw = dict(priors=priors, likelihood=likelihood, fixed=fixed, scale=scale, c=huber_c,
              student_df=student_df)
    spec0 = make_spec(law, coordinates=None, **kw)
    law = spec0.law
    vdf = _data.validate(df, law, min_rows=len(spec0.law_names) + 1)
    theta_map, neg_lp_map, starts, (u_ok, v_ok) = _map_stage(
        spec0, _data_pytree(spec0, vdf), n_starts, seed, max_iter)
    spec = make_spec(law, coordinates=coordinates, **kw)
    data = _data_pytree(spec, vdf)
    modes = _find_modes(spec, data, u_ok, v_ok)
    if coordinates == "auto":
        spec, data, modes = _switch_coordinates(spec, vdf, data, modes, u_ok, v_ok, kw, method)
    t_modes = time.perf_counter() - t0
    top = modes[0]
    d = len(spec.sampled)
    rng = np.random.default_rng(seed + 1)

    if method == "laplace":
        s, k_hat, frac_bad = _sample_laplace(spec, data, top, num_chains, num_samples, seed)
        extra = None
        diag = {"method": "laplace", "pareto_k": k_hat, "hessian_ok": top.hessian_ok,
                "outside_support": frac_bad, "thresholds": {"pareto_k": 0.7}}
        failed, advice = [], []
        if not top.hessian_ok:
            failed.append("the Hessian at the mode is not positive definite (a flat or saddle "
                          "direction): the Gaussian approximation is meaningless there")
            advice.append("use method='nuts' or more informative priors")
        if k_hat > 0.7:
            failed.append(f"Pareto k {k_hat:.2f} > 0.7: the posterior is far from Gaussian in the "
                          "sampled coordinates, so Laplace intervals are unreliable")
            advice.append("use method='nuts'")
        if len(modes) > 1:
            failed.append(f"{len(modes)} separated modes: a single Gaussian covers only the first")
            advice.append("use method='nuts' and inspect post.modes")
        diag.update(failed=failed, advice=advice, ok=not failed)
    else:
        if whiten:
            center, chol = top.s, top.chol
        else:
            center, chol = np.zeros(d), np.eye(d)
        if init == "map":
            z0 = _jittered_inits(spec, data, modes, center, chol, num_chains, rng)
        else:
            z0 = rng.uniform(-2.0, 2.0, (num_chains, d))
        s, extra = _run_nuts(spec, data, center, chol, z0, seed=seed, num_chains=num_chains,
                             num_warmup=num_warmup, num_samples=num_samples,
                             chain_method=chain_method, dense_mass=dense_mass,
                             target_accept=target_accept, max_tree_depth=max_tree_depth,
                             progress_bar=progress_bar)
    C, D = s.shape[:2]
    flat = jnp.asarray(s.reshape(C * D, d))
    theta = _theta_s_batch(spec)(flat, data["ref"])
    n = len(vdf)
    ll = np.asarray(_pointwise_batch(spec)(theta, data)).reshape(C, D, -1)[..., :n]
    posterior = {n: np.asarray(theta[n]).reshape(C, D) for n in spec.names}
    cols = {law.column(v): np.asarray(vdf[law.column(v)], float)
            for v in law.variables if law.column(v) in vdf}
    sample_stats = None
    if extra is not None:
        steps = extra["num_steps"]
        sample_stats = {
            "diverging": extra["diverging"].astype(bool),
            "energy": extra["energy"],
            "lp": -extra["potential_energy"],
            "n_steps": steps,
            "tree_depth": np.floor(np.log2(np.maximum(steps, 1))).astype(int) + 1,
            "acceptance_rate": extra["accept_prob"],
            "step_size": extra["adapt_state.step_size"],
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        idata = az.from_dict(
            posterior=posterior,
            sample_stats=sample_stats,
            log_likelihood={"y": ll},
            observed_data={"y": np.asarray(data["y"])[:n]},
            constant_data={**cols, "loss": np.asarray(vdf["loss"], float)},
            coords={"row": np.arange(n)},
            dims={"y": ["row"], **{k: ["row"] for k in cols}, "loss": ["row"]},
        )
    if method == "nuts":
        diag = _nuts_diagnostics(idata, spec.names, num_chains, max_tree_depth)
        groups = _chain_groups(idata, spec.names) if diag["max_rhat"] > RHAT_MAX else [
            list(range(num_chains))]
        diag["chain_groups"] = groups
        if len(groups) > 1:
            diag["failed"].append(f"the chains split into {len(groups)} groups with different "
                                  "means: the posterior looks multimodal (see post.modes)")
            diag["ok"] = False
    diag["seconds"] = time.perf_counter() - t0
    diag["seconds_modes"] = t_modes
    modes_df = _modes_table(spec, data, modes)
    map_params = {k: float(v) for k, v in theta_map.items()}
    map_params.update(spec.fixed)
    if spec.scale is not None:
        map_params["sigma"] = spec.scale
    map_params = {k: map_params[k] for k in (*law.param_names, "sigma")}
    settings = {
        "law": law.name, "method": method, "likelihood": likelihood, "c": huber_c,
        "student_df": student_df, "fixed": dict(spec.fixed), "scale": spec.scale,
        "free": list(spec.names), "priors": _describe_priors(spec, priors),
        "coordinates": [b.name for b in spec.blocks], "num_chains": num_chains,
        "num_warmup": num_warmup, "num_samples": num_samples, "seed": seed, "n_starts": n_starts,
        "init": init, "whiten": whiten, "dense_mass": dense_mass, "target_accept": target_accept,
        "max_tree_depth": max_tree_depth, "chain_method": chain_method, "n_rows": n,
        "map_neg_log_post": neg_lp_map, "clipped": vdf.attrs.get("clipped", {}),
    }
    post = Posterior(law, idata, map_params, diag, modes_df, settings,
                     data_hash(vdf, list(cols) + ["loss"]), spec)
    _warn_diagnostics(law.name, diag)
    if len(modes) > 1 and (method == "laplace" or len(diag.get("chain_groups", [])) > 1):
        warnings.warn(f"the posterior of {law.name} has {len(modes)} separated modes:\n"
                      f"{modes_df.to_string(max_cols=20)}", MultimodalWarning, stacklevel=2)
    return post


def _switch_coordinates(spec, vdf, data, modes, u_ok, v_ok, kw, method):
    """Let each coordinate block with a ``switch`` look at the top mode and swap itself for
    coordinates that suit this table better; modes are searched again in the new ones."""
    top = modes[0]
    ref = data["ref"]
    blocks, changed = [], False
    for b in spec.blocks:
        alt = None
        if b.switch is not None and top.hessian_ok:
            alt = b.switch(lambda sv: spec.theta_s(sv, ref), jnp.asarray(top.s), top.cov,
                           ref[b.name], method)
        blocks.append(alt if alt is not None else b)
        changed |= alt is not None
    if not changed:
        return spec, data, modes
    new = make_spec(spec.law, coordinates=tuple(blocks), **kw)
    data = _data_pytree(new, vdf)
    return new, data, _find_modes(new, data, u_ok, v_ok)


def use_chain_devices(num_chains: int) -> int:
    """Give this process one CPU device per chain, so ``fit_posterior``'s ``"auto"`` chain method
    runs the chains in parallel (34 s against 55 s vectorised for the Form-3 benchmark on 2 cores,
    BENCHMARKS.md). Call it before the first JAX computation; an ``XLA_FLAGS`` device count set by
    the user is left alone. Returns the number of devices the process has."""
    import os

    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        numpyro.set_host_device_count(int(num_chains))
    return jax.local_device_count()


def _jittered_inits(spec, data, modes, center, chol, num_chains, rng, scale=0.5, tries=30):
    """One start per chain: the modes in turn, each jittered by ``scale`` times its Laplace sd
    (the jitter is halved until the start has a finite log density)."""
    z0 = []
    for c in range(num_chains):
        m = modes[c % len(modes)]
        zm = np.linalg.solve(chol, m.s - center)
        sc = scale
        for _ in range(tries):
            z = zm + sc * np.linalg.solve(chol, m.chol @ rng.standard_normal(len(zm)))
            lp = _log_joint_batch(spec)(jnp.asarray(center + chol @ z)[None], data)
            if np.isfinite(np.asarray(lp)[0]):
                break
            sc *= 0.5
        else:
            z = zm
        z0.append(z)
    return np.stack(z0)


def _modes_table(spec, data, modes) -> pd.DataFrame:
    rows = []
    top = modes[0].log_mass
    for m in modes:
        th = spec.theta_s(jnp.asarray(m.s), data["ref"])
        row = {k: float(th[k]) for k in spec.names}
        row.update(log_density=m.log_density, rel_mass=math.exp(m.log_mass - top),
                   hessian_ok=m.hessian_ok)
        rows.append(row)
    return pd.DataFrame(rows)


def _describe_priors(spec, priors):
    out = {}
    for p in spec.free:
        d = spec.priors[p.name]
        if isinstance(priors, dict) and p.name in priors:
            out[p.name] = f"user: {type(d).__name__}"
        elif isinstance(d, FlatPrior):
            out[p.name] = "flat"
        else:
            m, s = _prior_loc_scale(p)
            term = d.term(p.name) if isinstance(d, AtReference) else p.name
            out[p.name] = f"default: {'log ' if log_scale(p) else ''}{term} ~ N({m:.4g}, {s:.4g})"
    return out


# ==================================================================================================
# Command-line entry points (wired by bayes_scaling.cli)


def posterior_command(law, csv, out, *, quiet=False, **opts) -> Posterior:
    """``bayes-scaling posterior --law NAME table.csv --out post.nc``: fit, save, print a summary.

    ``csv`` is a path or a DataFrame.

    ``opts`` are :func:`fit_posterior` arguments (``method``, ``likelihood``, ``num_samples``, ...);
    the progress bar is on unless ``progress_bar=False``. Returns the posterior.
    """
    df = csv if isinstance(csv, pd.DataFrame) else pd.read_csv(csv)
    post = fit_posterior(law, df, **opts)
    post.save(out)
    if not quiet:
        print(repr(post))
        print(post.summary().to_string())
        print(f"saved {out}")
    return post


def forecast_command(nc, csv, interval=0.9, *, kind="predictive", out=None, quiet=False,
                     seed=0) -> pd.DataFrame:
    """``bayes-scaling forecast post.nc new.csv --interval 0.9``: the rows of ``new.csv`` with
    ``mean, median, lower, upper, sd`` appended, printed as CSV (or written to ``out``)."""
    post = load_posterior(nc)
    new = pd.read_csv(csv)
    fc = post.forecast(new, interval=interval, kind=kind, seed=seed)
    table = pd.concat([new.reset_index(drop=True), fc.reset_index(drop=True)], axis=1)
    if out is not None:
        table.to_csv(out, index=False)
    elif not quiet:
        print(table.to_csv(index=False), end="")
    return table
