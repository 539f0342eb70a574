"""Laws own their sampling geometry: a law declares its coordinate blocks, linear coefficients and
prior references in its spec, and the Bayesian layer samples a law it has never seen in the
coordinates that law declares."""
import ast
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling import bayes as B
from bayes_scaling.laws import Coordinates, Law, Param

TRUE = dict(E=1.5, A=30.0, alpha=0.4)


def _fn(p, x):
    return p["E"] + p["A"] * jnp.exp(-p["alpha"] * jnp.log(x["N"]))


def _mid_coordinates() -> Coordinates:
    """The size term at the table's mean log N replaces A (written here, not in the package)."""

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x["N"]))}

    def to_params(c, r):
        return {"A": jnp.exp(c["log_term_at_mid"] + c["alpha"] * r["L0"]), "alpha": c["alpha"]}

    def from_params(p, r):
        return {"log_term_at_mid": jnp.log(p["A"]) - p["alpha"] * r["L0"], "alpha": p["alpha"]}

    return Coordinates("mid", ("A", "alpha"),
                       (Param("log_term_at_mid", init=(-3.0, 1.0)), "alpha"),
                       to_params, from_params, ref)


LAW = Law(  # not registered: the package never hears of it
    name="size_only_test_law",
    params=(Param("E", 0.0, np.inf, (0.5, 3.0)), Param("A", 0.0, np.inf, (1.0, 1e3), True),
            Param("alpha", 0.0, np.inf, (0.1, 1.0))),
    variables=("N",),
    fn=_fn,
    coordinates=(_mid_coordinates(),),
)


@pytest.fixture(scope="module")
def table():
    N = np.geomspace(1e3, 1e6, 40)
    rng = np.random.default_rng(0)
    loss = np.asarray(LAW(TRUE, {"N": jnp.asarray(N)})) * np.exp(0.003 * rng.standard_normal(40))
    return pd.DataFrame({"N": N, "loss": loss})


def test_a_law_declared_in_a_test_is_sampled_in_its_own_coordinates(table):
    spec = B.make_spec(LAW)
    assert [b.name for b in spec.blocks] == ["mid"]
    assert [p.name for p in spec.sampled] == ["log_term_at_mid", "alpha", "E", "sigma"]
    # the change of variables is exact: log p_s(s) = log p_u(u(s)) + log |du/ds|
    data = B.data_pytree(spec, table)
    ref = data["ref"]
    s0 = np.asarray(spec.s({**TRUE, "sigma": 0.01}, ref))
    to_u = lambda s: spec.u(spec.theta_s(s, ref))  # noqa: E731
    s = jnp.asarray(s0 + 0.1 * np.random.default_rng(1).standard_normal(len(s0)))
    jac = jnp.linalg.slogdet(jax.jacfwd(to_u)(s))[1]
    assert float(spec.log_joint_s(s, data)) == pytest.approx(
        float(spec.log_joint(to_u(s), data) + jac), rel=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lap = bs.fit_posterior(LAW, table, method="laplace", n_starts=8, seed=0)
        nuts = bs.fit_posterior(LAW, table, n_starts=8, seed=0, num_chains=1, num_warmup=150,
                                num_samples=150, progress_bar=False)
    for post in (lap, nuts):
        assert post.settings["coordinates"] == ["mid"]
        assert [p.name for p in post.spec.sampled][0] == "log_term_at_mid"
        for k, v in TRUE.items():  # the parameters are recovered
            lo, hi = np.quantile(post.draws(k), [0.005, 0.995])
            assert lo < v < hi, (post.method, k, lo, v, hi)
    assert lap.diagnostics["pareto_k"] < 0.7


def test_a_saved_posterior_records_its_law(tmp_path, table):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bs.fit_posterior(LAW, table, method="laplace", n_starts=4, seed=0, num_chains=1,
                                num_samples=200)
    path = tmp_path / "post.nc"
    post.save(path)
    with pytest.raises(bs.LawError, match="not registered .* law=my_law"):
        bs.load_posterior(path)
    back = bs.load_posterior(path, law=LAW)
    np.testing.assert_allclose(back.draws("alpha"), post.draws("alpha"))
    other = Law(name=LAW.name, params=LAW.params, variables=("N",), fn=_fn,
                column_map={"N": "M"})  # same formula read from another column
    with pytest.raises(bs.LawError, match="differs"):
        bs.load_posterior(path, law=other)


def test_a_law_declares_linear_terms_and_prior_references():
    law = Law(name="with_level_test_law", params=LAW.params, variables=("N",), fn=_fn,
              linear=("E", "A"), prior_references=(("A", "alpha", 1e4),))
    spec = B.make_spec(law)
    assert [b.name for b in spec.blocks] == ["level"] and set(spec.blocks[0].params) == {"E", "A"}
    prior = B.default_priors(law)["A"]
    assert isinstance(prior, B.AtReference) and prior.exponent == "alpha"
    assert prior.log_ref == pytest.approx(np.log(1e4))
    # a fixed linear coefficient leaves the level block to the free one
    assert B.make_spec(law, fixed={"E": 1.5}).blocks[0].params == ("A",)
    with pytest.raises(ValueError, match="not parameters"):
        Law(name="bad", params=LAW.params, variables=("N",), fn=_fn, linear=("F",))


def test_the_bayes_package_imports_no_law_module():
    root = Path(bs.bayes.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and "laws" in node.module:
                assert node.module == "laws" and node.level == 2, (path.name, node.module)
                assert {a.name for a in node.names} <= {"Coordinates", "Law", "Param", "get"}, (
                    path.name, [a.name for a in node.names])


def test_the_level_block_is_known_by_what_it_is_not_by_its_name():
    """A law may call a block of its own "level ..."; only the package's level block (as declared,
    and after a model resolved it, once or twice) is taken for it, e.g. by the level pivot."""
    from bayes_scaling.bayes.coordinates import is_level_block, level_coordinates

    own = _mid_coordinates()
    own = Coordinates("level of the size term", own.params, own.coords, own.to_params,
                      own.from_params, own.reference)
    assert not is_level_block(own)
    law = Law(name="level_named_block_test_law", params=LAW.params, variables=("N",), fn=_fn,
              coordinates=(own,), linear=("E",))
    spec = B.make_spec(law)
    level = [b for b in spec.blocks if b.params == ("E",)]
    assert len(level) == 1 and is_level_block(level[0]) and level[0] is not level_coordinates(("E",))
    again = B.make_spec(law, coordinates=spec.blocks)  # blocks a model resolved, resolved again
    assert [is_level_block(b) for b in again.blocks] == [b.params == ("E",) for b in again.blocks]
    assert not any(is_level_block(b) for b in spec.blocks if b.params != ("E",))
