"""A signed target (values at or below 0, e.g. ScaleBench's unigram-normalised loss): the
likelihood lives on log L, so ``fit_posterior`` fits ``L + c`` (``data.target_shift``,
``Law.shifted``) and reports forecasts, coverage and scores of ``L``."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.data import target_shift_of as target_shift
from bayes_scaling.errors import DataError
from bayes_scaling.evaluate.probabilistic import posterior_loglik
from bayes_scaling.laws import Law, Param


def _fn(p, x):
    return p["E"] + p["A"] / x["N"] ** p["a"]


# not registered; the offset E is signed, as a loss minus an entropy is
LAW = Law(name="signed_target_test_law",
          params=(Param("E", -10.0, 10.0, (-6.0, 3.0)),
                  Param("A", 1e-3, 1e6, (1.0, 1e4), log_init=True),
                  Param("a", 0.05, 1.5, (0.1, 0.8))),
          variables=("N",), fn=_fn)
TRUE = {"E": -5.0, "A": 400.0, "a": 0.35}
NOISE = 0.004  # additive, in units of the target


def _table(n_grid, seed):
    rng = np.random.default_rng(seed)
    N = np.repeat(np.geomspace(1e7, 1e10, n_grid), 2)
    y = np.asarray(LAW(TRUE, {"N": N})) + NOISE * rng.standard_normal(len(N))
    return pd.DataFrame({"N": N, "loss": y})


def test_the_shift_makes_the_smallest_value_the_tables_spread():
    assert target_shift([1.2, 3.0]) == 0.0  # a loss is left alone
    # vocab-like: range 4.65 > half the largest magnitude, so min(L + c) = the range, c rounded up
    c = target_shift([-5.3427, -0.6967])
    assert c == 10.0 and -5.3427 + c >= -0.6967 + 5.3427
    # a narrow negative table: half its largest magnitude, not its tiny range
    c = target_shift([-5.001, -4.999])
    assert c == pytest.approx(7.6) and -5.001 + c >= 2.5
    assert target_shift([0.0, 0.0]) == 1.0
    assert target_shift([np.nan, -1.0, 3.0]) == 5.0  # non-finite values are validation's business


def test_a_shifted_law_adds_its_constant_and_is_its_own_law():
    x = {"N": np.array([1e8])}
    s = LAW.shifted(7.5)
    assert float(s(TRUE, x)[0]) == pytest.approx(float(LAW(TRUE, x)[0]) + 7.5)
    assert s.identity != LAW.identity and s.target_shift == 7.5
    back = s.shifted(-7.5)
    assert back.identity == LAW.identity and back.fn is LAW.fn
    assert LAW.shifted(7.5).fn is s.fn  # one function per (law, shift): programs are reused
    assert s.shifted(2.5).target_shift == 10.0
    # a saved fit of the shifted law reloads from the law as written plus the recorded shift
    assert bs.laws.Law.from_saved(LAW.name, s.identity, LAW, target_shift=7.5).identity == \
        s.identity
    with pytest.raises(bs.errors.LawError, match="differs"):
        bs.laws.Law.from_saved(LAW.name, s.identity, LAW)


@pytest.fixture(scope="module")
def fitted():
    train = _table(10, seed=0)
    post = bs.fit_posterior(LAW, train, method="laplace", seed=0, progress_bar=False)
    return train, post


def test_a_signed_target_is_fitted_as_a_positive_one_and_recovered(fitted):
    train, post = fitted
    assert (train["loss"] < 0).all()
    c = target_shift(train["loss"])
    assert c > 0 and post.target_shift == c and post.law.target_shift == c
    assert post.ok, post.diagnostics
    # the parameters are the law's own (E in the target's units): the truth inside 90%
    for name, true in TRUE.items():
        lo, hi = np.quantile(post.draws(name), [0.05, 0.95])
        assert lo <= true <= hi, (name, lo, hi, true)
    # forecasts are of L, not L + c: inside the table and beyond it (10x the largest N)
    new = pd.DataFrame({"N": [3e8, 1e11]})
    truth = np.asarray(LAW(TRUE, new))
    f = post.forecast(new)
    assert (f["median"] < 0).all()
    assert np.all(np.abs(f["median"] - truth) < 0.03)
    assert np.all((f["lower"] <= truth) & (truth <= f["upper"]))
    assert f["extrapolated"].tolist() == [False, True]


def test_coverage_and_scores_read_the_held_out_rows_as_given(fitted, tmp_path):
    train, post = fitted
    held = _table(6, seed=1)
    cov = post.coverage(held, intervals=(0.9,), discrepancy="off")
    assert cov[0.9] >= 0.75
    ll = posterior_loglik(post, held)
    assert np.isfinite(ll).all()
    # the density of log(L + c) at the truth beats that of a table read as L (off by c)
    wrong = held.assign(loss=held["loss"] + 1.0)
    assert ll.mean() > posterior_loglik(post, wrong).mean() + 1.0
    # saved and loaded: the law as written (the shift recorded), the same forecasts
    path = tmp_path / "signed.nc"
    post.save(path)
    back = bs.load_posterior(path, law=LAW)
    assert back.target_shift == post.target_shift
    new = pd.DataFrame({"N": [1e11]})
    pd.testing.assert_frame_equal(back.forecast(new), post.forecast(new))


def test_a_zero_shift_refuses_a_signed_table_and_a_bad_shift_is_named():
    train = _table(4, seed=0)
    with pytest.raises(DataError, match="loss"):
        bs.fit_posterior(LAW, train, method="laplace", target_shift=0, progress_bar=False)
    with pytest.raises(bs.errors.BayesScalingError, match="target_shift"):
        bs.fit_posterior(LAW, train, method="laplace", target_shift=math.inf,
                         progress_bar=False)


def test_the_point_fit_takes_a_signed_target_the_same_way(tmp_path):
    train = _table(10, seed=0)
    fit = bs.fit_map(LAW, train, delta=1e-3, n_starts=16, seed=0)
    assert fit.target_shift == target_shift(train["loss"]) > 0
    # the parameters are the law's own, the predictions in the target's units
    for name, true in TRUE.items():
        assert fit.params[name] == pytest.approx(true, rel=0.15, abs=0.05), name
    assert np.abs(fit.predict(train) - train["loss"]).max() < 5 * NOISE
    assert np.isfinite(list(fit.score(train).values())).all()
    path = tmp_path / "fit.json"
    fit.save(path)
    back = bs.MapFit.load(path, law=LAW)
    np.testing.assert_allclose(back.predict(train), fit.predict(train))
    with pytest.raises(DataError, match="loss"):
        bs.fit_map(LAW, train, delta=1e-3, n_starts=4, target_shift=0)


@pytest.mark.parametrize("method", ["residual_bootstrap", "conformal"])
def test_the_peers_intervals_take_a_signed_target_too(method):
    train = _table(10, seed=0)
    query = pd.DataFrame({"N": [3e8, 3e10]})
    truth = np.asarray(LAW(TRUE, query))
    kw = {"n_boot": 20} if method == "residual_bootstrap" else {}
    q = getattr(bs.evaluate.baselines, method)(LAW, train, query, levels=(0.9,), **kw)
    assert q.attrs["settings"]["target_shift"] == target_shift(train["loss"])
    assert (q["median"] < 0).all() and np.all(np.abs(q["median"] - truth) < 0.03)
    assert np.all((q["lower90"] < q["median"]) & (q["median"] < q["upper90"]))


def test_plans_and_run_choices_read_the_same_units(fitted):
    train, post = fitted
    new = pd.DataFrame({"N": [3e8, 1e11]})
    draws = bs.plan.as_draws(post)
    assert draws.target_shift == post.target_shift
    np.testing.assert_allclose(draws.predict_draws(new),
                               post.predict_draws(new, discrepancy="off"), rtol=1e-9)
    assert (bs.plan.as_draws(bs.fit_map(LAW, train, delta=1e-3, n_starts=8)).predict_draws(new)
            < 0).all()
    # which run to buy next for a forecast at 1e11: a finite criterion, a run bought
    pool = pd.DataFrame({"N": [2e10, 5e10, 1e7]})
    pick = bs.anchors.select(post, pool, budget=1.0, cost=lambda d: np.ones(len(d)),
                             queries=new.iloc[[1]])
    assert len(pick) >= 1 and np.isfinite(pick.filter(like="criterion").to_numpy(float)).all()
    assert pick["N"].iloc[0] >= 2e10 and pick["reduction"].iloc[0] > 0  # not the small run


def test_the_command_line_fits_and_forecasts_a_signed_table(tmp_path, capsys):
    from bayes_scaling.cli import main

    (tmp_path / "laws.py").write_text(
        "import bayes_scaling as bs\n"
        "bs.laws.register(bs.laws.Law(name='signed_offset_cli', variables=('N',),\n"
        "    params=(bs.laws.Param('E', -10.0, 10.0, (-6.0, 3.0)),\n"
        "            bs.laws.Param('A', 1e-3, 1e6, (1.0, 1e4), True),\n"
        "            bs.laws.Param('a', 0.05, 1.5, (0.1, 0.8))),\n"
        "    fn=lambda p, x: p['E'] + p['A'] / x['N'] ** p['a']), replace=True)\n")
    train = _table(10, seed=0)
    train.to_csv(tmp_path / "runs.csv", index=False)
    pd.DataFrame({"N": [1e11]}).to_csv(tmp_path / "big.csv", index=False)
    mod = ["--law-module", str(tmp_path / "laws.py")]
    c = target_shift(train["loss"])
    assert main(["fit", *mod, "--law", "signed_offset_cli", "--delta", "1e-3", "--n-starts", "16",
                 str(tmp_path / "runs.csv")]) == 0
    assert f"fitted as loss + {c:g}" in capsys.readouterr().out
    assert main(["posterior", *mod, "--law", "signed_offset_cli", "--method", "laplace",
                 str(tmp_path / "runs.csv"), "--out", str(tmp_path / "post.nc")]) == 0
    capsys.readouterr()
    assert main(["forecast", *mod, str(tmp_path / "post.nc"), str(tmp_path / "big.csv"),
                 "--out", str(tmp_path / "f.csv")]) == 0
    f = pd.read_csv(tmp_path / "f.csv")
    truth = float(LAW(TRUE, {"N": np.array([1e11])})[0])
    assert f["lower"].iloc[0] <= truth <= f["upper"].iloc[0] < 0


@pytest.mark.filterwarnings("ignore:.*starts ended non-finite")
def test_a_table_positive_but_at_a_few_rows_warns_and_names_them():
    """A loss of -1 or 0 on a few rows of a positive table is as likely a marker of runs not made
    as a signed target: the fit goes on as a signed one and says so, naming the rows; saying
    ``target_shift`` explicitly, or a table signed throughout, gives no warning."""
    N = np.geomspace(1e7, 1e10, 12)
    df = pd.DataFrame({"N": N, "loss": 2.0 + 400.0 / N ** 0.35})
    df.loc[[2, 5], "loss"] = [-1.0, 0.0]
    with pytest.warns(bs.SignedTargetWarning, match=r"the table: the loss is at or below 0 at 2 "
                      r"of 12 rows \(\[2, 5\]: \[-1.0, 0.0\]\).*target_shift=[\d.]+, on the "
                      r"command line --target-shift [\d.]+, says so"):
        fit = bs.fit_map(LAW, df, delta=1e-3, n_starts=4, seed=0)
    assert fit.target_shift > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", bs.SignedTargetWarning)
        bs.fit_map(LAW, df, delta=1e-3, n_starts=4, seed=0, target_shift=fit.target_shift)
        bs.fit_map(LAW, _table(6, seed=0), delta=1e-3, n_starts=4, seed=0)  # signed throughout
        bs.fit_map(LAW, df.drop(index=[2, 5]), delta=1e-3, n_starts=4, seed=0)  # positive


def test_the_command_line_says_the_shift_or_refuses_with_target_shift_0(tmp_path, capsys):
    from bayes_scaling.cli import main

    N = np.geomspace(1e7, 1e10, 12)
    df = pd.DataFrame({"N": N, "loss": 2.0 + 400.0 / N ** 0.35})
    df.loc[[2, 5], "loss"] = -1.0
    path = tmp_path / "mixed.csv"
    df.to_csv(path, index=False)
    law = "signed_target_cli_test_law"
    if law not in bs.laws.names():
        bs.laws.register(LAW.renamed(law))
    argv = ["fit", "--law", law, str(path), "--delta", "1e-3", "--n-starts", "4"]
    assert main(argv + ["--target-shift", "0"]) != 0
    err = capsys.readouterr().err
    assert "error: " in err and "'loss'" in err and "Traceback" not in err
    assert main(argv + ["--target-shift", "6"]) == 0
    out, err = capsys.readouterr()
    assert "fitted as loss + 6" in out and "at or below 0" not in err  # said: no warning
