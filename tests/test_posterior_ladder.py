"""The escalation ladder of ``fit_posterior``: a run that fails its checks is run again, the
retry chosen from what failed, within a cost cap, every attempt recorded.

- the policy (``nuts.next_attempt``) on diagnostics whose right answer is known: divergences ask
  for a smaller step, ESS alone for the power of two of more draws that its ESS per draw implies,
  a split into chain groups for a restart, and nothing past the budget;
- a run short of ESS by construction (a tiny ``num_samples``) is rescued, and the posterior it
  gives covers the parameters the table was simulated from; with ``retries=0`` the same run is
  refused, naming the parameters;
- a posterior no ladder can rescue (a parameter the likelihood never sees, under a flat prior)
  is refused with its attempts listed, within the budget.
"""
import warnings

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes import ladder
from bayes_scaling.bayes import nuts
from bayes_scaling.bayes.distributions import FlatPrior
from bayes_scaling.laws import Law, Param

TRUE = dict(E=1.5, A=30.0, alpha=0.4)


def _power(p, x):
    return p["E"] + p["A"] * x["N"] ** -p["alpha"]


POWER = Law(
    name="ladder_power_test_law",
    params=(Param("E", 0.0, np.inf, (0.5, 3.0), True), Param("A", 0.0, np.inf, (1.0, 1e3), True),
            Param("alpha", 0.0, 2.0, (0.1, 1.0))),
    variables=("N",),
    fn=_power,
)


def _blind(p, x):  # k never reaches the loss
    return _power(p, x) + 0.0 * p["k"]


BLIND = Law(
    name="ladder_blind_test_law",
    params=POWER.params + (Param("k", -np.inf, np.inf, (-1.0, 1.0)),),
    variables=("N",),
    fn=_blind,
)


@pytest.fixture(scope="module")
def table():
    N = np.geomspace(1e3, 1e6, 12)
    rng = np.random.default_rng(0)
    clean = np.asarray(_power(TRUE, {"N": jnp.asarray(N)}))
    return pd.DataFrame({"N": N, "loss": clean * np.exp(0.01 * rng.standard_normal(len(N)))})


SHORT = dict(num_chains=2, num_warmup=200, num_samples=40, progress_bar=False, seed=0)


@pytest.fixture(scope="module")
def rescued(table):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bs.MultimodalWarning)
        return bs.fit_posterior(POWER, table, **SHORT)


# --- the policy -----------------------------------------------------------------------------------

def _diag(**kw):
    d = {"max_rhat": 1.002, "worst_rhat": "E", "min_ess_bulk": 900.0, "worst_ess_bulk": "E",
         "min_ess_tail": 900.0, "worst_ess_tail": "E", "divergences": 0, "min_bfmi": 0.9,
         "chain_groups": [[0, 1, 2, 3]], "thresholds": {"ess": 400}}
    d.update(kw)
    return d


FIRST = dict(num_chains=4, num_warmup=1000, num_samples=1000, target_accept=0.99)


def test_divergences_ask_for_a_smaller_step_after_a_longer_warmup():
    action, why, new = nuts.next_attempt(_diag(divergences=3), FIRST, FIRST, 2000)
    assert action == "smaller step" and "3 divergent" in why
    assert new["target_accept"] == pytest.approx(0.9975)
    assert new["num_warmup"] == 2000 and new["num_samples"] == 1000
    # again: 0.9975 -> 0.999375, and the warm-up stops at LADDER_MAX_WARMUP times the first's
    action, _, again = nuts.next_attempt(_diag(divergences=1), new, FIRST, 5000)
    assert again["target_accept"] == pytest.approx(0.999375)
    assert again["num_warmup"] == nuts.LADDER_MAX_WARMUP * 1000



def test_a_smaller_step_gives_back_the_draws_an_earlier_retry_added_for_ess():
    # a mode whose chains were run on to 4000 draws for ESS, then show 2 divergences with ESS to
    # spare (bible_m3 ar-en-d2o ptpp_gated_m3, seed 2): the smaller step needs the first
    # attempt's 1000 draws, not 4000; the draws being the budget, a second smaller step fits in it
    ran_on = dict(FIRST, num_samples=4000)
    spent = 2000 + 3000  # the first attempt, then 3000 more draws per chain
    action, _, new = nuts.next_attempt(_diag(divergences=2, min_ess_bulk=3108.0,
                                             min_ess_tail=2108.0), ran_on, FIRST, spent)
    assert action == "smaller step" and new["num_samples"] == 1000 and new["num_warmup"] == 2000
    spent += new["num_warmup"] + new["num_samples"]
    action, _, again = nuts.next_attempt(_diag(divergences=2), new, FIRST, spent)
    assert action == "smaller step" and again["target_accept"] == pytest.approx(0.999375)
    # with the 4000 draws kept, that second smaller step was past the budget (16000)
    action, why, _ = nuts.next_attempt(_diag(divergences=2), dict(new, num_samples=4000), FIRST,
                                       spent + 3000)
    assert action is None and "budget" in why
    # an ESS short as well keeps the draws it has; an ESS just short of 1.25x the need at 1000
    # draws asks for 2000
    _, _, new = nuts.next_attempt(_diag(divergences=2, min_ess_tail=300.0), ran_on, FIRST, spent)
    assert new["num_samples"] == 4000
    _, _, new = nuts.next_attempt(_diag(divergences=2, min_ess_bulk=1800.0, min_ess_tail=1800.0),
                                 ran_on, FIRST, spent)
    assert new["num_samples"] == 2000

def test_ess_alone_runs_the_chains_on_for_the_draws_its_ess_per_draw_implies():
    # 250 effective draws of the 400 needed: 1.25 * 1.6 = 2x the draws, the same chains run on
    action, why, new = nuts.next_attempt(_diag(min_ess_tail=250.0, worst_ess_tail="alpha"),
                                         FIRST, FIRST, 2000)
    assert action == nuts.CONTINUE and "alpha" in why and "2.0x" in why
    assert new["num_samples"] == 2000 and new["num_warmup"] == 1000
    # 100 of 400: 5x, rounded up to 8x, but at most LADDER_MAX_DRAWS_STEP (4x) in one retry
    _, _, new = nuts.next_attempt(_diag(min_ess_tail=100.0), FIRST, FIRST, 2000)
    assert new["num_samples"] == nuts.LADDER_MAX_DRAWS_STEP * 1000 == 4000
    # running on costs only the new draws: 3000 fit in the 4000 left of the 16000 budget
    _, _, new = nuts.next_attempt(_diag(min_ess_tail=100.0), FIRST, FIRST, 12000)
    assert new["num_samples"] == 4000
    # with less budget left, the largest affordable power of two
    _, _, new = nuts.next_attempt(_diag(min_ess_tail=100.0), FIRST, FIRST, 14000)
    assert new["num_samples"] == 2000
    # none affordable: no attempt, and the reason says so
    action, why, new = nuts.next_attempt(_diag(min_ess_tail=100.0), FIRST, FIRST, 15500)
    assert action is None and new is None and "budget" in why


def test_rhat_asks_for_a_longer_run_and_a_split_for_a_restart():
    # chains that nearly agree are run on; chains far apart get a new, longer run
    action, why, new = nuts.next_attempt(_diag(max_rhat=1.03, worst_rhat="beta"), FIRST, FIRST,
                                         2000)
    assert action == nuts.CONTINUE and "beta" in why
    assert new["num_warmup"] == 1000 and new["num_samples"] == 2000
    action, why, new = nuts.next_attempt(_diag(max_rhat=1.08, worst_rhat="beta"), FIRST, FIRST,
                                         2000)
    assert action == "longer run" and "beta" in why
    assert new["num_warmup"] == 2000 and new["num_samples"] == 2000
    action, why, new = nuts.next_attempt(_diag(max_rhat=1.3, chain_groups=[[0, 1], [2, 3]]),
                                         FIRST, FIRST, 2000)
    assert action == "restart from the pooled draws" and "2 groups" in why
    assert new["num_warmup"] == 2000
    # a later retry short of ESS: more draws only (R-hat's excess then is as likely noise)
    longer = dict(FIRST, num_warmup=2000, num_samples=2000)
    _, _, new = nuts.next_attempt(_diag(max_rhat=1.07, min_ess_bulk=300.0), longer, FIRST, 6000)
    assert new["num_warmup"] == 2000 and new["num_samples"] == 4000
    assert nuts.next_attempt(_diag(max_rhat=float("nan")), FIRST, FIRST, 2000)[0] is None


def test_draws_whitening_makes_the_draws_white_and_starts_off_the_divergent_ones():
    rng = np.random.default_rng(0)
    cov = np.array([[4.0, 1.9], [1.9, 1.0]])
    s = rng.multivariate_normal([1.0, -2.0], cov, (2, 3000))
    diverging = np.zeros((2, 3000), bool)
    diverging[:, :2990] = True  # only 20 draws are allowed as starts
    center, chol, z0 = nuts.draws_whitening(s, {"diverging": diverging}, 4, rng)
    z = np.linalg.solve(chol, (s.reshape(-1, 2) - center).T).T
    assert np.allclose(np.cov(z, rowvar=False), np.eye(2), atol=1e-8)
    allowed = s[:, 2990:].reshape(-1, 2)
    starts = center + z0 @ chol.T
    assert all(np.any(np.all(np.isclose(allowed, x), 1)) for x in starts)


def test_a_mixture_of_runs_of_different_lengths_keeps_the_weights_and_repeats_no_draw():
    # mode 0 was retried with 4x the draws; weights 0.5 / 0.5: 2 x 1000 draws (mode 1 has 1000)
    runs = [(np.arange(2 * 4000, dtype=float).reshape(2, 4000, 1),
             {"diverging": np.zeros((2, 4000))}),
            (-1.0 - np.arange(2 * 1000, dtype=float).reshape(2, 1000, 1),
             {"diverging": np.zeros((2, 1000))})]
    s, extra = nuts.mixture_draws(runs, [0.5, 0.5])
    assert s.shape == (2, 2000, 1) and extra["diverging"].shape == (2, 2000)
    assert np.mean(s >= 0) == 0.5
    assert len(np.unique(s)) == s.size
    # one mode: every draw of the longer run
    s, _ = nuts.mixture_draws(runs[:1], [1.0])
    assert s.shape == (2, 4000, 1)


# --- fits -----------------------------------------------------------------------------------------

def test_a_run_short_of_ess_is_rescued_and_recorded(rescued):
    post = rescued
    first, *retries = post.diagnostics["attempts"]
    assert first["action"] == "first" and not first["ok"]
    assert min(first["min_ess_bulk"], first["min_ess_tail"]) < 200  # 2 chains x 100
    assert retries and retries[-1]["ok"] and post.ok
    for a in retries:  # run on in the same coordinates, or a new run whitened by the draws
        assert (a["settings"]["whitened_by"] == "the previous attempt's draws"
                or a["action"] == nuts.CONTINUE), a
    last = retries[-1]["settings"]
    assert last["num_samples"] > SHORT["num_samples"]
    assert post.idata.posterior.sizes["draw"] == last["num_samples"]
    assert any("attempt 2" in n for n in post.diagnostics["notes"])
    assert not any("not tried again" in n for n in post.diagnostics["notes"])  # it passed
    # within the budget, and the rescued draws cover the parameters the table came from
    cost = sum(a["iterations"] for a in post.diagnostics["attempts"])
    assert cost <= nuts.LADDER_COST_CAP * (SHORT["num_warmup"] + SHORT["num_samples"])
    for k, v in TRUE.items():
        lo, hi = np.quantile(post.draws(k), [0.005, 0.995])
        assert lo < v < hi, (k, lo, hi)


def test_with_retries_off_the_same_run_refuses_naming_the_parameters(table, rescued):
    with pytest.warns(bs.ConvergenceWarning, match=r"failing: .*(E|A|alpha|sigma)"):
        post = bs.fit_posterior(POWER, table, retries=0, **SHORT)
    assert not post.ok and len(post.diagnostics["attempts"]) == 1
    assert post.diagnostics["attempts"][0]["min_ess_tail"] == pytest.approx(
        rescued.diagnostics["attempts"][0]["min_ess_tail"])  # the same first run
    with pytest.raises(bs.errors.ConvergenceError,
                       match=r"ESS \d+ < 200 for (E|A|alpha|sigma).*retries=0"):
        post.forecast(table.head(2))


def test_a_parameter_no_ladder_can_rescue_is_refused_with_the_attempts_listed(table):
    kw = dict(num_chains=2, num_warmup=100, num_samples=100, progress_bar=False, seed=0)
    with pytest.warns(bs.ConvergenceWarning, match=r"(?s)failing: .*k.*Attempts made") as rec:
        post = bs.fit_posterior(BLIND, table, priors={"k": FlatPrior()}, **kw)
    attempts = post.diagnostics["attempts"]
    assert not post.ok and len(attempts) >= 2 and not any(a["ok"] for a in attempts)
    assert "k" in nuts.failing_params(post.diagnostics)
    cost = sum(a["iterations"] for a in attempts)
    assert cost <= nuts.LADDER_COST_CAP * (kw["num_warmup"] + kw["num_samples"])
    message = str(rec[0].message)
    assert all(f"attempt {a['attempt']}" in message for a in attempts)
    with pytest.raises(bs.errors.ConvergenceError, match=f"{len(attempts)} attempts"):
        post.forecast(table.head(2))


def test_a_retry_predicted_past_the_time_limit_is_not_made_and_the_refusal_says_so(table,
                                                                                   rescued):
    """The run the ladder rescues above (``rescued``: a retry made) under a time limit its first
    attempt alone exceeds: the same first run, no retry, and a refusal naming the attempt not
    made, its predicted seconds and the limit."""
    with pytest.warns(bs.ConvergenceWarning, match=r"time_limit=0.001 s"):
        post = bs.fit_posterior(POWER, table, time_limit=1e-3, **SHORT)
    (first,) = post.diagnostics["attempts"]
    assert first["min_ess_tail"] == pytest.approx(
        rescued.diagnostics["attempts"][0]["min_ess_tail"])  # the same first run
    assert len(rescued.diagnostics["attempts"]) > 1 and rescued.ok  # which a retry rescues
    assert not post.ok
    with pytest.raises(bs.errors.ConvergenceError, match=r"attempt 2 \(.*\) was not made: it "
                       r"would take about \d+ s"):
        post.forecast(table.head(2))


def test_a_run_drawing_when_the_time_limit_passes_is_stopped_with_its_draws_kept(table):
    """The limit passes during the first run's warm-up: the warm-up is finished, one call of
    draws is made, the run stops there, nothing more is tried, and the refusal says so."""
    from bayes_scaling.bayes import progress

    kw = dict(SHORT, num_samples=3 * progress.SEGMENT)
    with pytest.warns(bs.ConvergenceWarning, match=r"time_limit=0.001 s was reached"):
        post = bs.fit_posterior(POWER, table, time_limit=1e-3, **kw)
    assert not post.ok and len(post.diagnostics["attempts"]) == 1
    assert post.draws("alpha").shape == (kw["num_chains"] * progress.SEGMENT,)
    assert post.idata.sample_stats["diverging"].shape == (kw["num_chains"], progress.SEGMENT)
    with pytest.raises(bs.errors.ConvergenceError,
                       match=f"stopped after {progress.SEGMENT} of its {3 * progress.SEGMENT} "
                             "draws per chain"):
        post.forecast(table.head(2))
    whole = bs.fit_posterior(POWER, table, retries=0, allow_unconverged=True, **kw)
    np.testing.assert_array_equal(  # the draws it kept are the whole run's first ones
        post.idata.posterior["alpha"].values, whole.idata.posterior["alpha"].values[:, :64])


def test_the_predicted_seconds_of_an_attempt_and_when_they_pass_the_limit():
    import time

    last = {"seconds": 2.0, "iterations": 400}
    assert ladder.predicted_seconds(last, 1200) == pytest.approx(6.0)
    now = time.perf_counter()
    assert ladder.over_time(last, 1200, None, None) == ""  # no limit
    assert ladder.over_time(last, 1200, now + 60.0, 100.0) == ""  # 6 s fit in the 60 s left
    why = ladder.over_time(last, 1200, now + 3.0, 100.0)
    assert "about 6 s" in why and "5 ms per iteration" in why and "time_limit=100 s" in why
    assert "97 s of time_limit" in why


@pytest.mark.parametrize("bad", [0, -5.0, True, "60"])
def test_time_limit_must_be_positive_seconds(table, bad):
    with pytest.raises(bs.errors.BayesScalingError, match="time_limit must be a number"):
        bs.fit_posterior(POWER, table, time_limit=bad)


def test_retries_must_be_a_count(table):
    with pytest.raises(bs.errors.BayesScalingError, match="retries must be an integer >= 0"):
        bs.fit_posterior(POWER, table, retries=-1)


def test_chains_run_on_keep_their_draws_adaptation_and_state(table):
    """``continue_nuts``: the first run's draws unchanged, then ``more`` draws per chain from the
    same adapted kernel (the step size the warm-up ended with, no new warm-up)."""
    from bayes_scaling.bayes.modes import find_modes, map_stage
    from bayes_scaling.bayes.spec import data_pytree, make_spec

    spec = make_spec(POWER)
    data = data_pytree(spec, spec.space.validate(table))
    _, _, _, (u_ok, v_ok) = map_stage(spec, data, 8, 0, 500)
    mode = find_modes(spec, data, u_ok, v_ok)[0]
    kw = dict(num_chains=2, num_warmup=300, num_samples=200, chain_method="vectorized",
              dense_mass=True, target_accept=0.9, max_tree_depth=8, progress_bar=False)
    z0 = np.zeros((2, len(spec.sampled)))
    first = nuts.run_nuts(spec, data, mode.s, mode.chol, z0, seed=0, **kw)
    s, extra = nuts.continue_nuts(spec, data, first, 300, seed=1, **kw)
    assert s.shape == (2, 500, len(spec.sampled))
    np.testing.assert_array_equal(s[:, :200], first[0])
    step = extra["adapt_state.step_size"]
    np.testing.assert_allclose(step[:, 200:], step[:, 199:200] * np.ones((1, 300)))
    assert not np.array_equal(s[:, 200], s[:, 199])  # the chains moved on from their last state
    # the draws after the continuation agree with the first ones (the same posterior)
    a, b = s[:, :200].reshape(-1, s.shape[-1]), s[:, 200:].reshape(-1, s.shape[-1])
    assert np.all(np.abs(a.mean(0) - b.mean(0)) < 0.5 * a.std(0) + 1e-12)
    assert nuts.RESUME in extra and extra["diverging"].shape == (2, 500)


def test_a_parameter_the_data_barely_inform_is_named_with_its_ridge_and_the_fix_first():
    """``prior_bound_advice``: a failing parameter whose posterior is as wide as its prior (here
    ``k``, drawn from its prior, with ``alpha`` moving along it) gets advice that names the
    ridge and says to fix it or inform its prior; a failing parameter the data pin does not."""
    import jax

    from bayes_scaling.bayes.priors import draw_prior
    from bayes_scaling.bayes.spec import make_spec
    from bayes_scaling.cli_commands import cli_advice

    spec = make_spec(BLIND)
    rng = np.random.default_rng(0)
    k = draw_prior(spec.priors, jax.random.PRNGKey(7), shape=(2000,))["k"]
    z = (k - k.mean()) / k.std()
    post = {"E": 1.5 + 0.01 * rng.standard_normal(2000),
            "A": 30 * np.exp(0.01 * rng.standard_normal(2000)),
            "alpha": 0.4 + 0.01 * z + 1e-4 * rng.standard_normal(2000), "k": k,
            "sigma": np.full(2000, 0.01)}
    advice = nuts.prior_bound_advice(spec, post, ["k", "E"])
    assert len(advice) == 1 and advice[0].startswith("k: ")
    assert "along a ridge with alpha" in advice[0] and "fixed={'k': value}" in advice[0]
    share = float(advice[0].split("is ")[1].split("%")[0]) / 100
    assert 0.8 < share < 1.25  # the same distribution, up to the draws' noise
    # a parameter the data pin, and a flat prior (no width to compare with), get none
    assert nuts.prior_bound_advice(spec, post, ["alpha"]) == []
    flat = make_spec(BLIND, priors={"k": FlatPrior()})
    assert nuts.prior_bound_advice(flat, post, ["k"]) == []
    # the command line reads the first advice in its own spelling
    fake = type("P", (), {"diagnostics": {"advice": advice}})()
    assert "--fixed k=VALUE" in cli_advice(fake)


def _idata(shift, depth_hit_share, depth=10, chains=4, draws=500):
    """Draws of one parameter, chain 0 moved by ``shift`` sds (R-hat fails when large), with a
    share of the iterations at the maximum tree depth."""
    import arviz as az

    rng = np.random.default_rng(0)
    x = rng.standard_normal((chains, draws))
    x[0] += shift
    hit = rng.random((chains, draws)) < depth_hit_share
    return az.from_dict(posterior={"E": x},
                        sample_stats={"tree_depth": np.where(hit, depth, 3),
                                      "diverging": np.zeros((chains, draws), bool),
                                      "energy": rng.standard_normal((chains, draws))})


def test_a_failed_run_at_its_maximum_tree_depth_says_why_more_draws_come_dear():
    """The share of iterations at the maximum tree depth is not a failure of its own, but when a
    run fails and spends much of its time at the cap, the advice names it with the share."""
    failed = nuts.nuts_diagnostics(_idata(1.0, 0.6), ["E"], 4, 10)
    assert not failed["ok"] and 0.55 < failed["tree_depth_hits"] < 0.65
    depth = [a for a in failed["advice"] if "maximum tree depth" in a]
    assert len(depth) == 1 and "(10) in 6" in depth[0] and "1023 gradients" in depth[0]
    # the same failure without the cap reached: no such advice
    shallow = nuts.nuts_diagnostics(_idata(1.0, 0.0), ["E"], 4, 10)
    assert not shallow["ok"] and not any("tree depth" in a for a in shallow["advice"])
    # a run that passes its checks at the cap passes: the draws are valid
    fine = nuts.nuts_diagnostics(_idata(0.0, 0.9), ["E"], 4, 10)
    assert fine["ok"] and fine["advice"] == []


def test_divergences_crowded_at_one_end_of_a_parameter_are_named_with_where():
    """Divergent draws at the neck of a funnel (the lowest draws of ``g``, where a vanishing
    term's exponent is free) name ``g``, the end and the values in the refusal and its advice;
    divergent draws spread over the posterior name nothing."""
    import arviz as az

    from bayes_scaling.bayes.divergences import divergence_sites

    rng = np.random.default_rng(3)
    g = rng.lognormal(np.log(0.3), 0.5, (4, 500))
    C = np.exp(rng.standard_normal((4, 500)) / g)  # the spread of log C grows as g falls
    neck = g <= np.quantile(g, 0.02)
    div = neck & (rng.random(g.shape) < 0.5)

    def diag(flags):
        idata = az.from_dict(posterior={"C": C, "g": g},
                             sample_stats={"tree_depth": np.full(g.shape, 3), "diverging": flags,
                                           "energy": rng.standard_normal(g.shape)})
        return nuts.nuts_diagnostics(idata, ["C", "g"], 4, 10)

    d = diag(div)
    msg = next(f for f in d["failed"] if "divergent" in f)
    lo, hi = g[div].min(), g[div].max()
    assert f"{div.sum()} divergent transitions" in msg
    assert f"at the low end of g ({lo:.3g}-{hi:.3g}, its lowest 2% of draws)" in msg
    assert any(a.startswith("raise target_accept (e.g. 0.995), or give g (see") and "fix it" in a
               for a in d["advice"])
    # C's divergent draws sit at both ends of its posterior (either sign of log C): not named
    assert [s["name"] for s in divergence_sites({"C": C, "g": g}, div)] == ["g"]
    # the same number of divergences anywhere: nothing to name, the advice stays general
    spread = np.zeros(g.shape, bool)
    spread.flat[rng.choice(g.size, div.sum(), replace=False)] = True
    d = diag(spread)
    msg = next(f for f in d["failed"] if "divergent" in f)
    assert msg.endswith("part of the posterior may be missed")
    assert any("give the parameters involved" in a for a in d["advice"])
