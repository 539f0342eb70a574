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
                     seed=0) -> pd.DataFrame:
    """``bayes-scaling forecast post.nc new.csv --interval 0.9``: the rows of ``new.csv`` with
    ``mean, median, lower, upper, sd`` appended, printed as CSV (or written to ``out``)."""
    post = load_posterior(nc)
    new = pd.read_csv(csv)
    fc = post.forecast(new, interval=interval, kind=kind, seed=seed)
    table = pd.concat([new.reset_index(drop=True), fc.reset_index(drop=True)], axis=1)
    if out is not None:
        table.to_csv(out, index=False)
    elif not quiet:
        print(table.to_csv(index=False), end="")
    return table
