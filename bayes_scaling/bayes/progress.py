"""NUTS chains run in segments of compiled iterations (:class:`Chains`), and their progress bar.

A fit's chains run as two compiled programs: one starts every chain (NumPyro's NUTS
initialisation: the model's trace, the first gradient, the step-size heuristic), the other moves
every chain on by up to :data:`SEGMENT` iterations of NumPyro's ``kernel.sample`` and returns the
states it passed through. The host calls the second until the warm-up and the draws are done, and
moves a ``tqdm`` bar on stderr between calls (:func:`showing`).

Neither program calls the host, so JAX's persistent cache keeps both across processes (it does
not keep a program that makes host callbacks, so a bar reported from inside the loop made every
process compile its chains again). The iterations are those one loop over all of them would run,
in the same order from the same keys, so the draws do not depend on the bar. The data, centre and
whitening matrix are arguments of the programs, so later fits of the same shapes reuse them, and
the number of iterations is an argument of the second, so runs of any length (a resumed run's
extra draws) share it.
"""
from __future__ import annotations

import contextlib
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

#: iterations of one call of the chains' program: the bar moves between calls
SEGMENT = 64
#: the sample stats kept for every draw (fields of NumPyro's ``HMCState``)
FIELDS = ("diverging", "energy", "num_steps", "accept_prob", "adapt_state.step_size",
          "potential_energy")
#: environment variables under which no bar is shown (as NumPyro does: CI logs, pytest workers)
QUIET_ENV = ("CI", "PYTEST_XDIST_WORKER")


def wanted(progress_bar: bool) -> bool:
    """Whether a bar is shown: asked for, and not in CI or a pytest worker."""
    return bool(progress_bar) and not any(os.environ.get(v) for v in QUIET_ENV)


def _row(state):
    """What is kept of one iteration: the position, then :data:`FIELDS`."""
    out = [state.z["z"]]
    for name in FIELDS:
        x = state
        for part in name.split("."):
            x = getattr(x, part)
        out.append(x)
    return tuple(out)


class Chains:
    """The chains of one NUTS ``kernel`` (whose model samples one real vector ``"z"``) as two
    compiled programs, over a leading chain axis: vectorised in one program (``"vectorized"``),
    one device per chain (``"parallel"``, ``jax.pmap``) or one chain after another
    (``"sequential"``)."""

    def __init__(self, kernel, num_warmup: int, chain_method: str):
        self.num_warmup = int(num_warmup)

        def start(key, z0, args, kwargs):
            return kernel.init(key, self.num_warmup, {"z": z0}, args, kwargs)

        def advance(state, n, args, kwargs):
            rows = tuple(jnp.zeros((SEGMENT,) + jnp.shape(x), jnp.result_type(x))
                         for x in _row(state))

            def body(i, carry):
                state, rows = carry
                state = kernel.sample(state, args, kwargs)
                return state, tuple(r.at[i].set(x) for r, x in zip(rows, _row(state)))

            return jax.lax.fori_loop(0, n, body, (state, rows))

        if chain_method == "parallel":
            self._start = jax.pmap(start, in_axes=(0, 0, None, None))
            self._advance = jax.pmap(advance, in_axes=(0, None, None, None))
        elif chain_method == "vectorized":
            self._start = jax.jit(jax.vmap(start, in_axes=(0, 0, None, None)))
            self._advance = jax.jit(jax.vmap(advance, in_axes=(0, None, None, None)))
        elif chain_method == "sequential":
            self._start = _one_by_one(jax.jit(start), 2)
            self._advance = _one_by_one(jax.jit(advance), 1)
        else:
            raise ValueError(f"unknown chain method {chain_method!r}")

    def run(self, seed, z0, args, kwargs, num_samples, *, resume=None, bar=False,
            deadline=None):
        """``num_samples`` draws of each chain, from ``z0`` (one row per chain) after
        ``num_warmup`` warm-up iterations, or from ``resume`` (the chains' last states after a
        warm-up) with none. The chains' keys are those NumPyro's ``MCMC.run`` gives them (the
        seed's key split in one per chain; the key itself for one chain). Returns ``(draws,
        stats, last)``: positions ``(chains, draws, d)``, each of :data:`FIELDS` ``(chains,
        draws)`` and the chains' last states. ``deadline`` (a ``time.perf_counter()`` value):
        once it has passed, the sampling stops after the call in progress, so a run stopped this
        way has fewer than ``num_samples`` draws, and at least one call's; the warm-up is never
        cut."""
        z0 = jnp.asarray(z0)
        key = jax.random.PRNGKey(seed)
        keys = jax.random.split(key, len(z0)) if len(z0) > 1 else key[None]
        warmup = 0 if resume is not None else self.num_warmup
        with showing(bar, num_chains=len(z0), num_warmup=warmup,
                     num_samples=num_samples) as tick:
            if resume is None:
                state = self._start(keys, z0, args, kwargs)
            else:
                state = resume._replace(rng_key=keys)
            state, _ = self._phase(state, warmup, args, kwargs, tick, "warm-up")
            state, kept = self._phase(state, num_samples, args, kwargs, tick, "sampling",
                                      deadline)
        if kept:
            cols = [np.concatenate(c, 1) for c in zip(*kept)]
        else:
            cols = [np.zeros((len(z0), 0) + np.shape(x)[1:], np.asarray(x).dtype)
                    for x in _row(state)]
        return cols[0], dict(zip(FIELDS, cols[1:])), state

    def _phase(self, state, n, args, kwargs, tick, name, deadline=None):
        kept, done = [], 0
        while done < n:
            if done and deadline is not None and time.perf_counter() > deadline:
                break
            k = min(SEGMENT, n - done)
            tick(0, name)  # the phase of the call about to run (not the first: it compiles)
            state, rows = self._advance(state, np.int32(k), args, kwargs)
            if name == "sampling":
                kept.append(tuple(np.asarray(r)[:, :k] for r in rows))  # waits for the call
            else:
                jax.block_until_ready(state)
            done += k
            tick(k, name)
        return state, kept


def _one_by_one(program, batched: int):
    """``program`` applied to each chain in turn: its first ``batched`` arguments carry the chain
    axis, the others are shared; the results are stacked along a new chain axis."""
    def run(*args):
        head, rest = args[:batched], args[batched:]
        chains = jax.tree_util.tree_leaves(head[0])[0].shape[0]
        outs = [program(*jax.tree_util.tree_map(lambda a, c=c: a[c], head), *rest)
                for c in range(chains)]
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *outs)
    return run


@contextlib.contextmanager
def showing(on: bool, *, num_chains: int, num_warmup: int, num_samples: int):
    """A bar over the ``num_warmup + num_samples`` iterations of ``num_chains`` chains while the
    block runs; the block moves it by calling ``tick(iterations, phase)``. Nothing is shown when
    ``on`` is false, and a bar that cannot be drawn never fails the fit it shows."""
    if not on:
        yield lambda k, phase: None
        return
    from tqdm import tqdm

    bar = _safely(tqdm, total=num_warmup + num_samples, unit="it", leave=False,
                  dynamic_ncols=True, desc=f"NUTS, {num_chains} chains, compiling")

    def tick(k, phase):
        if bar is not None and (k or bar.n):
            _safely(bar.set_description, phase, refresh=False)
            _safely(bar.update, k)

    try:
        yield tick
    finally:
        if bar is not None:
            _safely(bar.close)


def _safely(f, *args, **kwargs):
    """``f(*args, **kwargs)``, or ``None`` if it raises: a bar that cannot be drawn (a closed
    stream, a terminal gone) must not fail the fit it shows."""
    try:
        return f(*args, **kwargs)
    except Exception:  # noqa: BLE001
        return None
