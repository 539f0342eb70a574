"""The M3 recipe optimiser near the mono / two-stage boundary, against brute force.

Table 13's three laws at cells of the paper's grid (C = 2^f_C C0, C0 = 1e18, Eq. 14) whose corpus
straddles the approach boundary (log2(D_T / D*(C)) from -4.5 to -1.5). The reference is a dense
grid over (log D, log r, log r_f) evaluated with the law itself (k = r D / D_T, M = C / D; k < 1 a
one-pass subset, as the optimiser defines it), its best points polished by bounded L-BFGS. The
optimiser's best loss must be within 1e-5 nats of that reference or below it in every cell.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

import bayes_scaling as bs
from bayes_scaling.laws.m3 import TABLE13
from bayes_scaling.plan import chinchilla_optimal, recipe, recipe_grid

C0 = 1e18
DT0 = 5.8316 * C0 ** 0.4757
R_LO = 1e-3
LAW = bs.laws.get("m3")


@jax.jit
def cell_loss(p, C, D_T, logD, logr, logrf):
    """loss(log D, log r, log r_f) of the cell (C, D_T); r > r_f reads as single-stage r_f = r.
    One compiled program for every cell and language (C, D_T and the parameters are arguments)."""
    D, r = jnp.exp(logD), jnp.exp(logr)
    r_f = jnp.maximum(jnp.exp(logrf), r)
    k = r * D / D_T
    x = {"M": C / D, "D_T": D_T * jnp.minimum(k, 1.0), "k": jnp.maximum(k, 1.0), "r": r,
         "r_f": r_f}
    return LAW.fn(p, x)


cell_loss_and_grad = jax.jit(jax.value_and_grad(
    lambda z, p, C, D_T: cell_loss(p, C, D_T, z[0], z[1], z[2])))


def brute_force(params, C, D_T):
    p = {k: jnp.asarray(float(v)) for k, v in params.items()}
    C, D_T = jnp.asarray(float(C)), jnp.asarray(float(D_T))
    logD = np.log(D_T) + np.linspace(np.log(1e-3), np.log(1e4), 121)
    logr = np.linspace(np.log(R_LO), 0.0, 61)
    G = np.stack(np.meshgrid(logD, logr, logr, indexing="ij"), -1).reshape(-1, 3)
    v = np.asarray(cell_loss(p, C, D_T, G[:, 0], G[:, 1], G[:, 2]))
    best = np.inf
    box = [(logD[0], logD[-1]), (logr[0], 0.0), (logr[0], 0.0)]
    for i in np.argsort(v)[:4]:
        res = minimize(lambda z: tuple(np.asarray(a, float)
                                       for a in cell_loss_and_grad(jnp.asarray(z), p, C, D_T)),
                       G[i], jac=True, method="L-BFGS-B", bounds=box)
        best = min(best, float(res.fun), float(v[i]))
    mono = minimize(lambda z: float(cell_loss(p, C, D_T, z[0], 0.0, 0.0)), [np.log(D_T)],
                    method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-13})
    return min(best, float(mono.fun))


def cells(lang):
    p = TABLE13[lang]
    out = []
    for fc in (-4, -2, 0):
        C = C0 * 2.0 ** fc
        Ds = chinchilla_optimal(p["A"], p["B"], p["alpha"], p["beta"], C)[1]
        out += [(C, Ds * 2.0 ** x) for x in np.arange(-4.5, -1.5 + 1e-9, 0.375)]
    return out


@pytest.mark.parametrize("lang", ["ja", "id", "sw"])
def test_optimiser_matches_brute_force_across_the_boundary(lang):
    p = TABLE13[lang]
    cs = cells(lang)
    C, D_T = np.array([c for c, _ in cs]), np.array([d for _, d in cs])
    g = recipe_grid(bs.plan.ParamDraws(LAW, {k: np.array([v]) for k, v in p.items()}),
                    C=C, D_T=D_T)
    got = g[g["best"]].set_index("cell").sort_index()
    worse = {}
    for i, (c, d) in enumerate(cs):
        ref = brute_force(p, c, d)
        if got.loc[i, "loss"] > ref + 1e-5:
            worse[i] = (got.loc[i, "approach"], got.loc[i, "loss"], ref)
    assert not worse, worse
    assert set(got["approach"]) == {"mono_1stage", "multi_2stage"}  # the cells straddle it


def test_indonesian_cell_of_the_audit_is_two_stage():
    """f_C = -2, f_D = -3 (D_T = 2^-3 D_T0): two-stage with r = 0.823, k = 4.24, r_f = 1 gives
    L = 2.38133; mono 1-stage only 2.38293."""
    p = TABLE13["id"]
    rc = recipe(bs.plan.ParamDraws(LAW, {k: np.array([v]) for k, v in p.items()}),
                C=C0 / 4, D_T=DT0 / 8)
    assert rc.best == "multi_2stage"
    two = rc["multi_2stage"]
    assert two["loss"] == pytest.approx(2.38133, abs=1e-5)
    assert two["r"] == pytest.approx(0.823, abs=1e-3) and two["k"] == pytest.approx(4.24, abs=0.01)
    assert two["r_f"] == pytest.approx(1.0)
    assert rc["mono_1stage"]["loss"] == pytest.approx(2.38293, abs=1e-5)
