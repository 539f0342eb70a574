"""Forecast intervals that widen with extrapolation: the distance of a row from the fitted table,
the leave-future-out rehearsal on the training table, and the posterior of the discrepancy scale.

The model of a forecast row ``x`` (docs/forecasting.md)::

    log L = log f(theta, x) + noise + delta,     delta = (mu + tau z) d(x)^p,   z ~ N(0, 1)

``d(x)`` is the extrapolation distance (:func:`extrapolation`; 0 inside the fitted range, so rows
inside it keep the fitted-noise-only intervals). ``mu`` is the discrepancy's systematic part (every
row extrapolating along one signature is off the same way), ``tau`` its row-to-row spread. Both
are estimated from the training table alone: for every axis and side a query leaves the fitted
range on, the table is cut at 60, 75 and 85% of that axis' log range, the inner rows are fitted
(same law, priors, likelihood and fixed values; Laplace) and the held-out outer rows give log
residuals ``r`` (observed minus predictive median), predictive variances ``v0`` (parameter
uncertainty and noise), distances ``d`` and the width ``q`` of the inner table as a fraction of the
full one. With ``r ~ N(mu g, v0 + tau^2 g^2)``, ``g = d^p q^a`` (a narrower table extrapolates
with a discrepancy smaller by ``q^a``; ``a`` in :data:`WIDTH_POWERS`), ``mu ~ N(0, MU_SCALE^2)``
integrated out in closed form and a half-normal prior on ``tau`` (scale :data:`TAU_SCALE`), the
posterior of ``(p, a, tau)`` is computed on a grid and that of ``mu`` given them is normal; a
forecast draws ``(p, tau, mu)`` per posterior draw from it (docs/forecasting.md).

``discrepancy="calibrated"`` first calibrates the rehearsal against its own null: replicate tables
drawn from the fitted model are rehearsed alike (:func:`null_statistics`), and their standardised
residuals correct the table's rows and give the correlation of the rows a cut holds out
(:func:`calibrate_rows`), with which each cut is scored.
"""
from __future__ import annotations

import math
import re
import warnings

import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..errors import FitError
from ..params import row_bucket
from .extrapolation import FittedRange, extrapolation, fitted_table, input_columns
from .model import theta_s_batch
from .modes import find_modes, map_stage
from .predictive import ParamDraws, as_draws
from .spec import data_pytree, make_spec

__all__ = ["CUTS", "INTERVAL_VERSION", "MU_SCALE", "NULL_REPLICATES", "POWERS", "TAU_GRID",
           "TAU_SCALE", "WIDTH_POWERS", "FittedRange", "calibrate_rows", "directions",
           "grid_terms", "log_evidence",
           "extrapolation", "fitted_table", "grid_distance", "input_columns", "null_statistics",
           "rehearsal_rows",
           "rehearsal_spec", "rehearse", "rehearsed_directions", "sample_discrepancy",
           "signature_grid", "tau_posterior"]

#: Cut points of a rehearsal: the rows beyond these fractions of an axis' log range are held out.
CUTS = (0.6, 0.75, 0.85)
#: Exponents ``p`` of the discrepancy scale ``tau d^p`` (uniform prior over them).
POWERS = (0.5, 1.0)
#: Scale of the half-normal prior on ``tau``: the sd of the log-loss error one fitted width
#: beyond the data (one decade where no rehearsal is possible, :func:`grid_distance`); 95% prior
#: mass below 0.2 (a factor ``exp(0.4)`` at two sd).
TAU_SCALE = 0.1
#: Scale of the normal prior on ``mu``, the systematic part of the discrepancy one fitted width
#: beyond the data (the same meaning as :data:`TAU_SCALE`).
MU_SCALE = 0.1
#: Exponents ``a`` of the width ratio ``q`` of a rehearsal's inner table (uniform prior): ``0``, the
#: discrepancy depends on the distance in fitted widths only; ``2``, the rate of a quadratic term
#: the law lacks (its error beyond a table of width ``w`` grows like ``w^2``).
WIDTH_POWERS = (0.0, 1.0, 2.0)
#: Version of the interval method (analysis caches of forecasts are keyed on it).
INTERVAL_VERSION = "shift-width-decades-1"
#: The grid the posterior of ``tau`` is computed on.
TAU_GRID = np.linspace(0.0, 2.0, 801)
REHEARSAL_DRAWS = 400
#: Starts of the multi-start MAP of an inner fit that the full table's modes do not start.
MAP_STARTS = 8
#: Replicate tables of the rehearsal's null calibration (:func:`null_statistics`).
NULL_REPLICATES = 20
#: At most this many hull-facet directions are rehearsed ahead of forecasts (:func:`rehearse`);
#: a table with more (many input columns, scattered rows) rehearses the rest when a forecast
#: first leaves the hull through them.
MAX_HULL_DIRECTIONS = 16


def directions(signature: str) -> list[dict]:
    """The rehearsal directions of a signature of :func:`extrapolation`: one unit vector
    ``{column: weight}`` per box axis and side (``"D+,N+"``: ``[{"D": 1}, {"N": 1}]``), or the
    hull facet's normal (``"hull N-0.7 D+0.7"``: ``[{"N": -0.7, "D": 0.7}]``)."""
    if signature.startswith("hull "):
        parts = [re.fullmatch(r"(.+?)([+-]\d+\.\d+)", t) for t in signature[5:].split(" ")]
        return [{m.group(1): float(m.group(2)) for m in parts}]
    return [{a[:-1]: 1.0 if a[-1] == "+" else -1.0} for a in signature.split(",")]


def _direction_key(direction: dict) -> str:
    """``{"N": 0.7, "D": -0.7}`` -> ``"D-0.7 N+0.7"``: one name per direction, whatever the order."""
    return " ".join(f"{c}{w:+.1f}" for c, w in sorted(direction.items()))


def rehearsed_directions(post) -> list[dict]:
    """Every direction a forecast of ``post`` can leave its fitted range in: both sides of each
    input column of the fitted table, then the outward normals of its hull's facets that are not
    along one column (to one decimal, as :func:`extrapolation` names them; at most
    :data:`MAX_HULL_DIRECTIONS` of them, those of the largest facets' normals first)."""
    r = FittedRange(fitted_table(post), input_columns(post.law))
    out = [{c: side} for c in r.cols for side in (1.0, -1.0)]
    if r.facets is not None and len(r.F):
        seen = {_direction_key(u) for u in out}
        for normal in r.facets[0]:
            sig = " ".join(f"{c}{u:+.1f}" for c, u in zip(r.cols, normal) if round(u, 1) != 0)
            (u,) = directions("hull " + sig)
            if _direction_key(u) not in seen and len(seen) - len(out) < MAX_HULL_DIRECTIONS:
                seen.add(_direction_key(u))
                out.append(u)
    return out


def rehearse(post, directions=None) -> dict:
    """The rehearsal rows (:func:`rehearsal_rows`) of every direction a forecast can need
    (:func:`rehearsed_directions`, or the ``directions`` given), computed once per posterior and
    kept in ``post.settings["rehearsal"]`` (JSON: :meth:`Posterior.save` writes them, so a loaded
    posterior forecasts without fitting). Directions already there are not rehearsed again.

    Returns:
        ``{direction name: {"row", "cut", "r", "v0", "d", "q": lists, "failed_cuts": list}}``.
    """
    store = post.settings.setdefault("rehearsal", {})
    table = None
    for u in rehearsed_directions(post) if directions is None else directions:
        key = _direction_key(u)
        if key not in store:
            table = fitted_table(post) if table is None else table
            rows = rehearsal_rows(post, u, table)
            store[key] = {**{k: rows[k].tolist() for k in _REHEARSAL_COLUMNS},
                          "failed_cuts": list(rows.attrs["failed_cuts"])}
    return store


_REHEARSAL_COLUMNS = ("row", "cut", "r", "v0", "d", "q")


def _rehearsed(post, direction: dict) -> pd.DataFrame:
    """The rehearsal rows along ``direction`` of the fitted table: those kept in
    ``post.settings["rehearsal"]`` (:func:`rehearse`), else rehearsed now and kept there."""
    saved = rehearse(post, [direction])[_direction_key(direction)]
    rows = pd.DataFrame({k: np.asarray(saved[k], int if k == "row" else float)
                         for k in _REHEARSAL_COLUMNS})
    rows.attrs["failed_cuts"] = list(saved["failed_cuts"])
    return rows


def rehearsal_spec(post):
    """The posterior's model (law, priors, likelihood, fixed values, sampling coordinates) for
    the rehearsal refits, and a note when its priors cannot be rebuilt (a loaded posterior with
    user priors is rehearsed under the default priors). A fitted posterior's own spec is reused,
    with the programs its fit compiled; a loaded one's is built once (kept in
    ``settings["_rehearsal_spec"]``, which is not saved)."""
    if post.spec is not None:
        return post.spec, ""
    if "_rehearsal_spec" not in post.settings:
        s = post.settings
        kw = dict(likelihood=s["likelihood"], fixed=s.get("fixed") or {}, scale=s.get("scale"),
                  c=s["c"], student_df=s["student_df"])
        described = [str(p) for p in (s.get("priors") or {}).values()]
        note = ""
        if described and all(p == "flat" for p in described):
            kw["priors"] = "flat"
        elif any(p.startswith("user") for p in described):
            note = "rehearsed under the default priors (user priors are not saved)"
        post.settings["_rehearsal_spec"] = (make_spec(post.law, **kw), note)
    return post.settings["_rehearsal_spec"]


def _laplace_log_draws(spec, starts, train, test, seed, ref=None, pad=True):
    """Log predictive draws ``(S, m)`` at ``test`` of the Laplace posterior fitted on ``train``:
    damped Newton from ``starts`` (the full table's modes, ``{name: (k,)}``) to the inner table's
    mode, then Gaussian draws in the sampling coordinates, as ``fit_posterior(method="laplace")``.
    When no finite mode is reached from ``starts``, the inner mode is searched from
    :data:`MAP_STARTS` random starts (the multi-start MAP of a fit). ``ref``: the coordinates'
    reference points (:func:`~bayes_scaling.bayes.spec.data_pytree`), by default ``train``'s own;
    ``pad``: the rows ``train`` is padded to (``data_pytree``'s ``pad``).
    """
    law = spec.law
    data = data_pytree(spec, spec.space.validate(train), pad=pad, ref=ref)
    u0 = np.atleast_2d(np.asarray(spec.space.u_compiled(np.stack(
        [np.asarray(starts[p.name], float) for p in spec.free], -1))))
    try:
        top = find_modes(spec, data, u0, np.arange(len(u0), dtype=float))[0]
    except FitError:  # no finite mode from the full table's modes: multi-start MAP, as a fit does
        _, _, _, (u_ok, v_ok) = map_stage(spec, data, MAP_STARTS, seed, 1000)
        top = find_modes(spec, data, u_ok, v_ok)[0]
    z = np.random.default_rng(seed).standard_normal((REHEARSAL_DRAWS, len(top.s)))
    theta = theta_s_batch(spec)(jnp.asarray(top.s + z @ top.chol.T), data["ref"])
    S = REHEARSAL_DRAWS
    params = {n: np.asarray(theta[n]) if n in theta else np.full(S, spec.fixed[n])
              for n in law.param_names}
    sigma = np.asarray(theta["sigma"]) if "sigma" in theta else np.full(S, spec.scale)
    draws = ParamDraws(law, params, sigma, spec.likelihood, spec.c, spec.student_df)
    # the held-out rows padded to a row bucket (copies of the first): every cut of every
    # direction then shares the predictive's compiled programs; the copies are cut off
    m = len(test)
    padded = test.iloc[np.r_[np.arange(m), np.zeros(row_bucket(m) - m, int)]]
    with np.errstate(all="ignore"):
        y = np.log(draws.predict_draws(padded, "predictive", seed=seed))[:, :m]
    return np.where(np.isfinite(y), y, np.nan)


def _starts(post, spec) -> dict:
    """The posterior's modes (``post.modes``; else its MAP) as Newton starts for the refits."""
    names = spec.names
    m = post.modes
    if m is not None and len(m) and all(n in m for n in names):
        return {n: np.asarray(m[n], float) for n in names}
    return {n: np.array([float(post.map[n])]) for n in names}


def rehearsal_rows(post, direction: dict, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Leave-future-out rehearsal of extrapolating along ``direction`` (``{column: weight}``, in
    the scaled log space of :func:`extrapolation`; ``{"N": 1}``: beyond the largest ``N``)
    inside the posterior's own training table.

    The rows are ordered by their projection ``t`` on the direction. For each cut of
    :data:`CUTS` (at that fraction of the range of ``t``) that leaves at least ``n_free + 3``
    inner rows with 2 distinct values of ``t``, and at least one outer row, the inner rows are
    fitted with the posterior's law, priors, likelihood and fixed values by Laplace (from the
    posterior's own modes), and each outer row gives its log residual ``r`` (observed minus
    predictive median), predictive variance ``v0``, distance ``d`` from the inner table and the
    inner table's width along the direction as a fraction ``q`` of the full table's.

    A cut whose inner fit finds no finite mode is skipped and listed in
    ``rows.attrs["failed_cuts"]``.

    Returns:
        one row per (cut, held-out row): ``row`` (index in the table), ``cut``, ``r``, ``v0``,
        ``d``, ``q``. Empty when no cut is possible.
    """
    table = fitted_table(post) if table is None else table
    spec, _ = rehearsal_spec(post)
    starts = _starts(post, spec)
    columns = input_columns(post.law)
    # every inner fit in coordinates centred on the full table (a reparameterisation: the inner
    # posterior is the same; its Laplace fit is taken in these coordinates), so the reference
    # points are not compiled and computed again for every inner table's size; computed at the
    # first cut (a table too small for any cut is never fitted, nor validated as a fit's table);
    # padded to the full table's rows, so they run the programs the posterior's own fit compiled
    ref, bucket = None, row_bucket(len(table))
    full = FittedRange(table, [c for c in columns if c in table])
    cols, F = full.cols, full.F
    t = F @ np.array([direction.get(c, 0.0) for c in cols])
    lo, hi = t.min(), t.max()
    n_min = len(post.settings["free"]) + 3
    out, seen, failed = [], set(), []
    for q in CUTS:
        inner = t <= lo + q * (hi - lo) + 1e-12
        key = tuple(np.flatnonzero(inner))
        if key in seen or inner.all() or inner.sum() < n_min or len(np.unique(t[inner])) < 2:
            continue
        seen.add(key)
        train, test = table[inner], table[~inner]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if ref is None and spec.blocks:
                    ref = data_pytree(spec, spec.space.validate(table))["ref"]
                y = _laplace_log_draws(spec, starts, train, test, seed=len(seen), ref=ref,
                                       pad=bucket)
        except FitError:
            failed.append(q)
            continue
        d, _ = FittedRange(train, cols, log=full.spaces).locate(test)
        r = np.log(np.asarray(test["loss"], float)) - np.nanmedian(y, 0)
        out.append(pd.DataFrame({"row": np.flatnonzero(~inner), "cut": q, "r": r,
                                 "v0": np.nanvar(y, 0), "d": d,
                                 "q": (t[inner].max() - lo) / (hi - lo)}))
    empty = pd.DataFrame({c: np.array([], float) for c in ("row", "cut", "r", "v0", "d", "q")})
    rows = pd.concat(out, ignore_index=True) if out else empty
    rows.attrs["failed_cuts"] = failed
    return rows


def null_statistics(post, direction: dict, table: pd.DataFrame | None = None,
                    n_rep: int = NULL_REPLICATES, seed: int = 0) -> pd.DataFrame:
    """What the rehearsal along ``direction`` reports when the law is right: per cut, statistics
    of the standardised residuals ``z = r / sqrt(v0)`` of :func:`rehearsal_rows` over ``n_rep``
    replicate tables drawn from the posterior predictive of the full table (one posterior draw of
    the parameters and the noise scale per replicate, at the table's own rows).

    The replicates are rehearsed exactly as the table is (same cuts, inner fits, starts), so the
    statistics measure, under the fitted model itself, the inner fits' bias (``mean``), the
    under-statement of their predictive variance (``var`` above 1) and the correlation ``rho``
    of the rows one cut holds out (they share the inner fit's parameter error): with ``n`` rows
    and the variance ``var_m`` over replicates of their mean ``z``,
    ``rho = (var_m / var - 1 / n) / (1 - 1 / n)`` (equicorrelated rows), in ``[0, 0.99]``.

    Returns:
        one row per cut: ``cut``, ``mean``, ``var``, ``rho`` and ``n_rep`` (replicates rehearsed).
    """
    table = fitted_table(post) if table is None else table
    sims = as_draws(post, max_draws=n_rep).predict_draws(table, "predictive", seed=seed)
    parts = []
    for b, y in enumerate(sims):
        if not np.all(np.isfinite(y) & (y > 0)):
            continue
        rows = rehearsal_rows(post, direction, table.assign(loss=y))
        parts.append(rows.assign(rep=b, z=rows["r"] / np.sqrt(rows["v0"])))
    cols = ("cut", "mean", "var", "rho", "n_rep")
    if not parts:
        return pd.DataFrame({c: np.array([], float) for c in cols})
    null = pd.concat(parts, ignore_index=True)
    null = null[np.isfinite(null["z"])]
    out = []
    for cut, g in null.groupby("cut"):
        var = float(g["z"].var())
        n = g.groupby("rep")["z"].size().max()
        var_m = float(g.groupby("rep")["z"].mean().var())
        rho = (var_m / var - 1 / n) / (1 - 1 / n) if n > 1 and var > 0 else 0.0
        out.append((cut, float(g["z"].mean()), var, float(np.clip(rho, 0.0, 0.99)),
                    g["rep"].nunique()))
    return pd.DataFrame(out, columns=cols)


def calibrate_rows(rows: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Rehearsal rows corrected by their null (:func:`null_statistics`): with the cut's null mean
    ``m`` and variance ``s2`` of ``r / sqrt(v0)``, ``r <- r - m sqrt(v0)`` and
    ``v0 <- v0 max(s2, 1)``, and the cut's correlation ``rho`` attached. Under the fitted model
    the corrected ``r / sqrt(v0)`` then has mean 0 and variance at most 1. A cut without null
    statistics is left as it is (``rho = 0``)."""
    s = stats.set_index("cut")
    m = rows["cut"].map(s["mean"]).fillna(0.0).to_numpy(float)
    s2 = np.maximum(rows["cut"].map(s["var"]).fillna(1.0).to_numpy(float), 1.0)
    v0 = rows["v0"].to_numpy(float)
    return rows.assign(r=rows["r"].to_numpy(float) - m * np.sqrt(v0), v0=v0 * s2,
                       rho=rows["cut"].map(s["rho"]).fillna(0.0).to_numpy(float))


def _block_terms(r, v0, g, w, rho, tau):
    """For one block of rows with weights ``w`` sharing a correlation ``rho``, over the grid
    ``tau`` (``(T, 1)``): the weighted ``log det V``, ``r' V^-1 r``, ``g' V^-1 r`` and
    ``g' V^-1 g`` (``(T,)`` each). ``rho = 0``: ``V = diag(v0 + tau^2 g^2)``, each row weighted by
    its ``w``. ``rho > 0``: ``V = diag((1 - rho) v0 + tau^2 g^2) + rho sqrt(v0) sqrt(v0)'``
    (equicorrelated standardised rows; Sherman-Morrison for the rank-one part), the block
    weighted by the mean of ``w``."""
    dg = (1 - rho) * v0 + (tau * g) ** 2
    if rho == 0:
        return (np.sum(w * np.log(dg), 1), np.sum(w * r * r / dg, 1), np.sum(w * g * r / dg, 1),
                np.sum(w * g * g / dg, 1))
    u = np.sqrt(rho * v0)
    c = 1.0 + np.sum(u**2 / dg, 1)

    def form(x, y):
        return np.sum(x * y / dg, 1) - np.sum(x * u / dg, 1) * np.sum(y * u / dg, 1) / c

    wb = float(np.mean(w))
    return (wb * (np.sum(np.log(dg), 1) + np.log(c)), wb * form(r, r), wb * form(g, r),
            wb * form(g, g))


def tau_posterior(rows: pd.DataFrame, tau_scale: float | None = None,
                  mu_scale: float | None = None) -> dict:
    """The grid posterior of the discrepancy ``(p, a, tau)`` and of ``mu`` given them, from
    rehearsal rows (``r``, ``v0``, ``d``, ``row`` and the inner width ratio ``q``, 1 if absent).

    With ``g_i = d_i^p q_i^a`` and ``V_i = v0_i + tau^2 g_i^2``, the rows are
    ``r_i ~ N(mu g_i, V_i)``; ``mu ~ N(0, MU_SCALE^2)`` is integrated out in closed form (a normal
    mean with known variances; Gelman et al. 2013, *Bayesian Data Analysis*, Section 2.5): with
    ``A = sum_i w_i g_i^2 / V_i`` and ``B = sum_i w_i g_i r_i / V_i``,
    ``mu | p, a, tau ~ N(B v_mu, v_mu)``, ``v_mu = 1 / (1 / MU_SCALE^2 + A)``, and the log marginal
    likelihood is ``sum_i w_i log N(r_i; 0, V_i) + B^2 v_mu / 2 + log(sqrt(v_mu) / MU_SCALE)``.
    Prior: ``p`` uniform over :data:`POWERS`, ``a`` over :data:`WIDTH_POWERS`, ``tau`` half-normal
    of scale :data:`TAU_SCALE`. A training row held out by several nested cuts enters with weight
    ``w_i = 1 / (times it is held out)``, so each row counts once in all. With no rows, the prior.

    Rows with a correlation ``rho`` (:func:`calibrate_rows`) are scored per block of one cut and
    direction (column ``block``; else ``cut``) with the equicorrelated covariance of
    :func:`_block_terms` in place of ``diag(V)``, the block weighted by its rows' mean ``w``.

    ``tau_scale`` / ``mu_scale``: the prior scales (default :data:`TAU_SCALE`, :data:`MU_SCALE`).

    Returns:
        ``{"p", "tau", "mu", "mu_sd", "w"}``: lists over the grid points of non-negligible weight
        (``mu``, ``mu_sd``: the normal posterior of ``mu`` at that point; JSON-serialisable),
        ``n_rows`` (distinct training rows used) and ``log_evidence``: the log marginal likelihood
        of the rows under the prior (up to a constant that does not depend on the prior's scales;
        0 with no rows), what an empirical-Bayes choice of the scales maximises.
    """
    terms = grid_terms(rows)
    logp, mus, sds = _with_prior(terms, TAU_SCALE if tau_scale is None else float(tau_scale),
                                 MU_SCALE if mu_scale is None else float(mu_scale))
    n = terms["n"]
    log_evidence = float(np.logaddexp.reduce(logp)) if n else 0.0
    wt = np.exp(logp - logp.max())
    keep = wt > 1e-9 * wt.sum()
    wt = wt[keep] / wt[keep].sum()
    return {"p": terms["p"][keep].tolist(), "tau": terms["tau"][keep].tolist(),
            "mu": mus[keep].tolist(), "mu_sd": sds[keep].tolist(), "w": wt.tolist(),
            "n_rows": terms["n_rows"], "log_evidence": log_evidence}


def grid_terms(rows: pd.DataFrame) -> dict:
    """What :func:`tau_posterior` needs of the rehearsal rows, whatever the prior's scales: on
    the grid of ``(p, a, tau)`` (flattened), the log likelihood with ``mu = 0`` (``ll``) and the
    sums ``A``, ``B`` of the closed-form integral over ``mu``; with ``p``, ``tau`` per grid point,
    ``n`` rows and ``n_rows`` distinct training rows. :func:`log_evidence` reads it at any
    scales."""
    rows = rows.astype({k: float for k in ("r", "v0", "d")})  # an empty part may be untyped
    rows = rows[np.isfinite(rows["r"]) & np.isfinite(rows["v0"])]
    n = len(rows)
    w = 1.0 / rows.groupby("row")["row"].transform("count").to_numpy(float) if n else np.zeros(0)
    r, v0, d = (rows[k].to_numpy(float) for k in ("r", "v0", "d"))
    q = rows["q"].to_numpy(float) if "q" in rows else np.ones(n)
    rho = rows["rho"].fillna(0.0).to_numpy(float) if "rho" in rows else np.zeros(n)
    key = rows["block" if "block" in rows else "cut"].to_numpy()
    blocks = [np.flatnonzero(key == k) for k in pd.unique(key)]
    tau = TAU_GRID[:, None]
    lls, As, Bs, ps = [], [], [], []
    for p in POWERS:
        for a in WIDTH_POWERS:
            g = d**p * q**a
            ll, A, B = np.zeros(TAU_GRID.size), np.zeros(TAU_GRID.size), np.zeros(TAU_GRID.size)
            for i in blocks:
                logdet, rr, gr, gg = _block_terms(r[i], v0[i], g[i], w[i], rho[i].mean(), tau)
                ll += -0.5 * logdet - 0.5 * rr
                A += gg
                B += gr
            lls.append(ll)
            As.append(A)
            Bs.append(B)
            ps.append(np.full(TAU_GRID.size, p))
    return {"ll": np.concatenate(lls), "A": np.concatenate(As), "B": np.concatenate(Bs),
            "p": np.concatenate(ps), "tau": np.tile(TAU_GRID, len(POWERS) * len(WIDTH_POWERS)),
            "n": n, "n_rows": int(rows["row"].nunique()) if n else 0}


def _with_prior(terms: dict, tau_scale: float, mu_scale: float):
    """``(log p, mu mean, mu sd)`` on the grid: ``terms`` (:func:`grid_terms`) under the priors
    ``tau ~ HalfNormal(tau_scale)`` (its density times the grid spacing, ``p`` and ``a``
    uniform: a normalised prior) and ``mu ~ N(0, mu_scale^2)`` integrated out."""
    tau = terms["tau"]
    prior = (-0.5 * (tau / tau_scale) ** 2
             + math.log(2.0 / math.sqrt(2 * math.pi) / tau_scale * (TAU_GRID[1] - TAU_GRID[0]))
             - math.log(len(POWERS) * len(WIDTH_POWERS)))
    s2 = 1.0 / (1.0 / mu_scale**2 + terms["A"])
    logp = terms["ll"] + 0.5 * terms["B"] ** 2 * s2 + 0.5 * np.log(s2 / mu_scale**2) + prior
    return logp, terms["B"] * s2, np.sqrt(s2)


def log_evidence(terms: dict, tau_scale: float, mu_scale: float) -> float:
    """The log marginal likelihood of rehearsal rows (their :func:`grid_terms`) under the prior
    scales (0 with no rows; up to a constant that does not depend on the scales)."""
    if not terms["n"]:
        return 0.0
    return float(np.logaddexp.reduce(_with_prior(terms, tau_scale, mu_scale)[0]))


def grid_distance(grid: dict, widths: np.ndarray, decades: np.ndarray) -> np.ndarray:
    """The distance a signature's discrepancy is measured in: in fitted widths (``widths``,
    :func:`extrapolation`) where its grid rests on rehearsal rows, which measured it in those
    units; in decades (``decades``, :meth:`FittedRange.decades`) where it rests on the prior
    alone, whose scales :data:`TAU_SCALE` and :data:`MU_SCALE` are then per decade. A table no
    cut can rehearse along an axis has one or two values on it, and their gap, the fitted width,
    says nothing of how far a forecast reaches."""
    return np.asarray(widths if grid.get("n_rows", 1) else decades, float)


def sample_discrepancy(grid: dict, d: np.ndarray, n_draws: int, rng):
    """``(loc, scale, tau)``: per draw and row (``(S, n)``) the mean ``mu_s d^p_s`` and sd
    ``tau_s d^p_s`` of the discrepancy ``delta`` of rows at distances ``d``, one ``(p, tau)`` per
    draw from the grid posterior and ``mu_s`` from its normal posterior there; and the ``(S,)``
    taus drawn."""
    i = rng.choice(len(grid["w"]), size=n_draws, p=np.asarray(grid["w"]))
    tau, p = np.asarray(grid["tau"])[i], np.asarray(grid["p"])[i]
    mu = np.asarray(grid["mu"])[i] + np.asarray(grid["mu_sd"])[i] * rng.standard_normal(n_draws)
    dp = np.asarray(d)[None, :] ** p[:, None]
    return mu[:, None] * dp, tau[:, None] * dp, tau


def signature_grid(post, signature: str, calibrated: bool = False) -> dict:
    """The grid posterior of the discrepancy (:func:`tau_posterior`) for rows leaving the fitted
    range along ``signature`` (:func:`extrapolation`): rehearsal rows pooled over its directions
    (those :func:`rehearse` kept, else rehearsed now), cached in
    ``post.settings["discrepancy_grid"]`` (saved with the posterior; a grid saved without ``mu``
    is recomputed). ``basis`` says what it rests on (the rehearsal's rows, or the prior
    alone when no cut was possible). ``calibrated``: each direction's rows are first corrected by
    the rehearsal's null (:func:`null_statistics`, :func:`calibrate_rows`) and scored per cut with
    its correlation (cached under ``"calibrated " + signature``)."""
    cache = post.settings.setdefault("discrepancy_grid", {})
    key = f"calibrated {signature}" if calibrated else signature
    if "mu" not in cache.get(key, {}):  # absent, or cached by a version without mu
        table = fitted_table(post)
        parts, failed = [], []
        for j, u in enumerate(directions(signature)):
            rows = _rehearsed(post, u)
            failed += [f"{q:g} along {u}" for q in rows.attrs["failed_cuts"]]
            if calibrated and len(rows):
                rows = calibrate_rows(rows, null_statistics(post, u, table))
            parts.append(rows.assign(block=[f"{j} {c}" for c in rows["cut"]]))
        grid = tau_posterior(pd.concat(parts, ignore_index=True))
        _, note = rehearsal_spec(post)
        grid["basis"] = (f"rehearsal on {grid['n_rows']} training rows beyond cuts along "
                         f"{signature}" if grid["n_rows"] else
                         "tau prior only, per decade beyond the fitted range: no rehearsal cut "
                         f"possible along {signature}")
        if calibrated and grid["n_rows"]:
            grid["basis"] += f", calibrated on {NULL_REPLICATES} replicate tables"
        if failed:
            grid["basis"] += f"; cuts without a finite inner mode skipped: {', '.join(failed)}"
        grid["basis"] += f"; {note}" if note else ""
        cache[key] = grid
    return cache[key]
