"""M3 runs (training.m3): the factor parametrisation of every planned job, stage proportions,
epoch reshuffling, the never-repeated helper, re-warmed stage schedules, and an end-to-end micro
sweep on the text sample in tests/data."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from training import m3, sweep
from training.config import ConfigError, spec_hash
from training.loop import EpochBatches, Mixture, Staged
from training.model import Size, build, param_counts
from training.store import Store, export
from training.tables import M3

ROOT = Path(__file__).resolve().parents[1]
FULL = ROOT / "training" / "configs" / "m3.toml"
MICRO = ROOT / "training" / "configs" / "m3_micro.toml"
DATA = ROOT / "tests" / "data"
TOK = 128


@pytest.fixture(scope="module")
def full():
    cfg = sweep.load_config(FULL)
    return cfg, sweep.plan(cfg)


@pytest.fixture()
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _micro_config(tmp_path: Path) -> Path:
    text = MICRO.read_text().replace('corpus = "tests/data"', f'corpus = "{DATA.as_posix()}"')
    cfg = tmp_path / "m3_micro.toml"
    cfg.write_text(text)
    return cfg


# ----------------------------------------------------------------------------- plan

def test_factor_identities_hold_for_every_planned_job(full):
    cfg, jobs = full
    m = cfg["m3"]
    assert m["C0"] == m["M0"] * m["D_T0"]
    B = cfg["batch_size"]
    counts = {}
    for j in jobs:
        size = Size(j["n_layer"], j["d_model"], j["n_head"])
        if size not in counts:
            counts[size] = param_counts(build(size, 0))
        n, n_ne = counts[size]
        assert (n, n_ne) == (j["N"], j["N_nonemb"])
        assert j["M"] == 6 * n_ne + 12 * size.n_layer * size.d_model * TOK  # M3 Table 4
        assert abs(j["M"] / (m["M0"] * 2.0 ** -j["f_M"]) - 1) <= m["M_tolerance"]
        r = Fraction(*j["r"])
        assert r == Fraction(1, 2 ** j["f_r"])
        assert j["D_T"] == m["D_T0"] * Fraction(2) ** j["f_D"] and j["D_T"] % TOK == 0
        for b in j["branches"]:
            assert j["f_D"] == -j["f_r"] + j["f_M"] - b["f_k"] + b["f_C"]
            assert b["k"] == 2 ** b["f_k"] >= 1
            assert b["D"] == m["D_T0"] * Fraction(2) ** (j["f_M"] + b["f_C"])
            assert b["D"] == b["steps"] * B * TOK
            assert b["C"] == j["M"] * b["D"]                                  # C = M D
            assert b["C_nominal"] == m["C0"] * 2.0 ** b["f_C"]
            assert abs(b["C"] / b["C_nominal"] - 1) <= m["M_tolerance"] + 1e-12
            assert r * b["D"] == b["k"] * j["D_T"]                            # r D = k D_T
        if j["n_stages"] == 1:  # branches of one trunk: same (f_r, f_M, f_D), distinct lengths
            steps = [b["steps"] for b in j["branches"]]
            assert steps == sorted(set(steps))


def test_grid_covers_every_approach_and_pair(full):
    _, jobs = full
    df = pd.DataFrame([{"pair": j["pair"], "approach": j["approach"], "n": len(j["branches"])}
                       for j in jobs])
    runs = df.groupby(["pair", "approach"]).n.sum()
    assert set(df.pair) == {"fr-en", "ar-en"}
    for pair in ("fr-en", "ar-en"):
        for a in m3.APPROACHES:
            assert runs[(pair, a)] >= (3 if a == "multi_3stage" else 50), (pair, a)
    est = sum(map(m3.estimate_seconds, jobs)) / 3600
    assert 2.0 < est < 4.0, f"estimated {est:.2f} CPU-hours; the config header says about 3"
    # the first rows of a sweep cover every pair and approach
    first = {(j["pair"], j["approach"]) for j in jobs[:40]}
    assert len(first) == 8


def test_plan_is_deterministic(full):
    _, jobs = full
    again = sweep.plan(sweep.load_config(FULL))
    assert [(j["id"], spec_hash(j)) for j in again] == \
        [(j["id"], spec_hash(j)) for j in jobs]
    assert len({j["id"] for j in jobs}) == len(jobs)


def test_stage_proportions_reproduce_the_average_ratio(full):
    # the paper's formulas (Section 2.3, App. B.4) on exact fractions
    s1, s2 = m3.two_stage_proportions(Fraction(1, 4), 0, 1)
    assert (s1, s2) == (Fraction(3, 4), Fraction(1, 4))
    s = m3.three_stage_proportions(Fraction(1, 4), Fraction(1, 8), 1, Fraction(1, 16),
                                   Fraction(1, 4))
    assert sum(s) == 1 and s[2] == Fraction(1, 7)
    assert s[0] * Fraction(1, 16) + s[1] * Fraction(1, 4) + s[2] == Fraction(1, 4)
    assert (s[0] * Fraction(1, 16) + s[1] * Fraction(1, 4)) / (s[0] + s[1]) == Fraction(1, 8)
    with pytest.raises(ValueError, match="r1 < r < r2"):
        m3.two_stage_proportions(Fraction(1, 2), Fraction(1, 2), 1)
    pats = m3.three_stage_patterns(Fraction(1, 8), 1)
    assert pats == {"A": (Fraction(1, 16), Fraction(1, 4)), "B": (0, Fraction(1, 4)),
                    "C": (0, Fraction(3, 4))}

    _, jobs = full
    multi = [j for j in jobs if j["n_stages"] > 1]
    assert multi
    for j in multi:
        ratios = [Fraction(*x) for x in j["ratios"]]
        props = [Fraction(*x) for x in j["proportions"]]
        r = Fraction(*j["r"])
        assert sum(props) == 1 and sum(p * x for p, x in zip(props, ratios)) == r
        assert all(a < b for a, b in itertools.pairwise(ratios))  # r1 < r2 (< r3)
        T = j["branches"][0]["steps"]
        G = T * j["batch_size"]
        firsts = [st[0] for st in j["stages"]] + [T]
        for (first, t, n), nxt, s, x in zip(j["stages"], firsts[1:], props, ratios):
            assert n == (nxt - first) * j["batch_size"] and 0 <= t <= n
            assert abs((nxt - first) - s * T) <= 1                     # boundary within a step
            assert abs(t / n - x) < 0.01                              # realised stage ratio
        assert sum(t for _, t, _ in j["stages"]) == r * G            # exactly k D_T targets


def test_three_stage_runs_share_r_and_r_f_with_a_two_stage_run(full):
    _, jobs = full
    two = {(j["pair"], j["f_r"], j["f_M"], j["f_D"], j["branches"][0]["f_C"],
            tuple(j["ratios"][-1])) for j in jobs if j["approach"] == "multi_2stage"}
    three = [j for j in jobs if j["approach"] == "multi_3stage"]
    assert len({j["pattern"] for j in three}) == 3
    for j in three:
        assert (j["pair"], j["f_r"], j["f_M"], j["f_D"], j["branches"][0]["f_C"],
                tuple(j["ratios"][-1])) in two, j["id"]


def test_stage_schedule_rewarms_at_each_boundary(full):
    _, jobs = full
    j = next(j for j in jobs if j["approach"] == "multi_3stage")
    lr = m3.learning_rate(j)
    peak = j["lr"]
    for (first, _, decay_start, decay_steps), (nxt, w, _, _) in zip(j["lr_stages"],
                                                                     j["lr_stages"][1:]):
        assert first + decay_start + decay_steps == nxt           # each stage anneals to its end
        assert lr(nxt - 1) == pytest.approx(0.0, abs=1e-12)       # annealed end of the stage
        assert w > 1 and lr(nxt) == pytest.approx(peak / w)       # re-warm starts low ...
        assert lr(nxt + w - 1) == pytest.approx(peak)             # ... and reaches the peak
    T = j["branches"][0]["steps"]
    final = lr.cooldown(T - j["final_cooldown"], j["final_cooldown"])
    assert final(T - 1) == 0.0 and final(T - j["final_cooldown"] - 1) == pytest.approx(peak)
    with pytest.raises(ValueError):
        Staged(((5, lr.segments[0][1]),))


# ----------------------------------------------------------------------------- data

def _synthetic(n_w=12, n_h=200, context=8):
    """A target corpus whose window w holds the value w (mod 100), a helper of values >= 100."""
    target = np.concatenate([np.full(context, w % 100, np.uint8) for w in range(n_w)] +
                            [np.zeros(1, np.uint8)])
    helper = (100 + np.arange(n_h * context + 1) % 100).astype(np.uint8)
    return target, helper


def test_epochs_reshuffle_and_cover_the_target_exactly_once():
    target, helper = _synthetic()
    B, c, n_w = 6, 8, 12
    b = EpochBatches(target, helper, [[0, 1, 3]], B, c, seed=0, salt=1, total_steps=40,
                     names=("fr", "en"))
    tw, te, hw = [], [], []
    for step in range(40):
        is_t, win, ep = b.sources(step)
        tw += list(win[is_t])
        te += list(ep[is_t])
        hw += list(win[~is_t])
        x, _ = b(step, Mixture.constant({"fr": 1, "en": 2})(step))
        assert np.array_equal((x[:, 0] < 100).numpy(), is_t)      # target rows are target text
        assert all(int(x[i, 0]) == win[i] for i in np.flatnonzero(is_t))
    assert len(tw) == 40 * B // 3 == b.counts(40)[0]              # exact ratio 1/3
    k = len(tw) // n_w
    epochs = [tw[e * n_w:(e + 1) * n_w] for e in range(k)]
    assert all(sorted(e) == list(range(n_w)) for e in epochs)      # each epoch: every window once
    assert all(te[e * n_w:(e + 1) * n_w] == [e] * n_w for e in range(k))
    assert len({tuple(e) for e in epochs}) == k                    # a new order every epoch
    assert len(hw) == len(set(hw))                                 # helper never repeated
    # a pure function of the step
    other = EpochBatches(target, helper, [[0, 1, 3]], B, c, seed=0, salt=1)
    assert torch.equal(b(17)[0], other(17)[0])
    with pytest.raises(ValueError, match="mixture gives target weight"):
        b(3, {"fr": 0.5, "en": 0.5})


def test_stage_tables_give_exact_counts_per_stage():
    target, helper = _synthetic()
    B = 4
    stages = [[0, 0, 40], [10, 15, 20], [15, 20, 20]]             # r = 0, 3/4, 1
    b = EpochBatches(target, helper, stages, B, 8, seed=3, total_steps=20)
    counts = [sum(int(b.sources(s)[0].sum()) for s in range(a, z))
              for a, z in ((0, 10), (10, 15), (15, 20))]
    assert counts == [0, 15, 20] and b.counts(20) == (35, 45)


def test_helper_is_never_repeated_and_fails_clearly(tmp_path):
    target, helper = _synthetic(n_h=10)
    with pytest.raises(ValueError, match="would be repeated"):
        EpochBatches(target, helper, [[0, 1, 2]], 4, 8, seed=0, total_steps=6, names=("fr", "en"))
    b = EpochBatches(target, helper, [[0, 1, 2]], 4, 8, seed=0, total_steps=5)
    with pytest.raises(ValueError, match="exhausted"):
        b.sources(5)
    # planning-time check on real specs: a helper too small for a micro job is a ConfigError
    cfg = sweep.load_config(_micro_config(tmp_path))
    jobs = sweep.plan(cfg)
    from training import corpora
    data = corpora.load(str(DATA))
    m3.check_corpora(jobs, data)
    data["en"] = {**data["en"], "train": data["en"]["train"][:1000]}
    with pytest.raises(ConfigError, match="helper corpus 'en'.*repeated"):
        m3.check_corpora(jobs, data)


# ----------------------------------------------------------------------------- end to end

def test_micro_m3_sweep_end_to_end(tmp_path, one_thread):
    cfg_path = _micro_config(tmp_path)
    cfg = sweep.load_config(cfg_path)
    jobs = sweep.plan(cfg)
    n_rows = sum(len(j["branches"]) for j in jobs)
    out = tmp_path / "out"
    store = sweep.run_sweep(cfg_path, workers=1, out_dir=str(out), progress=False)
    csv = tmp_path / "bible_m3.csv"
    assert export(store, csv) == n_rows
    df = pd.read_csv(csv)
    assert list(df.columns[:len(M3)]) == M3
    assert len(df) == n_rows and not df.run_id.duplicated().any()
    assert set(df.approach) == set(m3.APPROACHES) and set(df.pair) == {"fr-en", "ar-en"}
    assert (df.loss > 0).all() and np.isfinite(df.loss).all() and np.isfinite(df.loss_helper).all()
    assert set(df.target) == {"fr", "ar"} and set(df.helper) == {"en"}
    assert (df.C == df.M * df.D).all()                             # exact integers
    np.testing.assert_allclose(df.r * df.D, df.k * df.D_T, rtol=1e-9)
    assert (df.k >= 1).all() and (df.N > df.N_nonemb).all()
    one = df[df.n_stages == 1]
    assert (one.r_f == one.r).all() and (one.r1 == one.r).all() and one.r2.isna().all()
    assert ((one.approach == "mono_1stage") == (one.r == 1)).all()
    two = df[df.n_stages == 2]
    assert (two.r_f == two.r2).all() and ((two.r1 < two.r) & (two.r < two.r2)).all()
    np.testing.assert_allclose(two.s1 * two.r1 + two.s2 * two.r2, two.r, rtol=1e-5)
    three = df[df.n_stages == 3]
    assert (three.r_f == three.r3).all() and set(three.pattern) == {"A", "B", "C"}
    assert (df.D_1 + df.D_2 == df.D).all() and (one.D_2 == 0).all()

    # a restart has nothing to do and adds nothing
    sweep.run_sweep(cfg_path, workers=1, out_dir=str(out), progress=False)
    assert len(Store(store).frame()) == n_rows

    # an annealed branch of a one-stage trunk is the standalone run of that length
    trunk = next(j for j in jobs if j["n_stages"] == 1 and len(j["branches"]) > 1)
    alone = {**trunk, "id": trunk["id"] + "-alone", "branches": trunk["branches"][:1]}
    sweep.run_job(alone, str(tmp_path / "alone.sqlite"), str(tmp_path / "ckpt"))
    got = Store(tmp_path / "alone.sqlite").frame().loss.iloc[0]
    ref = df.set_index("run_id").loss[f"{trunk['id']}/fC{trunk['branches'][0]['f_C']}"]
    assert got == pytest.approx(ref, rel=1e-4)
    assert math.isfinite(got)
