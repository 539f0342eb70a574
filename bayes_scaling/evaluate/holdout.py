"""The PTPP hold-out (Goffinet et al., *PTPP-Aware Adaptation Scaling Laws*, Sec. 2-3 and
Appendices A-B): fit on the early pre-training stages, score every adaptation run of the unseen
stage, with anchors, the D-CPT transfer baseline and the D-CPT oracle."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import metrics as _metrics
from ..bayes import fit_posterior
from ..errors import BayesScalingError, DataError, FitError
from ..fit import fit_map
from ..laws import get as get_law
from .common import named_laws, require_columns
from .probabilistic import posterior_predictions, probabilistic_scores
from .report import Evaluation

__all__ = ["ORACLE", "PAPER_ANCHORS", "POINT_METRICS", "PROB_METRICS", "TRANSFER",
           "ptpp_holdout"]

#: The PTPP paper's anchor choice: every (replay, D) point of the smallest model at the test stage.
PAPER_ANCHORS = "smallest_model"

#: Column order of the point metrics (``bs.metrics.score``) in every table.
POINT_METRICS = ("huber_log", "rmse_log", "mae_rel", "mape_clip", "calib_intercept",
                 "calib_slope", "r2")
#: Column order of the probabilistic metrics (posteriors only).
PROB_METRICS = ("coverage50", "coverage90", "width90_rel", "crps", "lpd")

TRANSFER = "D-CPT (transfer)"
ORACLE = "D-CPT (oracle)"


def _stage_mask(ptpp: np.ndarray, values) -> np.ndarray:
    values = np.atleast_1d(np.asarray(values, dtype=float))
    return np.any(np.isclose(ptpp[:, None], values[None, :], rtol=1e-9, atol=0), axis=1)


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
    baseline_law="dcpt",
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

       - ``"transfer"``: the PTPP-agnostic ``baseline_law`` (default ``dcpt``) fitted on the
         training stages only, applied unchanged at the test stage. It is never given the anchors,
         and it is scored on every test-stage row (the anchors are held out for it too), so its
         row is the same with and without anchors, as the PTPP paper's appendix reports it.
       - ``"oracle"``: ``baseline_law`` fitted on *every* test-stage row (anchors included) and
         scored on the scored rows: an in-sample upper bound (PTPP paper Appendix B).

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
        baseline_law: the law (name or Law) of the baselines; their labels are
            :data:`TRANSFER` and :data:`ORACLE` for ``dcpt``, ``"<name> (transfer)"`` and
            ``"<name> (oracle)"`` otherwise.
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
    named = named_laws(laws)
    need = ["loss", "N", "D", "ptpp", "replay"] + (["domain"] if domain is not None else [])
    require_columns(df, need, "ptpp_holdout")
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

    base_law = get_law(baseline_law)
    jobs = [(label, law, "candidate", fit_rows) for label, law in named.items()]
    if "transfer" in baselines:
        label = TRANSFER if base_law.name == "dcpt" else f"{base_law.name} (transfer)"
        jobs.append((label, base_law, "transfer", train))
    if "oracle" in baselines:
        label = ORACLE if base_law.name == "dcpt" else f"{base_law.name} (oracle)"
        jobs.append((label, base_law, "oracle", test))

    table, detail, fits = [], [], {}
    base_cols = [c for c in ("N", "D", "replay", "ptpp", "loss") if c in test.columns]

    def scored_mask(role):
        return np.ones(len(test), bool) if role == "transfer" else ~anchor

    def record(label, law, kind, role, n_fit, pred_test, lo=None, hi=None, extra=None, status="ok"):
        sc = scored_mask(role)
        row = {"label": label, "law": law.name, "fit": kind, "role": role, "n_fit": n_fit,
               "n_scored": int(sc.sum()), "n_anchors": int(anchor.sum()), "status": status}
        try:
            row.update(_metrics.score(test["loss"][sc], pred_test[sc], delta=delta))
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
        d["scored"] = sc
        detail.append(d)

    for label, law, role, rows_fit in jobs:
        try:
            fit = fit_map(law, rows_fit, delta=delta, n_starts=n_starts, seed=seed, **fkw)
        except (FitError, DataError) as exc:
            nan = np.full(len(test), np.nan)
            row = dict(label=label, law=law.name, fit="map", role=role, n_fit=len(rows_fit),
                       n_scored=int(scored_mask(role).sum()), n_anchors=int(anchor.sum()),
                       status=f"fit failed: {exc}", **{m: np.nan for m in POINT_METRICS})
            table.append(row)
            d = test[base_cols].copy()
            d.insert(0, "row", test.index)
            d.insert(0, "fit", "map")
            d.insert(0, "label", label)
            d["pred"], d["lower"], d["upper"] = nan, nan, nan
            d["anchor"], d["scored"] = anchor, scored_mask(role)
            detail.append(d)
            continue
        fits[(label, "map")] = fit
        record(label, law, "map", role, len(rows_fit), np.asarray(fit.predict(test), float))

    if bayes:
        pkw = {} if bayes is True else dict(bayes)
        pkw.setdefault("seed", seed)
        for label, law, role, rows_fit in jobs:
            if role == "oracle":
                continue
            post = fit_posterior(law, rows_fit, **pkw)
            fits[(label, "posterior")] = post
            point, lo, hi, draws, loglik, n_bad = posterior_predictions(
                post, test, interval, allow_unconverged=True)
            sc = scored_mask(role)
            prob = probabilistic_scores(draws[:, sc], test["loss"].to_numpy(float)[sc],
                                        loglik=None if loglik is None else loglik[:, sc])
            prob["nonfinite_draws"] = n_bad
            record(label, law, "posterior", role, len(rows_fit), point, lo, hi, extra=prob,
                   status=getattr(post, "status", "ok"))

    table = pd.DataFrame(table)
    order = ["label", "law", "fit", "role", "n_fit", "n_scored", "n_anchors", *POINT_METRICS]
    order += [c for c in PROB_METRICS if c in table.columns]
    rest = [c for c in table.columns if c not in order]
    table = table[order + rest]
    settings = {"domain": domain, "train_ptpp": train_ptpp, "test_ptpp": test_ptpp,
                    "anchors": anchors if isinstance(anchors, (str, type(None))) else "custom",
                    "anchor_rows": test.index[anchor].tolist(), "delta": delta, "n_starts": n_starts,
                    "seed": seed, "baselines": tuple(baselines), "baseline_law": base_law.name,
                    "bayes": bool(bayes),
                    "dropped_d0": int(d0.sum()), "n_train": len(train), "n_test": len(test),
                    "stages_present": stages}
    return Evaluation("ptpp_holdout", table, pd.concat(detail, ignore_index=True), fits, settings)
