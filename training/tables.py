"""The loss tables a sweep exports: canonical columns first, pass-through columns after, rows in a
fixed order.

Two parameter counts travel with every row, and a table never folds one into the other: ``N`` is
every distinct trainable parameter (token and position embeddings included; the output head is
tied to the token embedding) and ``N_nonemb`` excludes the embeddings (``training.model.
param_counts``). Token-per-parameter columns (``ptpp``, ``atpp``) and the M3 model scale ``M`` are
per non-embedding parameter. A law reads the count it needs through its ``column_map`` (e.g.
``law.renamed(..., N="N_nonemb")``).
"""
from __future__ import annotations

import pandas as pd

#: ``bible_ptpp``-style tables (pre-training stages, then continual pre-training with replay).
PTPP = ["loss", "N", "N_nonemb", "D", "ptpp", "replay", "domain", "atpp"]
#: ``bible_m3``-style tables (M3 runs).
M3 = ["loss", "N", "N_nonemb", "M", "D", "D_T", "k", "r", "r_f", "r1", "r2", "n_stages",
      "approach", "C", "pair", "target", "seed"]


def ptpp_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A PTPP store's rows in table order, with ``is_base`` marking the pre-adaptation rows."""
    if df.empty:
        return pd.DataFrame(columns=PTPP)
    df["is_base"] = df["D"] == 0  # pre-adaptation rows: replay is NaN (no adaptation yet)
    df = df[PTPP + [c for c in df.columns if c not in PTPP]]
    return df.sort_values(["seed", "N_nonemb", "ptpp", "replay", "domain", "D"],
                          na_position="first").reset_index(drop=True)


def m3_frame(df: pd.DataFrame) -> pd.DataFrame:
    """An M3 store's rows in table order."""
    if df.empty:
        return pd.DataFrame(columns=M3)
    df = df[M3 + [c for c in df.columns if c not in M3]]
    return df.sort_values(["pair", "seed", "approach", "f_C", "f_D", "f_M", "r", "k", "run_id"]
                          ).reset_index(drop=True)


#: table name (as recorded in a results store) -> row formatter
FRAMES = {"ptpp": ptpp_frame, "m3": m3_frame}
