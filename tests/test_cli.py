import json

import numpy as np
import pytest
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


def test_posterior_forecast_plan_commands_end_to_end(tmp_path, capsys):
    """posterior -> forecast -> plan through the CLI on D-CPT tables simulated with known
    parameters: the forecast recovers the true law within 1%, and the plan matches the closed-form
    plan of the true laws (tests/test_plan.py's boundaries)."""
    import bayes_scaling as bs
    from bayes_scaling import plan as P

    law = bs.laws.get("dcpt")
    tgt_true = dict(E=1.2, A=40.0, alpha=0.35, B=300.0, beta=0.3, nu=1.0, C=1e-3, gamma=0.3)
    src_true = dict(E=1.0, A=40.0, alpha=0.35, B=100.0, beta=0.3, nu=0.2, C=0.02, gamma=0.5)
    rows = pd.DataFrame([dict(N=n, D=a * n, replay=r, ptpp=279.0) for n in (2e4, 5e4, 1e5)
                         for r in (0.1, 0.25, 0.5) for a in (1, 4, 16, 64, 256)])
    rng = np.random.default_rng(0)
    paths = {}
    for dom, true in (("target", tgt_true), ("source", src_true)):
        t = rows.assign(loss=np.asarray(law(true, rows)) * np.exp(0.003 * rng.standard_normal(len(rows))))
        t.to_csv(tmp_path / f"{dom}.csv", index=False)
        paths[dom] = tmp_path / f"{dom}.nc"
        # a Laplace posterior may fail its Pareto-k check here; kept, labelled
        assert main(["posterior", "--law", "dcpt", str(tmp_path / f"{dom}.csv"), "--method", "laplace",
                     "--allow-unconverged", "--out", str(paths[dom])]) == 0
        assert paths[dom].exists()
    capsys.readouterr()

    new = pd.DataFrame([dict(N=1e5, D=a * 1e5, replay=r, ptpp=279.0) for r in (0.1, 0.5)
                        for a in (2, 30, 200)])
    new.to_csv(tmp_path / "new.csv", index=False)
    assert main(["forecast", str(paths["target"]), str(tmp_path / "new.csv"), "--kind", "mean",
                 "--allow-unconverged", "--out", str(tmp_path / "fc.csv")]) == 0
    fc = pd.read_csv(tmp_path / "fc.csv")
    truth = np.asarray(law(tgt_true, new))
    # one simulated table: its errors are shared by nearby rows, so coverage here is loose
    assert np.mean((fc["lower"] <= truth) & (truth <= fc["upper"])) >= 0.5
    assert np.max(np.abs(fc["median"] / truth - 1)) < 0.01
    assert np.all(fc["upper"] - fc["lower"] < 0.05 * truth)

    assert main(["plan", "--target", str(paths["target"]), "--source", str(paths["source"]),
                 "--N", "1e5", "--ptpp", "279", "--max-forgetting", "10%", "--target-loss", "2.2",
                 "--source-base", "2.0", "--prob", "0.9", "--replay-bounds", "0.1", "0.5",
                 "--out", str(tmp_path / "plan.json")]) == 0
    text = capsys.readouterr().out
    assert "chance-constrained (p=0.9)" in text and "price of certainty" in text
    got = P.Plan.load(tmp_path / "plan.json")
    ref = P.adaptation(P.ParamDraws(law, {k: np.array([v]) for k, v in tgt_true.items()}),
                       P.ParamDraws(law, {k: np.array([v]) for k, v in src_true.items()}),
                       N=1e5, ptpp=279.0, max_forgetting="+10%", target_loss=2.2, source_base=2.0,
                       replay_bounds=(0.1, 0.5))  # inside the fitted replay range
    assert got.deterministic.atpp == pytest.approx(ref.deterministic.atpp, rel=0.2)
    assert got.chance.flops >= got.deterministic.flops


def test_plan_command_missing_file_exits_2(tmp_path, capsys):
    rc = main(["plan", "--target", str(tmp_path / "nope.nc"), "--source", str(tmp_path / "x.nc"),
               "--N", "1e5", "--ptpp", "279", "--max-forgetting", "2%", "--target-loss", "2"])
    assert rc == 2
    assert "no such file" in capsys.readouterr().err


def _pool_csv(tmp_path):
    """A pool simulated from the Chinchilla law: small runs done, larger ones candidates (empty
    loss), and two target rows beyond every candidate."""
    import bayes_scaling as bs

    law = bs.laws.get("chinchilla")
    rows = pd.DataFrame([{"N": n, "D": n * t} for n in (1e7, 2e7, 4e7, 8e7, 1.6e8, 3.2e8)
                         for t in (5, 20, 80)])
    loss = np.asarray(law(law.example, rows)) * np.exp(
        0.003 * np.random.default_rng(0).standard_normal(len(rows)))
    rows["loss"] = np.where(rows["N"] < 5e7, loss, np.nan)
    rows.to_csv(tmp_path / "pool.csv", index=False)
    pd.DataFrame({"N": [2e9, 4e9], "D": [4e10, 8e10]}).to_csv(tmp_path / "targets.csv",
                                                              index=False)
    return rows


def test_design_command_on_a_pool_writes_the_recommendation_and_its_figure(tmp_path, capsys):
    pool = _pool_csv(tmp_path)
    out, fig = tmp_path / "rec.csv", tmp_path / "rec.png"
    rc = main(["design", str(tmp_path / "pool.csv"), "--law", "chinchilla", "--targets",
               str(tmp_path / "targets.csv"), "--budget", "25%", "--out", str(out),
               "--figure", str(fig)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "9 runs done, 9 candidates, 2 target rows" in text
    rec = pd.read_csv(out)
    budget = 0.25 * (6 * pool["N"] * pool["D"])[pool["loss"].isna()].sum()
    assert len(rec) >= 1 and rec["cum_cost"].iloc[-1] <= budget * (1 + 1e-12)
    assert list(rec["step"]) == list(range(1, len(rec) + 1))
    assert pool.loc[rec["row"], "loss"].isna().all()
    assert np.allclose(rec["cost"], 6 * rec["N"] * rec["D"])
    assert fig.stat().st_size > 0


def test_design_command_simulate_option_is_passed_and_checked(tmp_path, capsys):
    """--simulate M reaches recommend (its plans then meet M worlds when the rules disagree; the
    choice stays within the budget either way); a negative M is refused before any fit."""
    pool = _pool_csv(tmp_path)
    base = ["design", str(tmp_path / "pool.csv"), "--law", "chinchilla", "--targets",
            str(tmp_path / "targets.csv"), "--budget", "25%"]
    out = tmp_path / "rec.csv"
    assert main(base + ["--simulate", "4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rec = pd.read_csv(out)
    budget = 0.25 * (6 * pool["N"] * pool["D"])[pool["loss"].isna()].sum()
    assert len(rec) >= 1 and rec["cum_cost"].iloc[-1] <= budget * (1 + 1e-12)
    ruled = "simulated worlds" in text
    assert ruled == ("per world, typically" in text)  # how the plans compare world by world
    plain = design_recommend(pool, simulate=0)
    both = design_recommend(pool, simulate=4)
    assert ruled == (both.attrs["simulated_by_rule"] is not None)
    assert plain.attrs["simulated_by_rule"] is None
    assert list(both["row"]) == list(rec["row"])
    assert main(base + ["--simulate", "-1"]) == 2
    assert "--simulate" in capsys.readouterr().err


def design_recommend(pool, simulate):
    import bayes_scaling as bs

    return bs.design.recommend(pool, law="chinchilla", cost="6*N*D",
                               targets=pd.DataFrame({"N": [2e9, 4e9], "D": [4e10, 8e10]}),
                               budget="25%", simulate=simulate, seed=0)


def test_design_command_bad_pool_input_exits_2_naming_the_fix(tmp_path, capsys):
    _pool_csv(tmp_path)
    base = ["design", str(tmp_path / "pool.csv"), "--law", "chinchilla", "--targets",
            str(tmp_path / "targets.csv")]
    assert main([*base, "--budget", "1e10"]) == 2
    assert "buys nothing: the cheapest candidate" in capsys.readouterr().err
    assert main([*base, "--budget", "10%", "--cost", "6*N*T"]) == 2
    assert "names column 'T'" in capsys.readouterr().err
    assert main(["design", str(tmp_path / "pool.csv"), "--law", "chinchilla"]) == 2
    assert "needs --budget, --targets" in capsys.readouterr().err


def test_compare_command_ranks_the_true_law_first(tmp_path, capsys):
    """A table simulated from Chinchilla (N and D vary); the alternative law ignores D. Laplace
    posteriors of both: the true law has the higher elpd and most of the stacking weight."""
    import bayes_scaling as bs

    (tmp_path / "laws.py").write_text(
        "import bayes_scaling as bs\n"
        "bs.laws.register(bs.laws.Law(name='n_only', variables=('N',), equation='E + A N^-a',\n"
        "    params=(bs.laws.Param('E', 0.01, 10.0, (0.5, 3.0)),\n"
        "            bs.laws.Param('A', 1e-3, 1e6, (10.0, 1e3), True),\n"
        "            bs.laws.Param('a', 0.05, 2.0, (0.1, 0.6))),\n"
        "    fn=lambda p, x: p['E'] + p['A'] * x['N'] ** -p['a']), replace=True)\n")
    law = bs.laws.get("chinchilla")
    rows = pd.DataFrame([{"N": n, "D": n * t} for n in (1e7, 3e7, 1e8, 3e8) for t in (5, 20, 80)])
    rows["loss"] = np.asarray(law(law.example, rows)) * np.exp(
        0.005 * np.random.default_rng(1).standard_normal(len(rows)))
    rows.to_csv(tmp_path / "t.csv", index=False)
    out = tmp_path / "cmp.csv"
    rc = main(["compare", str(tmp_path / "t.csv"), "--laws", "n_only", "chinchilla",
               "--method", "laplace", "--chains", "1", "--samples", "1000",
               "--law-module", str(tmp_path / "laws.py"),
               "--out", str(out)])
    assert rc == 0
    assert "PSIS-LOO" in capsys.readouterr().out
    table = pd.read_csv(out, index_col=0)
    assert table.index[0] == "chinchilla"
    assert table.loc["chinchilla", "elpd_loo"] > table.loc["n_only", "elpd_loo"]
    assert table.loc["chinchilla", "weight"] > 0.5


def test_demo_prints_the_forecast_its_decomposition_and_writes_the_fan_chart(tmp_path, capsys):
    """The demo on Epoch's points with few draws: the printed 90% interval at 70B / 1.4T contains
    the printed posterior median, the decomposition's widths grow as each source is added and
    its variance shares sum to 100%, and the fan chart exists."""
    import re

    fig = tmp_path / "fan.png"
    assert main(["demo", "--draws", "100", "--figure", str(fig)]) == 0
    out = capsys.readouterr().out
    m = re.search(r"loss (\d\.\d+), 90% interval \[(\d\.\d+), (\d\.\d+)\]", out)
    assert m, out
    med, lo, hi = map(float, m.groups())
    assert lo < med < hi
    assert lo < float(re.search(r"the law's median (\d\.\d+)", out).group(1)) < hi
    assert re.search(r"extrapolation: distance (\d\.\d+)", out).group(1) != "0.00"
    assert "N and D above its range" in out  # 70B > 16.2B parameters, 1.4T > 318B tokens
    widths = [float(w) for w in re.findall(r"^  [+a-z].{43} +(\d\.\d+) +\d+%$", out, re.MULTILINE)]
    shares = [int(s) for s in re.findall(r" (\d+)%$", out, re.MULTILINE)]
    assert len(widths) == 3 and widths[0] < widths[1] < widths[2], out
    assert widths[2] == pytest.approx(hi - lo, abs=2e-3)
    assert abs(sum(shares) - 100) <= 2
    assert fig.exists() and fig.stat().st_size > 10_000
    assert str(fig) in out


def test_posterior_of_a_table_without_noise_names_scale_and_runs_with_it(tmp_path, capsys):
    N = np.repeat([70e6, 160e6, 410e6, 1e9, 2.8e9], 3)
    D = N * np.tile([20.0, 40.0, 80.0], 5)
    pd.DataFrame({"N": N, "D": D, "loss": 1.69 + 406.4 / N**0.34 + 410.7 / D**0.28}).to_csv(
        tmp_path / "exact.csv", index=False)
    base = ["posterior", "--law", "chinchilla", str(tmp_path / "exact.csv"), "--method",
            "laplace", "--out", str(tmp_path / "p.nc")]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "fits these 15 rows exactly" in err and "--scale 0.001" in err
    assert not (tmp_path / "p.nc").exists()
    assert main([*base, "--scale", "0.001"]) == 0
    import bayes_scaling as bs
    post = bs.load_posterior(tmp_path / "p.nc")
    assert post.settings["scale"] == 0.001 and "sigma" not in post.settings["free"]
    assert float(np.asarray(post.idata.posterior["alpha"]).mean()) == pytest.approx(0.34, abs=0.02)
    assert main([*base, "--scale", "-1"]) == 2
    assert "must be a number > 0" in capsys.readouterr().err
