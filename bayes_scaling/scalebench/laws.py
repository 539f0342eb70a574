"""The 31 laws of four ScaleBench tasks (Li et al. 2026, arXiv 2604.22753), written through the
public law API: how a user brings laws of their own.

Each law is a :class:`~bayes_scaling.laws.Law` whose parameters are in the benchmark's theta
order with the benchmark's bounds, and whose variables are read from the task's original columns
through ``column_map``. They are not registered in the core registry (they are the benchmark's
laws, not the papers'); :func:`task_laws` returns them by task.

Parameters with a positive lower bound draw their inits log-uniformly (``log_init``) and are
optimised in log space; a parameter whose bounds touch or cross 0 is linear. The benchmark itself
draws its 64 starts uniformly in the bounds; :func:`bayes_scaling.design.protocol_fit` does that.

Numerical guards follow the benchmark's own implementation (``_EPS = 1e-12`` floors on quantities
that are logged or raised to a power), so predictions agree with its ``golden.json`` to 1e-8.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..errors import LawError
from ..laws import Law, Param

EPS = 1e-12

#: variable -> original column of each task.
COLUMNS = {
    "data_constrained_scaling_law": {"U": "unique_tokens", "N": "params", "D": "tokens"},
    "farseer_scaling_law": {"N": "N", "D": "D"},
    "parallel_scaling_law": {"N": "num_params", "S": "parallel_size"},
    "vocab_scaling_law": {"P": "non_vocab_parameters", "V": "vocab_size", "D": "num_characters"},
}


def _params(names, bounds):
    out = []
    for name, (lo, hi) in zip(names.split(), bounds):
        out.append(Param(name, lo, hi, (lo, hi), lo > 0, "bounds of the benchmark"))
    return tuple(out)


def _floor(x):
    return jnp.maximum(x, EPS)


# --------------------------------------------------------------------------------------------------
# data_constrained_scaling_law: U unique tokens, N parameters, D tokens.


def _dc1(p, x):
    U, N, D = x["U"], x["N"], x["D"]
    return (p["A"] * N ** -p["alpha"] + p["B"] * D ** -p["beta"]
            + p["E"] * U ** p["gamma"] * N ** p["delta"])


def _dc2(p, x):
    U, N, D = x["U"], x["N"], x["D"]
    return p["a"] + p["b"] * U ** p["p"] + p["c"] * N ** p["q"] + p["d"] * D ** p["r"]


def _dc3(p, x):
    U, N, D = x["U"], x["N"], x["D"]
    U_D = _floor(U)
    R_D = D / U_D - 1.0
    U_N = _floor(jnp.minimum(p["rho"] * U_D, N))
    R_N = jnp.maximum(N / U_N - 1.0, 0.0)
    eff_N = _floor(U_N + p["tau_N"] * U_N * (1.0 - jnp.exp(-R_N / p["tau_N"])))
    eff_D = _floor(U_D + p["tau_D"] * U_D * (1.0 - jnp.exp(-R_D / p["tau_D"])))
    return p["A"] * eff_N ** -p["alpha"] + p["B"] * eff_D ** -p["alpha"] + p["C"]


def _dc4(p, x):
    U_n, M_n, T_n = _floor(x["U"]), _floor(x["N"]), _floor(x["D"])
    scale = _floor(p["s"] * U_n * M_n ** p["d"])
    T_eff = _floor(T_n / (1.0 + T_n / scale))
    return p["L0"] + p["A"] * M_n ** -p["a"] + p["B"] * T_eff ** -p["b"]


def _dc5(p, x):
    U, N, D = _floor(x["U"]), _floor(x["N"]), _floor(x["D"])
    D_eff = _floor(U ** p["gamma"] * D ** (1.0 - p["gamma"]))
    return p["A"] * N ** -p["alpha"] + p["B"] * D_eff ** -p["beta"] + p["E"]


def _dc6(p, x):
    U, N, D = _floor(x["U"]), _floor(x["N"]), _floor(x["D"])
    excess = jnp.maximum(D / U - 1.0, 0.0)
    factor = _floor(1.0 + p["C"] * excess ** p["c"] * N ** p["d"])
    D_eff = _floor(D / factor)
    return p["E"] + p["A"] * N ** -p["alpha"] + p["B"] * D_eff ** -p["beta"]


def _dc7(p, x):
    U, N, D = x["U"], x["N"], x["D"]
    return (p["L0"] + p["A"] * (N * U) ** p["alpha_pu"] + p["B"] * D ** p["alpha_t"]
            + p["C"] * N ** p["alpha_p"])


def _dc8(p, x):
    U, N, D = x["U"], x["N"], x["D"]
    ratio = jnp.log(U / D + 1.0)
    return (p["a"] + p["b"] * D ** -p["alpha"] + p["c"] * N ** -p["beta"]
            + p["d"] * jnp.abs(ratio) ** p["gamma"])


def _dc9(p, x):
    U, N, D = x["U"], x["N"], x["D"]
    return (p["A"] * N ** -p["alpha"] + p["B"] * D ** -p["beta"] * (1.0 + p["C"] * U ** -p["gamma"])
            + p["L_inf"])


def _dc10(p, x):
    U, N, D = _floor(x["U"]), _floor(x["N"]), _floor(x["D"])
    q = _floor(p["q"])
    bq = p["b"] * q
    data = _floor(D ** -bq + _floor(p["k"] * U) ** -bq) ** (1.0 / q)
    return p["L0"] + p["A"] * N ** -p["a"] + p["B"] * data


# --------------------------------------------------------------------------------------------------
# farseer_scaling_law: N parameters, D tokens. The benchmark evaluates the law with every exponent
# clamped to [-EXP_CLIP, EXP_CLIP] and differentiates it as if the clamps were not there (its
# analytic Jacobian), so a start far from the data has a bounded error and a gradient that leads
# back. Most uniform starts in its bounds are such starts (85% put an exponent beyond 50 at some
# training row), where plain exponentials make the error astronomically large or infinite.

EXP_CLIP = 50.0


def _clamp(z):
    """``z`` clamped to [-EXP_CLIP, EXP_CLIP] in value, with the gradient of ``z`` itself (the
    benchmark's Jacobian passes through its clamps). Equal to ``z`` wherever it is in range."""
    return z + jax.lax.stop_gradient(jnp.clip(z, -EXP_CLIP, EXP_CLIP) - z)


def _clamped_exp(z):
    return jnp.exp(_clamp(z))


def _farseer(p, x):
    """exp(s N^q + S) + exp(B N^b + Q) D^(-exp(A N^a + E)), every exponent clamped (above)."""
    N, D = x["N"], x["D"]
    decay = _clamped_exp(p["A"] * N ** p["a"] + p["E"])
    return (_clamped_exp(p["s"] * N ** p["q"] + p["S"])
            + _clamped_exp(_clamp(p["B"] * N ** p["b"] + p["Q"]) - decay * jnp.log(D)))


# --------------------------------------------------------------------------------------------------
# parallel_scaling_law: N parameters, S parallel streams.


def _pl1(p, x):
    N, S = x["N"], x["S"]
    n, s = N ** -p["alpha"], S ** -p["beta"]
    return p["c0"] + p["cN"] * n + p["cS"] * s + p["cNS"] * n * s


def _pl2(p, x):
    N, S = x["N"], x["S"]
    return p["c0"] + p["cN"] * N ** -p["alpha"] + p["cS"] * S ** -p["beta"]


def _pl3(p, x):
    N, S = x["N"], x["S"]
    return p["a"] * N ** p["b"] + p["c"] / (1.0 + S) + p["d"]


def _pl4(p, x):
    N, S = x["N"], x["S"]
    return p["a"] * N ** p["b"] + p["c"] * S ** -0.5 + p["d"]


def _pl5(p, x):
    N, S = x["N"], x["S"]
    return (p["A"] / (N * (p["k"] * jnp.log(S) + 1.0))) ** p["alpha"] + p["E"]


def _pl6(p, x):
    N, S = x["N"], x["S"]
    return p["c0"] + p["c1"] * (N ** -p["alpha"] + S ** -p["beta"])


def _pl7(p, x):
    N, S = x["N"], x["S"]
    return p["L0"] + p["A"] * N ** -p["alpha"] / (1.0 + p["k"] * jnp.log(S))


def _pl8(p, x):
    N, S = x["N"], x["S"]
    return (p["a"] * N ** p["b"] + p["c"]) / (1.0 + p["d"] * jnp.log(S))


def _pl9(p, x):
    N, S = x["N"], x["S"]
    return p["A"] * N ** -p["alpha"] * S ** -p["beta"]


def _pl10(p, x):
    N, S = x["N"], x["S"]
    return (p["A"] * N ** -p["alpha"] + p["E"]) * S ** -p["beta"]


# --------------------------------------------------------------------------------------------------
# vocab_scaling_law: P non-vocabulary parameters, V vocabulary size, D characters. The benchmark
# evaluates these laws in log space: a coefficient under a log is floored at EPS_V (so a negative
# A or B acts as EPS_V: the sign of sl_3/4/6/7/9's A, B, a, b is not free in practice, whatever the
# bounds say), and every log-term is clipped to [-EXP_CLIP, EXP_CLIP] before exp. Its analytic
# Jacobians pass through both: d/dA of A x is x / max(A, EPS_V) (sl_3: x / a), and the clipped
# term's gradient is the unclipped one. Here too (`_vlog`, `_clamped_exp`), so half of its uniform
# starts, whose coefficient is negative, still have a gradient. Two of its Jacobians are not
# followed, being wrong: sl_3's derivatives in a, alpha, b, beta, phi carry a spurious factor q;
# sl_5's d/dp0 of p0 x (and d/dp4) is sign(p0) x there, x here.

EPS_V = 1e-6


def _vlogs(x):
    return (jnp.log(jnp.maximum(x["P"], EPS_V)), jnp.log(jnp.maximum(x["V"], EPS_V)),
            jnp.log(jnp.maximum(x["D"], EPS_V)))


def _floored_log(c, den):
    """log(max(c, EPS_V)): log(c) above the floor (value and derivatives); below it the constant
    log(EPS_V) in value, with gradient 1 / den."""
    above = c > EPS_V
    below = jnp.log(EPS_V) + (c - jax.lax.stop_gradient(c)) / jax.lax.stop_gradient(den)
    return jnp.where(above, jnp.log(jnp.where(above, c, 1.0)), below)


def _vlog(c):
    """The benchmark's floored log of a coefficient: gradient 1 / max(c, EPS_V)."""
    return _floored_log(c, EPS_V)


def _vlog_inv(c):
    """sl_3's floored log: gradient 1 / c below the floor (its Jacobian divides by the unfloored
    coefficient)."""
    return _floored_log(c, jnp.where(c == 0, EPS_V, c))


def _vc1(p, x):
    P, V, D = x["P"], x["V"], x["D"]
    return p["c0"] + p["A"] * V ** p["b"] * P ** p["e"] * D ** p["g"]


def _vc2(p, x):
    lP, lV, lD = _vlogs(x)
    r = jnp.maximum(p["r"], EPS_V)
    lse = jnp.logaddexp(-p["alpha"] * r * lP, -p["beta"] * r * lD) - jnp.log(2.0)
    mean = _clamped_exp(lse / r)
    return p["L"] + p["A"] * mean * (1.0 + p["C"] * (lV - p["v0"]) ** 2)


def _vc3(p, x):
    lP, lV, lD = _vlogs(x)
    q = jnp.maximum(p["q"], EPS_V)
    l1 = _vlog_inv(p["a"]) - p["alpha"] * lP
    l2 = _vlog_inv(p["b"]) - p["beta"] * (lD + p["phi"] * lV)
    return p["L0"] + _clamped_exp(jnp.logaddexp(q * l1, q * l2) / q)


def _vc4(p, x):
    lP, lV, lD = _vlogs(x)
    big = jnp.maximum(p["a"] * lP, _vlog(p["lam"]) + p["b"] * lD)
    return p["L_inf"] + _clamped_exp(_vlog(p["A"]) - p["d"] * big - p["g"] * lV)


def _vc5(p, x):
    lP, lV, lD = _vlogs(x)
    t1 = jnp.sign(p["p0"]) * _clamped_exp(_vlog(jnp.abs(p["p0"])) + p["p1"] * lP
                                          + p["p2"] * lV + p["p3"] * lD)
    t2 = jnp.sign(p["p4"]) * _clamped_exp(_vlog(jnp.abs(p["p4"])) + p["p5"] * lP)
    return t1 + t2 + p["p6"]


def _vc6(p, x):
    lP, lV, lD = _vlogs(x)
    return (_clamped_exp(_vlog(p["A"]) - p["alpha"] * (lP + p["k1"] * lV))
            + _clamped_exp(_vlog(p["B"]) - p["beta"] * (lD + p["k2"] * lV)) + p["c0"])


def _vc7(p, x):
    lP, lV, lD = _vlogs(x)
    return (_clamped_exp(_vlog(p["A"]) - p["alpha"] * lP - p["beta"] * lD)
            + _clamped_exp(_vlog(p["B"]) + p["gamma"] * lV - p["delta"] * lD) + p["c0"])


def _vc8(p, x):
    lP, lV, lD = _vlogs(x)
    return (p["c0"] + p["c1"] * lV + p["c2"] * _clamped_exp(p["beta"] * lV - p["alpha"] * lP)
            + p["c3"] * _clamped_exp(p["beta"] * lV - p["gamma"] * lD))


def _vc9(p, x):
    lP, lV, lD = _vlogs(x)
    main = _clamped_exp(_vlog(p["A"]) - p["alpha"] * lP - p["beta"] * lD)
    cross = jnp.sign(p["delta"]) * _clamped_exp(_vlog(jnp.abs(p["delta"])) + p["epsilon"] * lV)
    return main * (1.0 + p["gamma"] * lV) + cross + p["L_inf"]


def _vc10(p, x):
    lP, lV, lD = _vlogs(x)
    return p["L_min"] + _clamped_exp(p["a"] + p["bP"] * lP + p["bV1"] * lV + p["bV2"] * lV ** 2
                                     + p["bD"] * lD + p["bVD"] * lV * lD)


# --------------------------------------------------------------------------------------------------
# (function, equation as LAWS.md states it, theta names, bounds) per task and law id.

_K4 = (-10000, 10000)
_SPECS = {
    "data_constrained_scaling_law": {
        "sl_1": (_dc1, "A / N^alpha + B / D^beta + E * (U^gamma * N^delta)",
                 "A alpha B beta E gamma delta",
                 [(0.001, 1e9), (0.05, 2), (0.001, 1e8), (0.05, 2), (-100, 200), (-0.5, 0.5),
                  (-0.5, 0.5)]),
        "sl_2": (_dc2, "a + b * U^p + c * N^q + d * D^r", "a b c d p q r",
                 [(-3, 10), (-1e6, 1e6), (-1e6, 1e6), (-1e7, 1e7), (-1.5, 0.5), (-1.5, 0.5),
                  (-1.5, 0.5)]),
        "sl_3": (_dc3, "A / eff_N^alpha + B / eff_D^alpha + C, eff_X = U_X + tau_X U_X "
                 "(1 - exp(-R_X / tau_X)), U_N = min(rho U, N), R_N = max(N / U_N - 1, 0), "
                 "R_D = D / U - 1", "A tau_N B tau_D alpha C rho",
                 [(0.001, 1e7), (0.001, 500), (0.001, 1e7), (0.001, 500), (0.05, 2), (-3, 10),
                  (0.001, 100)]),
        "sl_4": (_dc4, "L0 + A M^-a + B T_eff^-b, T_eff = T / (1 + T / (s U M^d)), M = N, T = D",
                 "L0 A a B b s d",
                 [(-3, 8), (0.001, 1e11), (0.05, 2.5), (0.001, 1e9), (0.05, 2.5), (1e-5, 1e7),
                  (-2, 1.5)]),
        "sl_5": (_dc5, "A / N^alpha + B / D_eff^beta + E, D_eff = U^gamma D^(1 - gamma)",
                 "A alpha B beta E gamma",
                 [(0.001, 1e10), (0.05, 2), (0.001, 1e10), (0.05, 2), (-3, 10), (0, 1)]),
        "sl_6": (_dc6, "E + A N^-alpha + B D_eff^-beta, D_eff = D / (1 + C max(D/U - 1, 0)^c N^d)",
                 "E A alpha B beta C c d",
                 [(-3, 10), (0.001, 1e11), (0.05, 2), (0.001, 1e12), (0.05, 2), (0, 10000), (0, 2),
                  (-1, 1)]),
        "sl_7": (_dc7, "L0 + A (N U)^alpha_pu + B D^alpha_t + C N^alpha_p",
                 "L0 A alpha_pu B alpha_t C alpha_p",
                 [(-3, 10), (0.001, 1e9), (-2, 0.5), (0.001, 1e9), (-2, 0.5), (-1e13, 1e13),
                  (-2.5, 0.5)]),
        "sl_8": (_dc8, "a + b / D^alpha + c / N^beta + d |log(U / D + 1)|^gamma",
                 "a b c d alpha beta gamma",
                 [(-3, 10), (-1e8, 1e8), (-1e8, 1e8), (-200, 200), (0.05, 2), (0.05, 2),
                  (0.05, 5)]),
        "sl_9": (_dc9, "A / N^alpha + B / D^beta (1 + C / U^gamma) + L_inf",
                 "A alpha B beta C gamma L_inf",
                 [(0.001, 1e7), (0.05, 2), (0.001, 1e7), (0.05, 2), (0, 1e11), (0.05, 2),
                  (-3, 10)]),
        "sl_10": (_dc10, "L0 + A N^-a + B (D^(-b q) + (k U)^(-b q))^(1/q)", "L0 A B a b k q",
                  [(-3, 8), (0.001, 1e9), (0.001, 1e9), (0.05, 2), (0.05, 2), (0.001, 10000),
                   (0.1, 50)]),
    },
    "farseer_scaling_law": {
        "sl_1": (_farseer, "exp(s N^q + S) + exp(B N^b + Q) D^(-exp(A N^a + E))",
                 "E s q S B b Q A a",
                 [(1, 6), (-1, 0.3), (0.01, 0.5), (-1, 1), (10, 1000), (-0.6, -0.01), (-5, 1),
                  (-5, 1), (0.001, 0.25)]),
    },
    "parallel_scaling_law": {
        "sl_1": (_pl1, "c0 + cN N^-alpha + cS S^-beta + cNS N^-alpha S^-beta",
                 "c0 cN alpha cS beta cNS",
                 [(-5, 5), (0, 500), (0, 2), (-50, 50), (0, 2), (-100, 100)]),
        "sl_2": (_pl2, "c0 + cN N^-alpha + cS S^-beta", "c0 cN alpha cS beta",
                 [(-5, 5), (0, 500), (0, 2), (-50, 50), (0, 2)]),
        "sl_3": (_pl3, "a N^b + c / (1 + S) + d", "a b c d", [(0, 500), (-2, 0), (-5, 5), (-5, 5)]),
        "sl_4": (_pl4, "a N^b + c S^-0.5 + d", "a b c d", [(0, 500), (-2, 0), (-5, 5), (-5, 5)]),
        "sl_5": (_pl5, "(A / (N (k log S + 1)))^alpha + E", "A k alpha E",
                 [(0, 1e9), (-100, 100), (0, 3), (-5, 5)]),
        "sl_6": (_pl6, "c0 + c1 (N^-alpha + S^-beta)", "c0 c1 alpha beta",
                 [(-200, 200), (-200, 200), (0, 2), (0, 2)]),
        "sl_7": (_pl7, "L0 + A N^-alpha / (1 + k ln S)", "L0 A alpha k",
                 [(-5, 5), (0, 500), (0, 2), (-50, 50)]),
        "sl_8": (_pl8, "(a N^b + c) / (1 + d log S)", "a b c d",
                 [(0, 500), (-2, 0), (-5, 5), (-10, 10)]),
        "sl_9": (_pl9, "A N^-alpha S^-beta", "A alpha beta", [(0, 5000), (0, 2), (0, 2)]),
        "sl_10": (_pl10, "(A N^-alpha + E) S^-beta", "A alpha E beta",
                  [(0, 500), (0, 2), (-5, 5), (0, 2)]),
    },
    "vocab_scaling_law": {
        "sl_1": (_vc1, "c0 + A V^b P^e D^g", "c0 A b e g",
                 [(-100, 100), _K4, (-5, 5), (-5, 5), (-5, 5)]),
        "sl_2": (_vc2, "L + A M_r(P^-alpha, D^-beta) (1 + C (log V - v0)^2), "
                 "M_r(x, y) = ((x^r + y^r) / 2)^(1/r)", "L A alpha beta C v0 r",
                 [(-100, 100), _K4, (-5, 5), (-5, 5), (-100, 100), (-10, 30), (0.1, 10)]),
        "sl_3": (_vc3, "L0 + ((a P^-alpha)^q + (b (D V^phi)^-beta)^q)^(1/q)",
                 "L0 a alpha b beta phi q",
                 [(-100, 100), _K4, (-5, 5), _K4, (-5, 5), (-5, 5), (0.1, 10)]),
        "sl_4": (_vc4, "L_inf + A max(P^a, lam D^b)^-d V^-g", "L_inf A a b d lam g",
                 [(-100, 100), _K4, (-5, 5), (-5, 5), (-5, 5), (1e-6, 10000), (-5, 5)]),
        "sl_5": (_vc5, "p0 P^p1 V^p2 D^p3 + p4 P^p5 + p6", "p0 p1 p2 p3 p4 p5 p6",
                 [_K4, (-5, 5), (-5, 5), (-5, 5), _K4, (-5, 5), (-100, 100)]),
        "sl_6": (_vc6, "A (P V^k1)^-alpha + B (D V^k2)^-beta + c0", "A alpha k1 B beta k2 c0",
                 [_K4, (-5, 5), (-5, 5), _K4, (-5, 5), (-5, 5), (-100, 100)]),
        "sl_7": (_vc7, "A P^-alpha D^-beta + B V^gamma D^-delta + c0",
                 "A alpha beta B gamma delta c0",
                 [_K4, (-5, 5), (-5, 5), _K4, (-5, 5), (-5, 5), (-100, 100)]),
        "sl_8": (_vc8, "c0 + c1 log V + V^beta (c2 P^-alpha + c3 D^-gamma)",
                 "c0 c1 c2 alpha c3 gamma beta",
                 [(-100, 100), (-100, 100), _K4, (-5, 5), _K4, (-5, 5), (-5, 5)]),
        "sl_9": (_vc9, "A P^-alpha D^-beta (1 + gamma log V) + delta V^epsilon + L_inf",
                 "A alpha beta gamma delta epsilon L_inf",
                 [_K4, (-5, 5), (-5, 5), (-100, 100), _K4, (-5, 5), (-100, 100)]),
        "sl_10": (_vc10, "L_min + exp(a + bP log P + bV1 log V + bV2 log^2 V + bD log D "
                  "+ bVD log V log D)", "L_min a bP bV1 bV2 bD bVD",
                  [(-100, 100), (-20, 20), (-2, 2), (-2, 2), (-0.1, 0.1), (-2, 2), (-0.1, 0.1)]),
    },
}

TASKS = tuple(_SPECS)


def _build(task: str, law_id: str) -> Law:
    fn, equation, names, bounds = _SPECS[task][law_id]
    cols = COLUMNS[task]
    return Law(
        name=f"{task}/{law_id}",
        params=_params(names, bounds),
        variables=tuple(cols),
        fn=fn,
        equation=equation + " (ScaleBench, Li et al. 2026, arXiv 2604.22753, LAWS.md)",
        column_map=dict(cols),
        description=f"ScaleBench {task} {law_id}; variables read from columns "
                    + ", ".join(f"{v} <- {c}" for v, c in cols.items()),
    )


_LAWS = {task: {law_id: _build(task, law_id) for law_id in laws} for task, laws in _SPECS.items()}


def task_laws(task: str) -> dict[str, Law]:
    """``{law_id: Law}`` of one ScaleBench task, in the benchmark's order (``sl_1``, ...)."""
    if task not in _LAWS:
        raise LawError(f"unknown ScaleBench task {task!r}; the tasks are {', '.join(TASKS)}")
    return dict(_LAWS[task])


def get(task: str, law_id: str) -> Law:
    """One ScaleBench law, e.g. ``get("vocab_scaling_law", "sl_3")``."""
    laws = task_laws(task)
    if law_id not in laws:
        raise LawError(f"task {task} has no law {law_id!r}; it has {', '.join(laws)}")
    return laws[law_id]
