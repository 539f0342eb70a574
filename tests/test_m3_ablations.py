"""The registered M3 ablations (Table 2 '-Dual PL', '-g') and the R_M*(k, r) variants of Table 16
(Eq. 23): parameter counts and the identities that tie each to the M3 law, on random parameters
from the init ranges and random inputs, to 1e-12 relative."""
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.laws import m3 as m3mod

RTOL = 1e-12
N = 300

# name -> #P of the paper (Table 2 (a); Table 16)
COUNTS = {"m3_nodual": 10, "m3_nog": 9, "m3_rmkr_nog": 12, "m3_rmkr": 14, "m3_rmk_g": 13,
          "m3_rmk_hlp": 10}


def law(name):
    return bs.laws.get(name)


def params(lw, seed, **override):
    rng = np.random.default_rng(seed)
    p = {q.name: q.sample_init(rng, N) for q in lw.params}
    p.update({k: np.broadcast_to(np.asarray(v, float), (N,)) for k, v in override.items()})
    return p


def rows(seed, single_stage=False, mono=False):
    rng = np.random.default_rng(seed)
    r = np.ones(N) if mono else 2.0 ** -rng.integers(0, 6, N)
    r_f = r if single_stage or mono else np.minimum(1.0, r * rng.uniform(1.0, 4.0, N))
    return pd.DataFrame({"M": np.exp(rng.uniform(np.log(1e4), np.log(1e9), N)),
                         "D_T": np.exp(rng.uniform(np.log(1e5), np.log(1e10), N)),
                         "k": 2.0 ** rng.uniform(0, 7, N), "r": r, "r_f": r_f})


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=0)


def pick(p, lw):
    return {k: p[k] for k in lw.param_names}


def test_registered_with_the_papers_parameter_counts():
    for name, n in COUNTS.items():
        assert len(law(name).params) == n, name
        assert "Eq." in law(name).equation or "Table" in law(name).equation


def test_without_dual_pl_is_m3_on_single_stage_rows_and_not_on_two_stage_rows():
    p = params(law("m3"), 0)
    one, two = rows(1, single_stage=True), rows(2)
    close(law("m3_nodual")(pick(p, law("m3_nodual")), one), law("m3")(p, one))
    moved = two["r_f"] > two["r"] * 1.01
    diff = np.asarray(law("m3_nodual")(pick(p, law("m3_nodual")), two)) - np.asarray(
        law("m3")(p, two))
    assert np.all(np.abs(diff[moved]) > 0) and np.all(diff[~moved] == 0)


def test_without_g_is_m3_at_r1_and_m3_with_g_at_its_value_1_elsewhere():
    p = params(law("m3"), 3)
    mono, multi = rows(4, mono=True), rows(5)
    nog = law("m3_nog")
    close(nog(pick(p, nog), mono), law("m3")(p, mono))
    k1 = multi.assign(k=1.0)   # R_D = 0: g = 1 in M3 too (Eq. 9)
    close(nog(pick(p, nog), k1), law("m3")(p, k1))
    # k > 1, r < 1: g < 1 in M3, so D' is larger and the loss lower without g
    many = (multi["r"] < 1).to_numpy()
    assert many.sum() > N // 2
    assert np.all(np.asarray(nog(pick(p, nog), multi))[many]
                  < np.asarray(law("m3")(p, multi))[many])


def test_rm_star_kr_is_eq23():
    rng = np.random.default_rng(6)
    k, r = 1 + rng.uniform(0.01, 100, N), rng.uniform(0.01, 1, N)
    a, b, c, d = rng.uniform(0.1, 100, N), rng.uniform(0.1, 2, N), rng.uniform(0.5, 50, N), \
        rng.uniform(0, 2, N)
    close(m3mod.rm_star_kr(k, r, a, b, c, d), (a / (k - 1) ** b + c) * r ** -d)
    close(m3mod.inv_rm_star_kr(k, r, a, b, c, d), 1 / ((a / (k - 1) ** b + c) * r ** -d))
    assert np.all(np.asarray(m3mod.inv_rm_star_kr(np.ones(N), r, a, b, c, d)) == 0)


def test_table16_variants_nest():
    """d = 0 turns R_M*(k, r) into R_M*(k); at r = 1 every variant with g is m3_rmk; without g
    and d, g = 1 with R_M*(k, r) on the monolingual rows is m3_rmk too."""
    p = params(law("m3_rmkr"), 7)
    x = rows(8)
    close(law("m3_rmkr")(p | {"d": np.zeros(N)}, x), law("m3_rmk_g")(pick(p, law("m3_rmk_g")), x))
    mono = rows(9, mono=True)
    rmk = law("m3_rmk")
    for name in ("m3_rmkr", "m3_rmk_g", "m3_rmkr_nog"):
        lw = law(name)
        close(lw(pick(p, lw), mono), rmk(pick(p, rmk), mono))


def test_rmk_hlp_is_m3_rmk_with_h_lp():
    """h_Lp -> h is not an identity (different knees), but at k = 1 both are 1: m3_rmk_hlp is
    m3_rmk there, and for k > 1 it differs."""
    lw, rmk = law("m3_rmk_hlp"), law("m3_rmk")
    p = params(lw, 11)
    one = rows(12, mono=True).assign(k=1.0)
    close(lw(p, one), rmk(pick(p, rmk), one))
    many = rows(13, mono=True)
    assert np.all(np.asarray(lw(p, many)) != np.asarray(rmk(pick(p, rmk), many)))


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_gradients_are_finite_at_k1_and_r1(name):
    lw = law(name)
    x = {k: jnp.asarray(v) for k, v in rows(10).assign(k=1.0).iloc[:20].items()}
    x["r"] = x["r"].at[:5].set(1.0)
    x["r_f"] = jnp.maximum(x["r_f"], x["r"])
    p = {k: jnp.asarray(v) for k, v in lw.example.items()}
    g = jax.grad(lambda q: jnp.sum(lw.fn(q, x)))(p)
    assert all(np.isfinite(float(v)) for v in g.values()), g


def test_every_m3_law_on_the_chinchilla_base_declares_its_two_phase_fit():
    """A law that shares Chinchilla's A, B, alpha, beta, E on M is fitted two-phase (M3 App.
    C.2.4): it declares the base and the phase-1 rows, so ``bs.fit_two_phase(law, df)`` needs no
    arguments and is not refused as a base reading columns the law does not."""
    base = set(bs.laws.get("chinchilla_m3").param_names)
    laws = [bs.laws.get(n) for n in bs.laws.names() if n != "chinchilla_m3"]
    two_phase = [law for law in laws if "M" in law.variables and base <= set(law.param_names)]
    assert {"m3", "m3_nodual", "m3_nog", "m3_rmkr", "m3_rmk_hlp"} <= {law.name for law in two_phase}
    for law in two_phase:
        assert law.base_law == "chinchilla_m3" and law.phase1 is not None, law.name
