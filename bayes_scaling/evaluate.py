"""Held-out evaluation: the PTPP hold-out (with anchors, transfer baseline and oracle), the M3
paper's multi-split extrapolation protocol, and probabilistic metrics for posteriors.

A scaling law is worth what it predicts where it was not fitted. Two protocols make that
measurable for any registered law, point fit and posterior alike:

- :func:`ptpp_holdout` (Goffinet et al., *PTPP-Aware Adaptation Scaling Laws*, Sec. 2-3 and
  Appendices A-B): fit on the early pre-training stages (PTPP = 15, 31), predict every adaptation
  run of the unseen stage (PTPP = 279), score with the paper's six metrics
  (:func:`bayes_scaling.metrics.score`). Includes the PTPP-agnostic "D-CPT transfer" baseline and
  the D-CPT oracle fitted on the test stage itself; ``anchors`` moves some test-stage rows into the
  fit and out of the scoring (the paper's choice, every (replay, D) point of the smallest model,
  is the named option :data:`PAPER_ANCHORS`).
- :func:`axis_splits` (Akimoto et al., *M3 Scaling Law*, Appendix C.2): threshold splits per axis,
  at least 10 rows on each side, R^2 on the original scale (Eq. 19) per split, a split excluded for
  every law as soon as one law fails on it, then per-axis and unweighted averaging. The axes and
  thresholds are data (:class:`Split`); the paper's 18 splits are the preset :data:`M3_SPLITS`.

For posteriors (anything with ``predict_draws(df, kind="predictive" | "mean") -> (S, n)``), the
held-out scores add the probabilistic metrics of this module: coverage of central predictive
intervals (:func:`coverage`), the continuous ranked probability score from samples (:func:`crps`)
and the held-out log predictive density (:func:`log_predictive_density`). They are pure functions
of draws and observations.

Every protocol returns an :class:`Evaluation`: ``.table`` (one row per law, one column per metric;
``.long()`` gives the tidy law x metric x value form), ``.detail`` (per row or per split) and
``.to_markdown()``.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import metrics as _metrics
from .errors import BayesScalingError, DataError, FitError, SplitSkipped
from .laws import Law
from .laws import get as get_law

__all__ = [
    "M3_SPLITS",
    "PAPER_ANCHORS",
    "POINT_METRICS",
    "PROB_METRICS",
    "Evaluation",
    "Split",
    "aggregate_splits",
    "axis_splits",
    "coverage",
    "crps",
    "crps_gaussian",
    "crps_samples",
    "interval_width",
    "log_predictive_density",
    "posterior_loglik",
    "lpd_kde",
    "markdown_table",
    "probabilistic_scores",
    "ptpp_holdout",
    "split_masks",
]

#: The PTPP paper's anchor choice: every (replay, D) point of the smallest model at the test stage.
PAPER_ANCHORS = "smallest_model"

#: Column order of the point metrics (``bs.metrics.score``) in every table.
POINT_METRICS = ("huber_log", "rmse_log", "mae_rel", "mape_clip", "calib_intercept",
                 "calib_slope", "r2")
#: Column order of the probabilistic metrics (posteriors only).
PROB_METRICS = ("coverage50", "coverage90", "width90_rel", "crps", "lpd")

TRANSFER = "D-CPT (transfer)"
ORACLE = "D-CPT (oracle)"


# ==================================================================================================
# Result object and Markdown


@dataclass
class Evaluation:
    """The result of a held-out protocol.

    Attributes:
        protocol: ``"ptpp_holdout"`` or ``"axis_splits"``.
        table: one row per evaluated law (and fit kind), one column per metric (PTPP hold-out)
            or per axis plus ``Avg`` (axis splits).
        detail: per test row (PTPP hold-out: observation, prediction, interval, anchor flag) or
            per (group, split, law) (axis splits: sizes, R^2, status, exclusion).
        fits: the fitted objects, keyed like the table's ``label`` (and ``fit`` kind).
        settings: every setting of the run, plus the record of rows set aside (e.g. D = 0 rows).
        per_group: axis splits only: the per-group (e.g. per-language) axis averages.
    """

    protocol: str
    table: pd.DataFrame
    detail: pd.DataFrame
    fits: dict = field(default_factory=dict, repr=False)
    settings: dict = field(default_factory=dict)
    per_group: pd.DataFrame | None = None

    def long(self) -> pd.DataFrame:
        """The table in tidy form: one row per (law, fit, metric) with its ``value``."""
        ids = [c for c in ("label", "law", "fit", "role") if c in self.table.columns]
        value_cols = [c for c in self.table.columns if c not in ids
                      and pd.api.types.is_numeric_dtype(self.table[c])]
        return self.table.melt(id_vars=ids, value_vars=value_cols, var_name="metric",
                               value_name="value")

    def to_markdown(self, columns: Sequence[str] | None = None, digits: int = 3) -> str:
        """The table as a GitHub Markdown table (numbers in 3 significant digits by default)."""
        df = self.table if columns is None else self.table[list(columns)]
        return markdown_table(df, digits=digits)

    def __repr__(self):
        return f"Evaluation({self.protocol}: {len(self.table)} rows)\n{self.table.to_string()}"


def _fmt(v, digits=3) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if not math.isfinite(v):
            return "—" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if v == 0:
            return "0"
        if abs(v) < 1e-2 or abs(v) >= 1e5:
            return f"{v:.{digits - 1}e}"
        if abs(v) >= 10 ** digits:
            return f"{v:.0f}"
        return f"{v:#.{digits}g}".rstrip(".") if abs(v) >= 1 else f"{v:.{digits}f}"
    return str(v).replace("|", "\\|")


def markdown_table(df: pd.DataFrame, digits: int = 3, index: bool = False) -> str:
    """Render ``df`` as a GitHub Markdown table without extra dependencies.

    Floats below 1e-2 (or above 1e5) in magnitude are written in scientific notation with
    ``digits`` significant digits, others with ``digits`` decimals (below 1) or significant digits;
    NaN is written as an em dash.
    """
    if index:
        df = df.reset_index()
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v, digits) for v in row) + " |")
    return "\n".join(lines)


# ==================================================================================================
# Probabilistic metrics: pure functions of predictive draws (S, n) and observations (n,)


def _draws_obs(draws, y):
    draws = np.asarray(draws, dtype=float)
    y = np.asarray(y, dtype=float).ravel()
    if draws.ndim == 1:
        draws = draws[:, None]
    if draws.ndim != 2 or draws.shape[1] != y.size:
        raise DataError(f"draws must have shape (S, n) with n = {y.size} observations; "
                        f"got {draws.shape}")
    if draws.shape[0] < 2:
        raise DataError(f"need at least 2 draws per observation, got {draws.shape[0]}")
    if not (np.all(np.isfinite(draws)) and np.all(np.isfinite(y))):
        raise DataError("draws and observations must be finite; drop the non-finite draws first")
    return draws, y


def central_interval(draws, level=0.9):
    """(lower, upper) per column: the empirical ``(1-level)/2`` and ``(1+level)/2`` quantiles."""
    if not 0 < level < 1:
        raise BayesScalingError(f"interval level must be in (0, 1), got {level}")
    draws = np.asarray(draws, dtype=float)
    q = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return q[0], q[1]


def coverage(draws, y, level=0.9) -> float:
    """Fraction of observations inside the central ``level`` interval of their predictive draws.

    Args:
        draws: ``(S, n)`` posterior predictive draws (one column per observation).
        y: ``(n,)`` observations.
        level: nominal coverage of the central interval (0.5, 0.9, ...).

    Returns:
        The empirical coverage in [0, 1]; a calibrated forecast has coverage close to ``level``.
    """
    draws, y = _draws_obs(draws, y)
    lo, hi = central_interval(draws, level)
    return float(np.mean((y >= lo) & (y <= hi)))


def interval_width(draws, y=None, level=0.9, relative=True) -> float:
    """Mean width of the central ``level`` interval, divided by ``y`` when ``relative``."""
    draws = np.asarray(draws, dtype=float)
    lo, hi = central_interval(draws, level)
    w = hi - lo
    if relative:
        if y is None:
            raise BayesScalingError("a relative width needs the observations y")
        w = w / np.asarray(y, dtype=float).ravel()
    return float(np.mean(w))


def crps_samples(draws, y) -> np.ndarray:
    """CRPS of every observation from predictive samples (the energy form, on the loss scale).

    ``CRPS(F, y) = E|X - y| - E|X - X'| / 2`` with ``X, X' ~ F`` independent, estimated by the
    V-statistic over the ``S`` draws of each column (Gneiting & Raftery 2007, Eq. 21). The spread
    term uses the sorted draws, ``E|X - X'| = 2 / S^2 sum_i (2 i - S - 1) x_(i)``, so the cost is
    ``O(S log S)`` per column. A point forecast (all draws equal) gives ``|x - y|``: CRPS is in the
    units of the loss and generalises the absolute error.

    Returns:
        ``(n,)`` array of CRPS values (lower is better).
    """
    draws, y = _draws_obs(draws, y)
    s = draws.shape[0]
    x = np.sort(draws, axis=0)
    w = (2.0 * np.arange(1, s + 1) - s - 1.0)[:, None]
    spread = 2.0 * np.sum(w * x, axis=0) / s**2
    return np.mean(np.abs(draws - y[None, :]), axis=0) - 0.5 * spread


def crps(draws, y) -> float:
    """Mean CRPS over observations (see :func:`crps_samples`)."""
    return float(np.mean(crps_samples(draws, y)))


def crps_gaussian(mu, sigma, y) -> np.ndarray:
    """Closed-form CRPS of ``Normal(mu, sigma)`` at ``y`` (Gneiting & Raftery 2007, Eq. 5):
    ``sigma (z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi))``, ``z = (y - mu) / sigma``."""
    from scipy.stats import norm

    mu, sigma, y = (np.asarray(a, dtype=float) for a in (mu, sigma, y))
    z = (y - mu) / sigma
    return sigma * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / math.sqrt(math.pi))


def log_predictive_density(loglik) -> np.ndarray:
    """Held-out log pointwise predictive density from log-likelihood draws.

    ``lpd_i = log (1/S sum_s p(y_i | theta_s)) = logsumexp_s(loglik[s, i]) - log S``
    (Vehtari, Gelman & Gabry 2017, Eq. 3, on held-out rows instead of the fitted ones).

    Args:
        loglik: ``(S, n)`` log-likelihood of each held-out observation under each posterior draw.

    Returns:
        ``(n,)`` array; sum it for the total or average it per row (higher is better).
    """
    from scipy.special import logsumexp

    ll = np.asarray(loglik, dtype=float)
    if ll.ndim != 2:
        raise DataError(f"loglik must have shape (S, n), got {ll.shape}")
    return logsumexp(ll, axis=0) - math.log(ll.shape[0])


def lpd_kde(draws, y, log_scale=True) -> np.ndarray:
    """Log predictive density of ``y`` estimated from predictive samples by a Gaussian kernel.

    Used when the log-likelihood of new rows is not available. With ``log_scale`` (the default,
    matching the likelihood of ``bayes_scaling.bayes``, which is on ``log L``) the density is that
    of ``log y`` under the predictive draws of ``log L``; Silverman's bandwidth
    ``0.9 min(sd, IQR/1.34) S^(-1/5)`` per column.

    Returns:
        ``(n,)`` array of log densities.
    """
    from scipy.special import logsumexp

    draws, y = _draws_obs(draws, y)
    if log_scale:
        if np.any(draws <= 0) or np.any(y <= 0):
            raise DataError("log-scale densities need positive draws and observations")
        draws, y = np.log(draws), np.log(y)
    s = draws.shape[0]
    sd = draws.std(axis=0, ddof=1)
    iqr = np.subtract(*np.quantile(draws, [0.75, 0.25], axis=0)) / 1.34
    spread = np.where(iqr > 0, np.minimum(sd, iqr), sd)
    h = 0.9 * np.maximum(spread, 1e-12) * s ** (-0.2)
    z = (y[None, :] - draws) / h
    logk = -0.5 * z**2 - np.log(h) - 0.5 * math.log(2 * math.pi)
    return logsumexp(logk, axis=0) - math.log(s)


def probabilistic_scores(draws, y, *, loglik=None, levels=(0.5, 0.9)) -> dict[str, float]:
    """Every probabilistic metric at once.

    Args:
        draws: ``(S, n)`` posterior *predictive* draws of the loss (observation noise included).
        y: ``(n,)`` observed losses.
        loglik: optional ``(S, n)`` log-likelihood draws of ``log y``; when absent the log
            predictive density is estimated from ``draws`` by :func:`lpd_kde`.
        levels: interval levels to report coverage for.

    Returns:
        ``coverage50``, ``coverage90`` (one ``coverage<pct>`` per level), ``width90_rel`` (mean
        90% interval width / y), ``crps`` (mean, loss units), ``lpd`` (mean per row, on ``log L``)
        and ``lpd_source`` (``"loglik"`` or ``"kde"``).
    """
    draws, y = _draws_obs(draws, y)
    out = {f"coverage{round(100 * lv)}": coverage(draws, y, lv) for lv in levels}
    out["width90_rel"] = interval_width(draws, y, 0.9)
    out["crps"] = crps(draws, y)
    if loglik is not None:
        out["lpd"] = float(np.mean(log_predictive_density(loglik)))
        out["lpd_source"] = "loglik"
    else:
        out["lpd"] = float(np.mean(lpd_kde(draws, y)))
        out["lpd_source"] = "kde"
    return out


# ==================================================================================================
# Shared helpers


def _named_laws(laws) -> dict[str, Law]:
    """``{label: Law}`` from a name, a Law, a list of them, or a ``{label: law}`` mapping."""
    if isinstance(laws, (str, Law)):
        laws = [laws]
    if isinstance(laws, Mapping):
        out = {str(k): get_law(v) for k, v in laws.items()}
    else:
        out = {}
        for lw in laws:
            lw = get_law(lw)
            if lw.name in out:
                raise BayesScalingError(f"law {lw.name!r} listed twice; pass a dict of labels")
            out[lw.name] = lw
    if not out:
        raise BayesScalingError("no laws given; pass a law name, a list of names or {label: law}")
    return out


def _require(df, cols, what):
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{what} needs a pandas DataFrame loss table, got {type(df).__name__}")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(f"{what} needs column(s) {missing}; the table has {list(df.columns)}")


def _stage_mask(ptpp: np.ndarray, values) -> np.ndarray:
    values = np.atleast_1d(np.asarray(values, dtype=float))
    return np.any(np.isclose(ptpp[:, None], values[None, :], rtol=1e-9, atol=0), axis=1)


def posterior_loglik(post, df, mean_draws=None, keep=None) -> np.ndarray:
    """``(S, n)`` log-likelihood of each row's observed ``log loss`` under each posterior draw.

    Uses the posterior's own likelihood (``post.settings["likelihood"]``: Huber with threshold
    ``c``, Student-t with ``student_df`` degrees of freedom, or Normal) with each draw's scale
    ``sigma`` (or the fixed ``settings["scale"]``), centred on ``log f(theta_s, x)`` from
    ``post.predict_draws(df, kind="mean")``: the density the fit itself used, evaluated at rows it
    did not see. Feed it to :func:`log_predictive_density`. ``keep``: boolean mask over the
    posterior's draws that ``mean_draws`` was already reduced to.
    """
    from .bayes.likelihood import log_likelihood

    st = post.settings
    mean = np.asarray(post.predict_draws(df, kind="mean") if mean_draws is None else mean_draws,
                      dtype=float)
    draws = post.draws()
    sigma = np.asarray(draws["sigma"], float) if "sigma" in draws else \
        np.full(mean.shape[0], float(st["scale"]))
    if keep is not None and "sigma" in draws:
        sigma = sigma[np.asarray(keep, bool)]
    if sigma.shape[0] != mean.shape[0]:
        raise BayesScalingError(f"{sigma.shape[0]} scale draws for {mean.shape[0]} mean draws")
    r = np.log(df["loss"].to_numpy(dtype=float))[None, :] - np.log(mean)
    return np.asarray(log_likelihood(r, sigma[:, None], st["likelihood"], c=float(st["c"]),
                                     student_df=float(st["student_df"])), dtype=float)


def posterior_predictions(post, df, interval):
    """(point, lower, upper, predictive draws, loglik or None, number of draws dropped) of a
    posterior on ``df``; draws with a non-finite prediction on any row are dropped whole.

    The log-likelihood draws come from :func:`posterior_loglik` when the posterior exposes its
    draws and likelihood settings; otherwise ``None`` (the caller falls back to a kernel
    estimate from the predictive draws).
    """
    pred_draws = np.asarray(post.predict_draws(df, kind="predictive"), dtype=float)
    mean_draws = np.asarray(post.predict_draws(df, kind="mean"), dtype=float)
    ok = np.all(np.isfinite(pred_draws), 1) & np.all(np.isfinite(mean_draws), 1)
    n_bad = int((~ok).sum())
    if n_bad == len(ok):
        raise FitError(f"every posterior draw of {post.law.name} gives a non-finite prediction "
                       "on these rows")
    if n_bad:
        # a draw whose law overflows somewhere on these rows is removed as a whole (never per
        # row, which would bias the rows it fails on); the count goes into the results table
        warnings.warn(f"{n_bad} of {len(ok)} posterior draws of {post.law.name} give non-finite "
                      "predictions on these rows; they are left out of the intervals and scores "
                      "(column nonfinite_draws)", RuntimeWarning, stacklevel=3)
        pred_draws, mean_draws = pred_draws[ok], mean_draws[ok]
    point = np.median(mean_draws, axis=0)
    lo, hi = central_interval(pred_draws, interval)
    loglik = None
    if hasattr(post, "draws") and isinstance(getattr(post, "settings", None), Mapping) \
            and "likelihood" in post.settings:
        loglik = posterior_loglik(post, df, mean_draws, keep=ok)
    return point, lo, hi, pred_draws, loglik, n_bad


# ==================================================================================================
# The PTPP hold-out


def _anchor_mask(anchors, test: pd.DataFrame) -> np.ndarray:
    """Boolean mask over the rows of ``test`` selecting the anchors."""
    n = len(test)
    if anchors is None or (isinstance(anchors, str) and anchors == "none"):
        return np.zeros(n, bool)
    if isinstance(anchors, str):
        if anchors in (PAPER_ANCHORS, "paper"):
            return np.isclose(test["N"].to_numpy(dtype=float), test["N"].min(), rtol=1e-12)
        raise BayesScalingError(f"unknown anchors option {anchors!r}; use None, "
                                f"{PAPER_ANCHORS!r}, a boolean mask, row labels or a callable")
    if callable(anchors):
        m = np.asarray(anchors(test), dtype=bool)
        if m.shape != (n,):
            raise BayesScalingError(f"the anchors callable must return a boolean mask of the "
                                    f"{n} test-stage rows, got shape {m.shape}")
        return m
    arr = np.asarray(anchors)
    if arr.dtype == bool:
        if arr.shape == (n,):
            return arr
        raise BayesScalingError(f"a boolean anchors mask must cover the {n} test-stage rows, "
                                f"got {arr.shape}")
    labels = list(arr.ravel())
    bad = [lab for lab in labels if lab not in test.index]
    if bad:
        raise BayesScalingError(f"anchor rows {bad[:10]} are not rows of the test stage; anchors "
                                "must be test-stage rows (index labels of the input table)")
    return test.index.isin(labels)


def ptpp_holdout(
    laws,
    df: pd.DataFrame,
    *,
    domain: str | None,
    train_ptpp: Iterable[float] = (15, 31),
    test_ptpp: float = 279,
    anchors=None,
    delta: float = 0.02,
    n_starts: int = 32,
    seed: int = 0,
    bayes=False,
    baselines: Sequence[str] = ("transfer", "oracle"),
    interval: float = 0.9,
    fit_kwargs: Mapping | None = None,
) -> Evaluation:
    """Fit on the training PTPP stages, predict every adaptation run of the test stage, score.

    The protocol of Goffinet et al. (PTPP paper, Sec. 2 "Anchors", Sec. 3, Appendices A-B):

    1. Keep the rows of ``domain`` (e.g. ``"target"`` or ``"source"``; ``None`` when the table has
       a single domain) with ``D > 0`` (pre-adaptation rows at D = 0 are set aside, since every
       law diverges there; their count is recorded in ``settings["dropped_d0"]``).
    2. Fit rows: every row at a training PTPP, plus the anchors. Scored rows: every row at
       ``test_ptpp`` that is not an anchor.
    3. Each law in ``laws`` is fitted (``bs.fit_map`` with ``delta``, ``n_starts``, ``seed``) and
       scored on the scored rows with ``bs.metrics.score`` (Huber_log with the same ``delta``,
       RMSE_log, MAE_rel, MAPE_clip, calibration intercept and slope, R^2).
    4. Baselines (``baselines``):

       - ``"transfer"``: the PTPP-agnostic ``dcpt`` law fitted on the training stages only,
         applied unchanged at the test stage. It is never given the anchors (the paper's appendix
         reports the same D-CPT transfer row with and without anchors); it is scored on the same
         rows as the other laws.
       - ``"oracle"``: ``dcpt`` fitted on *every* test-stage row (anchors included) and scored on
         the scored rows: an in-sample upper bound (PTPP paper Appendix B).

    5. ``bayes``: ``True`` or a dict of keyword arguments for ``bs.fit_posterior`` (e.g.
       ``{"method": "laplace"}``). Each law (and the transfer baseline) is then also fitted as a
       posterior on the same rows; its point prediction is the posterior median of the mean curve,
       and the probabilistic metrics (:func:`probabilistic_scores`: 50%/90% coverage, relative
       90% width, CRPS, held-out log predictive density) are added on the scored rows.

    Args:
        laws: a law name, a list of names/Laws, or ``{label: law}`` (labels become table rows).
        df: loss table with ``loss, N, D, ptpp, replay`` (and ``domain`` when ``domain`` is given).
        domain: which validation domain to fit and score.
        train_ptpp: the PTPP stages fitted on.
        test_ptpp: the held-out stage.
        anchors: ``None`` (no anchors), :data:`PAPER_ANCHORS` (``"smallest_model"``, alias
            ``"paper"``: every (replay, D) point of the smallest N at the test stage), a boolean
            mask over the test-stage rows (in table order), a list of index labels of test-stage
            rows, or a callable ``test_rows -> mask``.
        delta: Huber threshold of the fits and of the Huber_log metric (the paper: 0.02).
        n_starts, seed: multi-start settings of every MAP fit.
        bayes: also fit posteriors (see 5.).
        baselines: any of ``"transfer"``, ``"oracle"``.
        interval: level of the ``lower``/``upper`` band written to ``detail`` for posteriors.
        fit_kwargs: extra keyword arguments for ``bs.fit_map`` (e.g. ``method``, ``max_iter``).

    Returns:
        :class:`Evaluation` with ``table`` columns ``label, law, fit, role, n_fit, n_scored,
        n_anchors`` + :data:`POINT_METRICS` (+ :data:`PROB_METRICS` for posteriors) and ``detail``
        with one row per (label, fit, test-stage row): the row's ``N, D, replay, ptpp, loss``,
        ``pred``, ``lower``/``upper`` (posteriors), ``anchor`` and ``scored``.

    Raises:
        DataError: missing columns, unknown domain, no rows at a training stage or at the test
            stage, or no scored rows left after removing the anchors.
    """
    from .fit import fit_map

    named = _named_laws(laws)
    need = ["loss", "N", "D", "ptpp", "replay"] + (["domain"] if domain is not None else [])
    _require(df, need, "ptpp_holdout")
    train_ptpp = tuple(float(p) for p in np.atleast_1d(train_ptpp))
    test_ptpp = float(test_ptpp)
    if any(np.isclose(test_ptpp, train_ptpp)):
        raise BayesScalingError(f"test_ptpp {test_ptpp:g} is also a training stage {train_ptpp}")
    bad_baselines = set(baselines) - {"transfer", "oracle"}
    if bad_baselines:
        raise BayesScalingError(f"unknown baselines {sorted(bad_baselines)}; use 'transfer', 'oracle'")

    rows = df
    if domain is not None:
        rows = df[df["domain"] == domain]
        if rows.empty:
            raise DataError(f"no rows with domain == {domain!r}; the table's domains are "
                            f"{sorted(map(str, df['domain'].unique()))}")
    d0 = rows["D"].to_numpy(dtype=float) <= 0
    rows = rows[~d0]
    ptpp = rows["ptpp"].to_numpy(dtype=float)
    stages = sorted(set(np.round(ptpp, 6).tolist()))
    is_train = _stage_mask(ptpp, train_ptpp)
    is_test = _stage_mask(ptpp, [test_ptpp])
    for p in train_ptpp:
        if not _stage_mask(ptpp, [p]).any():
            raise DataError(f"no adaptation rows (D > 0{', domain ' + repr(domain) if domain else ''}) "
                            f"at training PTPP {p:g}; stages present: {stages}")
    if not is_test.any():
        raise DataError(f"no adaptation rows (D > 0{', domain ' + repr(domain) if domain else ''}) "
                        f"at the test PTPP {test_ptpp:g}; stages present: {stages}. The test stage "
                        "must be measured before it can be scored")
    train = rows[is_train]
    test = rows[is_test]
    anchor = _anchor_mask(anchors, test)
    scored = test[~anchor]
    if scored.empty:
        raise DataError(f"all {len(test)} test-stage rows are anchors; nothing is left to score")
    fit_rows = pd.concat([train, test[anchor]])
    fkw = dict(fit_kwargs or {})

    jobs = [(label, law, "candidate", fit_rows) for label, law in named.items()]
    if "transfer" in baselines:
        jobs.append((TRANSFER, get_law("dcpt"), "transfer", train))
    if "oracle" in baselines:
        jobs.append((ORACLE, get_law("dcpt"), "oracle", test))

    table, detail, fits = [], [], {}
    base_cols = [c for c in ("N", "D", "replay", "ptpp", "loss") if c in test.columns]

    def record(label, law, kind, role, n_fit, pred_test, lo=None, hi=None, extra=None, status="ok"):
        pred_scored = pred_test[~anchor]
        row = {"label": label, "law": law.name, "fit": kind, "role": role, "n_fit": n_fit,
                   "n_scored": len(scored), "n_anchors": int(anchor.sum()), "status": status}
        try:
            row.update(_metrics.score(scored["loss"], pred_scored, delta=delta))
        except DataError as exc:  # non-positive or non-finite predictions
            row.update({m: np.nan for m in POINT_METRICS})
            row["status"] = f"invalid predictions: {exc}"
        row.pop("n", None)
        row.update(extra or {})
        table.append(row)
        d = test[base_cols].copy()
        d.insert(0, "row", test.index)
        d.insert(0, "fit", kind)
        d.insert(0, "label", label)
        d["pred"] = pred_test
        d["lower"] = np.nan if lo is None else lo
        d["upper"] = np.nan if hi is None else hi
        d["anchor"] = anchor
        d["scored"] = ~anchor
        detail.append(d)

    for label, law, role, rows_fit in jobs:
        try:
            fit = fit_map(law, rows_fit, delta=delta, n_starts=n_starts, seed=seed, **fkw)
        except (FitError, DataError) as exc:
            nan = np.full(len(test), np.nan)
            row = dict(label=label, law=law.name, fit="map", role=role, n_fit=len(rows_fit),
                       n_scored=len(scored), n_anchors=int(anchor.sum()),
                       status=f"fit failed: {exc}", **{m: np.nan for m in POINT_METRICS})
            table.append(row)
            d = test[base_cols].copy()
            d.insert(0, "row", test.index)
            d.insert(0, "fit", "map")
            d.insert(0, "label", label)
            d["pred"], d["lower"], d["upper"] = nan, nan, nan
            d["anchor"], d["scored"] = anchor, ~anchor
            detail.append(d)
            continue
        fits[(label, "map")] = fit
        record(label, law, "map", role, len(rows_fit), np.asarray(fit.predict(test), float))

    if bayes:
        from . import bayes as _bayes

        pkw = {} if bayes is True else dict(bayes)
        pkw.setdefault("seed", seed)
        for label, law, role, rows_fit in jobs:
            if role == "oracle":
                continue
            post = _bayes.fit_posterior(law, rows_fit, **pkw)
            fits[(label, "posterior")] = post
            point, lo, hi, draws, loglik, n_bad = posterior_predictions(post, test, interval)
            sc = ~anchor
            prob = probabilistic_scores(draws[:, sc], scored["loss"].to_numpy(float),
                                        loglik=None if loglik is None else loglik[:, sc])
            prob["nonfinite_draws"] = n_bad
            record(label, law, "posterior", role, len(rows_fit), point, lo, hi, extra=prob)

    table = pd.DataFrame(table)
    order = ["label", "law", "fit", "role", "n_fit", "n_scored", "n_anchors", *POINT_METRICS]
    order += [c for c in PROB_METRICS if c in table.columns]
    rest = [c for c in table.columns if c not in order]
    table = table[order + rest]
    settings = {"domain": domain, "train_ptpp": train_ptpp, "test_ptpp": test_ptpp,
                    "anchors": anchors if isinstance(anchors, (str, type(None))) else "custom",
                    "anchor_rows": test.index[anchor].tolist(), "delta": delta, "n_starts": n_starts,
                    "seed": seed, "baselines": tuple(baselines), "bayes": bool(bayes),
                    "dropped_d0": int(d0.sum()), "n_train": len(train), "n_test": len(test),
                    "stages_present": stages}
    return Evaluation("ptpp_holdout", table, pd.concat(detail, ignore_index=True), fits, settings)


# ==================================================================================================
# The M3 paper's multi-split protocol


C0 = 1e18                       #: M3 paper Eq. 14: reference compute budget (FLOPs)
DT0 = 5.8316 * C0 ** 0.4757     #: M3 paper Eq. 14: reference target corpus size (tokens)
M0 = C0 / DT0                   #: M3 paper Eq. 14: reference model scale (FLOPs per token)

#: Axis values derived from canonical columns when the table does not carry them (M3 Eq. 15).
DERIVED: dict[str, tuple[str, Callable]] = {
    "f_C": ("C", lambda v: np.log2(v / C0)),
    "f_M": ("M", lambda v: np.log2(M0 / v)),
    "f_D": ("D_T", lambda v: np.log2(v / DT0)),
    "log2_D": ("D", np.log2),
}

_OPS = {">=": np.greater_equal, "<=": np.less_equal, ">": np.greater, "<": np.less,
        "==": np.equal}


@dataclass(frozen=True)
class Split:
    """One held-out split: the rows whose ``column`` satisfies ``op threshold`` form the test set.

    Attributes:
        name: split name (e.g. ``"C_ge0"``).
        axis: the axis it belongs to (splits are averaged per axis first).
        column: a table column, or a derived axis of :data:`DERIVED` (``f_C``, ``f_M``, ``f_D``,
            ``log2_D``) computed from a canonical column when the table does not carry it.
        op: one of ``>=, <=, >, <, ==``.
        threshold: the threshold. Comparisons allow ``1e-6`` of slack so integer factors derived
            through logarithms compare as the integers they are.
    """

    name: str
    axis: str
    column: str
    op: str
    threshold: float

    def __post_init__(self):
        if self.op not in _OPS:
            raise BayesScalingError(f"split {self.name}: op must be one of {list(_OPS)}, "
                                    f"got {self.op!r}")

    def values(self, df: pd.DataFrame) -> np.ndarray:
        if self.column in df.columns:
            return df[self.column].to_numpy(dtype=float)
        if self.column in DERIVED:
            src, fn = DERIVED[self.column]
            if src in df.columns:
                return np.asarray(fn(df[src].to_numpy(dtype=float)), dtype=float)
            raise DataError(f"split {self.name} needs column {self.column!r} or {src!r} to derive "
                            f"it from; the table has {list(df.columns)}")
        raise DataError(f"split {self.name} needs column {self.column!r}; the table has "
                        f"{list(df.columns)}")

    def test_mask(self, df: pd.DataFrame) -> np.ndarray:
        v, t, tol = self.values(df), float(self.threshold), 1e-6
        if self.op == ">=":
            return v >= t - tol
        if self.op == "<=":
            return v <= t + tol
        if self.op == ">":
            return v > t + tol
        if self.op == "<":
            return v < t - tol
        return np.abs(v - t) <= tol


def _s(name, axis, column, op, threshold):
    return Split(name, axis, column, op, threshold)


#: The M3 paper's 18 splits for the combined evaluation (Appendix C.2.1, Table 7). Axes: C via
#: ``f_C = log2(C / C0)``, M via ``f_M = log2(M0 / M)`` (so ``M_le-1`` holds out the *larger*
#: models), D_T via ``f_D = log2(D_T / D_T0)``, total tokens D via ``log2 D``, ``r`` and ``k``.
M3_SPLITS: tuple[Split, ...] = (
    _s("C_ge0", "C", "f_C", ">=", 0), _s("C_ge-1", "C", "f_C", ">=", -1),
    _s("M_le-1", "M", "f_M", "<=", -1), _s("M_le0", "M", "f_M", "<=", 0),
    _s("M_le1", "M", "f_M", "<=", 1),
    _s("DT_ge0", "D_T", "f_D", ">=", 0), _s("DT_ge-1", "D_T", "f_D", ">=", -1),
    _s("DT_ge-2", "D_T", "f_D", ">=", -2),
    _s("D_ge34", "D", "log2_D", ">=", 34), _s("D_ge33", "D", "log2_D", ">=", 33),
    _s("D_ge32", "D", "log2_D", ">=", 32),
    _s("r_le0.125", "r", "r", "<=", 0.125), _s("r_le0.25", "r", "r", "<=", 0.25),
    _s("r_ge0.5", "r", "r", ">=", 0.5), _s("r_ge1", "r", "r", ">=", 1.0),
    _s("k_ge32", "k", "k", ">=", 32), _s("k_ge64", "k", "k", ">=", 64),
    _s("k_ge128", "k", "k", ">=", 128),
)

#: The 13 splits of the multi-lingual single-epoch evaluation (M3 paper Appendix C.2.2, Table 8).
M3_SPLITS_2STAGE: tuple[Split, ...] = tuple(
    s for s in M3_SPLITS if s.axis != "k" and s.name not in ("r_le0.25", "r_ge1"))

PRESETS = {"m3": M3_SPLITS, "m3_2stage": M3_SPLITS_2STAGE}


def _as_splits(splits) -> tuple[Split, ...]:
    if isinstance(splits, str):
        if splits not in PRESETS:
            raise BayesScalingError(f"unknown split preset {splits!r}; presets: {sorted(PRESETS)}")
        return PRESETS[splits]
    if isinstance(splits, pd.DataFrame):
        splits = splits.to_dict("records")
    out = []
    for s in splits:
        if isinstance(s, Split):
            out.append(s)
        elif isinstance(s, Mapping):
            try:
                out.append(Split(**s))
            except TypeError as exc:
                raise BayesScalingError(f"a split needs name, axis, column, op, threshold: {exc}") \
                    from None
        else:
            raise BayesScalingError(f"splits must be Split objects or dicts, got {type(s).__name__}")
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise BayesScalingError(f"split names must be unique, got {names}")
    if not out:
        raise BayesScalingError("no splits given")
    return tuple(out)


def split_masks(df: pd.DataFrame, splits) -> pd.DataFrame:
    """Boolean test-set membership of every row (rows) for every split (columns)."""
    return pd.DataFrame({s.name: s.test_mask(df) for s in _as_splits(splits)}, index=df.index)


def aggregate_splits(detail: pd.DataFrame, axes: Sequence[str] | None = None):
    """Exclusion rule and averaging of the M3 paper (Appendix C.2.3), on per-split R^2 values.

    Args:
        detail: one row per (``group``, ``split``, ``law``) with ``axis``, ``r2`` and ``status``
            (``"ok"``, ``"skipped"`` when a side has too few rows or the fitter raised
            :class:`~bayes_scaling.errors.SplitSkipped`, ``"failed"`` when the fit failed or gave
            an invalid R^2). ``group`` is e.g. the language; use one value for none.
        axes: axis order of the output (default: order of first appearance).

    Rules:
        1. A (group, split) is *excluded for every law* when any law's status there is not ``ok``.
        2. Per group, law and axis: the mean R^2 over the non-excluded splits of that axis
           (undefined when none remain).
        3. Per law and axis: the unweighted mean of the defined per-group values.
        4. ``Avg``: the unweighted mean of the defined per-axis values.

    Returns:
        (table, per_group, detail): ``table`` indexed by law with one column per axis plus
        ``Avg``; ``per_group`` the same per group; ``detail`` with an ``excluded`` column added.
    """
    d = detail.copy()
    if "group" not in d:
        d["group"] = "all"
    ok = (d["status"] == "ok") & np.isfinite(d["r2"].astype(float))
    bad = (~ok).groupby([d["group"], d["split"]]).transform("any")
    d["excluded"] = bad.to_numpy()
    axes = list(dict.fromkeys(d["axis"])) if axes is None else list(axes)
    laws = list(dict.fromkeys(d["law"]))
    groups = list(dict.fromkeys(d["group"]))
    kept = d[~d["excluded"]]
    per_group = (kept.groupby(["group", "law", "axis"])["r2"].mean().unstack("axis")
                 .reindex(columns=axes))
    per_group = per_group.reindex(pd.MultiIndex.from_product([groups, laws],
                                                             names=["group", "law"]))
    table = per_group.groupby(level="law", sort=False).mean()  # pandas mean skips NaN
    table = table.reindex(laws)
    table["Avg"] = table[axes].mean(axis=1)
    per_group["Avg"] = per_group[axes].mean(axis=1)
    return table, per_group, d


def axis_splits(
    laws,
    df: pd.DataFrame,
    splits="m3",
    *,
    delta: float = 1e-3,
    n_starts: int = 32,
    seed: int = 0,
    min_rows: int = 10,
    group: str | None = None,
    fitter: Callable | None = None,
    fit_kwargs: Mapping | None = None,
    pool: pd.DataFrame | None = None,
    scored: Mapping[str, Callable] | None = None,
):
    """The M3 paper's multi-split extrapolation protocol (Appendix C.2), on any loss table.

    For every split (and every value of ``group``, e.g. each language): the rows satisfying the
    split's test condition form the test set, the rest the training set. A split with fewer than
    ``min_rows`` rows on either side is skipped. Each law is fitted on the training set and scored
    by R^2 on the original loss scale (M3 Eq. 19, ``bs.metrics.r2``); a fit that raises, or an
    R^2 that is not finite (e.g. non-positive predictions), is a failure. Aggregation follows
    :func:`aggregate_splits`: a split is excluded for every law when any law fails or it is
    skipped; per-axis means over the remaining splits, then the unweighted mean over groups, then
    ``Avg`` over axes.

    Args:
        laws: a law name, a list of names/Laws or ``{label: law}``.
        df: the loss table (validated by each fit).
        splits: :class:`Split` objects, dicts with the same fields, a DataFrame of them, or a
            preset name: ``"m3"`` (the 18 splits of Table 7, :data:`M3_SPLITS`) or
            ``"m3_2stage"`` (the 13 of Table 8).
        delta: Huber threshold of the default fitter (the M3 paper: 1e-3).
        n_starts, seed: multi-start settings of the default fitter.
        min_rows: minimum rows on each side (the paper: 10).
        group: optional column whose values are evaluated separately and averaged unweighted
            (the paper's languages).
        fitter: ``fitter(law, train_df) -> object with .predict(df)``; default
            ``bs.fit_map(law, train_df, delta=delta, n_starts=n_starts, seed=seed)``. Pass e.g.
            ``lambda law, d: bs.fit_two_phase(law, d, phase1=..., delta=1e-3)[0]`` for the paper's
            two-phase fits. A fitter that raises :class:`~bayes_scaling.errors.SplitSkipped`
            (the protocol rules the fit out, e.g. no phase-1 rows on the training side) marks the
            split skipped; the laws after it are not fitted there (the split is excluded for all).
        fit_kwargs: extra keyword arguments for the default fitter.
        pool: extra rows outside ``df`` the fitter may draw on (the M3 paper's setting (d) takes
            its phase-1 monolingual rows from the whole table). The fitter is then called as
            ``fitter(law, train_df, pool_train)`` with the pool rows of the same group on the
            split's training side.
        scored: ``{name: df -> mask}``: score each split's test rows in these subsets separately
            from one fit (the M3 paper's setting (d): 1-stage and 2-stage test rows). A fit is made
            when the training side and at least one subset have ``min_rows`` rows; a subset with
            fewer is skipped.

    Returns:
        :class:`Evaluation` with ``table`` (one row per law: one column per axis and ``Avg``),
        ``per_group`` and ``detail`` (one row per group, split and law: ``n_train``, ``n_test``,
        ``r2``, ``status``, ``reason``, ``excluded``); with ``scored``, ``{name: Evaluation}``
        (the fits are shared).
    """
    from .fit import fit_map

    named = _named_laws(laws)
    splits = _as_splits(splits)
    _require(df, ["loss"] + ([group] if group else []), "axis_splits")
    fkw = dict(fit_kwargs or {})
    fitter_name = "fit_map" if fitter is None else getattr(fitter, "__name__", "custom")
    if fitter is None:
        def fitter(law, d):
            return fit_map(law, d, delta=delta, n_starts=n_starts, seed=seed, **fkw)
    subsets = dict(scored) if scored else {None: None}

    groups = [(None, df)] if group is None else [(g, df[df[group] == g])
                                                 for g in dict.fromkeys(df[group])]
    rows, fits = {name: [] for name in subsets}, {}
    for g, gdf in groups:
        gpool = None if pool is None else (pool if g is None else pool[pool[group] == g])
        for s in splits:
            test_mask = s.test_mask(gdf)
            train, test = gdf[~test_mask], gdf[test_mask]
            tests = {name: test if sel is None else test[np.asarray(sel(test), bool)]
                     for name, sel in subsets.items()}
            base = {"group": "all" if g is None else g, "split": s.name, "axis": s.axis,
                    "n_train": len(train)}
            fit_it = len(train) >= min_rows and any(len(t) >= min_rows for t in tests.values())
            skipped = None
            for label, law in named.items():
                fit, status, reason = None, "skipped", f"fewer than {min_rows} rows on a side"
                if not fit_it:
                    pass
                elif skipped is not None:  # excluded for every law anyway: no need to fit
                    reason = f"not fitted: skipped for {skipped}"
                else:
                    try:
                        fit = (fitter(law, train) if gpool is None else
                               fitter(law, train, gpool[~s.test_mask(gpool)]))
                        fits[(base["group"], s.name, label)] = fit
                    except SplitSkipped as exc:
                        skipped, reason = label, str(exc).splitlines()[0][:200]
                    except (BayesScalingError, FloatingPointError) as exc:
                        status, reason = "failed", str(exc).splitlines()[0][:200]
                for name, t in tests.items():
                    row = dict(base, law=label, n_test=len(t), r2=np.nan, status=status,
                               reason=reason)
                    if fit is not None and len(t) < min_rows:
                        row["reason"] = f"fewer than {min_rows} rows on a side"
                    elif fit is not None:
                        try:
                            r2 = _metrics.r2(t["loss"], np.asarray(fit.predict(t), float))
                            ok = math.isfinite(r2)
                            row.update(r2=r2, status="ok" if ok else "failed",
                                       reason="" if ok else "R^2 not finite")
                        except (BayesScalingError, FloatingPointError) as exc:  # e.g. NaN preds
                            row.update(status="failed", reason=str(exc).splitlines()[0][:200])
                    rows[name].append(row)
    axes = list(dict.fromkeys(s.axis for s in splits))
    settings = {"splits": [s.name for s in splits], "delta": delta, "n_starts": n_starts,
                "seed": seed, "min_rows": min_rows, "group": group, "fitter": fitter_name}
    out = {}
    for name, rows_ in rows.items():
        table, per_group, detail = aggregate_splits(pd.DataFrame(rows_), axes)
        table = table.reset_index().rename(columns={"law": "label"})
        n_used = (detail[~detail["excluded"]].groupby("law")["split"].count()
                  .reindex(list(named)).fillna(0).astype(int))
        table["n_splits"] = n_used.to_numpy()
        out[name] = Evaluation("axis_splits", table, detail, fits,
                               dict(settings, **({"scored": name} if scored else {})),
                               per_group=per_group)
    return out if scored else out[None]
