"""Laws written as a new user would write them, for the posterior suite's ``user/`` cases.

Each is a plain :class:`bayes_scaling.laws.Law`: bounds and init ranges a user would pick, one
``jnp`` function, and nothing the sampler could use (no ``linear``, ``coordinates`` or
``prior_references``), so the suite measures what the default engine does with a law it was
never told about. None is registered.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pandas as pd

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


def _grid(**cols):
    mesh = np.meshgrid(*[np.asarray(v, float) for v in cols.values()], indexing="ij")
    return pd.DataFrame({k: m.ravel() for k, m in zip(cols, mesh)})


#: Laws of other studies and of other inputs, each with a table simulated from stated parameter
#: values (``truth``) on a design of ``design()``: ``{name: (law, truth, design)}``. The noise is
#: the likelihood's own at ``sigma`` 0.01 (posteriors.py, ``simulate``); the suite scores the
#: default posterior's coverage of the truth.
SIMULATED_LAWS = {
    # Clark et al. (2022), Eq. (1): mixture-of-experts, bilinear in log N and log E (experts)
    "moe_bilinear": (
        Law(name="user_moe_bilinear", variables=("N", "E"),
            params=(Param("a", -2.0, 0.0, (-0.3, -0.01)), Param("b", -2.0, 0.0, (-0.3, -0.01)),
                    Param("c", -1.0, 1.0, (-0.05, 0.05)), Param("d", -10.0, 10.0, (0.0, 5.0))),
            fn=lambda p, x: jnp.exp(p["a"] * jnp.log(x["N"]) + p["b"] * jnp.log(x["E"])
                                    + p["c"] * jnp.log(x["N"]) * jnp.log(x["E"]) + p["d"]),
            equation="log L = a log N + b log E + c log N log E + d (Clark et al. 2022, Eq. 1)"),
        {"a": -0.08, "b": -0.05, "c": 0.002, "d": 2.5},
        lambda: _grid(N=np.geomspace(1.5e7, 1.3e9, 7), E=[1, 2, 4, 8, 16, 32, 64, 128])),
    # Kaplan et al. (2020), Eq. (1.6) form: model size and optimisation steps
    "kaplan_steps": (
        Law(name="user_kaplan_steps", variables=("N", "S"),
            params=(Param("Nc", 1e6, 1e16, (1e10, 1e14), log_init=True),
                    Param("aN", 0.01, 1.0, (0.03, 0.3)),
                    Param("Sc", 10.0, 1e8, (1e3, 1e6), log_init=True),
                    Param("aS", 0.01, 2.0, (0.3, 1.0))),
            fn=lambda p, x: (p["Nc"] / x["N"]) ** p["aN"] + (p["Sc"] / x["S"]) ** p["aS"],
            equation="(Nc / N)^aN + (Sc / S)^aS (Kaplan et al. 2020, Eq. 1.6 form)"),
        {"Nc": 8.8e13, "aN": 0.076, "Sc": 2.1e3, "aS": 0.76},
        lambda: _grid(N=np.geomspace(1e6, 1e9, 6), S=np.geomspace(2e3, 2e5, 8))),
    # Kumar et al. (2024): weights in P bits count as N_eff = N (1 - exp(-P / gamma)) parameters
    "precision": (
        Law(name="user_precision", variables=("N", "D", "P"),
            params=(Param("A", 1.0, 1e5, (10.0, 1e3), log_init=True),
                    Param("alpha", 0.05, 1.0, (0.1, 0.6)),
                    Param("B", 1.0, 1e6, (10.0, 1e4), log_init=True),
                    Param("beta", 0.05, 1.0, (0.1, 0.6)), Param("E", 0.0, 5.0, (1.0, 2.5)),
                    Param("gamma", 0.1, 20.0, (1.0, 5.0))),
            fn=lambda p, x: p["A"] * (x["N"] * (1 - jnp.exp(-x["P"] / p["gamma"]))) ** -p["alpha"]
            + p["B"] * x["D"] ** -p["beta"] + p["E"],
            equation="A N_eff^-alpha + B D^-beta + E, N_eff = N (1 - exp(-P / gamma))"),
        {"A": 400.0, "alpha": 0.34, "B": 410.0, "beta": 0.28, "E": 1.7, "gamma": 2.5},
        lambda: _grid(N=np.geomspace(3e7, 2e8, 4), D=np.geomspace(1e9, 2e10, 4),
                      P=[3, 4, 6, 8, 16])),
    # Tissue et al. (2024), Eq. (1) form: loss along a learning-rate schedule from its forward
    # area S1 and its annealing area S2; the decay coefficient's init range (0, 1) predicts a
    # negative loss at most rows (S2 reaches 2000), as a user's first guess would
    "lr_anneal": (
        Law(name="user_lr_anneal", variables=("S1", "S2"),
            params=(Param("L0", 0.0, 10.0, (1.0, 3.0)),
                    Param("A", 0.0, 100.0, (0.1, 10.0), log_init=True),
                    Param("alpha", 0.01, 2.0, (0.1, 1.0)), Param("C", -10.0, 10.0, (0.0, 1.0))),
            fn=lambda p, x: p["L0"] + p["A"] * x["S1"] ** -p["alpha"] - p["C"] * x["S2"],
            equation="L0 + A S1^-alpha - C S2 (Tissue et al. 2024, Eq. 1 form)"),
        {"L0": 2.8, "A": 0.45, "alpha": 0.5, "C": 3e-5},
        lambda: pd.DataFrame({"S1": np.geomspace(10.0, 1000.0, 40),
                              "S2": np.r_[np.zeros(20), np.linspace(100.0, 2000.0, 20)]})),
    # Caballero et al. (2023), Eq. (1): a broken neural scaling law with one break, in compute
    "broken_power": (
        Law(name="user_broken_power", variables=("C",),
            params=(Param("a", 0.0, 5.0, (1.0, 3.0)),
                    Param("b", 1e-3, 1e4, (0.1, 100.0), log_init=True),
                    Param("c0", 0.0, 1.0, (0.01, 0.2)), Param("c1", 0.0, 1.0, (0.01, 0.3)),
                    Param("d1", 1e15, 1e24, (1e17, 1e21), log_init=True),
                    Param("f1", 0.05, 5.0, (0.2, 2.0))),
            fn=lambda p, x: p["a"] + p["b"] * x["C"] ** -p["c0"]
            * (1 + (x["C"] / p["d1"]) ** (1 / p["f1"])) ** (-p["c1"] * p["f1"]),
            equation="a + b C^-c0 (1 + (C / d1)^(1 / f1))^(-c1 f1) (Caballero et al. 2023, Eq. 1)"),
        {"a": 1.8, "b": 20.0, "c0": 0.05, "c1": 0.12, "d1": 1e19, "f1": 0.5},
        lambda: pd.DataFrame({"C": np.geomspace(1e16, 1e22, 36)})),
}

#: A law with the learning rate as an input, for misfitting_li2025's final checkpoints at every
#: peak learning rate (posteriors.py): Chinchilla plus a quadratic penalty in log lr around an
#: optimum that moves with N
LR_LAW = Law(
    name="user_lr_penalty", variables=("N", "D", "lr"),
    params=(Param("E", 0.0, 5.0, (1.0, 2.5)), Param("A", 1.0, 1e6, (10.0, 1e4), log_init=True),
            Param("a", 0.01, 1.5, (0.1, 0.6)), Param("B", 1.0, 1e6, (10.0, 1e4), log_init=True),
            Param("b", 0.01, 1.5, (0.1, 0.6)), Param("c", 0.0, 1.0, (0.001, 0.1)),
            Param("m0", -20.0, 20.0, (-8.0, 0.0)), Param("m1", -2.0, 2.0, (-0.5, 0.5))),
    fn=lambda p, x: p["E"] + p["A"] / x["N"] ** p["a"] + p["B"] / x["D"] ** p["b"]
    + p["c"] * (jnp.log(x["lr"]) - p["m0"] - p["m1"] * (jnp.log(x["N"]) - 18.0)) ** 2,
    equation="E + A / N^a + B / D^b + c (log lr - m0 - m1 (log N - 18))^2")

#: Every law above by its name without the ``user_`` prefix (the suite's ``Case.law``)
BY_NAME = {**LAWS, **OWN_INPUT_LAWS, **{k: v[0] for k, v in SIMULATED_LAWS.items()},
           LR_LAW.name[len("user_"):]: LR_LAW}
