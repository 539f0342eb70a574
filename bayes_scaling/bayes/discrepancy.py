"""A fixed model-discrepancy scale chosen by one rehearsal split (opt-in; the default of every
forecast is the rehearsal and grid posterior of :mod:`~bayes_scaling.bayes.intervals`)."""
from __future__ import annotations

import warnings

import numpy as np

from ..errors import BayesScalingError
from .api import fit_posterior
from .posterior import extrapolation_distance


def estimate_discrepancy(law, df, heldout, *, axis=None, grid=None, **fit_kwargs) -> dict:
    """Scale ``tau`` of a model-discrepancy term that grows with extrapolation distance.

    The extrapolation is rehearsed inside ``df``: the posterior is fitted on the rows where
    ``heldout(df)`` is False and predicts the rows where it is True (e.g. the largest models of the
    *training* table). ``tau`` maximises the Gaussian likelihood of those rows' log residuals
    (observed minus posterior median) under variance ``var_post + var_noise + (tau d)^2``, with
    ``d`` their :func:`extrapolation_distance` (along ``axis``, default the law's variables) and
    the first two variances from the posterior predictive draws. Nothing outside ``df`` is used.
    Apply it with ``post.forecast(new, discrepancy=tau)`` or :func:`with_discrepancy`.

    Returns:
        dict with ``tau``, the inner split's sizes and its coverage before/after.
    """
    mask = np.asarray(heldout(df) if callable(heldout) else heldout, bool)
    if mask.all() or not mask.any():
        raise BayesScalingError("the inner hold-out must leave rows on both sides")
    inner, test = df[~mask], df[mask]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = fit_posterior(law, inner, **{"progress_bar": False, **fit_kwargs})
        y = np.log(post.predict_draws(test, "predictive", discrepancy=0.0,
                                      allow_unconverged=True))
    d = extrapolation_distance(post, test, axis)
    r = np.log(np.asarray(test["loss"], float)) - np.median(y, 0)
    v0 = y.var(0)
    grid = np.concatenate([[0.0], np.geomspace(1e-4, 2.0, 400)]) if grid is None else grid
    ll = [np.sum(-0.5 * np.log(v0 + (t * d) ** 2) - 0.5 * r**2 / (v0 + (t * d) ** 2)) for t in grid]
    tau = float(grid[int(np.argmax(ll))])
    post.settings["_discrepancy_axis"] = axis
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = post.coverage(test, (0.5, 0.9), discrepancy=0.0, allow_unconverged=True)
        after = post.coverage(test, (0.5, 0.9), discrepancy=tau, allow_unconverged=True)
    return {"tau": tau, "axis": axis, "n_inner_train": int((~mask).sum()),
            "n_inner_test": int(mask.sum()), "inner_distance_max": float(d.max()),
            "inner_coverage_before": before, "inner_coverage_after": after}


def with_discrepancy(post, tau, axis=None):
    """Make ``tau`` (and the extrapolation ``axis``) the default of ``post``'s forecasts."""
    post.settings["discrepancy"] = float(tau)
    post.settings["_discrepancy_axis"] = axis
    return post
