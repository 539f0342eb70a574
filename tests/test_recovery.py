"""Recovery (issue #2, item 4): every registered law, fitted back from data simulated at its example.

For each law: inputs on a grid like its paper's (``GRIDS``, one builder per law), losses
``L_true * exp(0.002 z)`` (0.2 % log-noise, z ~ N(0, 1)), fitted with ``bs.fit_map`` (Huber on log
residuals, few random starts drawn from the law's init ranges). Checks:

1. the fit is at least as good as the truth: objective(fit) <= objective(true params) (+1e-9);
2. predictions are recovered within the noise: on the grid, max |log Lhat - log L_true| < 0.004
   (two noise sd) and their RMS below 0.001;
3. identifiable parameters within the tolerances of ``TOL`` (relative, or absolute where marked).
   Parameters not listed are not identifiable from such data to a useful precision (e.g. R_M* when
   few rows have M > U_M, or C vs E of D-CPT): only predictions are asserted for them.

Fits use delta = 1e-3 (the M3 paper's; the PTPP paper's 0.02 would make the Huber loss quadratic
here, which is fine too), ``N_STARTS`` starts and ``MAX_ITER`` iterations: the run itself takes well
under a second per law; the cost is compiling each law's vectorised L-BFGS program once.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.objective import huber_objective

SIGMA = 0.002
DELTA = 1e-3
N_STARTS = 8
# Iterations per start: m3_r1's L-BFGS runs need ~600 from some starts; at 500, which start gets
# there changes with the float summation order (row padding moved it from 2 of 8 to 0 of 8).
MAX_ITER = 1000

# --- grids ------------------------------------------------------------------------------------------

# M3 paper App. B.3: C0 = 1e18, D_T0 = 5.8316 C0^0.4757, M0 = C0 / D_T0 (Eq. 14), and the factor grid
# r = 2^-f_r, M = M0 2^-f_M, k = 2^f_k, C = 2^f_C C0, D_T = 2^(-f_r + f_M - f_k + f_C) D_T0 (Eq. 15).
C0 = 1e18
DT0 = 5.8316 * C0 ** 0.4757
M0 = C0 / DT0


def m3_single_stage(f_r=range(4), f_M=range(-1, 5), f_k=range(10), f_C=range(-4, 1), f_D=(-7, 2)):
    rows = []
    for fr, fM, fk, fC in itertools.product(f_r, f_M, f_k, f_C):
        fD = -fr + fM - fk + fC
        if f_D[0] <= fD < f_D[1]:
            rows.append((2.0 ** -fr, M0 / 2.0 ** fM, 2.0 ** fk, 2.0 ** fD * DT0))
    df = pd.DataFrame(rows, columns=["r", "M", "k", "D_T"])
    df["r_f"] = df["r"]
    df["r1"] = df["r"]
    df["D"] = df.k * df.D_T / df.r
    return df


def m3_two_stage(f_k=range(10), **kw):
    """Two-stage rows (App. B.3): r1 in {1/2..1/32, 0}, r2 = r_f in {1/4, 1/2, 3/4, 1}, r1 < r < r2."""
    base = m3_single_stage(f_r=range(1, 4), f_k=f_k, **kw)
    rows = []
    for r1, r2 in itertools.product([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 0.0], [1 / 4, 1 / 2, 3 / 4, 1.0]):
        sel = base[(base.r > r1) & (base.r < r2)].assign(r1=r1, r_f=r2)
        rows.append(sel)
    df = pd.concat(rows, ignore_index=True)
    s1 = (df.r_f - df.r) / (df.r_f - df.r1)
    df["D_1"] = s1 * df.D
    df["D_2"] = (1 - s1) * df.D
    df["N"] = df.M / 6.0  # parameters ~ FLOPs/token / 6 (only enters PTPP = D_1 / N)
    df["ptpp"] = df.D_1 / df.N
    return df


def subsample(df, n, seed):
    return df.sample(n=min(n, len(df)), random_state=seed).reset_index(drop=True)


def grid_epoch_chinchilla(seed):
    """Like the Chinchilla/Epoch table: N 4e7..1.6e10, D 5e9..5e11 (log grid)."""
    N, D = np.geomspace(4e7, 1.6e10, 10), np.geomspace(5e9, 5e11, 8)
    return pd.DataFrame(list(itertools.product(N, D)), columns=["N", "D"])


def grid_datablations(seed):
    """Like datablations: N 1e7..9e9, unique U 1e8..1e11, epochs 1..64 (D = epochs U)."""
    N, U, ep = np.geomspace(1e7, 9e9, 6), np.geomspace(1e8, 1e11, 5), 2.0 ** np.arange(0, 7)
    df = pd.DataFrame(list(itertools.product(N, U, ep)), columns=["N", "U", "ep"])
    df["D"] = df.U * df.ep
    return subsample(df, 160, seed)


def grid_ptpp(seed):
    """The issue's synthetic Form-3 problem on the PTPP paper's tiny-model scale: 4 sizes x PTPP
    {15, 31, 279} x replay {0.1, 0.25, 0.5} x 6 adaptation budgets D = ATPP x N."""
    N, ptpp, rep = (2e4, 4e4, 8e4, 1.6e5), (15.0, 31.0, 279.0), (0.1, 0.25, 0.5)
    atpp = (0.5, 1, 2, 5, 12, 30)
    rows = [(n, p, r, a * n) for n, p, r, a in itertools.product(N, ptpp, rep, atpp)]
    return pd.DataFrame(rows, columns=["N", "ptpp", "replay", "D"])


def grid_m3_all(seed):
    """Single- and two-stage rows, all k (the M3 paper's setting (a))."""
    one = subsample(m3_single_stage(), 160, seed)
    two = subsample(m3_two_stage(), 80, seed + 1)
    return pd.concat([one, two], ignore_index=True)


def grid_m3_mono(seed):
    """Monolingual single-stage rows, all k (setting (c))."""
    return m3_single_stage(f_r=[0])


def grid_m3_single(seed):
    return subsample(m3_single_stage(), 200, seed)


def grid_m3_k1(seed):
    """Single-epoch rows, single- and two-stage (setting (d))."""
    one = m3_single_stage(f_k=[0])
    two = subsample(m3_two_stage(f_k=[0]), 120, seed)
    return pd.concat([one, two], ignore_index=True)


def grid_m3_two_stage_k1(seed):
    """Two-stage single-epoch rows (the two-stage-only baselines' data)."""
    return subsample(m3_two_stage(f_k=[0]), 160, seed)


GRIDS = {
    "dcpt": grid_ptpp, "ptpp_floor": grid_ptpp, "ptpp_gated": grid_ptpp, "ptpp_gated_floor": grid_ptpp,
    "chinchilla": grid_epoch_chinchilla,
    "chinchilla_m3": grid_m3_k1,
    "he": grid_m3_single,
    "he_dual": grid_m3_k1,
    "muennighoff": grid_datablations,
    "muennighoff_m3": grid_m3_mono,
    "atlas": grid_m3_single,
    "sedova": grid_m3_single,
    "zhang": grid_m3_two_stage_k1,
    "m3": grid_m3_all,
    "m3_rmk": grid_m3_mono,
    "m3_hlp": grid_m3_all,
    "m3_r1": grid_m3_all,
    "m3_nodual": grid_m3_all, "m3_nog": grid_m3_all,
    "m3_rmkr_nog": grid_m3_all, "m3_rmkr": grid_m3_all, "m3_rmk_g": grid_m3_all,
    "m3_rmk_hlp": grid_m3_mono,
    "dcpt_m3": grid_m3_two_stage_k1, "ptpp_floor_m3": grid_m3_two_stage_k1,
    "ptpp_gated_m3": grid_m3_two_stage_k1, "ptpp_gated_floor_m3": grid_m3_two_stage_k1,
}

# Identifiable parameters -> relative tolerance (about 3-5x the error seen at this noise). Others
# trade off against each other on such grids and are left to the prediction check: A and B against
# the exponents; in D-CPT/PTPP the barrier C/(r + eps_r)^gamma against E (gamma -> 0 makes it a
# constant); the PTPP floor F/PTPP^eta against E when a gate is present; R_M* on few M > U_M rows;
# the r1 extension's gamma2_dot, r0 (Table 15: "no notable improvement"). Tolerances were set on
# this seed with the optimiser of ``bs.fit_map``; a failure here means the fit lost the basin.
_BASE = {"E": 0.02, "alpha": 0.03, "beta": 0.02}
_SAT = {"RD_star": 0.05, "RDh_star": 0.05, "psi": 0.05, "RM_star": 0.1}
_PTPP = {"B": 0.05, "beta": 0.02, "nu": 0.05}
_PTPP_M3 = {"B": 0.15, "beta": 0.03, "nu": 0.1}
TOL: dict[str, dict[str, float]] = {
    "chinchilla": {"E": 0.03, "alpha": 0.08, "beta": 0.1},
    "chinchilla_m3": _BASE,
    "he": {**_BASE, "gamma": 0.02},
    "he_dual": {**_BASE, "alpha": 0.04, "gamma": 0.02, "gamma2": 0.03},
    "muennighoff": {**_BASE, "RD_star": 0.05, "RN_star": 0.1},
    "muennighoff_m3": {**_BASE, "RD_star": 0.05, "RM_star": 0.1},
    "atlas": {**_BASE, "RD_star": 0.05, "tau": 0.05},
    "sedova": {"E_s": 0.05, "alpha_s": 0.03, "beta_s": 0.05, "tau_s": 0.05, "RD_star_s": 0.05},
    "zhang": {"E": 0.15, "alpha": 0.15, "phi1": 0.15, "phi2": 0.15, "gamma": 0.15},
    "m3": {**_BASE, **_SAT, "gamma": 0.02, "gamma2": 0.05},
    "m3_hlp": {**_BASE, **_SAT, "gamma": 0.02, "gamma2": 0.05, "p": 0.1},
    "m3_r1": {**_BASE, **_SAT, "gamma": 0.02},
    "m3_rmk": {**_BASE, "RD_star": 0.08, "a": 0.1, "b": 0.1, "c": 0.2},
    "m3_nodual": {**_BASE, **_SAT, "gamma": 0.02},
    "m3_nog": {**_BASE, "RD_star": 0.05, "RM_star": 0.1, "gamma": 0.02, "gamma2": 0.05},
    "dcpt": _PTPP,  # alpha: 4 sizes over 8x, and E is entangled with the barrier (no PTPP term)
    "ptpp_floor": {**_PTPP, "alpha": 0.05, "F": 0.05, "eta": 0.05},
    "ptpp_gated": {**_PTPP, "alpha": 0.12, "lam": 0.05, "zeta": 0.1},
    "ptpp_gated_floor": {**_PTPP, "alpha": 0.05, "lam": 0.05, "zeta": 0.1},
    "dcpt_m3": {**_PTPP_M3, "alpha": 0.05},
    "ptpp_floor_m3": {**_PTPP_M3, "alpha": 0.05, "F": 0.05, "eta": 0.05},
    "ptpp_gated_m3": {**_PTPP_M3, "lam": 0.05, "zeta": 0.05},
    "ptpp_gated_floor_m3": {**_PTPP_M3, "lam": 0.05, "zeta": 0.05, "F": 0.2, "eta": 0.15},
}

def simulate(name, seed=0):
    """(law, table with loss, noiseless loss): one row per distinct input of the law."""
    law = bs.laws.get(name)
    df = GRIDS[name](seed)
    cols = [law.column(v) for v in law.variables if law.column(v) in df]
    df = df.drop_duplicates(subset=cols, ignore_index=True)
    true = np.asarray(law(law.example, df))
    z = np.random.default_rng(seed).standard_normal(len(df))
    return law, df.assign(loss=true * np.exp(SIGMA * z)), true


def test_every_law_has_a_grid():
    """Every law the package registers (laws other tests register are theirs to test)."""
    own = {n for n in bs.laws.names() if bs.laws.get(n).fn.__module__.startswith("bayes_scaling.")}
    assert set(GRIDS) == own


def test_tolerances_name_parameters():
    for name, tol in TOL.items():
        assert set(tol) <= set(bs.laws.get(name).param_names), name


@pytest.mark.filterwarnings("ignore:column 'r_f'.*clipped")  # r_f = 1 read as replay: 1 - 1e-9
@pytest.mark.parametrize("name", sorted(GRIDS))
def test_recovery(name):
    law, df, true = simulate(name)
    fit = bs.fit_map(law, df, delta=DELTA, n_starts=N_STARTS, seed=0, max_iter=MAX_ITER)
    at_truth = float(huber_objective(law(law.example, df), df["loss"].to_numpy(), DELTA))
    assert fit.objective <= at_truth + 1e-9, (fit.objective, at_truth)
    err = np.log(fit.predict(df)) - np.log(true)
    assert np.max(np.abs(err)) < 2 * SIGMA, np.max(np.abs(err))
    assert np.sqrt(np.mean(err ** 2)) < SIGMA / 2, np.sqrt(np.mean(err ** 2))
    bad = {}
    for p, tol in TOL.get(name, {}).items():
        got, want = fit.params[p], law.example[p]
        if abs(got - want) > tol * abs(want):
            bad[p] = (got, want, tol)
    assert not bad, bad
