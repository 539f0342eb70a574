"""What the chains of a posterior's modes say: the modes' weights in the mixture (bridge
sampling), modes that chains split into groups found where the optimiser did not, and chains
stuck where the posterior has no mass. Used by :func:`~.api.fit_posterior` after each mode's
escalation ladder."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .model import log_joint_batch
from .modes import Basins, basin_log_masses, modes_from

# a mode whose bridge-sampled weight is below this is dropped (with a note)
MIN_MODE_WEIGHT = 1e-3


def _log_density(spec, data):
    """The sampled log density of a batch of points (rows), as a numpy array."""
    return lambda x: np.asarray(log_joint_batch(spec)(jnp.asarray(x), data))


def _laplace_basins(modes, sides=None, side_of=None) -> Basins:
    """The basins of ``modes`` by their Laplace Gaussians (with their sides, if any)."""
    d = len(modes[0].s)
    return Basins(np.stack([m.s for m in modes]),
                  np.stack([np.linalg.cholesky(m.cov + 1e-12 * np.trace(m.cov) * np.eye(d))
                            for m in modes]),
                  None if sides is None else np.asarray(sides), side_of)


def one_basin(modes, runs, sides=None, side_of=None, labels=None, when=""):
    """The modes found that are one basin with another: a mode one of whose chains (``runs[k]``,
    in the sampling space) ended mostly in another mode's basin (the modes' Laplace Gaussians,
    :class:`~.modes.Basins`) fell into it from where it was found, and is left out (the mode
    with the smallest share of its own basin first, then the others again). ``labels`` name the
    modes in the notes (their places among those found); ``when`` is said of the chains.

    Returns ``(keep, notes)``: the indices of the modes kept and one note per mode left out."""
    labels = list(range(len(runs))) if labels is None else list(labels)
    keep, notes = list(range(len(runs))), []
    while len(keep) > 1:
        sub = _laplace_basins([modes[k] for k in keep],
                              None if sides is None else np.asarray(sides)[keep], side_of)
        own = [min(np.mean(sub.assign(chain) == j) for chain in runs[k][0])
               for j, k in enumerate(keep)]
        if min(own) >= 0.5:
            break
        j = int(np.argmin(own))
        notes.append(f"mode {labels[keep[j]]} (of those found) is one basin with another: "
                     f"{1 - own[j]:.0%} of one of its chains ended in another mode's basin"
                     f"{when}; its draws are left out")
        del keep[j]
    return keep, notes


def first_runs(modes, run, in_space, sides=None, side_of=None):
    """Each mode's first run, in the order found, leaving out the modes that are one basin with
    another (the threshold of :func:`one_basin`): a mode in whose basin one chain of a mode
    already run ended mostly is not run (that chain explores it); after the runs, a mode one of
    whose chains fell into another's basin. ``run(k)`` gives mode ``k``'s first run and its
    seconds, ``in_space(k, s)`` the draws ``s`` of mode ``k``'s run in the sampling space.

    Returns ``(labels, first, notes)``: the modes kept (their indices), their first runs and
    one note per mode left out (no ladder of retries is climbed for it)."""
    labels, first, drawn, notes = [], [], [], []
    for k in range(len(modes)):
        if labels:
            ks = labels + [k]
            basins = _laplace_basins([modes[j] for j in ks],
                                     None if sides is None else np.asarray(sides)[ks], side_of)
            share, j = max((float(np.mean(basins.assign(chain) == len(labels))), j)
                           for j, s in zip(labels, drawn) for chain in s)
            if share >= 0.5:
                notes.append(f"mode {k} (of those found) is one basin with mode {j}: {share:.0%} "
                             f"of one of mode {j}'s chains ended in its basin; not run on its own")
                continue
        first.append(run(k))
        drawn.append(in_space(k, first[-1][0][0]))
        labels.append(k)
    keep, more = one_basin([modes[k] for k in labels], [(s,) for s in drawn],
                           None if sides is None else np.asarray(sides)[labels], side_of,
                           labels, when=" in its first run (not run again)")
    return [labels[i] for i in keep], [first[i] for i in keep], notes + more


def weigh_modes(spec, data, vdf, runs, modes, rng, diags, sides=None, side_of=None,
                labels=None):
    """Diagnose each mode's chains within the mode, drop modes that are one basin with another
    (:func:`one_basin`), weight the rest by their bridge-sampled mass and drop those weighing
    less than ``MIN_MODE_WEIGHT``. ``diags[k]``: mode ``k``'s diagnostics (computed within the
    mode); ``labels[k]``: its place among the modes found (the notes' numbering).

    Returns ``(keep, weights, diagnostics, notes)``: the indices of the kept modes, their
    weights and diagnostics, and one note per dropped mode."""
    d = len(spec.sampled)
    labels = list(range(len(runs))) if labels is None else list(labels)
    keep, notes = one_basin(modes, runs, sides, side_of, labels)

    def by_side(ks):
        return dict(sides=None if sides is None else np.asarray(sides)[ks], side_of=side_of)

    weights = np.ones(1)
    while len(keep) > 1:
        log_z, _ = basin_log_masses(_log_density(spec, data),
                                    [runs[k][0].reshape(-1, d) for k in keep], rng,
                                    **by_side(keep))
        weights = np.exp(log_z - np.logaddexp.reduce(log_z))
        if weights.min() >= MIN_MODE_WEIGHT:
            break
        j = int(np.argmin(weights))
        notes.append(f"mode {labels[keep[j]]} (of those found) dropped: its bridge-sampled weight "
                     f"{weights[j]:.1e} is below {MIN_MODE_WEIGHT:g}")
        del keep[j]
        weights = np.ones(1)
    return keep, weights, [diags[k] for k in keep], notes


def modes_of_split_chains(spec, data, modes, runs, diags, per_group=50):
    """Modes found by chains that split into groups (``diags[k]["chain_groups"]``) where the
    optimiser found fewer: damped Newton from the highest-density draw of each group (among
    ``per_group`` draws of its chains) and from the modes found, the endpoints grouped into
    distinct modes as the optimiser's are. Returns the new list of modes when it is longer,
    else ``None``."""
    starts = [m.s for m in modes]
    for (s, _), diag in zip(runs, diags):
        if diag["ok"] or len(diag.get("chain_groups", [])) < 2:
            continue
        for group in diag["chain_groups"]:
            x = s[group].reshape(-1, s.shape[-1])
            x = x[np.linspace(0, len(x) - 1, min(per_group, len(x))).astype(int)]
            lp = _log_density(spec, data)(x)
            if np.any(np.isfinite(lp)):
                starts.append(x[int(np.nanargmax(np.where(np.isfinite(lp), lp, -np.inf)))])
    if len(starts) == len(modes):
        return None
    found = modes_from(spec, data, starts)
    return found if len(found) > len(modes) else None


def drop_light_groups(spec, data, runs, diags, check, rng):
    """Leave out chains stuck where the posterior has no mass: when a mode's chains split into
    groups (``diags[k]["chain_groups"]``) that Newton does not take to distinct modes, each group
    is weighted by its bridge-sampled mass (:func:`basin_log_masses`, the groups' draws as the
    modes' draws), and the chains of groups weighing less than ``MIN_MODE_WEIGHT`` are left
    out, as a mode that light is (:func:`weigh_modes`). What is left is checked again by ``check``
    (its ESS threshold still counts every chain run). A chain that wandered onto a flat plateau
    hundreds of nats below the mode (a term of the law vanishing, the noise scale inflated to
    match) does not come back within any run the ladder can afford; the mass it stands for is
    negligible, and it is the only thing keeping the other chains from passing.

    Returns ``(runs, diags, notes)``, one note per mode whose chains were left out."""
    d = len(spec.sampled)
    notes = []
    runs, diags = list(runs), list(diags)
    for k, ((s, extra), diag) in enumerate(zip(runs, diags)):
        groups = diag.get("chain_groups", [])
        if diag["ok"] or len(groups) < 2:
            continue
        log_z, _ = basin_log_masses(_log_density(spec, data),
                                    [s[g].reshape(-1, d) for g in groups], rng)
        w = np.exp(log_z - np.logaddexp.reduce(log_z))
        light = [j for j in range(len(groups)) if not w[j] >= MIN_MODE_WEIGHT]
        keep = sorted(c for j, g in enumerate(groups) if j not in light for c in g)
        if not light or len(keep) < 2:
            continue
        run = (s[keep], None if extra is None else {n: v[keep] for n, v in extra.items()})
        runs[k], diags[k] = run, check(run)
        out = sorted(c for j in light for c in groups[j])
        notes.append(
            f"mode {k} (of those found): chain(s) {', '.join(map(str, out))} left out, their "
            f"group's bridge-sampled weight {max(w[j] for j in light):.1e} being below "
            f"{MIN_MODE_WEIGHT:g} (stuck where the posterior has no mass); the other "
            f"{len(keep)} chains " + ("passed their checks" if diags[k]["ok"] else
                                      "failed: " + "; ".join(diags[k]["failed"][:3])))
    return runs, diags, notes
