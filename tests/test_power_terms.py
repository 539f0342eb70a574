"""Power terms of any law are found at the mode and sampled at their value at the centre of the
table (``bayes_scaling.bayes.terms``): a law written with no declared structure has its power
terms found, inside other functions too and with coefficients of either sign; what is not a power
term is left alone; the change of variables is exact; and a posterior sampled that way recovers
the simulated truth."""

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from conftest import assert_exact_change_of_variables, quiet_posterior, simulate

from bayes_scaling import bayes as B
from bayes_scaling.bayes import spec as spec_module
from bayes_scaling.bayes.modes import find_modes, map_stage
from bayes_scaling.bayes.terms import power_blocks, term_coordinates
from bayes_scaling.laws import Law, Param

TRUE = {"E": 1.8, "A": 400.0, "a": 0.3, "s": -0.4, "q": 0.06, "k": 3.0}


def _fn(p, x):
    # a positive power term in N, a signed one in D inside an exponential, and a term that is not
    # a power of an input (k shifts N inside it)
    return (p["E"] + p["A"] * x["N"] ** -p["a"] + jnp.exp(p["s"] * x["D"] ** p["q"])
            + 0.05 * (x["N"] / 1e8 + p["k"]) ** -0.5)


LAW = Law(  # not registered, nothing declared: what a user writes
    name="power_terms_test_law",
    params=(Param("E", 0.0, 10.0, (0.5, 3.0)), Param("A", 0.0, 1e7, (1.0, 1e4), log_init=True),
            Param("a", 0.01, 2.0, (0.05, 1.0)), Param("s", -1.0, 1.0, (-1.0, 1.0)),
            Param("q", 0.001, 0.5, (0.01, 0.3)), Param("k", 0.1, 100.0, (0.5, 20.0))),
    variables=("N", "D"),
    fn=_fn,
)


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(0)
    # four decades of each input: the signed term's exponent is pinned well enough that the
    # default run converges at its first attempt (2.5 decades needed twice the sampling time)
    grid = pd.DataFrame({"N": np.exp(rng.uniform(np.log(1e6), np.log(1e10), 60)),
                         "D": np.exp(rng.uniform(np.log(1e8), np.log(1e12), 60))})
    return simulate(LAW, grid, TRUE, noise=0.004, seed=1).drop(columns="clean")


def _mode(spec, table):
    data = B.data_pytree(spec, spec.space.validate(table))
    *_, (u_ok, v_ok) = map_stage(spec, data, 8, 0, 1000)
    return data, find_modes(spec, data, u_ok, v_ok)[0]


def test_power_terms_are_found_inside_functions_and_with_either_sign(table):
    spec = B.make_spec(LAW, coordinates=None)
    data, mode = _mode(spec, table)
    blocks = power_blocks(spec, mode, data)
    assert {b.params for b in blocks} == {("A", "a"), ("s", "q")}
    assert term_coordinates("A", "a", "N", -1, True) in blocks  # A N^-a, positive: log scale
    assert term_coordinates("s", "q", "D", 1, False) in blocks  # s D^q inside exp, signed
    # skipped parameters are left as they are (taken by another block)
    assert {b.params for b in power_blocks(spec, mode, data, skip=("s",))} == {("A", "a")}


def test_the_term_coordinates_are_an_exact_change_of_variables(table):
    blocks = (term_coordinates("A", "a", "N", -1, True), term_coordinates("s", "q", "D", 1, False))
    spec = B.make_spec(LAW, coordinates=blocks)
    data = B.data_pytree(spec, table)
    ref = data["ref"]
    s0 = np.asarray(spec.s({**TRUE, "sigma": 0.004}, ref))
    names = [p.name for p in spec.sampled]
    L0 = float(np.mean(np.log(table["N"])))
    assert s0[names.index("log_A_term_at_centre")] == pytest.approx(
        np.log(TRUE["A"]) - TRUE["a"] * L0, rel=1e-12)
    assert {k: float(v) for k, v in spec.theta_s(jnp.asarray(s0), ref).items()
            if k in TRUE} == pytest.approx(TRUE, rel=1e-10)
    rng = np.random.default_rng(2)
    assert_exact_change_of_variables(
        spec, data, [s0 + 0.1 * rng.standard_normal(len(s0)) for _ in range(3)])



def test_the_older_power_coordinates_name_is_the_positive_inverse_power_term():
    with pytest.warns(DeprecationWarning, match="term_coordinates"):
        block = B.power_coordinates("A", "a", "N")
    assert block is term_coordinates("A", "a", "N", -1, True)
    assert block.name == "term_A" and block.coords[0].name == "log_A_term_at_centre"


def test_a_law_with_no_declared_structure_is_sampled_in_its_terms_and_recovered(table):
    post = quiet_posterior(LAW, table, seed=0, progress_bar=False)
    assert post.ok, post.diagnostics["failed"]
    assert set(post.settings["coordinates"]) == {"term_A", "term_s"}
    for k, v in TRUE.items():
        lo, hi = np.quantile(post.draws(k), [0.005, 0.995])
        assert lo < v < hi, (k, lo, hi)
    # Laplace keeps the parameters as they are (every study scored with it is unchanged)
    lap = quiet_posterior(LAW, table, seed=0, method="laplace")
    assert lap.settings["coordinates"] == []


def test_a_terms_coefficient_has_soft_bounds_whatever_its_init_range(table):
    """A coefficient whose init range starts at 0 (ScaleBench's ``cN`` in (0, 500)) is not on a log
    scale, so its bounds were hard: in the term's coordinates its upper bound is a wall that moves
    with the exponent (parallel stack ``sl_2``: about 220 divergences at every step size, refused
    at seeds 0-2). Past the bound the density now falls continuously."""
    params = tuple(Param("A", 0.0, 500.0, (0.0, 500.0)) if p.name == "A" else p
                   for p in LAW.params)
    law = Law(name="power_terms_bounded_test_law", params=params, variables=("N", "D"), fn=_fn)
    spec = B.make_spec(law, coordinates=(term_coordinates("A", "a", "N", -1, True),))
    data = B.data_pytree(spec, table)
    ref = data["ref"]

    def density(A):
        return float(spec.log_joint_s(spec.s({**TRUE, "A": A, "sigma": 0.004}, ref), data))

    inside, just_out = density(499.999), density(500.001)
    assert np.isfinite(just_out) and just_out == pytest.approx(inside, abs=0.05)
    assert np.isfinite(density(900.0))
    # the penalty past the bound: 0 inside, Gaussian in log A beyond (Spec.soft_bounds)
    width = spec_module.SOFT_BOUND_WIDTH
    assert float(spec.soft_bounds({**TRUE, "A": 450.0, "sigma": 0.004})) == 0.0
    assert float(spec.soft_bounds({**TRUE, "A": 900.0, "sigma": 0.004})) == pytest.approx(
        -0.5 * (np.log(900.0 / 500.0) / width) ** 2, rel=1e-9)
