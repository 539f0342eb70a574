"""A signed coefficient with wide bounds (a law's author left it free to take any sign and any
magnitude) is sampled as ``asinh(c / scale)``: the change of variables is exact, and on a table
where the coefficient's posterior spans orders of magnitude the default posterior converges and
recovers the simulated truth."""

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from conftest import assert_exact_change_of_variables, quiet_posterior, simulate

from bayes_scaling import bayes as B
from bayes_scaling.bayes.coordinates import signed_coordinates
from bayes_scaling.laws import Law, Param

TRUE = {"E": 2.0, "c": 3e3, "q": -0.5}


def _fn(p, x):
    return p["E"] * (1.0 + p["c"] * x["N"] ** p["q"])


LAW = Law(  # a benchmark-style law: its coefficient bounded by +-1e6, its exponent signed; the
    # law is affine in E and in c, not in both (so c is not sampled as the law's values)
    name="signed_coefficient_test_law",
    params=(Param("E", -3.0, 10.0, (-3.0, 10.0)), Param("c", -1e6, 1e6, (-1e6, 1e6)),
            Param("q", -1.5, 0.5, (-1.5, 0.5))),
    variables=("N",),
    fn=_fn,
)


@pytest.fixture(scope="module")
def table():
    grid = pd.DataFrame({"N": np.geomspace(1e7, 4e9, 24)})
    return simulate(LAW, grid, TRUE, noise=0.01, seed=3).drop(columns="clean")


def test_the_asinh_coordinate_is_an_exact_change_of_variables(table):
    block = signed_coordinates("c", 100.0)
    assert signed_coordinates("c", 100.0) is block  # one block (and one program) per scale
    spec = B.make_spec(LAW, coordinates=(block,))
    assert [p.name for p in spec.sampled] == ["asinh_c", "E", "q", "sigma"]
    data = B.data_pytree(spec, table)
    ref = data["ref"]
    s0 = np.asarray(spec.s({**TRUE, "sigma": 0.01}, ref))
    assert s0[0] == pytest.approx(np.arcsinh(TRUE["c"] / 100.0))
    # the log regime, then through 0 to the other sign
    assert_exact_change_of_variables(
        spec, data, [s0 + np.r_[shift, 0.05, 0.01, 0.1] for shift in (0.0, -6.0, -9.0)])


def test_a_wide_signed_coefficient_is_sampled_on_the_asinh_scale_and_recovered(table):
    post = quiet_posterior(LAW, table, seed=0, progress_bar=False)
    assert post.ok, post.diagnostics["failed"]
    # c is not sampled as the law's values: E, before it, is taken (the law is affine in E and
    # in c, not in both), and c, wide, is sampled on the asinh scale
    assert post.settings["coordinates"] == ["signed_c", "linear"]
    assert post.spec.blocks[-1].params == ("E",)
    c = post.draws("c")
    lo, hi = np.quantile(c, [0.005, 0.995])
    assert lo < TRUE["c"] < hi
    assert hi / lo > 3  # the posterior spans a wide range of c: the reason for the log scale
    for k in ("E", "q"):
        lo, hi = np.quantile(post.draws(k), [0.005, 0.995])
        assert lo < TRUE[k] < hi, (k, lo, hi)


def test_the_bounds_of_an_asinh_sampled_coefficient_are_soft(table):
    """Past a bound the density falls continuously instead of dropping to 0 (a wall inside the
    sampled line would make the chains diverge where the posterior reaches the bound)."""
    spec = B.make_spec(LAW, coordinates=(signed_coordinates("c", 100.0),))
    data = B.data_pytree(spec, table)
    s = np.array(spec.s({**TRUE, "sigma": 0.01}, data["ref"]))
    for bound in (1e6,):  # (past -1e6 the law's loss is negative: no likelihood there)
        edge = np.arcsinh(bound / 100.0)
        vals = []
        for v in (edge - 1e-6 * np.sign(bound), edge + 1e-6 * np.sign(bound),
                  edge + 0.5 * np.sign(bound)):
            s[0] = v
            vals.append(float(spec.log_joint_s(jnp.asarray(s), data)))
        inside, just_out, far_out = vals
        # finite past the bound (a hard bound: -inf), with no jump across it (the likelihood's
        # own slope moves the density by about 0.01 over this step)
        assert np.isfinite(just_out) and np.isfinite(far_out)
        assert just_out == pytest.approx(inside, abs=0.05)
        theta = spec.theta_s(jnp.asarray(s), data["ref"])
        assert float(spec.soft_bounds(theta)) == pytest.approx(-0.5, rel=1e-6)  # 0.5 past: -0.5


def test_a_mode_whose_hessian_is_not_positive_definite_still_finds_the_wide_coefficient(table):
    """ScaleBench data_constrained sl_7's ``C`` in (-1e13, 1e13) sits near 115: on its own
    coordinate its curvature is 1e25 beside about 1 on the others, beyond what float64 resolves,
    so the mode's Hessian is not positive definite. That parameter is the one to move to the
    asinh scale: its size is then ``|value|``, not the Laplace sd the Hessian cannot give."""
    from bayes_scaling.bayes.coordinates import wide_signed
    from bayes_scaling.bayes.modes import Mode

    spec = B.make_spec(LAW, coordinates=None)
    ref = B.data_pytree(spec, table)["ref"]
    s = np.asarray(spec.s({**TRUE, "sigma": 0.01}, ref))
    d = len(s)
    bad = Mode(s, 0.0, np.eye(d), np.eye(d), 0.0, hessian_ok=False)
    assert wide_signed(spec, bad, ref) == {"c": pytest.approx(TRUE["c"])}
    good = Mode(s, 0.0, np.eye(d) * 1e-12, np.eye(d) * 1e-6, 0.0, hessian_ok=True)
    assert set(wide_signed(spec, good, ref)) == {"c"}
