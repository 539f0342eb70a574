"""Rebuild the bundled CSVs from the upstream data files (maintainers only; not used at run time).

Usage::

    python -m bayes_scaling.datasets._build SRC_DIR [--out DIR]

``SRC_DIR`` holds the upstream files, unchanged, in these places (upstream path in brackets;
repositories and commits are in each dataset's datasheet ``<name>.md``):

- ``chinchilla_epoch/svg_extracted_data.csv``  [epoch-research/analyzing-chinchilla:
  ``data/svg_extracted_data.csv``]
- ``datablations/datablations_fit_set_182.csv``  [the 182 ``name params tokens unique_tokens
  loss`` lines printed by cells 25/26 of huggingface/datablations ``utils/parametric_fit.ipynb``]
- ``gadre_overtraining/gadre_models_summary.csv``  [one row per ``exp_data/models/*.json`` of
  mlfoundations/scaling, fields copied unchanged]
- ``data_mixing_laws/data/ct/70M.txt`` and ``data_mixing_laws/valid_weight.json``
  [yegcjs/mixinglaws: ``data/ct/70M.txt``, ``pipeline/valid_weight.json``]

Only reshaping, renaming and the derivations stated in the datasheets are done here; no loss
value is altered.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent

#: order of canonical columns in every bundled CSV (DESIGN.md), extras follow
CANONICAL = ["loss", "N", "D", "ptpp", "replay", "domain", "M", "D_T", "k", "r", "r_f", "r1",
             "r2", "U"]

# ---- data_mixing_laws ct set: constants used below (sources in mixing_laws_cpt.md) -----------
TOKENS_PER_STEP = 4096 * 256            # mixinglaws pipeline/utils.py: BSZ = 4096 * 256
PYTHIA_70M_PARAMS = 70_426_624          # Pythia-70M total parameters (model card table)
PYTHIA_70M_PARAMS_NO_EMBED = 18_915_328  # non-embedding (model card; mixinglaws MODEL_SIZES)
PYTHIA_BASE_STEP = 20_000               # base checkpoint `pythia_70m_step20000`
PYTHIA_TOKENS_PER_STEP = 1024 * 2048    # Pythia: 1024 sequences x 2048 tokens per step
TARGET_FILE = "starcoder.python.valid.bin"


def _order(df: pd.DataFrame) -> pd.DataFrame:
    canon = [c for c in CANONICAL if c in df.columns]
    return df[canon + [c for c in df.columns if c not in canon]].reset_index(drop=True)


def chinchilla_epoch(src: Path) -> pd.DataFrame:
    raw = pd.read_csv(src / "chinchilla_epoch" / "svg_extracted_data.csv")
    assert len(raw) == 245 and (raw["color"] == raw["hex_color"]).all()
    df = pd.DataFrame({
        "loss": raw["loss"],
        "N": raw["Model Size"],
        "D": raw["Training FLOP"] / (6.0 * raw["Model Size"]),
        "C": raw["Training FLOP"],
    })
    # Epoch's fits drop the 5 highest-loss points (nr_of_models_excluded = 5)
    dropped = raw["loss"].nlargest(5).index
    assert raw["loss"].drop(dropped).max() < raw["loss"][dropped].min()  # no tie at the cut
    df["epoch_kept"] = ~raw.index.isin(dropped)
    df["svg_x"], df["svg_y"], df["svg_color"] = raw["x"], raw["y"], raw["color"]
    return _order(df)


def datablations(src: Path) -> pd.DataFrame:
    raw = pd.read_csv(src / "datablations" / "datablations_fit_set_182.csv")
    assert len(raw) == 182
    df = pd.DataFrame({"loss": raw["loss"], "N": raw["params"], "D": raw["tokens"],
                       "U": raw["unique_tokens"], "run": raw["run_name"]})
    return _order(df)


GADRE_EVAL_SETS = ["c4_val", "openlm", "paloma_c4_en", "paloma_dolma_100_programing_languages",
                   "paloma_falcon-refinedweb", "paloma_ptb", "paloma_redpajama", "val_de-en_100"]


def gadre_overtraining(src: Path) -> pd.DataFrame:
    raw = pd.read_csv(src / "gadre_overtraining" / "gadre_models_summary.csv")
    assert len(raw) == 104 and raw["name"].is_unique
    runs = pd.DataFrame({
        "N": raw["params"], "D": raw["tokens"], "ptpp": raw["tokens"] / raw["params"],
        "run": raw["name"], "train_set": raw["dataset_name"], "model": raw["model"],
        "N_nonemb": raw["params_no_embed"], "chinchilla_multiplier": raw["chinchilla_multiplier"],
        "lr": raw["lr"], "wd": raw["wd"], "warmup": raw["warmup"], "global_bs": raw["global_bs"],
        "cooldown_lr": raw["cooldown_lr"], "seed": raw["seed"],
    })
    parts = []
    for s in GADRE_EVAL_SETS:
        part = runs.copy()
        part["domain"] = s
        part["loss"] = raw["loss_" + s]
        part["loss_lower95"] = raw["loss_lower95_" + s]
        part["loss_upper95"] = raw["loss_upper95_" + s]
        part["_run_pos"] = range(len(raw))
        parts.append(part)
    df = pd.concat(parts, ignore_index=True).sort_values(["_run_pos", "domain"], kind="stable")
    df = df.drop(columns="_run_pos")
    first = ["loss", "N", "D", "ptpp", "domain", "loss_lower95", "loss_upper95"]
    return _order(df[first + [c for c in df.columns if c not in first]])


def _parse_ct_lines(path: Path) -> pd.DataFrame:
    """One row per distinct line of the ct loss file: run, step, val file, loss."""
    lines = path.read_text().splitlines()
    unique = list(dict.fromkeys(lines))           # exact duplicate lines dropped, order kept
    rows = []
    for line in unique:
        ckpt, val, loss = line.split("\t")
        parts = ckpt.rstrip("/").split("/")
        val_file = val.rsplit("/", 1)[-1]
        if parts[-1].startswith("pythia_70m_step"):
            run, step = "base", 0
        else:
            run, step = parts[-2], int(parts[-1])
        if val_file == TARGET_FILE:
            val_domain = "python"
        else:
            assert val_file.startswith("pythia-pile.valid."), val_file
            val_domain = val_file.split(".")[-2]
        rows.append((run, step, val_domain, float(loss)))
    return pd.DataFrame(rows, columns=["run", "step", "val_domain", "loss"])


def mixing_laws_cpt(src: Path) -> pd.DataFrame:
    base_dir = src / "data_mixing_laws"
    weights = json.loads((base_dir / "valid_weight.json").read_text())
    assert len(weights) == 22 and math.isclose(sum(weights.values()), 1.0, rel_tol=1e-12)
    long = _parse_ct_lines(base_dir / "data" / "ct" / "70M.txt")
    assert not long.duplicated(["run", "step", "val_domain"]).any()
    table = long.pivot(index=["run", "step"], columns="val_domain", values="loss")
    assert set(table.columns) == set(weights) | {"python"} and not table.isna().any().any()
    # source = Pile loss: weighted arithmetic mean of the 22 per-domain losses, weights as stored
    # (they sum to 1; no renormalisation), summed in valid_weight.json's key order
    source = sum(table[d] * w for d, w in weights.items())
    target = table["python"]

    runs = [r for r in table.index.get_level_values("run").unique() if r != "base"]
    out = []
    for run in runs:
        _, r_pile, r_python = run.split("-")       # 70M_ct_{i}-{r_pile}-{r_python}
        replay, r_target = float(r_pile), float(r_python)
        assert math.isclose(replay + r_target, 1.0)
        for step in [0] + sorted(table.loc[run].index):
            key = ("base", 0) if step == 0 else (run, step)
            for domain, series in (("target", target), ("source", source)):
                out.append({"loss": series[key], "replay": replay, "domain": domain, "step": step,
                            "run": run, "r_target": r_target, "is_base": step == 0})
    df = pd.DataFrame(out)
    df["D"] = df["step"] * TOKENS_PER_STEP
    df["N"] = PYTHIA_70M_PARAMS
    df["N_nonemb"] = PYTHIA_70M_PARAMS_NO_EMBED
    df["ptpp"] = PYTHIA_BASE_STEP * PYTHIA_TOKENS_PER_STEP / PYTHIA_70M_PARAMS
    df = df.sort_values(["replay", "domain", "step"], ascending=[True, False, True], kind="stable")
    return _order(df)


BUILDERS = {
    "chinchilla_epoch": chinchilla_epoch,
    "datablations": datablations,
    "gadre_overtraining": gadre_overtraining,
    "mixing_laws_cpt": mixing_laws_cpt,
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="directory with the upstream files (see module doc)")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--only", nargs="*", default=list(BUILDERS))
    args = ap.parse_args(argv)
    for name in args.only:
        df = BUILDERS[name](args.src)
        df.to_csv(args.out / f"{name}.csv", index=False)
        print(f"{name}: {len(df)} rows, columns {list(df.columns)}")


if __name__ == "__main__":
    main()
