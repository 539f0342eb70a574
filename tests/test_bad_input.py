"""Every command on malformed input: a non-zero exit, one ``error:`` line naming the problem and
the fix, and no traceback; and the options that used to give a silently wrong answer."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import simulate

import bayes_scaling as bs
from bayes_scaling.checks import at_bounds
from bayes_scaling.laws import Law, Param
from bayes_scaling.cli import main

CHIN = {"E": 1.8, "A": 400.0, "B": 2000.0, "alpha": 0.34, "beta": 0.37}

# A law of a user's own: a power law with a floor E, bounded below by 0.
MY_LAWS = '''
import bayes_scaling as bs
from bayes_scaling.laws import Law, Param


def floor_power(p, x):
    return p["E"] + p["A"] / x["N"] ** p["alpha"]


bs.laws.register(Law(
    "floor_power", (Param("E", 0.0, 10.0, (0.5, 2.0)), Param("A", 1e-3, 1e6, (1.0, 1e3), True),
                    Param("alpha", 0.01, 2.0, (0.1, 1.0))),
    ("N",), floor_power, equation="L = E + A / N^alpha"))
'''


BAD_LAW = '''
import jax.numpy as jnp
import numpy as np
import bayes_scaling as bs
from bayes_scaling.laws import Law, Param


def law_fn(p, x):
    E, A, alpha = p["E"], p["A"], p["alpha"]
    return {body}


bs.laws.register(Law(
    "{name}", (Param("E", 0.0, 10.0, (0.5, 2.0)), Param("A", 1e-3, 1e6, (1.0, 1e3), True),
               Param("alpha", 0.01, 2.0, (0.1, 1.0))), ("N",), law_fn), replace=True)
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    grid = pd.DataFrame([{"N": n, "D": k * n} for n in (1e7, 3e7, 1e8, 3e8) for k in (5, 20, 80)])
    good = simulate("chinchilla", grid, CHIN, noise=0.002, seed=1).drop(columns="clean")
    good.to_csv(d / "good.csv", index=False)
    (d / "empty.csv").write_text("")
    (d / "header.csv").write_text("N,D,loss\n")
    (d / "text.csv").write_text("N,D,loss\n1e7,2e8,3.1\n2e7,4e8 tokens,3.0\n3e7,6e8,2.9\n")
    (d / "nocol.csv").write_text("params,tokens,loss\n1e7,2e8,3.1\n")
    (d / "ragged.csv").write_text("N,D,loss\n1e7,2e8,3.1\n1e7,2e8,3.1,4,5\n")
    (d / "twice.csv").write_text("N, N ,loss\n1e7,2e8,3.1\n")
    good.to_csv(d / "spaced.csv", index=False, sep=",", header=["N ", " D", " loss"])
    good.assign(N=-good["N"]).to_csv(d / "negative.csv", index=False)
    (d / "corrupt.nc").write_bytes(b"\x89HDF\r\n" + bytes(200))
    fit = bs.fit_map("chinchilla", good, delta=1e-3, n_starts=4, seed=0)
    fit.save(d / "fit.json")
    text = (d / "fit.json").read_text()
    (d / "truncated.json").write_text(text[: len(text) // 2])
    (d / "my_laws.py").write_text(MY_LAWS)
    (d / "broken_laws.py").write_text("import bayes_scaling as bs\n\nbs.laws.register(Law)\n")
    # laws whose functions a fit cannot compile: NumPy on a traced column, a scalar for every
    # row, a parameter name that is not declared
    for name, body in (("np_power", "E + A * np.power(x['N'], -alpha)"),
                       ("sum_power", "jnp.sum(E + A * x['N'] ** -alpha)"),
                       ("typo_power", "E + p['B'] * x['N'] ** -alpha")):
        (d / f"{name}_laws.py").write_text(BAD_LAW.format(name=name, body=body))
    return d


def _fit(table, *extra):
    return ["fit", "--law", "chinchilla", table, "--delta", "1e-3", "--n-starts", "4", *extra]


def _plan(target, source):
    return ["plan", "--target", target, "--source", source, "--N", "1e5", "--ptpp", "279",
            "--max-forgetting", "2%", "--target-loss", "2"]


# (id, argv with {d} for the fixture folder, words the message must contain)
CASES = [
    ("fit-missing-csv", _fit("{d}/nope.csv"), ["nope.csv", "no such file"]),
    ("fit-empty-csv", _fit("{d}/empty.csv"), ["empty.csv is empty", "header row"]),
    ("fit-header-only", _fit("{d}/header.csv"), ["no rows", "N, D, loss"]),
    ("fit-text-cell", _fit("{d}/text.csv"), ["'D' must be numeric", "row 1: '4e8 tokens'",
                                              "0-based data rows"]),
    ("fit-ragged-csv", _fit("{d}/ragged.csv"), ["not a readable CSV", "Expected 3 fields"]),
    ("fit-header-twice", _fit("{d}/twice.csv"), ["twice.csv", "columns ['N'] appear twice"]),
    ("fit-unknown-dataset", _fit("dataset:chinchila"), ["chinchila", "chinchilla_epoch"]),
    ("fit-missing-column", _fit("{d}/nocol.csv"), ["missing column(s) ['N', 'D']", "canonical"]),
    ("fit-negative-N", _fit("{d}/negative.csv"), ["'N'", "must be in (0, inf]", "rows 0, 1"]),
    ("fit-delta-negative", _fit("{d}/good.csv", "--delta", "-0.1"), ["delta", "positive finite"]),
    ("fit-delta-zero", _fit("{d}/good.csv", "--delta", "0"), ["delta", "got 0.0"]),
    ("fit-delta-nan", _fit("{d}/good.csv", "--delta", "nan"), ["delta", "got nan"]),
    ("fit-delta-inf", _fit("{d}/good.csv", "--delta", "inf"), ["delta", "got inf"]),
    ("fit-n-starts-0", _fit("{d}/good.csv", "--n-starts", "0"), ["--n-starts", ">= 1"]),
    ("fit-fixed-out-of-bounds", _fit("{d}/good.csv", "--fixed", "alpha=5"),
     ["alpha=5.0", "[0.1, 2]"]),
    ("fit-fixed-no-value", _fit("{d}/good.csv", "--fixed", "alpha"), ["NAME=VALUE", "'alpha'"]),
    ("fit-fixed-unknown", _fit("{d}/good.csv", "--fixed", "gamma=1"), ["gamma", "not parameters"]),
    ("fit-bad-query", _fit("{d}/good.csv", "--query", "N >"), ["--query 'N >'", "columns are"]),
    ("fit-query-no-rows", _fit("{d}/good.csv", "--query", "N < 0"), ["selects no rows"]),
    ("fit-out-missing-dir", _fit("{d}/good.csv", "--out", "{d}/no/dir/fit.json"),
     ["--out", "does not exist"]),
    ("fit-figure-missing-dir", _fit("{d}/good.csv", "--figure", "{d}/no/fig.png"),
     ["--figure", "does not exist"]),
    ("fit-unknown-law", ["fit", "--law", "chinchila", "{d}/good.csv", "--delta", "1e-3"],
     ["unknown law 'chinchila'", "--law-module"]),
    ("fit-law-module-missing", _fit("{d}/good.csv", "--law-module", "{d}/nope.py"),
     ["nope.py", "no such Python file"]),
    ("fit-law-module-broken", _fit("{d}/good.csv", "--law-module", "{d}/broken_laws.py"),
     ["broken_laws.py line 3 failed", "NameError"]),
    ("fit-law-numpy", ["fit", "--law", "np_power", "{d}/good.csv", "--delta", "1e-3",
                       "--law-module", "{d}/np_power_laws.py"],
     ["law np_power: JAX cannot trace its function", "np_power_laws.py line 8",
      "TracerArrayConversionError", "Write it with jax.numpy"]),
    ("posterior-law-one-value", ["posterior", "--law", "sum_power", "{d}/good.csv", "--out",
                                 "{d}/p.nc", "--law-module", "{d}/sum_power_laws.py"],
     ["law sum_power", "returns shape () for 3 rows", "one value per row"]),
    ("design-law-typo", ["design", "{d}/good.csv", "--law", "typo_power", "--targets", "N > 1e8",
                         "--budget", "10%", "--law-module", "{d}/typo_power_laws.py"],
     ["law typo_power: its function", "fails on one number per parameter (E, A, alpha)",
      "KeyError: 'B'"]),
    ("demo-draws-0", ["demo", "--draws", "0"], ["--draws", ">= 1"]),
    ("compare-same-law-twice", ["compare", "{d}/good.csv", "--laws", "chinchilla", "chinchilla"],
     ["--laws names chinchilla more than once"]),
    ("posterior-chains-0", ["posterior", "--law", "chinchilla", "{d}/good.csv", "--out",
                            "{d}/p.nc", "--chains", "0"], ["--chains", ">= 1"]),
    ("posterior-time-limit-0", ["posterior", "--law", "chinchilla", "{d}/good.csv", "--out",
                                "{d}/p.nc", "--time-limit", "0"], ["--time-limit", "seconds > 0"]),
    ("posterior-samples-0", ["posterior", "--law", "chinchilla", "{d}/good.csv", "--out",
                             "{d}/p.nc", "--samples", "0"], ["--samples", ">= 1"]),
    ("posterior-out-missing-dir", ["posterior", "--law", "chinchilla", "{d}/good.csv", "--out",
                                   "{d}/no/p.nc"], ["--out", "does not exist"]),
    ("posterior-header-only", ["posterior", "--law", "chinchilla", "{d}/header.csv", "--out",
                               "{d}/p.nc"], ["no rows"]),
    ("forecast-missing", ["forecast", "{d}/nope.nc", "{d}/good.csv"], ["nope.nc", "no such file"]),
    ("forecast-corrupt-nc", ["forecast", "{d}/corrupt.nc", "{d}/good.csv"],
     ["cannot read", "corrupt.nc", "write it again"]),
    ("forecast-fit-json", ["forecast", "{d}/fit.json", "{d}/good.csv"],
     ["fit.json is a point fit", "posterior .nc"]),
    ("forecast-interval", ["forecast", "{d}/corrupt.nc", "{d}/good.csv", "--interval", "1.5"],
     ["--interval", "(0, 1)"]),
    ("plan-missing", _plan("{d}/nope.nc", "{d}/fit.json"), ["nope.nc", "no such file"]),
    ("plan-truncated-json", _plan("{d}/truncated.json", "{d}/fit.json"),
     ["cannot read", "truncated.json", "write it again"]),
    ("plan-corrupt-nc", _plan("{d}/fit.json", "{d}/corrupt.nc"), ["cannot read", "corrupt.nc"]),
]


@pytest.mark.parametrize("argv, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_nonzero_with_one_clear_line(files, capsys, argv, words):
    rc = main([a.replace("{d}", str(files)) for a in argv])
    out, err = capsys.readouterr()
    assert rc != 0
    errors = [line for line in err.splitlines() if "error: " in line]
    assert len(errors) == 1, err
    for w in words:
        assert w.replace("{d}", str(files)) in errors[0], errors[0]
    if "--law-module" in argv:  # the module was given: no hint to pass it
        assert "pass --law-module FILE.py" not in errors[0], errors[0]
    assert "Traceback" not in out + err
    assert "DESIGN.md" not in err and "renamed(" not in err  # no pointers the CLI cannot follow
    assert "done in" not in err  # refused before any computation


@pytest.mark.parametrize("argv, words", [
    (["fit", "--law", "chinchilla", "{d}/missing.csv", "--delta", "1e-3"], "no such file"),
    (["forecast", "{d}/corrupt.nc", "{d}/good.csv"], "cannot read"),
])
def test_no_traceback_escapes_the_process(files, argv, words):
    r = subprocess.run([sys.executable, "-m", "bayes_scaling.cli",
                        *[a.replace("{d}", str(files)) for a in argv]],
                       capture_output=True, text=True, check=False,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 2
    assert "Traceback" not in r.stdout + r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: ") and words in r.stderr


def test_spaces_around_the_headers_names_are_not_part_of_them(files, capsys):
    """``N, D, loss`` (a space after each comma) names the columns N, D and loss."""
    assert main(_fit(str(files / "spaced.csv"))) == 0
    out = capsys.readouterr().out
    assert "rows: 12" in out


@pytest.mark.parametrize("delta", [-0.1, 0.0, float("nan"), float("inf")])
def test_fit_map_refuses_a_delta_no_fit_can_use(files, delta):
    with pytest.raises(bs.errors.OptionError, match="positive finite"):
        bs.fit_map("chinchilla", pd.read_csv(files / "good.csv"), delta=delta)


def test_fit_options_are_checked_by_the_api(files):
    df = pd.read_csv(files / "good.csv")
    with pytest.raises(bs.errors.OptionError, match="n_starts must be an integer >= 1"):
        bs.fit_map("chinchilla", df, delta=1e-3, n_starts=0)
    with pytest.raises(bs.errors.OptionError, match=r"\[0.1, 2\]"):
        bs.fit_map("chinchilla", df, delta=1e-3, fixed={"alpha": 5.0})
    for kw in ({"num_chains": 0}, {"num_samples": 0}, {"num_warmup": -1}, {"n_starts": 0}):
        with pytest.raises(bs.errors.OptionError, match=next(iter(kw))):
            bs.fit_posterior("chinchilla", df, **kw)


def test_predict_outside_the_laws_domain_is_an_error_not_nan(files):
    fit = bs.MapFit.load(files / "fit.json")
    rows = pd.DataFrame({"N": [1e8, -1e8, 0.0], "D": [1e9, 1e9, 1e9]})
    with pytest.raises(bs.DataError, match=r"'N'.*rows 1, 2"):
        fit.predict(rows)
    inside = fit.predict(rows.iloc[:1])
    assert np.isfinite(inside).all()
    assert fit.predict({"N": 1e8, "D": 1e9}) == pytest.approx(inside, rel=1e-12)  # one row


def test_score_uses_the_fits_delta(files):
    df = pd.read_csv(files / "good.csv")
    fit = bs.MapFit.load(files / "fit.json")
    assert fit.score(df)["huber_log"] == pytest.approx(
        bs.metrics.score(df["loss"], fit.predict(df), delta=1e-3)["huber_log"], rel=1e-12)
    assert fit.score(df)["huber_log"] != pytest.approx(
        bs.metrics.score(df["loss"], fit.predict(df), delta=0.02)["huber_log"], rel=1e-3)
    with pytest.raises(TypeError, match="delta"):
        bs.metrics.score(df["loss"], fit.predict(df))  # no silent default


def test_at_bounds_lists_only_parameters_on_a_bound():
    law = bs.laws.get("chinchilla")  # A, B in [1e-6, 1e6] (log), alpha in [0.1, 2], E in [1e-3, 10]
    p = {"A": 1e6, "B": 400.0, "alpha": 0.1, "beta": 0.3, "E": 0.05}
    assert at_bounds(law, p) == {"A": 1e6, "alpha": 0.1}
    assert at_bounds(law, p, fixed={"alpha": 0.1}) == {"A": 1e6}
    assert at_bounds(law, CHIN) == {}


def test_law_module_fit_recovers_and_flags_a_parameter_on_its_bound(files, tmp_path, capsys):
    """Data from the user's law with its floor E at the bound 0: the fit recovers A and alpha,
    and the CLI names E as a bound, not an estimate."""
    n = np.geomspace(1e5, 1e9, 12)
    pd.DataFrame({"N": n, "loss": 300.0 / n**0.3}).to_csv(tmp_path / "t.csv", index=False)
    rc = main(["fit", "--law-module", str(files / "my_laws.py"), "--law", "floor_power",
               str(tmp_path / "t.csv"), "--delta", "1e-3", "--n-starts", "8",
               "--out", str(tmp_path / "f.json"), "--figure", str(tmp_path / "f.png")])
    _out, err = capsys.readouterr()
    assert rc == 0, err
    fit = bs.MapFit.load(tmp_path / "f.json")
    assert fit.params["alpha"] == pytest.approx(0.3, rel=1e-3)
    assert fit.params["A"] == pytest.approx(300.0, rel=1e-2)
    warning = [line for line in err.splitlines() if "on a bound" in line]
    assert len(warning) == 1 and "E = " in warning[0] and "alpha" not in warning[0]
    assert "MAP fit of floor_power (8 starts)" in err and "done in" in err  # progress line
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_register_again_is_a_noop_and_a_different_law_needs_replace():
    from bayes_scaling.laws import Law, Param

    def make(upper):
        def f(p, x):
            return p["E"] + p["A"] / x["N"] ** p["alpha"]
        return Law("rerun_cell", (Param("E", 0.0, 10.0, (0.5, 2.0)),
                                  Param("A", 1e-3, 1e6, (1.0, 1e3), True),
                                  Param("alpha", 0.01, upper, (0.1, 1.0))), ("N",), f)

    first = bs.laws.register(make(2.0))
    assert bs.laws.register(make(2.0)) is first  # the cell run again
    with pytest.raises(ValueError, match="replace=True"):
        bs.laws.register(make(3.0))
    assert bs.laws.get("rerun_cell") is first
    bs.laws.register(make(3.0), replace=True)
    assert bs.laws.get("rerun_cell").param("alpha").upper == 3.0


def test_unconverged_posterior_is_refused_unless_allowed_and_then_labelled(files, tmp_path,
                                                                            capsys):
    """One NUTS chain cannot be checked (R-hat undefined): the posterior fails its checks."""
    import arviz as az

    post = tmp_path / "p.nc"
    args = ["posterior", "--law", "chinchilla", str(files / "good.csv"), "--out", str(post),
            "--chains", "1", "--warmup", "30", "--samples", "30"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "failed its checks" in err and "--allow-unconverged" in err and not post.exists()
    assert "Traceback" not in err

    assert main([*args, "--allow-unconverged", "--figure", str(tmp_path / "p.png")]) == 0
    out, err = capsys.readouterr()
    assert "NOT CONVERGED" in out and err.count("NOT CONVERGED") == 1
    assert az.from_netcdf(post).posterior.attrs["bayes_scaling_status"].startswith("NOT CONVERGED")
    assert (tmp_path / "p.png").stat().st_size > 1000

    new = tmp_path / "new.csv"
    pd.DataFrame({"N": [1e9], "D": [2e10]}).to_csv(new, index=False)
    assert main(["forecast", str(post), str(new)]) == 2
    assert "failed its convergence checks" in capsys.readouterr().err
    assert main(["forecast", str(post), str(new), "--allow-unconverged", "--out",
                 str(tmp_path / "fc.csv"), "--figure", str(tmp_path / "fc.png")]) == 0
    err = capsys.readouterr().err
    assert err.count("NOT CONVERGED") == 1  # one warning, not one per use of the posterior
    fc = pd.read_csv(tmp_path / "fc.csv")
    assert (fc["posterior_status"] == "NOT CONVERGED").all()
    assert (fc["lower"] < fc["median"]).all() and (fc["median"] < fc["upper"]).all()
    assert (tmp_path / "fc.png").stat().st_size > 1000


def test_help_text_on_every_option(capsys):
    from bayes_scaling.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in ("laws", "fit", "posterior", "forecast", "demo", "datasets", "analyses"):
        for action in sub.choices[name]._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
    assert main(["posterior", "--help"]) == 0
    assert ".json" not in capsys.readouterr().out


def test_every_registered_law_traces():
    """The check that refuses an untraceable user law passes every law the package ships."""
    from bayes_scaling.checks import check_traceable

    shipped = [n for n in bs.laws.names()
               if bs.laws.get(n).unshifted_fn.__module__.startswith("bayes_scaling.")]
    assert len(shipped) >= 20  # the papers' laws and their baselines
    for name in shipped:
        check_traceable(name)


def _mixing_law():
    """Ye et al.'s data mixing law (ICLR 2025, Eq. 1) for two of three domains, as a user writes
    it: its inputs are mixture proportions named r1, r2, and a proportion may be 0."""
    import jax.numpy as jnp
    return Law(name="user_mixing", variables=("r1", "r2"), equation="c + k exp(t1 r1 + t2 r2)",
               params=(Param("c", 0.0, 10.0, (0.5, 2.0)),
                       Param("k", 1e-4, 100.0, (0.01, 1.0), log_init=True),
                       Param("t1", -20.0, 20.0, (-3.0, 3.0)),
                       Param("t2", -20.0, 20.0, (-3.0, 3.0))),
               fn=lambda p, x: p["c"] + p["k"] * jnp.exp(p["t1"] * x["r1"] + p["t2"] * x["r2"]))


def test_a_law_of_ones_own_reads_a_column_named_like_a_shipped_ratio_as_it_is():
    # The shipped laws' conventions for r1, r2, r, k, replay ... are theirs: a law of one's own
    # whose proportion r2 is 0 on some rows is fitted (it was refused as "second-stage ratio must
    # be in (0, 1]"); the rules every law shares (positive loss, N, D) still hold.
    law = _mixing_law()
    grid = np.arange(0, 9) / 8
    r1, r2 = (a.ravel() for a in np.meshgrid(grid, grid))
    keep = r1 + r2 <= 1.0
    true = {"c": 1.0, "k": 0.8, "t1": -2.0, "t2": -0.7}
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"r1": r1[keep], "r2": r2[keep]})
    df["loss"] = np.asarray(law(true, df)) * np.exp(0.002 * rng.standard_normal(len(df)))
    assert (df["r2"] == 0).sum() == 9
    fit = bs.fit_map(law, df, delta=1e-3, seed=0)
    assert fit.params == pytest.approx(true, rel=0.05)
    with pytest.raises(bs.DataError, match=r"'loss'.*rows 3"):
        bs.data.validate(df.assign(loss=df["loss"].where(df.index != 3, -1.0)), law)
    # a shipped law keeps its convention on the same column name
    m3 = bs.laws.get("m3_r1")
    rows = pd.DataFrame({"loss": [3.0, 3.1], "M": [1e9, 1e9], "D_T": [1e9, 1e9], "k": [1.0, 2.0],
                         "r": [0.5, 0.5], "r_f": [0.5, 0.5], "r1": [0.5, -0.1]})
    with pytest.raises(bs.DataError, match=r"'r1' \(first-stage ratio\).*rows 1"):
        bs.data.validate(rows, m3, min_rows=1)
    user_nd = Law(name="user_nd", variables=("N", "D"), params=(Param("E", 0.0, 10.0, (1.0, 2.0)),),
                  fn=lambda p, x: p["E"] + 0.0 * x["N"] * x["D"])
    with pytest.raises(bs.DataError, match=r"'N'.*rows 1"):
        bs.data.validate(pd.DataFrame({"loss": [3.0, 3.1], "N": [1e9, 0.0], "D": [1e9, 1e9]}),
                         user_nd, min_rows=1)
