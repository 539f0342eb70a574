"""What a forecast needs is computed once per posterior and saved with it: a loaded posterior
forecasts the in-memory one's intervals without refitting the law (bayes_scaling.bayes.intervals,
rehearse); and the compiled programs persist across processes (bayes_scaling's compile cache)."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes import intervals

LAW = bs.laws.get("chinchilla")


def _table(seed=0):
    N = np.repeat(np.geomspace(1e7, 3e8, 8), 4)
    df = pd.DataFrame({"N": N, "D": N * np.tile([10, 20, 40, 80], 8)})
    x = LAW.inputs(df.assign(loss=1.0))
    clean = np.asarray(LAW.fn({k: jnp.asarray(v) for k, v in LAW.example.items()}, x))
    rng = np.random.default_rng(seed)
    return df.assign(loss=clean * np.exp(0.01 * rng.standard_normal(len(df))))


# beyond the largest N and D; beyond the smallest D; inside the box of N and D but beyond the
# hull (more tokens per parameter than any fitted run); inside the hull
QUERY = pd.DataFrame({"N": [1e9, 5e8, 2e7, 1e7, 5e7], "D": [4e10, 1e10, 1e8, 2e10, 1.5e9]})


@pytest.fixture(scope="module")
def post():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bs.fit_posterior("chinchilla", _table(), method="laplace", likelihood="normal",
                                progress_bar=False)


def _no_refit(monkeypatch):
    def refit(*a, **k):
        raise AssertionError("a forecast refitted the law")
    monkeypatch.setattr(intervals, "rehearsal_rows", refit)
    monkeypatch.setattr(intervals, "_laplace_log_draws", refit)


def test_a_loaded_posterior_forecasts_the_same_intervals_without_fitting(post, tmp_path,
                                                                         monkeypatch):
    fc = post.forecast(QUERY)  # rehearsed on demand, in memory
    assert fc["extrapolated"].tolist() == [True, True, True, True, False]
    assert fc["discrepancy_basis"].str.startswith("rehearsal on").sum() == 4
    assert fc.loc[3, "discrepancy_basis"].split(" along ")[1].startswith("hull")
    post.save(tmp_path / "p.nc")
    _no_refit(monkeypatch)
    loaded = bs.load_posterior(tmp_path / "p.nc")
    loaded.settings.pop("discrepancy_grid")  # the grids too are rebuilt from the saved rows
    pd.testing.assert_frame_equal(loaded.forecast(QUERY), fc)
    # the in-memory posterior, now prepared, gives them too
    pd.testing.assert_frame_equal(post.forecast(QUERY), fc)


def test_every_direction_a_forecast_can_leave_in_is_rehearsed_before_saving(post):
    store = intervals.rehearse(post)
    names = set(store)
    cols = intervals.input_columns(post.law)
    assert {f"{c}{s}1.0" for c in cols for s in "+-"} <= names
    rng = np.random.default_rng(0)
    t = intervals.fitted_table(post)
    lo, hi = np.log(t[cols].min()), np.log(t[cols].max())
    span = hi - lo
    X = np.exp(lo.to_numpy() + rng.uniform(-0.5, 1.5, (2000, len(cols))) * span.to_numpy())
    _, sigs = intervals.extrapolation(t, pd.DataFrame(X, columns=cols), cols)
    hull = {s for s in sigs if s.startswith("hull")}
    assert hull  # some queries leave through a slanted facet
    for sig in set(sigs) - {""}:
        for u in intervals.directions(sig):
            assert " ".join(f"{c}{w:+.1f}" for c, w in sorted(u.items())) in names, sig


def test_a_file_saved_without_its_rehearsal_forecasts_by_rehearsing_once(post, tmp_path):
    fc = post.forecast(QUERY)
    settings = dict(post.settings)
    post.settings = {k: v for k, v in settings.items()
                     if k not in ("rehearsal", "discrepancy_grid")}
    try:
        post.save(tmp_path / "old.nc", prepare=False)  # as a version without rehearse wrote it
    finally:
        post.settings = settings
    loaded = bs.load_posterior(tmp_path / "old.nc")
    assert "rehearsal" not in loaded.settings
    pd.testing.assert_frame_equal(loaded.forecast(QUERY), fc)
    assert {"D+1.0", "N+1.0"} <= set(loaded.settings["rehearsal"])


LAZY = """
import sys, json
import pandas as pd
import bayes_scaling as bs
post = bs.load_posterior(sys.argv[1])
fc = post.forecast(pd.read_json(sys.argv[2]))
before = "arviz" in sys.modules
stats = "scipy.stats" in sys.modules  # 0.4 s of start-up a forecast does not need
draws = post.idata.posterior["alpha"].values.ravel()  # the InferenceData, read on first use
print(json.dumps({"arviz_before": before, "arviz_after": "arviz" in sys.modules, "stats": stats,
                  "median": fc["median"].tolist(), "alpha": draws[:5].tolist(),
                  "groups": sorted(post.idata.groups())}))
"""


def test_a_loaded_posterior_forecasts_without_arviz_until_its_inference_data_is_used(post,
                                                                                      tmp_path):
    """Nor scipy.stats: a forecast process imports neither."""
    import json

    post.save(tmp_path / "p.nc")
    QUERY.to_json(tmp_path / "q.json")
    out = subprocess.run([sys.executable, "-c", LAZY, str(tmp_path / "p.nc"),
                          str(tmp_path / "q.json")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["arviz_before"] is False and got["arviz_after"] is True
    assert got["stats"] is False
    np.testing.assert_allclose(got["median"], post.forecast(QUERY)["median"], rtol=1e-12)
    np.testing.assert_array_equal(got["alpha"], post.draws("alpha")[:5])
    assert set(post.idata.groups()) == set(got["groups"])


# --- the persistent compilation cache ---------------------------------------------------------

PROGRAM = """
import sys
import jax
hits = []
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)
import bayes_scaling as bs
import jax.numpy as jnp
print(bs.compile_cache_dir)
print(float(jax.jit(lambda x: jnp.sin(x) * 41.0 + float(sys.argv[1]))(jnp.ones(7)).sum()))
print(len(hits))
"""


def _run(tmp_path, *args, **env):
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))
            and k != "BAYES_SCALING_NO_CACHE"}
    base["XDG_CACHE_HOME"] = str(tmp_path)
    return subprocess.Popen([sys.executable, "-c", PROGRAM, *args], env={**base, **env},
                            stdout=subprocess.PIPE, text=True)


def _out(proc):
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0
    return out.split()


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    # two processes compile the same program into one fresh cache at once (the size bound's
    # file lock serialises their writes); a third loads it and compiles nothing
    first = [_run(tmp_path, "2"), _run(tmp_path, "2")]
    outs = [_out(p) for p in first]
    folder = outs[0][0]
    assert folder.startswith(str(tmp_path / "bayes-scaling" / "jax" / "jax-"))
    assert outs[1][0] == folder and outs[0][1] == outs[1][1]
    entries = {p.name for p in Path(folder).iterdir()}
    assert any(e.startswith("jit__lambda") for e in entries)
    again = _out(_run(tmp_path, "2"))
    assert again[:2] == outs[0][:2] and int(again[2]) >= 1
    # a program with another constant is compiled, not loaded (the helpers' programs are)
    assert int(_out(_run(tmp_path, "3"))[2]) == int(again[2]) - 1


def test_the_cache_is_off_on_request_and_the_users_own_is_kept(tmp_path):
    off = _out(_run(tmp_path, "2", BAYES_SCALING_NO_CACHE="1"))
    assert off[0] == "None" and not (tmp_path / "bayes-scaling").exists()
    own = tmp_path / "own"
    mine = _out(_run(tmp_path, "2", JAX_COMPILATION_CACHE_DIR=str(own)))
    assert mine[0] == "None" and not (tmp_path / "bayes-scaling").exists()
