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
held-out scores add the probabilistic metrics of :mod:`.probabilistic`: coverage of central
predictive intervals (:func:`coverage`), the continuous ranked probability score from samples
(:func:`crps`) and the held-out log predictive density (:func:`log_predictive_density`). They are
pure functions of draws and observations.

Every protocol returns an :class:`Evaluation`: ``.table`` (one row per law, one column per metric;
``.long()`` gives the tidy law x metric x value form), ``.detail`` (per row or per split) and
``.to_markdown()``.

The intervals other tools give (Epoch's bootstrap, a residual bootstrap, split-conformal on
leave-future-out residuals, the fitted-noise posterior) are baselines in :mod:`.baselines`, scored
per dataset with each dataset weighted equally by :func:`calibration_by` (coverage, MSCE,
interval score, CRPS, width).

Modules: ``report`` (Evaluation, Markdown), ``probabilistic`` (metrics of predictive draws),
``baselines`` (the peers' intervals),
``holdout`` (the PTPP hold-out), ``splits`` (the M3 axis splits), ``common`` (shared inputs).
"""
from .holdout import ORACLE, PAPER_ANCHORS, POINT_METRICS, PROB_METRICS, TRANSFER, ptpp_holdout
from .baselines import TAUS, bootstrap, conformal, fitted_noise, residual_bootstrap
from .probabilistic import (MSCE_GRID, SCORE_LEVELS, calibration_by, central_interval, coverage,
                            crps, crps_gaussian, crps_quantiles, crps_samples, draw_rows,
                            interval_score, interval_width, log_predictive_density, lpd_kde, msce,
                            pit_quantiles, posterior_loglik, posterior_predictions,
                            probabilistic_scores, quantile_rows)
from .report import Evaluation, markdown_table
from .splits import (C0, DERIVED, DT0, M0, M3_SPLITS, M3_SPLITS_2STAGE, PRESETS, Split,
                     aggregate_splits, axis_splits, split_masks)

__all__ = [
    "MSCE_GRID",
    "SCORE_LEVELS",
    "TAUS",
    "bootstrap",
    "calibration_by",
    "conformal",
    "crps_quantiles",
    "draw_rows",
    "fitted_noise",
    "interval_score",
    "msce",
    "pit_quantiles",
    "quantile_rows",
    "residual_bootstrap",
    "C0",
    "DERIVED",
    "DT0",
    "M0",
    "M3_SPLITS",
    "M3_SPLITS_2STAGE",
    "ORACLE",
    "PAPER_ANCHORS",
    "POINT_METRICS",
    "PRESETS",
    "PROB_METRICS",
    "TRANSFER",
    "Evaluation",
    "Split",
    "aggregate_splits",
    "axis_splits",
    "central_interval",
    "coverage",
    "crps",
    "crps_gaussian",
    "crps_samples",
    "interval_width",
    "log_predictive_density",
    "lpd_kde",
    "markdown_table",
    "posterior_loglik",
    "posterior_predictions",
    "probabilistic_scores",
    "ptpp_holdout",
    "split_masks",
]
