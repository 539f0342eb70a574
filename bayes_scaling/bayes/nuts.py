"""NUTS on the whitened sampling space, its starts, and its convergence diagnostics.

References: Vehtari et al. (2021) "Rank-normalization, folding, and localization" for R-hat and
bulk/tail ESS.
"""
from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ..errors import BayesScalingError, ConvergenceWarning
from .distributions import FlatPrior
from .divergences import describe_sites, divergence_sites
from .model import cached, log_joint_batch, log_joint_z, unwhiten, whiten_funnel
from . import progress
from .priors import draw_prior
from .spec import Spec


# Convergence thresholds (Vehtari et al. 2021): every one must hold for ``Posterior.ok``.
RHAT_MAX = 1.01
ESS_PER_CHAIN = 100
BFMI_MIN = 0.3
#: share of iterations at the maximum tree depth from which a failed run's advice names it
DEPTH_HITS_ADVICE = 0.25


def _whitened_model(spec: Spec, funnel=None):
    d = len(spec.sampled)
    log_joint = log_joint_z(spec, funnel)

    def model(data, center, chol):
        z = numpyro.sample("z", dist.ImproperUniform(constraints.real_vector, (), (d,)))
        numpyro.factor("log_joint", log_joint(z, data, center, chol))

    return model


def _chains(spec, *, num_chains, num_warmup, chain_method, dense_mass, target_accept,
            max_tree_depth, shapes=(), funnel=None):
    """The compiled chains of a NUTS kernel for ``spec`` (:class:`~.progress.Chains`), cached so
    later fits of the same shape reuse its programs (the data, centre and whitening matrix are
    their arguments). ``shapes`` (the data's array shapes) and ``funnel``
    (:func:`~.model.unwhiten`) are part of the key, as is ``num_warmup``: NumPyro's kernel holds
    the warm-up schedule its last initialisation was given."""
    from numpyro.infer import NUTS

    def build():
        kernel = NUTS(_whitened_model(spec, funnel), dense_mass=dense_mass,
                      target_accept_prob=target_accept, max_tree_depth=max_tree_depth,
                      init_strategy=numpyro.infer.init_to_median)
        return progress.Chains(kernel, num_warmup, chain_method)

    key = ("chains", num_chains, num_warmup, chain_method, dense_mass, target_accept,
           max_tree_depth, shapes) + ((funnel,) if funnel is not None else ())
    return cached(key, spec, build)


#: the key of a run's ``extra`` that holds what :func:`continue_nuts` needs (the whitening and the
#: chains' last states); the ladder removes it before the draws leave it
RESUME = "resume"
#: the key of a run's ``extra`` set when its deadline stopped it: ``(draws made, draws asked)``
#: per chain; removed with :data:`RESUME`
STOPPED = "stopped"


def run_nuts(spec, data, center, chol, init_z, *, seed, resume=None, funnel=None, **kw):
    """NUTS chains in the whitened coordinates ``z = chol^-1 (s - center)`` from ``init_z`` (one
    row per chain): ``(s, extra)``, the draws ``(chains, draws, d)`` in the sampling coordinates
    and the sample stats, ``extra[RESUME]`` holding what :func:`continue_nuts` needs. With
    ``resume`` (a NumPyro state after warm-up), the chains start from it and skip the warm-up.
    ``funnel``: the index of ``log sigma``, whose value scales the other coordinates' distance
    from the centre (:func:`~.model.unwhiten`; the ladder's non-centred retry). ``deadline`` (a
    ``time.perf_counter()`` value or ``None``): past it the sampling stops early
    (:meth:`~.progress.Chains.run`), and ``extra[STOPPED]`` says how many draws were made."""
    shapes = tuple(np.shape(a) for a in jax.tree_util.tree_leaves(data))
    bar = progress.wanted(kw.pop("progress_bar", False))
    num_samples, deadline = kw.pop("num_samples"), kw.pop("deadline", None)
    chains = _chains(spec, shapes=shapes, funnel=funnel, **kw)
    z, extra, last = chains.run(seed, init_z, (data, jnp.asarray(center), jnp.asarray(chol)), {},
                                num_samples, resume=resume, bar=bar, deadline=deadline)
    s = unwhiten(z, np.asarray(center, float), np.asarray(chol, float), funnel, np)[0]
    extra[RESUME] = (np.asarray(center), np.asarray(chol), last, funnel)
    if s.shape[1] < num_samples:
        extra[STOPPED] = (int(s.shape[1]), int(num_samples))
    return s, extra


def continue_nuts(spec, data, run, more, *, seed, **kw):
    """``run``'s chains continued for ``more`` draws each, with no new warm-up: the same
    whitening, step size and mass matrix, each chain from its last state. Returns ``run``'s draws
    followed by the new ones, shaped as one run of the longer length (what running the chains
    longer in the first place would have given)."""
    s0, extra0 = run
    center, chol, state, funnel = extra0[RESUME]
    z_last = np.asarray(state.z["z"])
    s1, extra1 = run_nuts(spec, data, center, chol, z_last.reshape(kw["num_chains"], -1),
                          seed=seed, resume=state, funnel=funnel,
                          **dict(kw, num_samples=int(more)))
    extra = {k: np.concatenate([extra0[k], v], 1) for k, v in extra1.items()
             if k not in (RESUME, STOPPED)}
    extra.update({k: extra1[k] for k in (RESUME, STOPPED) if k in extra1})
    return np.concatenate([s0, s1], 1), extra


_MEANING = {
    "rhat": ("R-hat {v:.3f} > {t} for {p}: the chains disagree about it (not mixed, or several "
             "modes)", "run longer (num_warmup/num_samples), give {p} a more informative prior, or "
             "look at post.modes and az.plot_trace(post.idata, var_names=['{p}'])"),
    "ess_bulk": ("bulk ESS {v:.0f} < {t} for {p}: its posterior mean and intervals rest on few "
                 "effective draws", "draw more (num_samples) or reparameterise/tighten {p}"),
    "ess_tail": ("tail ESS {v:.0f} < {t} for {p}: its 5%/95% quantiles are unreliable",
                 "draw more (num_samples); check az.plot_pair for a funnel involving {p}"),
}


def nuts_diagnostics(idata, names, num_chains, max_tree_depth) -> dict:
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = idata.posterior[list(names)]
        summ = pd.DataFrame({
            "r_hat": {n: float(az.rhat(post)[n]) for n in names},
            "ess_bulk": {n: float(az.ess(post, method="bulk")[n]) for n in names},
            "ess_tail": {n: float(az.ess(post, method="tail")[n]) for n in names},
        })
        bfmi = np.asarray(az.bfmi(idata))
    ss = idata.sample_stats
    div = int(np.asarray(ss["diverging"]).sum())
    depth_hits = float(np.mean(np.asarray(ss["tree_depth"]) >= max_tree_depth))
    ess_min = ESS_PER_CHAIN * num_chains

    def worst(col, pick):  # the parameter at the extreme ("" when the diagnostic is undefined)
        return str(getattr(summ[col], pick)()) if summ[col].notna().any() else ""

    d = {
        "method": "nuts",
        "max_rhat": float(summ["r_hat"].max()), "worst_rhat": worst("r_hat", "idxmax"),
        "min_ess_bulk": float(summ["ess_bulk"].min()), "worst_ess_bulk": worst("ess_bulk", "idxmin"),
        "min_ess_tail": float(summ["ess_tail"].min()), "worst_ess_tail": worst("ess_tail", "idxmin"),
        "divergences": div, "min_bfmi": float(bfmi.min()), "tree_depth_hits": depth_hits,
        "thresholds": {"rhat": RHAT_MAX, "ess": ess_min, "divergences": 0, "bfmi": BFMI_MIN},
        "per_param": json.loads(summ[["r_hat", "ess_bulk", "ess_tail"]].to_json(orient="index")),
    }
    failed, advice = [], []
    if summ["r_hat"].isna().all():
        failed.append("R-hat is undefined (too few chains or draws): convergence is not checked")
        advice.append("run at least 2 chains of a few hundred draws")
    for key, thr, bad in (("rhat", RHAT_MAX, summ["r_hat"] > RHAT_MAX),
                          ("ess_bulk", ess_min, summ["ess_bulk"] < ess_min),
                          ("ess_tail", ess_min, summ["ess_tail"] < ess_min)):
        col = "r_hat" if key == "rhat" else key
        for p in summ.index[bad.to_numpy()]:
            what, fix = _MEANING[key]
            failed.append(what.format(v=summ.loc[p, col], t=thr, p=p))
            advice.append(fix.format(p=p))
    if div:
        sites = divergence_sites({n: post[n].values for n in names}, ss["diverging"].values)
        where = describe_sites(sites)
        failed.append(f"{div} divergent transitions: the sampler met curvature it cannot follow, "
                      "so part of the posterior may be missed" + (f"; they sit {where}" if where
                                                                    else ""))
        named = ", ".join(s["name"] for s in sites) or "the parameters involved"
        advice.append(f"raise target_accept (e.g. 0.995), or give {named} (see "
                      "az.plot_pair(post.idata, divergences=True)) more informative priors"
                      + (", fix it, or add runs that pin it there" if len(sites) == 1 else ""))
    if bfmi.min() < BFMI_MIN:
        failed.append(f"BFMI {bfmi.min():.2f} < {BFMI_MIN}: the energy of the chains moves slowly "
                      "(heavy tails or a funnel)")
        advice.append("reparameterise or tighten the prior of the heavy-tailed parameter")
    if failed and depth_hits >= DEPTH_HITS_ADVICE:
        # not a failure of its own (the draws are valid), but why more draws come dear: every
        # iteration at the cap costs 2^max_tree_depth - 1 gradients and still ends its path early
        advice.append(f"the sampler reached its maximum tree depth ({max_tree_depth}) in "
                      f"{100 * depth_hits:.0f}% of iterations: the posterior is a long or curved "
                      "ridge the mass matrix does not straighten, so each draw costs "
                      f"{2 ** max_tree_depth - 1} gradients and more draws come dear; fix or "
                      "inform the parameters along the ridge (az.plot_pair), or raise "
                      "max_tree_depth")
    d["failed"], d["advice"], d["ok"] = failed, advice, not failed
    return d


def warn_diagnostics(law_name, d):
    """A :class:`ConvergenceWarning` naming the failing parameters, what failed, the attempts
    the engine made (``d["attempts"]``) and what to try."""
    if d["ok"]:
        return
    lines = "\n  - ".join(d["failed"][:8])
    fixes = "\n  - ".join(dict.fromkeys(d["advice"]))
    params = failing_params(d)
    which = f" (failing: {', '.join(params)})" if params else ""
    tried = describe_attempts(d.get("attempts", []))
    tried = ("\nAttempts made:\n  - " + "\n  - ".join(tried)) if tried else ""
    warnings.warn(f"posterior of {law_name} failed convergence checks{which}:\n  - {lines}"
                  f"{tried}\nWhat to try:\n  - {fixes}", ConvergenceWarning, stacklevel=3)


def chain_groups(idata, names) -> list[list[int]]:
    """Group chains whose means agree (within 4 pooled within-chain sds on every parameter)."""
    post = idata.posterior
    C = post.sizes["chain"]
    means = np.stack([np.asarray(post[n]).mean(1) for n in names], 1)      # (C, P)
    sds = np.stack([np.asarray(post[n]).std(1).mean(0) for n in names])    # (P,)
    groups: list[list[int]] = []
    for c in range(C):
        for g in groups:
            if np.all(np.abs(means[c] - means[g[0]]) <= 4 * sds + 1e-12):
                g.append(c)
                break
        else:
            groups.append([c])
    return groups


def use_chain_devices(num_chains: int) -> int:
    """Give this process one CPU device per chain, so ``fit_posterior``'s ``"auto"`` chain method
    runs the chains in parallel (34 s against 55 s vectorised for the Form-3 benchmark on 2 cores,
    BENCHMARKS.md). Call it before the first JAX computation; an ``XLA_FLAGS`` device count set by
    the user is left alone. Once JAX has started, the count can no longer change in this process,
    and ``XLA_FLAGS`` is left as it was (the processes it starts would inherit a count that
    nobody asked for). Returns the number of devices the process has."""
    import os

    before = os.environ.get("XLA_FLAGS")
    if "xla_force_host_platform_device_count" in (before or ""):
        return jax.local_device_count()
    numpyro.set_host_device_count(int(num_chains))
    devices = jax.local_device_count()
    if devices != int(num_chains):  # JAX had started: the setting changed nothing here
        if before is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = before
    return devices


def jittered_inits(spec, data, modes, center, chol, num_chains, rng, scale=0.5, tries=30):
    """One start per chain: the modes in turn, each jittered by ``scale`` times its Laplace sd.
    The jitter is halved until the start's log density is finite and at most ``5 + d`` nats
    below the mode's (a Gaussian's jitter of half its sd costs ``d / 8`` on average): where the
    Laplace Gaussian does not describe the mode, a start far down a wall or a ridge's end can
    leave a chain there, its step size adapted to nothing (ScaleBench vocab sl_9: a chain 513
    nats below the others, step size 0, every iteration at the largest tree)."""
    f = log_joint_batch(spec)
    floors = np.asarray(f(jnp.asarray(np.stack([m.s for m in modes])), data)) - 5 - len(center)
    z0 = []
    for c in range(num_chains):
        m, floor = modes[c % len(modes)], floors[c % len(modes)]
        zm = np.linalg.solve(chol, m.s - center)
        sc = scale
        for _ in range(tries):
            z = zm + sc * np.linalg.solve(chol, m.chol @ rng.standard_normal(len(zm)))
            lp = float(np.asarray(f(jnp.asarray(center + chol @ z)[None], data))[0])
            if np.isfinite(lp) and not lp < floor:
                break
            sc *= 0.5
        else:
            z = zm
        z0.append(z)
    return np.stack(z0)


def run_modes(models, modes, *, whiten, rng, seed, num_chains, **kw):
    """``num_chains`` NUTS chains per mode, each mode's chains started there (jittered) and
    whitened by its own Laplace covariance; ``models[k]`` is the ``(spec, data)`` mode ``k`` is
    sampled in. One ``(s, extra)`` per mode, in its own coordinates (see :func:`run_nuts`)."""
    out = []
    for k, ((spec, data), m) in enumerate(zip(models, modes)):
        d = len(spec.sampled)
        center, chol = (m.s, m.chol) if whiten else (np.zeros(d), np.eye(d))
        z0 = jittered_inits(spec, data, [m], center, chol, num_chains, rng)
        out.append(run_nuts(spec, data, center, chol, z0, seed=seed + k, num_chains=num_chains,
                            **kw))
    return out


# --- the escalation ladder: what to try after a failed run --------------------------------------
#
# A run that fails its checks is retried by ``fit_posterior`` (``retries``): each retry starts its
# chains at draws of the previous run (divergent transitions excluded) and whitens the space by
# the covariance of those draws, which follows a ridge or a banana's bulk where the Laplace
# covariance at the mode does not. What else changes depends on the failure, worst first:
#
# - divergences or a low BFMI: a smaller step (the acceptance target ``t`` raised to
#   ``1 - (1 - t) / 4``: 0.99 -> 0.9975 -> 0.999375) after twice the warm-up, with the draws an
#   earlier retry added for ESS given back down to what the measured ESS per draw needs (never
#   below the first attempt's): a rare divergence is found in proportion to the draws, and the
#   budget they would take is the next smaller step's;
# - chains split into groups with different means: twice the warm-up, from the pooled draws;
# - R-hat or ESS: a longer run. ESS grows in proportion to the draws at a given ESS per draw, so
#   the draws are multiplied by the power of two that brings the worst ESS 25% above its
#   threshold (at least 2, at most 4 per retry: the next retry sizes the rest from its own ESS
#   per draw). When R-hat is at most ``LADDER_CONTINUE_RHAT`` the chains are run on from where
#   they stopped (their step size and mass matrix kept, no new warm-up, the draws appended), and
#   cost only the new draws. Otherwise it is a new run, whitened by the draws; a failing R-hat
#   then also doubles the warm-up, on the first retry or when the ESS suffices (on a later retry
#   with few effective draws its excess is as likely noise as disagreement, and more draws
#   address both).
#
# The warm-up grows to at most ``LADDER_MAX_WARMUP`` times the first attempt's, and all the
# attempts of a run together cost at most ``LADDER_COST_CAP`` times the first (in sampler
# iterations, warm-up included).
LADDER_RETRIES = 3
LADDER_COST_CAP = 8.0
LADDER_MAX_WARMUP = 4
# at most this many times the draws per retry: the retry's whitening by the draws usually raises
# the ESS per draw, so a large shortfall is sized again from the retry's own ESS
LADDER_MAX_DRAWS_STEP = 4
# R-hat at or below which a run short of R-hat or ESS has its chains run on for more draws
# (``CONTINUE``: the same chains, step size and mass matrix, no new warm-up) instead of a new run:
# chains that nearly agree need draws, not a new adaptation
LADDER_CONTINUE_RHAT = 1.05
CONTINUE = "the same chains run on"
SMALLER_STEP = "smaller step"


def next_attempt(diag, kw, first, spent):
    """What to try after a run with diagnostics ``diag`` and settings ``kw`` (``first``: the first
    attempt's; ``spent``: iterations per chain used so far): ``(action, why, new_kw)``, or
    ``(None, why, None)`` when no retry can help or the budget is spent."""
    budget = LADDER_COST_CAP * (first["num_warmup"] + first["num_samples"]) - spent
    W, S, t = kw["num_warmup"], kw["num_samples"], kw["target_accept"]
    W_max = LADDER_MAX_WARMUP * first["num_warmup"]
    need = diag["thresholds"]["ess"]
    ess = np.nanmin([diag["min_ess_bulk"], diag["min_ess_tail"], np.inf])
    split = len(diag.get("chain_groups", [[0]])) > 1
    rhat = diag["max_rhat"]
    if not np.isfinite(rhat):
        return None, "R-hat is undefined (one chain, or too few draws): no retry can check it", None
    new = dict(kw)
    if diag["divergences"] or diag["min_bfmi"] < BFMI_MIN:
        why = (f"{diag['divergences']} divergent transitions" if diag["divergences"] else
               f"BFMI {diag['min_bfmi']:.2f} < {BFMI_MIN}")
        new.update(target_accept=1.0 - (1.0 - t) / 4, num_warmup=min(2 * W, W_max),
                   num_samples=_draws_needed(S, first["num_samples"], ess, need))
        action = SMALLER_STEP
    elif split:
        why = f"the chains split into {len(diag['chain_groups'])} groups with different means"
        new.update(num_warmup=min(2 * W, W_max))
        action = "restart from the pooled draws"
        if new == kw:  # the warm-up is at its cap: more draws instead
            new.update(num_samples=2 * S)
    elif rhat > RHAT_MAX or ess < need:
        # a high R-hat with few effective draws is as likely noise as disagreement: a longer run
        # addresses both. Chains that nearly agree are run on (no new warm-up); otherwise a new
        # run, with twice the warm-up when R-hat fails, draws multiplied as ESS asks
        factor = 1.25 * need / max(ess, 1.0)
        go_on = rhat <= LADDER_CONTINUE_RHAT
        reasons = []
        if rhat > RHAT_MAX:
            reasons.append(f"R-hat {rhat:.3f} > {RHAT_MAX} ({diag['worst_rhat']})")
            if not go_on and (ess >= need or W == first["num_warmup"]):
                new.update(num_warmup=min(2 * W, W_max))  # else more draws address R-hat's noise
        if ess < need:
            worst = (diag["worst_ess_bulk"] if diag["min_ess_bulk"] <= ess
                     else diag["worst_ess_tail"])
            reasons.append(f"ESS {ess:.0f} < {need} ({worst}; "
                           f"{ess / (S * kw['num_chains']):.3f} per draw: about {factor:.1f}x the "
                           "draws needed)")
        why = "; ".join(reasons)
        m = min(2 ** int(np.ceil(np.log2(max(factor, 2.0)))), LADDER_MAX_DRAWS_STEP)
        while m >= 2 and ((m - 1) * S if go_on else new["num_warmup"] + m * S) > budget:
            m //= 2
        if m < 2:
            return None, why + f": more draws than the budget ({LADDER_COST_CAP:g}x the first " \
                "attempt's iterations) allows", None
        new.update(num_samples=m * S)
        action = (CONTINUE if go_on else "longer run" if new["num_warmup"] > W else "more draws")
    else:
        return None, "no failure a retry addresses", None
    cost = (new["num_samples"] - S if action == CONTINUE
            else new["num_warmup"] + new["num_samples"])
    if cost > budget:
        return None, (why + f"; the next attempt ({action}) would exceed the budget "
                      f"({LADDER_COST_CAP:g}x the first attempt's iterations)"), None
    return action, why, new


def _draws_needed(S, S_first, ess, need) -> int:
    """Draws per chain for a retry that is not for ESS, after a run of ``S`` draws per chain with
    worst ESS ``ess``: the first attempt's ``S_first`` times the power of two that brings the ESS
    25% above ``need`` at the run's ESS per draw, at most ``S`` (a shortfall of ESS as well keeps
    the draws it has)."""
    if not np.isfinite(ess) or ess <= 0:
        return int(S)
    m = 2 ** int(np.ceil(np.log2(max(1.25 * need * S / ess / S_first, 1.0))))
    return int(max(S_first, min(S, m * S_first)))


def draws_whitening(s, extra, num_chains, rng, funnel=None):
    """``(center, chol, z0)``: the mean and a Cholesky factor of the covariance of draws ``s``
    (chains, draws, dims), and ``num_chains`` starts drawn from them (divergent transitions left
    out), in the whitened coordinates ``z = chol^-1 (s - center)``; ``None`` when the draws are
    not finite or their covariance is singular. With ``funnel`` (the index of ``log sigma``), the
    covariance is that of the draws in the non-centred form of :func:`~.model.unwhiten`."""
    x = s.reshape(-1, s.shape[-1])
    if not np.all(np.isfinite(x)):  # a chain left the support: nothing to whiten by
        return None
    center = x.mean(0)
    w = x - center if funnel is None else whiten_funnel(x, center, funnel)
    cov = np.atleast_2d(np.cov(w, rowvar=False))
    cov = 0.5 * (cov + cov.T) + 1e-10 * np.trace(cov) / len(center) * np.eye(len(center))
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:  # draws on a lower-dimensional set: no whitening by them
        return None
    if not np.all(np.isfinite(chol)):
        return None
    ok = np.flatnonzero(~np.asarray(extra["diverging"], bool).reshape(-1))
    pool = ok if len(ok) >= num_chains else np.arange(len(x))
    pick = rng.choice(pool, num_chains, replace=False)
    z0 = np.linalg.solve(chol, w[pick].T).T
    return center, chol, z0


def failing_params(diag) -> list[str]:
    """The parameters whose R-hat or bulk/tail ESS fails its threshold."""
    thr = diag.get("thresholds", {})
    out = []
    for p, v in diag.get("per_param", {}).items():
        r, b, t = (v.get(k) for k in ("r_hat", "ess_bulk", "ess_tail"))
        if ((r is not None and r > thr.get("rhat", RHAT_MAX))
                or any(e is not None and e < thr.get("ess", 0) for e in (b, t))):
            out.append(p)
    return out


#: a failing parameter whose posterior 90% interval is at least this share of its prior's is
#: one the data barely inform (:func:`prior_bound_advice`)
PRIOR_BOUND_SHARE = 0.5


def prior_bound_advice(spec: Spec, posterior, params, n: int = 4000) -> list[str]:
    """What to do about failing ``params`` the data barely inform: each whose posterior 90%
    interval (on the log scale for a positive parameter) is at least :data:`PRIOR_BOUND_SHARE`
    of its prior's, with the parameters its draws move with (rank correlation above 0.9 in
    absolute value). Its posterior is then mostly its prior along a ridge of the likelihood (e.g.
    a power term's coefficient, exponent and an offset when its input takes two values), which
    NUTS mixes slowly; more draws rarely help. ``posterior``: a mapping of parameter draws
    (``idata.posterior``)."""
    proper = {k: d for k, d in spec.priors.items() if not isinstance(d, FlatPrior)}
    if not any(p in proper for p in params):
        return []
    try:  # a prior given a parameter with a flat prior has no draws either
        prior = draw_prior(proper, jax.random.PRNGKey(0), fixed=spec.fixed, shape=(n,))
    except (BayesScalingError, KeyError):
        return []

    def scaled(*xs):  # the log scale when every draw is positive
        xs = [np.asarray(x, float).ravel() for x in xs]
        return [np.log(x) for x in xs] if all(np.all(x > 0) for x in xs) else xs

    post = {k: scaled(posterior[k])[0] for k in spec.names if k in posterior}
    ranks = {k: np.argsort(np.argsort(v)) for k, v in post.items()}  # a ridge may be curved
    advice = []
    for p in params:
        if p not in post or p not in prior:
            continue
        x, x0 = scaled(posterior[p], prior[p])
        share = np.ptp(np.quantile(x, [0.05, 0.95])) / np.ptp(np.quantile(x0, [0.05, 0.95]))
        if not np.isfinite(share) or share < PRIOR_BOUND_SHARE:
            continue
        with np.errstate(all="ignore"):
            partners = [q for q in post
                        if q != p and abs(np.corrcoef(ranks[p], ranks[q])[0, 1]) > 0.9]
        along = f", along a ridge with {', '.join(partners)}" if partners else ""
        advice.append(f"{p}: its posterior 90% interval is {share:.0%} as wide as its prior's: "
                      f"the data barely inform it{along}, so its posterior is mostly its prior "
                      f"and more draws rarely help; fix it (fixed={{'{p}': value}}), give it an "
                      "informative prior, or add runs that tell it from the parameters it "
                      "trades with")
    return advice


def describe_attempts(attempts) -> list[str]:
    """One line per attempt: what was tried, why, and the diagnostics after it."""
    lines = []
    for a in attempts:
        head = f"mode {a['mode']} attempt {a['attempt']}: {a['action']}"
        if a.get("why"):
            head += f" (because {a['why']})"
        s = a["settings"]
        lines.append(f"{head}: {s['num_warmup']} warm-up, {s['num_samples']} draws, "
                     f"target_accept {s['target_accept']:.6g}, whitened by {s['whitened_by']} -> "
                     f"R-hat {a['max_rhat']:.3f}, bulk ESS {a['min_ess_bulk']:.0f}, tail ESS "
                     f"{a['min_ess_tail']:.0f}, {a['divergences']} divergences"
                     f"{'' if a['ok'] else ', failed'}")
    return lines


def mixture_draws(runs, weights):
    """Pool the modes' draws in proportion to ``weights``: chain ``c`` of the result holds, for
    every mode ``k``, ``round(w_k D)`` draws evenly thinned from mode ``k``'s chain ``c`` (largest
    remainders make the counts add up to ``D``; ``D`` is the longest run's length, or less when a
    mode has fewer than ``w_k D`` draws), interleaved in order so that every stretch of a
    chain holds the modes in proportion (split R-hat then compares like with like). Returns
    ``(s, extra)`` shaped like one run's."""
    w = np.asarray(weights, float) / np.sum(weights)
    lengths = np.array([r[0].shape[1] for r in runs])
    # the modes' runs may differ in length (a retry drew more): as many draws as the longest
    # run, unless a mode would then need more draws than it has
    D = int(min(lengths.max(), np.min(np.where(w > 0, lengths / np.maximum(w, 1e-300), np.inf))))
    counts = np.floor(w * D).astype(int)
    counts[np.argsort(-(w * D - counts))[:D - counts.sum()]] += 1
    idx = [np.linspace(0, r[0].shape[1] - 1, n).round().astype(int) for r, n in zip(runs, counts)]
    order = np.argsort(np.concatenate([(np.arange(n) + 0.5) / n for n in counts]), kind="stable")

    def pool(arrays):
        return np.concatenate([a[:, i] for a, i in zip(arrays, idx)], 1)[:, order]

    s = pool([r[0] for r in runs])
    extra = {key: pool([r[1][key] for r in runs]) for key in runs[0][1]}
    return s, extra


def combine_diagnostics(diags, weights) -> dict:
    """One diagnostics dict for a mixture of modes: the worst value over the sampled modes (each
    computed within its mode), every mode's failures prefixed with its index, and ``modes``: a
    summary per mode with its weight."""
    if len(diags) == 1:
        return {**diags[0], "modes": [_mode_summary(diags[0], 1.0)]}
    out = {"method": "nuts", "thresholds": diags[0]["thresholds"]}
    for key, pick in (("max_rhat", max), ("min_ess_bulk", min), ("min_ess_tail", min),
                      ("min_bfmi", min), ("tree_depth_hits", max)):
        vals = np.asarray([d[key] for d in diags], float)
        if np.isnan(vals).all():  # undefined in every mode (e.g. one chain per mode)
            j = 0
        else:
            j = int(np.nanargmax(vals) if pick is max else np.nanargmin(vals))
        out[key] = float(vals[j])
        worst = key.replace("max_", "worst_").replace("min_", "worst_")
        if worst in diags[j]:
            out[worst] = f"{diags[j][worst]} (mode {j})"
    out["divergences"] = int(sum(d["divergences"] for d in diags))
    per = {}
    for d in diags:
        for p, v in d["per_param"].items():
            q = per.setdefault(p, dict(v))
            q["r_hat"] = _pick(max, q["r_hat"], v["r_hat"])
            q["ess_bulk"] = _pick(min, q["ess_bulk"], v["ess_bulk"])
            q["ess_tail"] = _pick(min, q["ess_tail"], v["ess_tail"])
    out["per_param"] = per
    out["failed"] = [f"mode {k}: {f}" for k, d in enumerate(diags) for f in d["failed"]]
    out["advice"] = [a for d in diags for a in d["advice"]]
    out["ok"] = not out["failed"]
    out["modes"] = [_mode_summary(d, w) for d, w in zip(diags, weights)]
    return out


def _pick(fn, a, b):
    """``fn(a, b)`` over the defined values (a diagnostic read back from JSON may be None)."""
    vals = [v for v in (a, b) if v is not None and np.isfinite(v)]
    return fn(vals) if vals else None


def _mode_summary(d, weight):
    return {"weight": float(weight), "max_rhat": d["max_rhat"], "min_ess_bulk": d["min_ess_bulk"],
            "min_ess_tail": d["min_ess_tail"], "divergences": d["divergences"], "ok": d["ok"]}
