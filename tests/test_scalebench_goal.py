"""Issue 30's goal cell by cell (``analyses/scalebench_peer.goal_cells``), on a scorers table whose
answers are known: which cells are open and whether ``bayes - mspe`` meets each cell's bar."""
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyses"))
from scalebench_peer import goal_cells  # noqa: E402

TASK = "farseer_scaling_law"


def _rows(method, budget, scores):
    """One row per (law, seed) with the same score under both scorers."""
    return [dict(task=TASK, law=law, method=method, seed=seed, budget=budget,
                 r2_benchmark=v, r2_compiled=v)
            for (law, seed), v in zip([("a", 0), ("a", 1), ("b", 0), ("b", 1)], scores)]


def test_open_and_closed_cells_and_their_bars():
    ours = pd.DataFrame(
        _rows("mspe", 0.05, [0.90] * 4) + _rows("bayes", 0.05, [0.93] * 4)  # open, +0.03: met
        + _rows("random", 0.05, [0.99, 0.5, 0.99, 0.5])                      # best 0.99 > 0.90
        + _rows("mspe", 0.10, [0.99] * 4) + _rows("bayes", 0.10, [0.985] * 4)  # closed: -0.005
        + _rows("mspe", 0.01, [0.50] * 4) + _rows("bayes", 0.01, [0.51, 0.49, 0.53, 0.51])
        + _rows("random", 0.01, [0.60] * 4))                                 # open, +0.01
    both = ours[ours.method == "bayes"].merge(ours[ours.method == "mspe"],
                                              on=["task", "law", "seed", "budget"],
                                              suffixes=("_b", "_m"))
    rows = [r for r in goal_cells(ours, both) if r.startswith("| farseer")]
    cells = {(r.split(" | ")[1], r.split(" | ")[2]): r for r in rows}
    assert len(cells) == 6  # 3 budgets x 2 scorers
    five, ten, one = cells["5%", "compiled"], cells["10%", "compiled"], cells["1%", "benchmark"]
    assert "| 0.90 | 0.99 | yes | +0.030" in five and five.endswith("met, needs >= +0.02 |")
    assert "| 0.99 | 0.99 | no | -0.005" in ten and ten.endswith("met, needs >= -0.01 |")
    # +0.010 ± 0.008: short of +0.02 by less than two standard errors
    assert "| yes | +0.010 ± 0.008" in one and "not met (within 2 se)" in one
