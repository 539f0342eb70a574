"""Where no rehearsal is possible, the discrepancy's prior is per decade beyond the fitted range.

A table with two values on an axis (two pre-training stages) cannot be cut along it, and the gap
between the two values, its fitted width, says nothing of how far a forecast reaches: PTPP 279
from PTPP 15 and 31 is 3.0 fitted widths but 0.95 decades away. ``FittedRange.decades`` measures
the distance unscaled, and a signature whose grid rests on the prior alone reads it
(``intervals.grid_distance``); a rehearsed one keeps the fitted widths it was rehearsed in.
"""
import math

import numpy as np
import pandas as pd

import bayes_scaling as bs
from bayes_scaling.bayes.extrapolation import FittedRange
from bayes_scaling.bayes.intervals import MU_SCALE, TAU_SCALE, grid_distance


def test_the_distance_in_decades_of_a_row_beyond_the_box_and_beyond_the_hull():
    fitted = pd.DataFrame({"N": [1e8, 1e8, 2e8, 2e8], "D": [1e9, 1e10, 1e9, 1e10]})
    fr = FittedRange(fitted, ["N", "D"])
    # one decade beyond N's largest value (3.32 fitted widths of N's factor-2 range) and two
    # decades below D's smallest
    q = pd.DataFrame({"N": [2e9, 2e8], "D": [1e10, 1e7]})
    np.testing.assert_allclose(fr.decades(q), [1.0, 2.0], rtol=1e-12)
    np.testing.assert_allclose(fr.locate(q)[0], [math.log(10) / math.log(2), 2.0], rtol=1e-12)
    # a diagonal table: a row inside the box but off the diagonal is beyond the hull; its
    # distance from the facet, in decades, is the perpendicular distance in log10 space
    diag = pd.DataFrame({"N": [1e7, 1e8, 1e9, 1e7], "D": [1e9, 1e10, 1e11, 1e10]})
    fr = FittedRange(diag, ["N", "D"])
    q = pd.DataFrame({"N": [1e9], "D": [1e10]})  # one decade below the diagonal D = 100 N
    assert fr.locate(q)[1][0].startswith("hull")
    np.testing.assert_allclose(fr.decades(q), [1 / math.sqrt(2)], rtol=1e-9)


def test_a_prior_only_grid_reads_decades_and_a_rehearsed_one_fitted_widths():
    widths, decades = np.array([3.0]), np.array([0.95])
    assert grid_distance({"n_rows": 0}, widths, decades)[0] == 0.95
    assert grid_distance({"n_rows": 12}, widths, decades)[0] == 3.0


def test_a_forecast_one_decade_beyond_two_stages_has_the_prior_spread_of_one_decade():
    """Chinchilla fitted at two model sizes (N = 1e8, 2e8; D over a decade and a half): no cut is
    possible along N+, so a forecast at N = 2e9 rests on the prior at one decade, where
    ``E[(mu + tau z)^2] = MU_SCALE^2 + TAU_SCALE^2`` whatever ``p``; at 3.32 fitted widths it would
    be 0.5 (3.32 + 3.32^2) times that."""
    rng = np.random.default_rng(0)
    N = np.repeat([1e8, 2e8], 12)
    D = np.tile(np.geomspace(2e9, 6e10, 12), 2)
    loss = (1.69 + 406.4 / N**0.34 + 410.7 / D**0.28) * np.exp(0.005 * rng.standard_normal(24))
    post = bs.fit_posterior("chinchilla", pd.DataFrame({"N": N, "D": D, "loss": loss}),
                            method="laplace", seed=0, progress_bar=False)
    q = pd.DataFrame({"N": [2e9], "D": [2e10]})
    factor, info = post.discrepancy_draws(q, 20000, seed=1)
    assert info["discrepancy_basis"].iloc[0].startswith("tau prior only, per decade")
    assert info["extrapolation"].iloc[0] > 3.3  # in fitted widths, as before
    second_moment = float(np.mean(np.log(factor[:, 0]) ** 2))
    expected = MU_SCALE**2 + TAU_SCALE**2
    assert 0.85 * expected < second_moment < 1.15 * expected


def test_a_column_with_zeros_is_measured_as_it_is_not_in_log_space():
    # Mixture proportions r1 in [0, 0.5] (0 on some runs) and a positive N: r1 is read as it is,
    # so r1 = 0.75 is half a fitted width beyond (in log space every 0 sat at log 1e-300, the
    # fitted width was 690 nats, and 0.75 was 0.0006 widths away: nothing to rehearse along).
    fitted = pd.DataFrame({"r1": [0.0, 0.25, 0.5, 0.0, 0.25, 0.5],
                           "N": [1e8, 1e8, 1e8, 1e9, 1e9, 1e9]})
    fr = FittedRange(fitted, ["r1", "N"])
    assert fr.log.tolist() == [False, True]
    q = pd.DataFrame({"r1": [0.75, 0.25, 0.25], "N": [1e8, 1e10, 5e8]})
    d, sigs = fr.locate(q)
    np.testing.assert_allclose(d, [0.5, 1.0, 0.0], atol=1e-12)
    assert sigs.tolist() == ["r1+", "N+", ""]
    # decades: one fitted width of r1 counts one; N keeps its decades
    np.testing.assert_allclose(fr.decades(q), [0.5, 1.0, 0.0], atol=1e-12)
    # a signed column (a user's log learning rate) likewise
    signed = FittedRange(pd.DataFrame({"lr": [-3.0, -2.0, -1.0]}), ["lr"])
    np.testing.assert_allclose(signed.locate(pd.DataFrame({"lr": [0.0, -4.0]}))[0], [0.5, 0.5])
