"""Bundled real datasets: discovery, canonical columns, row counts and checks against the sources."""
import math
import shutil

import numpy as np
import pandas as pd
import pytest

import bayes_scaling.datasets as ds
from bayes_scaling.errors import DataError

BUNDLED = ["chinchilla_epoch", "datablations", "gadre_overtraining", "mixing_laws_cpt"]


def huber(r, delta):
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r**2, delta * (a - 0.5 * delta))


# ---------------------------------------------------------------- discovery, metadata, errors


def test_names_lists_the_bundled_datasets():
    assert set(BUNDLED) <= set(ds.names())
    assert ds.names() == sorted(ds.names())


@pytest.mark.parametrize("name", BUNDLED)
def test_attrs_hold_provenance(name):
    df = ds.load(name)
    attrs = df.attrs
    assert attrs["name"] == name
    assert attrs["datasheet"] == f"{name}.md"
    assert attrs["source"].startswith("https://github.com/")
    assert len(attrs["commit"]) == 40 and int(attrs["commit"], 16) >= 0
    assert attrs["license"] and attrs["title"] and attrs["notes"]
    assert attrs["n_includes_embeddings"] is True
    assert attrs["commit"] in ds.datasheet(name)
    assert np.isfinite(df["loss"]).all() and (df["loss"] > 0).all()


def test_load_returns_independent_copies():
    a = ds.load("datablations")
    a.loc[0, "loss"] = -1.0
    a.attrs["name"] = "changed"
    b = ds.load("datablations")
    assert b.loc[0, "loss"] > 0 and b.attrs["name"] == "datablations"


def test_unknown_name_lists_available():
    with pytest.raises(DataError) as err:
        ds.load("chinchila_epoch")
    msg = str(err.value)
    assert "chinchila_epoch" in msg
    for name in BUNDLED:
        assert name in msg
    with pytest.raises(DataError):
        ds.datasheet("no_such_dataset")


def test_build_script_and_stray_files_are_not_datasets():
    assert "_build" not in ds.names()
    assert all(not n.startswith("_") for n in ds.names())


@pytest.fixture
def scratch_folder(tmp_path, monkeypatch):
    """A copy of the datasets folder that ds.load reads instead of the installed one."""
    folder = tmp_path / "datasets"
    folder.mkdir()
    for name in BUNDLED:
        for suffix in (".csv", ".md"):
            shutil.copy(ds._folder() / f"{name}{suffix}", folder / f"{name}{suffix}")
    monkeypatch.setattr(ds, "_folder", lambda: folder)
    return folder


def test_dropped_in_dataset_loads_without_code_change(scratch_folder):
    pd.DataFrame({"loss": [3.1, 2.9], "N": [1e8, 2e8], "D": [2e9, 4e9], "ptpp": [20, 20]}).to_csv(
        scratch_folder / "bible_ptpp.csv.gz", index=False)
    (scratch_folder / "bible_ptpp.md").write_text(
        "---\nsource: https://example.org/bible\nn_includes_embeddings: false\n---\n"
        "# Bible PTPP runs\n\nText.\n")
    (scratch_folder / "no_datasheet.csv").write_text("loss\n1.0\n")  # no .md: not a dataset
    assert "bible_ptpp" in ds.names() and "no_datasheet" not in ds.names()
    df = ds.load("bible_ptpp")
    assert len(df) == 2 and list(df.columns) == ["loss", "N", "D", "ptpp"]
    assert df.attrs["title"] == "Bible PTPP runs"  # falls back to the first heading
    assert df.attrs["n_includes_embeddings"] is False
    assert df.attrs["source"] == "https://example.org/bible" and df.attrs["commit"] is None


def test_bad_loss_in_a_dropped_in_file_is_named(scratch_folder):
    (scratch_folder / "broken.csv").write_text("loss,N\n2.5,1e8\n0.0,2e8\nnan,3e8\n")
    (scratch_folder / "broken.md").write_text("# Broken\n")
    with pytest.raises(DataError, match=r"'loss'.*\[1, 2\]"):
        ds.load("broken")
    (scratch_folder / "noloss.csv").write_text("L,N\n2.5,1e8\n")
    (scratch_folder / "noloss.md").write_text("# No loss\n")
    with pytest.raises(DataError, match="no 'loss' column"):
        ds.load("noloss")


def test_csv_and_csv_gz_for_one_name_is_an_error(scratch_folder):
    shutil.copy(scratch_folder / "datablations.csv", scratch_folder / "datablations.csv.gz")
    with pytest.raises(DataError, match="several data files"):
        ds.load("datablations")


# ---------------------------------------------------------------- chinchilla_epoch

EPOCH = {"A": 482.01, "B": 2085.43, "E": 1.81686, "alpha": 0.34781, "beta": 0.36585}


def chinchilla(p, N, D):
    return p["E"] + p["A"] / N ** p["alpha"] + p["B"] / D ** p["beta"]


def test_chinchilla_epoch_rows_and_columns():
    df = ds.load("chinchilla_epoch")
    assert len(df) == 245
    assert list(df.columns[:5]) == ["loss", "N", "D", "C", "epoch_kept"]
    assert df["epoch_kept"].dtype == bool
    assert df["epoch_kept"].sum() == 240
    np.testing.assert_allclose(df["D"], df["C"] / (6 * df["N"]), rtol=1e-14)
    assert df["loss"].between(2.07, 5.01).all()
    assert df["N"].between(5.7e7, 1.63e10).all() and df["D"].between(2.4e8, 3.2e11).all()


def test_chinchilla_epoch_drops_exactly_the_five_highest_losses():
    df = ds.load("chinchilla_epoch")
    dropped = df.loc[~df["epoch_kept"], "loss"]
    assert sorted(dropped.round(3)) == [3.447, 3.766, 3.794, 4.665, 5.006]
    assert dropped.min() > df.loc[df["epoch_kept"], "loss"].max()
    kept = df[df["epoch_kept"]]
    assert len(kept) == 240 and kept.attrs["name"] == "chinchilla_epoch"


def test_chinchilla_epoch_matches_published_fit_on_kept_points():
    df = ds.load("chinchilla_epoch")
    kept = df[df["epoch_kept"]]
    r_kept = np.log(chinchilla(EPOCH, kept["N"], kept["D"])) - np.log(kept["loss"])
    assert abs(np.median(np.abs(r_kept)) - 0.0033) < 5e-5
    assert np.abs(r_kept).max() < 0.051
    # the 5 dropped points are the ones Epoch's law cannot explain
    out = df[~df["epoch_kept"]]
    r_out = np.log(chinchilla(EPOCH, out["N"], out["D"])) - np.log(out["loss"])
    assert np.abs(r_out).min() > np.abs(r_kept).max()
    assert huber(r_kept, 1e-3).sum() == pytest.approx(1.01875e-3, rel=1e-4)


# ---------------------------------------------------------------- datablations

PUBLISHED = [6.255414, 7.3049974, 0.6254804, 0.3526596, 0.3526596, 15.387756, 5.309743]


def muennighoff(N, D, U, params=PUBLISHED):
    """README "Parametric Fit" law of Muennighoff et al. 2023, in numpy."""
    a, b, e, alpha, beta, rd_star, rn_star = params
    A, B, E = np.exp(a), np.exp(b), np.exp(e)
    G = ((alpha * A) / (beta * B)) ** (1 / (alpha + beta))
    RD = np.maximum(D / U - 1, 0)
    UN = np.minimum(N, (U * G) ** (beta / alpha) * G)
    RN = np.maximum(N / UN - 1, 0)
    return (E + A / (UN + UN * rn_star * (1 - np.exp(-RN / rn_star))) ** alpha
            + B / (U + U * rd_star * (1 - np.exp(-RD / rd_star))) ** beta)


def test_datablations_rows_and_columns():
    df = ds.load("datablations")
    assert len(df) == 182
    assert list(df.columns) == ["loss", "N", "D", "U", "run"]
    assert not df.duplicated(["N", "D", "U"]).any() and df["run"].is_unique
    assert (df["D"] >= df["U"]).all() and (df["D"] / df["U"]).max() == 9000
    assert df["loss"].between(2.33, 8.11).all()
    row = df.set_index("run").loc["2b855b11b"]
    assert (row["N"], row["D"], row["U"]) == (2.81e9, 55e9, 11e9)


def test_datablations_readme_sanity_values():
    assert muennighoff(6.34e9, 242e9, 25e9) == pytest.approx(2.2256440889984477, rel=1e-12)
    assert muennighoff(8.67e9, 178e9, 25e9) == pytest.approx(2.2269634075087867, rel=1e-12)


def test_datablations_published_objective_from_the_rows():
    df = ds.load("datablations")
    r = np.log(muennighoff(df["N"].to_numpy(), df["D"].to_numpy(), df["U"].to_numpy())) - np.log(
        df["loss"].to_numpy())
    # notebook cell 29 prints the minimum 0.015825936570763588 (parameters rounded to ~7 digits)
    assert huber(r, 1e-3).sum() == pytest.approx(0.015825936570763588, rel=1e-6)


# ---------------------------------------------------------------- gadre_overtraining

GADRE_SETS = ["c4_val", "openlm", "paloma_c4_en", "paloma_dolma_100_programing_languages",
              "paloma_falcon-refinedweb", "paloma_ptb", "paloma_redpajama", "val_de-en_100"]


def test_gadre_rows_and_layout():
    df = ds.load("gadre_overtraining")
    assert len(df) == 104 * 8
    assert df["run"].nunique() == 104
    assert sorted(df["domain"].unique()) == GADRE_SETS
    assert (df.groupby("run")["domain"].nunique() == 8).all()
    assert not df.duplicated(["run", "domain"]).any()
    assert df.groupby("train_set")["run"].nunique().to_dict() == {
        "c4_original": 34, "rpj": 35, "rw_original": 35}
    per_model = df.groupby("model")["run"].nunique().to_dict()
    assert per_model == {"d=96_l=8_h=4": 24, "d=512_l=8_h=4": 24, "d=576_l=24_h=8": 24,
                         "d=1024_l=24_h=8": 23, "open_lm_1b": 6, "open_lm_7b": 3}


def test_gadre_columns_and_ranges():
    df = ds.load("gadre_overtraining")
    assert list(df.columns[:5]) == ["loss", "N", "D", "ptpp", "domain"]
    np.testing.assert_allclose(df["ptpp"], df["D"] / df["N"], rtol=1e-14)
    np.testing.assert_allclose(df["ptpp"], 20 * df["chinchilla_multiplier"], rtol=1e-12)
    assert sorted(df["ptpp"].round(6).unique()) == [5, 10, 20, 40, 80, 160, 320, 640]
    assert (df["N_nonemb"] < df["N"]).all()
    assert ((df["loss"] >= df["loss_lower95"]) & (df["loss"] <= df["loss_upper95"])).all()
    c4 = df[df["domain"] == "c4_val"]
    assert len(c4) == 104 and c4["loss"].between(2.38, 6.13).all()
    # a model's N, D and hyper-parameters are the same on all of its 8 rows
    assert (df.groupby("run")[["N", "D", "lr", "warmup"]].nunique() == 1).all().all()
    one = df[(df["run"] == "c4_original-d=1024_l=24_h=8-0.25") & (df["domain"] == "c4_val")]
    assert one["loss"].item() == pytest.approx(3.5279492850157737, rel=1e-15)
    assert (one["N"].item(), one["D"].item()) == (411616256, 2058081280)


# ---------------------------------------------------------------- mixing_laws_cpt

PILE_WEIGHTS = {  # pipeline/valid_weight.json, copied from the upstream file
    "Github": 0.09529320987654322, "Pile-CC": 0.1570216049382716,
    "Books3": 0.12654320987654322, "PhilPapers": 0.005015432098765432,
    "OpenWebText2": 0.09066358024691358, "PubMed_Abstracts": 0.023919753086419752,
    "DM_Mathematics": 0.021604938271604937, "PG19": 0.018518518518518517,
    "FreeLaw": 0.05439814814814815, "HackerNews": 0.0073302469135802465,
    "EuroParl": 0.008101851851851851, "OpenSubtitles": 0.015817901234567902,
    "PubMed_Central": 0.125, "Wikipedia_en": 0.03742283950617284,
    "StackExchange": 0.055169753086419755, "BookCorpus2": 0.006944444444444444,
    "Enron_Emails": 0.0011574074074074073, "NIH_ExPorter": 0.0019290123456790122,
    "YoutubeSubtitles": 0.009645061728395061, "Ubuntu_IRC": 0.008101851851851851,
    "ArXiv": 0.10185185185185185, "USPTO_Backgrounds": 0.02854938271604938,
}
# data/ct/70M.txt, the 22 Pile lines of checkpoint 70M_ct_3-0.5-0.5/10000 (file lines 50..132)
RAW_05_10000 = {
    "Github": 1.508772259299089, "Pile-CC": 3.571149896345209, "Books3": 3.4482674947599086,
    "PhilPapers": 3.6900540865384617, "OpenWebText2": 3.4657372007978724,
    "PubMed_Abstracts": 3.0509860131048385, "DM_Mathematics": 1.499267578125,
    "PG19": 3.524658203125, "FreeLaw": 2.647308566046099, "HackerNews": 3.444747121710526,
    "EuroParl": 2.9253627232142856, "OpenSubtitles": 3.1157822027439024,
    "PubMed_Central": 2.50121768904321, "Wikipedia_en": 3.168477166559278,
    "StackExchange": 2.472847465034965, "BookCorpus2": 3.4180772569444446,
    "Enron_Emails": 3.0387369791666665, "NIH_ExPorter": 3.298828125,
    "YoutubeSubtitles": 2.552314453125, "Ubuntu_IRC": 2.622163318452381,
    "ArXiv": 2.1967292554450757, "USPTO_Backgrounds": 2.8510610219594597,
}
PYTHON_05_10000 = 1.4308624267578125  # same checkpoint, starcoder.python.valid.bin (line 137)
# the base model pythia_70m_step20000 (file lines 1..23)
RAW_BASE = {
    "Github": 1.5652903197747976, "Pile-CC": 3.602944563882064, "Books3": 3.4802782012195124,
    "PhilPapers": 3.7280649038461537, "OpenWebText2": 3.5030127992021276,
    "PubMed_Abstracts": 3.0860792590725805, "DM_Mathematics": 1.5273088727678572,
    "PG19": 3.5633544921875, "FreeLaw": 2.6812666223404253, "HackerNews": 3.479029605263158,
    "EuroParl": 2.9779575892857144, "OpenSubtitles": 3.1416015625,
    "PubMed_Central": 2.530678077980324, "Wikipedia_en": 3.203920344716495,
    "StackExchange": 2.5174347137237763, "BookCorpus2": 3.448459201388889,
    "Enron_Emails": 3.0670572916666665, "NIH_ExPorter": 3.3341796875,
    "YoutubeSubtitles": 2.595068359375, "Ubuntu_IRC": 2.55419921875,
    "ArXiv": 2.2259040601325757, "USPTO_Backgrounds": 2.8826805320945947,
}
PYTHON_BASE = 1.8381195068359375


def _one(df, **where):
    sel = np.ones(len(df), dtype=bool)
    for col, val in where.items():
        sel &= (df[col] == val).to_numpy()
    assert sel.sum() == 1, where
    return df[sel].iloc[0]


def test_mixing_laws_cpt_rows_and_columns():
    df = ds.load("mixing_laws_cpt")
    assert len(df) == 110
    assert list(df.columns[:6]) == ["loss", "N", "D", "ptpp", "replay", "domain"]
    assert sorted(df["replay"].unique()) == [0.125, 0.25, 0.28515625, 0.375, 0.5]
    assert set(df["domain"]) == {"target", "source"}
    assert (df.groupby(["replay", "domain"]).size() == 11).all()
    np.testing.assert_allclose(df["replay"] + df["r_target"], 1.0, rtol=0, atol=1e-15)
    assert (df["D"] == df["step"] * 1_048_576).all()
    assert sorted(df["step"].unique()) == [0] + list(range(1000, 10001, 1000))
    assert (df["N"] == 70_426_624).all() and (df["N_nonemb"] == 18_915_328).all()
    assert df["ptpp"].iloc[0] == pytest.approx(20_000 * 2_097_152 / 70_426_624, rel=1e-14)
    assert (df["is_base"] == (df["D"] == 0)).all() and df["is_base"].sum() == 10
    assert len(df[~df["is_base"]]) == 100 and (df.loc[~df["is_base"], "D"] > 0).all()


def test_mixing_laws_cpt_source_is_weighted_pile_loss():
    assert set(RAW_05_10000) == set(PILE_WEIGHTS) and len(PILE_WEIGHTS) == 22
    assert math.fsum(PILE_WEIGHTS.values()) == pytest.approx(1.0, abs=1e-15)
    by_hand = sum(PILE_WEIGHTS[d] * RAW_05_10000[d] for d in PILE_WEIGHTS)
    assert by_hand == pytest.approx(2.8387568, abs=1e-7)
    df = ds.load("mixing_laws_cpt")
    src = _one(df, replay=0.5, domain="source", step=10000)
    assert src["loss"] == pytest.approx(by_hand, rel=1e-13)
    assert src["run"] == "70M_ct_3-0.5-0.5" and src["D"] == 10000 * 1_048_576
    # not an unweighted mean (which differs in the 3rd decimal)
    assert abs(src["loss"] - np.mean(list(RAW_05_10000.values()))) > 1e-3
    tgt = _one(df, replay=0.5, domain="target", step=10000)
    assert tgt["loss"] == PYTHON_05_10000


def test_mixing_laws_cpt_base_rows():
    df = ds.load("mixing_laws_cpt")
    base = df[df["is_base"]]
    src_base = sum(PILE_WEIGHTS[d] * RAW_BASE[d] for d in PILE_WEIGHTS)
    assert (base.loc[base["domain"] == "target", "loss"] == PYTHON_BASE).all()
    np.testing.assert_allclose(base.loc[base["domain"] == "source", "loss"], src_base, rtol=1e-13)
    assert sorted(base["replay"]) == sorted(2 * [0.125, 0.25, 0.28515625, 0.375, 0.5])


def test_mixing_laws_cpt_critical_proportion_run_returns_to_base():
    """The 0.28515625 run ends within 0.05% of the pre-CPT Pile loss; less replay ends above."""
    df = ds.load("mixing_laws_cpt")
    src = df[df["domain"] == "source"]
    base = src.loc[src["is_base"], "loss"].iloc[0]
    final = src[src["step"] == 10000].set_index("replay")["loss"]
    assert abs(final[0.28515625] / base - 1) < 5e-4
    assert final[0.125] > final[0.25] > base > final[0.375] > final[0.5]
    # more Python in the mixture gives lower target loss at every step
    tgt = df[(df["domain"] == "target") & ~df["is_base"]].pivot(
        index="step", columns="replay", values="loss")
    assert (tgt.diff(axis=1).iloc[:, 1:] > 0).all().all()
