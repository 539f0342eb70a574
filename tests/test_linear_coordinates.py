"""Signed coefficients a law is affine in are sampled as the law's values at as many table rows
(``linear_coordinates``): the change of variables is exact, the engine finds such coefficients
in a law it has never seen (and only those), and on a ridge that is curved in every coordinate
of the coefficients (``c0 + c1 (N^-alpha + S^-beta)`` on one decade of sizes) the default
posterior converges and recovers the simulated truth."""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from conftest import assert_exact_change_of_variables, quiet_posterior, simulate

from bayes_scaling import bayes as B
from bayes_scaling.bayes.coordinates import linear_coordinates
from bayes_scaling.laws import Law, Param

TRUE = {"c0": 0.6, "c1": 2.0, "alpha": 0.08, "beta": 0.3}


def _fn(p, x):
    return p["c0"] + p["c1"] * (x["N"] ** -p["alpha"] + x["S"] ** -p["beta"])


LAW = Law(  # a benchmark-style law (one coefficient shared by two power terms), signed bounds
    name="shared_coefficient_test_law",
    params=(Param("c0", -200.0, 200.0, (-200.0, 200.0)), Param("c1", -200.0, 200.0, (-200.0, 200.0)),
            Param("alpha", 0.0, 2.0, (0.0, 2.0)), Param("beta", 0.0, 2.0, (0.0, 2.0))),
    variables=("N", "S"),
    fn=_fn,
)


@pytest.fixture(scope="module")
def table():
    grid = pd.DataFrame({"N": np.repeat(np.geomspace(5e8, 4.4e9, 6), 3),
                         "S": np.tile([1.0, 2.0, 4.0], 6)})
    return simulate(LAW, grid, TRUE, noise=0.003, seed=0).drop(columns="clean")


def test_the_values_are_an_exact_change_of_variables(table):
    points = {"N": np.array([5e8, 4.4e9]), "S": np.array([1.0, 4.0])}
    block = linear_coordinates(("c0", "c1"), points)
    assert linear_coordinates(("c0", "c1"), dict(points)) is block  # one program per points
    spec = B.make_spec(LAW, coordinates=(block,))
    assert [p.name for p in spec.sampled] == ["value_1", "value_2", "alpha", "beta", "sigma"]
    data = B.data_pytree(spec, table)
    ref = data["ref"]
    s0 = np.asarray(spec.s({**TRUE, "sigma": 0.003}, ref))
    # the coordinates are the law's values at the points
    assert s0[:2] == pytest.approx(np.asarray(_fn(TRUE, points)), rel=1e-12)

    theta = spec.theta_s(jnp.asarray(s0), ref)
    assert {k: float(theta[k]) for k in TRUE} == pytest.approx(TRUE, rel=1e-10)
    assert_exact_change_of_variables(  # at the truth, then far along the ridge
        spec, data, [s0, s0 + np.r_[0.02, -0.01, -1.5, 0.1, 0.2]])


@pytest.fixture(scope="module")
def laplace_posteriors(table):
    """The default Laplace posteriors of LAW on ``table`` and of the product law on its table,
    with their tables (two tests read each)."""
    law, df = _product_law_table()
    return {"shared": (LAW, table, quiet_posterior(LAW, table, method="laplace", seed=0)),
            "product": (law, df, quiet_posterior(law, df, method="laplace", seed=0))}


def _product(p, x):
    return p["a"] * (1.0 + p["b"] * x["N"] ** -0.3)


def _product_law_table():
    """A law multiplying two signed coefficients (affine in each, not in both), on 16 rows."""
    law = Law(name="product_test_law",
              params=(Param("a", -1e3, 1e3, (-5.0, 5.0)), Param("b", -1e4, 1e4, (-50.0, 50.0))),
              variables=("N",), fn=_product)
    df = simulate(law, pd.DataFrame({"N": np.geomspace(1e6, 1e9, 16)}), {"a": 1.5, "b": 20.0},
                  noise=0.01, seed=1).drop(columns="clean")
    return law, df


def test_only_the_coefficients_the_law_is_affine_in_are_taken(table, laplace_posteriors):
    """c0 and c1 enter affinely (alpha and beta, bounded below by 0, are not candidates); the
    rows chosen keep G invertible. Of a law multiplying two signed coefficients, only the first
    is taken: it is affine in each, not in both."""
    post = laplace_posteriors["shared"][2]
    assert post.settings["coordinates"] == ["linear"]
    block = post.spec.blocks[0]
    assert block.params == ("c0", "c1")
    pts = B.data_pytree(post.spec, table)["ref"]["linear"]["x"]
    G = np.stack([np.ones(2), np.asarray(pts["N"]) ** -TRUE["alpha"]
                  + np.asarray(pts["S"]) ** -TRUE["beta"]], 1)
    assert abs(np.linalg.det(G)) > 0.05  # two distinct points far apart in the second term

    post = laplace_posteriors["product"][2]
    assert [b.params for b in post.spec.blocks if b.name == "linear"] == [("a",)]
    assert [b.name for b in post.spec.blocks] == ["signed_b", "linear"]  # b: wide, not affine


def test_a_lone_offset_is_sampled_as_the_laws_value_at_one_row():
    """An offset alone (L0 in (-5, 5)) has a ridge with the term it offsets: on three decades of
    N, L0 falls as A N^-alpha rises with a smaller alpha. It is sampled as the law's value at one
    row, which the data pin; the default posterior converges and recovers the truth."""
    true = {"L0": 1.0, "A": 40.0, "alpha": 0.3}

    def offset(p, x):
        return p["L0"] + p["A"] * x["N"] ** -p["alpha"]

    law = Law(name="narrow_offset_test_law",
              params=(Param("L0", -5.0, 5.0, (-5.0, 5.0)),
                      Param("A", 0.0, 500.0, (1.0, 500.0), True),
                      Param("alpha", 0.0, 2.0, (0.0, 2.0))),
              variables=("N",), fn=offset)
    df = simulate(law, pd.DataFrame({"N": np.geomspace(1e6, 1e9, 16)}), true, noise=0.005,
                  seed=1).drop(columns="clean")
    post = quiet_posterior(law, df, seed=0, progress_bar=False)
    assert post.ok, post.diagnostics["failed"]
    # the offset as the law's value at a row; the power term A N^-alpha at its value at the centre
    assert post.settings["coordinates"] == ["term_A", "linear"]
    assert post.spec.blocks[-1].params == ("L0",)
    pts = B.data_pytree(post.spec, df)["ref"]["linear"]["x"]
    assert len(pts["N"]) == 1 and float(pts["N"][0]) in set(df["N"])
    for k, v in true.items():
        lo, hi = np.quantile(post.draws(k), [0.005, 0.995])
        assert lo < v < hi, (k, lo, hi)


def test_the_sampled_density_has_a_finite_hessian_inside_soft_bounds(laplace_posteriors):
    """Newton and the Laplace fit read the Hessian of the sampled density. The soft bound of a
    signed parameter (its penalty in log |theta| past either bound) was written with
    ``log(max(-v, 1e-300))`` for the far side: zero with a zero gradient, but a second
    derivative of ``inf * 0 = nan``. Every Hessian was nan, so Newton stopped where it started
    and the chains were whitened by the identity (ScaleBench data_constrained sl_6, sl_1, sl_9:
    over 1200 s). Checked for a coefficient sampled as the law's values (c0, c1) and one on
    the asinh scale (b), at the posterior mode and at a point away from it."""
    for key, blocks in (("shared", ["linear"]), ("product", ["signed_b", "linear"])):
        lw, tb, post = laplace_posteriors[key]
        assert [b.name for b in post.spec.blocks] == blocks
        data = B.data_pytree(post.spec, tb)
        s_hat = np.asarray(post.spec.s({k: float(np.median(post.draws(k)))
                                        for k in (*lw.param_names, "sigma")}, data["ref"]))
        hessian = jax.jit(jax.hessian(post.spec.log_joint_s))  # eager, 4 calls took 50 s
        for s in (s_hat, s_hat + 0.1):
            H = np.asarray(hessian(jnp.asarray(s), data))
            assert np.all(np.isfinite(H)), (lw.name, s)


def test_a_ridge_through_zero_converges_and_recovers_the_truth(table):
    post = quiet_posterior(LAW, table, seed=0, progress_bar=False)
    assert post.ok, post.diagnostics["failed"]
    assert post.settings["coordinates"] == ["linear"]
    c0 = post.draws("c0")
    assert np.quantile(c0, 0.05) < 0 < np.quantile(c0, 0.95)  # the ridge crosses c0 = 0
    for k, v in TRUE.items():
        lo, hi = np.quantile(post.draws(k), [0.005, 0.995])
        assert lo < v < hi, (k, lo, hi)


def test_a_coefficient_whose_term_vanishes_is_not_taken():
    """At a mode where a term is numerically 0 (ScaleBench parallel sl_7: alpha near 1.3 makes
    A N^-alpha about 1e-10), the law is trivially affine in the coefficient inside it; taking it
    would make G singular. Only coefficients that move the law are taken."""

    def vanishing(p, x):
        return p["L0"] + p["b"] * x["N"] ** -0.5 + p["k"] * x["N"] ** -6.0

    law = Law(name="vanishing_term_test_law",
              params=(Param("L0", -1e3, 1e3, (-5.0, 5.0)), Param("b", -1e4, 1e4, (-50.0, 50.0)),
                      Param("k", -1e3, 1e3, (-5.0, 5.0))),
              variables=("N",), fn=vanishing)
    df = simulate(law, pd.DataFrame({"N": np.geomspace(1e6, 1e9, 16)}),
                  {"L0": 1.5, "b": 300.0, "k": 1.0}, noise=0.005, seed=1).drop(columns="clean")
    post = quiet_posterior(law, df, method="laplace", seed=0)
    assert [b.params for b in post.spec.blocks if b.name == "linear"] == [("L0", "b")]
