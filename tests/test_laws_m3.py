"""M3-paper laws (bayes_scaling/laws/m3.py): registry, paper identities, Table 13 sanity, numerics.

Identities are checked on random grids of parameters (drawn from each law's init ranges) and inputs,
to ~1e-12 relative.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.laws import m3 as m3mod

RTOL = 1e-12
N_DRAWS = 400


def law(name):
    return bs.laws.get(name)


def draw_params(lw, n, seed, **override):
    """``n`` parameter sets from the law's init ranges (as fits draw them), as arrays."""
    rng = np.random.default_rng(seed)
    p = {q.name: q.sample_init(rng, n) for q in lw.params}
    p.update({k: np.broadcast_to(np.asarray(v, float), (n,)) for k, v in override.items()})
    return p


def log_uniform(rng, lo, hi, n):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def close(a, b, rtol=RTOL):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=0)


# --- registry ---------------------------------------------------------------------------------------

# name -> number of free parameters (M3 paper Table 2 "#P" where it lists the model)
EXPECTED = {
    "chinchilla": 5, "chinchilla_m3": 5, "he": 6, "he_dual": 7, "muennighoff": 7,
    "muennighoff_m3": 7, "atlas": 7, "sedova": 9, "zhang": 6, "m3": 11, "m3_rmk": 9,
    "m3_hlp": 12, "m3_r1": 13, "dcpt_m3": 8, "ptpp_floor_m3": 10, "ptpp_gated_m3": 10,
    "ptpp_gated_floor_m3": 12,
}


def test_registered_with_paper_parameter_counts():
    names = bs.laws.names()
    for name, n in EXPECTED.items():
        assert name in names
        assert len(law(name).params) == n, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_spec_is_complete(name):
    lw = law(name)
    assert any(s in lw.equation for s in ("Eq.", "Eqs.", "App."))
    assert lw.example and lw.description
    for q in lw.params:
        assert q.lower <= lw.example[q.name] <= q.upper
        if q.name in ("A", "B", "C_s", "B_s", "r0", "a", "tau_s"):
            assert q.log_init, q.name
    assert "reads:" in lw.describe()


def test_table6_bounds_and_inits():
    lw = law("m3")
    table6 = {
        "A": (1e-6, 1e6, (1e-2, 1e4), True), "B": (1e-6, 1e6, (1e-2, 1e4), True),
        "alpha": (0.1, 2.0, (0.1, 0.8), False), "beta": (0.01, 5.0, (0.1, 0.8), False),
        "E": (0.001, 10.0, (1.0, 5.0), False), "RD_star": (0.1, 200.0, (1.0, 100.0), False),
        "RM_star": (0.1, 100.0, (0.5, 50.0), False), "RDh_star": (0.1, 200.0, (1.0, 100.0), False),
        "psi": (0.01, 10.0, (0.1, 5.0), False), "gamma": (0.001, 1.0, (0.01, 0.5), False),
        "gamma2": (0.001, 1.0, (0.01, 0.5), False),
    }
    for name, (lo, hi, init, log_init) in table6.items():
        q = lw.param(name)
        assert (q.lower, q.upper, q.init, q.log_init) == (lo, hi, init, log_init), name
    r1 = law("m3_r1")
    assert (r1.param("r0").lower, r1.param("r0").upper, r1.param("r0").init) == (1e-6, 1.0, (1e-4, 0.1))
    assert r1.param("r0").log_init
    assert (r1.param("gamma2_dot").lower, r1.param("gamma2_dot").upper) == (-0.5, 0.5)
    assert r1.param("gamma2_dot").init == (-0.2, 0.2)


def test_two_stage_baselines_share_the_ptpp_functions():
    for name, base in [("dcpt_m3", "dcpt"), ("ptpp_floor_m3", "ptpp_floor"),
                       ("ptpp_gated_m3", "ptpp_gated"), ("ptpp_gated_floor_m3", "ptpp_gated_floor")]:
        a, b = law(name), law(base)
        assert a.fn is b.fn and a.params == b.params and a.variables == b.variables
        assert a.column("N") == "M" and a.column("D") == "D_2" and a.column("replay") == "r_f"
        assert a.column("ptpp") == "ptpp"
    assert law("chinchilla_m3").fn is law("chinchilla").fn
    assert law("chinchilla_m3").columns == ("M", "D")


# --- identities (issue item 3) ---------------------------------------------------------------------


def u_opt(p, D_T):
    """Compute-optimal model size for D_T tokens, directly from G as the paper writes it."""
    G = (p["alpha"] * p["A"] / (p["beta"] * p["B"])) ** (1 / (p["alpha"] + p["beta"]))
    return G ** ((p["alpha"] + p["beta"]) / p["alpha"]) * D_T ** (p["beta"] / p["alpha"])


def test_log_compute_optimal_size_matches_G_form():
    p = draw_params(law("chinchilla"), N_DRAWS, 0)
    D_T = log_uniform(np.random.default_rng(1), 1e6, 1e12, N_DRAWS)
    got = np.exp(m3mod.log_compute_optimal_size(np.log(D_T), p["A"], p["B"], p["alpha"], p["beta"]))
    close(got, u_opt(p, D_T), 1e-10)  # the G form itself loses a few digits in the powers


def test_m3_is_chinchilla_at_k1_r1_below_U_M():
    rng = np.random.default_rng(2)
    p = draw_params(law("m3"), N_DRAWS, 3)
    D_T = log_uniform(rng, 1e6, 1e12, N_DRAWS)
    M = u_opt(p, D_T) * log_uniform(rng, 1e-4, 1.0, N_DRAWS) * (1 - 1e-9)
    df = pd.DataFrame({"M": M, "D_T": D_T, "k": 1.0, "r": 1.0, "r_f": 1.0, "D": D_T})
    close(law("m3")(p, df), law("chinchilla_m3")(p, df))
    # the same on a table with no k / r / r_f columns (defaults: k = 1, r = 1, single-stage)
    close(law("m3")(p, df[["M", "D_T"]]), law("chinchilla_m3")(p, df))


def test_m3_rmk_is_chinchilla_at_k1_for_every_M():
    rng = np.random.default_rng(4)
    p = draw_params(law("m3_rmk"), N_DRAWS, 5)
    D_T = log_uniform(rng, 1e6, 1e12, N_DRAWS)
    M = log_uniform(rng, 1e5, 1e13, N_DRAWS)  # far on both sides of U_M
    assert (M > u_opt(p, D_T)).mean() > 0.3
    df = pd.DataFrame({"M": M, "D_T": D_T, "k": 1.0, "D": D_T})
    close(law("m3_rmk")(p, df), law("chinchilla_m3")(p, df))


def test_m3_rmk_effective_model_size_tends_to_M_as_k_to_1():
    rng = np.random.default_rng(6)
    # M' - M shrinks like 1/R_M*(k) ~ (k-1)^b / a; b >= 0.5 makes the limit visible in float64
    p = draw_params(law("m3_rmk"), N_DRAWS, 7, b=rng.uniform(0.5, 2.0, N_DRAWS))
    D_T = log_uniform(rng, 1e6, 1e12, N_DRAWS)
    M = u_opt(p, D_T) * log_uniform(rng, 1.5, 100.0, N_DRAWS)  # M > U_M, where M' < M for k > 1
    log_U = m3mod.log_compute_optimal_size(np.log(D_T), p["A"], p["B"], p["alpha"], p["beta"])

    def rel_gap(k):
        inv = m3mod.inv_rm_star_k(jnp.full(N_DRAWS, k), p["a"], p["b"], p["c"])
        Mp = np.exp(m3mod.log_effective_model(np.log(M), log_U, inv))
        return np.abs(Mp / M - 1)

    gaps = np.stack([rel_gap(1.0 + 10.0 ** -j) for j in range(13)])
    assert np.all(gaps[0] > 1e-6)
    assert np.all(np.diff(gaps, axis=0) <= 1e-12)  # monotone as k -> 1
    assert np.all(gaps[-1] <= 1e-3)
    assert np.all(rel_gap(1.0) <= 1e-12)  # exactly M at k = 1
    # and 1/R_M*(k) is the reciprocal of Eq. 7
    k = 1 + log_uniform(rng, 1e-3, 1e3, N_DRAWS)
    close(1 / m3mod.inv_rm_star_k(k, p["a"], p["b"], p["c"]), m3mod.rm_star_k(k, p["a"], p["b"], p["c"]))


def test_he_dual_is_he_at_r_equal_r_f():
    rng = np.random.default_rng(8)
    p = draw_params(law("he_dual"), N_DRAWS, 9)
    r = rng.uniform(0.01, 1.0, N_DRAWS)
    df = pd.DataFrame({"M": log_uniform(rng, 1e6, 1e10, N_DRAWS),
                       "D": log_uniform(rng, 1e7, 1e12, N_DRAWS), "r": r, "r_f": r})
    expect = law("he")(p, df)
    close(law("he_dual")(p, df), expect)
    close(law("he_dual")(p, df.drop(columns="r_f")), expect)  # absent r_f: single-stage
    # and r = 1 (or no r column) is Chinchilla in M
    one = df.assign(r=1.0).drop(columns="r_f")
    close(law("he")(p, one), law("chinchilla_m3")(p, one))
    close(law("he")(p, one.drop(columns="r")), law("chinchilla_m3")(p, one))


def test_muennighoff_is_chinchilla_at_D_equal_U_below_U_N():
    rng = np.random.default_rng(10)
    p = draw_params(law("muennighoff"), N_DRAWS, 11)
    U = log_uniform(rng, 1e6, 1e12, N_DRAWS)
    N = u_opt(p, U) * log_uniform(rng, 1e-4, 1.0, N_DRAWS) * (1 - 1e-9)
    df = pd.DataFrame({"N": N, "D": U, "U": U})
    close(law("muennighoff")(p, df), law("chinchilla")(p, df))


def test_muennighoff_m3_is_muennighoff_with_D_kDT_U_DT():
    rng = np.random.default_rng(12)
    p = draw_params(law("muennighoff_m3"), N_DRAWS, 13)
    D_T, k = log_uniform(rng, 1e6, 1e11, N_DRAWS), 2.0 ** rng.integers(0, 10, N_DRAWS)
    M = log_uniform(rng, 1e6, 1e10, N_DRAWS)
    got = law("muennighoff_m3")(p, pd.DataFrame({"M": M, "D_T": D_T, "k": k}))
    q = {**p, "RN_star": p["RM_star"]}
    close(got, law("muennighoff")(q, pd.DataFrame({"N": M, "D": k * D_T, "U": D_T})), 1e-11)


def test_saturation_limits():
    rng = np.random.default_rng(14)
    R_star = rng.uniform(0.1, 200, N_DRAWS)
    p = rng.uniform(0.1, 20, N_DRAWS)
    huge = 1e200 * R_star  # (R*/R)^p must vanish even for p = 0.1
    # h_Lp keeps the asymptote 1 + R* of h (Eq. 20)
    close(m3mod.saturation_lp(huge, R_star, p), 1 + R_star, 1e-9)
    close(m3mod.saturation(huge, R_star), 1 + R_star, 1e-12)
    # h_Lp(0) = h(0) = 1; both lie below 1 + min(R, R*); h_Lp rises with p towards that knee
    close(m3mod.saturation_lp(np.zeros(N_DRAWS), R_star, p), 1.0)
    R = log_uniform(rng, 1e-6, 1e4, N_DRAWS)
    hl, h = m3mod.saturation_lp(R, R_star, p), m3mod.saturation(R, R_star)
    knee = 1 + np.minimum(R, R_star)
    assert np.all(hl <= knee * (1 + 1e-12)) and np.all(h <= knee * (1 + 1e-12))
    assert np.all(m3mod.saturation_lp(R, R_star, 1.5 * p) >= hl * (1 - 1e-12))
    close(m3mod.saturation_lp(R, R_star, 1e4), knee, 1e-3)
    # Eq. 20 literally
    close(hl, 1 + R / (1 + (R / R_star) ** p) ** (1 / p), 1e-12)
    # Eq. 5 literally, where it is well conditioned
    mid = (R / R_star > 1e-3)
    close(h[mid], (1 + R_star * (1 - np.exp(-R / R_star)))[mid], 1e-12)
    # R* = inf is exact: h = 1 + R (what R_M*(k=1) = inf relies on)
    close(m3mod.saturation(R, np.inf), 1 + R)


def test_high_resource_weight_limits():
    rng = np.random.default_rng(15)
    r = rng.uniform(0.0, 1.0, N_DRAWS)
    RDh, psi = rng.uniform(0.1, 200, N_DRAWS), rng.uniform(0.01, 10, N_DRAWS)
    close(m3mod.high_resource_weight(r, np.zeros(N_DRAWS), RDh, psi), 1.0)
    close(m3mod.high_resource_weight(r, np.full(N_DRAWS, 1e9), RDh * 0 + 1.0, psi), (1 - r) ** psi)
    g = m3mod.high_resource_weight(r, rng.uniform(0, 1e3, N_DRAWS), RDh, psi)
    assert np.all((g <= 1) & (g >= (1 - r) ** psi * (1 - 1e-12)))


def test_m3_without_saturation_is_he_dual_on_total_tokens():
    """Eqs. 46-50: with R_D*, R_D,high*, R_M* -> inf, D' = k D_T / r = D and M' = M."""
    rng = np.random.default_rng(16)
    p = draw_params(law("m3"), N_DRAWS, 17, RD_star=np.inf, RDh_star=np.inf, RM_star=np.inf)
    D_T, k = log_uniform(rng, 1e6, 1e11, N_DRAWS), 2.0 ** rng.integers(0, 10, N_DRAWS)
    r = 2.0 ** -rng.integers(0, 6, N_DRAWS)
    r_f = np.minimum(1.0, r * rng.uniform(1, 8, N_DRAWS))
    df = pd.DataFrame({"M": log_uniform(rng, 1e6, 1e10, N_DRAWS), "D_T": D_T, "k": k, "r": r,
                       "r_f": r_f, "D": k * D_T / r})
    close(law("m3")(p, df), law("he_dual")(p, df), 1e-11)


def test_m3_variants_reduce_to_m3():
    rng = np.random.default_rng(18)
    p = draw_params(law("m3_r1"), N_DRAWS, 19, gamma2_dot=0.0)
    df = pd.DataFrame({"M": log_uniform(rng, 1e6, 1e10, N_DRAWS),
                       "D_T": log_uniform(rng, 1e6, 1e11, N_DRAWS),
                       "k": 2.0 ** rng.integers(0, 10, N_DRAWS),
                       "r": 2.0 ** -rng.integers(0, 6, N_DRAWS), "r1": rng.uniform(0, 0.5, N_DRAWS)})
    df["r_f"] = np.minimum(1.0, df.r * rng.uniform(1, 8, N_DRAWS))
    close(law("m3_r1")(p, df), law("m3")(p, df))
    # single-stage rows: r1 is irrelevant whatever gamma2_dot
    q = draw_params(law("m3_r1"), N_DRAWS, 20)
    single = df.assign(r_f=df.r)
    close(law("m3_r1")(q, single), law("m3")(q, single))
    close(law("m3_r1")(q, single.assign(r1=0.3)), law("m3")(q, single))
    # at k = 1 the data multiplier is 1 for h and h_Lp alike, so m3_hlp = m3
    q = draw_params(law("m3_hlp"), N_DRAWS, 21)
    close(law("m3_hlp")(q, df.assign(k=1.0)), law("m3")(q, df.assign(k=1.0)))


def test_atlas_and_sedova_reduce_as_written():
    rng = np.random.default_rng(22)
    D_T, k = log_uniform(rng, 1e6, 1e11, N_DRAWS), 2.0 ** rng.integers(0, 10, N_DRAWS)
    r = 2.0 ** -rng.integers(0, 6, N_DRAWS)
    df = pd.DataFrame({"M": log_uniform(rng, 1e6, 1e10, N_DRAWS), "D_T": D_T, "k": k, "r": r,
                       "D": k * D_T / r})
    # ATLAS with tau = 1 and no saturation counts every token: Chinchilla on D = k D_T / r
    p = draw_params(law("atlas"), N_DRAWS, 23, tau=1.0, RD_star=np.inf)
    close(law("atlas")(p, df), law("chinchilla_m3")(p, df), 1e-11)
    # Sedova, literally as App. C.3 writes it
    q = draw_params(law("sedova"), N_DRAWS, 24)
    h = 1 + q["RD_star_s"] * (1 - np.exp(-(k - 1) / q["RD_star_s"]))
    Dse = k * D_T * (1 - r) / r + q["tau_s"] * D_T * h
    M = df.M.to_numpy()
    lit = (q["E_s"] + q["C_s"] / M ** q["beta_s"] + q["B_s"] * M ** q["delta_s"] / Dse ** q["alpha_s"]
           + q["gamma_s"] * r)
    close(law("sedova")(q, df), lit, 1e-10)


def m3_grid_two_stage(rng, n):
    """Two-stage rows on the M3 grid (App. B.3): r1 < r < r2 = r_f, r_f in {1/4, 1/2, 3/4, 1}."""
    r2 = rng.choice([0.25, 0.5, 0.75, 1.0], n)
    r1 = r2 * rng.choice([0.0, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2], n)
    r = r1 + (r2 - r1) * rng.uniform(0.1, 0.9, n)
    s1 = (r2 - r) / (r2 - r1)
    M = 4.70e8 / 2.0 ** rng.integers(-1, 6, n)
    D = log_uniform(rng, 1e8, 1e11, n)
    N = M / 6
    return pd.DataFrame({"M": M, "N": N, "D": D, "D_1": s1 * D, "D_2": (1 - s1) * D, "r": r,
                         "r1": r1, "r_f": r2, "ptpp": s1 * D / N})


def test_two_stage_baselines_match_the_m3_text_to_eps_r():
    """D-CPT/PTPP-F1/F2/F3 of M3 App. C.3 (no eps_r, no beta_eff floor) vs the mapped PTPP laws."""
    rng = np.random.default_rng(25)
    df = m3_grid_two_stage(rng, N_DRAWS)
    M, D2, rf, ptpp = (df[c].to_numpy() for c in ("M", "D_2", "r_f", "ptpp"))
    for name in ("dcpt_m3", "ptpp_floor_m3", "ptpp_gated_m3", "ptpp_gated_floor_m3"):
        lw = law(name)
        p = draw_params(lw, N_DRAWS, 26)
        beta = p["beta"]
        if "lam" in p:
            beta = beta * (1 - p["lam"] * ptpp ** p["zeta"] / (1 + ptpp ** p["zeta"]))
        lit = p["E"] + p["A"] / M ** p["alpha"] + p["B"] * rf ** p["nu"] / D2 ** beta + p["C"] / rf ** p["gamma"]
        if "F" in p:
            lit = lit + p["F"] / ptpp ** p["eta"]
        got = np.asarray(lw(p, df))
        rel = np.abs(got / lit - 1)
        # only eps_r = 1e-5 differs: at most gamma eps_r / r_f <= 4e-5 relative (r_f >= 1/4, gamma <= 1)
        assert rel.max() < 4e-5, (name, rel.max())
        assert rel.max() > 0                           # (and it does differ)


def test_zhang_as_written():
    rng = np.random.default_rng(27)
    df = m3_grid_two_stage(rng, N_DRAWS)
    df = df[df.D_1 > 0]
    p = draw_params(law("zhang"), len(df), 28)
    lit = p["A"] / (df.M ** p["alpha"] * df.D_1 ** p["phi1"] * df.D_2 ** p["phi2"]
                    * df.r_f ** p["gamma"]) + p["E"]
    close(law("zhang")(p, df), lit, 1e-11)


def test_ptpp_identities():
    """PTPP paper: Form 2 at lambda = 0 is D-CPT; Form 3 at F = 0 is Form 2; Form 1 at F = 0 is D-CPT."""
    rng = np.random.default_rng(29)
    df = pd.DataFrame({"N": log_uniform(rng, 1e4, 1e10, N_DRAWS), "D": log_uniform(rng, 1e4, 1e12, N_DRAWS),
                       "replay": rng.uniform(1e-9, 1 - 1e-9, N_DRAWS),
                       "ptpp": log_uniform(rng, 1.0, 1e4, N_DRAWS)})
    p = draw_params(law("ptpp_gated_floor"), N_DRAWS, 30)
    close(law("ptpp_gated")({**p, "lam": np.zeros(N_DRAWS)}, df), law("dcpt")(p, df))
    close(law("ptpp_gated_floor")({**p, "F": np.zeros(N_DRAWS)}, df), law("ptpp_gated")(p, df))
    close(law("ptpp_floor")({**p, "F": np.zeros(N_DRAWS)}, df), law("dcpt")(p, df))


def test_muennighoff_reproduces_datablations_readme():
    """Datablations README sanity values with the published fit (issue item 2's law)."""
    p = dict(law("muennighoff").example)
    p.update(A=math.exp(6.255414), B=math.exp(7.3049974), E=math.exp(0.6254804))
    df = pd.DataFrame({"N": [6.34e9, 8.67e9], "D": [242e9, 178e9], "U": [25e9, 25e9]})
    close(law("muennighoff")(p, df), [2.2256440889984477, 2.2269634075087867], 1e-9)
    ex = law("muennighoff").example
    assert abs(ex["A"] / math.exp(6.255414) - 1) < 1e-6 and abs(ex["B"] / math.exp(7.3049974) - 1) < 1e-6
    assert abs(ex["E"] / math.exp(0.6254804) - 1) < 1e-6


# --- Table 13 sanity (issue item 3/4 context) ------------------------------------------------------


@pytest.mark.parametrize("lang", ["ja", "id", "sw"])
def test_table13_two_stage_beats_single_stage(lang):
    """Sec. 4.1: gamma2 < gamma, so at fixed (M, D_T, k, r < 1) two-stage with r_f = 1 gives the
    factor r^-gamma2 and beats single-stage r^-gamma."""
    p = m3mod.TABLE13[lang]
    assert p["gamma2"] < p["gamma"]
    rng = np.random.default_rng(31)
    n = 200
    r = 2.0 ** -rng.integers(1, 6, n)
    df = pd.DataFrame({"M": 4.70e8 / 2.0 ** rng.integers(-1, 6, n),
                       "D_T": 2.13e9 * 2.0 ** rng.integers(-7, 2, n).astype(float),
                       "k": 2.0 ** rng.integers(0, 10, n), "r": r})
    two = law("m3")(p, df.assign(r_f=1.0))
    one = law("m3")(p, df.assign(r_f=df.r))
    assert np.all(two < one)
    close(two / one, r ** (p["gamma"] - p["gamma2"]), 1e-12)


@pytest.mark.parametrize("lang", ["ja", "id", "sw"])
def test_table13_optimal_epochs_collapse_on_scarcity(lang):
    """App. D.6.3 (Eqs. 39-41): (L / R_dual - E) C^(alpha beta/(alpha+beta)) depends on (C, D_T)
    only through x = D_T / C^(alpha/(alpha+beta)), so argmin_k depends only on D_T / D*(C)."""
    p = m3mod.TABLE13[lang]
    a, b = p["alpha"], p["beta"]
    ks = 2.0 ** np.linspace(0, 10, 41)
    for r, r_f in [(1.0, 1.0), (0.25, 0.25), (0.125, 1.0)]:
        phis, kstar = [], []
        for C in (1e17, 1e18, 1e19):
            x = 2.0 ** np.linspace(-8, 2, 6) * 5.8316  # scarcity values x = D_T / C^(a/(a+b))
            D_T = x[:, None] * C ** (a / (a + b)) * np.ones_like(ks)
            k = np.ones_like(x)[:, None] * ks
            M = C * r / (k * D_T)  # C = M D, D = k D_T / r
            df = pd.DataFrame({"M": M.ravel(), "D_T": D_T.ravel(), "k": k.ravel(), "r": r, "r_f": r_f})
            L = np.asarray(law("m3")(p, df)).reshape(M.shape)
            R = r_f ** -p["gamma"] * (r / r_f) ** -p["gamma2"]
            phis.append((L / R - p["E"]) * C ** (a * b / (a + b)))
            kstar.append(ks[np.argmin(L, axis=1)])
        close(phis[1], phis[0], 1e-9)
        close(phis[2], phis[0], 1e-9)
        assert np.array_equal(kstar[0], kstar[1]) and np.array_equal(kstar[0], kstar[2])


@pytest.mark.parametrize("lang", ["ja", "id", "sw"])
def test_table13_small_k_optimal_epochs(lang):
    """App. D.6.3 corollary (Eqs. 44, 51): without saturation, k* = r D*(C) / D_T with
    D*(C) = G^-1 C^(alpha/(alpha+beta))."""
    p = {**m3mod.TABLE13[lang], "RD_star": np.inf, "RDh_star": np.inf, "RM_star": np.inf}
    a, b = p["alpha"], p["beta"]
    G = (a * p["A"] / (b * p["B"])) ** (1 / (a + b))
    C, r = 1e18, 0.5
    D_star = C ** (a / (a + b)) / G
    D_T = D_star / 20.0
    ks = np.exp(np.linspace(np.log(1.0), np.log(1000.0), 20001))
    df = pd.DataFrame({"M": C * r / (ks * D_T), "D_T": D_T, "k": ks, "r": r, "r_f": r})
    k_star = ks[np.argmin(np.asarray(law("m3")(p, df)))]
    assert abs(np.log(k_star / (r * D_star / D_T))) < 2 * np.log(ks[1] / ks[0])


# --- numerics ----------------------------------------------------------------------------------------


def m3_table(rng, n):
    """Single- and two-stage rows on the M3 grid, including the k = 1, r = 1 corner."""
    df = pd.DataFrame({"M": 4.70e8 / 2.0 ** rng.integers(-1, 6, n),
                       "D_T": 2.13e9 * 2.0 ** rng.integers(-7, 2, n).astype(float),
                       "k": 2.0 ** rng.integers(0, 10, n), "r": 2.0 ** -rng.integers(0, 5, n)})
    df.loc[: n // 4, ["k", "r"]] = 1.0
    df["r_f"] = np.where(rng.uniform(size=n) < 0.5, df.r, np.minimum(1.0, 4 * df.r))
    df["r1"] = np.where(df.r_f > df.r, df.r / 2, df.r)
    df["D"] = df.k * df.D_T / df.r
    df["U"] = df.D_T
    df["N"] = df.M / 6
    df["D_2"] = df.D / 2
    df["D_1"] = df.D / 2
    df["ptpp"] = df.D_1 / df.N
    df["replay"] = df.r_f
    return df


@pytest.mark.parametrize("name", sorted(EXPECTED) + ["dcpt", "ptpp_floor", "ptpp_gated",
                                                     "ptpp_gated_floor"])
def test_jit_vmap_grad_finite(name):
    """Every law jits, vmaps over parameter sets, and has finite values and gradients on the grid
    (k = 1 and r = 1 rows included) at parameters drawn from its init ranges."""
    lw = law(name)
    x = lw.inputs(m3_table(np.random.default_rng(32), 64))
    P = {k: jnp.asarray(v) for k, v in draw_params(lw, 16, 33).items()}

    def obj(p):
        L = lw.fn(p, x)
        return jnp.sum(jnp.log(L)), L

    vg = jax.jit(jax.vmap(jax.value_and_grad(obj, has_aux=True)))
    (_, vals), grads = vg(P)
    assert vals.shape == (16, 64)
    ok = np.all(np.asarray(vals) > 0, axis=1)
    assert ok.mean() > 0.5, name  # (Sedova's real gamma_s/delta_s can make a few draws negative)
    assert np.all(np.isfinite(np.asarray(vals)))
    for k, g in grads.items():
        assert np.all(np.isfinite(np.asarray(g)[ok])), (name, k)
    ex = {k: jnp.full(16, v) for k, v in lw.example.items()}
    (_, vals), grads = vg(ex)
    assert np.all(np.asarray(vals) > 0)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads.values())
