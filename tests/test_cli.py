import json

import numpy as np
import pandas as pd

from bayes_scaling.cli import main

from conftest import form3_grid, simulate


def test_fit_command_recovers_and_saves(tmp_path, capsys):
    df = simulate("dcpt", form3_grid(ptpps=(31,)), noise=0.001, seed=4)
    csv = tmp_path / "t.csv"
    df.drop(columns="clean").to_csv(csv, index=False)
    out = tmp_path / "fit.json"
    rc = main(["fit", "--law", "dcpt", str(csv), "--delta", "0.02", "--n-starts", "16",
               "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "objective" in text and "rmse_log" in text
    fit = json.loads(out.read_text())
    pred = np.asarray(__import__("bayes_scaling").laws.get("dcpt")(fit["params"], df))
    assert np.max(np.abs(np.log(pred / df["clean"]))) < 0.003


def test_fit_command_bad_table_exits_2_with_message(tmp_path, capsys):
    pd.DataFrame({"N": [1e4, 2e4], "D": [1e5, 2e5], "loss": [2.0, np.nan]}).to_csv(
        tmp_path / "bad.csv", index=False)
    rc = main(["fit", "--law", "chinchilla", str(tmp_path / "bad.csv"), "--delta", "1e-3"])
    assert rc == 2
    assert "NaN/inf at rows 1" in capsys.readouterr().err


def test_laws_command_lists_every_law(capsys):
    import bayes_scaling as bs

    assert main(["laws"]) == 0
    text = capsys.readouterr().out
    for name in bs.laws.names():
        assert f"{name}:" in text
