"""Chains that split into groups can find modes the optimiser missed: Newton from each group's
best draw gives the modes, and the fit samples them again, each on its own
(``api._modes_of_split_chains``). Checked on a law whose posterior is symmetric in the sign of
an exponent (two modes, a barrier at 0), given only one of them."""
import numpy as np
import pandas as pd
import pytest

from bayes_scaling import bayes as B
from bayes_scaling.bayes.api import _modes_of_split_chains
from bayes_scaling.laws import Law, Param
from conftest import simulate

TRUE = {"E": 1.8, "A": 20.0, "a": 0.5}


def _fn(p, x):  # a enters as a^2: a and -a fit equally well
    return p["E"] + p["A"] * x["N"] ** -(p["a"] ** 2)


LAW = Law(name="mirror_test_law",
          params=(Param("E", 0.0, 10.0, (0.5, 3.0)), Param("A", 0.0, np.inf, (1.0, 1e3), True),
                  Param("a", -2.0, 2.0, (-2.0, 2.0))),
          variables=("N",), fn=_fn)


@pytest.fixture(scope="module")
def setup():
    df = simulate(LAW, pd.DataFrame({"N": np.geomspace(1e6, 1e9, 20)}), TRUE, noise=0.005,
                  seed=2).drop(columns="clean")
    spec = B.make_spec(LAW)
    data = B.data_pytree(spec, df)
    ref = data["ref"]
    s_pos = np.asarray(spec.s({**TRUE, "sigma": 0.005}, ref))
    s_neg = np.asarray(spec.s({**TRUE, "a": -TRUE["a"], "sigma": 0.005}, ref))
    one = B.modes.modes_from(spec, data, [s_pos])
    assert len(one) == 1 and float(spec.theta_s(one[0].s, ref)["a"]) > 0
    rng = np.random.default_rng(0)

    def chains(s, k):
        return s[None, None] + 1e-3 * rng.standard_normal((k, 100, len(s)))

    return spec, data, one, s_pos, s_neg, chains


def test_groups_in_another_basin_are_new_modes(setup):
    spec, data, one, s_pos, s_neg, chains = setup
    draws = np.concatenate([chains(s_pos, 2), chains(s_neg, 2)])
    found = _modes_of_split_chains(spec, data, one, [(draws, None)],
                                   [{"ok": False, "chain_groups": [[0, 1], [2, 3]]}])
    assert found is not None and len(found) == 2
    a = sorted(float(spec.theta_s(m.s, data["ref"])["a"]) for m in found)
    assert a[0] == pytest.approx(-a[1], rel=1e-4) and a[1] == pytest.approx(TRUE["a"], rel=0.1)


def test_nothing_new_when_the_groups_share_the_basin_or_the_chains_passed(setup):
    spec, data, one, s_pos, s_neg, chains = setup
    same = np.concatenate([chains(s_pos, 2), chains(s_pos + 0.01, 2)])
    split = [{"ok": False, "chain_groups": [[0, 1], [2, 3]]}]
    assert _modes_of_split_chains(spec, data, one, [(same, None)], split) is None
    both = np.concatenate([chains(s_pos, 2), chains(s_neg, 2)])
    passed = [{"ok": True, "chain_groups": [[0, 1, 2, 3]]}]
    assert _modes_of_split_chains(spec, data, one, [(both, None)], passed) is None
