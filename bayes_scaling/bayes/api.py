"""``fit_posterior``: the mode search, the sampler (NUTS or Laplace) and the result together."""
from __future__ import annotations

import math
import time
import warnings
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..checks import check_fit_options
from ..data import input_relations, shifted_table
from ..errors import BayesScalingError, MultimodalWarning
from ..objective import data_hash
from .chains import drop_light_groups, first_runs, modes_of_split_chains, weigh_modes
from .coordinates import is_level_block, level_pivot, linear_block, signed_blocks
from .terms import power_blocks, theta_s_one
from .distributions import FlatPrior, HUBER_C
from .ladder import attempts_summary, escalate
from .likelihood import STUDENT_DF
from .model import pointwise_batch, recoord_batch, theta_s_batch
from .modes import find_modes, map_stage, refine_mode, sample_laplace
from .nuts import (LADDER_RETRIES, RHAT_MAX, STOPPED, chain_groups, combine_diagnostics,
                   failing_params, mixture_draws, nuts_diagnostics, prior_bound_advice, run_modes,
                   run_nuts, warn_diagnostics)
from .posterior import Posterior
from .priors import AtReference, log_scale, prior_loc_scale
from .spec import data_pytree, make_spec


def fit_posterior(
    law,
    df: pd.DataFrame,
    *,
    priors=None,
    likelihood: str = "huber",
    num_chains: int = 4,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    seed: int = 0,
    method: str = "nuts",
    fixed: Mapping[str, float] | None = None,
    scale: float | None = None,
    huber_c: float = HUBER_C,
    student_df: float = STUDENT_DF,
    coordinates="auto",
    n_starts: int = 16,
    init: str = "map",
    whiten: bool = True,
    dense_mass: bool = True,
    target_accept: float = 0.99,
    max_tree_depth: int = 10,
    chain_method: str = "auto",
    progress_bar: bool = True,
    max_iter: int = 1000,
    allow_unconverged: bool = False,
    retries: int = LADDER_RETRIES,
    time_limit: float | None = None,
    target_shift: float | None = None,
) -> Posterior:
    """Posterior of ``law``'s parameters given the loss table ``df``.

    Args:
        law: registered law name or :class:`~bayes_scaling.laws.Law`.
        df: loss table (validated as for ``fit_map``).
        priors: ``None`` (the defaults of :func:`default_prior`), ``"flat"``, or
            ``{name: numpyro distribution}`` overriding some of them (``"sigma"`` included), e.g.
            ``{"alpha": dist.Normal(0.35, 0.1)}``; a prior is truncated to its parameter's bounds.
        likelihood: ``"huber"`` (default; threshold ``huber_c`` in units of sigma, so the Huber
            delta of ``fit_map`` is ``huber_c * sigma``), ``"student_t"`` (``student_df`` degrees
            of freedom) or ``"normal"``, all on log residuals.
        num_chains, num_warmup, num_samples: NUTS settings (the Laplace path draws
            ``num_chains * num_samples``).
        seed: seeds the starts, the jitter and the sampler.
        method: ``"nuts"`` or ``"laplace"`` (Gaussian at the mode of the sampled density, checked
            by the Pareto k of its importance ratios).
        fixed: ``{name: value}`` parameters held fixed (e.g. a two-phase fit's base).
        scale: fix sigma (no prior on it) instead of inferring it.
        coordinates: sampling coordinates, ``"auto"`` (declared for the law, then adapted to
            the table by each block's ``switch``, e.g. :func:`gate_coordinates`), ``None`` or a
            tuple of :class:`Coordinates` (used as given). ``post.settings["coordinates"]``
            names the blocks sampled.
        n_starts: multi-start size of the mode search.
        init: ``"map"`` (``num_chains`` chains per mode, started near it, jittered by half its
            Laplace sd; see Returns) or ``"uniform"`` (one set of chains, NumPyro's default
            start: uniform in (-2, 2) on the unconstrained scale).
        whiten: sample ``z`` with ``s = s_hat + L z`` (``L L^T`` the Laplace covariance of the
            mode the chains start at).
        dense_mass, target_accept, max_tree_depth: NUTS settings (the high default acceptance
            target keeps the step small enough for the curved, weakly identified posteriors of
            the PTPP laws on few PTPP levels; see docs/priors.md).
        chain_method: ``"auto"`` (``"parallel"`` when the process has a device per chain,
            else ``"vectorized"``), ``"vectorized"`` (all chains in one program), ``"sequential"``
            or ``"parallel"`` (one chain per device). On CPU, devices are made by calling
            ``use_chain_devices(num_chains)`` before JAX starts (the CLI does it):
            parallel chains share the cores and each stops its trees on its own; on the Form-3
            benchmark this took 34 s against 55 s vectorized on 2 cores (BENCHMARKS.md).
        progress_bar: a bar on stderr over each sampling run's iterations, in its phase (warm-up,
            sampling); never shown in CI or a pytest worker (``bs.bayes.progress``).
        max_iter: L-BFGS iterations per start.
        allow_unconverged: accept a posterior that fails its convergence checks for later use
            (stored as ``post.settings["allow_unconverged"]``; a failed posterior is otherwise
            refused where it is used).
        retries: how many times a mode's NUTS run that fails its checks is run again before
            the posterior is marked failed (default 3; 0: never). Each retry is chosen from what
            failed, worst first: divergences or a low BFMI -> a smaller step (``target_accept``
            ``t`` -> ``1 - (1 - t) / 4``) after twice the warm-up; chains split into groups ->
            a restart from the pooled draws after twice the warm-up; R-hat or bulk/tail ESS ->
            a longer run: the draws multiplied by the power of two (2 to 4 per retry) that the
            measured ESS per draw says brings the worst ESS 25% past its threshold, and twice
            the warm-up if R-hat failed (on a later retry only if the ESS suffices). Every retry
            starts its chains at draws of the previous attempt (divergent ones left out) and
            whitens the space by those draws' covariance rather than the Laplace covariance at
            the mode (which misfits ridges and curved posteriors). The warm-up grows to at
            most 4x the first attempt's and the attempts of one mode together cost at most 8x
            the first attempt's sampler iterations (``nuts.LADDER_MAX_WARMUP``,
            ``nuts.LADDER_COST_CAP``). A retry replaces the previous draws; its settings are in
            ``post.diagnostics["attempts"]``.
        time_limit: seconds the call may take before it stops trying (``None``: no limit). It
            is checked before each retry, and before the second round of sampling when the
            chains found modes the optimiser missed: a retry is started only when the seconds
            spent plus its predicted seconds (its iterations at the rate of the mode's last
            attempt) fit in the limit. A run that is drawing when the limit passes stops after
            the call of at most ``bs.bayes.progress.SEGMENT`` iterations in progress, keeping
            the draws made (a warm-up is never cut, and each mode's first run makes one such
            call of draws), so the call ends past the limit by at most a warm-up and one call
            per mode, plus the checks. A
            posterior the limit stopped fails its checks like any other (refused unless
            ``allow_unconverged``), and its failure says which run was stopped after how many
            draws, or which attempt was not made and its predicted seconds.
        target_shift: the likelihood is on ``log L``, so a signed target (values at or below 0,
            e.g. a loss minus the unigram entropy) is fitted as ``L + c``: ``None`` (default)
            picks ``c`` from the table when some loss is not positive
            (:func:`bayes_scaling.data.target_shift_of`; 0 otherwise; a table positive but at
            some rows says so with a :class:`~bayes_scaling.errors.SignedTargetWarning` naming
            them), a number fixes it, 0 refuses such a table. The posterior's law is then ``law.shifted(c)``, its table and
            likelihood are those of ``L + c``, and its forecasts, coverage and scores are of ``L``
            (``post.target_shift``; ``post.settings["target_shift"]``).

    Returns:
        :class:`Posterior`. With NUTS from the modes (``init="map"``), a posterior with several
        separated modes is a weighted mixture: each mode's chains are diagnosed within the mode,
        modes one of whose chains ended in another's basin are dropped as duplicates (at their
        first run, before any retry; a mode in whose basin a chain of a mode already run mostly
        ended is not run at all: :func:`~.chains.first_runs`), the rest
        are weighted by their bridge-sampled posterior mass (:func:`basin_log_masses`; below
        ``MIN_MODE_WEIGHT`` a mode is dropped), and the stored chains hold every mode's draws in
        proportion to its weight. When a coordinate block splits the space into sides (e.g. the
        sign of the PTPP gate's exponent) and the modes lie on several, each mode is sampled in
        its side's coordinates (``post.settings["sides"]``). A mode whose run fails its checks is
        run again (``retries``, :func:`~.ladder.escalate`). When its chains still split into groups,
        Newton from each group's best draw may find modes the optimiser missed (sampled again,
        :func:`~.chains.modes_of_split_chains`); if it finds none, a lone mode's groups
        weighing less than ``MIN_MODE_WEIGHT`` (chains stuck where there is no mass) are left
        out and the other chains checked again (:func:`~.chains.drop_light_groups`;
        ``post.idata`` then has fewer chains than ``num_chains``).
        ``post.diagnostics["attempts"]`` holds one record per run of each mode (what was tried
        and why, its settings and the diagnostics after it); ``post.diagnostics["notes"]``
        records every retry and drop. ``post.modes`` lists the modes with ``weight`` and their
        own R-hat, ESS and divergences; ``post.diagnostics`` holds the worst of them (and
        ``modes``, one summary per mode). A failed diagnostic (after the retries) raises a
        :class:`ConvergenceWarning` naming the failing parameters, what failed, the attempts
        made and what to try; several modes raise a :class:`MultimodalWarning`.
    """
    check_fit_options(law, n_starts=n_starts, fixed=fixed, num_chains=num_chains,
                      num_warmup=num_warmup, num_samples=num_samples)
    if isinstance(retries, bool) or not isinstance(retries, (int, np.integer)) or retries < 0:
        raise BayesScalingError(f"retries must be an integer >= 0 (0: no retry of a run that "
                                f"fails its checks), got {retries!r}")
    if time_limit is not None and not (isinstance(time_limit, (int, float, np.number))
                                       and not isinstance(time_limit, bool) and time_limit > 0):
        raise BayesScalingError(f"time_limit must be a number of seconds > 0 (or None: no "
                                f"limit), got {time_limit!r}")
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + float(time_limit)
    if method not in ("nuts", "laplace"):
        raise BayesScalingError(f"method must be 'nuts' or 'laplace', got {method!r}")
    if init not in ("map", "uniform"):
        raise BayesScalingError(f"init must be 'map' or 'uniform', got {init!r}")
    if chain_method not in ("auto", "vectorized", "sequential", "parallel"):
        raise BayesScalingError("chain_method must be 'auto', 'vectorized', 'sequential' or "
                                f"'parallel', got {chain_method!r}")
    if chain_method == "auto":
        chain_method = ("parallel" if num_chains > 1 and jax.local_device_count() >= num_chains
                        else "vectorized")
    elif chain_method == "parallel" and jax.local_device_count() < num_chains:
        warnings.warn(f"chain_method='parallel' needs a device per chain: this process has "
                      f"{jax.local_device_count()} for {num_chains} chains, so they run one after "
                      "another (bs.bayes.use_chain_devices before JAX starts gives it more)",
                      UserWarning, stacklevel=2)
        chain_method = "sequential"
    law, df, shift = shifted_table(law, df, target_shift)
    kw = dict(priors=priors, likelihood=likelihood, fixed=fixed, scale=scale, c=huber_c,
              student_df=student_df)
    spec0 = make_spec(law, coordinates=None, **kw)
    law = spec0.law
    vdf = spec0.space.validate(df)
    theta_map, neg_lp_map, starts, (u_ok, v_ok) = map_stage(
        spec0, data_pytree(spec0, vdf), n_starts, seed, max_iter)
    _check_noise(law, theta_map, spec0.scale, len(vdf))
    spec = make_spec(law, coordinates=coordinates, **kw)
    data = data_pytree(spec, vdf)
    modes = find_modes(spec, data, u_ok, v_ok)
    if coordinates == "auto":
        spec, data, modes = _switch_coordinates(spec, vdf, data, modes, u_ok, v_ok, kw, method)
    t_modes = time.perf_counter() - t0
    top = modes[0]
    d = len(spec.sampled)
    rng = np.random.default_rng(seed + 1)
    sides, notes, dropped = None, [], []

    if method == "laplace":
        s, k_hat, frac_bad = sample_laplace(spec, data, top, num_chains, num_samples, seed)
        extra = None
        diag = {"method": "laplace", "pareto_k": k_hat, "hessian_ok": top.hessian_ok,
                "outside_support": frac_bad, "thresholds": {"pareto_k": 0.7}}
        failed, advice = [], []
        if not top.hessian_ok:
            failed.append("the Hessian at the mode is not positive definite (a flat or saddle "
                          "direction): the Gaussian approximation is meaningless there")
            advice.append("use method='nuts' or more informative priors")
        if k_hat > 0.7:
            failed.append(f"Pareto k {k_hat:.2f} > 0.7: the posterior is far from Gaussian in the "
                          "sampled coordinates, so Laplace intervals are unreliable")
            advice.append("use method='nuts'")
        if len(modes) > 1:
            failed.append(f"{len(modes)} separated modes: a single Gaussian covers only the first")
            advice.append("use method='nuts' and inspect post.modes")
        diag.update(failed=failed, advice=advice, ok=not failed)
    else:
        nuts_kw = dict(num_chains=num_chains, num_warmup=num_warmup, num_samples=num_samples,
                       chain_method=chain_method, dense_mass=dense_mass,
                       target_accept=target_accept, max_tree_depth=max_tree_depth,
                       progress_bar=progress_bar, deadline=deadline)
        n_found = len(modes)
        stopped = []  # the retries time_limit stopped, one line each

        def check(spec_k, data_k, run):
            """NUTS diagnostics of one run of ``(spec_k, data_k)``; a run ``time_limit``
            stopped fails them."""
            s_k, extra_k = run
            d = _nuts_check(_inference_data(spec_k, data_k, vdf, s_k, extra_k, loglik=False),
                            spec_k, num_chains, max_tree_depth)
            if STOPPED in extra_k:
                made, asked = extra_k[STOPPED]
                d["failed"].insert(0, f"time_limit={time_limit:g} s was reached while the "
                                      f"chains drew: the run was stopped after {made} of its "
                                      f"{asked} draws per chain")
                d["advice"].insert(0, "raise time_limit (None: no limit), or make each draw "
                                      "cheaper (fewer rows, fixed or better-informed parameters)")
                d["ok"] = False
            return d

        def sample(modes, seed):
            """The first run of every mode and its escalation ladder."""
            if init == "map":
                models, sampled, sides, side_of = _sides(spec, data, vdf, modes, kw)

                def run(k):
                    t1 = time.perf_counter()
                    return (run_modes([models[k]], [sampled[k]], whiten=whiten, rng=rng,
                                      seed=seed + k, **nuts_kw)[0], time.perf_counter() - t1)

                # a mode one basin with another is left out before its ladder of retries
                labels, first, merged = first_runs(
                    modes, run, lambda k, s: _recoord(models[k], spec, data, s), sides, side_of)
                models = [models[k] for k in labels]
                sides = None if sides is None else np.asarray(sides)[labels]
                start = "the mode, jittered"
            else:
                models, sides, side_of, labels, merged = [(spec, data)], None, None, [0], []
                center, chol = (top.s, top.chol) if whiten else (np.zeros(d), np.eye(d))
                z0 = rng.uniform(-2.0, 2.0, (num_chains, d))
                t1 = time.perf_counter()
                first = [(run_nuts(spec, data, center, chol, z0, seed=seed, **nuts_kw),
                          time.perf_counter() - t1)]
                start = "uniform in (-2, 2), whitened coordinates"
            runs, ladder_diags, attempts, notes = escalate(
                models, first, check, rng, seed, nuts_kw, retries,
                "the Laplace covariance at the mode" if whiten else "none (whiten=False)", start,
                deadline, time_limit, stopped, labels)
            runs = [(_recoord(m, spec, data, s), extra) for m, (s, extra) in zip(models, runs)]
            return runs, ladder_diags, attempts, merged + notes, sides, side_of, labels

        runs, ladder_diags, attempts, notes, sides, side_of, labels = sample(modes, seed)
        if init == "map":
            modes = [modes[k] for k in labels]
        found = (modes_of_split_chains(spec, data, modes, runs, ladder_diags)
                 if init == "map" and retries else None)
        if found is not None and deadline is not None and time.perf_counter() > deadline:
            notes.append(f"the chains split into groups that Newton takes to {len(found)} "
                         f"distinct modes, not sampled: time_limit={time_limit:g} s is spent")
            found = None
        if found is not None:  # the chains found modes the optimiser missed: sample each
            notes.append(f"the chains split into groups that Newton takes to {len(found)} "
                         f"distinct modes ({len(modes)} found before): sampled again, each mode "
                         "on its own")
            modes, n_found = found, len(found)
            runs, ladder_diags, more, again, sides, side_of, labels = sample(modes,
                                                                             seed + 104729)
            modes = [modes[k] for k in labels]
            attempts, notes = attempts + more, notes + again
        elif init == "map" and retries and len(runs) == 1:
            runs, ladder_diags, light = drop_light_groups(
                spec, data, runs, ladder_diags, lambda r: check(spec, data, r), rng)
            notes += light
        if init == "map":
            keep, weights, mode_diags, dropped = weigh_modes(spec, data, vdf, runs, modes, rng,
                                                          ladder_diags, sides, side_of, labels)
            modes, notes = [modes[k] for k in keep], notes + dropped
        else:
            keep, weights, mode_diags = [0], [1.0], ladder_diags
        s, extra = mixture_draws([runs[k] for k in keep], weights)
    idata = _inference_data(spec, data, vdf, s, extra)
    if method == "nuts":
        diag = combine_diagnostics(mode_diags, weights)
        diag["modes_found"] = n_found
        diag["notes"] = notes
        diag["attempts"] = attempts
        if not diag["ok"]:  # what the engine tried, where the refusal (ConvergenceError) says it
            diag["failed"].append(attempts_summary(attempts, retries))
            # first: the warning shows the first few failures, and these say why nothing more
            # was tried (checked again after chains were left out, a mode's own diagnostics
            # are rebuilt)
            diag["failed"][:0] = stopped
            # first: where the data barely inform a parameter, more draws are not the fix
            diag["advice"][:0] = prior_bound_advice(spec, idata.posterior, failing_params(diag))
            diag["advice"][:0] = input_relations(law, vdf)
    diag["seconds"] = time.perf_counter() - t0
    diag["seconds_modes"] = t_modes
    modes_df = _modes_table(spec, data, modes)
    if method == "nuts":
        modes_df = modes_df.join(pd.DataFrame(diag["modes"]))
    map_params = {k: float(v) for k, v in theta_map.items()}
    map_params.update(spec.fixed)
    if spec.scale is not None:
        map_params["sigma"] = spec.scale
    map_params = {k: map_params[k] for k in (*law.param_names, "sigma")}
    settings = {
        "law": law.name, "method": method, "likelihood": likelihood, "c": huber_c,
        "student_df": student_df, "fixed": dict(spec.fixed), "scale": spec.scale,
        "free": list(spec.names), "priors": _describe_priors(spec, priors),
        "coordinates": [b.name for b in spec.blocks], "num_chains": num_chains,
        "sides": sides is not None,
        "num_warmup": num_warmup, "num_samples": num_samples, "seed": seed, "n_starts": n_starts,
        "init": init, "whiten": whiten, "dense_mass": dense_mass, "target_accept": target_accept,
        "max_tree_depth": max_tree_depth, "chain_method": chain_method, "n_rows": len(vdf),
        "map_neg_log_post": neg_lp_map, "clipped": vdf.attrs.get("clipped", {}),
        "allow_unconverged": bool(allow_unconverged), "retries": int(retries),
        "target_shift": shift,
    }
    cols = [k for k in idata.constant_data.data_vars if k != "loss"]
    post = Posterior(law, idata, map_params, diag, modes_df, settings,
                     data_hash(vdf, cols + ["loss"]), spec)
    warn_diagnostics(law.name, diag)
    if len(modes) > 1:
        how = ("a single Gaussian covers only the first" if method == "laplace" else
               "the draws are their mixture, each mode weighted by its bridge-sampled mass")
        warnings.warn(f"the posterior of {law.name} has {len(modes)} separated modes ({how}):\n"
                      f"{modes_df.to_string(max_cols=20)}", MultimodalWarning, stacklevel=2)
    if dropped:
        warnings.warn(f"the posterior of {law.name}: " + "; ".join(dropped), MultimodalWarning,
                      stacklevel=2)
    return post


#: below this MAP ``sigma`` (log residual scale) the posterior lives where float64's rounding of
#: the law shapes the likelihood: a table the law fits to machine precision
SIGMA_FLOOR = 1e-10


def _check_noise(law, theta_map, scale, n_rows):
    """Refuse, before any sampling, a table the law fits to the rounding of float64 (a table
    simulated without noise, or no more rows than parameters): ``sigma``'s posterior is then its
    prior pushed down to where the density is rounding noise, and no sampler moves there (15 rows
    on Chinchilla's exact surface: 4 attempts, 358 s, max R-hat 3.6-5.6). With a few rows it stays
    above the floor and the ladder's non-centred retry samples it."""
    if scale is not None or theta_map.get("sigma") is None:
        return
    sigma = float(theta_map["sigma"])
    if sigma >= SIGMA_FLOOR:
        return
    raise BayesScalingError(
        f"{law.name} fits these {n_rows} rows exactly (to the rounding of float64: the MAP's "
        f"log-residual scale sigma is {sigma:.1e}), so the data say nothing about the noise and "
        f"sigma's posterior is its prior pushed below {SIGMA_FLOOR:g}, where no sampler can "
        f"move. Is the table simulated without noise, or has it no more rows than the law has "
        f"parameters ({len(law.params)})? Fix the likelihood's scale to the noise you expect "
        f"(e.g. fit_posterior(..., scale=0.001), on the command line --scale 0.001: log "
        f"residuals of 0.1%), or add noise to the table")


def _sides(spec, data, vdf, modes, kw):
    """What each mode is sampled in: ``(models, modes, sides, side_of)``.

    When the sampling space falls into sides (a block with ``side`` and ``restrict``, e.g. the
    sign of the PTPP gate's exponent, see ``laws.ptpp.SidedCoordinates``) and the modes lie on
    more than one, each mode is sampled in coordinates covering its own side only (its chains
    cannot drift into another side's lobe through the place where the sides meet), its mode
    found again there; ``sides[k]`` labels mode ``k``'s side and ``side_of`` labels points of
    ``spec``'s sampling space. Otherwise every mode is sampled in ``spec`` and there are no
    sides (``None, None``)."""
    same = [(spec, data)] * len(modes), list(modes), None, None
    sided = [i for i, b in enumerate(spec.blocks) if getattr(b, "side", None) is not None]
    if len(modes) < 2 or not sided:
        return same
    ref = data["ref"]

    def labels(s):
        theta = theta_s_batch(spec)(jnp.asarray(s), ref)
        return [tuple(r) for r in np.stack([np.asarray(spec.blocks[i].side(theta))
                                            for i in sided], -1)]

    keys = labels(np.stack([m.s for m in modes]))
    distinct = sorted(set(keys))
    if len(distinct) < 2:
        return same
    models, sampled = [], []
    for m, key in zip(modes, keys):
        blocks = list(spec.blocks)
        for i, v in zip(sided, key):
            blocks[i] = blocks[i].restrict(v)
        new = make_spec(spec.law, coordinates=tuple(blocks), **kw)
        new_data = data_pytree(new, vdf)
        theta = theta_s_one(spec)(jnp.asarray(m.s), ref)
        sampled.append(refine_mode(new, new_data, np.asarray(new.s(theta, new_data["ref"]))))
        models.append((new, new_data))
    index = {k: j for j, k in enumerate(distinct)}

    def side_of(x):
        return np.array([index.get(k, -1) for k in labels(x)])

    return models, sampled, np.array([index[k] for k in keys]), side_of


def _recoord(model, spec, data, s):
    """Draws ``s`` (chains, draws, dims) of ``model = (spec_k, data_k)`` in ``spec``'s
    sampling space."""
    src, src_data = model
    if src is spec:
        return s
    C, D, _ = s.shape
    out = recoord_batch(src, spec)(jnp.asarray(s.reshape(C * D, -1)), src_data["ref"],
                                   data["ref"])
    return np.asarray(out).reshape(C, D, -1)


def _nuts_check(idata, spec, num_chains, max_tree_depth):
    """NUTS diagnostics of one mode's chains, with a split into disagreeing groups flagged."""
    diag = nuts_diagnostics(idata, spec.names, num_chains, max_tree_depth)
    groups = chain_groups(idata, spec.names) if diag["max_rhat"] > RHAT_MAX else [
        list(range(num_chains))]
    diag["chain_groups"] = groups
    if len(groups) > 1:
        diag["failed"].append(f"the chains split into {len(groups)} groups with different "
                              "means: the posterior looks multimodal (see post.modes)")
        diag["ok"] = False
    return diag


def _inference_data(spec, data, vdf, s, extra, loglik=True):
    """ArviZ InferenceData of draws ``s`` (chains, draws, sampled dims) in natural coordinates,
    with NUTS's sample stats (``extra``, or None), the pointwise log-likelihood (``loglik``), the
    observations and the law's input columns."""
    import arviz as az

    law = spec.law
    C, D, d = s.shape
    theta = theta_s_batch(spec)(jnp.asarray(s.reshape(C * D, d)), data["ref"])
    n = len(vdf)
    posterior = {k: np.asarray(theta[k]).reshape(C, D) for k in spec.names}
    sample_stats = None
    if extra is not None:
        steps = extra["num_steps"]
        sample_stats = {
            "diverging": extra["diverging"].astype(bool),
            "energy": extra["energy"],
            "lp": -extra["potential_energy"],
            "n_steps": steps,
            "tree_depth": np.floor(np.log2(np.maximum(steps, 1))).astype(int) + 1,
            "acceptance_rate": extra["accept_prob"],
            "step_size": extra["adapt_state.step_size"],
        }
    if not loglik:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return az.from_dict(posterior=posterior, sample_stats=sample_stats)
    ll = np.asarray(pointwise_batch(spec)(theta, data)).reshape(C, D, -1)[..., :n]
    cols = {law.column(v): np.asarray(vdf[law.column(v)], float)
            for v in law.variables if law.column(v) in vdf}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return az.from_dict(
            posterior=posterior,
            sample_stats=sample_stats,
            log_likelihood={"y": ll},
            observed_data={"y": np.asarray(data["y"])[:n]},
            constant_data={**cols, "loss": np.asarray(vdf["loss"], float)},
            coords={"row": np.arange(n)},
            dims={"y": ["row"], **{k: ["row"] for k in cols}, "loss": ["row"]},
        )


def _switch_coordinates(spec, vdf, data, modes, u_ok, v_ok, kw, method):
    """Let each coordinate block with a ``switch`` look at the top mode and swap itself for
    coordinates that suit this table better, move the level block's centre where its terms are
    best determined (:func:`~.coordinates.level_pivot`), sample the signed coefficients the law
    is affine in as its values at some rows (:func:`~.coordinates.linear_block`), other wide
    signed parameters on an asinh scale (:func:`~.coordinates.signed_blocks`) and, for NUTS, the
    power terms among the parameters still sampled as themselves as their values at the centre
    of the table (:func:`~.terms.power_blocks`); modes are searched again in the new ones."""
    top = modes[0]
    ref = data["ref"]
    blocks, changed = [], False
    pivot = level_pivot(spec, top, data, method)
    for b in spec.blocks:
        alt = None
        if b.switch is not None and top.hessian_ok:
            alt = b.switch(lambda sv: theta_s_one(spec)(sv, ref), jnp.asarray(top.s), top.cov,
                           ref[b.name], method)
        elif is_level_block(b):
            alt = pivot
        blocks.append(alt if alt is not None else b)
        changed |= alt is not None
    linear = linear_block(spec, top, data)
    taken = {n for b in linear for n in b.params}
    signed = signed_blocks(spec, top, ref, skip=taken)
    taken |= {n for b in signed for n in b.params}
    power = power_blocks(spec, top, data, skip=taken) if method == "nuts" else ()
    blocks += list(signed) + list(power) + list(linear)  # the linear block reads the law: last
    changed |= bool(signed) or bool(linear) or bool(power)
    if not changed:
        return spec, data, modes
    new = make_spec(spec.law, coordinates=tuple(blocks), **kw)
    data = data_pytree(new, vdf)
    return new, data, find_modes(new, data, u_ok, v_ok)


def _modes_table(spec, data, modes) -> pd.DataFrame:
    rows = []
    top = modes[0].log_mass
    theta = theta_s_batch(spec)(jnp.asarray(np.stack([m.s for m in modes])), data["ref"])
    for i, m in enumerate(modes):
        row = {k: float(theta[k][i]) for k in spec.names}
        row.update(log_density=m.log_density, rel_mass=math.exp(m.log_mass - top),
                   hessian_ok=m.hessian_ok)
        rows.append(row)
    return pd.DataFrame(rows)


def _describe_priors(spec, priors):
    out = {}
    for p in spec.free:
        d = spec.priors[p.name]
        if isinstance(priors, dict) and p.name in priors:
            out[p.name] = f"user: {type(d).__name__}"
        elif isinstance(d, FlatPrior):
            out[p.name] = "flat"
        else:
            m, s = prior_loc_scale(p)
            term = d.term(p.name) if isinstance(d, AtReference) else p.name
            out[p.name] = f"default: {'log ' if log_scale(p) else ''}{term} ~ N({m:.4g}, {s:.4g})"
    return out
