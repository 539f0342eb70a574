"""Checks on the committed ``bible_m3`` table (the M3 sweep, issue 7). (The synthetic check of
the M3 analyses' Table 2 protocol is in tests/test_m3_common.py.)

The table checks run on whatever (possibly partial) table is committed; a check is skipped, with
the reason, only when the rows it needs are not in the table yet. Margins:

- ``NOISE = 0.01`` nats: the tolerance of one comparison between two runs' losses on the same
  512 fixed validation windows (one seed each; the same tolerance as the ``bible_ptpp`` checks).
- Loss against compute at a fixed recipe: it falls (median step about -0.1 nats per doubling)
  except in one corner our data pins (datasheet, 'Findings'): Arabic monolingual runs of the
  smallest models (``f_M >= 1``, at most 14.5K non-embedding parameters) get worse with
  compute, by up to 0.09 nats per doubling. Elsewhere a step may not rise by more than
  ``2 NOISE``; in that corner by no more than ``RISE = 15 NOISE`` (a broken pipeline moves
  losses by tenths of a nat).
- A claim about an effect ("hurts", "better") needs it to exceed ``2 * NOISE`` in a single
  comparison, or the median over matched comparisons to exceed ``NOISE`` in that direction.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import committed_table


ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "bayes_scaling" / "datasets" / "bible_m3.csv"
NOISE = 0.01
RISE = 15 * NOISE
CANONICAL = ["loss", "N", "N_nonemb", "M", "D", "D_T", "k", "r", "r_f", "r1", "r2", "n_stages",
             "approach", "C", "pair", "target", "seed"]
RECIPE = ["pair", "approach", "f_r", "f_M", "f_k", "r1", "r2", "r3", "pattern"]


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return committed_table(TABLE)


def test_columns_and_factor_identities(table):
    assert list(table.columns[:len(CANONICAL)]) == CANONICAL
    assert np.isfinite(table.loss).all() and (table.loss > 0).all()
    assert not table.run_id.duplicated().any()
    assert set(table.approach) <= {"mono_1stage", "multi_1stage", "multi_2stage", "multi_3stage"}
    np.testing.assert_allclose(table.r * table.D, table.k * table.D_T, rtol=1e-9)  # r D = k D_T
    np.testing.assert_allclose(table.C, table.M * table.D, rtol=1e-9)
    np.testing.assert_allclose(table.D_T, 2.0 ** (20 + table.f_D), rtol=1e-12)
    np.testing.assert_allclose(table.D, 2.0 ** (20 + table.f_M + table.f_C), rtol=1e-12)
    np.testing.assert_allclose(table.r, 2.0 ** -table.f_r, rtol=1e-12)
    np.testing.assert_allclose(table.k, 2.0 ** table.f_k, rtol=1e-12)
    one = table[table.n_stages == 1]
    assert ((one.r == one.r_f) & (one.r == one.r1)).all()
    assert (one.approach == np.where(one.r >= 1, "mono_1stage", "multi_1stage")).all()
    multi = table[table.n_stages > 1]
    assert ((multi.r1 < multi.r) & (multi.r < multi.r_f)).all()   # r1 < r < r_f
    np.testing.assert_allclose(multi.D_1 + multi.D_2, multi.D, rtol=1e-5)  # CSV: 6 digits


def test_model_scale_is_the_papers_recomputed_from_the_configuration(table):
    """M = 6 N_nonemb + 12 n_layer d_model S with S = 128 (M3 Table 4), recomputed from each row's
    stored configuration; N_nonemb is the GPT-2 block count of that configuration (per layer
    12 d^2 weights + 13 d biases and norms, plus the final norm's 2 d), so M is the paper's
    72 n d^2 + 12 n d S plus the bias and norm terms. C = M D exactly (integers)."""
    n, d = table.n_layer.astype(np.int64), table.d_model.astype(np.int64)
    assert (table.N_nonemb == n * (12 * d * d + 13 * d) + 2 * d).all()
    assert (table.M == 6 * table.N_nonemb + 12 * n * d * 128).all()
    assert (table.M == 72 * n * d * d + 12 * n * d * 128 + 6 * (13 * n * d + 2 * d)).all()
    assert (table.C == table.M * table.D).all()
    # each model is 0-40% above its nominal M0 2^-f_M (the config's M_tolerance is 0.4)
    ratio = table.M / table.M_nominal
    assert ratio.between(1.0, 1.4).all(), ratio.describe()


def _small_arabic_mono(pair, approach, f_M) -> bool:
    """The corner where more compute hurts (Findings): ar-en, monolingual, f_M >= 1."""
    return pair == "ar-en" and approach == "mono_1stage" and f_M >= 1


def test_loss_falls_with_compute_at_fixed_recipe(table):
    """Same pair, approach, model (f_M), epochs (f_k) and ratio schedule: each doubling of C
    doubles the corpus D_T and the tokens D. Outside the small-Arabic-monolingual corner no step
    rises by more than 2 NOISE and the median step falls by more than NOISE; in the corner no
    step rises by more than RISE, and some step does rise by more than 2 NOISE (what our runs
    show; if a rerun stops showing it, the datasheet's finding is out of date)."""
    key = table.assign(r2=table.r2.fillna(-1), r3=table.r3.fillna(-1),
                       pattern=table.pattern.fillna(""))
    steps, corner = [], []
    for k, g in key.groupby(RECIPE):
        if len(g) < 2:
            continue
        g = g.sort_values("f_C")
        assert g.f_C.is_unique, f"{k}: two runs of one recipe at the same C"
        d = np.diff(g.loss.to_numpy()) / np.diff(g.f_C.to_numpy())
        pair, approach, _, f_M = k[:4]
        small = _small_arabic_mono(pair, approach, f_M)
        (corner if small else steps).extend(d)
        limit = RISE if small else 2 * NOISE
        assert np.all(d < limit), (f"{k}: loss rises with compute: "
                                    f"{dict(zip(g.f_C, g.loss.round(4)))}")
    if not steps:
        pytest.skip("no recipe has runs at two compute budgets yet")
    assert np.median(steps) < -NOISE, f"loss hardly falls per doubling of C: {np.median(steps)}"
    if corner:
        assert max(corner) > 2 * NOISE, "small Arabic monolingual runs no longer get worse with C"


def test_repeating_a_tiny_corpus_many_times_eventually_hurts(table):
    """At fixed (C, D_T) with a corpus of at most 32K tokens (f_D <= -5), monolingual runs with
    different epoch counts k (at fixed C, a larger k is a smaller model on more repetitions):
    in at least one such cell per pair, the largest k is worse than the cell's best run by more
    than 2 NOISE. (On the runs present: at f_C = -3, f_D = -6, k = 64 is 0.03 (fr-en) and 0.08
    (ar-en) nats worse than k = 32.)"""
    mono = table[(table.approach == "mono_1stage") & (table.f_D <= -5)]
    checked = 0
    for pair, p in mono.groupby("pair"):
        excess = []
        for _, g in p.groupby(["f_C", "f_D"]):
            if g.k.nunique() < 2:
                continue
            excess.append(g.loc[g.k.idxmax(), "loss"] - g.loss.min())
        if not excess:
            continue
        checked += 1
        assert max(excess) > 2 * NOISE, (
            f"{pair}: in no tiny-corpus cell is the largest k worse than the best k: {excess}")
    if not checked:
        pytest.skip("no monolingual (C, D_T) cell with f_D <= -5 has two epoch counts yet")


def matched_two_vs_one_stage(table) -> pd.DataFrame:
    """L(two-stage r1 = 0 -> r2) - L(single-stage) at the same (pair, C, D_T, M, k, r)."""
    key = ["pair", "f_C", "f_M", "f_r", "f_k"]
    one = table[table.approach == "multi_1stage"].set_index(key).loss
    two = table[(table.approach == "multi_2stage") & (table.r1 == 0)]
    rows = [(r.pair, r.loss - one.loc[tuple(getattr(r, c) for c in key)])
            for r in two.itertuples() if tuple(getattr(r, c) for c in key) in one.index]
    return pd.DataFrame(rows, columns=["pair", "diff"])


#: What our runs show (datasheet, 'Findings'). The paper: a two-stage schedule ending on the
#: target beats single-stage at equal average ratio when the target corpus is scarce. fr-en
#: agrees (two-stage better on the median); ar-en does not (two-stage worse on the median, by up
#: to 1 nat when the target-only stage is 64 steps long).
TWO_STAGE_DIRECTION = {"fr-en": "better", "ar-en": "worse"}


@pytest.mark.parametrize("pair", sorted(TWO_STAGE_DIRECTION))
def test_two_stage_vs_single_stage_at_equal_average_ratio(table, pair):
    m = matched_two_vs_one_stage(table)
    d = m[m.pair == pair]["diff"]
    if len(d) < 3:
        pytest.skip(f"{pair}: {len(d)} matched (two-stage, single-stage) runs; need 3")
    med = float(d.median())
    if TWO_STAGE_DIRECTION[pair] == "better":
        assert med < -NOISE, f"{pair}: two-stage no longer better on the median: {d.tolist()}"
    else:
        assert med > NOISE, f"{pair}: two-stage no longer worse on the median: {d.tolist()}"
