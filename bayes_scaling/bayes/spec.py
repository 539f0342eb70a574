"""The model specification (:class:`Spec`): law, priors, likelihood, fixed values, coordinates;
its densities, and the table as the arrays they read.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import jax
import jax.numpy as jnp
import pandas as pd

import numpyro.distributions as dist

from ..errors import BayesScalingError
from ..laws import Law, get as get_law
from ..params import ParamSpace, pad_rows
from ..programs import Programs
from .coordinates import choose_blocks
from .distributions import FLAT_PRIORS, HUBER_C, log_abs_det_jacobian
from .likelihood import STUDENT_DF, check_likelihood, log_likelihood
from .priors import SCALE, default_priors, log_scale, prior_given
from .terms import is_term_block

# width, in log theta, of the soft bounds of the sampled density (see Spec.soft_bounds)
SOFT_BOUND_WIDTH = 0.5


@dataclass(frozen=True)
class Spec:
    """Everything that defines a model except the data: law, priors, likelihood, fixed values.

    ``space`` (``bayes_scaling.params.ParamSpace``, the one ``fit_map`` uses) holds the law, the
    fixed values and ``free``, the inferred parameters (the law's non-fixed parameters, then
    ``sigma`` unless the scale is fixed); the unconstrained vector ``u`` has one entry per free
    parameter, each through its Param transform. ``blocks`` are sampling coordinates replacing
    some of them; the sampling vector ``s`` holds the blocks' coordinates (transformed), then the
    remaining ``u``.
    """

    space: ParamSpace
    priors: Mapping[str, dist.Distribution]
    likelihood: str = "huber"
    scale: float | None = None
    c: float = HUBER_C
    student_df: float = STUDENT_DF
    blocks: tuple = ()

    @property
    def law(self) -> Law:
        return self.space.law

    @property
    def free(self) -> tuple:
        return self.space.free

    @property
    def fixed(self) -> Mapping[str, float]:
        return self.space.fixed

    @property
    def names(self) -> tuple[str, ...]:
        return self.space.names

    @property
    def law_names(self) -> tuple[str, ...]:
        return self.space.law_names

    def key(self):
        """Hashable structure of the model (one compiled program per key, whatever the data)."""
        return (self.law.name, self.law.fn, tuple(sorted(self.law.column_map.items())),
                self.names, tuple(sorted(self.fixed)), self.scale is None, self.likelihood,
                self.c, self.student_df, tuple((k, id(v)) for k, v in sorted(self.priors.items())),
                tuple(id(b) for b in self.blocks))

    # --- the unconstrained vector u (one entry per free parameter) -------------------------------
    def theta(self, u):
        """Natural values of the free parameters from ``u`` (last axis), as a dict of arrays."""
        return self.space.theta_dict(u)

    def u(self, theta: Mapping[str, float]):
        return self.space.u(theta)

    def log_jacobian(self, u):
        """log |d theta / d u|: the density of the unconstrained space."""
        return sum(log_abs_det_jacobian(p, u[..., i]) for i, p in enumerate(self.free))

    def log_jacobian_natural(self, u):
        """log |d theta / d xi| for the natural coordinates xi (log theta if :func:`log_scale`)."""
        return sum(jnp.log(p.from_unconstrained(u[..., i]))
                   for i, p in enumerate(self.free) if log_scale(p))

    # --- the sampling vector s -------------------------------------------------------------------
    @property
    def plain(self) -> tuple:
        taken = {n for b in self.blocks for n in b.params}
        return tuple(p for p in self.free if p.name not in taken)

    @property
    def sampled(self) -> tuple:
        """Params of the sampling vector: every block's coordinates, then the plain parameters."""
        return tuple(c for b in self.blocks for c in b.coords) + self.plain

    def theta_s(self, s, ref):
        """Natural values from one sampling vector ``s`` (1-D) and the data references."""
        return self._theta_s(s, ref, False)[0]

    def _theta_s(self, s, ref, with_jac):
        """(theta, log |d theta / d s|) in one pass over the blocks (the Jacobian when asked)."""
        vals = {p.name: p.from_unconstrained(s[i]) for i, p in enumerate(self.sampled)}
        jac = (sum(log_abs_det_jacobian(p, s[i]) for i, p in enumerate(self.sampled))
               if with_jac else 0.0)
        theta = {p.name: vals[p.name] for p in self.plain}
        for b in self.blocks:
            c = {cp.name: vals[cp.name] for cp in b.coords}
            args = (ref[b.name], self.law, self._others(theta, b, ref)) if b.uses_law else (
                ref[b.name],)
            if with_jac and b.with_log_det is not None:
                out, ld = b.with_log_det(c, *args)
            else:
                out = b.to_params(c, *args)
                ld = 0.0
                if with_jac and b.log_det is not None:
                    ld = b.log_det(c, *args)
                elif with_jac:
                    names = [cp.name for cp in b.coords]

                    def block(cv, b=b, args=args, names=names):
                        o = b.to_params({n: cv[j] for j, n in enumerate(names)}, *args)
                        return jnp.stack([o[nm] for nm in b.params])

                    cv = jnp.stack([c[n] for n in names])
                    ld = jnp.linalg.slogdet(jax.jacfwd(block)(cv))[1]
            theta.update(out)
            jac = jac + ld
        return theta, jac

    def _others(self, theta, block, ref):
        out = {k: v for k, v in theta.items() if k != "sigma" and k not in block.params}
        out.update(ref["__fixed__"])
        return out

    def s(self, theta, ref):
        """Sampling vector from natural values (the inverse of :meth:`theta_s`)."""
        vals = {p.name: jnp.asarray(theta[p.name], jnp.float64) for p in self.plain}
        for b in self.blocks:
            p = {n: jnp.asarray(theta[n], jnp.float64) for n in b.params}
            if b.uses_law:
                th = {k: jnp.asarray(v, jnp.float64) for k, v in theta.items()}
                vals.update(b.from_params(p, ref[b.name], self.law, self._others(th, b, ref)))
            else:
                vals.update(b.from_params(p, ref[b.name]))
        return jnp.stack([p.to_unconstrained(vals[p.name]) for p in self.sampled], -1)

    def log_jacobian_s(self, s, ref):
        """log |d theta / d s|: Param transforms plus each block's coordinate map (triangular:
        a block that reads other parameters holds them at their values)."""
        return self._theta_s(s, ref, True)[1]

    # --- densities -------------------------------------------------------------------------------
    def sigma(self, theta, data):
        return theta["sigma"] if self.scale is None else data["scale"]

    def pointwise_loglik(self, theta, data):
        """log p(log L_i | theta, sigma) for every row (the log_likelihood group)."""
        mu = jnp.log(self.law.fn(self.space.full_params(theta, data["fixed"]), data["x"]))
        ll = log_likelihood(data["y"] - mu, self.sigma(theta, data), self.likelihood, c=self.c,
                            student_df=self.student_df)
        return jnp.where(jnp.isfinite(ll), ll, -jnp.inf)

    def loglik(self, theta, data):
        """Summed log-likelihood of the table's rows (padding rows, weight 0, add nothing)."""
        return jnp.sum(jnp.where(data["w"] > 0, self.pointwise_loglik(theta, data), 0.0))

    def log_prior(self, theta):
        """Sum of the priors' log densities at the natural values (no Jacobian)."""
        values = {**self.fixed, **theta}
        return sum(prior_given(self.priors, p.name, values).log_prob(theta[p.name])
                   for p in self.free)

    def _soft(self, p) -> bool:
        """Whether ``p``'s finite bounds are soft in the sampled density: the coefficient of a
        power term sampled at its value at the centre of the table (:func:`~.terms.term_coordinates`,
        of either sign), a positive parameter (:func:`log_scale`) computed by a coordinate block
        (which keeps it positive itself), or a signed one sampled on the asinh scale
        (:func:`~.coordinates.signed_coordinates`) or as the law's values
        (:func:`~.coordinates.linear_coordinates`)."""
        if any(is_term_block(b) and b.params[0] == p.name for b in self.blocks):
            return True  # a term's coefficient, whatever its init range (a bound is a wall)
        if p.lower < 0 < p.upper and any(
                b.name == f"signed_{p.name}" or (b.name == "linear" and p.name in b.params)
                for b in self.blocks):
            return True
        return log_scale(p) and any(p.name in b.params for b in self.blocks)

    def _inside(self, theta):
        ok = True
        for p in self.free:
            v = theta[p.name]
            ok = ok & jnp.isfinite(v)
            if not self._soft(p):
                ok = ok & (v > p.lower) & (v < p.upper)
        return ok

    def _into_box(self, theta):
        """``theta`` with the soft-bounded parameters clipped into their bounds (where their
        priors are evaluated: beyond a bound the prior's density stays at its value there)."""
        out = dict(theta)
        for p in self.free:
            if self._soft(p):
                # just inside each finite bound (``inf - 1e-12 * inf`` would be nan)
                lo = p.lower + 1e-12 * abs(p.lower) if math.isfinite(p.lower) else p.lower
                hi = p.upper - 1e-12 * abs(p.upper) if math.isfinite(p.upper) else p.upper
                out[p.name] = jnp.clip(theta[p.name], lo, hi)
        return out

    def soft_bounds(self, theta):
        """Log-density beyond the soft bounds (0 inside them): past a box bound ``b`` of a
        positive parameter that a coordinate block computes, the density falls by
        ``exp(-0.5 ((log theta - log b) / SOFT_BOUND_WIDTH)^2)`` instead of jumping to 0.

        Why: box bounds such as the M3 paper's ``A, B <= 1e6`` (Table 6) are the optimiser's, kept
        by the MAP fit (its transforms map into the box) for parity with the paper. In
        coordinates that mix parameters (the level and shares of the linear terms) a bound is
        a wall inside the sampled space, which the chains hit wherever the posterior reaches
        it (Chinchilla on Epoch's 20 smallest-compute runs: 105 divergent transitions). The
        density is continuous across a soft bound (the prior is held at its value on the bound, the
        penalty starts with zero slope) and unchanged inside the box. A signed parameter sampled
        on the asinh scale gets the same penalty in ``log |theta|`` past either bound (its
        coordinate is the whole real line: a hard bound would be a wall there too).
        """
        out = 0.0
        for p in self.free:
            if not self._soft(p):
                continue
            v = theta[p.name]
            if p.lower < 0 < p.upper:  # signed: the same penalty in log |theta| past a bound
                for side, bound in ((v, p.upper), (-v, -p.lower)):
                    if math.isfinite(bound):
                        out = out + _past(side, bound)
                continue
            lv = jnp.log(v)
            if p.lower > 0:
                out = out - 0.5 * (jnp.minimum(lv - math.log(p.lower), 0.0)
                                   / SOFT_BOUND_WIDTH) ** 2
            if math.isfinite(p.upper):
                out = out - 0.5 * (jnp.maximum(lv - math.log(p.upper), 0.0)
                                   / SOFT_BOUND_WIDTH) ** 2
        return out

    def log_joint(self, u, data, jacobian=True):
        """Unnormalised log posterior at ``u``: in the unconstrained space (``jacobian=True``)
        or in the natural space (``False``, whose maximiser is the MAP)."""
        theta = self.theta(u)
        lp = self.log_prior(theta) + self.loglik(theta, data)
        if jacobian:
            lp = lp + self.log_jacobian(u)
        return jnp.where(jnp.isfinite(lp), lp, -jnp.inf)

    def log_joint_s(self, s, data):
        """Unnormalised log posterior density of the sampling vector ``s`` (what NUTS samples)."""
        theta, jac = self._theta_s(s, data["ref"], True)
        lp = (self.log_prior(self._into_box(theta)) + self.loglik(theta, data) + jac
              + self.soft_bounds(theta))
        return jnp.where(jnp.isfinite(lp) & self._inside(theta), lp, -jnp.inf)


def _past(v, bound):
    """``-0.5 ((log v - log bound) / SOFT_BOUND_WIDTH)^2`` where ``v > bound`` (> 0), else 0.
    The log is taken of ``v`` only where it is past the bound, so that every derivative is finite
    on the other side too: ``log(max(v, 1e-300))`` there was 0 with a zero gradient but a second
    derivative of ``inf * 0 = nan`` (every Hessian of the density nan: Newton stopped where it
    started and the chains were whitened by the identity)."""
    past = v > bound
    excess = jnp.log(jnp.where(past, v, bound)) - math.log(bound)
    return jnp.where(past, -0.5 * (excess / SOFT_BOUND_WIDTH) ** 2, 0.0)


def make_spec(law, *, priors=None, likelihood="huber", fixed=None, scale=None, c=HUBER_C,
              student_df=STUDENT_DF, coordinates="auto", level=None) -> Spec:
    """Resolve the law, the fixed parameters and the priors into a :class:`Spec`.

    ``priors``: ``None`` (defaults), ``"flat"`` (improper flat priors on the law's parameters; the
    scale keeps its default prior unless fixed), or ``{name: distribution}`` overriding some
    defaults. Unknown names raise. ``coordinates``: ``"auto"`` (those the law declares,
    skipping any block that touches a fixed parameter), ``None`` (plain Param
    transforms), or a tuple of :class:`Coordinates`. ``level``: linear coefficients to replace by
    the law's level at the centre of the table and their shares (:func:`level_coordinates`);
    with ``"auto"`` the law's declared free linear coefficients.
    """
    law = get_law(law)
    check_likelihood(likelihood)
    if "sigma" in law.param_names:
        raise BayesScalingError(f"law {law.name} has a parameter named 'sigma', which the "
                                "likelihood's scale uses; rename it")
    if scale is not None and not scale > 0:
        raise BayesScalingError(f"a fixed scale must be positive, got {scale}")
    space = ParamSpace.of(law, fixed, extra=(SCALE,) if scale is None else ())
    pri = default_priors(law)
    if isinstance(priors, str):
        if priors != "flat":
            raise BayesScalingError(f"priors must be None, 'flat' or a dict, got {priors!r}")
        pri.update({p.name: FLAT_PRIORS[log_scale(p)] for p in law.params})
    elif priors is not None:
        unknown = set(priors) - set(law.param_names) - {"sigma"}
        if unknown:
            raise BayesScalingError(f"priors given for {sorted(unknown)}, which are not parameters "
                                    f"of {law.name} ({law.param_names}) or 'sigma'")
        pri.update(priors)
    pri = {p.name: pri[p.name] for p in space.free}
    blocks = choose_blocks(law, space.free, space.fixed, coordinates, level)
    return Spec(space, pri, likelihood, None if scale is None else float(scale), c, student_df,
                blocks)


def data_pytree(spec: Spec, df: pd.DataFrame, pad: bool | int = True, ref: dict | None = None):
    """The table as the arrays every compiled density reads.

    With ``pad`` the rows are padded to ``row_bucket(n)`` (the next power of two, at least 32)
    with copies of the first row of weight ``w = 0``, which add nothing to any density: fits on
    tables of 100 and 120 rows (held-out splits, anchor refits) then share their compiled
    programs (``bayes_scaling.params.PAD_ROWS = False`` turns it off everywhere, for
    benchmarks); an integer ``pad`` pads to that many rows instead (another table's bucket, so
    fits of its subsets run the programs compiled for it). The blocks' reference points are
    computed from the real rows only, or taken from ``ref`` (another table's
    ``data_pytree(...)["ref"]``: the sampling coordinates centred there instead; the posterior is
    the same, its coordinates are not)."""
    x, y = spec.space.read(df, log=True)
    fixed = spec.space.fixed_tree()
    if ref is not None:
        ref = {k: v for k, v in ref.items() if k != "__fixed__"}
    else:
        ref = _references(spec.blocks)(x) if spec.blocks else {}
    ref["__fixed__"] = fixed
    if pad is True:
        to = None
    elif pad is False:
        to = len(y)
    else:
        to = int(pad)
        if to < len(y):
            raise ValueError(f"pad={to} rows is fewer than the table's {len(y)}")
    x, y, w = pad_rows(x, y, to)
    return {"x": x, "y": y, "w": w, "fixed": fixed, "ref": ref,
            "scale": jnp.asarray(spec.scale if spec.scale is not None else 1.0, jnp.float64)}


_REFERENCES = Programs(8, "coordinate references")


def _references(blocks: tuple):
    """``f(x)``: the blocks' reference points of the inputs ``x``, one compiled program per
    blocks and table shape (computed eagerly, every operation would be a program of its own)."""
    return _REFERENCES.get(blocks, lambda: jax.jit(
        lambda x: {b.name: b.reference(x) for b in blocks}))
