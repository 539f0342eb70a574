"""The escalation ladder of ``fit_posterior``: each NUTS run that fails its checks is run again,
in the way what failed calls for, within a cost cap and an optional time limit."""
from __future__ import annotations

import time

import numpy as np

from .nuts import (CONTINUE, RESUME, SMALLER_STEP, STOPPED, continue_nuts, draws_whitening,
                   next_attempt, run_nuts)

#: a funnel's retry (divergences or a low BFMI, and draws whose spread grows with sigma): the
#: coordinates of :func:`~.model.unwhiten` with ``funnel``, the step size target kept
NON_CENTRED = "non-centred on sigma"

#: the rank correlation between ``log sigma`` and the other coordinates' whitened distance from
#: their mean above which a failed run's draws are a funnel (:func:`funnel_correlation`)
FUNNEL_RHO = 0.5


def funnel_index(spec) -> int | None:
    """The index of ``log sigma`` among ``spec``'s sampled coordinates (None: the scale is fixed,
    or nothing else is sampled)."""
    names = [p.name for p in spec.sampled]
    return names.index("sigma") if "sigma" in names and len(names) > 1 else None


def funnel_correlation(s, funnel) -> float:
    """Rank correlation of ``log sigma`` (coordinate ``funnel`` of draws ``s``) with the log of
    the other coordinates' Mahalanobis distance from their mean. Where the data pin the
    parameters to within a multiple of ``sigma`` (a table the law fits almost exactly), that
    distance grows with ``sigma``: for a funnel the correlation is near 1, for draws whose spread
    does not depend on ``sigma`` near 0."""
    from scipy.stats import spearmanr  # here: scipy.stats is 0.4 s of every import

    x = s.reshape(-1, s.shape[-1])
    if len(x) < 10 or not np.all(np.isfinite(x)):
        return 0.0
    rest = np.delete(x, funnel, axis=1)
    dev = rest - rest.mean(0)
    cov = np.atleast_2d(np.cov(dev, rowvar=False))
    cov = cov + 1e-12 * np.trace(cov) / len(cov) * np.eye(len(cov))
    dist = np.einsum("ij,ij->i", dev, np.linalg.solve(cov, dev.T).T)
    r = spearmanr(x[:, funnel], dist).statistic  # ranks: the log of dist is implied
    return float(r) if np.isfinite(r) else 0.0


def escalate(models, first, check, rng, seed, nuts_kw, retries, whitened_by, start,
             deadline=None, time_limit=None, stopped=None, labels=None):
    """The escalation ladder: retry each run that fails its checks, at most ``retries`` times
    within the cost cap, each retry chosen by :func:`~.nuts.next_attempt` from what failed
    (divergences: a smaller step after a longer warm-up, or, when the draws are a funnel in
    ``sigma`` (:func:`funnel_correlation`), a longer warm-up in non-centred coordinates,
    :func:`~.model.unwhiten`; chains split into groups: a restart from the pooled draws after a
    longer warm-up; R-hat or ESS: a longer run). A new run starts
    at draws of the previous attempt and is whitened by their covariance
    (:func:`~.nuts.draws_whitening`); chains that nearly agree are run on instead
    (:func:`~.nuts.continue_nuts`). ``first[k]`` is mode ``k``'s first run and its seconds;
    ``models[k]`` the ``(spec, data)`` it is sampled in; ``check(spec, data, run)`` gives a
    run's diagnostics. With ``deadline`` (a ``time.perf_counter()`` value; ``time_limit`` the
    seconds it stands for), a retry whose predicted seconds (:func:`predicted_seconds`) pass it
    is not started, and a line saying so is appended to ``stopped``. ``labels[k]``: run ``k``'s
    place among the modes found (the records' and notes' numbering, and its seeds').

    Returns ``(runs, diagnostics, attempts, notes)``: the last run of each mode and its
    diagnostics, one record per attempt (what, why, settings, diagnostics after it) and one note
    per retry and per failure the ladder could not address."""
    runs, diags, attempts, notes = [], [], [], []
    stopped = [] if stopped is None else stopped
    C = nuts_kw["num_chains"]
    for k, ((spec_k, data_k), (run, secs)) in enumerate(zip(models, first)):
        k = k if labels is None else int(labels[k])
        kw, spent = dict(nuts_kw), nuts_kw["num_warmup"] + nuts_kw["num_samples"]
        basis = whitened_by  # what the current run's coordinates are whitened by
        funnel = None  # the index of log sigma once a retry is non-centred on it
        diag = check(spec_k, data_k, run)
        attempts.append(attempt_record(k, 1, "first", "", kw, whitened_by, start, diag, secs,
                                       spent))
        for i in range(retries):
            if diag["ok"]:
                break
            action, why, new = next_attempt(diag, kw, nuts_kw, spent)
            f = funnel_index(spec_k) if action == SMALLER_STEP and funnel is None else None
            rho = funnel_correlation(run[0], f) if f is not None else 0.0
            if rho > FUNNEL_RHO:  # the step a funnel's neck needs fails its mouth: non-centre
                action, funnel = NON_CENTRED, f
                why += (f"; the other coordinates' spread grows with sigma (rank correlation "
                        f"{rho:.2f}): a funnel")
                new = dict(new, target_accept=kw["target_accept"])
            go_on = action == CONTINUE
            white = (draws_whitening(*run, C, rng, funnel=funnel)
                     if action is not None and not go_on else None)
            if action is not None and not go_on and white is None:
                why = ("the draws are not finite or their covariance is singular: they cannot "
                       "whiten a retry")
            if white is None and not go_on:
                notes.append(f"mode {k} (of those found) failed its checks and was not tried "
                             f"again: {why}")
                break
            cost = new["num_samples"] - kw["num_samples"] if go_on else \
                new["num_warmup"] + new["num_samples"]
            late = over_time(attempts[-1], cost, deadline, time_limit)
            if late:
                notes.append(f"mode {k} (of those found) failed its checks; {why}; attempt "
                             f"{i + 2} ({action}) was not made: {late}")
                stopped.append(f"mode {k}: attempt {i + 2} ({action}) was not made: {late}")
                break
            t1 = time.perf_counter()
            step_seed = seed + 7919 * (i + 1) + k
            if go_on:  # the same coordinates: ``basis`` stays
                more = new["num_samples"] - kw["num_samples"]
                run = continue_nuts(spec_k, data_k, run, more, seed=step_seed, **new)
                how = (f"{more} more draws per chain, {new['num_samples']} in all, its warm-up "
                       "and whitening kept")
                started = "where the previous attempt's chains stopped"
            else:
                run = run_nuts(spec_k, data_k, *white, seed=step_seed, funnel=funnel, **new)
                tag = "" if funnel is None else ", non-centred on sigma"
                how = (f"{new['num_warmup']} warm-up, {new['num_samples']} draws, target_accept "
                       f"{new['target_accept']:.6g}, whitened by the previous draws{tag}")
                basis, started = ("the previous attempt's draws" + tag,
                                  "draws of the previous attempt")
            kw, spent = new, spent + cost
            diag = check(spec_k, data_k, run)
            attempts.append(attempt_record(k, i + 2, action, why, kw, basis, started, diag,
                                           time.perf_counter() - t1, cost))
            notes.append(f"mode {k} (of those found): {why}; attempt {i + 2}, {action} ({how}): "
                         + ("passed its checks" if diag["ok"] else
                            "failed: " + "; ".join(diag["failed"][:3])))
        run[1].pop(RESUME, None)
        run[1].pop(STOPPED, None)
        runs.append(run)
        diags.append(diag)
    return runs, diags, attempts, notes


def predicted_seconds(last: dict, iterations: int) -> float:
    """Seconds an attempt of ``iterations`` sampler iterations per chain is expected to take, at
    the rate of ``last`` (an attempt record: its seconds over its iterations)."""
    return float(last["seconds"]) / max(int(last["iterations"]), 1) * int(iterations)


def over_time(last: dict, iterations: int, deadline, time_limit) -> str:
    """Why an attempt of ``iterations`` iterations per chain would pass ``deadline`` (a
    ``time.perf_counter()`` value standing for ``time_limit`` seconds), or ``""``."""
    if deadline is None:
        return ""
    now, rate = time.perf_counter(), predicted_seconds(last, 1)
    if now + rate * iterations <= deadline:
        return ""
    spent = time_limit - (deadline - now)
    return (f"it would take about {rate * iterations:.0f} s ({iterations} iterations a chain at "
            f"the {rate * 1e3:.3g} ms per iteration of the attempt before), {spent:.0f} s of "
            f"time_limit={time_limit:g} s being spent")


def attempts_summary(attempts, retries):
    """One line: the attempts of every mode that failed, or that retries were off."""
    if not retries:
        return "no retry was made (retries=0)"
    failed = sorted({a["mode"] for a in attempts} - {a["mode"] for a in attempts if a["ok"]})
    parts = []
    for k in failed:
        mine = [a for a in attempts if a["mode"] == k]
        parts.append(f"mode {k}: {len(mine)} attempts (" + "; ".join(
            f"{a['action']} -> R-hat {a['max_rhat']:.3f}, bulk ESS {a['min_ess_bulk']:.0f}, "
            f"tail ESS {a['min_ess_tail']:.0f}, {a['divergences']} divergences" for a in mine)
            + ")")
    return ("the engine's retries did not rescue it: " + "; ".join(parts) if parts else
            "every mode passed its own checks; the mixture did not")


def attempt_record(mode, number, action, why, kw, whitened_by, start, diag, seconds, iterations):
    """One attempt's record (JSON-ready) for ``post.diagnostics["attempts"]``: ``num_samples`` is
    the draws per chain of the run it ends with, ``iterations`` what it cost per chain (warm-up
    and draws; only the new draws when the chains were run on)."""
    return {
        "mode": int(mode), "attempt": int(number), "action": action, "why": why,
        "settings": {"num_warmup": int(kw["num_warmup"]), "num_samples": int(kw["num_samples"]),
                     "target_accept": float(kw["target_accept"]), "whitened_by": whitened_by,
                     "start": start},
        "iterations": int(iterations),
        "ok": bool(diag["ok"]), "max_rhat": float(diag["max_rhat"]),
        "min_ess_bulk": float(diag["min_ess_bulk"]), "min_ess_tail": float(diag["min_ess_tail"]),
        "divergences": int(diag["divergences"]), "min_bfmi": float(diag["min_bfmi"]),
        "failed": list(diag["failed"]), "seconds": round(float(seconds), 2),
    }
