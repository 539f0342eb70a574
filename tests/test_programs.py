"""The package keeps a bounded number of compiled programs in memory (``bayes_scaling.programs``):
a process that fits many laws must not accumulate the programs of every law it ever fitted (each
holds memory maps; past ``vm.max_map_count`` the compiler fails)."""
import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bayes_scaling as bs
from bayes_scaling import programs
from bayes_scaling.bayes import model
from bayes_scaling.programs import Programs


def _jitted(scale):
    return jax.jit(lambda x: scale * jnp.sin(x))


def test_the_least_recently_used_program_is_dropped_and_freed():
    cache = Programs(2, "test")
    built = []

    def build(k):
        def f():
            built.append(k)
            return _jitted(k)
        return f

    a = cache.get("a", build(1.0))
    ref_a = weakref.ref(a)
    assert float(a(jnp.asarray(0.5))) == pytest.approx(np.sin(0.5))
    cache.get("b", build(2.0))
    assert cache.get("a", build(9.0)) is a  # a hit: not rebuilt, and now the most recent
    cache.get("c", build(3.0))  # drops "b", the least recently used
    assert "b" not in cache and "a" in cache and len(cache) == 2
    del a
    cache.get("d", build(4.0))  # drops "a"
    gc.collect()
    assert ref_a() is None, "a dropped program is still referenced: its memory is never freed"
    again = cache.get("a", build(5.0))
    assert float(again(jnp.asarray(0.5))) == pytest.approx(5.0 * np.sin(0.5))
    assert built == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_bad_size_is_refused():
    with pytest.raises(ValueError, match="maxsize"):
        Programs(0)


def test_fitting_many_laws_keeps_at_most_the_bound(monkeypatch):
    """Fits of more distinct models than the model cache holds leave it at its bound, and the
    earliest model's compiled density is freed."""
    monkeypatch.setattr(model, "_CACHE", Programs(3, "models"))
    rng = np.random.default_rng(0)
    N = np.geomspace(1e7, 1e9, 12)
    D = 20 * N
    df = pd.DataFrame({"N": N, "D": D, "loss": 1.7 + 400 * N ** -0.34 + 400 * D ** -0.28
                       + 0.01 * rng.normal(size=12)})
    truth = {"A": 400.0, "B": 400.0, "E": 1.7, "alpha": 0.34, "beta": 0.28, "sigma": 0.01}
    first = None
    for k, fixed in enumerate([{"E": 1.7}, {"alpha": 0.34}, {"beta": 0.28}, {"A": 400.0},
                               {"B": 400.0}]):
        spec = bs.bayes.spec.make_spec(bs.laws.get("chinchilla"), fixed=fixed)
        fn = model.log_joint_batch(spec)
        if first is None:
            first = weakref.ref(fn)
        data = bs.bayes.spec.data_pytree(spec, spec.space.validate(df))
        theta = {k: jnp.asarray(v) for k, v in truth.items() if k not in fixed}
        s = jnp.stack([spec.s(theta, data["ref"])] * 2)
        assert np.all(np.isfinite(np.asarray(fn(s, data))))
        del fn
        assert len(model._CACHE) <= 3
    gc.collect()
    assert first() is None


def test_past_the_share_of_the_map_limit_every_program_is_dropped(monkeypatch):
    cache = Programs(10, "test")
    cache.get("kept", lambda: _jitted(1.0))
    monkeypatch.setattr(programs, "map_count", lambda: (40_000, 65_530))  # 61% of the limit
    monkeypatch.setattr(programs, "_built", [programs.CHECK_EVERY - 1])  # the next build checks
    cache.get("new", lambda: _jitted(2.0))
    assert "kept" not in cache and len(cache) == 1  # cleared, then the new one kept
    monkeypatch.setattr(programs, "map_count", lambda: (10_000, 65_530))
    monkeypatch.setattr(programs, "_built", [programs.CHECK_EVERY - 1])
    cache.get("third", lambda: _jitted(3.0))
    assert "new" in cache and "third" in cache


def _programs_lowered(fn):
    """The number of programs JAX lowers while ``fn()`` runs, with no compiled program kept in
    memory before it (each one is compiled, or looked up in the persistent cache, on its own)."""
    seen = []

    def on(event, duration, **_):
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            seen.append(duration)

    jax.clear_caches()
    jax.monitoring.register_event_duration_secs_listener(on)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(on)
    return len(seen)


@pytest.mark.parametrize("method, most", [("laplace", 30), ("nuts", 40)])
def test_a_fit_is_a_few_programs_not_one_per_operation(method, most):
    # Converting between a law's natural, unconstrained and sampling coordinates operation by
    # operation made every parameter transform a program of its own: 88 (Laplace) and 124 (NUTS)
    # programs for Chinchilla on Epoch's table, each traced, lowered and compiled or looked up
    # on its own; compiled as one function each, 20 and 29.
    df = bs.datasets.load("chinchilla_epoch")
    df = df[df["epoch_kept"]]
    kw = {"num_warmup": 100, "num_samples": 100, "progress_bar": False} if method == "nuts" else {}
    n = _programs_lowered(lambda: bs.fit_posterior("chinchilla", df, method=method, seed=0,
                                                   **kw))
    assert n <= most


def test_calling_a_law_is_one_program_of_its_whole_formula():
    # M3's formula (Akimoto et al., Eqs. 8-12: saturation and dual-ratio terms) evaluated
    # operation by operation was 32 programs per call shape; compiled, it is one
    law = bs.laws.get("m3")
    rows = pd.DataFrame({"M": [1e8, 1e9, 1e10], "D_T": [1e9, 1e10, 1e11], "k": [1.0, 2.0, 4.0],
                         "r": [0.5, 0.5, 0.9], "r_f": [0.5, 0.5, 0.9], "loss": 3.0})
    rows = rows.rename(columns={v: law.column(v) for v in law.variables})
    got = []
    assert _programs_lowered(lambda: got.append(np.asarray(law(law.example, rows)))) == 1
    with jax.disable_jit():  # the same values, operation by operation
        eager = np.asarray(law.fn({k: jnp.asarray(v) for k, v in law.example.items()},
                                  law.inputs(rows)))
    np.testing.assert_allclose(got[0], eager, rtol=1e-12)
    assert np.all(np.isfinite(got[0]))
