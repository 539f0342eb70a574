"""Continual pre-training laws of Goffinet et al., *PTPP-Aware Adaptation Scaling Laws*
(arXiv 2510.23198), Section 2, and the D-CPT baseline they compare against.

Notation: ``N`` parameters, ``D`` adaptation tokens, ``r`` the **replay** ratio (fraction of
source-domain data during adaptation; table column ``replay``), ``PTPP`` the pre-training tokens per
parameter of the adapted checkpoint, eps_r = 1e-5. Fitting recipe of the paper: Huber on log
residuals with delta = 0.02, L-BFGS-B, every parameter positive except zeta, r clipped to
[1e-9, 1 - 1e-9] (done, and recorded, by :func:`bayes_scaling.data.validate`).

The same laws fit the source (forgetting) loss on the rows with ``domain == "source"``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._spec import INF, Coordinates, Law, Param, powlaw, register

EPS_R = 1e-5
BETA_EFF_MIN = 1e-6
PTPP_REF = 20.0  # the Chinchilla-optimal budget: early-stage checkpoints sit around it


def _p(name, init, log_init=False, lower=0.0, upper=INF, doc=""):
    return Param(name, lower, upper, init, log_init, doc)


# Shared parameters: positive; init ranges wide enough for 1e4..1e10 parameters and tokens.
_BASE = (
    _p("E", (0.5, 3.0), doc="irreducible loss"),
    _p("A", (1.0, 1e4), True, doc="model-size coefficient"),
    _p("alpha", (0.05, 1.0), doc="model-size exponent"),
    _p("B", (1.0, 1e4), True, doc="data coefficient"),
    _p("beta", (0.05, 1.0), doc="data exponent"),
    _p("nu", (0.01, 1.0), doc="replay exponent of the data term"),
    _p("C", (1e-4, 1.0), True, doc="replay-barrier coefficient"),
    _p("gamma", (0.01, 1.0), doc="replay-barrier exponent"),
)
_FLOOR = (
    _p("F", (1e-2, 1e2), True, doc="PTPP floor coefficient"),
    _p("eta", (0.05, 2.0), doc="PTPP floor exponent"),
)
_GATE = (
    _p("lam", (0.0, 1.0), doc="gate strength lambda (beta_eff = beta (1 - lambda g))"),
    Param("zeta", -INF, INF, (-2.0, 2.0), False, "gate exponent (real-valued)"),
)


def _dcpt_terms(p, x, beta):
    """E + A/N^alpha + B r^nu / D^beta + C/(r + eps_r)^gamma, with a per-row beta."""
    r = x["replay"]
    data = jnp.exp(jnp.log(p["B"]) + p["nu"] * jnp.log(r) - beta * jnp.log(x["D"]))
    return (
        p["E"]
        + powlaw(p["A"], x["N"], p["alpha"])
        + data
        + powlaw(p["C"], r + EPS_R, p["gamma"])
    )


def gate(ptpp, lam, zeta):
    """lambda * PTPP^zeta / (1 + PTPP^zeta), written as lambda * sigmoid(zeta log PTPP)."""
    return lam * jax.nn.sigmoid(zeta * jnp.log(ptpp))


def beta_eff(p, ptpp):
    """beta_eff = max(beta (1 - gate(PTPP)), 1e-6)  (Eq. (2) of the PTPP paper)."""
    return jnp.maximum(p["beta"] * (1.0 - gate(ptpp, p["lam"], p["zeta"])), BETA_EFF_MIN)


# Plausible values for tiny GPT-style models (N ~ 1e4..1e5 non-embedding parameters,
# D ~ 1e4..1e7 tokens): used by docs and recovery tests, not fitted to any paper.
_EX_BASE = dict(E=1.2, A=40.0, alpha=0.35, B=300.0, beta=0.3, nu=0.2, C=0.01, gamma=0.3)
_EX_GATE = dict(lam=0.5, zeta=0.5)
_EX_FLOOR = dict(F=1.5, eta=0.4)


# --- sampling geometry (what the Bayesian layer samples in; the model is unchanged) -------------
@dataclass(frozen=True)
class SidedCoordinates(Coordinates):
    """Coordinates of a parameter space that falls into sides, with coordinates for each side.

    ``side(theta)`` labels the side of a point (here the sign of the gate exponent ``zeta``);
    ``restrict(label)`` returns coordinates covering exactly that side. When the modes of a
    posterior lie on several sides, ``fit_posterior`` samples each mode in the coordinates of its
    side, so its chains cannot cross into another side, and weights the sides by their
    bridge-sampled mass (the sides partition the space, so the mixture is exact).
    """

    side: Callable | None = field(default=None, repr=False)
    restrict: Callable | None = field(default=None, repr=False)


@functools.cache
def gate_coordinates(beta="beta", lam="lam", zeta="zeta", variable="ptpp") -> Coordinates:
    """Centred coordinates for a gated exponent ``beta_eff(v) = beta (1 - lam sigmoid(zeta log v))``.

    With ``v0`` the geometric mean of ``v`` over the table and ``s0 = sigmoid(zeta log v0)``,
    ``b = log beta_eff(v0) = log beta + log(1 - g0)`` (the exponent at the centre) replaces
    ``beta``, and ``h = logit(g0)`` replaces ``lam``, where ``g0 = lam s0`` is the gate's
    strength at the centre; ``zeta`` is sampled as itself. Inverse: ``g0 = sigmoid(h)``,
    ``lam = g0 / s0``, ``beta = exp(b) / (1 - g0)``. Points with ``lam s0 >= 1`` (an exponent
    clipped to its floor at the centre) are outside the support, and ``h`` puts them infinitely
    far away. Sampled as itself, ``lam`` met them as a wall: as ``g0 -> 1`` at a fixed ``b``,
    ``beta`` grows without bound and the density falls to 0 with an unbounded gradient, where
    NUTS diverges at any step size (tables drawn from the prior: 10-41 divergent transitions of
    4000 at every ``target_accept`` from 0.99 to 0.9998, all at ``g0`` near 1).

    Why these and not more: the data pin the exponent at the centre hardest, and with ``beta``
    free it couples to ``lam`` and ``zeta`` along a curved ridge; ``b`` straightens it. The slope
    of ``log beta_eff`` in ``log v`` is also pinned on two PTPP levels, but as a coordinate
    (with ``zeta``) its map to ``lam`` has Jacobian ``1 / |zeta|``: the density is singular where
    the gate is flat (``zeta = 0``), and when the data cannot tell the gate's sign (its effect
    below the noise, as in most tables drawn from the prior) chains fall into that point and the
    step size collapses (1e-7 on such a table, with R-hat 2.5). ``h`` and ``zeta`` keep the map
    regular.

    When the gate is visible, though, the data pin its slope, and in (``lam``, ``zeta``) that is a
    curved ridge that drives NUTS to its maximum tree depth. So this block has a ``switch``: when
    the slope at the posterior mode is more than ``GATE_VISIBLE_Z`` (4) Laplace standard
    deviations from 0, ``fit_posterior`` samples in :func:`gate_slope_coordinates` instead, whose
    singular point the chains then never approach.

    Sides: the sign of ``zeta`` (:class:`SidedCoordinates`). On the bible_ptpp target rows (PTPP
    15, 31, 279) the posterior has a lobe on each side (the exponent rising with PTPP while the
    floor is small, or falling while the floor carries the PTPP effect), joined through the flat
    gate at ``zeta = 0``. Chains started in the smaller lobe drifted into the larger one through
    that neck (R-hat 1.56, bulk ESS 7, 60% of transitions at the maximum tree depth). Each side
    is sampled in :func:`gate_slope_coordinates` with the sign of ``zeta`` fixed, which cover
    exactly that side and put the flat gate infinitely far away (there, 4 and 0 divergent
    transitions of 4000 in the two lobes, against 7 in the smaller lobe and 20 in one run with
    ``zeta``'s sign fixed in these coordinates instead).
    """

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x[variable]))}

    def to_params(c, r):
        h = c["gate_logit_strength"]
        s0 = jax.nn.sigmoid(c[zeta] * r["L0"])
        return {beta: jnp.exp(c["gate_log_exponent"] - jax.nn.log_sigmoid(-h)),
                lam: jax.nn.sigmoid(h) / s0, zeta: c[zeta]}

    def from_params(p, r):
        g = jnp.clip(p[lam] * jax.nn.sigmoid(p[zeta] * r["L0"]), 1e-300, 1.0 - 1e-12)
        return {"gate_log_exponent": jnp.log(p[beta]) + jnp.log1p(-g),
                "gate_logit_strength": jnp.log(g) - jnp.log1p(-g), zeta: p[zeta]}

    def log_det(c, r):
        # triangular: beta depends on (b, h), lam on (h, zeta), zeta on itself, so the
        # determinant is (d beta / d b) (d lam / d h) = beta g0 (1 - g0) / s0
        h = c["gate_logit_strength"]
        return (c["gate_log_exponent"] + jax.nn.log_sigmoid(h)
                - jax.nn.log_sigmoid(c[zeta] * r["L0"]))

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
        sign = -float(np.sign(k)) if method == "nuts" else None
        return gate_slope_coordinates(beta, lam, zeta, variable, sign=sign)

    def side(theta):
        return jnp.sign(theta[zeta])

    def restrict(label):
        return gate_slope_coordinates(beta, lam, zeta, variable, sign=float(label))

    coords = (Param("gate_log_exponent", init=(-3.0, 0.0), doc="log beta_eff at the centre"),
              Param("gate_logit_strength", init=(-4.0, 0.0),
                    doc="logit of the gate's strength lam sigmoid(zeta log v) at the centre"),
              zeta)
    return SidedCoordinates("gate", (beta, lam, zeta), coords, to_params, from_params, ref,
                            gate_coordinates.__doc__, log_det=log_det, switch=switch, side=side,
                            restrict=restrict)


GATE_VISIBLE_Z = 4.0


def gate_slope(p, L0):
    """d log beta_eff / d log v at ``log v = L0``: ``-zeta (1 - s0) lam s0 / (1 - lam s0)``."""
    s0 = jax.nn.sigmoid(p["zeta"] * L0)
    g = p["lam"] * s0
    return -p["zeta"] * (1.0 - s0) * g / (1.0 - g)


@functools.cache
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
    :func:`gate_coordinates`' switch for NUTS), ``zeta = sign exp(gate_log_abs_zeta)`` and the
    slope is sampled as ``log |kappa|`` (a Param bounded at 0 on the side of its sign): the
    coordinates then cover exactly the support. Sampling ``kappa`` itself left a wall at
    ``kappa = 0`` (``lam = 0``, where the posterior density is not 0): on the bible_ptpp target
    rows at PTPP 15/31, 358 divergent transitions, concentrated near the wall. The map to ``lam`` is singular at a flat gate
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

    slope_doc = "d log beta_eff / d log v at the centre"
    if not log_zeta:
        slope = Param("gate_slope", init=(-0.5, 0.5), doc=slope_doc)
    elif sign > 0:  # zeta > 0: the slope is negative, sampled as log(-kappa)
        slope = Param("gate_slope", -INF, 0.0, (-0.5, -1e-3), doc=slope_doc)
    else:
        slope = Param("gate_slope", 0.0, INF, (1e-3, 0.5), doc=slope_doc)
    coords = (Param("gate_log_exponent", init=(-3.0, 0.0), doc="log beta_eff at the centre"),
              slope,
              Param(zname, init=(-3.0, 1.0), doc="log |zeta| (zeta's sign fixed)") if log_zeta
              else zeta)
    return Coordinates("gate_slope", (beta, lam, zeta), coords, to_params, from_params, ref,
                       gate_slope_coordinates.__doc__)


_GATE_BLOCK = gate_coordinates()
_LINEAR = ("E", "A", "B", "C")  # f = E + A g_A + B g_B + C g_C (+ F g_F): the level block's terms
# the floor's coefficient prior is stated for the floor at PTPP 20 (docs/priors.md)
_FLOOR_AT_REF = (("F", "eta", PTPP_REF),)


def _dcpt(p, x):
    return _dcpt_terms(p, x, p["beta"])


def _floor(p, x):
    return _dcpt_terms(p, x, p["beta"]) + powlaw(p["F"], x["ptpp"], p["eta"])


def _gated(p, x):
    return _dcpt_terms(p, x, beta_eff(p, x["ptpp"]))


def _gated_floor(p, x):
    return _dcpt_terms(p, x, beta_eff(p, x["ptpp"])) + powlaw(p["F"], x["ptpp"], p["eta"])


dcpt = register(Law(
    name="dcpt",
    params=_BASE,
    variables=("N", "D", "replay"),
    fn=_dcpt,
    equation="L = E + A/N^alpha + B r^nu / D^beta + C/(r + eps_r)^gamma  "
             "(D-CPT; PTPP paper Sec. 2 baseline, eps_r = 1e-5)",
    description="PTPP-agnostic continual pre-training law (Que et al. 2024) as used by the PTPP paper.",
    example=_EX_BASE,
    linear=_LINEAR,
))

ptpp_floor = register(Law(
    name="ptpp_floor",
    params=_BASE + _FLOOR,
    variables=("N", "D", "replay", "ptpp"),
    fn=_floor,
    equation="L = E + A/N^alpha + B r^nu / D^beta + C/(r + eps_r)^gamma + F/PTPP^eta  "
             "(PTPP paper Form 1, additive PTPP prior)",
    description="PTPP lowers the loss floor through an additive term.",
    example={**_EX_BASE, **_EX_FLOOR},
    linear=_LINEAR + ("F",),
    prior_references=_FLOOR_AT_REF,
))

ptpp_gated = register(Law(
    name="ptpp_gated",
    params=_BASE + _GATE,
    variables=("N", "D", "replay", "ptpp"),
    fn=_gated,
    equation="L = E + A/N^alpha + B r^nu / D^beta_eff + C/(r + eps_r)^gamma, "
             "beta_eff = max(beta (1 - lambda PTPP^zeta/(1+PTPP^zeta)), 1e-6)  "
             "(PTPP paper Form 2, Eq. (2), PTPP-gated data exponent)",
    description="PTPP reshapes the adaptation data curve through a bounded gate on beta.",
    example={**_EX_BASE, **_EX_GATE},
    coordinates=(_GATE_BLOCK,),
    linear=_LINEAR,
))

ptpp_gated_floor = register(Law(
    name="ptpp_gated_floor",
    params=_BASE + _GATE + _FLOOR,
    variables=("N", "D", "replay", "ptpp"),
    fn=_gated_floor,
    equation="L = E + A/N^alpha + B r^nu / D^beta_eff + C/(r + eps_r)^gamma + F/PTPP^eta, "
             "beta_eff = max(beta (1 - lambda PTPP^zeta/(1+PTPP^zeta)), 1e-6)  "
             "(PTPP paper Form 3, Eq. (3), gated exponent + floor)",
    description="PTPP acts twice: a gate on the data exponent and an additive floor.",
    example={**_EX_BASE, **_EX_GATE, **_EX_FLOOR},
    coordinates=(_GATE_BLOCK,),
    linear=_LINEAR + ("F",),
    prior_references=_FLOOR_AT_REF,
))
