"""Where a NUTS run's divergent transitions sit in the posterior, named in its refusal.

A divergence is reported with the draw of the trajectory it ended (NumPyro's ``diverging``), so
divergent draws mark the region the sampler could not follow. When they crowd into one end of a
parameter's posterior (the neck of a funnel: a term whose coefficient vanishes, where its exponent
is free; a scale near 0), that parameter is the one to inform, fix or reparameterise; "the
parameters involved" alone leaves the user to find it in a pairs plot.
"""
from __future__ import annotations

import numpy as np

#: divergent draws whose mean rank among a parameter's draws lies below this share (or above one
#: minus it) sit at that end of its posterior
TAIL = 0.15
#: at most this many parameters are named
MAX_NAMED = 3


def divergence_sites(draws: dict, diverging) -> list[dict]:
    """The parameters at one end of whose posterior the divergent draws sit.

    Args:
        draws: ``{name: array}``, every parameter's draws, of one shape (chains, draws).
        diverging: booleans of that shape, the draws of divergent transitions.

    Returns:
        one dict per parameter (most extreme first, at most :data:`MAX_NAMED`): ``name``,
        ``side`` ("low" or "high"), ``share`` (the mean rank of its divergent draws, 0-1),
        ``lo``/``hi`` (the range of their values) and ``within`` (the share of all draws on that
        side of the farthest divergent draw).
    """
    div = np.asarray(diverging, bool).reshape(-1)
    if not div.any():
        return []
    out = []
    for name, x in draws.items():
        x = np.asarray(x, float).reshape(-1)
        if x.shape != div.shape or not np.all(np.isfinite(x)) or np.ptp(x) == 0:
            continue
        ranks = (np.argsort(np.argsort(x, kind="stable"), kind="stable") + 0.5) / len(x)
        share = float(ranks[div].mean())
        if TAIL <= share <= 1.0 - TAIL:
            continue
        side = "low" if share < TAIL else "high"
        v = x[div]
        edge = v.max() if side == "low" else v.min()
        within = float(np.mean(x <= edge) if side == "low" else np.mean(x >= edge))
        out.append(dict(name=name, side=side, share=share, lo=float(v.min()), hi=float(v.max()),
                        within=within))
    out.sort(key=lambda s: -abs(s["share"] - 0.5))
    return out[:MAX_NAMED]


def describe_sites(sites: list[dict]) -> str:
    """``"at the low end of g (0.11-0.16, its lowest 8% of draws)"``, one clause per parameter,
    or ``""``."""
    parts = []
    for s in sites:
        span = f"{s['lo']:.3g}" if s["lo"] == s["hi"] else f"{s['lo']:.3g}-{s['hi']:.3g}"
        parts.append(f"the {s['side']} end of {s['name']} ({span}, its "
                     f"{'lowest' if s['side'] == 'low' else 'highest'} "
                     f"{max(1, round(100 * s['within']))}% of draws)")
    return "at " + " and ".join(parts) if parts else ""
