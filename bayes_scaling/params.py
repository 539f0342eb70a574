"""The parameter space of a fit, shared by the MAP fit (``fit.Problem``) and inference
(``bayes.Spec``): which of a law's parameters are free and which fixed, the map between the free
ones' natural values ``theta`` and the real line ``u`` (each :class:`~bayes_scaling.laws.Param`'s
transform), initial values, and the table as the arrays a compiled objective reads (the law's
inputs and the loss, padded to a row bucket).

It sits between ``laws`` (what one parameter is) and both of its users, and imports neither, so
``fit`` and ``bayes`` read one definition without a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from . import data
from .errors import ParameterError
from .laws import Law
from .laws import get as get_law
from .programs import Programs

#: the compiled maps between ``theta`` and ``u`` of the most recent parameter spaces
_MAPS = Programs(32, "parameter maps")

#: Pad tables to :func:`row_bucket` rows (zero-weight copies) in ``fit_map`` and the Bayesian
#: layer, so fits of nearby row counts share one compiled program; off only to benchmark it.
PAD_ROWS = True


@dataclass(frozen=True)
class ParamSpace:
    """A law's parameters split into fixed values and a free vector.

    ``theta`` is the free parameters in their natural (bounded) space, in ``free`` order (along
    the last axis of an array, or as a dict by name); ``u`` is the same point mapped to the real
    line by each parameter's transform. Build one with :meth:`of`.

    Attributes:
        law: the law.
        fixed: ``{name: value}`` of the parameters held fixed.
        free: the Params of the vector: the law's other parameters in ``law.params`` order, then
            ``extra``.
        extra: Params outside the law inferred along with it (the likelihood's scale ``sigma``).
    """

    law: Law
    fixed: Mapping[str, float]
    free: tuple
    extra: tuple = ()

    @classmethod
    def of(cls, law, fixed: Mapping[str, float] | None = None, extra: tuple = ()) -> ParamSpace:
        """The space of ``law`` (a name or :class:`~bayes_scaling.laws.Law`) with ``fixed`` held.

        Raises:
            ParameterError: a fixed name that is not a parameter of the law, or every parameter
                fixed.
        """
        law = get_law(law)
        fixed = {k: float(v) for k, v in dict(fixed or {}).items()}
        unknown = sorted(set(fixed) - set(law.param_names))
        if unknown:
            raise ParameterError(f"fixed names {unknown} are not parameters of {law.name}, whose "
                                 f"parameters are {list(law.param_names)}; fix the names in fixed=")
        free = tuple(p for p in law.params if p.name not in fixed)
        if not free:
            raise ParameterError(f"every parameter of {law.name} is fixed, so there is nothing to "
                                 "fit; leave at least one out of fixed=")
        return cls(law, fixed, free + tuple(extra), tuple(extra))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.free)

    @property
    def law_names(self) -> tuple[str, ...]:
        """The free parameters of the law (``names`` without ``extra``)."""
        return self.names[:len(self.free) - len(self.extra)]

    @property
    def structure(self) -> tuple:
        """Hashable structure of the space (free Params with their bounds, fixed names), what a
        compiled program depends on; the fixed values are not in it (programs read them as
        data, :meth:`fixed_tree`)."""
        free = tuple((p.name, p.lower, p.upper, p.log_init) for p in self.free)
        return free, tuple(sorted(self.fixed))

    # --- theta <-> u ------------------------------------------------------------------------------
    def theta(self, u):
        """Natural values from ``u``, stacked along the last axis."""
        return jnp.stack([p.from_unconstrained(u[..., i]) for i, p in enumerate(self.free)], -1)

    def theta_dict(self, u) -> dict:
        """Natural values from ``u`` (last axis) as a dict of arrays by name."""
        return {p.name: p.from_unconstrained(u[..., i]) for i, p in enumerate(self.free)}

    def u(self, theta):
        """``u`` from natural values: an array (free parameters along the last axis) or a
        mapping by name."""
        if isinstance(theta, Mapping):
            return jnp.stack([p.to_unconstrained(jnp.asarray(theta[p.name], jnp.float64))
                              for p in self.free], -1)
        return jnp.stack([p.to_unconstrained(theta[..., i]) for i, p in enumerate(self.free)], -1)

    def theta_compiled(self, u):
        """:meth:`theta` of an array ``u`` as one compiled program (per :attr:`structure`).
        Eagerly, each parameter's transform is several one-operation programs (about 25 for
        Chinchilla's five), each traced and compiled or looked up on its own."""
        return _MAPS.get(("theta", self.structure), lambda: jax.jit(self.theta))(u)

    def u_compiled(self, theta):
        """:meth:`u` of an array ``theta`` as one compiled program (per :attr:`structure`)."""
        return _MAPS.get(("u", self.structure), lambda: jax.jit(self.u))(theta)

    def full_params(self, theta, fixed: Mapping | None = None) -> dict:
        """Every parameter of the law: the free ones from ``theta`` (an array along the last axis,
        or a mapping by name; ``extra`` left out) and the fixed ones (``fixed``, a pytree such as
        :meth:`fixed_tree` that a compiled program reads as data; default this space's)."""
        if isinstance(theta, Mapping):
            p = {n: theta[n] for n in self.law_names}
        else:
            p = {n: theta[..., i] for i, n in enumerate(self.law_names)}
        p.update(self.fixed_tree() if fixed is None else fixed)
        return p

    def fixed_tree(self) -> dict:
        """The fixed values as float64 arrays (the pytree compiled programs take as data)."""
        return {k: jnp.asarray(v, dtype=jnp.float64) for k, v in self.fixed.items()}

    def sample_inits(self, n: int, seed) -> np.ndarray:
        """``(n, len(free))`` initial values, each drawn in its Param's init range
        (``Param.sample_init``) from ``numpy.random.default_rng(seed)``."""
        rng = np.random.default_rng(seed)
        return np.stack([p.sample_init(rng, n) for p in self.free], -1)

    # --- the table --------------------------------------------------------------------------------
    def validate(self, df: pd.DataFrame) -> pd.DataFrame:
        """``bs.data.validate`` of ``df`` for the law, with more rows than free law parameters."""
        return data.validate(df, self.law, min_rows=len(self.law_names) + 1)

    def read(self, df: pd.DataFrame, log: bool = False):
        """``(x, y)``: the law's inputs of a validated table (``Law.inputs``) and its loss (its
        log with ``log``), unpadded (pad them with :func:`pad_rows`)."""
        y = df["loss"].to_numpy(dtype=float)
        # on the host, then device_put: an eager jnp.log would compile a program per table size
        return self.law.inputs(df), jax.device_put(np.log(y) if log else y)


def row_bucket(n: int) -> int:
    """The padded row count of an ``n``-row fit: the next power of two, at least 32 (or ``n``
    itself when :data:`PAD_ROWS` is off)."""
    if not PAD_ROWS:
        return int(n)
    return max(32, 1 << (int(n) - 1).bit_length())


def pad_rows(x: Mapping, y, to: int | None = None):
    """``(x, y, w)``: the inputs and targets padded to ``to`` rows (default :func:`row_bucket`)
    with copies of the first row, and the weights (1 for the real rows, 0 for the copies), which
    every objective and density multiplies in: tables of 100 and 120 rows share one compiled
    program (compilation dominates protocols of hundreds of small fits)."""
    n = len(y)
    rep = (row_bucket(n) if to is None else to) - n
    if rep:  # in numpy: the same values, without a compiled program per table size
        x = {k: jax.device_put(_padded(v, rep)) for k, v in x.items()}
        y = jax.device_put(_padded(y, rep))
    return x, y, jax.device_put(np.concatenate([np.ones(n), np.zeros(rep)]))


def _padded(v, rep: int) -> np.ndarray:
    v = np.asarray(v)
    return np.concatenate([v, np.full(rep, v[0], dtype=v.dtype)])
