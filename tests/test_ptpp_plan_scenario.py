"""The PTPP planning scenario of analyses/ptpp_plan.py: the anchors it adds to a forecast, and the
first line of a plan made from a posterior that failed its checks."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import bayes_scaling as bs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analyses"))
import bible_common as bc  # noqa: E402
import ptpp_plan  # noqa: E402


def test_anchors_are_the_smallest_models_rows_at_the_planned_stage():
    df = bc.synthetic_table(seed=0)
    a = ptpp_plan.anchor_rows(df, 279.0)
    assert set(a["ptpp"]) == {279.0} and set(a["N"]) == {df["N"].min()} and (a["D"] > 0).all()
    # every (replay, D) point, in both domains
    for dom in ("target", "source"):
        d = a[a["domain"] == dom]
        assert len(d) == 3 * 7 and len(d.groupby(["replay", "D"])) == 21
    assert ptpp_plan.SCENARIOS[1:] == (("forecast", "15,31", False),
                                       ("forecast_anchors", "15,31", True))


def test_plan_summary_starts_by_flagging_a_posterior_that_failed_its_checks():
    """The Laplace posterior of Form 1 on the synthetic source rows of PTPP 15 and 31 fails its
    Pareto-k check (k about 0.78 > 0.7): a plan from it must say so first."""
    df = bc.synthetic_table(seed=0)
    rows = df[(df["domain"] == "source") & (df["D"] > 0) & np.isin(df["ptpp"], [15, 31])]
    with pytest.warns(bs.ConvergenceWarning):
        bad = bs.fit_posterior(bc.nonemb_law("ptpp_floor"), rows, method="laplace", seed=0,
                               progress_bar=False)
    assert not bad.ok
    line = ptpp_plan.checks_line({"source": bad})
    assert line.startswith("**Made from a posterior that failed its convergence checks")
    assert "source (`ptpp_floor`)" in line
    # the same posterior with its checks passed is not flagged
    bad.diagnostics = {**bad.diagnostics, "ok": True}
    assert ptpp_plan.checks_line({"source": bad}) == ""
