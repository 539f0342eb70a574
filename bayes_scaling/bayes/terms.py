"""Power terms found in any law at the posterior mode, and the centred coordinates NUTS samples
them in (:func:`term_coordinates`, :func:`power_blocks`).

A law written without declared structure (a ScaleBench law, a user's own) still has power terms
``c v^(s e)`` (``s = -1`` for ``c / v^e``), possibly inside other functions (``exp(c N^e + E)``).
The data pin such a term near the centre of the table, so along its ridge ``log |c|`` moves as
``-s e log v0``: a line in ``(log c, e)``, but a curve in the ``(log c, log e)`` space positive
exponents are sampled in, and a curve in ``(c, e)`` for a coefficient of either sign. Sampling the
term's value at the centre of the table instead of ``c`` makes the ridge the line along ``e``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..laws import Coordinates, Param
from ..programs import Programs

#: the compiled pieces the coordinate checks read (this module and ``coordinates``), per model
_CHECKS = Programs(16, "coordinate checks")


def theta_s_one(spec):
    """``f(s, ref)``: ``spec.theta_s`` of one sampling vector, compiled (a dict by name).
    Eagerly, each parameter's transform and each block's map is several one-operation programs,
    each compiled or looked up on its own."""
    return _CHECKS.get(("theta_s", spec.key()), lambda: jax.jit(spec.theta_s), pin=spec.priors)


def law_jacobian_s(spec):
    """``f(s, ref, fixed, x) -> (params, law, jacobian)``: the law's parameters (``sigma`` left
    out) at one sampling vector ``s``, the law at the rows ``x`` and its Jacobian with respect
    to each parameter, in one compiled program (eagerly, about 25 programs for Chinchilla)."""
    def f(s, ref, fixed, x):
        full = {k: v for k, v in spec.space.full_params(spec.theta_s(s, ref), fixed).items()
                if k != "sigma"}
        return full, spec.law.fn(full, x), jax.jacfwd(lambda p: spec.law.fn(p, x))(full)

    return _CHECKS.get(("law_jac", spec.key()), lambda: jax.jit(f), pin=spec.priors)


# relative tolerance of the identity d f / d e = s c log(v) d f / d c at every row, and how much of
# the law's size the term must carry (c d f / d c) to count
TERM_RTOL = 1e-6
TERM_VISIBLE = 1e-6
_TERM_BLOCKS: dict = {}


def term_coordinates(coef: str, exponent: str, variable: str, sign: int,
                     positive: bool) -> Coordinates:
    """Centred coordinates of a power term ``coef * variable^(sign * exponent)``.

    With ``L0`` the mean of ``log variable`` over the table, the term's value at the centre is
    ``T = coef exp(sign exponent L0)``; ``T`` (a coefficient of either sign, ``log |det| =
    -sign exponent L0``) or ``log T`` (a positive one, ``log |det| = log coef``) replaces
    ``coef``, and the exponent is kept. A law may declare such a block (``Law.coordinates``);
    :func:`power_blocks` finds them at the mode."""
    key = (coef, exponent, variable, int(sign), bool(positive))
    if key in _TERM_BLOCKS:
        return _TERM_BLOCKS[key]
    name = f"{'log_' if positive else ''}{coef}_term_at_centre"
    s = float(sign)

    def ref(x):
        return {"L0": jnp.mean(jnp.log(x[variable]))}

    if positive:
        def to_params(c, r):
            return {coef: jnp.exp(c[name] - s * c[exponent] * r["L0"]), exponent: c[exponent]}

        def from_params(p, r):
            return {name: jnp.log(p[coef]) + s * p[exponent] * r["L0"], exponent: p[exponent]}

        def log_det(c, r):
            return c[name] - s * c[exponent] * r["L0"]
    else:
        def to_params(c, r):
            return {coef: c[name] * jnp.exp(-s * c[exponent] * r["L0"]), exponent: c[exponent]}

        def from_params(p, r):
            return {name: p[coef] * jnp.exp(s * p[exponent] * r["L0"]), exponent: p[exponent]}

        def log_det(c, r):
            return -s * c[exponent] * r["L0"]

    doc = (f"{'log ' if positive else ''}{coef} {variable}^({'+' if sign > 0 else '-'}{exponent}) "
           "at the centre of the table")
    block = Coordinates(f"term_{coef}", (coef, exponent),
                        (Param(name, init=(-5.0, 5.0), doc=doc), exponent),
                        to_params, from_params, ref, term_coordinates.__doc__, log_det=log_det)
    _TERM_BLOCKS[key] = block
    return block


def is_term_block(block: Coordinates) -> bool:
    """Whether ``block`` is a :func:`term_coordinates` block (as built, or resolved by a model)."""
    return any(block.to_params is b.to_params for b in _TERM_BLOCKS.values())


def power_blocks(spec, mode, data, skip=()) -> tuple:
    """The :func:`term_coordinates` blocks of the power terms of ``spec``'s law among its
    parameters sampled as themselves (not in ``skip``): pairs ``(c, e)`` and an input ``v`` with
    ``d f / d e = s c log(v) d f / d c`` at every row of the table (``s = +-1``), at the mode and at
    two Laplace draws around it, where the term moves the law by at least ``TERM_VISIBLE`` of its
    size. A coefficient bounded to one sign below 0 is left alone; each parameter is in at most
    one term (taken in the law's parameter order)."""
    if not mode.hessian_ok:
        return ()
    law, ref = spec.law, data["ref"]
    plain = [p for p in spec.plain if p.name != "sigma" and p.name not in skip]
    if len(plain) < 2:
        return ()
    n = int(np.sum(np.asarray(data["w"]) > 0))
    x = {k: np.asarray(v)[:n] for k, v in data["x"].items()}
    logs = {v: np.log(np.asarray(x[v])) for v in law.variables if v in x
            and np.all(np.asarray(x[v]) > 0) and np.ptp(np.log(np.asarray(x[v]))) > 0}
    if not logs:
        return ()
    rng = np.random.default_rng(0)
    s_hat, chol = np.asarray(mode.s), np.asarray(mode.chol)
    points = [s_hat] + [s_hat + np.clip(chol @ rng.standard_normal(len(s_hat)), -1, 1) * 0.5
                        for _ in range(2)]
    # on the table's padded rows (one program per row bucket), the padding cut off after
    pieces = law_jacobian_s(spec)
    grads = []
    for s in points:
        full, f, J = pieces(jnp.asarray(s), ref, data["fixed"], data["x"])
        grads.append(({k: np.asarray(v) for k, v in full.items()}, np.asarray(f)[:n],
                      {k: np.asarray(v)[:n] for k, v in J.items()}))
    names = [p.name for p in plain]
    by_name = {p.name: p for p in plain}
    used, out = set(), []
    for c in names:
        pc = by_name[c]
        if c in used or pc.upper <= 0:  # a coefficient of one sign below 0: left alone
            continue
        for e in names:
            if e == c or e in used:
                continue
            found = _term(c, e, logs, grads)
            if found is not None:
                v, sign = found
                out.append(term_coordinates(c, e, v, sign, positive=pc.lower >= 0))
                used |= {c, e}
                break
    return tuple(out)


def _term(c, e, logs, grads):
    """``(variable, sign)`` when ``(c, e)`` is a power term in that variable at every point."""
    for v, lv in logs.items():
        for sign in (-1, 1):
            if all(_term_at(c, e, lv, sign, *g) for g in grads):
                return v, sign
    return None


def _term_at(c, e, lv, sign, full, f, J) -> bool:
    """At one point: ``d f / d e = sign c log(v) d f / d c`` at every row, the term visible."""
    cv = float(full[c])
    dc, de = J[c] * cv, J[e]
    if cv == 0.0 or not (np.all(np.isfinite(dc)) and np.all(np.isfinite(de))):
        return False
    if np.max(np.abs(dc)) < TERM_VISIBLE * (np.max(np.abs(f)) + 1e-300):
        return False
    scale = np.max(np.abs(de)) + np.max(np.abs(lv * dc))
    return bool(np.max(np.abs(de - sign * lv * dc)) <= TERM_RTOL * scale + 1e-300)
