"""The NUTS chains' driver and its progress bar (bayes_scaling.bayes.progress): the chains run in
segments of compiled iterations and a bar on stderr follows them, without changing a single draw;
NumPyro's warning that it turns its own bar off for vectorised chains is not raised; the
chains' programs make no host call, so the persistent compilation cache keeps them."""
import logging
import warnings

import jax
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling.bayes import progress
from conftest import simulate

GRID = pd.DataFrame({"N": np.repeat(np.geomspace(1e7, 1e9, 6), 4),
                     "D": np.repeat(np.geomspace(1e7, 1e9, 6), 4) * np.tile([5, 10, 20, 40], 6)})


def _fit(bar):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = bs.fit_posterior("chinchilla", simulate("chinchilla", GRID, noise=0.01, seed=3),
                                num_warmup=150, num_samples=150, seed=0, progress_bar=bar,
                                allow_unconverged=True, chain_method="vectorized")
    return post, [str(w.message) for w in caught]


class Bar:
    """Records what a ``tqdm`` bar is told."""
    made: list = []

    def __init__(self, total, **kw):
        self.total, self.n, self.updates, self.phases, self.closed = total, 0, 0, [], False
        Bar.made.append(self)

    def update(self, k):
        self.n += k
        self.updates += k > 0

    def set_description(self, text, refresh=True):
        self.phases.append(text)

    def close(self):
        self.closed = True


def test_the_bar_follows_the_chains_and_changes_no_draw(monkeypatch):
    import tqdm

    for name in progress.QUIET_ENV:  # the bar is off in pytest workers and CI, as NumPyro's
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tqdm, "tqdm", Bar)
    monkeypatch.setattr(Bar, "made", [])  # the bars of this test only, whatever ran before
    assert progress.wanted(True) and not progress.wanted(False)
    quiet, _ = _fit(False)
    assert Bar.made == []
    shown, messages = _fit(True)
    assert not any("progress bar" in m for m in messages), messages
    first = Bar.made[0]  # the first run: warm-up then sampling, reported as it went
    assert first.total == 300 and first.n == 300 and first.closed
    assert first.updates == 2 * -(-150 // progress.SEGMENT)
    assert first.phases.index("sampling") > first.phases.index("warm-up")
    assert all(b.n == b.total and b.closed for b in Bar.made)
    for name in quiet.param_names:
        np.testing.assert_array_equal(shown.draws(name), quiet.draws(name))
    monkeypatch.setenv("CI", "1")
    assert not progress.wanted(True)


class BrokenBar(Bar):
    def update(self, k):
        raise RuntimeError("a terminal that cannot be written to")


def test_a_bar_that_fails_does_not_fail_the_fit(monkeypatch):
    import tqdm

    for name in progress.QUIET_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tqdm, "tqdm", BrokenBar)
    monkeypatch.setattr(Bar, "made", [])
    post, _ = _fit(True)
    quiet, _ = _fit(False)
    for name in quiet.param_names:
        np.testing.assert_array_equal(post.draws(name), quiet.draws(name))


def test_the_chains_programs_are_kept_by_the_persistent_cache(caplog):
    # JAX does not write a program that makes host callbacks to its persistent cache, so every
    # process would compile such chains again; every program this fit compiles is written or read
    if jax.config.jax_compilation_cache_dir is None:
        pytest.skip("no persistent compilation cache in this run (pytest -p no:cacheprovider)")
    jax.clear_caches()
    with caplog.at_level(logging.DEBUG, logger="jax._src.compiler"):
        _fit(True)
    refused = [r.getMessage() for r in caplog.records if "Not writing" in r.getMessage()]
    assert not [m for m in refused if "callback" in m], refused


def test_chain_methods_draw_the_same_chains():

    df = simulate("chinchilla", GRID, noise=0.01, seed=3)
    kw = dict(num_warmup=100, num_samples=70, seed=1, allow_unconverged=True, num_chains=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = bs.fit_posterior("chinchilla", df, chain_method="vectorized", **kw)
        other = bs.fit_posterior("chinchilla", df, chain_method="sequential", **kw)
    for name in one.param_names:  # the same keys and iterations; rounding apart
        np.testing.assert_allclose(other.draws(name), one.draws(name), rtol=1e-6)
    if jax.local_device_count() < 2:  # parallel chains without a device each: one by one, said
        with pytest.warns(UserWarning, match="needs a device per chain"):
            alone = bs.fit_posterior("chinchilla", df, chain_method="parallel", **kw)
        for name in one.param_names:
            np.testing.assert_array_equal(alone.draws(name), other.draws(name))
