"""Building blocks of the M3 laws (Akimoto et al., *M3 Scaling Law*, arXiv 2410.12325): the Table 6
parameters, the Table 13 values, and the terms the laws of ``laws/m3.py`` are built from --
saturation ``h`` (Eq. 5) and ``h_Lp`` (Eq. 20), the effective model and data sizes (Eqs. 3-5, 12),
``R_M*(k)`` (Eq. 7) and ``R_M*(k, r)`` (Eq. 23), the high-resource weight ``g`` (Eq. 9), the dual
power-law ratio (Eq. 8) and ``gamma2(r1)`` (Eq. 21). Notation: see ``laws/m3.py``.

Numerics: every power term is ``exp(log coef - exponent log x)``; ``h`` is evaluated as
``1 + R phi(R / R*)`` with ``phi(x) = (1 - e^-x) / x`` (``phi(0) = 1``), so ``R* -> inf`` is exact
(this is how R_M*(k = 1) = inf recovers Chinchilla); powers of quantities that can be exactly 0
(``k - 1``, ``1 - r``, ``R_D``) use guarded ``jnp.where`` so values *and* gradients stay finite.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ._spec import Param

# --- Table 6 parameters ---------------------------------------------------------------------------


def param_A(name="A", doc="coefficient of the model-size term"):
    return Param(name, 1e-6, 1e6, (1e-2, 1e4), True, doc + " (Table 6)")


def param_B(name="B", doc="coefficient of the data-size term"):
    return Param(name, 1e-6, 1e6, (1e-2, 1e4), True, doc + " (Table 6)")


def param_alpha(name="alpha", doc="model-size exponent"):
    return Param(name, 0.1, 2.0, (0.1, 0.8), False, doc + " (Table 6)")


def param_beta(name="beta", doc="data-size exponent"):
    return Param(name, 0.01, 5.0, (0.1, 0.8), False, doc + " (Table 6)")


def param_E(name="E", doc="irreducible loss"):
    return Param(name, 0.001, 10.0, (1.0, 5.0), False, doc + " (Table 6)")


def param_RD_star(name="RD_star", doc="saturation constant R_D* of the effective data size"):
    return Param(name, 0.1, 200.0, (1.0, 100.0), False, doc + " (Table 6)")


def param_RM_star(name="RM_star", doc="saturation constant R_M* of the effective model size"):
    return Param(name, 0.1, 100.0, (0.5, 50.0), False, doc + " (Table 6)")


BASE = (param_A(), param_B(), param_alpha(), param_beta(), param_E())
RDH_STAR = Param("RDh_star", 0.1, 200.0, (1.0, 100.0), False,
                 "saturation constant R_D,high* of the high-resource weight g (Eq. 9; Table 6)")
PSI = Param("psi", 0.01, 10.0, (0.1, 5.0), False,
            "exponent of the floor (1-r)^psi of g (Eq. 9; Table 6)")
GAMMA = Param("gamma", 0.001, 1.0, (0.01, 0.5), False, "language-ratio exponent (He; Table 6)")
GAMMA2 = Param("gamma2", 0.001, 1.0, (0.01, 0.5), False,
               "multi-stage exponent of r / r_f (dual power law, Eq. 8; Table 6)")
GAMMA2_DOT = Param("gamma2_dot", -0.5, 0.5, (-0.2, 0.2), False,
                   "slope of the r1-dependent gamma2 (Eq. 21; Table 6)")
R0 = Param("r0", 1e-6, 1.0, (1e-4, 0.1), True, "offset of ln(r0 + r1) (Eq. 21; Table 6)")
# Not in Table 6 (our choices):
P_SHARPNESS = Param("p", 0.1, 20.0, (0.5, 5.0), False,
                    "sharpness of h_Lp (Eq. 20); not in Table 6: bounds [0.1, 20] (p -> inf is "
                    "a hard min(R, R*) knee, p = 1 is already softer than h), init [0.5, 5]")
RMK = (
    Param("a", 1e-3, 1e4, (0.1, 1e3), True,
          "scale of R_M*(k) = a/(k-1)^b + c (Eq. 7); not in Table 6: R_M*(2) = a + c, so a spans "
          "the R_M* range and beyond, log-uniform init"),
    Param("b", 0.01, 5.0, (0.1, 2.0), False,
          "decay exponent of R_M*(k) (Eq. 7); not in Table 6: like an exponent, [0.01, 5]"),
    Param("c", 0.1, 100.0, (0.5, 50.0), False,
          "floor of R_M*(k) as k -> inf (Eq. 7); not in Table 6: the R_M* bounds of Table 6"),
)

# Table 13 (M3 law fitted on all data), Japanese column; the default example of the M3 family.
TABLE13 = {
    "ja": dict(A=5598.7, B=3988.8, alpha=0.504, beta=0.426, E=1.548, RD_star=10.18,
               RDh_star=51.89, psi=3.232, RM_star=23.80, gamma=0.0834, gamma2=0.0343),
    "id": dict(A=6732.1, B=15625.9, alpha=0.532, beta=0.515, E=1.760, RD_star=7.91,
               RDh_star=35.14, psi=4.273, RM_star=25.67, gamma=0.0571, gamma2=0.0184),
    "sw": dict(A=48958.3, B=3134.6, alpha=0.646, beta=0.418, E=2.428, RD_star=5.14,
               RDh_star=19.34, psi=4.107, RM_star=53.62, gamma=0.0815, gamma2=0.0544),
}
TABLE13_JA = TABLE13["ja"]
TABLE13_JA_BASE = {k: TABLE13_JA[k] for k in ("A", "B", "alpha", "beta", "E")}

# --- building blocks ----------------------------------------------------------------------------


def phi(x):
    """(1 - exp(-x)) / x with phi(0) = 1; accurate and differentiable near 0."""
    x = jnp.asarray(x)
    small = jnp.abs(x) < 1e-6
    xs = jnp.where(small, 1.0, x)
    return jnp.where(small, 1.0 - 0.5 * x + x * x / 6.0, -jnp.expm1(-xs) / xs)


def saturation(R, R_star):
    """h(R; R*) = 1 + R* (1 - exp(-R/R*))  (M3 Eq. 5; Muennighoff et al. 2023).

    Evaluated as ``1 + R phi(R / R*)``; ``R_star = inf`` gives ``1 + R`` exactly.
    """
    return 1.0 + R * phi(R / R_star)


def saturation_lp(R, R_star, p):
    """h_Lp(R; R*, p) = 1 + R / (1 + (R/R*)^p)^(1/p)  (M3 Eq. 20, Appendix D.3).

    Same limit 1 + R* as R -> inf as :func:`saturation`, with a sharper knee for large p. Evaluated
    as ``1 + R exp(-softplus(p log(R/R*)) / p)`` with R = 0 guarded (value and gradient).
    """
    pos = R > 0
    Rs = jnp.where(pos, R, R_star)
    z = p * (jnp.log(Rs) - jnp.log(R_star))
    return 1.0 + jnp.where(pos, R * jnp.exp(-jax.nn.softplus(z) / p), 0.0)


def log_compute_optimal_size(log_D, A, B, alpha, beta):
    """log of G^((alpha+beta)/alpha) D^(beta/alpha), G = (alpha A / (beta B))^(1/(alpha+beta)).

    The single-epoch compute-optimal model size for D unique tokens (U_M of M3 Eq. 5; N_opt(U_D)
    of Muennighoff et al.), in closed form: ``(log(alpha A) - log(beta B) + beta log D) / alpha``.
    """
    return (jnp.log(alpha * A) - jnp.log(beta * B) + beta * log_D) / alpha


def log_effective_model(log_M, log_U_opt, inv_RM_star):
    """log M' = log(U_M h(R_M; R_M*)), U_M = min(U_opt, M), R_M = M/U_M - 1  (M3 Eq. 5 / 12)."""
    log_U = jnp.minimum(log_U_opt, log_M)
    R_M = jnp.expm1(log_M - log_U)
    return log_U + jnp.log1p(R_M * phi(R_M * inv_RM_star))


def rm_star_k(k, a, b, c):
    """R_M*(k) = a / (k - 1)^b + c  (M3 Eq. 7); ``inf`` at k = 1.

    M' -> M as k -> 1, with M'/M - 1 = O(1 / R_M*(k)) = O((k - 1)^b / a).
    """
    return a / (k - 1.0) ** b + c


def inv_rm_star_k(k, a, b, c):
    """1 / R_M*(k) = (k-1)^b / (a + c (k-1)^b): finite (0) at k = 1, with finite gradients."""
    km1 = k - 1.0
    pos = km1 > 0
    t = jnp.where(pos, jnp.exp(b * jnp.log(jnp.where(pos, km1, 1.0))), 0.0)
    return t / (a + c * t)


def high_resource_weight(r, R_D, RDh_star, psi):
    """g(r, R_D) = (1-r)^psi + [1 - (1-r)^psi] exp(-R_D / R_D,high*)  (M3 Eq. 9).

    g = 1 at R_D = 0 and decays to the floor (1 - r)^psi; (1-r)^psi is guarded at r = 1.
    """
    om = 1.0 - r
    pos = om > 0
    floor = jnp.where(pos, jnp.exp(psi * jnp.log(jnp.where(pos, om, 1.0))), 0.0)
    return floor + (1.0 - floor) * jnp.exp(-R_D / RDh_star)


def log_dual_ratio_factor(r, r_f, gamma, gamma2):
    """log R_dual(r, r_f) = -gamma log r_f - gamma2 log(r / r_f)  (M3 Eq. 8).

    One formula covers both cases of Eq. 8: single-stage rows have r_f = r, giving r^-gamma.
    """
    log_rf = jnp.log(r_f)
    return -gamma * log_rf - gamma2 * (jnp.log(r) - log_rf)


def final_ratio(x):
    """r_f, with the absent-column default (r_f = 0) meaning single-stage: r_f = r."""
    return jnp.where(x["r_f"] > 0, x["r_f"], x["r"])


def lbase_log(p, log_M, log_D):
    """L_base = E + A/M^alpha + B/D^beta from log sizes (M3 Eq. 2)."""
    return (
        p["E"]
        + jnp.exp(jnp.log(p["A"]) - p["alpha"] * log_M)
        + jnp.exp(jnp.log(p["B"]) - p["beta"] * log_D)
    )


def high_over_target(x):
    """D_high / D_T = k (1 - r) / r."""
    return x["k"] * (1.0 - x["r"]) / x["r"]


def m3_loss(p, x, *, h_data, inv_RM_star, log_ratio):
    """(A/M'^alpha + B/D'^beta + E) * exp(log_ratio) with D' = D_T [h_data + g k (1-r)/r]."""
    k, r = x["k"], x["r"]
    R_D = k - 1.0
    g = high_resource_weight(r, R_D, p["RDh_star"], p["psi"])
    log_Dp = jnp.log(x["D_T"]) + jnp.log(h_data + g * high_over_target(x))
    log_M = jnp.log(x["M"])
    log_U = log_compute_optimal_size(jnp.log(x["D_T"]), p["A"], p["B"], p["alpha"], p["beta"])
    log_Mp = log_effective_model(log_M, log_U, inv_RM_star)
    return lbase_log(p, log_Mp, log_Dp) * jnp.exp(log_ratio)


def gamma2_r1(r1, gamma2, gamma2_dot, r0):
    """gamma2~(r1) = gamma2 + gamma2_dot ln(r0 + r1)  (M3 Eq. 21)."""
    return gamma2 + gamma2_dot * jnp.log(r0 + r1)


def rm_star_kr(k, r, a, b, c, d):
    """R_M*(k, r) = R_M*(k) r^-d = (a / (k - 1)^b + c) r^-d  (M3 Eq. 23, App. D.5.1; Eq. 7).

    ``inf`` at k = 1 (M' = M); larger (weaker saturation) at smaller r for d > 0.
    """
    return rm_star_k(k, a, b, c) * r ** -d


def inv_rm_star_kr(k, r, a, b, c, d):
    """1 / R_M*(k, r) = r^d / R_M*(k): finite (0) at k = 1, with finite gradients (Eq. 23)."""
    return inv_rm_star_k(k, a, b, c) * jnp.exp(d * jnp.log(r))


D_EXP = Param("d", 0.0, 5.0, (0.01, 1.0), False,
              "ratio exponent of R_M*(k, r) = R_M*(k) r^-d (Eq. 23); not in Table 6: the paper "
              "asks d > 0; [0, 5] like an exponent, init [0.01, 1]")
