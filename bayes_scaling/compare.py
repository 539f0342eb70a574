"""Model comparison by PSIS-LOO (Vehtari, Gelman & Gabry 2017) through ArviZ.

``compare({"form1": post1, "form3": post3})`` ranks posteriors fitted to the *same rows* by their
expected log pointwise predictive density (elpd_loo) of each row's log loss, with the standard
error of every difference. Pareto-k diagnostics are surfaced: a row with k > 0.7 makes that
model's LOO estimate unreliable, and the warning names the model and the rows.
"""
from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np
import pandas as pd

from .errors import BayesScalingError, ParetoKWarning

PARETO_K_WARN = 0.7




def loo(post, pointwise=True):
    """``az.loo`` of one posterior (its ``log_likelihood`` group, variable ``y``)."""
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return az.loo(_idata(post), pointwise=pointwise)


def compare(posteriors: Mapping[str, object], *, ic: str = "loo", scale: str = "log",
            warn: bool = True) -> pd.DataFrame:
    """Rank posteriors (or InferenceData) fitted to the same rows by PSIS-LOO.

    Args:
        posteriors: ``{name: Posterior or InferenceData}``; every one must have a
            ``log_likelihood`` group over the same rows.
        ic: ``"loo"`` (default) or ``"waic"``.
        scale: ArviZ's scale (``"log"``: higher elpd is better).
        warn: emit a :class:`ParetoKWarning` naming the models and rows with k > 0.7.

    Returns:
        ``az.compare``'s table (rank, elpd_loo, p_loo, elpd_diff, weight, se, dse, warning)
        with two added columns: ``max_pareto_k`` and ``n_bad_k`` (rows with k > 0.7).
    """
    import arviz as az

    if len(posteriors) < 2:
        raise BayesScalingError(f"compare needs at least two posteriors, got {len(posteriors)}")
    idatas = {k: _idata(v) for k, v in posteriors.items()}
    sizes = {k: int(np.asarray(v.log_likelihood["y"]).shape[-1]) for k, v in idatas.items()}
    if len(set(sizes.values())) != 1:
        raise BayesScalingError(f"posteriors were fitted to different numbers of rows: {sizes}; "
                                "LOO compares models on the same data only")
    hashes = {k: getattr(v, "data_hash", None) for k, v in posteriors.items()}
    if len({h for h in hashes.values() if h is not None}) > 1:
        warnings.warn(f"posteriors carry different data hashes {hashes}: make sure they were "
                      "fitted to the same rows (their columns may differ legitimately)",
                      stacklevel=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = az.compare(idatas, ic=ic, scale=scale)
        pk = {}
        for k, v in idatas.items():
            if ic == "loo":
                pk[k] = np.asarray(az.loo(v, pointwise=True).pareto_k)
            else:
                pk[k] = np.zeros(sizes[k])
    table["max_pareto_k"] = [float(pk[k].max()) for k in table.index]
    table["n_bad_k"] = [int((pk[k] > PARETO_K_WARN).sum()) for k in table.index]
    if warn:
        bad = {k: np.flatnonzero(v > PARETO_K_WARN).tolist() for k, v in pk.items()
               if (v > PARETO_K_WARN).any()}
        if bad:
            lines = "; ".join(f"{k}: rows {r[:10]}{' ...' if len(r) > 10 else ''}"
                              for k, r in bad.items())
            warnings.warn(
                f"Pareto k > {PARETO_K_WARN} (PSIS-LOO unreliable for these rows, which are very "
                f"influential: outliers or rows the model cannot fit) in {lines}. Check them, use "
                "a robust likelihood, or refit without each such row (exact LOO).",
                ParetoKWarning, stacklevel=2)
    return table


def _idata(p):
    idata = getattr(p, "idata", p)
    if not hasattr(idata, "log_likelihood"):
        raise BayesScalingError("a posterior without a log_likelihood group cannot be compared")
    return idata
