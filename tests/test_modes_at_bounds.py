"""A MAP on a parameter's bound must not decide, through the seed, whether a posterior exists.

An optimiser's endpoint in the unconstrained coordinates can sit so far out (u = 40) that the
parameter's value rounds onto its bound; the sampling coordinates of that value are infinite. On
ScaleBench's data_constrained sl_4 (its `s` at the upper bound 1e7), seed 0 had one start just
inside and converged while seeds 1 and 2 ended in "no finite mode" after 0.2 s.
"""
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes.modes import find_modes, map_stage
from bayes_scaling.bayes.spec import data_pytree, make_spec


def _table():
    law = bs.scalebench.get("parallel_scaling_law", "sl_4")  # a N^b + c S^-0.5 + d, bounded
    truth = {"a": 900.0, "b": -0.25, "c": 0.3, "d": 1.2}  # a beyond its upper bound 500
    grid = pd.DataFrame([{"num_params": n, "parallel_size": s}
                         for n in (5e8, 1e9, 2e9, 4e9) for s in (1, 2, 4, 8)])
    x = {"N": grid["num_params"].to_numpy(float), "S": grid["parallel_size"].to_numpy(float)}
    loss = np.asarray(law.fn(truth, x)) * np.exp(
        0.002 * np.random.default_rng(0).standard_normal(len(grid)))
    return law, grid.assign(loss=loss)


def test_starts_whose_value_rounds_onto_a_bound_still_find_the_mode():
    """The data put ``a`` beyond its upper bound (500): the MAP's endpoints sit at u ~ 40-90,
    where ``a`` rounds to exactly 500. From those starts the mode of the sampled density (inside
    the bound) is found, and it is the one found from the same starts moved just inside."""
    law, df = _table()
    spec = make_spec(law, coordinates="auto")
    data = data_pytree(spec, spec.space.validate(df))
    _, _, _, (u_ok, v_ok) = map_stage(spec, data, 8, 0, 1000)
    i = [p.name for p in spec.space.free].index("a")
    rounded = np.asarray(spec.space.theta(np.asarray(u_ok)))[:, i] == 500.0
    assert rounded.sum() >= 2  # the optimiser's own endpoints
    u = np.array(u_ok, float)[rounded]
    at_bound = find_modes(spec, data, u, v_ok[rounded])[0]
    u[:, i] = 25.0  # the same points to within 1e-11 of a's range, a inside its bound
    near = find_modes(spec, data, u, v_ok[rounded])[0]
    assert np.isfinite(at_bound.log_density)
    assert at_bound.log_density == pytest.approx(near.log_density, abs=1e-6)
    np.testing.assert_allclose(at_bound.s, near.s, atol=1e-4)
