"""A refusal says when the table's design cannot tell the law's terms apart
(``bs.data.input_relations``): runs on one tokens-per-parameter line make the N and D terms of
Chinchilla's law one power law in N, and an input that takes one value pins nothing."""

import warnings

import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.data import input_relations
from bayes_scaling.errors import ConvergenceError


def _line(n=6, ratio=20.0, seed=0):
    N = np.geomspace(1e7, 1e9, n)
    D = ratio * N
    loss = (1.7 + 400 * N ** -0.34 + 410 * D ** -0.28) * np.exp(
        0.01 * np.random.default_rng(seed).standard_normal(n))
    return pd.DataFrame({"N": N, "D": D, "loss": loss})


def test_inputs_on_one_line_are_named_with_the_line():
    law = bs.laws.get("chinchilla")
    [msg] = input_relations(law, _line())
    assert msg.startswith("the inputs N, D move together (log D = 2.996 + 1 log N at every row)")
    assert "fixed=" in msg and "off that line" in msg


def test_an_input_of_one_value_is_named_and_a_spread_design_says_nothing():
    law = bs.laws.get("chinchilla")
    one = _line().assign(D=1e10)
    [msg] = input_relations(law, one)
    assert msg.startswith("D takes one value (1e+10) in the table")
    wiggle = np.geomspace(1.0, 3.0, 6) ** np.r_[1, -1, 1, -1, 1, -1]
    spread = _line().assign(D=lambda d: d["D"] * wiggle)
    assert input_relations(law, spread) == []


def test_three_inputs_one_a_combination_of_the_others():
    law = bs.laws.Law(name="rel_three", variables=("N", "D", "lr"),
                      params=(bs.laws.Param("E", 0.0, 5.0, (1.0, 2.0)),),
                      fn=lambda p, x: p["E"] + 0.0 * x["N"] * x["D"] * x["lr"])
    rng = np.random.default_rng(1)
    N, D = np.exp(rng.uniform(16, 20, 12)), np.exp(rng.uniform(20, 24, 12))
    df = pd.DataFrame({"N": N, "D": D, "lr": 0.01 * N ** -0.5 * D ** 0.25, "loss": 2.0})
    [msg] = input_relations(law, df)
    assert "one is a linear combination of the others" in msg
    assert input_relations(law, df.assign(lr=rng.uniform(1e-4, 1e-2, 12))) == []


def test_a_refusal_on_runs_along_one_line_gives_that_reason_first():
    # a short run that cannot pass its checks (400 draws against bulk ESS 400), no retries
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bs.fit_posterior("chinchilla", _line(), seed=0, num_warmup=100, num_samples=100,
                                retries=0, progress_bar=False)
    assert not post.ok
    assert post.diagnostics["advice"][0].startswith("the inputs N, D move together")
    with pytest.raises(ConvergenceError):
        post.forecast(pd.DataFrame({"N": [1e10], "D": [2e11]}))
