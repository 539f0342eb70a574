"""The one parameter space (``bayes_scaling.params``) that the MAP fit and inference share: round
trips of theta <-> u, the fixed-name check and its one error, and agreement of ``fit.Problem`` and
``bayes.Spec`` built on it."""
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes import SCALE, data_pytree, make_spec
from bayes_scaling.errors import FitError, OptionError, ParameterError
from bayes_scaling.fit import Problem
from bayes_scaling.params import ParamSpace, pad_rows, row_bucket

from conftest import simulate

TRUE = dict(E=1.8, A=400.0, alpha=0.34, B=2000.0, beta=0.37)


@pytest.fixture(scope="module")
def table():
    """Chinchilla (Hoffmann et al. 2022, Eq. 2) at known parameters on a 6 x 7 grid of N and D."""
    grid = bs.datasets.load("chinchilla_epoch")[["N", "D"]].iloc[::6].reset_index(drop=True)
    return simulate("chinchilla", grid, params=TRUE, noise=0.002, seed=4)


@pytest.mark.parametrize("name", ["chinchilla", "ptpp_gated_floor", "m3", "sedova"])
def test_theta_and_u_round_trip_inside_the_bounds(name):
    law = bs.laws.get(name)
    first = law.params[0]
    space = ParamSpace.of(law, {first.name: float(np.mean(first.init))}, extra=(SCALE,))
    assert space.names == (*[p.name for p in law.params[1:]], "sigma")
    assert space.law_names == space.names[:-1]
    theta = space.sample_inits(50, seed=3)
    assert theta.shape == (50, len(law.params))
    lo = np.array([p.lower for p in space.free])
    hi = np.array([p.upper for p in space.free])
    assert np.all((theta > lo) & (theta < hi))
    u = space.u(jnp.asarray(theta))
    assert np.all(np.isfinite(np.asarray(u)))
    np.testing.assert_allclose(np.asarray(space.theta(u)), theta, rtol=1e-9)
    # the dict forms are the same map
    as_dict = space.theta_dict(u)
    assert list(as_dict) == list(space.names)
    np.testing.assert_array_equal(np.stack([np.asarray(v) for v in as_dict.values()], -1),
                                  np.asarray(space.theta(u)))
    np.testing.assert_array_equal(np.asarray(space.u(as_dict)),
                                  np.asarray(space.u(space.theta(u))))
    # and far out on the real line theta stays inside the bounds
    far = space.theta(jnp.full((len(space.free),), 30.0))
    assert np.all((np.asarray(far) >= lo) & (np.asarray(far) <= hi))
    # full_params: every law parameter, the scale left out, the fixed value as given
    full = space.full_params(theta[0])
    assert set(full) == set(law.param_names)
    assert float(full[first.name]) == float(np.mean(first.init))
    assert float(full[law.params[1].name]) == theta[0, 0]


def test_a_bad_fixed_name_names_itself_and_the_laws_parameters():
    with pytest.raises(ParameterError) as err:
        ParamSpace.of("chinchilla", {"alhpa": 0.3, "gamma": 1.0, "E": 1.7})
    msg = str(err.value)
    assert msg.startswith("fixed names ['alhpa', 'gamma'] are not parameters of chinchilla")
    assert str(list(bs.laws.get("chinchilla").param_names)) in msg
    # one class that the handlers of either side catch
    assert issubclass(ParameterError, FitError) and issubclass(ParameterError, OptionError)


def test_fit_map_and_fit_posterior_raise_the_same_error(table):
    bad = {"gamma": 1.0}
    with pytest.raises(ParameterError) as from_map:
        bs.fit_map("chinchilla", table, delta=1e-3, fixed=bad)
    with pytest.raises(ParameterError) as from_posterior:
        bs.fit_posterior("chinchilla", table, fixed=bad, progress_bar=False)
    assert str(from_map.value) == str(from_posterior.value)
    everything = dict(TRUE)
    with pytest.raises(ParameterError, match="every parameter of chinchilla is fixed") as a:
        bs.fit_map("chinchilla", table, delta=1e-3, fixed=everything)
    with pytest.raises(ParameterError) as b:
        bs.bayes.map_estimate("chinchilla", table, fixed=everything)
    assert str(a.value) == str(b.value)


def test_problem_and_spec_give_the_same_theta_for_the_same_u(table):
    fixed = {"alpha": 0.34}
    prob, vdf = Problem.build("chinchilla", table, fixed)
    spec = make_spec("chinchilla", fixed=fixed, coordinates=None)
    assert spec.law_names == prob.space.names == tuple(
        n for n in prob.law.param_names if n != "alpha")
    assert spec.names == (*prob.space.names, "sigma")
    u = jnp.asarray(np.random.default_rng(0).normal(0.0, 2.0, (7, 5)))
    th_fit = np.asarray(prob.space.theta(u[:, :4]))
    th_bayes = spec.theta(u)
    np.testing.assert_array_equal(th_fit, np.stack([np.asarray(th_bayes[n])
                                                    for n in spec.law_names], -1))
    np.testing.assert_array_equal(np.asarray(th_bayes["sigma"]),
                                  np.asarray(SCALE.from_unconstrained(u[:, 4])))
    # the same law parameters reach the law, fixed value included
    a, b = prob.space.full_params(th_fit), spec.space.full_params(th_bayes)
    assert set(a) == set(b) == set(prob.law.param_names)
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
    # with the same seed both sides start from the same points (the scale's column comes last)
    np.testing.assert_array_equal(prob.space.sample_inits(16, 5),
                                  spec.space.sample_inits(16, 5)[:, :4])


def test_both_sides_read_the_table_into_the_same_padded_arrays(table):
    prob, vdf = Problem.build("chinchilla", table)
    data = data_pytree(make_spec("chinchilla"), vdf)
    args = prob.args(1e-3)
    n = len(table)
    assert len(args["y"]) == row_bucket(n) == 64 and float(np.sum(args["w"])) == n
    np.testing.assert_array_equal(np.asarray(args["w"]), np.asarray(data["w"]))
    for k in ("N", "D"):
        np.testing.assert_array_equal(np.asarray(args["x"][k]), np.asarray(data["x"][k]))
    np.testing.assert_array_equal(np.log(np.asarray(args["y"])), np.asarray(data["y"]))
    np.testing.assert_array_equal(np.asarray(args["y"])[:n], table["loss"].to_numpy())
    # the padding rows copy the first row
    x, y, w = pad_rows({"N": jnp.arange(3.0)}, jnp.arange(3.0) + 10, to=5)
    np.testing.assert_array_equal(np.asarray(x["N"]), [0, 1, 2, 0, 0])
    np.testing.assert_array_equal(np.asarray(y), [10, 11, 12, 10, 10])
    np.testing.assert_array_equal(np.asarray(w), [1, 1, 1, 0, 0])


def test_fixed_values_are_data_of_one_compiled_structure():
    a = ParamSpace.of("chinchilla", {"alpha": 0.3})
    b = ParamSpace.of("chinchilla", {"alpha": 0.35})
    c = ParamSpace.of("chinchilla", {"beta": 0.3})
    assert a.structure == b.structure != c.structure
    assert float(a.fixed_tree()["alpha"]) == 0.3 and float(b.fixed_tree()["alpha"]) == 0.35


def test_the_fit_and_the_flat_posterior_mode_recover_the_same_law(table):
    """Both users of one space, with one parameter fixed at its true value, recover the others:
    the Huber fit and the flat-prior posterior mode at ``sigma = delta / c`` are one optimum."""
    delta = 1e-3
    fixed = {"alpha": TRUE["alpha"]}
    fit = bs.fit_map("chinchilla", table, delta=delta, n_starts=16, seed=0, fixed=fixed)
    params, _, _ = bs.bayes.map_estimate("chinchilla", table, priors="flat", fixed=fixed,
                                         scale=delta / bs.bayes.HUBER_C, n_starts=16, seed=0)
    assert fit.params["alpha"] == params["alpha"] == TRUE["alpha"]
    for k in ("E", "beta"):
        assert fit.params[k] == pytest.approx(TRUE[k], rel=0.03)
    for k in ("E", "A", "B", "beta"):
        assert params[k] == pytest.approx(fit.params[k], rel=1e-4)


def test_an_interval_parameter_near_its_bound_is_a_smooth_function_of_u():
    """A bounded parameter whose posterior sits near a bound (ScaleBench data_constrained sl_6:
    C in (0, 1e4) at about 1e-10) must move smoothly with ``u``. Computed as
    ``(tanh(u / 2) + 1) / 2``, the sigmoid had an absolute error of 1e-16 and so a relative
    error of 0.25% at u = -31.8 (and was 0 below u = -38): the log density jumped by 0.005-0.07
    under steps of 1e-7 and NUTS' step size fell to 1e-14."""
    import mpmath

    p = bs.laws.Param("C", 0.0, 1e4, (1.0, 10.0))
    near_upper = bs.laws.Param("d", -1.0, 1.0, (-0.5, 0.5))
    for u in (-31.78, -40.0, -300.0, -700.0, 0.3, 25.0):
        exact = 1e4 / (1 + mpmath.exp(-mpmath.mpf(u)))
        assert float(p.from_unconstrained(u)) == pytest.approx(float(exact), rel=1e-13)
        # near an upper bound, the value is as close to exact as a float next to 1 can be
        gap = 2 / (1 + mpmath.exp(-mpmath.mpf(u)))
        assert abs(1.0 - float(near_upper.from_unconstrained(-u)) - float(gap)) <= 4e-16
    # log C is u + log(1e4) down there: differences of tiny steps are the steps
    u = -31.78 + np.arange(50) * 1e-7
    logc = np.log(np.asarray(p.from_unconstrained(jnp.asarray(u))))
    np.testing.assert_allclose(np.diff(logc), 1e-7, rtol=1e-4)
    # in the middle of wide bounds a value keeps its own precision, not the bounds' (measured
    # from -1e13, 115 moved in steps of 0.002: ScaleBench data_constrained sl_7's C)
    wide = bs.laws.Param("C", -1e13, 1e13, (-1.0, 1.0))
    for c in (114.662, -3.0, 1e-5, 5e12, -9.999e12):
        assert float(wide.from_unconstrained(wide.to_unconstrained(jnp.asarray(c)))) == \
            pytest.approx(c, rel=1e-14)
    u = 2.29324e-11 * (1 + np.arange(20) * 1e-7)
    np.testing.assert_allclose(np.diff(np.asarray(wide.from_unconstrained(jnp.asarray(u)))),
                               5e12 * np.diff(u), rtol=1e-6)
    # and the round trip holds from far below (far above, 1e4 - C is a few ulps of 1e4 and u
    # keeps only the digits those carry)
    u = np.array([-700.0, -300.0, -40.0, -31.78, -5.0, 0.0, 5.0])
    np.testing.assert_allclose(np.asarray(p.to_unconstrained(p.from_unconstrained(jnp.asarray(u)))),
                               u, rtol=1e-9)
