"""Declarative law specifications.

A law is data plus one pure function (DESIGN.md rule 1): its parameters (name, bounds, init range,
log/linear init sampling), the variables it reads, and ``fn(p, x) -> predicted loss`` where ``p`` and
``x`` are dicts of jnp arrays keyed by parameter and variable names. Fitting, inference, forecasting,
planning and anchor selection only ever use this interface.

A law reads *variables* (its own names, e.g. ``N``, ``D``, ``replay``, ``ptpp``); ``column_map`` says
which loss-table column feeds each variable, so one function serves several tables (the M3 paper's
two-stage D-CPT baseline is ``dcpt`` read through ``N -> M, D -> D_2, replay -> r_f``).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import LawError
from ..programs import Programs

#: the compiled formulas of the most recently called laws (:meth:`Law.__call__`)
_CALLS = Programs(16, "law calls")

INF = math.inf


@dataclass(frozen=True)
class Param:
    """One law parameter.

    Attributes:
        name: parameter name as used in ``fn``.
        lower, upper: box bounds (``-inf``/``inf`` for none). Fits and priors respect them.
        init: ``(lo, hi)`` range from which multi-start initial values are drawn.
        log_init: draw inits log-uniformly in ``init`` (for scale parameters such as A, B).
        doc: one line: what the parameter means.
    """

    name: str
    lower: float = -INF
    upper: float = INF
    init: tuple[float, float] = (0.0, 1.0)
    log_init: bool = False
    doc: str = ""

    def __post_init__(self):
        lo, hi = self.init
        if not (self.lower <= lo <= hi <= self.upper):
            raise ValueError(
                f"param {self.name}: init range {self.init} must lie inside bounds "
                f"[{self.lower}, {self.upper}]"
            )
        if self.log_init and lo <= 0:
            raise ValueError(f"param {self.name}: log_init needs a positive init range, got {self.init}")

    @property
    def kind(self) -> str:
        """Unconstraining transform: 'log_interval' (logit of the position in log space, for scale
        parameters with 0 < lower < upper < inf), 'interval' (scaled logit), 'lower' (log of the
        excess over the lower bound), 'upper', 'real'."""
        lo_f, hi_f = math.isfinite(self.lower), math.isfinite(self.upper)
        if lo_f and hi_f and self.log_init and self.lower > 0:
            return "log_interval"
        if lo_f and hi_f:
            return "interval"
        if lo_f:
            return "lower"
        if hi_f:
            return "upper"
        return "real"

    # --- unconstraining transform, used by the optimiser and by NUTS --------------------------
    def to_unconstrained(self, value):
        """Map a value inside the bounds to the real line (inverse of :meth:`from_unconstrained`)."""
        k = self.kind
        if k == "log_interval":
            return _position(math.log(self.lower), math.log(self.upper), jnp.log(value))
        if k == "interval":
            return _position(self.lower, self.upper, value)
        if k == "lower":
            return jnp.log(value - self.lower)
        if k == "upper":
            return jnp.log(self.upper - value)
        return value

    def from_unconstrained(self, u):
        """Map a real number into the bounds: scaled sigmoid, lower + exp, upper - exp, identity."""
        k = self.kind
        if k == "log_interval":
            return jnp.exp(_between(math.log(self.lower), math.log(self.upper), u))
        if k == "interval":
            return _between(self.lower, self.upper, u)
        if k == "lower":
            return self.lower + jnp.exp(u)
        if k == "upper":
            return self.upper - jnp.exp(u)
        return u

    def sample_init(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` initial values in ``init`` (log-uniform when ``log_init``), strictly inside bounds."""
        lo, hi = self.init
        if self.log_init:
            v = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
        else:
            v = rng.uniform(lo, hi, n)
        return clip_inside(v, self.lower, self.upper)


def _between(lo, hi, u):
    """``lo + (hi - lo) sigmoid(u)``, each value measured from where it has its full precision:
    from the nearer bound past ``|u| = 2`` (``sigmoid(u)`` is exact to a relative 1e-16 down to
    u = -745) and from the middle within (``mid + half tanh(u / 2)``).

    As ``(tanh(u / 2) + 1) / 2`` everywhere it had an absolute error of 1e-16: a relative 0.25%
    at u = -32 and 0 below u = -38, so a posterior next to a bound (C in (0, 1e4) at 1e-10,
    ScaleBench data_constrained sl_6) saw its log density jump under steps of 1e-7. Measured
    from a bound everywhere, a value near the middle of wide bounds kept only the bound's
    precision (C in (-1e13, 1e13) at 115 moved in steps of 0.002, sl_7)."""
    w = hi - lo
    near = jnp.where(u < 0, lo + w * jax.nn.sigmoid(u), hi - w * jax.nn.sigmoid(-u))
    middle = 0.5 * (lo + hi) + 0.5 * w * jnp.tanh(0.5 * u)
    return jnp.where(jnp.abs(u) < 2.0, middle, near)


def _position(lo, hi, v):
    """The inverse of :func:`_between`, from the same side: ``2 atanh`` of the offset from the
    middle within ``|u| < 2``, ``log(v - lo) - log(hi - v)`` beyond."""
    z = (v - 0.5 * (lo + hi)) / (0.5 * (hi - lo))
    middle = 2.0 * jnp.arctanh(jnp.clip(z, -0.99, 0.99))
    near = jnp.log(v - lo) - jnp.log(hi - v)
    return jnp.where(jnp.abs(z) < math.tanh(1.0), middle, near)


def clip_inside(v, lower, upper, rel=1e-9):
    """Clip ``v`` strictly inside ``(lower, upper)`` so unconstraining transforms stay finite."""
    v = np.asarray(v, dtype=float)
    if math.isfinite(lower):
        v = np.maximum(v, lower + rel * max(1.0, abs(lower)))
    if math.isfinite(upper):
        v = np.minimum(v, upper - rel * max(1.0, abs(upper)))
    if math.isfinite(lower) and math.isfinite(upper):
        span = upper - lower
        v = np.clip(v, lower + rel * span, upper - rel * span)
    return v


@dataclass(frozen=True)
class Coordinates:
    """Coordinates NUTS samples instead of some of a law's parameters (a reparameterisation),
    declared by a law (``Law.coordinates``) or built by ``bayes_scaling.bayes.coordinates``.

    The model is unchanged (priors stay on the law's parameters; the log-Jacobian of the map is
    added), only the geometry the sampler sees is: weakly identified parameters often lie on a
    curved ridge that becomes a straight one in coordinates centred on the data.

    Attributes:
        name: short label.
        params: the law parameters computed from the coordinates.
        coords: the sampled coordinates, as :class:`Param` specs (their transform is used), or
            the name of a law parameter that is sampled as itself (with its own transform).
        to_params: ``(c, ref) -> {param: value}`` (``c`` a dict of coordinate values).
        from_params: ``(p, ref) -> {coord: value}``, the inverse (used to initialise).
        reference: ``x -> ref``: data summaries the coordinates are centred on.
        doc: the formulas.
        uses_law: the maps also read the law and every other parameter: they are called as
            ``to_params(c, ref, law, others)`` / ``from_params(p, ref, law, others)`` with
            ``others`` every other parameter value (fixed ones included). Such a block is applied
            last; its Jacobian is triangular (nothing else depends on its parameters).
        log_det: optional closed form of ``log |det d params / d coords|`` (same arguments as
            ``to_params``); otherwise it is computed by forward-mode autodiff.
        with_log_det: optional ``to_params`` returning ``(params, log_det)`` in one pass (used by
            the sampler's density, so shared work is done once).
        switch: optional ``(theta_of_s, s_hat, cov, ref, method) -> Coordinates | None``: looks
            at the posterior mode (``s_hat``, Laplace covariance ``cov`` in the sampling
            coordinates) and returns better coordinates for this table and inference ``method``
            (``"nuts"`` or ``"laplace"``), or ``None`` to keep these.
    """

    name: str
    params: tuple
    coords: tuple
    to_params: Callable = field(repr=False)
    from_params: Callable = field(repr=False)
    reference: Callable = field(repr=False)
    doc: str = ""
    uses_law: bool = False
    log_det: Callable | None = field(default=None, repr=False)
    with_log_det: Callable | None = field(default=None, repr=False)
    switch: Callable | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Law:
    """A scaling law: parameters, variables read, and one pure jnp function.

    Attributes:
        name: registry name.
        params: parameter specs, in a fixed order (the order of every parameter vector).
        variables: names of the inputs ``fn`` reads from ``x``.
        fn: ``fn(p, x) -> L`` with ``p``/``x`` dicts of jnp arrays; must broadcast over rows.
        equation: the law in plain text, with the paper and equation number.
        column_map: variable -> loss-table column (identity for variables not listed).
        defaults: variable -> constant used when the column is absent (e.g. ``k = 1``).
        description: one paragraph on when to use it.
        example: a plausible parameter set (e.g. a paper's fitted values) used by docs and
            recovery tests; must lie inside the bounds.
        coordinates: the law's own sampling geometry: :class:`Coordinates` blocks the sampler
            uses instead of some parameters (e.g. the PTPP gate), unless a parameter they touch is
            fixed.
        linear: parameters that enter ``fn`` linearly (``f = c g + h``, ``g > 0``); the sampler
            replaces the free ones by the law's level at the centre of the table and the shares
            of their terms (``bayes_scaling.bayes.coordinates.level_coordinates``).
        prior_references: ``(coef, exponent, reference)`` triples: the default prior of the
            coefficient of a power term ``coef / v^exponent`` is stated for the term at
            ``v = reference`` (``bayes_scaling.bayes.AtReference``).
        base_law: the registered law whose parameters a two-phase fit (``fit_two_phase``) fits
            first and then freezes ("" if the law has none).
        phase1: ``df -> boolean mask``: the rows of that first phase.
        target_shift: the constant ``fn`` adds to the law's own value: a law made by
            :meth:`shifted` for a signed target (0 for every law as written).
    """

    name: str
    params: tuple[Param, ...]
    variables: tuple[str, ...]
    fn: Callable = field(repr=False)
    equation: str = ""
    column_map: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, float] = field(default_factory=dict)
    description: str = ""
    example: Mapping[str, float] = field(default_factory=dict)
    coordinates: tuple[Coordinates, ...] = ()
    linear: tuple[str, ...] = ()
    prior_references: tuple[tuple[str, str, float], ...] = ()
    base_law: str = ""
    phase1: Callable | None = field(default=None, repr=False)
    target_shift: float = 0.0

    def __post_init__(self):
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"law {self.name}: duplicate parameter names {names}")
        declared = ({n for b in self.coordinates for n in b.params} | set(self.linear)
                    | {n for ref in self.prior_references for n in ref[:2]})
        if declared - set(names):
            raise ValueError(f"law {self.name}: coordinates, linear or prior_references name "
                             f"{sorted(declared - set(names))}, which are not parameters {names}")
        if self.example:
            if set(self.example) != set(names):
                raise ValueError(f"law {self.name}: example must give exactly {names}")
            for p in self.params:
                if not (p.lower <= self.example[p.name] <= p.upper):
                    raise ValueError(f"law {self.name}: example {p.name} outside its bounds")

    # --- introspection --------------------------------------------------------------------------
    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"law {self.name} has no parameter {name!r}; it has {self.param_names}")

    def column(self, variable: str) -> str:
        """The loss-table column that feeds ``variable``."""
        return self.column_map.get(variable, variable)

    @property
    def columns(self) -> tuple[str, ...]:
        """Loss-table columns this law needs (variables with a default are optional)."""
        return tuple(self.column(v) for v in self.variables if v not in self.defaults)

    # --- evaluation -----------------------------------------------------------------------------
    def inputs(self, df) -> dict[str, jnp.ndarray]:
        """Read the law's variables from a DataFrame (or dict of arrays) as float64 jnp arrays."""
        x = {}
        n = len(df[next(iter(df.keys()))]) if hasattr(df, "keys") else len(df)
        for v in self.variables:
            col = self.column(v)
            if col in df:
                # device_put, not jnp.asarray: no compiled program per table size
                x[v] = jax.device_put(np.asarray(df[col], dtype=np.float64))
            elif v in self.defaults:
                x[v] = jax.device_put(np.full(n, float(self.defaults[v])))
            else:
                raise KeyError(f"law {self.name} needs column {col!r} (variable {v!r})")
        return x

    def __call__(self, params: Mapping[str, float], data) -> jnp.ndarray:
        """Predicted loss: ``params`` a dict of floats/arrays, ``data`` a DataFrame or dict of columns."""
        # host values stay on the host (``jnp.asarray`` of a float is a program of its own)
        p = {k: (v if v.dtype == jnp.float64 else v.astype(jnp.float64))
             if isinstance(v, jax.Array) else np.asarray(v, np.float64) for k, v in params.items()}
        missing = set(self.param_names) - set(p)
        if missing:
            raise KeyError(f"law {self.name}: missing parameter values {sorted(missing)}")
        x = data if _is_jnp_dict(data, self.variables) else self.inputs(data)
        # compiled, one program per law and shapes: eagerly a law is one program per operation
        # (32 for M3), each traced and compiled or looked up on its own
        return _CALLS.get(self.fn, lambda: jax.jit(self.fn))(p, x)

    @functools.cached_property
    def identity(self) -> str:
        """``name:hash`` of what the law computes: the source of ``fn``, every parameter's name,
        bounds, init range and init scale, the variables, the column map and the defaults (not
        the docs or the example). Saved fits record it; loading checks it (:meth:`from_saved`)."""
        fn = self.unshifted_fn  # a shifted law: its own law's source, and the shift below
        try:
            code = inspect.getsource(fn)
        except (OSError, TypeError):
            code = fn.__code__.co_code.hex()
        parts = [code, repr([(p.name, p.lower, p.upper, tuple(p.init), p.log_init)
                             for p in self.params]),
                 repr(self.variables), repr(sorted(self.column_map.items())),
                 repr(sorted((k, float(v)) for k, v in self.defaults.items()))]
        if self.target_shift:
            parts.append(f"target_shift={self.target_shift!r}")
        h = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
        return f"{self.name}:{h}"

    @property
    def unshifted_fn(self) -> Callable:
        """``fn`` without the :meth:`shifted` constant."""
        return getattr(self.fn, "__wrapped__", self.fn) if self.target_shift else self.fn

    def shifted(self, shift: float) -> "Law":
        """The law of ``loss + shift``: ``fn(p, x) + shift``, the same parameters and inputs.

        The likelihood lives on ``log L``, so a signed target (a loss minus the unigram entropy,
        ScaleBench's vocabulary task) is fitted as ``L + shift > 0``;
        :func:`~bayes_scaling.bayes.fit_posterior` does it by itself (``target_shift``). Shifts
        add up; the same law and shift give the same function (its compiled programs are
        reused)."""
        shift = float(shift)
        if not math.isfinite(shift):
            raise ValueError(f"law {self.name}: a target shift must be finite, got {shift}")
        if shift == 0.0:
            return self
        total = self.target_shift + shift
        base = self.unshifted_fn
        if total == 0.0:
            return dataclasses.replace(self, fn=base, target_shift=0.0)
        return dataclasses.replace(self, fn=_shift_output(base, total), target_shift=total)

    @staticmethod
    def from_saved(name: str, identity: str | None, law=None, source: str = "",
                   target_shift: float = 0.0) -> "Law":
        """The law a saved result was fitted with: ``law`` (a :class:`Law` or name) or the one
        registered as ``name`` (shifted to ``target_shift``, :meth:`shifted`), refused unless its
        :attr:`identity` is the recorded one."""
        where = f"{source}: " if source else ""
        if law is None:
            try:
                law = get(name)
            except LawError:
                raise LawError(f"{where}the law {name!r} is not registered (a custom law); reload "
                               "with the law object: load_posterior(path, law=my_law) or "
                               "MapFit.load(path, law=my_law)") from None
        law = get(law)
        law = law.shifted(float(target_shift or 0.0) - law.target_shift)
        if identity is None:
            raise LawError(f"{where}records no law identity (saved by an older version); refit it")
        if law.identity != identity:
            raise LawError(f"{where}was fitted with the law {identity}, but {law.name} is "
                           f"{law.identity}: its definition (formula, parameters, bounds or "
                           "inputs) differs; refit, or pass the law it was fitted with (law=)")
        return law

    def renamed(self, name: str, description: str = "", **column_map: str) -> "Law":
        """The same law read through another column mapping, e.g. ``dcpt.renamed('dcpt_m3', N='M')``."""
        unknown = set(column_map) - set(self.variables)
        if unknown:
            raise ValueError(f"law {self.name} has no variables {sorted(unknown)}")
        return dataclasses.replace(
            self,
            name=name,
            column_map={**self.column_map, **column_map},
            description=description or self.description,
        )

    def describe(self) -> str:
        """Multi-line human description: equation, variables -> columns, parameters with bounds."""
        lines = [f"{self.name}: {self.equation}"]
        if self.description:
            lines.append(f"  {self.description}")
        cols = ", ".join(
            f"{v}<-{self.column(v)}" + (f" (default {self.defaults[v]})" if v in self.defaults else "")
            for v in self.variables
        )
        lines.append(f"  reads: {cols}")
        for p in self.params:
            lines.append(
                f"  {p.name:>10s} in [{p.lower:g}, {p.upper:g}], init {p.init}"
                + (" log" if p.log_init else "")
                + (f"  {p.doc}" if p.doc else "")
            )
        return "\n".join(lines)


@functools.lru_cache(maxsize=None)
def _shift_output(fn: Callable, shift: float) -> Callable:
    """``fn + shift`` (one function per pair, so its compiled programs are reused)."""

    @functools.wraps(fn)
    def shifted(p, x):
        return fn(p, x) + shift

    return shifted


def _is_jnp_dict(data, variables) -> bool:
    return isinstance(data, dict) and all(v in data for v in variables) and not hasattr(data, "columns")


# --- registry -----------------------------------------------------------------------------------
_REGISTRY: dict[str, Law] = {}


def register(law: Law, *, replace: bool = False) -> Law:
    """Register ``law`` under its name. Registering the same definition again (e.g. a notebook
    cell run twice) is a no-op; a different law under a taken name needs ``replace=True``."""
    old = _REGISTRY.get(law.name)
    same = old is not None and dataclasses.replace(old, fn=None) == dataclasses.replace(
        law, fn=None) and getattr(old.fn, "__code__", old.fn) == getattr(law.fn, "__code__", law.fn)
    if same:
        return old
    if old is not None and not replace:
        raise ValueError(f"a different law is already registered as {law.name!r}; pass "
                         "replace=True to replace it, or choose another name")
    _REGISTRY[law.name] = law
    return law


def get(name_or_law) -> Law:
    """The law registered under ``name`` (a :class:`Law` is returned unchanged)."""
    if isinstance(name_or_law, Law):
        return name_or_law
    try:
        return _REGISTRY[name_or_law]
    except KeyError:
        raise LawError(
            f"unknown law {name_or_law!r}; registered laws: {', '.join(sorted(_REGISTRY))}"
        ) from None


def names() -> list[str]:
    """Names of every registered law, in registration order."""
    return list(_REGISTRY)


# --- numerics helpers shared by law functions -----------------------------------------------------
def powlaw(coef, x, exponent):
    """``coef / x**exponent`` evaluated as ``exp(log coef - exponent log x)`` (stable for big x)."""
    return jnp.exp(jnp.log(coef) - exponent * jnp.log(x))
