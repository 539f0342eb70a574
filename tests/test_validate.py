import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.data import validate

from conftest import form3_grid, simulate


@pytest.fixture
def table():
    return simulate("ptpp_floor", form3_grid(sizes=(2e4, 4e4), atpps=(1, 4, 16)))


def test_clean_table_passes_unchanged(table):
    out = validate(table, "ptpp_floor")
    pd.testing.assert_frame_equal(out, table)
    assert "clipped" not in out.attrs


def test_missing_column_names_it_and_the_fix(table):
    with pytest.raises(bs.DataError, match=r"missing column\(s\) \['ptpp'\].*canonical"):
        validate(table.drop(columns="ptpp"), "ptpp_floor")


@pytest.mark.parametrize("col,value,match", [
    ("loss", np.nan, "NaN/inf at rows 3"),
    ("N", np.inf, "NaN/inf at rows 3"),
    ("loss", -1.0, r"'loss'.*rows 3 have \[-1.0\]"),
    ("N", 0.0, r"'N'.*rows 3"),
    ("D", 0.0, r"'D'.*rows 3.*D = 0"),
    ("replay", 1.5, r"'replay'.*\[0, 1\].*rows 3.*percentages"),
    ("ptpp", -15.0, r"'ptpp'.*rows 3"),
])
def test_bad_values_name_column_and_rows(table, col, value, match):
    bad = table.copy()
    bad.loc[3, col] = value
    with pytest.raises(bs.DataError, match=match):
        validate(bad, "ptpp_floor")


def test_m3_ranges():
    df = pd.DataFrame({"loss": [3.0, 3.1], "k": [1.0, 0.5], "r": [0.5, 1.2], "r_f": [0.5, 0.0],
                       "r1": [-0.1, 0.2], "M": [1e6, -1.0], "D_T": [0.0, 1e6]})
    for col, pat in [("k", r"'k'.*rows 1.*>= 1"), ("r", r"'r'.*rows 1"), ("r_f", r"'r_f'.*rows 1"),
                     ("r1", r"'r1'.*rows 0"), ("M", r"'M'.*rows 1"), ("D_T", r"'D_T'.*rows 0")]:
        with pytest.raises(bs.DataError, match=pat):
            validate(df, columns=[col])


def test_replay_clip_is_applied_and_recorded(table):
    t = table.copy()
    t.loc[[0, 5], "replay"] = [0.0, 1.0]
    with pytest.warns(UserWarning, match="clipped"):
        out = validate(t, "ptpp_floor")
    assert out.attrs["clipped"] == {"replay": [0, 5]}
    assert out.loc[0, "replay"] == 1e-9 and out.loc[5, "replay"] == 1 - 1e-9
    assert t.loc[0, "replay"] == 0.0  # the caller's table is untouched


def test_too_few_rows_and_duplicates(table):
    with pytest.raises(bs.DataError, match="at least 11"):
        validate(table.iloc[:10], "ptpp_floor")
    dup = pd.concat([table, table.iloc[[2]]], ignore_index=True)
    with pytest.warns(UserWarning, match="repeat"):
        validate(dup, "ptpp_floor")


def test_non_numeric_column_is_reported(table):
    t = table.astype({"N": object})
    t.loc[1, "N"] = "1e5"
    with pytest.raises(bs.DataError, match="'N' must be numeric"):
        validate(t, "ptpp_floor")


def test_unknown_law_lists_registered_ones(table):
    with pytest.raises(bs.LawError, match="ptpp_gated_floor"):
        bs.fit_map("no_such_law", table, delta=0.02)
