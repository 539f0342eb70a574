"""The ScaleBench farseer law as the benchmark evaluates it: every exponent clamped to
[-50, 50] in value and differentiated as if unclamped (its analytic Jacobian). Inside the range it
is the plain law, value and gradient; far from the data it stays finite with a gradient that leads
back, so the benchmark's L-BFGS-B refit from such a start moves (a plain exponential overflows and
leaves it stuck); and the benchmark-scored refit of a table simulated from the law recovers it."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from bayes_scaling.design import fitting
from bayes_scaling.scalebench import get

LAW = get("farseer_scaling_law", "sl_1")
# inside the benchmark's bounds, near its fit of the farseer table (losses 0.4-0.7)
TRUE = dict(E=1.62, s=-0.5, q=0.062, S=0.9, B=80.0, b=-0.116, Q=-2.56, A=-0.9, a=0.0555)


def _plain(p, x):
    N, D = x["N"], x["D"]
    return (jnp.exp(p["s"] * N ** p["q"] + p["S"])
            + jnp.exp(p["B"] * N ** p["b"] + p["Q"]) * D ** -jnp.exp(p["A"] * N ** p["a"] + p["E"]))


def _grid():
    N, D = np.meshgrid(np.geomspace(1e8, 5e9, 6), np.geomspace(2e9, 3e11, 6))
    return {"N": jnp.asarray(N.ravel()), "D": jnp.asarray(D.ravel())}


def _sse(fn, y, x):
    return lambda p: jnp.sum((fn(p, x) - y) ** 2)


def test_in_range_it_is_the_plain_law_and_far_off_it_still_points_back():
    x = _grid()
    p = {k: jnp.asarray(v) for k, v in TRUE.items()}
    y = _plain(p, x)
    assert np.all(np.isfinite(y)) and 0.2 < float(y.min()) and float(y.max()) < 2
    np.testing.assert_allclose(LAW.fn(p, x), y, rtol=1e-12)
    g_law, g_plain = jax.grad(_sse(LAW.fn, y * 1.01, x))(p), jax.grad(_sse(_plain, y * 1.01, x))(p)
    for k in TRUE:
        np.testing.assert_allclose(g_law[k], g_plain[k], rtol=1e-9, atol=1e-300)
    # a start in the bounds whose first exponent overflows (s N^q up to 2e4): inf on the plain law
    far = dict(p, s=jnp.asarray(0.3), q=jnp.asarray(0.45))
    assert not np.all(np.isfinite(_plain(far, x)))
    v = LAW.fn(far, x)
    assert np.all(np.isfinite(v)) and np.isclose(float(v.max()), np.exp(50.0), rtol=1e-6)
    g = jax.grad(_sse(LAW.fn, y, x))(far)
    assert all(np.isfinite(float(g[k])) for k in TRUE)
    assert float(g["s"]) > 0 and float(g["S"]) > 0  # lowering them lowers the error


def test_the_benchmark_refit_from_overflowing_starts_recovers_the_law():
    """Starts drawn in the bounds where the first term overflows: on the plain law most starts of
    the benchmark's scipy refit end at an infinite error and the best misses the table; on the
    clamped law the best of the same 8 recovers it."""
    x = _grid()
    y = np.asarray(_plain({k: jnp.asarray(v) for k, v in TRUE.items()}, x))
    xn = {k: np.asarray(v) for k, v in x.items()}
    rng = np.random.default_rng(0)
    theta0 = np.array([[TRUE[n] for n in LAW.param_names]] * 8, float)
    i_s, i_q = LAW.param_names.index("s"), LAW.param_names.index("q")
    theta0[:, i_s] = rng.uniform(0.1, 0.3, 8)
    theta0[:, i_q] = rng.uniform(0.3, 0.5, 8)
    r2 = {}
    for name, law in (("plain", dataclasses.replace(LAW, fn=_plain, name="farseer_unclamped")),
                      ("clamped", LAW)):
        fit = fitting.least_squares(law, xn, y, theta0, method="scipy")
        r2[name] = fitting.r2_clipped(y, np.asarray(fitting.predictor(law)(fit.best[None], x))[0])
    assert r2["clamped"] > 0.99 and r2["plain"] < 0.9
