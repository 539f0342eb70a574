"""The Bayesian layer: model identities, MAP = Huber fit, Laplace/NUTS recovery, forecasts,
persistence, comparison, plots and a small calibration check (CI-sized; the full versions are in
tests/test_bayes_slow.py and analyses/bayes_calibration.py)."""
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling import bayes as B
from bayes_scaling.cli import main
from bayes_scaling.laws import ptpp
from bayes_scaling.objective import huber_log_normaliser

from conftest import form3_grid, simulate

CHIN_TRUE = dict(A=400.0, B=1500.0, alpha=0.34, beta=0.28, E=1.8)


def chin_grid(n=6, m=6):
    N = np.geomspace(2e7, 5e9, n)
    D = np.geomspace(4e8, 2e11, m)
    return pd.DataFrame([dict(N=a, D=b) for a in N for b in D])


@pytest.fixture(scope="module")
def chin_data():
    return simulate("chinchilla", chin_grid(), params=CHIN_TRUE, noise=0.01, seed=3)


@pytest.fixture(scope="module")
def chin_nuts(chin_data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # 500 draws: enough for the checks' ESS at the first attempt (300 needed a retry)
        return bs.fit_posterior("chinchilla", chin_data, num_chains=2, num_warmup=300,
                                num_samples=500, seed=1, progress_bar=False)


@pytest.fixture(scope="module")
def chin_laplace(chin_data):
    return bs.fit_posterior("chinchilla", chin_data, method="laplace", seed=1)


# --- the one objective -----------------------------------------------------------------------------

def test_flat_prior_fixed_scale_map_is_the_huber_fit(epoch):
    """DESIGN rule 2: flat priors + fixed sigma => posterior mode == fit_map(delta = c sigma)."""
    _, kept = epoch
    delta = 1e-3
    fit = bs.fit_map("chinchilla", kept, delta=delta, n_starts=16, seed=0)
    params, nlp, _ = B.map_estimate("chinchilla", kept, priors="flat", scale=delta / B.HUBER_C,
                                    n_starts=16, seed=0)
    for k in fit.params:
        assert params[k] == pytest.approx(fit.params[k], rel=1e-4), k
    # the minimised negative log posterior is J / sigma^2 + n log sigma + n log Z(c)
    sigma, n = delta / B.HUBER_C, len(kept)
    J = float(np.sum(np.asarray(bs.objective.huber(
        np.log(bs.laws.get("chinchilla")(params, kept)) - np.log(kept["loss"].to_numpy()), delta))))
    assert J <= fit.objective * (1 + 1e-8)
    expected = J / sigma**2 + n * math.log(sigma) + n * float(huber_log_normaliser(B.HUBER_C))
    assert nlp == pytest.approx(expected, rel=1e-9)


def test_numpyro_model_density_matches_spec():
    from numpyro.infer.util import log_density

    law = bs.laws.get("ptpp_gated_floor")
    df = simulate(law, form3_grid(ptpps=(15, 31)), noise=0.005, seed=0)
    spec = B.make_spec(law, coordinates=None)
    data = B.data_pytree(spec, df, pad=False)  # the NumPyro model sees the rows as they are
    model = B.build_model(law)
    rng = np.random.default_rng(0)
    for _ in range(3):
        u = jnp.asarray(spec.u({**law.example, "sigma": 0.01}) + 0.1 * rng.standard_normal(13))
        lp, _ = log_density(model, (data["x"], data["y"]), {},
                            {f"{p.name}_u": u[i] for i, p in enumerate(spec.free)})
        assert float(lp) == pytest.approx(float(spec.log_joint(u, data)), rel=1e-10)


def test_padding_rows_changes_no_density():
    """Tables are padded to a power-of-two row count (zero-weight copies of the first row) so
    fits of nearby sizes share compiled programs; every density must be that of the real rows."""
    law = bs.laws.get("ptpp_gated_floor")
    df = simulate(law, form3_grid(ptpps=(15, 31)), noise=0.005, seed=0).iloc[:75]
    for coords in (None, "auto"):
        spec = B.make_spec(law, coordinates=coords)
        padded, plain = B.data_pytree(spec, df), B.data_pytree(spec, df, pad=False)
        assert padded["y"].shape == (128,) and plain["y"].shape == (75,)
        assert float(padded["w"].sum()) == 75
        rng = np.random.default_rng(2)
        for _ in range(3):
            u = jnp.asarray(spec.u({**law.example, "sigma": 0.01}) + 0.1 * rng.standard_normal(13))
            assert float(spec.log_joint(u, padded)) == pytest.approx(
                float(spec.log_joint(u, plain)), rel=1e-12)
            s = spec.s(spec.theta(u), plain["ref"])
            assert float(spec.log_joint_s(s, padded)) == pytest.approx(
                float(spec.log_joint_s(s, plain)), rel=1e-12)


@pytest.mark.parametrize("gate", ["gate", "gate_slope", "gate_slope_log_zeta"])
def test_sampling_coordinates_change_variables_exactly(gate):
    """log p_s(s) = log p_u(u(s)) + log |du/ds|, and s(theta(s)) = s, for the Form-3 blocks
    (the default gate coordinates and the slope coordinates used for a visible gate)."""
    law = bs.laws.get("ptpp_gated_floor")
    df = simulate(law, form3_grid(ptpps=(15, 31)), noise=0.005, seed=0)
    spec = B.make_spec(law)
    assert [b.name for b in spec.blocks] == ["gate", "level"]
    assert {n for b in spec.blocks for n in b.params} == {"beta", "lam", "zeta", "E", "A", "B",
                                                         "C", "F"}
    if gate.startswith("gate_slope"):
        block = ptpp.gate_slope_coordinates(sign=1 if gate.endswith("log_zeta") else None)
        spec = B.make_spec(law, coordinates=(block, spec.blocks[1]))
        gate = "gate_slope"
    data = B.data_pytree(spec, df)
    ref = data["ref"]
    s0 = np.asarray(spec.s({**law.example, "sigma": 0.01}, ref))
    to_u = lambda s: spec.u(spec.theta_s(s, ref))  # noqa: E731
    rng = np.random.default_rng(1)
    names = [p.name for p in spec.sampled]
    step = np.where(np.array(names) == "gate_slope", 0.005, 0.2)  # keep the slope's sign
    for _ in range(3):
        s = jnp.asarray(s0 + step * rng.standard_normal(len(s0)))
        u = to_u(s)
        jac = jnp.linalg.slogdet(jax.jacfwd(to_u)(s))[1]
        assert float(spec.log_joint_s(s, data)) == pytest.approx(
            float(spec.log_joint(u, data) + jac), rel=1e-9, abs=1e-8)
        np.testing.assert_allclose(np.asarray(spec.s(spec.theta_s(s, ref), ref)), np.asarray(s),
                                   rtol=1e-9, atol=1e-9)
    # the gate coordinates: the exponent of beta_eff at the centre, then lam or its slope, zeta
    th = spec.theta_s(jnp.asarray(s0), ref)
    from bayes_scaling.laws.ptpp import beta_eff
    L0 = float(ref[gate]["L0"])
    b = lambda L: jnp.log(beta_eff({k: th[k] for k in ("beta", "lam", "zeta")}, jnp.exp(L)))  # noqa
    assert float(b(L0)) == pytest.approx(s0[names.index("gate_log_exponent")], rel=1e-9)
    if gate == "gate_slope":
        i = names.index("gate_slope")  # sampled as log |slope| when the sign is given
        slope = float(spec.sampled[i].from_unconstrained(s0[i]))
        assert float(jax.grad(b)(L0)) == pytest.approx(slope, rel=1e-9)
    else:
        for k in ("lam", "zeta"):
            assert float(th[k]) == pytest.approx(law.example[k], rel=1e-12)


@pytest.mark.parametrize("zeta", [0.5, -0.7])
def test_the_slope_coordinates_cover_exactly_the_gates_support(zeta):
    """With the slope's sign given, every point of the slope coordinates is a gate (lam > 0,
    beta > 0, zeta of the sign the slope implies) and maps back to itself: a NUTS trajectory cannot
    step outside the support (with zeta sampled as itself it could, across zeta = 0)."""
    L0 = float(np.log(21.6))
    p = {"beta": 0.3, "lam": 0.5, "zeta": zeta}
    kappa = float(ptpp.gate_slope(p, L0))
    block = ptpp.gate_slope_coordinates(sign=-np.sign(kappa))
    r = {"L0": jnp.asarray(L0)}
    c0 = block.from_params({k: jnp.asarray(v) for k, v in p.items()}, r)
    assert float(c0["gate_slope"]) == pytest.approx(kappa, rel=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(200):
        c = {k: v + rng.standard_normal() for k, v in c0.items()}
        c["gate_slope"] = c0["gate_slope"] * np.exp(rng.standard_normal())  # keep the sign
        th = block.to_params(c, r)
        assert float(th["lam"]) > 0 and float(th["beta"]) > 0
        assert np.sign(float(th["zeta"])) == np.sign(zeta)
        if float(th["lam"] * jax.nn.sigmoid(th["zeta"] * L0)) > 1 - 1e-5:
            continue  # a gate saturated at the centre: from_params clips it (for inits)
        back = block.from_params(th, r)
        for k, v in c.items():
            assert float(back[k]) == pytest.approx(float(v), rel=1e-6, abs=1e-9)


def test_the_gate_coordinates_follow_what_the_data_see():
    """The slope coordinates straighten the ridge of a visible gate but are singular at a flat
    one: fit_posterior switches to them only when the slope at the mode is more than
    GATE_VISIBLE_Z Laplace sds from 0."""
    law = bs.laws.get("ptpp_gated_floor")
    grid = form3_grid(ptpps=(15, 31))
    used, tables = {}, {}
    for name, zeta in (("visible", law.example["zeta"]), ("flat", -1.8)):
        df = simulate(law, grid, params={**law.example, "zeta": zeta}, noise=0.005, seed=4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            post = bs.fit_posterior(law, df, method="laplace", n_starts=8, seed=0)
        used[name], tables[name] = post.settings["coordinates"], df
    assert used == {"visible": ["gate_slope", "level"], "flat": ["gate", "level"]}
    # coordinates given explicitly are used as given, even for a visible gate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bs.fit_posterior(law, tables["visible"], method="laplace", n_starts=8, seed=0,
                                coordinates=B.make_spec(law).blocks)
    assert post.settings["coordinates"] == ["gate", "level"]
    # NUTS samples a visible gate's zeta on the log scale, with the sign of the slope at the mode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bs.fit_posterior(law, tables["visible"], n_starts=8, seed=0, num_chains=1,
                                num_warmup=20, num_samples=20, progress_bar=False)
    sampled = [c if isinstance(c, str) else c.name for c in post.spec.sampled]
    assert "gate_log_abs_zeta" in sampled and "zeta" not in sampled
    assert np.all(np.asarray(post.idata.posterior["zeta"]) > 0)


def test_a_gate_the_data_cannot_see_leaves_zeta_to_its_prior():
    """Form 3 with a flat gate (zeta = -1.8: lam sigmoid(zeta log PTPP) <= 0.004 on PTPP 15..31),
    so the data say nothing about zeta's sign. The posterior of zeta must stay about as wide as
    its prior (sd 1.22) and the sampler must keep a usable step size. Sampling the gate's slope
    as a coordinate made the density singular at zeta = 0 (Jacobian 1/|zeta|): the chains fell
    into that point, with step sizes near 1e-7 and zeta's posterior sd near 0. (The region the
    data allow is L-shaped in (lam, zeta) and mixes slowly: R-hat is not checked here.)"""
    law = bs.laws.get("ptpp_gated_floor")
    truth = {**law.example, "zeta": -1.8}
    df = simulate(law, form3_grid(ptpps=(15, 31)), params=truth, noise=0.01, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the first run is what is checked (no retry: R-hat is not the point here)
        post = bs.fit_posterior(law, df, num_chains=2, num_warmup=300, num_samples=300, seed=2,
                                n_starts=8, progress_bar=False, retries=0)
    step = np.asarray(post.idata.sample_stats["step_size"])[:, -1]
    assert step.min() > 1e-3
    zeta = post.draws("zeta")
    assert zeta.std() > 0.6
    assert np.quantile(zeta, 0.05) < truth["zeta"] < np.quantile(zeta, 0.95)


# --- likelihoods and priors ------------------------------------------------------------------------

@pytest.mark.parametrize("likelihood,c", [("huber", 0.5), ("huber", 1.345), ("huber", 3.0),
                                          ("student_t", 1.345), ("normal", 1.345)])
def test_the_likelihood_is_normalised_and_sampled_exactly(likelihood, c):
    from scipy import integrate, stats

    d = B.Observation(likelihood, 0.0, 1.0, c=c)
    total, _ = integrate.quad(lambda v: float(jnp.exp(d.log_prob(v))), -60, 60, points=[-c, c],
                              limit=200)
    assert total == pytest.approx(1.0, abs=1e-6 if likelihood == "student_t" else 1e-8)
    draws = np.asarray(d.sample(jax.random.PRNGKey(0), (40000,)))
    grid = np.linspace(-30, 30, 60001)
    cdf = np.cumsum(np.exp(np.asarray(d.log_prob(jnp.asarray(grid))))) * (grid[1] - grid[0])
    ks = stats.kstest(draws, lambda v: np.interp(v, grid, cdf))
    assert ks.pvalue > 1e-3


def test_one_likelihood_for_model_density_and_scipy():
    """Student-t and Normal log densities of the one definition are scipy's (scale 0.3, 4 df)."""
    from scipy import stats

    r = np.linspace(-2.0, 2.0, 41)
    np.testing.assert_allclose(np.asarray(B.log_likelihood(r, 0.3, "student_t", student_df=4.0)),
                               stats.t.logpdf(r / 0.3, 4.0) - np.log(0.3), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(B.log_likelihood(r, 0.3, "normal")),
                               stats.norm.logpdf(r, 0.0, 0.3), rtol=1e-12)
    with pytest.raises(bs.BayesScalingError, match="likelihood must be one of"):
        B.log_likelihood(r, 0.3, "cauchy")


@pytest.mark.parametrize("law", ["ptpp_gated_floor", "chinchilla"])
def test_default_priors_put_90_percent_on_the_init_range(law):
    law = bs.laws.get(law)
    priors = B.default_priors(law)
    for p in law.params:
        d = priors[p.name]
        if isinstance(d, B.AtReference):  # stated for the term at the reference (F 20^-eta)
            d = d.base
        x = np.asarray(d.sample(jax.random.PRNGKey(1), (20000,)))
        assert np.all((x >= p.lower) & (x <= p.upper)), p.name
        lo, hi = p.init
        inside = np.mean((x >= lo) & (x <= hi))
        # 90% unless truncation at a bound moves mass into the range
        assert 0.88 <= inside <= 1.0, (p.name, inside)
    table = B.prior_table(law)
    assert list(table["param"]) == [*law.param_names, "sigma"]


@pytest.mark.parametrize("law", ["ptpp_floor", "ptpp_gated_floor", "ptpp_floor_m3"])
def test_the_floor_prior_is_stated_at_the_reference_ptpp(law):
    """F's default prior is on the floor at PTPP 20, F 20^-eta, independent of eta: the model
    density, the NumPyro model and the prior draws all say so."""
    law = bs.laws.get(law)
    priors = B.default_priors(law)
    assert isinstance(priors["F"], B.AtReference) and priors["F"].exponent == "eta"
    draws = B.draw_prior(priors, jax.random.PRNGKey(0), shape=(2000,))
    one = B.draw_prior(priors, jax.random.PRNGKey(1))  # one draw: floats
    assert all(isinstance(v, float) for v in one.values())
    floor20 = np.log(draws["F"] * ptpp.PTPP_REF ** -draws["eta"])
    log_eta = np.log(draws["eta"])
    assert abs(np.corrcoef(floor20, log_eta)[0, 1]) < 0.08
    m, s = B.prior_loc_scale(next(p for p in law.params if p.name == "F"))
    assert np.mean(floor20) == pytest.approx(m, abs=0.2)
    assert np.std(floor20) == pytest.approx(s, rel=0.08)
    # the NumPyro model's prior draws
    from numpyro.infer import Predictive
    x = {v: jnp.full(3, 20.0) for v in law.variables}
    pr = Predictive(B.build_model(law), num_samples=2000)(jax.random.PRNGKey(0), x)
    f20 = np.log(np.asarray(pr["F"]) * 20.0 ** -np.asarray(pr["eta"]))
    assert np.std(f20) == pytest.approx(s, rel=0.08)
    assert abs(np.corrcoef(f20, np.log(np.asarray(pr["eta"])))[0, 1]) < 0.08
    # the density: log N(log F - eta log 20; m, s) - log F, the rest unchanged
    spec = B.make_spec(law)
    th = {**law.example, "sigma": 0.01}
    th2 = {**th, "F": 3.0, "eta": 0.9}
    from scipy import stats
    def logp_F(t):
        return stats.norm.logpdf(np.log(t["F"]) - t["eta"] * np.log(20.0), m, s) - np.log(t["F"])
    def logp_eta(t):
        return float(priors["eta"].log_prob(t["eta"]))
    diff = float(spec.log_prior(th2) - spec.log_prior(th))
    assert diff == pytest.approx(logp_F(th2) - logp_F(th) + logp_eta(th2) - logp_eta(th), rel=1e-9)
    # a prior given by the user replaces it
    import numpyro.distributions as dist
    user = B.make_spec(law, priors={"F": dist.LogNormal(0.0, 1.0)})
    assert not isinstance(user.priors["F"], B.AtReference)


def test_unknown_prior_names_and_bad_options_raise(chin_data):
    import numpyro.distributions as dist

    with pytest.raises(bs.BayesScalingError, match="not parameters"):
        bs.fit_posterior("chinchilla", chin_data, priors={"alhpa": dist.Normal(0.3, 0.1)})
    with pytest.raises(bs.BayesScalingError, match="likelihood"):
        bs.fit_posterior("chinchilla", chin_data, likelihood="cauchy")
    with pytest.raises(bs.BayesScalingError, match="method"):
        bs.fit_posterior("chinchilla", chin_data, method="vi")


# --- inference -------------------------------------------------------------------------------------

def test_laplace_recovers_simulated_chinchilla(chin_laplace):
    post = chin_laplace
    assert post.ok and post.diagnostics["pareto_k"] < 0.7
    s = post.summary(hdi_prob=0.9)
    for k, v in CHIN_TRUE.items():
        assert s.loc[k, "hdi_5%"] <= v <= s.loc[k, "hdi_95%"], k
    assert post.map["sigma"] == pytest.approx(0.01, rel=0.35)


def test_nuts_converges_and_agrees_with_laplace(chin_nuts, chin_laplace):
    post = chin_nuts
    d = post.diagnostics
    assert d["max_rhat"] < 1.05 and d["divergences"] == 0
    for g in ("posterior", "sample_stats", "log_likelihood", "observed_data", "constant_data"):
        assert hasattr(post.idata, g), g
    a, b = post.summary(), chin_laplace.summary()
    for k in ("alpha", "beta", "E"):
        assert a.loc[k, "mean"] == pytest.approx(b.loc[k, "mean"], abs=0.5 * b.loc[k, "sd"]), k
        assert a.loc[k, "sd"] == pytest.approx(b.loc[k, "sd"], rel=0.35), k


def test_user_prior_changes_the_posterior(chin_data):
    import numpyro.distributions as dist

    tight = bs.fit_posterior("chinchilla", chin_data, method="laplace",
                             priors={"alpha": dist.Normal(0.5, 0.005)})
    assert tight.summary().loc["alpha", "mean"] == pytest.approx(0.5, abs=0.02)
    assert tight.settings["priors"]["alpha"].startswith("user")


def test_other_likelihoods_and_fixed_parameters(chin_data):
    for lik in ("student_t", "normal"):
        p = bs.fit_posterior("chinchilla", chin_data, method="laplace", likelihood=lik)
        assert p.ok
        assert p.idata.log_likelihood["y"].shape[-1] == len(chin_data)
    p = bs.fit_posterior("chinchilla", chin_data, method="laplace", fixed={"E": 1.8})
    assert "E" not in p.param_names and p.map["E"] == 1.8
    assert np.all(np.isfinite(p.predict_draws(chin_data)))


def test_failed_diagnostics_warn_and_flag(chin_data):
    with pytest.warns(B.ConvergenceWarning, match="What to try"):
        post = bs.fit_posterior("chinchilla", chin_data, num_chains=2, num_warmup=5,
                                num_samples=20, progress_bar=False, seed=2, retries=0)
    assert not post.ok and post.diagnostics["failed"]
    with pytest.raises(bs.errors.ConvergenceError, match="allow_unconverged=True"):
        post.forecast(chin_data.head(3))
    with pytest.warns(B.ConvergenceWarning, match="failed its convergence"):
        post.forecast(chin_data.head(3), allow_unconverged=True)


# --- forecasts and persistence ---------------------------------------------------------------------

def test_forecast_intervals_and_predictive_coverage(chin_laplace):
    post = chin_laplace
    law = bs.laws.get("chinchilla")
    new = chin_grid(12, 12)
    fc = post.forecast(new, interval=0.9)
    assert list(fc.columns)[:5] == ["mean", "median", "lower", "upper", "sd"]
    assert (fc["lower"] < fc["median"]).all() and (fc["median"] < fc["upper"]).all()
    fm = post.forecast(new, interval=0.9, kind="mean")
    assert ((fm["upper"] - fm["lower"]) < (fc["upper"] - fc["lower"])).all()
    draws = post.predict_draws(new, kind="predictive")
    assert draws.shape == (4000, len(new))
    # new measurements from the true law with the same noise land in the 90% band ~90% of the time
    obs = simulate(law, new, params=CHIN_TRUE, noise=0.01, seed=11)
    cov = post.coverage(obs, (0.5, 0.9))
    assert 0.8 <= cov[0.9] <= 0.97 and 0.38 <= cov[0.5] <= 0.62


def test_mapfit_predict_draws_has_one_draw(chin_data):
    fit = bs.fit_map("chinchilla", chin_data, delta=1e-3, n_starts=8)
    y = fit.predict_draws(chin_data)
    assert y.shape == (1, len(chin_data))
    np.testing.assert_allclose(y[0], fit.predict(chin_data))


def test_save_load_roundtrip(tmp_path, chin_nuts, chin_data):
    path = tmp_path / "post.nc"
    chin_nuts.save(path)
    back = bs.load_posterior(path)
    assert back.law.name == "chinchilla" and back.ok == chin_nuts.ok
    assert back.map == pytest.approx(chin_nuts.map)
    assert back.settings["num_samples"] == 500
    # 2 x 500 draws may miss R-hat <= 1.01 narrowly: allowed, the round trip is what is tested
    ok = dict(allow_unconverged=True)
    np.testing.assert_allclose(back.predict_draws(chin_data, **ok),
                               chin_nuts.predict_draws(chin_data, **ok))
    pd.testing.assert_frame_equal(back.forecast(chin_data, **ok), chin_nuts.forecast(chin_data, **ok))


def test_commands_write_netcdf_and_forecast_csv(tmp_path, chin_data, capsys):
    table = tmp_path / "t.csv"
    chin_data.to_csv(table, index=False)
    out, fc_out = tmp_path / "p.nc", tmp_path / "fc.csv"
    assert main(["posterior", "--law", "chinchilla", str(table), "--method", "laplace",
                 "--out", str(out)]) == 0
    assert out.exists() and bs.load_posterior(out).ok
    assert main(["forecast", str(out), str(table), "--interval", "0.8", "--out", str(fc_out)]) == 0
    fc = pd.read_csv(fc_out)
    assert {"N", "D", "mean", "lower", "upper", "extrapolated"} <= set(fc.columns)
    assert len(fc) == len(chin_data) and not fc["extrapolated"].any()
    assert "0 of %d rows extrapolate" % len(chin_data) in capsys.readouterr().out


# --- comparison and plots --------------------------------------------------------------------------

def test_compare_prefers_the_true_law_and_surfaces_pareto_k(chin_data, chin_laplace):
    wrong = bs.fit_posterior("chinchilla", chin_data, method="laplace", fixed={"beta": 0.15})
    table = bs.compare({"true": chin_laplace, "wrong_beta": wrong})
    assert table.index[0] == "true"
    assert {"elpd_loo", "max_pareto_k", "n_bad_k"} <= set(table.columns)
    bad = chin_data.copy()
    bad.loc[0, "loss"] *= 1.5
    p1 = bs.fit_posterior("chinchilla", bad, method="laplace", likelihood="normal")
    p2 = bs.fit_posterior("chinchilla", bad, method="laplace", likelihood="normal",
                          fixed={"beta": 0.15})
    with pytest.warns(bs.ParetoKWarning, match="rows \\[0"):
        bs.compare({"a": p1, "b": p2})


def test_plots_write_pngs(tmp_path, chin_laplace, chin_data, epoch):
    from bayes_scaling import plots

    fig = plots.fit_plot(chin_laplace, chin_data, path=tmp_path / "fit.png")
    assert sum(ax.get_visible() for ax in fig.axes) == 6  # one panel per model size
    plots.forecast_plot(chin_laplace, chin_grid(3, 10), train=chin_data, path=tmp_path / "fc.png")
    fit = bs.fit_map("chinchilla", epoch[1], delta=1e-3, n_starts=4)
    plots.fit_plot(fit, epoch[1], path=tmp_path / "epoch.png")  # continuous (N, D): parity plot
    for f in ("fit.png", "fc.png", "epoch.png"):
        assert (tmp_path / f).stat().st_size > 5000


# --- calibration (small; the 50-dataset study is analyses/bayes_calibration.py) -----------------

def test_laplace_calibration_on_prior_draws():
    """Truth drawn from the priors, 40 simulated 6 x 6 tables: the 90% intervals of the law's
    value cover it at close to the nominal rate. Laplace parameter intervals run a little narrow
    (about 0.85 here; the NUTS study is analyses/bayes_calibration.py), but not collapsed."""
    from bayes_scaling.calibration import calibrate

    res = calibrate("chinchilla", chin_grid(6, 6), n_datasets=40, method="laplace", seed=0)
    assert res["n_failed"] == 0
    assert 0.8 <= res["coverage_predictions"] <= 0.97
    assert 0.75 <= res["coverage_params"] <= 0.97
    # a broken pipeline (wrong noise scale, intervals of the wrong parameters) collapses coverage
    narrow = calibrate("chinchilla", chin_grid(6, 6), n_datasets=8, method="laplace", seed=0,
                       interval=0.2)
    assert narrow["coverage_predictions"] < 0.5


def test_log_jacobian_of_every_transform_kind():
    from bayes_scaling.laws import Param

    for p in (Param("a", 0.0, 1.0, (0.1, 0.9)), Param("b", 1e-6, 1e6, (1e-2, 1e4), True),
              Param("c", 0.0, math.inf, (0.1, 1.0)), Param("d", -math.inf, 2.0, (0.0, 1.0)),
              Param("e", init=(-1.0, 1.0))):
        for u in (-3.0, -0.2, 0.0, 1.7):
            d = jax.grad(lambda v: p.from_unconstrained(v))(u)
            assert float(B.log_abs_det_jacobian(p, jnp.asarray(u))) == pytest.approx(
                math.log(abs(float(d))), rel=1e-9, abs=1e-12), (p.kind, u)


def test_nuts_refits_tables_of_another_size_in_one_process(chin_data, chin_nuts):
    """The compiled sampler is cached per model; a later fit on a table with fewer rows must get
    its own program rather than re-running the cached one (chin_nuts's) on arrays of another
    shape."""
    kw = dict(num_chains=2, num_warmup=300, num_samples=500, progress_bar=False)  # chin_nuts's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = bs.fit_posterior("chinchilla", chin_data.iloc[:30], seed=1, retries=0, **kw)
    assert chin_nuts.idata.observed_data["y"].shape == (36,)
    assert b.idata.observed_data["y"].shape == (30,)
    assert np.all(np.isfinite(b.draws("alpha")))


def test_a_refit_of_the_same_shape_lowers_no_new_program(chin_data):
    """The chains' program takes the data, centre and whitening as arguments: a second fit on
    another table of the same shape (new losses, so a new mode and whitening) reuses every
    compiled program of the first, without tracing or lowering any (with the data as constants
    of the program, each fit lowered and compiled its own)."""
    from jax import monitoring

    lowered = []

    def listen(event, duration, **kw):
        if event.endswith("jaxpr_to_mlir_module_duration"):
            lowered.append(kw.get("fun_name"))

    kw = dict(num_chains=2, num_warmup=200, num_samples=200, progress_bar=False, retries=0)
    rng = np.random.default_rng(5)
    tables = [chin_data.assign(loss=chin_data["loss"] * np.exp(0.003 * rng.standard_normal(
        len(chin_data)))) for _ in range(2)]
    monitoring.register_event_duration_secs_listener(listen)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first = bs.fit_posterior("chinchilla", tables[0], seed=0, **kw)
            n_first = len(lowered)
            second = bs.fit_posterior("chinchilla", tables[1], seed=1, **kw)
    finally:
        monitoring.unregister_event_duration_listener(listen)
    assert n_first > 0  # the listener sees the first fit's programs
    assert lowered[n_first:] == []
    assert not np.allclose(first.draws("A"), second.draws("A"))  # a fit of its own table


def test_auto_chains_run_in_parallel_when_the_process_has_a_device_per_chain():
    """chain_method="auto": one chain per host device when there are enough (a subprocess, since
    the device count is fixed when JAX starts), and the chains still find the generator."""
    import json
    import os
    import subprocess
    import sys

    code = """
import json, sys, warnings
import numpy as np, pandas as pd
sys.path.insert(0, "tests")
import bayes_scaling as bs
from conftest import simulate
grid = pd.DataFrame([dict(N=n, D=d) for n in (1e8, 4e8, 1.6e9) for d in 2e9 * 2.0 ** np.arange(6)])
df = simulate("chinchilla", grid, noise=0.005, seed=3)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    post = bs.fit_posterior("chinchilla", df, num_chains=4, num_warmup=300, num_samples=300,
                            progress_bar=False, retries=0)
alpha = np.asarray(post.idata.posterior["alpha"])
print(json.dumps({"chain_method": post.settings["chain_method"], "shape": list(alpha.shape),
                  "alpha": float(np.median(alpha)), "rhat": post.diagnostics["max_rhat"]}))
"""
    # four host devices, in place of any device count an earlier test set in this process; its
    # other flags are kept (they are part of the compilation cache's key; the device count is not)
    count = "--xla_force_host_platform_device_count"
    flags = [f"{count}=4"] + [f for f in os.environ.get("XLA_FLAGS", "").split()
                              if not f.startswith(count)]
    env = dict(os.environ, XLA_FLAGS=" ".join(flags))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=root, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["chain_method"] == "parallel" and r["shape"] == [4, 300]
    true_alpha = bs.laws.get("chinchilla").example["alpha"]
    assert abs(r["alpha"] - true_alpha) < 0.05 and r["rhat"] < 1.05
    # in this (one-device) process "auto" keeps the chains in one vectorised program
    assert jax.local_device_count() == 1
