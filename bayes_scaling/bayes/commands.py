"""Command-line entry points (wired by ``bayes_scaling.cli``)."""
from __future__ import annotations

import pandas as pd

from .api import fit_posterior
from .posterior import Posterior, load_posterior


def posterior_command(law, csv, out, *, quiet=False, **opts) -> Posterior:
    """``bayes-scaling posterior --law NAME table.csv --out post.nc``: fit, save, print a summary.

    ``csv`` is a path or a DataFrame.

    ``opts`` are :func:`fit_posterior` arguments (``method``, ``likelihood``, ``num_samples``, ...);
    the progress bar is on unless ``progress_bar=False``. Returns the posterior.
    """
    df = csv if isinstance(csv, pd.DataFrame) else pd.read_csv(csv)
    post = fit_posterior(law, df, **opts)
    post.save(out)
    if not quiet:
        print(repr(post))
        print(post.summary().to_string())
        print(f"saved {out}")
    return post


def forecast_command(nc, csv, interval=0.9, *, kind="predictive", out=None, quiet=False,
                     seed=0, discrepancy=None, allow_unconverged=False) -> pd.DataFrame:
    """``bayes-scaling forecast post.nc new.csv --interval 0.9``: the rows of ``new.csv`` with
    ``mean, median, lower, upper, sd``, the extrapolation distance and flag, the discrepancy
    ``tau`` and the posterior's status appended (:meth:`Posterior.forecast`), printed as CSV (or
    written to ``out``), then a one-line summary (:func:`forecast_summary`)."""
    post = load_posterior(nc)
    new = pd.read_csv(csv)
    fc = post.forecast(new, interval=interval, kind=kind, seed=seed, discrepancy=discrepancy,
                       allow_unconverged=allow_unconverged)
    table = pd.concat([new.reset_index(drop=True), fc.reset_index(drop=True)], axis=1)
    if out is not None:
        table.to_csv(out, index=False)
    elif not quiet:
        print(table.to_csv(index=False), end="")
    if not quiet:
        print(forecast_summary(table))
    return table


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
