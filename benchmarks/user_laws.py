"""Laws written as a new user would write them, for the posterior suite's ``user/`` cases.

Each is a plain :class:`bayes_scaling.laws.Law`: bounds and init ranges a user would pick, one
``jnp`` function, and nothing the sampler could use (no ``linear``, ``coordinates`` or
``prior_references``), so the suite measures what the default engine does with a law it was
never told about. None is registered.
"""
from __future__ import annotations

import jax.numpy as jnp

from bayes_scaling.laws import Law, Param


def _law(name, params, fn, equation):
    return Law(name=f"user_{name}", params=tuple(params), variables=("N", "D"), fn=fn,
               equation=equation)


def _positive(name, hi, init):
    return Param(name, 0.0, hi, init, log_init=True)


LAWS = {
    # Kaplan et al. (2020), Eq. (1.5): L(N, D) = [(N_c / N)^(a_N / a_D) + D_c / D]^a_D
    "kaplan": _law("kaplan", [Param("Nc", 1e3, 1e20, (1e8, 1e15), log_init=True),
                              Param("Dc", 1e3, 1e20, (1e8, 1e15), log_init=True),
                              Param("aN", 0.01, 2.0, (0.05, 1.0)),
                              Param("aD", 0.01, 2.0, (0.05, 1.0))],
                   lambda p, x: ((p["Nc"] / x["N"]) ** (p["aN"] / p["aD"])
                                 + p["Dc"] / x["D"]) ** p["aD"],
                   "Kaplan et al. 2020, Eq. (1.5)"),
    # Hoffmann et al. (2022), Eq. (2), with a user's own bounds and no declared structure
    "chinchilla_plain": _law("chinchilla_plain", [
        Param("E", 0.0, 10.0, (0.5, 3.0)), _positive("A", 1e8, (1.0, 1e4)),
        Param("a", 0.0, 2.0, (0.1, 1.0)), _positive("B", 1e8, (1.0, 1e4)),
        Param("b", 0.0, 2.0, (0.1, 1.0))],
        lambda p, x: p["E"] + p["A"] / x["N"] ** p["a"] + p["B"] / x["D"] ** p["b"],
        "Hoffmann et al. 2022, Eq. (2)"),
    # the reducible part raised to a power (the form of Kaplan's Eq. (1.5) with an offset)
    "sum_power": _law("sum_power", [
        Param("E", 0.0, 10.0, (0.5, 3.0)), _positive("A", 1e8, (1.0, 1e4)),
        Param("a", 0.0, 2.0, (0.1, 1.0)), _positive("B", 1e8, (1.0, 1e4)),
        Param("b", 0.0, 2.0, (0.1, 1.0)), Param("g", 0.1, 3.0, (0.5, 1.5))],
        lambda p, x: p["E"] + (p["A"] / x["N"] ** p["a"] + p["B"] / x["D"] ** p["b"]) ** p["g"],
        "E + (A / N^a + B / D^b)^g"),
    # compute alone, C = 6 N D, with an irreducible term (Henighan et al. 2020, Eq. (1.1) form)
    "compute": _law("compute", [Param("E", 0.0, 10.0, (0.5, 3.0)),
                                _positive("A", 1e12, (1.0, 1e6)),
                                Param("a", 0.0, 2.0, (0.05, 1.0))],
                    lambda p, x: p["E"] + p["A"] * (6.0 * x["N"] * x["D"]) ** -p["a"],
                    "E + A (6 N D)^-a"),
    # a local log-linear fit: signed coefficients, the law linear in all of them
    "log_linear": _law("log_linear", [Param("c", -100.0, 100.0, (-5.0, 5.0)),
                                      Param("u", -10.0, 10.0, (-1.0, 1.0)),
                                      Param("v", -10.0, 10.0, (-1.0, 1.0))],
                       lambda p, x: p["c"] + p["u"] * jnp.log(x["N"]) + p["v"] * jnp.log(x["D"]),
                       "c + u log N + v log D"),
    # power terms whose coefficients a user left free to take either sign
    "signed_terms": _law("signed_terms", [
        Param("E", -10.0, 10.0, (0.5, 3.0)), Param("A", -1e6, 1e6, (-10.0, 1e3)),
        Param("a", 0.0, 2.0, (0.1, 1.0)), Param("B", -1e6, 1e6, (-10.0, 1e3)),
        Param("b", 0.0, 2.0, (0.1, 1.0))],
        lambda p, x: p["E"] + p["A"] * x["N"] ** -p["a"] + p["B"] * x["D"] ** -p["b"],
        "E + A N^-a + B D^-b, A and B of either sign"),
}

#: Laws of their own inputs, each fitted only on its own table (posteriors.py, OWN_TABLES)
OWN_INPUT_LAWS = {
    # Ye et al. (ICLR 2025), "Data Mixing Laws", Eq. (1), for a three-domain mixture: the loss on
    # one validation domain against two of the training proportions (the third is 1 - r1 - r2);
    # the proportions are 0 on some runs
    "mixing": Law(name="user_mixing", variables=("r1", "r2"),
                  params=(Param("c", 0.0, 10.0, (0.5, 2.0)),
                          Param("k", 1e-4, 100.0, (0.01, 1.0), log_init=True),
                          Param("t1", -20.0, 20.0, (-3.0, 3.0)),
                          Param("t2", -20.0, 20.0, (-3.0, 3.0))),
                  fn=lambda p, x: p["c"] + p["k"] * jnp.exp(p["t1"] * x["r1"] + p["t2"] * x["r2"]),
                  equation="c + k exp(t1 r1 + t2 r2) (Ye et al. 2025, Eq. 1)"),
}
