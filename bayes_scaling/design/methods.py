"""Selection methods: which run to buy next (docs/design.md).

Baselines as ScaleBench defines them (Li et al. 2026, arXiv 2604.22753; its repository's
``benchmark/method.py``, ``baseline_dopt.py`` and ``vopt.py``):

- ``random``: uniform among the runs the pool's total cost still affords.
- ``cheapest``: the cheapest affordable run (ties at random).
- ``cost_random``: an affordable run with probability proportional to 1 / cost.
- ``d_opt``, ``v_opt``: a pilot of the cheapest runs (up to 2.5 n_params runs within 2% of the
  pool's cost), then greedily the run maximising the D-optimal gain ``log(1 + j_c' S j_c / s2)``
  or the V-optimal target-variance reduction ``sum_t (j_t' S j_c)^2 / (s2 + j_c' S j_c)`` over
  ``(cost / C)^g`` (g = 0.4 and 0.3), at the current least-squares fit, refitted after every run.
  ``S = (J'J / s2 + P0)^-1`` with the Jacobian in log coordinates for positive parameters, the
  prior precision ``P0`` of a quarter of each (log-)range, and
  ``s2 = (2 Var(y_pool) + SSE/2) / (n/2 + 1)``.

- ``mspe``: the paper's own method (its Section 4), written from its description
  (:mod:`.mspe`): the same pilot, then greedily the run maximising the expected reduction of the
  mean squared prediction error at the target rows over the fit's modes (each mode's
  V-optimal reduction plus the expected drop of the modes' disagreement) over ``(cost / C)^0.4``,
  refitted from 64 starts (up to 30 previous optima, the rest uniform) after every run.

Ours:

- ``bayes``: the same pilot, then runs (in batches of ``max(batch, n_bought // 8)`` once
  ``n_params`` runs are in) minimising the expected squared error at the target rows of the
  protocol's least-squares refit, per unit cost, under the Laplace-mixture posterior: each mode's
  linearised refit error with the law's discrepancy, plus the modes' disagreement
  (:func:`.acquisition.greedy_refit`); a batch is planned greedily over what is left of the
  current checkpoint's budget by the per-cost and the gain-only rule, the plan ending lower kept.
  ``criterion="posterior"`` reduces the posterior's own target variance instead
  (:func:`.acquisition.greedy_linear` on :meth:`.posterior.LaplaceMixture.joint_cov`).
  ``simulate=M`` (default :data:`.posterior.WORLDS`; 0 turns it off) refits each rule's plan
  in ``M`` worlds drawn from the posterior and lets a plan the worlds clearly score lower
  replace the criterion's (:meth:`Bayes.simulated`). ``rehearsal=R`` (off by default) weighs
  each rule's plan by the start lottery of the protocol's refit on it, rehearsed from ``R``
  starts (:meth:`Bayes.rehearse`).
"""
from __future__ import annotations

import numpy as np

from ..errors import BayesScalingError
from .acquisition import RULES, best_rule, greedy_linear, greedy_refit, kept_rule
from .fitting import (
    from_unconstrained,
    jacobian_theta,
    least_squares,
    predictor,
    start_lottery,
    uniform_starts,
)
from . import mspe as _mspe
from .posterior import WORLDS, LaplaceMixture, kernel, log_ratios, overruled

#: Starts of the refit a method makes between purchases (its previous optima plus uniform draws).
REFIT_STARTS = 16


class Method:
    """Interface: ``propose(state, batch) -> indices into the group's pool``."""

    batch = 1

    def propose(self, state, batch: int = 1) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


class Random(Method):
    def propose(self, state, batch=1):
        aff = state.affordable()
        return aff[[state.rng.integers(len(aff))]] if len(aff) else aff


class Cheapest(Method):
    def propose(self, state, batch=1):
        aff = state.affordable()
        if not len(aff):
            return aff
        c = state.group.cost[aff]
        ties = np.flatnonzero(np.abs(c - c.min()) < 1e-12 * max(c.min(), 1e-300))
        return aff[[ties[state.rng.integers(len(ties))]]]


class CostRandom(Method):
    def propose(self, state, batch=1):
        aff = state.affordable()
        if not len(aff):
            return aff
        inv = 1.0 / state.group.cost[aff]
        return aff[[state.rng.choice(len(aff), p=inv / inv.sum())]]


class _ModelBased(Method):
    """Pilot of cheap runs, then a model-based score; keeps its own refit between purchases
    (``refit_starts`` starts: up to half of them its previous optima, the rest uniform)."""

    refit_starts = REFIT_STARTS

    def pilot(self, state) -> np.ndarray | None:
        """The next pilot run (cheapest first, up to 2.5 n_params runs within 2% of the pool's
        cost), or None once the pilot is over. The first run is bought whatever its share of the
        pool's cost (in a small pool the cheapest run can cost more than 2%): the model-based
        score needs a fit, and a fit needs at least one run."""
        n_init = int(2.5 * state.n_params)
        if len(state.observed) and (state.memory.get("pilot_done")
                                    or len(state.observed) >= n_init):
            state.memory["pilot_done"] = True
            return None
        aff = state.affordable(state.final_budget)
        c = state.group.cost[aff]
        if len(aff) and (not len(state.observed) or state.spent + c.min() <= 0.02 * state.total):
            return aff[[int(np.argmin(c))]]
        state.memory["pilot_done"] = True
        return None

    def propose(self, state, batch=1):
        """The pilot's next run; then, after a refit to the runs bought, :meth:`choose` among the
        affordable runs (the cheapest one when every refit start failed)."""
        first = self.pilot(state)
        if first is not None or not len(state.observed):
            return first if first is not None else np.array([], dtype=int)
        aff = state.affordable(self.limit(state))
        if not len(aff):
            return aff
        starts = self.refit(state)
        if not starts.ok:
            return aff[[int(np.argmin(state.group.cost[aff]))]]
        return self.choose(state, aff, starts, batch)

    def limit(self, state) -> float:
        """The budget the choice must fit in: the final checkpoint's."""
        return state.final_budget

    def refit(self, state):
        """Least-squares fit to the bought runs from the previous optima plus uniform draws."""
        law, g = state.law, state.group
        n = self.refit_starts
        warm = state.memory.get("warm", np.empty((0, len(law.params))))[-n // 2:]
        theta0 = np.concatenate([warm, uniform_starts(law, n - len(warm), state.rng)])
        x = {v: a[state.observed] for v, a in g.x.items()}
        starts = least_squares(law, x, g.y[state.observed], theta0)
        if starts.ok:
            good = np.argsort(starts.sse)[: n // 2]
            state.memory["warm"] = starts.theta[good[np.isfinite(starts.sse[good])]]
        return starts


class _Classical(_ModelBased):
    """D-/V-optimal design at the current fit (ScaleBench's baselines)."""

    cost_power = 0.4

    def choose(self, state, aff, starts, batch):
        theta = starts.best
        law, g = state.law, state.group
        lo = np.array([p.lower for p in law.params])
        hi = np.array([p.upper for p in law.params])
        pos = lo > 0
        scale = np.where(pos, theta, 1.0)
        log_range = np.log(np.where(pos, hi / np.where(pos, lo, 1.0), 1.0))
        sd = np.where(pos, log_range / 4, (hi - lo) / 4)
        n = len(state.observed)
        s2 = (2.0 * np.var(g.y) + 0.5 * float(starts.sse.min())) / (2.0 + 0.5 * n - 1.0)
        J = self._jac(law, theta, g.x) * scale
        Jo = J[state.observed]
        H = Jo.T @ Jo / s2 + np.diag(1.0 / sd ** 2)
        w, V = np.linalg.eigh(H)
        S = (V / np.maximum(w, max(1e-10 * w[-1], 1e-30))) @ V.T
        gain = self.gain(J[aff], S, s2, self._jac(law, theta, g.x_test) * scale)
        score = gain / np.maximum(g.cost[aff] / state.total, 1e-300) ** self.cost_power
        score = np.where(np.isfinite(score), score, -np.inf)
        return aff[[int(np.argmax(score))]]

    @staticmethod
    def _jac(law, theta, x):
        _, J = jacobian_theta(law)(theta, x)
        return np.nan_to_num(np.asarray(J), nan=0.0, posinf=0.0, neginf=0.0)


class DOpt(_Classical):
    cost_power = 0.4

    @staticmethod
    def gain(Jc, S, s2, Jt):
        return np.log1p(np.maximum(np.einsum("ip,pq,iq->i", Jc, S, Jc), 0.0) / s2)


class VOpt(_Classical):
    cost_power = 0.3

    @staticmethod
    def gain(Jc, S, s2, Jt):
        a = np.einsum("ip,pq,iq->i", Jc, S, Jc)
        cross = Jt @ S @ Jc.T
        return (cross ** 2).sum(0) / (s2 + a)


class Bayes(_ModelBased):
    """Expected reduction of the target-region forecast error per unit cost, from the
    Laplace-mixture posterior (modes and discrepancy included); greedy batches.

    ``criterion="refit"`` (default): the expected error of the least-squares refit of the law at
    the targets, the discrepancy included (:func:`.acquisition.greedy_refit`);
    ``"posterior"``: the posterior's own target variance (:func:`.acquisition.greedy_linear`).

    ``rules``: the greedy rules whose plans ``greedy="auto"`` compares (:data:`.acquisition.RULES`;
    default the ratio and gain rules). ``rehearsal``: 0 (default, off) or the number of uniform
    starts of the rehearsed refit that scores each rule's plan by its criterion plus the start
    lottery of a refit keeping the best of ``protocol_starts`` starts (:meth:`rehearse`).
    ``simulate``: worlds drawn from the posterior in which each rule's plan is refitted from
    ``protocol_starts`` starts; a plan they clearly score lower replaces the criterion's
    (:meth:`simulated`; 0: off; with ``rehearsal`` too, the worlds decide).
    ``refit_starts``: starts of the method's own refit between batches, which finds the modes
    (default :data:`REFIT_STARTS`; 64 is MSPE's; docs/design.md, "More starts for the
    method's own refit").
    """

    def __init__(self, batch: int = 4, cost_power: float = 1.0, discrepancy: float = 1.0,
                 greedy: str = "auto", criterion: str = "refit", rehearsal: int = 0,
                 protocol_starts: int = 64, rules=("ratio", "gain"),
                 refit_starts: int = REFIT_STARTS, simulate: int = WORLDS):
        if greedy != "auto" and greedy not in RULES:
            raise BayesScalingError(f"greedy must be 'auto' or one of the rules {sorted(RULES)}, "
                                    f"got {greedy!r}")
        if criterion not in ("refit", "posterior"):
            raise BayesScalingError(f"criterion must be 'refit' or 'posterior', got {criterion!r}")
        if int(refit_starts) < 2:
            raise BayesScalingError(f"refit_starts must be at least 2, got {refit_starts}")
        if int(rehearsal) < 0 or int(protocol_starts) < 1:
            raise BayesScalingError("rehearsal must be 0 (off) or a number of starts, and "
                                    f"protocol_starts positive; got {rehearsal}, {protocol_starts}")
        if int(simulate) < 0:
            raise BayesScalingError(f"simulate must be 0 (off) or a number of simulated worlds, "
                                    f"got {simulate}")
        if not set(rules) <= set(RULES) or not rules:
            raise BayesScalingError(f"rules must be among {sorted(RULES)}, got {rules}")
        self.refit_starts = int(refit_starts)
        self.simulate = int(simulate)
        self.rehearsal = int(rehearsal)
        self.rules = tuple(rules)
        self.protocol_starts = int(protocol_starts)
        self.batch = int(batch)
        self.cost_power = float(cost_power)
        self.discrepancy = float(discrepancy)
        self.greedy = greedy
        self.criterion = criterion

    def choose(self, state, aff, starts, batch):
        if batch > 1:  # batches grow with the runs bought: one refit per ~12% more runs
            batch = max(batch, len(state.observed) // 8)
        g = state.group
        post = LaplaceMixture.from_starts(state.law, g, state.observed, starts,
                                          discrepancy=self.discrepancy)
        nt = len(g.y_test)
        rows = {v: np.concatenate([g.x_test[v], g.x[v]]) for v in g.x}
        room = self.limit(state) - state.spent
        if self.criterion == "refit":
            z = post.z(rows)
            modes = list(zip(post.weights, post.jacobians(rows), post.cov))
            K = post.disc2 * kernel(z, z)
            spread = post.spread_factor(rows)
        else:
            keep = np.concatenate([np.arange(nt), nt + aff])
            C = post.joint_cov(rows)[np.ix_(keep, keep)]

        def run(power):  # the ratio rule with the method's own cost power
            power = self.cost_power if power == RULES["ratio"] else power
            picks = None if self.greedy == "auto" else batch
            if self.criterion == "refit":
                return greedy_refit(modes, nt, nt + state.observed, nt + aff, K, post.sigma2,
                                    g.cost[aff], room, spread=spread, cost_power=power,
                                    max_picks=picks)
            return greedy_linear(C, nt, post.sigma2, g.cost[aff], room, cost_power=power,
                                 max_picks=picks)

        if self.simulate and self.greedy == "auto":
            plans = {r: run(RULES[r]) for r in self.rules}
            return aff[self.simulated(state, post, aff, plans)[:batch]]
        if self.rehearsal and self.greedy == "auto":
            plans = {r: run(RULES[r]) for r in self.rules}
            return aff[self.rehearse(state, post, aff, plans)[:batch]]
        _, (picks, _, _), _ = best_rule(run, self.rules if self.greedy == "auto"
                                        else (self.greedy,))
        return aff[picks[:batch]]

    def rehearse(self, state, post, aff, plans) -> list:
        """The plan (one per greedy rule: ``(picks, values, v0)``, picks into ``aff``) whose
        whole purchase has the lowest expected refit error plus start lottery: each distinct plan
        is rehearsed on the runs bought (their observed targets) plus its picks, valued at the
        posterior's heaviest mode, refitted from ``rehearsal`` uniform starts (the same draw for
        every plan), and scored by its final criterion plus the expected deviation at the target
        rows of the best of ``protocol_starts`` starts from the best start
        (:func:`.fitting.start_lottery`; docs/design.md, "The refit's start lottery")."""
        g, law = state.group, state.law
        theta0 = uniform_starts(law, self.rehearsal, np.random.default_rng(len(state.observed)))
        mode = from_unconstrained(law, post.u[int(np.argmax(post.weights))])
        seen, best = {}, None
        for rule, (picks, values, v0) in plans.items():
            key = tuple(sorted(picks))
            if key not in seen:
                bought = aff[list(picks)]
                rows = np.concatenate([state.observed, bought]).astype(int)
                sim = np.asarray(predictor(law)(mode[None], {v: a[bought]
                                                             for v, a in g.x.items()}))[0]
                lot = start_lottery(law, {v: a[rows] for v, a in g.x.items()},
                                    np.concatenate([g.y[state.observed], sim]), g.x_test,
                                    theta0, self.protocol_starts)
                final = values[-1] if values else v0
                seen[key] = final + lot.excess
                state.memory.setdefault("rehearsals", []).append(
                    {"n_bought": len(state.observed), "rule": rule, "runs": len(picks),
                     "criterion": final, "excess": lot.excess, "hit": lot.hit})
            if best is None or seen[key] < best[0]:
                best = (seen[key], list(picks))
        return best[1]

    def simulated(self, state, post, aff, plans) -> list:
        """The plan to buy among the greedy's (one per rule, as in :meth:`rehearse`): the one
        whose linearised criterion ends lowest (:func:`.acquisition.best_rule`), unless the
        protocol's refit, in ``simulate`` worlds drawn from the posterior
        (:meth:`.posterior.LaplaceMixture.refit_errors`, ``protocol_starts`` uniform starts),
        clearly does better after another plan (:func:`.posterior.overruled`; docs/design.md,
        "Plans judged in simulated worlds"). Plans equal up to order count once; a single
        distinct plan is bought without simulating. The linearised criterion ranks runs at the
        current modes; the worlds see what it cannot, e.g. runs of nearly one size that leave a
        direction of the law to the noise, which the refit then extrapolates anywhere."""
        g = state.group
        picks = plans[kept_rule(plans)[0]][0]
        distinct = {tuple(sorted(picks)): list(picks)}
        for p, _, _ in plans.values():
            distinct.setdefault(tuple(sorted(p)), list(p))
        if len(distinct) == 1:
            return list(picks)
        keys = list(distinct)
        errors = post.refit_errors(g.x, state.observed, [aff[list(k)] for k in keys], g.x_test,
                                   self.simulate, self.protocol_starts,
                                   np.random.default_rng(1_000_003 * len(state.observed) + 17))
        chosen = overruled(errors, 0)
        ratio = log_ratios(errors, 0)[1:]
        state.memory.setdefault("simulated", []).append(
            {"n_bought": len(state.observed), "errors": errors.mean(1).tolist(),
             "runs": [len(k) for k in keys], "overruled": chosen != 0,
             "log_ratio": ratio.mean(1).tolist(),
             "log_ratio_se": (ratio.std(1, ddof=1) / np.sqrt(errors.shape[1])).tolist()})
        return distinct[keys[chosen]]

    def limit(self, state) -> float:
        """The current checkpoint's budget: a run held over to the next checkpoint would leave
        this one's budget unspent, and once nothing fits the checkpoint closes."""
        return state.budget


class Mspe(_ModelBased):
    """The expected reduction of the target MSPE over the fit's modes, per unit cost^0.4
    (:mod:`.mspe`; Li et al. 2026, Section 4)."""

    def __init__(self, starts: int = 64, warm: int = 30, cost_power: float = _mspe.COST_POWER):
        if int(starts) < 1 or not 0 <= int(warm) <= int(starts):
            raise BayesScalingError(f"mspe needs starts >= 1 and 0 <= warm <= starts; got "
                                    f"starts={starts}, warm={warm}")
        self.starts, self.warm, self.cost_power = int(starts), int(warm), float(cost_power)

    def refit(self, state):
        """Least-squares fit from the previous optima (the last ``warm`` distinct bests) plus
        uniform draws, ``starts`` in all."""
        law, g = state.law, state.group
        pool = state.memory.get("mspe_warm", np.empty((0, len(law.params))))[-self.warm:]
        theta0 = np.concatenate([pool, uniform_starts(law, self.starts - len(pool), state.rng)])
        x = {v: a[state.observed] for v, a in g.x.items()}
        starts = least_squares(law, x, g.y[state.observed], theta0)
        if starts.ok:
            best = starts.best
            if not any(np.allclose(best, w) for w in pool):
                state.memory["mspe_warm"] = np.concatenate([pool, best[None]])
        return starts

    def choose(self, state, aff, starts, batch):
        g = state.group
        x = {v: a[state.observed] for v, a in g.x.items()}
        m = _mspe.modes(state.law, starts, x, g.y[state.observed], g.y,
                        {v: a[aff] for v, a in g.x.items()}, g.x_test)
        score = _mspe.scores(m, g.cost[aff], state.total, self.cost_power)
        return aff[[int(np.argmax(score))]]


METHODS = {"random": Random, "cheapest": Cheapest, "cost_random": CostRandom, "d_opt": DOpt,
           "v_opt": VOpt, "bayes": Bayes, "mspe": Mspe}


def make(name: str, **options) -> Method:
    """A fresh method object (one per group and seed: methods keep no state of their own)."""
    if name not in METHODS:
        raise BayesScalingError(f"unknown method {name!r}; the methods are {', '.join(METHODS)}")
    try:
        return METHODS[name](**options)
    except TypeError:
        hint = ("; the seeds are run's own argument: run(task, method, seeds=[0, 1])"
                if "seed" in options else "")
        raise BayesScalingError(f"method {name!r} takes no options {sorted(options)}"
                                + hint) from None
