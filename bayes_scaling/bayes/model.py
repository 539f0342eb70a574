"""The NumPyro model of a :class:`~bayes_scaling.bayes.spec.Spec`, and its compiled densities
(cached per model structure, so new data of the same shape never recompiles).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import numpyro

from ..programs import Programs
from .distributions import HUBER_C, OnUnconstrained
from .likelihood import STUDENT_DF, Observation
from .priors import prior_given, prior_order
from .spec import Spec, make_spec


def build_model(law, *, priors=None, likelihood="huber", fixed=None, scale=None, c=HUBER_C,
                student_df=STUDENT_DF) -> Callable:
    """A NumPyro model function ``model(x, y=None)`` for ``law``.

    ``x`` is ``law.inputs(table)`` (a dict of arrays), ``y`` the observed ``log loss`` (or ``None``
    to simulate). Sample sites ``<name>_u`` hold each parameter on the real line (its Param
    transform, prior plus log-Jacobian); deterministic sites ``<name>`` hold the natural values;
    ``y`` is the observation site. ``numpyro.infer.Predictive(model, ...)`` works on it.

    The arguments are those of :func:`fit_posterior`.
    """
    spec = make_spec(law, priors=priors, likelihood=likelihood, fixed=fixed, scale=scale, c=c,
                     student_df=student_df)
    return numpyro_model(spec)


def numpyro_model(spec: Spec):
    fixed = spec.space.fixed_tree()

    def model(x, y=None):
        theta = {}
        # conditional priors after the parameters they depend on
        free = {p.name: p for p in spec.free}
        for p in (free[n] for n in prior_order(spec.priors, free)):
            prior = prior_given(spec.priors, p.name, {**fixed, **theta})
            u = numpyro.sample(f"{p.name}_u", OnUnconstrained(prior, p))
            theta[p.name] = numpyro.deterministic(p.name, p.from_unconstrained(u))
        sigma = theta["sigma"] if spec.scale is None else spec.scale
        mu = jnp.log(spec.law.fn(spec.space.full_params(theta, fixed), x))
        n = mu.shape[-1]
        with numpyro.plate("rows", n):
            numpyro.sample("y", Observation(spec.likelihood, mu, sigma, c=spec.c,
                                            student_df=spec.student_df), obs=y)

    model.spec = spec
    return model


#: the compiled densities and samplers of the most recently used models (``bayes_scaling.programs``:
#: a process that fits many laws frees the programs of the laws it no longer uses)
_CACHE = Programs(64, "models")


def cached(kind, spec: Spec, build):
    """``build()`` (a compiled function of ``spec``'s model), kept per ``(kind, spec.key())``."""
    # the priors are kept alive with the entry: the key holds their ids
    return _CACHE.get((kind, spec.key()), build, pin=spec.priors)


def map_objective(spec: Spec):
    """``f(u, args) = -log_joint(u) / n`` in the natural coordinates, for ``lbfgs_multistart``.

    The natural coordinates are ``log theta`` for scale parameters (``log_init``) and ``theta``
    otherwise: priors there are Normal-shaped, and a flat prior there makes the MAP the Huber fit.
    """

    def build():
        def f(u, args):
            theta = spec.theta(u)
            lp = spec.log_prior(theta) + spec.loglik(theta, args["data"])
            lp = lp + spec.log_jacobian_natural(u)
            return jnp.where(jnp.isfinite(lp), -lp / args["n"], jnp.inf)
        return f

    return cached("map", spec, build)


def map_objective_batch(spec: Spec):
    """:func:`map_objective` of a batch of points ``(k, n_free)``, compiled."""
    return cached("map_batch", spec, lambda: jax.jit(jax.vmap(map_objective(spec),
                                                               in_axes=(0, None))))


def log_joint_batch(spec: Spec):
    return cached("lj", spec, lambda: jax.jit(jax.vmap(
        lambda s, data: spec.log_joint_s(s, data), in_axes=(0, None))))


def unwhiten(z, center, chol, funnel=None, xp=jnp):
    """``(s, log |ds/dz| + const)``: the sampling vectors of whitened coordinates ``z`` (one per
    row; ``xp`` the array library, ``jnp`` or ``np``).

    ``funnel=None``: ``s = center + chol z`` (a constant Jacobian, returned as 0). ``funnel=i``
    (the index of ``log sigma`` in ``s``): the same, except that every coordinate but ``i`` moves
    from the centre in proportion to ``sigma``: with ``w = chol z`` and ``delta = w_i``,
    ``s_i = center_i + delta`` and ``s_j = center_j + exp(delta) w_j``. This is the non-centred
    form of a funnel (Neal 2003; Betancourt & Girolami 2015): where the data pin the parameters
    to within a multiple of ``sigma`` (a table the law fits almost exactly), their spread shrinks
    and grows with ``sigma`` and no one step size serves both ends, while in these coordinates
    it does not. ``ds/dw`` is block triangular with ``exp(delta)`` on ``d - 1`` diagonal
    entries, so ``log |ds/dz| = (d - 1) delta + log |chol|``."""
    w = xp.einsum("ij,...j->...i", chol, z)
    if funnel is None:
        return center + w, 0.0
    delta = w[..., funnel]
    others = xp.arange(w.shape[-1]) != funnel
    return center + w * xp.exp(delta[..., None] * others), (w.shape[-1] - 1) * delta


def whiten_funnel(s, center, funnel):
    """The inverse of :func:`unwhiten`'s funnel map before ``chol`` (NumPy): ``w`` of sampling
    vectors ``s`` (rows), so that ``z = chol^-1 w``."""
    w = np.asarray(s, float) - center
    others = np.arange(w.shape[-1]) != funnel
    return w * np.exp(-w[..., funnel][..., None] * others)


def log_joint_z(spec: Spec, funnel=None):
    """``f(z, data, center, chol)``: the sampled density at ``s`` of :func:`unwhiten` (the
    log-Jacobian of the funnel map included), one compiled program per ``funnel`` (NumPyro
    evaluates the model eagerly while it initialises the sampler: traced op by op, its every
    operation would be a program of its own)."""
    def f(z, data, center, chol):
        if funnel is None:  # the default program, as before the funnel map existed
            return spec.log_joint_s(center + chol @ z, data)
        s, jac = unwhiten(z, center, chol, funnel)
        return spec.log_joint_s(s, data) + jac

    return cached("lj_z" if funnel is None else ("lj_z", funnel), spec, lambda: jax.jit(f))


def to_s_batch(spec: Spec):
    return cached("to_s", spec, lambda: jax.jit(jax.vmap(
        lambda u, ref: spec.s(spec.theta(u), ref), in_axes=(0, None))))


def theta_s_batch(spec: Spec):
    return cached("theta_s", spec, lambda: jax.jit(jax.vmap(
        lambda s, ref: spec.theta_s(s, ref), in_axes=(0, None))))


def recoord_batch(src: Spec, dst: Spec):
    """``f(s, ref_src, ref_dst)``: points of ``src``'s sampling space (rows of ``s``) in
    ``dst``'s (two coordinate systems of one model)."""
    return cached(("recoord", dst.key()), src, lambda: jax.jit(jax.vmap(
        lambda s, r1, r2: dst.s(src.theta_s(s, r1), r2), in_axes=(0, None, None))))


def pointwise_batch(spec: Spec):
    return cached("ll", spec, lambda: jax.jit(jax.vmap(
        lambda th, data: spec.pointwise_loglik(th, data), in_axes=(0, None))))
