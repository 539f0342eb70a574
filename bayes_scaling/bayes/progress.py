"""NUTS chains run as one compiled program (:func:`vectorized_chains`), and their progress bar.

The chains of a fit run vectorised in one program, where NumPyro shows no progress bar (it
warns and turns its own off). The NUTS kernel used here reports to the host instead
(:class:`ReportingNUTS`), every :data:`EVERY` iterations, behind a ``lax.cond`` on a flag the
program takes as an argument: a run without a bar makes no host call, and one compiled program
serves both. Vectorised chains move in step, so their iteration counter is read as one
number (a ``pmax`` over the chains' axis) and the host is called once per report, not once per
chain. The host side (:func:`showing`) advances a ``tqdm`` bar on stderr and says which phase the
chains are in. The draws do not depend on the flag.
"""
from __future__ import annotations

import contextlib
import os

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import NUTS

#: iterations between two reports to the host
EVERY = 10
#: environment variables under which no bar is shown (as NumPyro does: CI logs, pytest workers)
QUIET_ENV = ("CI", "PYTEST_XDIST_WORKER")
#: the name of the chains' axis of vectorised chains (``jax.vmap(..., axis_name=CHAINS)``)
CHAINS = "chains"

_current: dict = {}  # the bar of the run in progress (host side)


def wanted(progress_bar: bool) -> bool:
    """Whether a bar is shown: asked for, and not in CI or a pytest worker."""
    return bool(progress_bar) and not any(os.environ.get(v) for v in QUIET_ENV)


def _tick(i):
    # called on a runtime thread; a bar must never fail a fit, so nothing here raises
    cur = dict(_current)
    bar = cur.get("bar")
    if bar is None:
        return
    try:
        # the counter goes on from a resumed run's, so positions count from the first report
        i = int(np.max(i))
        first = _current.setdefault("first", i - EVERY)
        done = min(i - first, bar.total)
        bar.set_description("warm-up" if done <= cur["num_warmup"] else "sampling",
                            refresh=False)
        bar.update(max(0, done - bar.n))
    except Exception:  # noqa: BLE001 (as _safely)
        pass


def vectorized_chains(run_chain):
    """NumPyro's vectorised chains as one compiled program: the chains' initialisation (its
    model trace, first gradient, mass matrix and step size), warm-up and sampling. NumPyro's own
    ``"vectorized"`` initialises the chains eagerly, one compiled program per operation.

    NumPyro hands a chain method ``partial(_single_chain_mcmc, args=..., kwargs=...)``: compiled
    as it is, the model's arguments (the data, centre and whitening matrix) would be constants of
    the program, so every fit would compile a new one (7 s of an 8 s Chinchilla fit). Here they are
    arguments of a program kept on the MCMC object, which later fits of the same shapes reuse (and
    whose compiled form the persistent cache finds across processes)."""
    static = dict(getattr(run_chain, "keywords", None) or {})
    fn = getattr(run_chain, "func", None)
    owner = getattr(fn, "__self__", None)  # the (cached) MCMC object
    if owner is None or "args" not in static or "kwargs" not in static:
        return jax.jit(jax.vmap(run_chain, axis_name=CHAINS))  # one program per fit
    args, kwargs = static.pop("args"), static.pop("kwargs")
    key = (tuple(sorted(static.items())),
           tuple(sorted(getattr(owner, "_collection_params", {}).items())))
    programs = owner.__dict__.setdefault("_bayes_scaling_programs", {})
    if key not in programs:
        def one_chain(init, a, k):
            return fn(init, args=a, kwargs=k, **static)

        programs[key] = jax.jit(jax.vmap(one_chain, in_axes=(0, None, None),
                                         axis_name=CHAINS))
    program = programs[key]
    return lambda map_args: program(map_args, args, kwargs)


class ReportingNUTS(NUTS):
    """NUTS that calls :func:`_tick` on the host every :data:`EVERY` iterations when the model's
    last argument (a boolean scalar, the same for every chain) is true. ``vectorized``: the
    chains run under ``jax.vmap(..., axis_name=CHAINS)``."""

    def __init__(self, *args, vectorized: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self._vectorized = vectorized

    def sample(self, state, model_args, model_kwargs):
        new = super().sample(state, model_args, model_kwargs)
        i = jax.lax.pmax(new.i, CHAINS) if self._vectorized else new.i
        jax.lax.cond(jnp.asarray(model_args[-1]) & (i % EVERY == 0),
                     lambda i: jax.debug.callback(_tick, i), lambda i: None, i)
        return new


@contextlib.contextmanager
def showing(on: bool, *, num_chains: int, num_warmup: int, num_samples: int):
    """A bar over the ``num_warmup + num_samples`` iterations of ``num_chains`` chains while the
    block runs (nothing when ``on`` is false; ``num_warmup=0`` for chains run on from their
    last state)."""
    if not on:
        yield
        return
    from tqdm import tqdm

    bar = _safely(tqdm, total=num_warmup + num_samples, unit="it", leave=False,
                  dynamic_ncols=True, desc=f"NUTS, {num_chains} chains, compiling")
    _current.update(bar=bar, num_warmup=num_warmup)
    try:
        yield
        jax.effects_barrier()  # the reports still on their way
        if bar is not None:
            _safely(bar.update, bar.total - bar.n)
    finally:
        _current.clear()
        if bar is not None:
            _safely(bar.close)


def _safely(f, *args, **kwargs):
    """``f(*args, **kwargs)``, or ``None`` if it raises: a bar that cannot be drawn (a closed
    stream, a terminal gone) must not fail the fit it shows."""
    try:
        return f(*args, **kwargs)
    except Exception:  # noqa: BLE001
        return None
