"""The one-sidedness diagnostic of analyses/forecast_honesty.py: per unit, the share of held-out
rows above the predictive median, which tells systematic errors from a too-narrow interval."""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "analyses"))
import forecast_honesty as fh


def test_one_sided_tells_a_shared_error_from_a_too_narrow_interval():
    rng = np.random.default_rng(0)
    n = 400
    # unit "shifted": every row off the same way by one predictive sd; unit "narrow": errors of
    # sd 2 against a unit-sd predictive, symmetric
    y_shift = 1.0 + 0.2 * rng.standard_normal(n)
    y_wide = 2.0 * rng.standard_normal(n)
    draws = rng.standard_normal((4000, 1))

    def pit(y):
        return np.mean(draws < y[None, :], 0)

    rows = pd.concat([
        pd.DataFrame({"dataset": "a", "split": "s", "law": "shifted", "variant": "before",
                      "pit": pit(y_shift)}),
        pd.DataFrame({"dataset": "a", "split": "s", "law": "narrow", "variant": "before",
                      "pit": pit(y_wide)})], ignore_index=True)
    side = fh.one_sided(rows).set_index("law")
    assert side.loc["shifted", "above"] > 0.95 and side.loc["shifted", "rows"] == n
    assert abs(side.loc["narrow", "above"] - 0.5) < 0.08
    # both miss the 50% interval on most rows: |PIT - 1/2| is large for both
    assert side.loc["shifted", "dev"] > 0.25 and side.loc["narrow", "dev"] > 0.25
