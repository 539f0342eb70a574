"""Which extra runs ("anchors") to buy: greedy, per unit of compute, from the posterior itself.

Given a posterior fitted on cheap runs, a table of candidate runs with their cost and the query
rows whose forecasts matter, :func:`select` returns an ordered list of candidates that most reduce
the expected posterior uncertainty of the query forecasts (``criterion="variance"``), or the
expected error of the law refitted with them at the queries (``criterion="refit"``), per unit of
compute, within a budget.

The PTPP paper (Section 2, "Anchors"; Table 2) shows that 20 small-scale anchors at the target PTPP
tighten forecasts; its closing section names "cost-aware anchor selection" as future work. This is
that selection, with the value of a run computed from the posterior rather than from a distance
heuristic.

This module is a front end: it turns a fitted posterior's draws into the joint covariance (or the
draws) of the log forecasts at the queries and candidates, and the picks are made by the engine
of ``bs.design``'s ``bayes`` method (:mod:`bayes_scaling.design.acquisition`).
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .bayes.expansion import expansion_scale
from .bayes.intervals import (FittedRange, fitted_table, grid_distance, input_columns,
                              signature_grid)
from .bayes.posterior import Posterior, extrapolation_distance
from .bayes.predictive import ParamDraws, as_draws, predict_draws
from .design.acquisition import best_rule, greedy_importance, greedy_linear, greedy_refit
from .design.posterior import DISC_REL, kernel, log_inputs
from .data import as_rows
from .design.recommend import budget_cost, run_costs
from .errors import BayesScalingError

__all__ = ["candidate_cost", "select"]


def candidate_cost(candidates: pd.DataFrame, cost="6ND") -> np.ndarray:
    """Cost of each candidate: ``"6ND"`` (training FLOPs 6 N D), a column name, an arithmetic
    formula of columns (:func:`~bayes_scaling.design.recommend.cost_formula`, e.g. ``"6*N*D"``),
    an array or a callable; every cost positive and finite, or one error naming the rows
    (:func:`~bayes_scaling.design.recommend.run_costs`, which ``bayes-scaling design`` uses too).

    ``6ND`` counts only the run itself (for adaptation runs: the adaptation tokens D; the
    pre-trained checkpoint is a sunk cost).
    """
    if isinstance(cost, str) and cost.replace(" ", "").upper() == "6ND":
        for col in ("N", "D"):
            if col not in candidates:
                raise BayesScalingError(f"cost='6ND' needs column {col!r} in candidates; give "
                                        "cost=<column name or array> instead")
        cost = "6*N*D"
    return run_costs(candidates, cost)


def _noise_var(posterior, draws: ParamDraws | None, noise, n_c):
    if noise is not None:
        s = np.broadcast_to(np.asarray(noise, float), (n_c,))
        if not np.all(np.isfinite(s) & (s > 0)):
            raise BayesScalingError(f"noise must be positive, got {noise!r}")
        return s ** 2, "given"
    if draws is not None and draws.sigma is not None:
        return np.full(n_c, float(np.mean(draws.sigma ** 2))), "posterior mean of sigma^2"
    raise BayesScalingError("the observation noise is unknown: the posterior has no 'sigma' draws; "
                            "pass noise=<sd of log loss of one run> (e.g. 0.01)")


def select(posterior, candidates: pd.DataFrame, *, budget: float, cost="6ND",
           queries: pd.DataFrame, criterion: str = "auto", method: str = "linear",
           noise=None, query_weights=None, greedy: str = "auto", observed=None,
           discrepancy=None, n_sim: int = 256, max_draws: int | None = 4000,
           seed: int = 0) -> pd.DataFrame:
    """Greedy anchor selection: the candidates that most reduce query uncertainty per unit cost.

    Let ``f_i(theta) = log L(theta, x_i)`` (the law in log space, where the likelihood lives) and
    let theta_1..theta_S be the posterior draws. An observed run ``c`` gives
    ``y_c = f_c(theta) + eps_c``, eps_c ~ N(0, s_c^2), with ``s_c^2`` the posterior mean of the
    likelihood scale sigma^2 (or ``noise^2``). For a set A of runs, the criterion is the expected
    posterior uncertainty of the queries q after observing y_A, averaged over the predictive
    distribution of y_A (``criterion="auto"``, the default, is ``"refit"`` when the fitted rows
    are given as ``observed`` and ``"variance"`` otherwise: on ``bible_ptpp`` at PTPP 279 the
    refit criterion's anchors beat the variance criterion's at every budget, one stage down they
    do not; docs/design.md):

    - ``criterion="variance"``: ``V(A) = E_{y_A}[ sum_j w_j Var(f_qj | y_A) ]`` (``w`` =
      ``query_weights``, default 1/n_q: the mean variance of log forecasts, i.e. squared relative
      error);
    - ``criterion="entropy"``: ``H(A) = E_{y_A}[ 1/2 log det Cov(f_q | y_A) ]``; the reduction
      ``H(0) - H(A)`` is the expected information gain about the queries (nats). Linear method only.
    - ``criterion="refit"``: ``R(A) = sum_j w_j E[(f_hat_qj(A) - f_qj - delta_qj)^2]``, the
      expected squared error at the queries of the law *refitted* to the posterior's own rows
      (``observed``) plus A, when the truth is the law plus a discrepancy ``delta`` that the
      refit does not model, with covariance ``E[s_i s_j] k_ij``: ``k`` a kernel over the
      standardised log inputs and ``s_i`` the row's discrepancy sd, stationary by default, or
      the posterior's own extrapolation discrepancy ``tau d_i^p`` that its forecasts use
      (``discrepancy="rehearsal"``; docs/design.md, "the refit's error from a fitted posterior's
      draws"). Linearised in the draws' joint
      covariance ``C`` of the log law values over queries, candidates and observed rows: after
      conditioning ``C`` on A, the refit's weights on the observed rows O are ``g_j = C_Oj / s^2``
      and

          E_j = C_jj + K_jj - 2 g_j' K_Oj + g_j' K_OO g_j,      K_ij = E[s_i s_j] k_ij,

      the posterior variance plus what the discrepancy of the runs the refit leans on costs at
      the queries (:func:`~bayes_scaling.design.acquisition.refit_error`). Without a discrepancy
      it is ``criterion="variance"``; with one, a run far from the queries can raise it, and the
      greedy stops when no affordable run lowers it. Linear method only.

    Greedy rule: starting from A = {}, add the affordable candidate with the largest
    ``(V(A) - V(A + c)) / cost_c`` (``greedy="ratio"``: value per unit compute) or the largest
    ``V(A) - V(A + c)`` (``"gain"``); stop when the budget or the gains run out. ``"auto"`` (default)
    runs both and keeps the sequence with the lower final criterion: the ratio rule alone can spend
    the budget on many cheap, individually efficient runs and miss one expensive run worth more,
    and taking the better of the two is what gives cost-aware greedy selection its guarantee for
    submodular criteria (Krause & Guestrin 2005; Leskovec et al. 2007). Each row of the result is
    one pick with the expected criterion after it.

    Two ways of computing V(A + c), both from the draws alone:

    - ``method="linear"`` (Laplace / linearised Gaussian update). Treat the posterior of
      ``f = (f_C, f_Q)`` as Gaussian with the draws' covariance Sigma (exact when the law is
      linear in theta near the posterior, i.e. in the Laplace regime). Observing c updates
      ``Sigma <- Sigma - Sigma[:, c] Sigma[c, :] / (Sigma_cc + s_c^2)``, independent of the value
      y_c, so ``V(A + c) = V(A) - sum_j w_j Sigma_jc^2 / (Sigma_cc + s_c^2)`` and, by the matrix
      determinant lemma, ``H(A + c) = H(A) + 1/2 log(1 - v_c' Sigma_QQ^-1 v_c / (Sigma_cc + s_c^2))``
      with ``v_c = Sigma_Qc``. Exact greedy steps for the Gaussian model, O(n_c n_q) each.
    - ``method="importance"`` (importance re-weighting of draws). Take ``n_sim`` draws theta_j as
      pseudo-truths and simulate ``y_jc = f_c(theta_j) + s_c eps_jc``. After observing A the
      posterior is the draws re-weighted by ``w_js ~ prod_{c in A} N(y_jc; f_c(theta_s), s_c^2)``
      (the pseudo-truth's own draw excluded, s != j, to avoid self-confirmation), and
      ``V(A) = mean_j sum_q w_q Var_{w_j.}(f_q)``. Captures non-Gaussian posteriors; Monte Carlo
      error shrinks with ``n_sim`` and the number of draws, and degrades when the weights collapse
      (the mean effective sample size is reported in ``df.attrs["ess"]``).

    Args:
        posterior: ``Posterior`` (``predict_draws``), or :class:`~bayes_scaling.bayes.predictive.ParamDraws`.
        candidates: candidate runs (the law's columns, plus whatever the cost needs).
        budget: total cost allowed (same unit as ``cost``), or a share of the candidates'
            total cost such as ``"10%"``.
        cost: ``"6ND"``, a column name, an array or a callable (:func:`candidate_cost`).
        queries: rows whose forecasts matter (a DataFrame, a Series or a dict of columns).
        criterion: ``"auto"``, ``"refit"``, ``"variance"`` or ``"entropy"``.
        method: ``"linear"`` or ``"importance"``.
        noise: sd of the log loss of one run (default: from the posterior's sigma draws).
        query_weights: weights of the queries in the variance criterion (default uniform).
        greedy: ``"auto"``, ``"ratio"`` or ``"gain"`` (see above).
        observed: the rows the posterior was fitted on (``criterion="refit"`` only, required
            there: the refit leans on them too).
        discrepancy: ``criterion="refit"`` only. A number ``s_d``: a stationary prior sd of
            the law's misfit in log loss at every row; default ``max(s, 0.1 sd)`` of the
            posterior mean log loss over ``observed``, as ``bs.design``'s posterior (on
            ``bible_ptpp`` it beats ``"rehearsal"`` at 0.25-1x the paper's budget;
            docs/design.md). ``"rehearsal"`` (a ``Posterior`` fitted on a table): its
            extrapolation discrepancy at the queries, candidates and observed rows, the
            rehearsed ``(p, tau)`` of ``Posterior.forecast``, computed when first needed and
            cached in the posterior's settings. The kernel's length is 1 in log inputs
            standardised over the observed rows and the candidates. ``df.attrs`` holds
            ``discrepancy`` (``"rehearsal"`` or ``s_d``), ``discrepancy_sd_queries`` (root mean
            square sd at the queries) and ``discrepancy_basis``.
        n_sim, seed: pseudo-truths of the importance method.
        max_draws: thin :class:`ParamDraws` to at most this many draws.

    Returns:
        DataFrame, one row per pick in order: ``step``, ``candidate`` (index label in
        ``candidates``), the candidate's columns, ``cost``, ``cum_cost``, ``criterion_before``,
        ``criterion_after`` (expected value after this pick), ``gain``, ``gain_per_cost`` and
        ``reduction`` (cumulative fraction of the initial criterion removed; for entropy, the
        cumulative information gain in nats). ``df.attrs`` holds the initial criterion, the noise,
        the method, the greedy rule used and the settings.
    """
    if criterion == "auto":
        criterion = "variance" if observed is None else "refit"
    if criterion not in ("variance", "entropy", "refit"):
        raise BayesScalingError(f"criterion must be 'auto', 'variance', 'entropy' or 'refit', "
                                f"got {criterion!r}")
    if method not in ("linear", "importance"):
        raise BayesScalingError(f"method must be 'linear' or 'importance', got {method!r}")
    if method == "importance" and criterion != "variance":
        raise BayesScalingError("method='importance' supports criterion='variance' only")
    if criterion == "refit" and not (isinstance(observed, pd.DataFrame) and len(observed)):
        raise BayesScalingError("criterion='refit' needs observed=<the rows the posterior was "
                                "fitted on> (a non-empty DataFrame): the refit leans on them too")
    if criterion != "refit" and (observed is not None or discrepancy is not None):
        raise BayesScalingError("observed= and discrepancy= belong to criterion='refit'")
    if greedy not in ("auto", "ratio", "gain"):
        raise BayesScalingError(f"greedy must be 'auto', 'ratio' or 'gain', got {greedy!r}")
    if not isinstance(candidates, pd.DataFrame) or len(candidates) == 0:
        raise BayesScalingError("candidates must be a non-empty DataFrame")
    if isinstance(queries, (pd.Series, Mapping)):
        queries = as_rows(queries, "queries")
    if not isinstance(queries, pd.DataFrame) or len(queries) == 0:
        raise BayesScalingError("queries must be a non-empty DataFrame (or a Series or a dict "
                                "of columns)")
    costs = candidate_cost(candidates, cost)
    budget = budget_cost(budget, costs)

    draws = None
    try:
        draws = as_draws(posterior, max_draws)
    except BayesScalingError:
        draws = None
    # the law's values per draw (f_i above), never a posterior's predictive draws: those add the
    # model discrepancy at extrapolated rows, which the variance criterion would score as
    # removable (the refit criterion takes it in through its own moments, below)
    src = posterior if draws is None else draws
    c = getattr(src, "target_shift", 0.0)  # a signed target: its log law values are of loss + c
    Fc = np.log(predict_draws(src, candidates) + c)
    Fq = np.log(predict_draws(src, queries) + c)
    Fo = np.log(predict_draws(src, observed) + c) if criterion == "refit" else Fq[:, :0]
    if Fc.shape[0] < 3:
        raise BayesScalingError(f"anchor selection needs posterior draws; got {Fc.shape[0]} "
                                "draw(s) (a point fit carries no uncertainty to reduce)")
    with np.errstate(invalid="ignore"):
        ok = np.all(np.isfinite(Fc), 1) & np.all(np.isfinite(Fq), 1) & np.all(np.isfinite(Fo), 1)
    if ok.sum() < 3:
        raise BayesScalingError(f"{int((~ok).sum())} of {len(ok)} draws predict non-positive or "
                                "non-finite losses at the candidates or queries; check the rows' "
                                "columns and ranges")
    if not ok.all():
        # as in bs.evaluate: a draw that overflows somewhere is dropped whole, never per row
        warnings.warn(f"{int((~ok).sum())} of {len(ok)} posterior draws predict non-finite losses "
                      "at the candidates or queries; they are left out of the selection",
                      RuntimeWarning, stacklevel=2)
        Fc, Fq, Fo = Fc[ok], Fq[ok], Fo[ok]
    S = Fc.shape[0]
    n_c, n_q = Fc.shape[1], Fq.shape[1]
    s2, noise_src = _noise_var(posterior, draws, noise, n_c)
    w = np.full(n_q, 1.0 / n_q) if query_weights is None else np.asarray(query_weights, float)
    if w.shape != (n_q,) or np.any(w < 0) or not np.isfinite(w).all():
        raise BayesScalingError(f"query_weights must be {n_q} non-negative numbers")

    if criterion == "refit":
        tables = (queries, candidates, observed)
        moments, disc = _discrepancy_moments(posterior, tables, (Fq, Fc, Fo), float(np.mean(s2)),
                                       discrepancy)
        modes, K, obs = _refit_setup(draws.law if draws is not None else posterior.law, tables,
                                     (Fq, Fc, Fo), w, moments)

    def run(power):
        if criterion == "refit":
            return (*greedy_refit(modes, n_q, obs, n_q + np.arange(n_c), K, float(np.mean(s2)),
                                  costs, float(budget), cost_power=power), [])
        if method == "linear":
            C = np.cov(np.concatenate([Fq, Fc], axis=1), rowvar=False).reshape(n_q + n_c, -1)
            return (*greedy_linear(C, n_q, s2, costs, float(budget), criterion=criterion,
                                   weights=w, cost_power=power), [])
        return greedy_importance(Fc, Fq, s2, costs, float(budget), weights=w, cost_power=power,
                                 n_sim=n_sim, seed=seed)

    rule, (picks, values, v0, ess), final = best_rule(
        run, ("ratio", "gain") if greedy == "auto" else (greedy,))
    extra = {"greedy": rule, "final_by_rule": final}
    if method == "importance":
        extra["ess"] = ess
        if ess and min(ess) < 0.05 * S:
            warnings.warn(f"importance weights collapsed (mean ESS {min(ess):.1f} of {S} draws); "
                          "use more draws or method='linear'", stacklevel=2)

    rows = []
    prev, cum = v0, 0.0
    for step, (c, v) in enumerate(zip(picks, values), 1):
        cum += costs[c]
        row = {"step": step, "candidate": candidates.index[c]}
        row.update(candidates.iloc[c].to_dict())
        gain = prev - v
        row.update(cost=costs[c], cum_cost=cum, criterion_before=prev, criterion_after=v, gain=gain,
                   gain_per_cost=gain / costs[c],
                   reduction=(v0 - v) / v0 if criterion != "entropy" else v0 - v)
        rows.append(row)
        prev = v
    out = pd.DataFrame(rows)
    if criterion == "refit":
        extra.update(disc)
    out.attrs.update(criterion=criterion, method=method, initial=v0, noise_var=float(np.mean(s2)),
                     noise_source=noise_src, n_draws=S, budget=float(budget), **extra)
    return out


def _discrepancy_moments(posterior, tables, values, noise_var: float, discrepancy):
    """``((M, H), info)``: the second moments over the rows of ``tables`` (queries, candidates,
    observed) of the discrepancy's two parts, and what they rest on: ``M_ij = E[s_i s_j]`` of the
    sd ``s`` of its part that varies between rows (the kernel's), and ``H_ij = E[m_i m_j]`` of its
    systematic part ``m`` shared by the rows that leave the fitted range the same way.

    ``discrepancy="rehearsal"`` (a :class:`~bayes_scaling.bayes.posterior.Posterior` that knows
    its fitted table): the posterior's own extrapolation discrepancy, the one its forecasts use
    (docs/forecasting.md): ``s_i = tau d_i^p`` and ``m_i = mu d_i^p`` with ``d_i`` the row's
    extrapolation distance (0 inside the fitted range) and ``(p, tau, mu)`` from the grid
    posterior of the leave-future-out rehearsal along the row's signature
    (``settings["discrepancy"]`` a number ``tau``: ``s_i = tau d_i``, ``m = 0``; ``"off"``: both
    0; ``"expansion"``: ``s = 0`` and ``H = Phi (V + c c') Phi'`` with ``Phi`` the rows'
    ``phi_perp`` and ``c ~ N(c, V)`` the expansion's coefficients, shared by every row).
    Rows of one signature share ``(p, tau, mu)``, so ``M_ij = sum_g w_g tau_g^2 d_i^p_g
    d_j^p_g`` and ``H_ij = sum_g w_g (mu_g^2 + sd(mu)_g^2) d_i^p_g d_j^p_g``; signatures are
    rehearsed apart, so across two of them the products of the means. Otherwise a stationary
    sd, ``M = s_d^2`` and ``H = 0``: the number given,
    by default ``max(s, 0.1 sd)`` of the posterior mean log loss over the observed rows, as
    ``bs.design``'s posterior."""
    if isinstance(discrepancy, str):
        if discrepancy != "rehearsal":
            raise BayesScalingError(f"discrepancy must be None, 'rehearsal' or a non-negative sd, "
                                    f"got {discrepancy!r}")
        if not (isinstance(posterior, Posterior) and len(fitted_table(posterior))):
            raise BayesScalingError("discrepancy='rehearsal' needs a Posterior fitted on a table "
                                    "(bs.fit_posterior): these draws carry no rehearsal; pass "
                                    "discrepancy=<sd of the misfit in log loss> instead")
        return _rehearsed_moments(posterior, tables)
    if discrepancy is None:
        s_d = max(np.sqrt(noise_var), DISC_REL * float(np.std(values[2].mean(0))))
        basis = "stationary: max(noise sd, 0.1 sd of the fitted log loss)"
    else:
        s_d = float(discrepancy)
        if not (np.isfinite(s_d) and s_d >= 0):
            raise BayesScalingError(f"discrepancy must be a non-negative sd, got {discrepancy!r}")
        basis = "stationary: given"
    return (s_d ** 2, 0.0), {"discrepancy": s_d, "discrepancy_sd_queries": s_d,
                      "discrepancy_basis": basis}


def _rehearsed_moments(post, tables):
    """:func:`_discrepancy_moments` from the posterior's own extrapolation discrepancy."""
    mode = post.settings.get("discrepancy", "auto")
    fitted, columns = fitted_table(post), input_columns(post.law)
    n_q = len(tables[0])
    if mode == "expansion":  # one coefficient vector shared by every row: all systematic
        ex, scale = post.expansion(), expansion_scale(post)
        mean, cov = ex.coefficients(scale)
        P = ex.phi_perp(pd.concat(tables, ignore_index=True))
        H = P @ (cov + np.outer(mean, mean)) @ P.T
        return (np.zeros_like(H), H), {
            "discrepancy": "expansion",
            "discrepancy_sd_queries": float(np.sqrt(np.mean(np.diag(H)[:n_q]))),
            "discrepancy_basis": ex.describe(scale)}
    decades = None
    if mode == "auto":
        fr = FittedRange(fitted, columns)  # one hull for every table
        parts = [fr.locate(t) for t in tables]
        d = np.concatenate([p[0] for p in parts])
        sigs = np.concatenate([p[1] for p in parts])
        decades = np.concatenate([fr.decades(t) for t in tables])
    else:
        tau = 0.0 if mode == "off" else float(mode)
        d = np.concatenate([extrapolation_distance(post, t) for t in tables])
        sigs = np.full(len(d), "" if mode == "off" else "fixed", dtype=object)
    mean_s, mean_m, blocks, basis = np.zeros(len(d)), np.zeros(len(d)), [], {}
    for sig in sorted(set(sigs) - {""}):
        rows = np.flatnonzero(sigs == sig)
        if sig == "fixed":
            g = {"p": [1.0], "tau": [tau], "mu": [0.0], "mu_sd": [0.0], "w": [1.0],
                 "basis": "fixed tau"}
        else:
            g = signature_grid(post, sig)
        wt, tau_g, p_g, mu_g, mu_sd = (np.asarray(g[k], float)
                                       for k in ("w", "tau", "p", "mu", "mu_sd"))
        dist = d[rows] if decades is None else grid_distance(g, d[rows], decades[rows])
        dp = dist[None, :] ** p_g[:, None]  # (grid points, rows)
        s, m = tau_g[:, None] * dp, mu_g[:, None] * dp
        mean_s[rows], mean_m[rows] = wt @ s, wt @ m
        shift = (mu_g ** 2 + mu_sd ** 2)[:, None] * dp
        blocks.append((rows, s.T @ (wt[:, None] * s), dp.T @ (wt[:, None] * shift)))
        basis[sig] = g["basis"]
    M, H = np.outer(mean_s, mean_s), np.outer(mean_m, mean_m)
    for rows, block_s, block_m in blocks:
        M[np.ix_(rows, rows)], H[np.ix_(rows, rows)] = block_s, block_m
    return (M, H), {"discrepancy": "rehearsal",
                    "discrepancy_sd_queries": float(np.sqrt(np.mean(np.diag(M + H)[:n_q]))),
               "discrepancy_basis": "; ".join(f"{k}: {v}" for k, v in basis.items())
               or "no row outside the fitted range"}


def _refit_setup(law, tables, values, weights, moments):
    """The inputs of :func:`~bayes_scaling.design.acquisition.greedy_refit` for
    ``criterion="refit"``: the draws' joint covariance of the log law values over the rows of
    ``tables`` (queries, candidates, observed), factored as ``C = J J'`` (one mode, ``S = I``:
    ``J S J'`` is then ``C`` and every rank-one update of ``S`` conditions ``C``); the
    discrepancy's second moments ``M o k + H`` (``moments`` ``(M, H)`` of
    :func:`_discrepancy_moments`: the varying part's times the kernel over the standardised log
    inputs, elementwise, plus the systematic part's; query rows scaled by the square roots of
    the query weights, which weights each query's expected error); and the observed rows'
    indices."""
    F = np.concatenate(values, axis=1)
    n_q, n_c = values[0].shape[1], values[1].shape[1]
    evals, evecs = np.linalg.eigh(np.cov(F, rowvar=False))
    keep = evals > 1e-12 * max(evals.max(), 1e-300)
    J = evecs[:, keep] * np.sqrt(evals[keep])
    x = [{v: np.asarray(a, float) for v, a in law.inputs(t).items()} for t in tables]
    ref = {v: np.concatenate([x[1][v], x[2][v]]) for v in law.variables}
    z = np.concatenate([log_inputs(law, xi, ref) for xi in x])
    scale = np.concatenate([np.sqrt(weights), np.ones(len(F.T) - n_q)])
    M, H = moments
    K = (M * kernel(z, z) + H) * np.outer(scale, scale)
    J = J * scale[:, None]
    obs = n_q + n_c + np.arange(values[2].shape[1])
    return [(1.0, J, np.eye(J.shape[1]))], K, obs
