"""Sampling coordinates: reparameterisations NUTS samples instead of some of a law's parameters.

A law declares its own blocks (``Law.coordinates``, e.g. the PTPP gate in ``laws/ptpp.py``) and the
coefficients that enter it linearly (``Law.linear``); this module holds the blocks that apply to
any law (power-term centring, the level of the law and the shares of its linear terms, the law's
values at some rows for the signed coefficients it is affine in, the asinh scale of a wide signed
coefficient) and picks the blocks a model samples in (:func:`choose_blocks`, and
:func:`linear_block` and :func:`signed_blocks` at the posterior mode).
"""
from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ..errors import BayesScalingError
from ..laws import Coordinates, Law, Param
from ..programs import Programs
from .terms import term_coordinates, theta_s_one


def power_coordinates(coef="A", exponent="alpha", variable="N") -> Coordinates:
    """Deprecated: ``term_coordinates(coef, exponent, variable, sign=-1, positive=True)``.

    Centred coordinates for a power term ``coef / v^exponent`` (its log value at the centre of the
    table replaces ``coef``; :mod:`.terms` has the math). The coordinate is now named
    ``log_{coef}_term_at_centre`` and the block ``term_{coef}``; the power terms of any law are
    also found at the posterior mode without declaring them (:func:`.terms.power_blocks`).
    """
    warnings.warn("bs.bayes.power_coordinates is deprecated: use bs.bayes.term_coordinates(coef, "
                  "exponent, variable, sign=-1, positive=True) (coordinate "
                  f"'log_{coef}_term_at_centre', block 'term_{coef}')", DeprecationWarning,
                  stacklevel=2)
    return term_coordinates(coef, exponent, variable, sign=-1, positive=True)


def _centre_row(x):
    """The table row closest to the centre of the table (standardised coordinates: log where a
    column is positive throughout, as it is otherwise, as :func:`bayes_scaling.data.input_space`)."""
    X = jnp.stack([jnp.where(jnp.all(x[v] > 0), jnp.log(jnp.maximum(x[v], 1e-300)), x[v])
                   for v in sorted(x)], -1)
    z = (X - X.mean(0)) / (X.std(0) + 1e-12)
    i = jnp.argmin(jnp.sum(z * z, -1))
    return {v: x[v][i][None] for v in x}


def _affine_parts(law, coefs, others, x):
    """``(h, G)`` with ``law(others + c, x) = h + G c`` when the law is affine in ``coefs``: one
    batched evaluation at ``c = 0`` and at each unit vector (``G`` is rows x coefficients)."""
    basis = jnp.concatenate([jnp.zeros((1, len(coefs))), jnp.eye(len(coefs))])
    vals = jax.vmap(lambda cv: law.fn({**others, **{c: cv[j] for j, c in enumerate(coefs)}},
                                      x))(basis)
    return vals[0], (vals[1:] - vals[0]).T


_LEVEL_BLOCKS: dict = {}


def level_coordinates(coefs=("E",), at=()) -> Coordinates:
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

    ``at``: ``((variable, "min" | "max"), ...)`` moves ``x0``'s value of those variables to the
    table's smallest or largest (:func:`level_pivot` chooses them at the posterior mode).
    """
    coefs, at = tuple(coefs), tuple(at)
    if (coefs, at) in _LEVEL_BLOCKS:
        return _LEVEL_BLOCKS[coefs, at]
    share_names = tuple(f"share_{c}" for c in coefs[1:])

    def ref(x):
        row = _centre_row(x)
        for v, side in at:
            row[v] = (jnp.min(x[v]) if side == "min" else jnp.max(x[v]))[None]
        return {"x": row}

    def split(r, law, others):
        # f is linear in the coefficients, f = h + g . c at the centre row
        h, G = _affine_parts(law, coefs, others, r["x"])
        return G[0], h[0]

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
    name = "level" + "".join(f" ({v} at its {side})" for v, side in at)
    block = Coordinates(name, coefs, coords, to_params, from_params, ref,
                        level_coordinates.__doc__, uses_law=True, with_log_det=with_log_det)
    _LEVEL_BLOCKS[coefs, at] = block
    return block


# A variable is a candidate pivot of the level block when the table holds 2 to this many distinct
# values of it (training stages, parallelism degrees, epochs): a power term in it has its exponent
# pinned by a few differences only. And the pivot moves when the product of the block's
# coordinates' Laplace variances falls to at most this share of the centre's.
PIVOT_DISTINCT = 4
PIVOT_GAIN = 0.5


def level_pivot(spec, mode, data, method) -> Coordinates | None:
    """The level block (:func:`level_coordinates`) with ``x0`` moved to the smallest or largest
    value of a variable the table holds at a few values only, when that makes its coordinates
    better determined at the mode, or ``None`` (NUTS only; Laplace keeps its coordinates).

    Why: with a floor ``F / PTPP^eta`` fitted on two PTPP stages, the data pin the floor's values
    at both, so along the ridge of ``eta`` its value at the centre row's stage (the larger one,
    say) falls as ``exp(-eta log(31/15))``: a curve that bends more the larger ``eta``, in the
    ``log eta`` NUTS samples, where it diverges. At the smaller stage the floor's value tends to
    the pinned difference and the ridge is straight. Generally: the coordinates of a term are
    best centred where the term is best determined (for a term of many values, the centre of the
    table; :func:`.terms.term_coordinates`). The criterion is the product of the Laplace variances
    of the block's coordinates (``log_level`` and the shares; a sum of logs, so a share the data pin
    tightly counts as much as a wide one), the diagonal of ``J C J^T`` with ``C`` the mode's
    covariance in the current sampling coordinates and ``J`` the Jacobian of the block's
    coordinates at each candidate ``x0``; candidates are taken one variable at a time, greedily."""
    blocks = [b for b in spec.blocks if is_level_block(b)]
    if method != "nuts" or not blocks or not mode.hessian_ok:
        return None
    block = blocks[0]
    n = int(np.sum(np.asarray(data["w"]) > 0))
    x = {k: np.asarray(v)[:n] for k, v in data["x"].items()}
    few = [v for v in sorted(x) if 2 <= len(np.unique(x[v])) <= PIVOT_DISTINCT]
    if not few:
        return None
    ref = data["ref"]
    jac = _PIVOT_JACOBIANS.get(spec.key(), lambda: _pivot_jacobian(spec, block))
    row0 = {k: np.asarray(v) for k, v in ref[block.name]["x"].items()}
    cov = np.asarray(mode.cov)

    def scores(rows):
        J = np.asarray(jac(jnp.asarray(mode.s), {k: jnp.asarray(np.stack(rows[k])) for k in rows},
                           ref, data["fixed"]))
        var = np.einsum("kij,jl,kil->ki", J, cov, J)
        with np.errstate(all="ignore"):
            out = np.sum(np.log(var), axis=1)
        return np.where(np.isfinite(out), out, np.inf)

    at, best = (), None
    for v in few:
        rows = {k: [row0[k]] * 3 for k in row0}
        rows[v] = [row0[v], x[v].min()[None], x[v].max()[None]]
        sc = scores(rows)
        best = sc[0] if best is None else best
        k = int(np.argmin(sc))
        if k and sc[k] <= best + math.log(PIVOT_GAIN):
            at += ((v, ("min", "max")[k - 1]),)
            row0 = {**row0, v: rows[v][k]}
            best = sc[k]
    return level_coordinates(block.params, at) if at else None


_PIVOT_JACOBIANS = Programs(8, "level pivot Jacobians")


def _pivot_jacobian(spec, block):
    """``J(s, rows, ref, fixed)``: the Jacobian of ``block``'s coordinates at each of ``rows``
    (taken as ``x0``) with respect to ``spec``'s sampling vector ``s``; one program per model,
    the table's references and fixed values its arguments."""
    coefs, law = block.params, spec.law

    def coords_at(s, row, ref, fixed):
        full = {k: v for k, v in spec.space.full_params(spec.theta_s(s, ref), fixed).items()
                if k != "sigma"}
        others = {k: v for k, v in full.items() if k not in coefs}
        c = block.from_params({k: full[k] for k in coefs}, {"x": row}, law, others)
        return jnp.stack([c[p.name] for p in block.coords])

    return jax.jit(jax.vmap(jax.jacfwd(coords_at), in_axes=(None, 0, None, None)))


def choose_blocks(law: Law, free: tuple, fixed: dict, coordinates="auto", level=None) -> tuple:
    """The coordinate blocks a model of ``law`` samples in (see :func:`make_spec`).

    ``coordinates="auto"``: the law's declared blocks, skipping any that touches a fixed
    parameter, and (unless ``level`` is given) the level block of its free linear coefficients,
    which replaces the blocks that touch them. ``None``: none. A tuple: those blocks.
    Blocks that read the law (``uses_law``) come last."""
    if coordinates == "auto":
        blocks = tuple(b for b in law.coordinates if not set(b.params) & set(fixed))
        if level is None:
            level = tuple(c for c in law.linear if c not in fixed) or None
    elif coordinates is None:
        blocks = ()
    else:
        blocks = tuple(coordinates)
        missing = {n for b in blocks for n in b.params} - {p.name for p in free}
        if missing:
            raise BayesScalingError(f"coordinates replace {sorted(missing)}, which are not free "
                                    f"parameters of {law.name}")
    if level is not None:
        level = (level,) if isinstance(level, str) else tuple(level)
        if set(level) & set(fixed):
            raise BayesScalingError(f"level coefficients {level} include fixed ones")
        blocks = tuple(b for b in blocks if not set(b.params) & set(level))
        blocks = blocks + (level_coordinates(level),)
    taken = [n for b in blocks for n in b.params]
    if len(taken) != len(set(taken)):
        raise BayesScalingError(f"coordinate blocks overlap: {taken}")
    blocks = tuple(_resolve_block(b, law) for b in blocks)
    return tuple(b for b in blocks if not b.uses_law) + tuple(b for b in blocks if b.uses_law)


_RESOLVED: dict = {}


def is_level_block(block: Coordinates) -> bool:
    """Whether ``block`` is a :func:`level_coordinates` block (as declared or as a model resolved
    it), whatever its name: a law may declare a block of its own called "level"."""
    origin = {id(resolved): o for resolved, o in _RESOLVED.values() if resolved is not o}
    for _ in range(len(origin) + 1):  # a resolved block may be resolved again (a model's switch)
        if any(block is b for b in _LEVEL_BLOCKS.values()):
            return True
        if id(block) not in origin:
            return False
        block = origin[id(block)]
    return False


def _resolve_block(block: Coordinates, law: Law) -> Coordinates:
    """Replace coordinate names that refer to law parameters by the law's Param specs (cached, so
    a law's resolved blocks keep their identity and compiled programs are reused)."""
    key = (id(block), law.name, law.fn)
    if key not in _RESOLVED:
        coords = tuple(law.param(c) if isinstance(c, str) else c for c in block.coords)
        _RESOLVED[key] = (dataclasses.replace(block, coords=coords), block)
    return _RESOLVED[key][0]


# A signed parameter is "wide" when its bounds span at least this many times its size at the mode
# (the larger of |value| and its Laplace sd) and at least this many units: a coefficient the
# law's author left free to take any sign and any magnitude, e.g. ScaleBench's ``c`` in ``c N^q``
# bounded by +-1e6 (exponents bounded by (-2, 0.5) or (-5, 5) are not).
SIGNED_WIDE = 100.0
_SIGNED_BLOCKS: dict = {}


def _log_cosh(v):
    a = jnp.abs(v)
    return a + jnp.log1p(jnp.exp(-2.0 * a)) - math.log(2.0)


def signed_coordinates(name: str, scale: float) -> Coordinates:
    """Sample a signed coefficient ``c`` as ``asinh(c / scale)``.

    ``c = scale sinh(v)``: linear in ``v`` for ``|c| < scale`` and ``sign(c) (log 2|c| - log
    scale)`` beyond, so a coefficient of either sign whose posterior spans orders of magnitude
    (``c`` in ``c N^q`` with ``q`` uncertain: the data pin ``c N0^q`` near the centre of the
    table, so ``c`` moves as ``exp(-q log N0)``, a curved ridge in ``(c, q)``) is sampled on a
    log scale where the ridge is straight, while a posterior that straddles 0 stays on a linear
    one. ``log |dc/dv| = log scale + log cosh v``. The prior stays on ``c``.
    """
    key = (name, float(scale))
    if key in _SIGNED_BLOCKS:
        return _SIGNED_BLOCKS[key]
    coord = f"asinh_{name}"
    s = float(scale)

    def to_params(c, r):
        return {name: s * jnp.sinh(c[coord])}

    def from_params(p, r):
        return {coord: jnp.arcsinh(p[name] / s)}

    def log_det(c, r):
        return math.log(s) + _log_cosh(c[coord])

    block = Coordinates(f"signed_{name}", (name,),
                        (Param(coord, init=(-3.0, 3.0), doc=f"asinh({name} / {s:g})"),),
                        to_params, from_params, lambda x: {}, signed_coordinates.__doc__,
                        log_det=log_det)
    _SIGNED_BLOCKS[key] = block
    return block


def _signed_plain(spec) -> list:
    """``spec``'s parameters sampled as themselves whose bounds lie on both sides of 0."""
    return [p for p in spec.plain if p.name != "sigma" and p.lower < 0 < p.upper
            and p.kind in ("interval", "real")]


def wide_signed(spec, mode, ref) -> dict:
    """``{name: Laplace sd}`` of ``spec``'s wide signed parameters at ``mode``: sampled as
    themselves, bounds on both sides of 0 spanning at least ``SIGNED_WIDE`` times their size
    there (the larger of ``|value|`` and the Laplace sd) and at least ``SIGNED_WIDE`` units.

    Where the Hessian at the mode is not positive definite, the size is ``|value|`` alone. Such a
    parameter is often the cause: ScaleBench data_constrained sl_7's ``C`` in (-1e13, 1e13) at
    115 has a curvature of 1e25 on its own coordinate beside 1 on the others, beyond what float64
    resolves; on the asinh scale it is of the others' order."""
    names = [p.name for p in spec.sampled]
    s_hat = jnp.asarray(mode.s)
    theta = theta_s_one(spec)(s_hat, ref)
    out = {}
    for p in _signed_plain(spec):
        i = names.index(p.name)
        # the plain parameter is a function of its own coordinate only
        dth = jax.grad(lambda v, i=i, p=p: p.from_unconstrained(v))(s_hat[i])
        sd = (float(abs(dth) * math.sqrt(max(float(mode.cov[i, i]), 0.0)))
              if mode.hessian_ok else 0.0)
        size = max(abs(float(theta[p.name])), sd)
        span = (p.upper - p.lower) if math.isfinite(p.upper - p.lower) else p.init[1] - p.init[0]
        if size > 0 and math.isfinite(size) and span >= SIGNED_WIDE * max(size, 1.0):
            out[p.name] = sd if sd > 0 else size
    return out


def signed_blocks(spec, mode, ref, skip=()) -> tuple:
    """The :func:`signed_coordinates` blocks of ``spec``'s wide signed parameters
    (:func:`wide_signed`) not in ``skip``, each scaled by its Laplace sd at the mode rounded to
    a power of ten (so refits of similar tables share their compiled programs)."""
    return tuple(signed_coordinates(n, 10.0 ** round(math.log10(sd)))
                 for n, sd in wide_signed(spec, mode, ref).items() if n not in skip)


# ``linear_block``: the relative tolerance of its check that the law is affine in a coefficient,
# and how much of the law's size a coefficient moved by its own size must move it by at least
LINEAR_RTOL = 1e-7
LINEAR_VISIBLE = 1e-6
_LINEAR_BLOCKS: dict = {}


def linear_coordinates(coefs: tuple, points: dict) -> Coordinates:
    """Sample the coefficients ``c_1..c_J`` a law is affine in as its values at ``J`` points.

    With the other parameters held, ``f(x) = h(x) + sum_j c_j g_j(x)``. At the points
    ``x_1..x_J`` (rows of the table, :func:`linear_block`) the coordinates are
    ``value_k = f(x_k)``; the inverse solves ``G c = value - h`` with ``G_kj = g_j(x_k)``, and
    ``log |det dc / dvalue| = -log |det G|``. The priors stay on the coefficients.

    Why: the data pin the law's values at the table's rows to within the noise, whatever the
    exponents inside ``g_j``; the coefficients are not pinned. In ``c0 + c1 (N^-alpha +
    S^-beta)`` on sizes spanning one decade, ``c1 alpha`` and ``c0 + c1`` are fixed by the data
    while ``c1`` grows as ``1 / alpha`` and ``c0`` falls with it: a ridge curved in any
    coordinates of ``(c0, c1, alpha)``, through ``c0 = 0``. In the values it is the line along
    ``alpha`` alone. Unlike :func:`level_coordinates` the coefficients may take either sign.
    """
    key = (tuple(coefs), tuple((k, np.asarray(v).tobytes()) for k, v in sorted(points.items())))
    if key in _LINEAR_BLOCKS:
        return _LINEAR_BLOCKS[key]
    names = tuple(f"value_{k + 1}" for k in range(len(coefs)))
    pts = {k: np.asarray(v) for k, v in points.items()}

    def ref(x):
        return {"x": {k: jnp.asarray(v) for k, v in pts.items()}}

    def with_log_det(c, r, law, others):
        h, G = _affine_parts(law, coefs, others, r["x"])
        vals = jnp.linalg.solve(G, jnp.stack([c[n] for n in names]) - h)
        return {n: vals[j] for j, n in enumerate(coefs)}, -jnp.linalg.slogdet(G)[1]

    def to_params(c, r, law, others):
        return with_log_det(c, r, law, others)[0]

    def from_params(p, r, law, others):
        vals = law.fn({**others, **p}, r["x"])
        return {n: vals[k] for k, n in enumerate(names)}

    block = Coordinates(
        "linear", tuple(coefs),
        tuple(Param(n, init=(0.5, 5.0), doc=f"the law's value at point {k + 1}")
              for k, n in enumerate(names)),
        to_params, from_params, ref, linear_coordinates.__doc__, uses_law=True,
        with_log_det=with_log_det)
    _LINEAR_BLOCKS[key] = block
    return block


def linear_block(spec, mode, data) -> tuple:
    """The :func:`linear_coordinates` block of ``spec``'s signed coefficients (bounds on both
    sides of 0, sampled as themselves) the law is affine in, or ``()``. Two or more have a ridge
    between them (``c0`` falls as ``c1`` grows); a lone offset such as ``E`` in ``(A / (N (k log
    S + 1)))^alpha + E`` has one with the terms it offsets (``E`` falls as the power term rises
    with its exponent) and is sampled as the law's value at one row.

    Coefficients are taken in order while the law stays jointly affine in those taken, at the
    mode and at 8 Laplace draws around it (each clipped to 3 sds), each coefficient moved to
    random values of 1 and 10 times its size (the larger of its value at the mode and its spread
    over the draws). The points are the table rows whose rows of ``G`` at the mode are the best
    conditioned (a column-pivoted QR; for an offset every row ties and the first is taken).
    Skipped when another block reads the law (its parameters would depend on these)."""
    if not mode.hessian_ok or any(b.uses_law for b in spec.blocks):
        return ()
    ref = data["ref"]
    cand = [p.name for p in _signed_plain(spec)]
    if not cand:
        return ()
    n = int(np.sum(np.asarray(data["w"]) > 0))
    x = {k: np.asarray(v)[:n] for k, v in data["x"].items()}
    law = spec.law
    s_hat = np.asarray(mode.s)
    rng = np.random.default_rng(0)
    chol = np.asarray(mode.chol)
    theta_s = theta_s_one(spec)
    thetas = [theta_s(jnp.asarray(s_hat), ref)]
    for _ in range(8):
        s = s_hat + np.clip(chol @ rng.standard_normal(len(s_hat)), -3, 3)
        thetas.append(theta_s(jnp.asarray(s), ref))
    size = {c: max(abs(float(thetas[0][c])), float(np.std([float(t[c]) for t in thetas])), 1e-3)
            for c in cand}

    def affine(coefs, theta):
        full = {k: v for k, v in spec.space.full_params(theta, data["fixed"]).items()
                if k != "sigma"}
        others = {k: v for k, v in full.items() if k not in coefs}
        h, G = (np.asarray(a) for a in _affine_parts(law, coefs, others, x))
        # a coefficient the law barely sees (its term vanishes here) is affine in a trivial way,
        # and would make G singular: each must move the law by 1e-6 of its size when moved by 1x
        moves = np.max(np.abs(G), axis=0) * np.array([size[c] for c in coefs])
        if not np.all(moves >= LINEAR_VISIBLE * np.max(np.abs(np.asarray(law.fn(full, x))))):
            return None
        for scale in (1.0, 10.0):
            cv = np.array([size[c] * scale * rng.standard_normal() for c in coefs])
            f = np.asarray(law.fn({**others, **{c: cv[j] for j, c in enumerate(coefs)}}, x))
            pred = h + G @ cv
            tol = LINEAR_RTOL * (np.abs(f) + np.abs(h) + np.abs(G) @ np.abs(cv) + 1e-12)
            if not (np.all(np.isfinite(f)) and np.all(np.abs(f - pred) <= tol)):
                return None
        return G

    coefs = ()
    for c in cand:  # greedily: E (1 + c N^q) is affine in E and in c, not in both
        if all(affine(coefs + (c,), t) is not None for t in thetas):
            coefs += (c,)
    G = affine(coefs, thetas[0]) if coefs else None
    if G is None or len(G) < len(coefs):
        return ()
    # the rows with the best-conditioned G: a column-pivoted QR of G^T (columns scaled)
    Gn = G / np.maximum(np.linalg.norm(G, axis=0), 1e-300)
    rows = np.sort(scipy.linalg.qr(Gn.T, pivoting=True, mode="r")[1][:len(coefs)])
    if np.linalg.matrix_rank(G[rows]) < len(coefs):
        return ()
    return (linear_coordinates(coefs, {k: v[rows] for k, v in x.items()}),)
