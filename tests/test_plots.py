"""Figures (bayes_scaling.plots): bands from common draws on a dense grid, in one style.

A posterior of Chinchilla is built from known draws and a known fitted table (no sampling), so
the grid beyond that table extrapolates and carries the model discrepancy (a fixed tau here:
the rehearsed default would need fits).
"""

import arviz as az
import matplotlib
import numpy as np
import pandas as pd
import pytest
from conftest import learning_rate_law

import bayes_scaling as bs
from bayes_scaling import plots

LAW = bs.laws.get("chinchilla")
TRUTH = {"E": 1.69, "A": 406.4, "alpha": 0.34, "B": 410.7, "beta": 0.28}
FITTED = pd.DataFrame({"N": np.repeat([1e8, 3e8, 1e9, 3e9], 3),
                       "D": np.repeat([1e8, 3e8, 1e9, 3e9], 3) * np.tile([5.0, 20.0, 80.0], 4)})


def known_posterior(likelihood="huber", S=400, seed=0):
    """Draws of Chinchilla's parameters around TRUTH and of sigma, 'fitted' on FITTED."""
    rng = np.random.default_rng(seed)
    draws = {k: v * np.exp(0.005 * rng.standard_normal((1, S))) for k, v in TRUTH.items()}
    draws["sigma"] = 0.01 * np.exp(0.1 * rng.standard_normal((1, S)))
    data = {"N": FITTED["N"].to_numpy(), "D": FITTED["D"].to_numpy(),
            "loss": np.asarray(LAW(TRUTH, FITTED))}
    settings = {"free": [*TRUTH, "sigma"], "fixed": {}, "likelihood": likelihood, "c": 1.345,
                "student_df": 4.0, "scale": 0.01, "method": "laplace"}
    return bs.Posterior(LAW, az.from_dict(posterior=draws, constant_data=data), map=dict(TRUTH),
                        diagnostics={"ok": True}, modes=pd.DataFrame(), settings=settings,
                        data_hash="")


def line(n=plots.GRID_POINTS, hi=1e11):
    """Chinchilla's 20 tokens per parameter, from inside the fitted table to far beyond it."""
    N = np.geomspace(1e8, hi, n)
    return pd.DataFrame({"N": N, "D": 20 * N, "C": 6 * N * 20 * N})


def roughness(edge, width):
    """Largest second difference of a band edge along the grid, relative to the band's width."""
    return float(np.max(np.abs(np.diff(edge, 2))) / np.median(width))


def with_discrepancy_grids(post, grid):
    """Known discrepancy posteriors for every signature the grid leaves the table along (as a
    rehearsal would cache them), each with its own (p, tau, mu) weights."""
    _, sigs = bs.bayes.intervals.extrapolation(FITTED, grid, ["N", "D"])
    cache = post.settings.setdefault("discrepancy_grid", {})
    for j, sig in enumerate(sorted(set(sigs) - {""})):
        cache[sig] = {"p": [0.5, 1.0, 1.0], "tau": [0.02, 0.05 + 0.01 * j, 0.1],
                      "mu": [0.0, -0.02, 0.03], "mu_sd": [0.01, 0.01, 0.02],
                      "w": [0.2, 0.5, 0.3], "n_rows": 9, "basis": f"known grid {j}"}
    assert len(cache) >= 2
    return post


@pytest.mark.parametrize("kind", ["predictive", "mean"])
@pytest.mark.parametrize("discrepancy", [0.05, "auto"])
def test_every_grid_point_has_the_draws_of_its_own_one_row_forecast(kind, discrepancy):
    """Common draws change the joint, not the marginal: column i is exactly the posterior's own
    draws at row i alone (same seed), noise and discrepancy included (a fixed tau, and the
    default discrepancy along several signatures)."""
    grid = line(40)
    post = with_discrepancy_grids(known_posterior(), grid)
    y = plots.common_draws(post, grid, kind, seed=3, discrepancy=discrepancy)
    d = bs.bayes.extrapolation_distance(post, grid)
    assert (d == 0).any() and (d > 0).any()  # the grid leaves the fitted table
    for i in range(len(grid)):
        own = post.predict_draws(grid.iloc[[i]], kind, seed=3, discrepancy=discrepancy)[:, 0]
        np.testing.assert_allclose(y[:, i], own, rtol=1e-12)


def test_fan_chart_edges_are_smooth_and_bands_nested(tmp_path):
    post, grid = known_posterior(), line()
    fig = plots.fan_chart(post, grid, "C", data=FITTED.assign(C=6 * FITTED.N * FITTED.D,
                                                            loss=LAW(TRUTH, FITTED)),
                          points=pd.DataFrame({"N": [7e10], "D": [1.4e12], "C": [5.88e23]}),
                          discrepancy=0.05, path=tmp_path / "fan.png")
    b = fig.bands
    assert len(b) == len(grid) >= 200 and (tmp_path / "fan.png").stat().st_size > 0
    for lo, hi in ((50, 80), (80, 90)):  # nested at every grid point
        assert np.all(b[f"lower_{hi}"] <= b[f"lower_{lo}"])
        assert np.all(b[f"upper_{lo}"] <= b[f"upper_{hi}"])
    assert np.all((b["lower_50"] <= b["median"]) & (b["median"] <= b["upper_50"]))
    width = b["upper_90"] - b["lower_90"]
    rel = width / b["median"]
    assert rel.iloc[-1] > 3 * rel.iloc[0]  # the discrepancy widens it beyond the table
    smooth = max(roughness(b[c], width) for c in ("lower_90", "upper_90", "lower_50", "upper_50"))
    # the same quantiles of independent draws per point (the posterior's predict_draws)
    y = post.predict_draws(grid, "predictive", discrepancy=0.05, max_draws=1000)
    lo, hi = np.quantile(y, [0.05, 0.95], axis=0)
    jagged = max(roughness(lo, hi - lo), roughness(hi, hi - lo))
    assert smooth < 0.02 < jagged
    assert smooth < jagged / 5
    # the target's interval is the band's at that point
    top = fig.points.iloc[0]
    fc = post.forecast(pd.DataFrame({"N": [7e10], "D": [1.4e12]}), 0.9, discrepancy=0.05)
    assert top["lower_90"] == pytest.approx(fc["lower"].iloc[0], rel=1e-9)
    assert top["upper_90"] == pytest.approx(fc["upper"].iloc[0], rel=1e-9)


def test_fit_plot_uses_common_draws_and_the_package_style(tmp_path):
    post = known_posterior()
    table = FITTED.assign(loss=LAW(TRUTH, FITTED))
    before = dict(matplotlib.rcParams)
    fig = plots.fit_plot(post, table, kind="predictive", path=tmp_path / "fit.png")
    assert dict(matplotlib.rcParams) == before  # the style is a context, not a global change
    ax = fig.axes[0]
    assert not ax.spines["top"].get_visible() and ax.xaxis.get_gridlines()[0].get_visible()
    bands = [c for c in ax.collections if isinstance(c, matplotlib.collections.PolyCollection)]
    assert len(bands) == 3  # one curve per panel (N), drawn with its 50/80/90% bands
    upper = bands[0].get_paths()[0].vertices[:, 1]  # the 90% band's outline
    assert len(upper) > 2 * plots.GRID_POINTS


def test_a_draw_non_finite_on_the_grid_is_left_out_and_said():
    y = np.vstack([np.linspace(1, 2, 5), np.linspace(1.1, 2.1, 5), [1, 2, np.inf, 2, 2]])
    with pytest.warns(UserWarning, match="1 of 3 draws are non-finite"):
        b = plots.band_from_draws(y, (0.5,))
    np.testing.assert_allclose(b["median"], np.linspace(1.05, 2.05, 5))
    with pytest.raises(bs.BayesScalingError, match="every one of the 1 draws"):
        plots.band_from_draws(np.full((1, 3), np.nan))


def test_fan_chart_needs_its_x_column():
    with pytest.raises(bs.BayesScalingError, match="no column 'C'"):
        plots.fan_chart(known_posterior(), line().drop(columns="C"), "C")


def test_an_input_that_is_not_positive_is_drawn_on_a_linear_axis(tmp_path):
    # a log learning rate (negative) as x: a log axis drew nothing; N keeps its log axis
    law = learning_rate_law("plot_lr")
    table = pd.DataFrame([(n, g) for n in (1e7, 1e8, 1e9) for g in (-4.0, -3.5, -3.0, -2.5, -2.0)],
                         columns=["N", "loglr"])
    table["loss"] = np.asarray(law({"E": 1.8, "A": 400.0, "alpha": 0.34, "c": 0.1}, table))
    fit = bs.fit_map(law, table, delta=1e-3, seed=0)
    ax = plots.fit_plot(fit, table, x="loglr", panel="N", path=tmp_path / "lr.png").axes[0]
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] < -4.0
    assert plots.fit_plot(fit, table, x="N", panel="loglr").axes[0].get_xscale() == "log"
    assert plots.fit_plot(fit, table, x="loglr", panel="N", logx=False).axes[0].get_xscale() \
        == "linear"
