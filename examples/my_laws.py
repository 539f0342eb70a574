"""A law of your own, registered for the Python API and the command line.

Kaplan et al. (2020), "Scaling Laws for Neural Language Models", Eq. (1.5):

    L(N, D) = ((N_c / N)^(alpha_N / alpha_D) + D_c / D)^alpha_D

evaluated in log space (log-sum-exp) so that large N and D stay finite.
Use it with ``import my_laws`` in Python, or ``--law-module examples/my_laws.py`` on the command
line.
"""
import jax.numpy as jnp

import bayes_scaling as bs
from bayes_scaling.laws import Law, Param


def kaplan(p, x):
    """Kaplan et al. (2020) Eq. (1.5), in log space."""
    log_n_term = p["alpha_N"] / p["alpha_D"] * (jnp.log(p["N_c"]) - jnp.log(x["N"]))
    log_d_term = jnp.log(p["D_c"]) - jnp.log(x["D"])
    return jnp.exp(p["alpha_D"] * jnp.logaddexp(log_n_term, log_d_term))


KAPLAN = bs.laws.register(Law(
    name="kaplan",
    params=(
        Param("N_c", 1e5, 1e20, (1e10, 1e16), log_init=True, doc="critical model size"),
        Param("D_c", 1e5, 1e20, (1e10, 1e16), log_init=True, doc="critical data size"),
        Param("alpha_N", 0.01, 1.0, (0.03, 0.3), doc="model-size exponent"),
        Param("alpha_D", 0.01, 1.0, (0.03, 0.3), doc="data-size exponent"),
    ),
    variables=("N", "D"),
    fn=kaplan,
    equation="L = ((N_c/N)^(alpha_N/alpha_D) + D_c/D)^alpha_D  (Kaplan et al. 2020, Eq. 1.5)",
    description="Kaplan's joint law in model size N and tokens D; no irreducible loss term.",
    example={"N_c": 8.8e13, "D_c": 5.4e13, "alpha_N": 0.076, "alpha_D": 0.095},
))
