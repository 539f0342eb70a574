"""analyses/m3_figures.py: the empirical k* and M* of the M3 paper's App. D.6.1 and D.7.1 recover
known optima, with the paper's exclusion rules; and analyses/ptpp_plan.py's scenario asks for a
request the all-stage fit can reach."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analyses"))
import m3_figures as mf  # noqa: E402
import ptpp_plan  # noqa: E402


def test_quadratic_vertex_recovers_a_known_optimum_and_applies_the_papers_rules():
    f = np.log2([1, 2, 4, 8, 16])
    v, status, _ = mf.quadratic_vertex(f, 0.05 * (f - 2.3) ** 2 + 1.7, has_zero=True)
    assert status == "ok" and v == pytest.approx(2.3, abs=1e-9)
    # p0 <= 0: a maximum, excluded
    assert mf.quadratic_vertex(f, -(f - 2) ** 2, True)[:2][1] == "maximum"
    # vertex below k = 1 with k = 1 tried: clamped to k = 1
    assert mf.quadratic_vertex(f, (f + 1) ** 2, True)[:2] == (0.0, "clamped")
    # vertex below the grid without k = 1: excluded
    g = np.log2([4, 8, 16])
    v, status, _ = mf.quadratic_vertex(g, (g - 1) ** 2, False)
    assert np.isnan(v) and status == "below grid"
    assert mf.quadratic_vertex(g, (g - 7) ** 2, False)[1] == "beyond grid"
    assert mf.quadratic_vertex(g[:2], g[:2], False)[1] == "too few"


def _cell_rows(k_opt, m_opt):
    """Runs of one (pair, f_C, f_D) cell whose loss is quadratic in log2 k and f_M with a known
    minimum, plus a worse multi-lingual run at every point."""
    rows = []
    for k in (1, 2, 4, 8, 16):
        for fm in (-1, 0, 1, 2):
            loss = 2.0 + 0.03 * (np.log2(k) - np.log2(k_opt)) ** 2 + 0.02 * (fm - m_opt) ** 2
            for r, extra in ((1.0, 0.0), (0.5, 0.01)):
                rows.append({"pair": "xx", "f_C": -1, "f_D": -3, "D_T": 2.0 ** 17, "k": k,
                             "r": r, "n_stages": 1, "f_M": fm, "M": 2.0 ** (18 - fm),
                             "loss": loss + extra})
    return pd.DataFrame(rows)


def test_empirical_kstar_and_mstar_recover_the_minimum_of_a_known_surface():
    df = _cell_rows(k_opt=3.0, m_opt=0.6)
    ks = mf.empirical_kstar(df).set_index("approach")
    for ap in ("mono_1stage", "multi_1stage", "multi_2stage"):
        assert ks.loc[ap, "status"] == "ok"
        assert ks.loc[ap, "k* (quadratic)"] == pytest.approx(3.0, rel=1e-9)
        assert ks.loc[ap, "k (grid argmin)"] == 4.0
    ms = mf.empirical_mstar(df).iloc[0]
    assert ms["f_M* (quadratic)"] == pytest.approx(0.6, abs=1e-9)
    assert ms["M* (quadratic)"] == pytest.approx(2.0 ** (18 - 0.6), rel=1e-9)
    assert not ms["at search boundary"] and ms["f_M (grid argmin)"] == 1.0
    # an optimum outside the model range is clamped to it and flagged
    edge = mf.empirical_mstar(_cell_rows(3.0, 5.0)).iloc[0]
    assert edge["at search boundary"] and edge["f_M* (quadratic)"] == 2.0


def test_scenario_request_is_what_the_closest_plan_meets_plus_the_margin():
    tau, forget = ptpp_plan.reachable_request(
        {"target_loss": 1.49958, "max_forgetting": "+12.17972787%"}, 0.01, 1.0)
    assert tau == pytest.approx(1.510) and forget == "+13.18%"
    tau, forget = ptpp_plan.reachable_request({"target_loss": 2.0, "max_forgetting": 0.0312},
                                              0.005, 0.01)
    assert tau == pytest.approx(2.005) and forget == pytest.approx(0.042)
