"""The one-line summary the ``forecast`` command prints under a forecast table."""
from __future__ import annotations

import pandas as pd


def forecast_summary(fc: pd.DataFrame) -> str:
    """One line on how far a forecast (:meth:`Posterior.forecast`) extrapolates and what its
    intervals include."""
    k, n = int(fc["extrapolated"].sum()), len(fc)
    if not k:
        line = (f"0 of {n} rows extrapolate: every row lies inside the fitted range (intervals "
                "from the fitted noise and parameter uncertainty)")
    else:
        line = (f"{k} of {n} rows extrapolate, up to d = {fc['extrapolation'].max():.2f}; "
                "intervals include a model-discrepancy term estimated by rehearsal on the "
                "training table")
        if fc["discrepancy_basis"].str.startswith("tau prior only").any():
            line += " (prior only where no rehearsal was possible: see discrepancy_basis)"
        elif (fc.loc[fc["extrapolated"], "discrepancy_tau"] == 0).all():
            line = line.replace("include a model-discrepancy term estimated by rehearsal on the "
                                "training table", "have no discrepancy term (turned off)")
    if (fc["posterior_status"] != "ok").any():
        line += "; posterior NOT CONVERGED"
    return line
