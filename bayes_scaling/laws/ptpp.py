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

import jax
import jax.numpy as jnp

from ._spec import INF, Law, Param, powlaw, register

EPS_R = 1e-5
BETA_EFF_MIN = 1e-6


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
))
