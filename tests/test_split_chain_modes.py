"""Chains that split into groups can find modes the optimiser missed: Newton from each group's
best draw gives the modes, and the fit samples them again, each on its own
(``chains.modes_of_split_chains``). Checked on a law whose posterior is symmetric in the sign of
an exponent (two modes, a barrier at 0), given only one of them."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from bayes_scaling import bayes as B
from bayes_scaling.bayes.api import _inference_data, _nuts_check
from bayes_scaling.bayes.nuts import jittered_inits
from bayes_scaling.bayes.chains import (drop_light_groups, first_runs, modes_of_split_chains,
                                        one_basin)
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

    return spec, data, one, s_pos, s_neg, chains, df


def test_groups_in_another_basin_are_new_modes(setup):
    spec, data, one, s_pos, s_neg, chains, _ = setup
    draws = np.concatenate([chains(s_pos, 2), chains(s_neg, 2)])
    found = modes_of_split_chains(spec, data, one, [(draws, None)],
                                   [{"ok": False, "chain_groups": [[0, 1], [2, 3]]}])
    assert found is not None and len(found) == 2
    a = sorted(float(spec.theta_s(m.s, data["ref"])["a"]) for m in found)
    assert a[0] == pytest.approx(-a[1], rel=1e-4) and a[1] == pytest.approx(TRUE["a"], rel=0.1)


def test_nothing_new_when_the_groups_share_the_basin_or_the_chains_passed(setup):
    spec, data, one, s_pos, s_neg, chains, _ = setup
    same = np.concatenate([chains(s_pos, 2), chains(s_pos + 0.01, 2)])
    split = [{"ok": False, "chain_groups": [[0, 1], [2, 3]]}]
    assert modes_of_split_chains(spec, data, one, [(same, None)], split) is None
    both = np.concatenate([chains(s_pos, 2), chains(s_neg, 2)])
    passed = [{"ok": True, "chain_groups": [[0, 1, 2, 3]]}]
    assert modes_of_split_chains(spec, data, one, [(both, None)], passed) is None


def _laplace_chains(mode, k, n, rng):
    """``k`` chains of ``n`` independent draws from the mode's Laplace Gaussian."""
    z = rng.standard_normal((k, n, len(mode.s)))
    return np.asarray(mode.s)[None, None] + z @ np.asarray(mode.chol).T


def _stats(k, n, rng):
    """NUTS's sample stats for ``k`` chains of ``n`` draws without a divergence."""
    return {"diverging": np.zeros((k, n), bool), "energy": rng.standard_normal((k, n)),
            "num_steps": np.full((k, n), 7), "accept_prob": np.full((k, n), 0.9),
            "adapt_state.step_size": np.full((k, n), 0.3),
            "potential_energy": rng.standard_normal((k, n))}


def test_a_chain_stuck_where_there_is_no_mass_is_left_out(setup):
    spec, data, one, _, _, chains, df = setup
    rng = np.random.default_rng(1)
    vdf = spec.space.validate(df)
    stuck = np.asarray(spec.s({**TRUE, "E": TRUE["E"] + 0.3, "sigma": 0.05}, data["ref"]))
    draws = np.concatenate([_laplace_chains(one[0], 3, 500, rng), chains(stuck, 1)[:, :1]
                            .repeat(500, 1) + 1e-3 * rng.standard_normal((1, 500, len(stuck)))])

    def check(r):
        return _nuts_check(_inference_data(spec, data, vdf, *r, loglik=False), spec, 4, 10)

    run = (draws, _stats(4, 500, rng))
    first = check(run)
    assert not first["ok"] and first["chain_groups"] == [[0, 1, 2], [3]]
    runs, diags, notes = drop_light_groups(spec, data, [run], [first], check, rng)
    assert runs[0][0].shape[0] == 3 and runs[0][1]["energy"].shape[0] == 3
    np.testing.assert_array_equal(runs[0][0], draws[:3])
    assert diags[0]["ok"], diags[0]["failed"]
    assert len(notes) == 1 and "chain(s) 3 left out" in notes[0]


def test_groups_of_real_modes_are_kept(setup):
    spec, data, one, _, s_neg, _, _ = setup
    rng = np.random.default_rng(2)
    neg = B.modes.modes_from(spec, data, [s_neg])
    draws = np.concatenate([_laplace_chains(one[0], 2, 500, rng),
                            _laplace_chains(neg[0], 2, 500, rng)])
    run = (draws, _stats(4, 500, rng))
    split = {"ok": False, "chain_groups": [[0, 1], [2, 3]]}
    runs, diags, notes = drop_light_groups(spec, data, [run], [split], lambda r: 1 / 0, rng)
    assert runs[0] is run and diags[0] is split and notes == []


def test_a_mode_whose_chains_fell_into_another_basin_is_one_basin_with_it(setup):
    """``one_basin``: the chains of a point found on the way into a basin (3 sd from its mode)
    end in that mode's Gaussian; the mirror mode's chains stay in their own."""
    spec, data, one, _, s_neg, _, _ = setup
    rng = np.random.default_rng(3)
    neg = B.modes.modes_from(spec, data, [s_neg])[0]
    near = dataclasses.replace(one[0], s=one[0].s + 3 * np.asarray(one[0].chol)[:, 0])
    modes = [one[0], near, neg]
    runs = [(_laplace_chains(one[0], 4, 400, rng),), (_laplace_chains(one[0], 4, 400, rng),),
            (_laplace_chains(neg, 4, 400, rng),)]
    keep, notes = one_basin(modes, runs, labels=[0, 5, 7], when=" in its first run")
    assert keep == [0, 2]
    assert len(notes) == 1 and notes[0].startswith("mode 5 (of those found) is one basin")
    assert "in its first run" in notes[0]
    keep, notes = one_basin([one[0], neg], [runs[0], runs[2]])
    assert keep == [0, 1] and notes == []


def test_a_mode_one_basin_with_another_gets_no_retries_of_its_own(setup, monkeypatch):
    """fit_posterior leaves out a mode whose first chains fell into another's basin before the
    ladder, so none of its retries is run (before, each such mode climbed the ladder on its own:
    ScaleBench vocab sl_3 found three points of one curved ridge, and every one was retried)."""
    from bayes_scaling.bayes import api

    _, _, _, _, _, _, df = setup
    found = api.find_modes

    def with_a_point_on_the_way(spec, data, *args):
        modes = found(spec, data, *args)
        m = modes[0]
        return [*modes, dataclasses.replace(m, s=m.s + 3 * np.asarray(m.chol)[:, 0])]

    monkeypatch.setattr(api, "find_modes", with_a_point_on_the_way)
    post = B.fit_posterior(LAW, df, seed=0, progress_bar=False, allow_unconverged=True)
    extra = post.diagnostics["modes_found"] - 1  # the label of the point added
    notes = post.diagnostics["notes"]
    assert any(n.startswith(f"mode {extra} (of those found) is one basin") for n in notes), notes
    assert all(a["mode"] != extra for a in post.diagnostics["attempts"])
    assert post.ok, post.diagnostics["failed"]


def test_a_mode_an_earlier_chain_explores_is_not_run_on_its_own(setup):
    """``first_runs``: when one chain of a mode already run ended mostly in a later mode's basin,
    the later mode is not run (that chain explores it); a mode no chain reached is run."""
    spec, data, one, _, s_neg, _, _ = setup
    rng = np.random.default_rng(4)
    neg = B.modes.modes_from(spec, data, [s_neg])[0]
    near = dataclasses.replace(one[0], s=one[0].s + 4 * np.asarray(one[0].chol)[:, 0])
    modes, ran = [one[0], near, neg], []
    draws = {0: np.concatenate([_laplace_chains(one[0], 3, 400, rng),
                                _laplace_chains(near, 1, 400, rng)]),
             1: _laplace_chains(near, 4, 400, rng), 2: _laplace_chains(neg, 4, 400, rng)}

    def run(k):
        ran.append(k)
        return (draws[k], None), 1.0

    labels, first, notes = first_runs(modes, run, lambda k, s: s)
    assert ran == [0, 2] and labels == [0, 2]
    assert first[1][0][0] is draws[2]
    assert notes == [notes[0]] and notes[0].startswith(
        "mode 1 (of those found) is one basin with mode 0: ")
    assert notes[0].endswith("of one of mode 0's chains ended in its basin; not run on its own")


def test_starts_stay_near_the_mode_where_its_gaussian_misleads(setup):
    """``jittered_inits``: a jitter of half the Laplace sd is kept where the Gaussian describes
    the mode (the same starts as plain jitter); where it does not (its covariance 10^4 times too
    wide, as along a ridge's end), the jitter shrinks until the start is at most ``5 + d`` nats
    below the mode."""
    spec, data, one, _, _, _, _ = setup
    m = one[0]
    d = len(m.s)
    f = B.model.log_joint_batch(spec)
    lp_mode = float(np.asarray(f(np.asarray(m.s)[None], data))[0])
    eye, zero = np.eye(d), np.zeros(d)
    plain = jittered_inits(spec, data, [m], zero, eye, 4, np.random.default_rng(5))
    expect = m.s[None] + 0.5 * np.random.default_rng(5).standard_normal((4, d)) @ np.asarray(
        m.chol).T
    np.testing.assert_allclose(plain, expect, rtol=1e-12)
    wide = dataclasses.replace(m, chol=100 * np.asarray(m.chol), cov=1e4 * np.asarray(m.cov))
    z = jittered_inits(spec, data, [wide], zero, eye, 4, np.random.default_rng(5))
    lp = np.asarray(f(z, data))
    assert np.all(lp >= lp_mode - 5 - d), lp - lp_mode
    assert np.all(np.abs(z - m.s).max(1) > 0)  # still jittered, not all at the mode
