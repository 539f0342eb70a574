"""Robust MAP fitting: Huber on log residuals, multi-start L-BFGS in one compiled program (DESIGN.md
rule 2, 4).

``fit_map`` reproduces the papers' recipe (PTPP paper Sec. 2: Huber(delta = 0.02) on log residuals,
L-BFGS-B, positivity; M3 paper Appendix C.2: Huber(delta = 1e-3), multi-start from Table 6's init
ranges) in one compiled JAX program: every start runs an optax L-BFGS loop (one after another,
inside the program) in an unconstrained space (each bounded parameter is mapped to the real line by
its :class:`~bayes_scaling.laws.Param` transform, so box bounds always hold). ``method="scipy"``
is the papers' loop of scipy L-BFGS-B runs, kept as the reference the fast path is tested against.
"""
from __future__ import annotations

import functools
import json
import math
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu
import pandas as pd

from .checks import check_fit_options, check_inputs
from .data import as_rows, shifted_table
from .errors import FitError
from .laws import Law
from .laws import get as get_law
from .objective import data_hash, huber_objective, log_residuals, penalty
from .params import ParamSpace, pad_rows
from .programs import Programs

# --------------------------------------------------------------------------------------------------
# The problem: free parameters <-> unconstrained vector, and the objective on it.


@dataclass(frozen=True)
class Problem:
    """A law's parameter space (``bayes_scaling.params.ParamSpace``: free and fixed parameters,
    ``theta`` <-> ``u``) and a validated table, seen as a function of the free vector."""

    space: ParamSpace
    x: dict
    y: jnp.ndarray

    @classmethod
    def build(cls, law, df, fixed=None):
        space = ParamSpace.of(law, fixed)
        df = space.validate(df)
        return cls(space, *space.read(df)), df

    @property
    def law(self) -> Law:
        return self.space.law

    def predict(self, theta, x=None):
        return self.law.fn(self.space.full_params(theta), self.x if x is None else x)

    def objective_theta(self, theta, delta):
        return huber_objective(self.predict(theta), self.y, delta)

    def args(self, delta):
        """Data the objective reads, as a pytree (so one compiled program serves every table).

        The rows are padded to ``row_bucket`` of their count with zero-weight copies of the
        first row (:func:`~bayes_scaling.params.pad_rows`), which add exactly 0 to the
        objective; the fixed values are data too."""
        x, y, w = pad_rows(self.x, self.y)
        scale = len(self.y) * delta * delta  # makes the objective O(1) whatever delta and n are
        return {"x": x, "y": y, "w": w, "fixed": self.space.fixed_tree(),
                "delta": jnp.asarray(delta), "scale": scale}

    @property
    def key(self):
        """Hashable structure of the objective: the law function and the space's structure.

        Column maps do not enter (the function reads variables), so a law read through another
        column mapping reuses the compiled program of the law it renames."""
        return (self.law.fn, *self.space.structure)


# --------------------------------------------------------------------------------------------------
# The multi-start optimiser, shared with the Bayesian layer's posterior mode.


def lbfgs_multistart(f: Callable, u0, args=(), *, max_iter=2000, gtol=1e-10, ftol=1e-13,
                     patience=20, memory_size=20):
    """Minimise ``f(u, args)`` from every row of ``u0`` in one compiled program (optax L-BFGS).

    The starts run one after another inside the program (``jax.lax.map``), each to its own
    stopping point. Vectorising them (``jax.vmap``, :data:`STARTS_IN_LOCKSTEP`) is slower on CPU:
    the batch iterates until its slowest start stops, and under ``vmap`` every branch of the zoom
    line search is evaluated for every start (``benchmarks/fit_speed.py`` measures both).

    ``f`` maps a 1-D vector (and a pytree ``args`` of data shared by all starts) to a scalar that
    should be O(1) in size (callers normalise it). A start stops when its gradient norm is below
    ``gtol``; when its value has improved by less than ``ftol * max(1, |f|)`` for ``patience``
    consecutive iterations (a start sliding towards a bound along a flat valley); when its value
    goes non-finite; or after ``max_iter`` iterations. The compiled program is cached per ``f``,
    so refits on new data of the same shape do not recompile.

    Returns:
        (u, value, n_iter, grad_norm) as numpy arrays with one row per start.
    """
    runner = _compiled_runner(f, int(max_iter), float(gtol), float(ftol), int(patience),
                              int(memory_size), bool(STARTS_IN_LOCKSTEP))
    out = runner(jnp.asarray(u0), args)
    return tuple(np.asarray(a) for a in out)


#: Run the starts of :func:`lbfgs_multistart` in lockstep (``jax.vmap``) instead of one after
#: another; off only to benchmark it (it is 2-20x slower on CPU).
STARTS_IN_LOCKSTEP = False


_RUNNERS = Programs(8, "L-BFGS runners")


def _compiled_runner(f, max_iter, gtol, ftol, patience, memory_size, lockstep):
    """The compiled multi-start L-BFGS of objective ``f`` (kept for the most recent ones)."""
    return _RUNNERS.get((f, max_iter, gtol, ftol, patience, memory_size, lockstep),
                        lambda: _build_runner(f, max_iter, gtol, ftol, patience, memory_size,
                                              lockstep))


def _build_runner(f, max_iter, gtol, ftol, patience, memory_size, lockstep):
    opt = optax.lbfgs(
        memory_size=memory_size,
        linesearch=optax.scale_by_zoom_linesearch(max_linesearch_steps=40, initial_guess_strategy="one"),
    )

    def run(u_init, args):
        fu = functools.partial(f, args=args)
        vg = optax.value_and_grad_from_state(fu)

        def step(carry):
            u, state, prev, stall = carry
            value, grad = vg(u, state=state)
            updates, state = opt.update(grad, state, u, value=value, grad=grad, value_fn=fu)
            new = otu.tree_get(state, "value")
            small = (prev - new) <= ftol * jnp.maximum(1.0, jnp.abs(new))
            return optax.apply_updates(u, updates), state, new, jnp.where(small, stall + 1, 0)

        def keep_going(carry):
            _, state, _, stall = carry
            it = otu.tree_get(state, "count")
            g = otu.tree_norm(otu.tree_get(state, "grad"))
            v = otu.tree_get(state, "value")
            return (it == 0) | ((it < max_iter) & (g >= gtol) & jnp.isfinite(v) & (stall < patience))

        init = (u_init, opt.init(u_init), jnp.asarray(jnp.inf), jnp.asarray(0))
        u, state, _, _ = jax.lax.while_loop(keep_going, step, init)
        value, grad = jax.value_and_grad(fu)(u)
        return u, value, otu.tree_get(state, "count"), jnp.linalg.norm(grad)

    if lockstep:
        return jax.jit(jax.vmap(run, in_axes=(0, None)))
    return jax.jit(lambda u, args: jax.lax.map(lambda ui: run(ui, args), u))


# --------------------------------------------------------------------------------------------------
# Result object.


@dataclass
class MapFit:
    """A point (MAP / Huber) fit.

    Attributes:
        law: the fitted law.
        params: every parameter (fitted and fixed) as floats.
        objective: summed Huber_delta of log residuals at ``params`` on the fitted rows.
        starts: one row per start: init values, final values, objective, n_iter, converged, finite.
        settings: delta, n_starts, seed, method, fixed, clipped rows, wall time.
        data_hash: hash of the fitted columns.
    """

    law: Law
    params: dict
    objective: float
    starts: pd.DataFrame
    settings: dict
    data_hash: str
    n_rows: int

    @property
    def target_shift(self) -> float:
        """The constant ``c`` of a signed target fitted as ``loss + c`` (0 for a loss; ``fit_map``):
        :attr:`law` is then the law of ``loss + c``, :meth:`predict` gives ``loss``."""
        return float(self.settings.get("target_shift", 0.0) or 0.0)

    def predict(self, df) -> np.ndarray:
        """Predicted loss for each row of ``df`` (canonical columns; a Series or a dict of columns
        is read as ``bs.data.as_rows`` reads it)."""
        df = as_rows(df)
        check_inputs(self.law, df)
        return np.asarray(self.law(self.params, df)) - self.target_shift

    def predict_draws(self, df, kind="mean") -> np.ndarray:
        """Predictions as one draw, shape ``(1, n)``, so point fits and posteriors share an API.

        Only ``kind="mean"`` exists for a point fit (it has no noise model)."""
        if kind != "mean":
            raise FitError(f"a MapFit has no predictive distribution; use kind='mean' (got {kind!r})")
        return self.predict(df)[None, :]

    def score(self, df, delta=None) -> dict:
        """``bs.metrics.score`` of this fit's predictions on ``df``."""
        from .metrics import score

        c = self.target_shift  # the log metrics of a signed target: of loss + c, as it was fitted
        return score(np.asarray(df["loss"], float) + c, self.predict(df) + c,
                     delta=delta or self.settings["delta"])

    @property
    def n_failed(self) -> int:
        return int((~self.starts["finite"]).sum())

    def tied(self, rtol: float = 1e-6) -> list[dict]:
        """Every parameter set (fixed parameters included) of the finite starts whose objective
        is within ``rtol`` of the best (relative, or in units of ``n delta^2`` near zero, as the
        optimiser's stopping rule), best first. A relative 1e-6 of the objective is far below
        anything the data can tell apart, so they fit the table equally well; how far their
        forecasts spread shows how much of a point extrapolation is the optimiser's choice."""
        s = self.starts[self.starts["finite"]].sort_values("objective", kind="stable")
        scale = self.n_rows * self.settings["delta"] ** 2  # the optimiser's O(1) units
        s = s[s["objective"] - self.objective <= rtol * max(scale, abs(self.objective))]
        fixed = self.settings.get("fixed", {})
        return [{p.name: float(fixed[p.name]) if p.name in fixed else float(r[p.name])
                 for p in self.law.params} for _, r in s.iterrows()]

    def ridge(self, rtol: float = 1e-6, span: float = 0.01) -> dict:
        """Free parameters the data leave on a flat ridge: ``{name: (min, max)}`` over the
        :meth:`tied` starts, for each parameter whose range there exceeds ``span`` times its best
        value (in log10 units for log-scale parameters); a parameter at its bound 0 in every
        tied start (below 1e-3 times its init range) is not listed. Empty when the tied starts
        agree. A parameter listed here is one arbitrary point of a set of equally good fits:
        which one the optimiser returns is decided by floating-point detail, and so is anything
        extrapolated from it."""
        tied = pd.DataFrame(self.tied(rtol))
        out = {}
        for p in self.law.params:
            if p.name in self.settings.get("fixed", {}):
                continue
            lo, hi = float(tied[p.name].min()), float(tied[p.name].max())
            if p.lower == 0 and hi < 1e-3 * p.init[0]:
                continue  # at its bound 0 in every tied start (far below the init range)
            if p.log_init and lo > 0:
                wide = math.log10(hi / lo) > span
            else:
                wide = hi - lo > span * max(abs(self.params[p.name]), 1e-12)
            if wide:
                out[p.name] = (lo, hi)
        return out

    def __repr__(self):
        ps = ", ".join(f"{k}={v:.6g}" for k, v in self.params.items())
        return (f"MapFit({self.law.name}: {ps}; objective={self.objective:.6g} on {self.n_rows} rows, "
                f"{len(self.starts)} starts, {self.n_failed} non-finite)")

    def to_dict(self) -> dict:
        return {
            "law": self.law.name,
            "law_identity": self.law.identity,
            "params": self.params,
            "objective": self.objective,
            "settings": self.settings,
            "data_hash": self.data_hash,
            "n_rows": self.n_rows,
            "starts": json.loads(self.starts.to_json(orient="records")),
        }

    def save(self, path):
        """Write the fit as JSON (law name, params, objective, settings, data hash, every start)."""
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh, indent=1, default=float)

    @classmethod
    def load(cls, path, law=None) -> "MapFit":
        """Read a fit written by :meth:`save` (pass ``law`` for an unregistered law object); a law
        whose definition is not the one the fit recorded is refused (``Law.from_saved``)."""
        with open(path) as fh:
            d = json.load(fh)
        return cls(
            law=Law.from_saved(d["law"], d.get("law_identity"), law, str(path),
                               d["settings"].get("target_shift", 0.0)),
            params={k: float(v) for k, v in d["params"].items()},
            objective=float(d["objective"]),
            starts=pd.DataFrame(d["starts"]),
            settings=d["settings"],
            data_hash=d["data_hash"],
            n_rows=int(d["n_rows"]),
        )


# --------------------------------------------------------------------------------------------------
# The fit.


def fit_map(
    law,
    df: pd.DataFrame,
    *,
    delta: float,
    n_starts: int = 64,
    seed: int = 0,
    fixed: Mapping[str, float] | None = None,
    method: str = "jax",
    inits: np.ndarray | None = None,
    max_iter: int = 2000,
    target_shift: float | None = None,
) -> MapFit:
    """Fit ``law`` to the loss table ``df`` by minimising summed Huber_delta of log residuals.

    Args:
        law: registered law name or :class:`~bayes_scaling.laws.Law`.
        df: loss table with ``loss`` and the law's columns (validated, see ``bs.data.validate``).
        delta: Huber threshold on log residuals. There is deliberately no default: the PTPP paper
            uses 0.02, the M3 paper (and Epoch's Chinchilla replication) 1e-3.
        n_starts: number of initial points, drawn from each parameter's init range (log-uniform
            for scale parameters), as the M3 paper's Table 6 grid search.
        seed: seeds the init draw.
        fixed: ``{name: value}`` parameters held fixed (e.g. a two-phase fit's base parameters).
        method: ``"jax"`` (all starts in one compiled L-BFGS program) or ``"scipy"`` (the papers'
            loop of scipy L-BFGS-B runs with box bounds, one per start).
        inits: optional ``(n_starts, n_free)`` array of initial values overriding the draw.
        max_iter: iteration cap per start.
        target_shift: a signed target (some loss at or below 0) is fitted as ``loss + c``:
            ``None`` picks ``c`` (``bs.data.target_shift_of``; 0 for a table of losses; a table
            positive but at some rows says so with a ``SignedTargetWarning`` naming them), a
            number fixes it, 0 refuses such a table (``bs.data.shifted_table``).

    Returns:
        :class:`MapFit`. Starts that end non-finite are kept in ``fit.starts`` (``finite=False``),
        counted, and never chosen. When every drawn start ends non-finite (the law predicts a
        loss at or below 0 at some row from each), they are moved once to where the law is
        positive at every row (:func:`feasible_starts`) and run again; ``fit.settings
        ["starts_moved_to_positive_law"]`` records it, and ``fit.starts`` holds the moved starts.

    Raises:
        DataError: bad table (see ``validate``). FitError: every start failed.
    """
    check_fit_options(law, delta=delta, n_starts=n_starts, fixed=fixed)
    t0 = time.perf_counter()
    law, df, shift = shifted_table(law, df, target_shift)
    prob, vdf = Problem.build(law, df, fixed)
    space = prob.space
    if inits is None:
        theta0 = space.sample_inits(n_starts, seed)
    else:
        theta0 = np.atleast_2d(np.asarray(inits, float))
    if theta0.shape[1] != len(space.free):
        raise FitError(f"inits must have {len(space.free)} columns ({space.names}), "
                       f"got {theta0.shape[1]}")
    n = len(prob.y)
    scale = n * delta * delta  # makes the objective O(1) whatever delta and n are

    if method not in ("jax", "scipy"):
        raise FitError(f"method must be 'jax' or 'scipy', got {method!r}")
    if method == "jax":
        f, args = _normalised_objective(prob.key, prob), prob.args(delta)

    def multistart(th0):
        """(theta, objective, iterations, converged) of every start in ``th0``."""
        if method == "scipy":
            return _scipy_multistart(prob, th0, delta, max_iter)
        u, val, it, gnorm = lbfgs_multistart(f, space.u_compiled(jnp.asarray(th0)), args,
                                             max_iter=max_iter)
        return np.asarray(space.theta_compiled(jnp.asarray(u))), val * scale, it, gnorm < 1e-6

    theta, obj, n_iter, converged = multistart(theta0)
    finite = np.isfinite(obj) & np.all(np.isfinite(theta), axis=1)
    moved = not finite.any() and method == "jax" and inits is None
    if moved:
        # no start had a finite objective: move them to where the law is positive, once
        theta0 = feasible_starts(space, theta0, args, log_y=False)
        theta, obj, n_iter, converged = multistart(theta0)
        finite = np.isfinite(obj) & np.all(np.isfinite(theta), axis=1)
    if not finite.any():
        raise FitError(f"all {len(obj)} starts of {prob.law.name} ended non-finite"
                       + (", also after moving them toward a positive law" if moved else "")
                       + f"{_where_not_positive(prob, theta0[0], vdf.index)}; check the table "
                       "and the init ranges (law.describe())")
    best = int(np.argmin(np.where(finite, obj, np.inf)))
    params = {nm: float(v) for nm, v in space.full_params(theta[best]).items()}
    params = {nm: params[nm] for nm in prob.law.param_names}
    starts = pd.DataFrame({f"init_{nm}": theta0[:, i] for i, nm in enumerate(space.names)})
    for i, nm in enumerate(space.names):
        starts[nm] = theta[:, i]
    starts["objective"] = obj
    starts["n_iter"] = n_iter
    starts["converged"] = converged & finite
    starts["finite"] = finite
    if (~finite).any():
        warnings.warn(f"{(~finite).sum()} of {len(obj)} starts ended non-finite and were dropped",
                      stacklevel=2)
    cols = [prob.law.column(v) for v in prob.law.variables if prob.law.column(v) in vdf]
    return MapFit(
        law=prob.law,
        params=params,
        objective=float(obj[best]),
        starts=starts,
        settings={
            "delta": delta, "n_starts": len(theta0), "seed": seed, "method": method,
            "fixed": dict(space.fixed), "max_iter": max_iter,
            "clipped": vdf.attrs.get("clipped", {}), "seconds": time.perf_counter() - t0,
            "target_shift": shift, "starts_moved_to_positive_law": moved,
        },
        data_hash=data_hash(vdf, cols + ["loss"]),
        n_rows=n,
    )


_OBJECTIVES: dict = {}


def _normalised_objective(key, prob: Problem):
    """``f(u, args) = J(theta(u)) / (n delta^2)``, one function object per problem structure."""
    if key not in _OBJECTIVES:
        space, law = prob.space, prob.law

        def f(u, args):
            pred = law.fn(space.full_params(space.theta(u), args["fixed"]), args["x"])
            # the Huber likelihood's penalty at unit scale with c = delta: Huber_delta(r)
            h = penalty(log_residuals(pred, args["y"]), 1.0, "huber", c=args["delta"])
            return jnp.sum(jnp.where(args["w"] > 0, h, 0.0)) / args["scale"]

        _OBJECTIVES[key] = f
    return _OBJECTIVES[key]


def _where_not_positive(prob: Problem, theta, index) -> str:
    """Where the law, at the natural values ``theta``, predicts no loss (at or below 0, or not a
    number): ``": from the first start the law predicts ..."`` naming up to 8 rows by the
    table's labels, or ``""`` when it predicts a positive loss at every row."""
    pred = np.asarray(prob.predict(jnp.asarray(theta)), float)
    parts = []
    for what, bad in (("a loss at or below 0", pred <= 0), ("no number", ~np.isfinite(pred))):
        if bad.any():
            rows = [index[i] for i in np.flatnonzero(bad)]
            shown = ", ".join(map(str, rows[:8])) + (", ..." if len(rows) > 8 else "")
            parts.append(f"{what} at {len(rows)} rows ({shown})")
    return ": from the first start the law predicts " + " and ".join(parts) if parts else ""


_FEASIBLE: dict = {}


def feasible_starts(space: ParamSpace, theta0, args, *, log_y: bool, max_iter: int = 200):
    """Starts ``theta0`` (rows of natural values) moved to where the law predicts at least half
    of every row's loss, by L-BFGS on ``mean_i relu(1/2 - f_i / L_i)^2`` (0 there, finite
    wherever the law's value is a number, whatever its sign). A start where the law predicts a
    loss at or below 0 at some row has no finite objective and cannot move; init ranges chosen
    wide for a signed coefficient (a decay term ``- C S`` with ``C`` drawn from (0, 1) where ``S``
    reaches 2000) can leave every draw there. ``args`` holds the padded rows (``x``, ``y``, ``w``,
    ``fixed``: :meth:`Problem.args` with ``log_y=False``, the posterior's data with ``y = log L``).
    The caller checks which moved starts its own objective finds finite."""
    key = (space.law.fn, *space.structure, log_y)
    if key not in _FEASIBLE:
        law = space.law

        def g(u, args):
            f = law.fn(space.full_params(space.theta(u), args["fixed"]), args["x"])
            loss = jnp.exp(args["y"]) if log_y else args["y"]
            gap = jnp.maximum(0.5 - f / loss, 0.0)
            w = args["w"]
            return jnp.sum(jnp.where(w > 0, w * gap ** 2, 0.0)) / jnp.sum(w)

        _FEASIBLE[key] = g
    sub = {k: args[k] for k in ("x", "y", "w", "fixed")}
    u, _, _, _ = lbfgs_multistart(_FEASIBLE[key], space.u_compiled(jnp.asarray(theta0)), sub,
                                  max_iter=max_iter)
    return np.asarray(space.theta_compiled(jnp.asarray(u)))


def _scipy_multistart(prob: Problem, theta0, delta, max_iter):
    """The papers' recipe: a Python loop of scipy L-BFGS-B runs in the natural parameter space."""
    from scipy.optimize import minimize

    vg = jax.jit(jax.value_and_grad(lambda th: prob.objective_theta(th, delta)))

    def fun(th):
        v, g = vg(jnp.asarray(th))
        v = float(v)
        if not math.isfinite(v):
            return 1e30, np.zeros_like(th)
        return v, np.asarray(g, dtype=float)

    bounds = []
    for p in prob.space.free:
        lo = p.lower + 1e-12 * max(1.0, abs(p.lower)) if math.isfinite(p.lower) else None
        hi = p.upper - 1e-12 * max(1.0, abs(p.upper)) if math.isfinite(p.upper) else None
        bounds.append((lo, hi))
    theta, obj, n_iter, conv = [], [], [], []
    for th0 in theta0:
        res = minimize(fun, th0, jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": max_iter, "ftol": 1e-15, "gtol": 1e-12, "maxcor": 20})
        theta.append(res.x)
        obj.append(res.fun if res.fun < 1e30 else np.nan)
        n_iter.append(res.nit)
        conv.append(bool(res.success))
    return np.array(theta), np.array(obj, float), np.array(n_iter), np.array(conv)


def fit_two_phase(law, df, *, base_law=None, phase1=None, delta, n_starts=64, seed=0,
                  method="jax", **kw):
    """The M3 paper's two-phase fit (Appendix C.2.4).

    Phase 1 fits the base law (the M3 laws: ``chinchilla_m3``, i.e. A, B, alpha, beta, E on M and
    D) on the phase-1 rows (the M3 laws: the monolingual r = 1, k <= 4, single-stage rows,
    ``laws.m3.phase1_rows``). Phase 2 fixes the shared parameters at their phase-1 values and fits
    the rest of ``law`` on all of ``df``.

    ``base_law`` and ``phase1`` default to what the law declares (``Law.base_law``,
    ``Law.phase1``); a law that declares none needs both. ``phase1`` is a boolean mask, a callable
    ``df -> mask``, or a DataFrame of phase-1 rows from outside ``df`` (the paper's setting (d),
    whose own rows are all multilingual). A base that reads a column the law does not read
    (``chinchilla`` on N under a law on M) is refused: its parameters would not be the law's.

    Returns:
        (phase-2 MapFit, phase-1 MapFit)
    """
    law = get_law(law)
    if base_law is None and not law.base_law:
        raise FitError(f"{law.name} declares no base law for a two-phase fit: pass base_law= (the "
                       "law whose parameters phase 1 fits, reading the same inputs) and phase1=")
    base = get_law(base_law or law.base_law)
    phase1 = law.phase1 if phase1 is None else phase1
    if phase1 is None:
        raise FitError(f"{law.name} declares no phase-1 rows: pass phase1= (a boolean mask or "
                       "df -> mask; M3 App. C.2.4 uses the r = 1, k <= 4, single-stage rows)")
    foreign = sorted(set(base.columns) - set(law.columns) - {law.column(v) for v in law.defaults})
    if foreign and base.name != law.base_law:
        raise FitError(f"base law {base.name} reads {foreign}, which {law.name} does not read: "
                       f"its parameters would not mean the same in {law.name}"
                       + (f"; the law's base is {law.base_law}" if law.base_law else ""))
    if isinstance(phase1, pd.DataFrame):
        rows1 = phase1
    else:
        rows1 = df[np.asarray(phase1(df) if callable(phase1) else phase1, bool)]
    fit1 = fit_map(base, rows1, delta=delta, n_starts=n_starts, seed=seed, method=method, **kw)
    shared = {k: v for k, v in fit1.params.items() if k in law.param_names}
    if not shared:
        raise FitError(f"{law.name} shares no parameter names with {base.name}")
    fit2 = fit_map(law, df, delta=delta, n_starts=n_starts, seed=seed + 1, fixed=shared,
                   method=method, **kw)
    fit2.settings["two_phase"] = {"base_law": base.name, "phase1_rows": len(rows1),
                                  "phase1_objective": fit1.objective}
    return fit2, fit1
