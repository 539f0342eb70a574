"""Checks of options and results that would otherwise give a silently wrong answer.

``check_fit_options`` refuses settings no fit can honour (a Huber ``delta`` that is not a positive
finite number, zero starts, zero chains or draws, a fixed parameter outside its law's bounds) and,
through ``check_traceable``, a law whose function JAX cannot trace (NumPy or ``math`` on its
inputs, Python branches on their values);
``check_inputs`` refuses predictions outside a law's input domain (e.g. ``N <= 0``, where a power
law returns NaN); ``at_bounds`` lists the fitted parameters that ended on a bound, where the value
is the bound rather than an estimate.
"""
from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Mapping

import jax
import jax.numpy as jnp

from .data import validate_inputs
from .errors import LawError, OptionError
from .laws import get as get_law

# A parameter within this fraction of its bounded range (in the coordinates the fit uses: log for
# log-scale parameters) of a bound is reported as sitting on it.
BOUND_TOL = 1e-4


def check_fit_options(law, *, delta=None, n_starts=None, fixed: Mapping | None = None,
                      num_chains=None, num_warmup=None, num_samples=None) -> None:
    """Raise :class:`~bayes_scaling.errors.OptionError` for an option no fit can honour.

    Args:
        law: registered law name or :class:`~bayes_scaling.laws.Law`.
        delta: Huber threshold on log residuals; must be finite and > 0.
        n_starts: multi-start size; must be an integer >= 1.
        fixed: ``{name: value}``; each value of a parameter of ``law`` must be finite and inside
            its bounds.
        num_chains, num_samples: must be integers >= 1; num_warmup an integer >= 0.
    """
    law = get_law(law)
    check_traceable(law)
    if delta is not None and not (_is_number(delta) and math.isfinite(delta) and delta > 0):
        raise OptionError(f"delta (the Huber threshold on log residuals) must be a positive finite "
                          f"number, got {delta!r}; the PTPP paper uses 0.02, the M3 paper 1e-3")
    for name, value, least in (("n_starts", n_starts, 1), ("num_chains", num_chains, 1),
                               ("num_warmup", num_warmup, 0), ("num_samples", num_samples, 1)):
        if value is not None and not (_is_int(value) and value >= least):
            raise OptionError(f"{name} must be an integer >= {least}, got {value!r}")
    for name, value in (fixed or {}).items():
        if name not in law.param_names:
            continue  # the fit names the unknown parameters (FitError)
        p = law.param(name)
        if not (_is_number(value) and p.lower <= value <= p.upper):
            raise OptionError(f"fixed {name}={value!r} is outside {law.name}'s bounds for {name}, "
                              f"[{p.lower:g}, {p.upper:g}]; give a value inside them")


#: the identities of the laws :func:`check_traceable` has passed in this process
_TRACEABLE: set[str] = set()
#: JAX's errors of a function that turns a traced value into a concrete one
_CONCRETE = (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError,
             jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError)


def check_traceable(law) -> None:
    """Raise one :class:`~bayes_scaling.errors.LawError`, saying how to fix it, when JAX cannot
    trace ``law``'s function on one number per parameter and a column per variable: every fit
    compiles it, so a function that calls NumPy or ``math`` on them, branches in Python on their
    values, fails on their names or does not return one value per row would otherwise end in a
    traceback from inside the fit. The function is traced abstractly (``jax.eval_shape``:
    nothing is computed), once per law and process."""
    law = get_law(law)
    key = law.identity
    if key in _TRACEABLE:
        return
    rows = 3
    p = {n: jax.ShapeDtypeStruct((), jnp.float64) for n in law.param_names}
    x = {v: jax.ShapeDtypeStruct((rows,), jnp.float64) for v in law.variables}
    fn = law.unshifted_fn
    try:
        where = f"{inspect.getsourcefile(fn)} line {inspect.getsourcelines(fn)[1]}"
    except (TypeError, OSError):
        where = getattr(fn, "__qualname__", repr(fn))
    try:
        out = jax.eval_shape(law.fn, p, x)
    except _CONCRETE as e:
        raise LawError(
            f"law {law.name}: JAX cannot trace its function ({where}): "
            f"{type(e).__name__}: {str(e).splitlines()[0]}. Write it with jax.numpy (import "
            "jax.numpy as jnp; jnp.exp, jnp.log, jnp.power, jnp.sqrt) rather than numpy or math, "
            "and branch on values with jnp.where, not if") from None
    except Exception as e:  # a name it reads that is not a parameter or variable, a bad operation
        raise LawError(
            f"law {law.name}: its function ({where}) fails on one number per parameter "
            f"({', '.join(law.param_names)}) and one column per variable "
            f"({', '.join(law.variables)}): {type(e).__name__}: {e}") from None
    shape = tuple(getattr(out, "shape", ("not an array",)))
    if shape != (rows,):
        raise LawError(f"law {law.name}: its function ({where}) returns shape {shape} for "
                       f"{rows} rows; it must return one value per row, shape ({rows},)")
    _TRACEABLE.add(key)


def check_inputs(law, df) -> None:
    """Raise :class:`~bayes_scaling.errors.DataError` unless every row of ``df`` lies in ``law``'s
    input domain (see :func:`bayes_scaling.data.validate_inputs`)."""
    validate_inputs(df, law)


def at_bounds(law, params: Mapping[str, float], fixed=()) -> dict[str, float]:
    """``{name: bound}`` for each fitted (not ``fixed``) parameter that ended on one of its bounds:
    within :data:`BOUND_TOL` of the bounded range (log range for log-scale parameters), or, for a
    parameter bounded on one side only, within ``BOUND_TOL`` times its init range of the bound."""
    law = get_law(law)
    out = {}
    for p in law.params:
        if p.name in fixed or p.name not in params:
            continue
        v = float(params[p.name])
        lo, hi = p.lower, p.upper
        if math.isfinite(lo) and math.isfinite(hi):
            log = p.log_init and lo > 0
            f = (math.log(v / lo) / math.log(hi / lo)) if log and v > 0 else (v - lo) / (hi - lo)
            if f <= BOUND_TOL:
                out[p.name] = lo
            elif f >= 1 - BOUND_TOL:
                out[p.name] = hi
            continue
        span = BOUND_TOL * (p.init[1] - p.init[0] or 1.0)
        if math.isfinite(lo) and v - lo <= span:
            out[p.name] = lo
        elif math.isfinite(hi) and hi - v <= span:
            out[p.name] = hi
    return out


def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)
