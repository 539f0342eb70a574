"""Sampling coordinates: reparameterisations NUTS samples instead of some of a law's parameters."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..laws import Param
from .priors import PTPP_REF, register_prior_reference


@dataclass(frozen=True)
class Coordinates:
    """Coordinates NUTS samples instead of some of a law's parameters (a reparameterisation).

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


def gate_coordinates(beta="beta", lam="lam", zeta="zeta", variable="ptpp") -> Coordinates:
    """Centred coordinates for a gated exponent ``beta_eff(v) = beta (1 - lam sigmoid(zeta log v))``.

    With ``v0`` the geometric mean of ``v`` over the table and ``s0 = sigmoid(zeta log v0)``,
    ``b = log beta_eff(v0) = log beta + log(1 - lam s0)`` (the exponent at the centre) replaces
    ``beta``; ``lam`` and ``zeta`` are sampled as themselves. Inverse:
    ``beta = exp(b) / (1 - lam s0)``; points with ``lam s0 >= 1`` (an exponent clipped to its
    floor at the centre) are outside the support.

    Why these and not more: the data pin the exponent at the centre hardest, and with ``beta``
    free it couples to ``lam`` and ``zeta`` along a curved ridge; ``b`` straightens it. The slope
    of ``log beta_eff`` in ``log v`` is also pinned on two PTPP levels, but as a coordinate
    (with ``zeta``) its map to ``lam`` has Jacobian ``1 / |zeta|``: the density is singular where
    the gate is flat (``zeta = 0``), and when the data cannot tell the gate's sign (its effect
    below the noise, as in most tables drawn from the prior) chains fall into that point and the
    step size collapses (1e-7 on such a table, with R-hat 2.5). ``lam`` and ``zeta`` keep the map
    regular.

    When the gate is visible, though, the data pin its slope, and in (``lam``, ``zeta``) that is a
    curved ridge that drives NUTS to its maximum tree depth. So this block has a ``switch``: when
    the slope at the posterior mode is more than ``GATE_VISIBLE_Z`` (4) Laplace standard
    deviations from 0, ``fit_posterior`` samples in :func:`gate_slope_coordinates` instead, whose
    singular point the chains then never approach.
    """

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x[variable]))}

    def to_params(c, r):
        g = c[lam] * jax.nn.sigmoid(c[zeta] * r["L0"])
        g = jnp.where(g < 1.0, g, jnp.nan)
        return {beta: jnp.exp(c["gate_log_exponent"]) / (1.0 - g), lam: c[lam], zeta: c[zeta]}

    def from_params(p, r):
        g = jnp.clip(p[lam] * jax.nn.sigmoid(p[zeta] * r["L0"]), 0.0, 1.0 - 1e-9)
        return {"gate_log_exponent": jnp.log(p[beta]) + jnp.log1p(-g), lam: p[lam], zeta: p[zeta]}

    def log_det(c, r):
        # only beta depends on b (d beta / d b = beta); lam and zeta map to themselves
        return jnp.log(to_params(c, r)[beta])

    def switch(theta_of_s, s_hat, cov, r, method):
        # the slope at the mode and its Laplace sd (delta method in the sampling coordinates)
        def kappa(sv):
            th = theta_of_s(sv)
            return gate_slope({"lam": th[lam], "zeta": th[zeta]}, r["L0"])

        k = float(kappa(s_hat))
        grad = np.asarray(jax.grad(kappa)(s_hat))
        sd = float(np.sqrt(max(grad @ cov @ grad, 0.0)))
        if not (np.isfinite(k) and abs(k) > GATE_VISIBLE_Z * sd):
            return None
        # NUTS: log |zeta| (no trajectory can leave the support); Laplace: zeta itself, where the
        # Gaussian fits better on the bible_ptpp fits (Pareto k 0.67 against 0.78, Form 2, target)
        sign = -np.sign(k) if method == "nuts" else None
        return gate_slope_coordinates(beta, lam, zeta, variable, sign=sign)

    coords = (Param("gate_log_exponent", init=(-3.0, 0.0), doc="log beta_eff at the centre"),
              lam, zeta)
    return Coordinates("gate", (beta, lam, zeta), coords, to_params, from_params, ref,
                       gate_coordinates.__doc__, log_det=log_det, switch=switch)


GATE_VISIBLE_Z = 4.0


def gate_slope(p, L0):
    """d log beta_eff / d log v at ``log v = L0``: ``-zeta (1 - s0) lam s0 / (1 - lam s0)``."""
    s0 = jax.nn.sigmoid(p["zeta"] * L0)
    g = p["lam"] * s0
    return -p["zeta"] * (1.0 - s0) * g / (1.0 - g)


def gate_slope_coordinates(beta="beta", lam="lam", zeta="zeta", variable="ptpp",
                           sign=None) -> Coordinates:
    """Coordinates for a gate the data can see: ``b = log beta_eff(v0)``, its slope
    ``kappa = d log beta_eff / d log v`` at ``v0`` (:func:`gate_slope`), and ``zeta`` (or, with
    ``sign`` given, ``log |zeta|``).

    Inverse: ``t = -kappa / zeta`` (> 0), ``lam = t / ((t + 1 - s0) s0)``,
    ``beta = exp(b) (t + 1 - s0) / (1 - s0)``. On two levels of ``v`` the data pin ``b`` and
    ``kappa``; the ridge that is curved in (``lam``, ``zeta``) is straight here. A slope requires
    ``kappa zeta < 0``. With ``zeta`` sampled as itself, points with ``kappa zeta >= 0`` are
    outside the support, and a NUTS trajectory can step across ``zeta = 0`` into them (a
    divergence). With ``sign`` (``-sign(kappa)`` at the posterior mode, chosen by
    :func:`gate_coordinates`' switch for NUTS), ``zeta = sign exp(gate_log_abs_zeta)``: the
    coordinates then cover exactly the support. The map to ``lam`` is singular at a flat gate
    (``zeta = 0``), which is why these are used only when the slope at the mode is clearly away
    from 0.
    """
    log_zeta = sign is not None
    sign = 1.0 if not log_zeta or sign >= 0 else -1.0
    zname = "gate_log_abs_zeta" if log_zeta else zeta

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x[variable]))}

    def to_params(c, r):
        z = sign * jnp.exp(c[zname]) if log_zeta else c[zname]
        s0 = jax.nn.sigmoid(z * r["L0"])
        t = -c["gate_slope"] / z
        t = jnp.where(t > 0, t, jnp.nan)
        lam_v = t / ((t + 1.0 - s0) * s0)
        beta_v = jnp.exp(c["gate_log_exponent"]) * (t + 1.0 - s0) / (1.0 - s0)
        return {beta: beta_v, lam: lam_v, zeta: z}

    def from_params(p, r):
        z = p[zeta]
        s0 = jax.nn.sigmoid(z * r["L0"])
        g = jnp.clip(p[lam] * s0, 1e-12, 1.0 - 1e-6)
        kappa = -z * (1.0 - s0) * g / (1.0 - g)
        return {"gate_log_exponent": jnp.log(p[beta]) + jnp.log1p(-g), "gate_slope": kappa,
                zname: jnp.log(jnp.abs(z)) if log_zeta else z}

    coords = (Param("gate_log_exponent", init=(-3.0, 0.0), doc="log beta_eff at the centre"),
              Param("gate_slope", init=(-0.5, 0.5), doc="d log beta_eff / d log v at the centre"),
              Param(zname, init=(-3.0, 1.0), doc="log |zeta| (zeta's sign fixed)") if log_zeta
              else zeta)
    return Coordinates("gate_slope", (beta, lam, zeta), coords, to_params, from_params, ref,
                       gate_slope_coordinates.__doc__)


def power_coordinates(coef="A", exponent="alpha", variable="N") -> Coordinates:
    """Centred coordinates for a power term ``coef / v^exponent``.

    ``coef_at_centre = log coef - exponent log v0`` (the term's log value at ``v0``, the
    geometric mean of ``v`` over the table) replaces ``coef``; the exponent is kept. The data pin
    the term near the centre of the table, so ``log coef`` and the exponent are otherwise tied by
    ``log coef = c + exponent log v0``: a line in ``(log coef, exponent)`` but a curve in the
    ``(log coef, log exponent)`` space exponents are sampled in. Here it is straight.
    """
    name = f"{coef}_at_centre"

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x[variable]))}

    def to_params(c, r):
        return {coef: jnp.exp(c[name] + c[exponent] * r["L0"]), exponent: c[exponent]}

    def from_params(p, r):
        return {name: jnp.log(p[coef]) - p[exponent] * r["L0"], exponent: p[exponent]}

    return Coordinates(f"power_{coef}", (coef, exponent),
                       (Param(name, init=(-5.0, 5.0), doc=f"log {coef}/{variable}^{exponent} at the "
                                                          "centre of the table"), exponent),
                       to_params, from_params, ref, power_coordinates.__doc__)


def _centre_row(x):
    """The table row closest to the centre of the table (standardised log coordinates)."""
    X = jnp.stack([jnp.log(jnp.maximum(x[v], 1e-300)) for v in sorted(x)], -1)
    z = (X - X.mean(0)) / (X.std(0) + 1e-12)
    i = jnp.argmin(jnp.sum(z * z, -1))
    return {v: x[v][i][None] for v in x}


_LEVEL_BLOCKS: dict = {}


def level_coordinates(coefs=("E",)) -> Coordinates:
    """Sample the law's level at the centre of the table and the shares of its linear terms.

    For parameters ``c_1..c_J`` that enter the law linearly, ``f = sum_j c_j g_j(x) + h(x)``
    (``g_j`` and ``h`` depend on the other parameters), with ``x0`` the table row closest to the
    centre of the table (in standardised log coordinates) and ``T_j = c_j g_j(x0)`` the terms there:

        log_level = log f(theta, x0)
        share_j   = log T_j - log T_1          for j = 2..J   (log-ratio to the first term)

    Inverse: ``w = softmax(0, share_2, .., share_J)``, ``c_j = (exp(log_level) - h(x0)) w_j /
    g_j(x0)``. Every ``c_j`` is positive by construction and the terms sum to the level exactly.

    Why: the data pin ``f`` near the centre to within the noise, so the positive terms
    (``E``, ``A/N^alpha``, a floor ``F/PTPP^eta`` on two PTPP levels, ...) must add up to a known
    number. With each ``log c_j`` a coordinate, that sum constraint is a sharply curved surface
    (a term's log is free while it is small and pinned once it carries the sum) and, with one
    term solved from the others, a wall where it reaches 0. Here the level is one coordinate, the
    split is a smooth log-ratio, and the coefficient of each power term moves with its exponent
    (``log c_j = log T_j - log g_j(x0)``), which also centres the power terms.
    """
    coefs = tuple(coefs)
    if coefs in _LEVEL_BLOCKS:
        return _LEVEL_BLOCKS[coefs]
    share_names = tuple(f"share_{c}" for c in coefs[1:])

    def ref(x):
        return {"x": _centre_row(x)}

    def split(r, law, others):
        # f is linear in the coefficients, f = h + g . c: one batched evaluation at c = 0, e_j
        basis = jnp.concatenate([jnp.zeros((1, len(coefs))), jnp.eye(len(coefs))])
        vals = jax.vmap(lambda cv: law.fn({**others, **{c: cv[j] for j, c in enumerate(coefs)}},
                                          r["x"])[0])(basis)
        return vals[1:] - vals[0], vals[0]

    def with_log_det(c, r, law, others):
        g, h = split(r, law, others)
        y = jnp.stack([jnp.zeros(())] + [c[n] for n in share_names])
        w = jax.nn.softmax(y)
        rest = jnp.exp(c["log_level"]) - h
        rest = jnp.where(rest > 0, rest, jnp.nan)
        vals = rest * w / g
        # d log c / d (log_level, shares) has determinant exp(log_level) / rest
        ld = c["log_level"] - jnp.log(rest) + jnp.sum(jnp.log(vals))
        return {n: vals[j] for j, n in enumerate(coefs)}, ld

    def to_params(c, r, law, others):
        return with_log_det(c, r, law, others)[0]

    def from_params(p, r, law, others):
        g, h = split(r, law, others)
        T = jnp.stack([p[n] for n in coefs]) * g
        out = {"log_level": jnp.log(jnp.sum(T) + h)}
        out.update({n: jnp.log(T[j + 1]) - jnp.log(T[0]) for j, n in enumerate(share_names)})
        return out

    coords = (Param("log_level", init=(-1.0, 3.0), doc="log of the law at the centre"),) + tuple(
        Param(n, init=(-5.0, 5.0), doc=f"log {n[6:]}-term / {coefs[0]}-term at the centre")
        for n in share_names)
    block = Coordinates("level", coefs, coords, to_params, from_params, ref,
                        level_coordinates.__doc__, uses_law=True, with_log_det=with_log_det)
    _LEVEL_BLOCKS[coefs] = block
    return block


# Laws declare their sampling coordinates by their function (renamed copies of a law share it).
SAMPLING_COORDINATES: dict[Callable, tuple] = {}


LINEAR_COEFFICIENTS: dict[Callable, tuple] = {}


def register_coordinates(fn: Callable, *blocks: Coordinates, linear: tuple = ()):
    """Declare sampling coordinates for every law whose function is ``fn``.

    ``linear`` names parameters that enter the law linearly (``f = c g + h``); the free ones are
    replaced by the level of the law at the centre of the table and the shares of their terms
    (:func:`level_coordinates`), and blocks that touch them are then not used."""
    SAMPLING_COORDINATES[fn] = tuple(blocks)
    LINEAR_COEFFICIENTS[fn] = tuple(linear)


def _register_builtin_coordinates():
    from ..laws import m3, ptpp

    size = power_coordinates("A", "alpha", "N")
    data = power_coordinates("B", "beta", "D")
    barrier = power_coordinates("C", "gamma", "replay")
    floor = power_coordinates("F", "eta", "ptpp")
    gate = gate_coordinates()
    lin = ("E", "A", "B", "C")
    register_coordinates(ptpp._dcpt, size, data, barrier, linear=lin)
    register_coordinates(ptpp._floor, size, data, barrier, floor, linear=lin + ("F",))
    register_coordinates(ptpp._gated, size, gate, barrier, linear=lin)
    register_coordinates(ptpp._gated_floor, size, gate, barrier, floor, linear=lin + ("F",))
    for fn in (ptpp._floor, ptpp._gated_floor):
        register_prior_reference(fn, "F", "eta", PTPP_REF)
    register_coordinates(m3._chinchilla, size, data, linear=("E", "A", "B"))
    register_coordinates(m3._muennighoff, linear=("E",))


_register_builtin_coordinates()
