"""The training loop, written once, and the plain objects that parameterise it.

What differs between pre-training, continual pre-training with replay, multi-epoch or
multi-stage recipes is only

* the data mixture: a ``Mixture`` maps a step to sampling weights over corpora, and
* the learning-rate schedule: a ``WSD`` (warmup-stable-decay) maps a step to a learning rate.

``train`` is the loop (batch, forward, backward, step). ``run_branches`` drives a constant-LR
trunk and takes a cooldown branch at each requested step count: the trunk is trained to
``(1 - cooldown_fraction) * total``, the state is copied, the copy is annealed linearly to zero
over the remaining steps (so the annealed point has seen exactly ``total`` steps), evaluated and
discarded, and the trunk goes on from where it was.

Multi-epoch, multi-stage recipes (the M3 runs) use ``EpochBatches`` (exact target/helper counts
per stage, the target corpus reshuffled each epoch, the helper never repeated) and ``Staged`` (one
WSD segment per stage, the learning rate re-warmed at each stage boundary).
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F

GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class WSD:
    """Warmup-stable-decay learning rate.

    Linear warmup from 0 to ``peak`` over ``warmup`` steps, then constant; if ``decay_start`` is
    set, linear decay from the rate reached at ``decay_start`` down to ``floor * peak`` over
    ``decay_steps`` steps. ``decay_start=None`` is the constant-LR trunk.
    """

    peak: float
    warmup: int
    decay_start: int | None = None
    decay_steps: int = 0
    floor: float = 0.0

    def stable(self, step: int) -> float:
        return self.peak * min(1.0, (step + 1) / max(1, self.warmup))

    def __call__(self, step: int) -> float:
        if self.decay_start is None or step < self.decay_start:
            return self.stable(step)
        start = self.stable(self.decay_start)
        frac = min(1.0, (step - self.decay_start + 1) / max(1, self.decay_steps))
        return start + (self.floor * self.peak - start) * frac

    def cooldown(self, start: int, steps: int) -> WSD:
        """The same schedule with a decay branch starting at ``start`` lasting ``steps``."""
        return replace(self, decay_start=start, decay_steps=steps)


@dataclass(frozen=True)
class Staged:
    """A learning-rate schedule of WSD segments, one per training stage.

    ``segments`` is ``((first_step, WSD), ...)`` sorted by ``first_step``, the first at 0; each
    segment's WSD is evaluated at ``step - first_step``, so every stage re-warms from 0 to its peak
    (M3 paper: the second stage is re-warmed to the first stage's maximum). A non-final segment
    carries its own decay (its stage's annealed end); ``cooldown`` adds the decay of the final
    segment, so a ``Staged`` can drive ``run_branches`` like a plain ``WSD``.
    """

    segments: tuple

    def __post_init__(self):
        firsts = [f for f, _ in self.segments]
        if not firsts or firsts[0] != 0 or firsts != sorted(set(firsts)):
            raise ValueError(f"Staged segments must start at 0 and increase, got {firsts}")

    def _segment(self, step: int) -> tuple[int, WSD]:
        return [seg for seg in self.segments if seg[0] <= step][-1]

    def __call__(self, step: int) -> float:
        first, wsd = self._segment(step)
        return wsd(step - first)

    def cooldown(self, start: int, steps: int) -> Staged:
        """The same schedule with the final segment decaying from ``start`` over ``steps``."""
        first, wsd = self.segments[-1]
        if start < first:
            raise ValueError(f"cooldown start {start} is before the final stage ({first})")
        return Staged(self.segments[:-1] + ((first, wsd.cooldown(start - first, steps)),))


@dataclass(frozen=True)
class Mixture:
    """Sampling weights over corpora, optionally changing at given steps (multi-stage recipes).

    ``stages`` is a list of ``(first_step, {corpus: weight})`` sorted by ``first_step``, the first
    one starting at 0. Weights are normalised. ``Mixture.constant({"en": .5, "ar": .5})``.
    """

    stages: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not self.stages or self.stages[0][0] != 0:
            raise ValueError("a Mixture needs stages starting at step 0")
        for _, w in self.stages:
            if not w or any(v < 0 for v in w.values()) or sum(w.values()) <= 0:
                raise ValueError(f"mixture weights must be non-negative with a positive sum: {w}")

    @classmethod
    def constant(cls, weights: dict[str, float]) -> Mixture:
        return cls(((0, dict(weights)),))

    def __call__(self, step: int) -> dict[str, float]:
        w = [w for s, w in self.stages if s <= step][-1]
        total = sum(w.values())
        return {k: v / total for k, v in sorted(w.items()) if v > 0}


class Batches:
    """Deterministic batches: the batch at ``step`` is a pure function of (seed, stream, step).

    Sequence ``g = step * batch_size + j`` goes to the corpus picked by the low-discrepancy
    sequence ``frac((g + 1) * golden)`` against the cumulative mixture weights, so every prefix of
    the stream matches the mixture closely; its window start is uniform in the corpus.
    """

    def __init__(self, corpora: dict[str, np.ndarray], batch_size: int, context: int,
                 seed: int, stream: int):
        self.corpora = {k: torch.from_numpy(v.astype(np.int64)) for k, v in corpora.items()}
        for k, v in self.corpora.items():
            if len(v) <= context + 1:
                raise ValueError(f"corpus {k!r} has {len(v)} tokens, fewer than context+2")
        self.batch_size, self.context, self.seed, self.stream = batch_size, context, seed, stream

    def __call__(self, step: int, weights: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
        names = list(weights)
        missing = [n for n in names if n not in self.corpora]
        if missing:
            raise KeyError(f"mixture asks for corpora {missing}; have {sorted(self.corpora)}")
        cum = np.cumsum([weights[n] for n in names])
        g = step * self.batch_size + np.arange(self.batch_size)
        pick = np.searchsorted(cum, np.mod((g + 1) * GOLDEN, 1.0) * cum[-1], side="right")
        rng = np.random.default_rng([self.seed, self.stream, step])
        rows = []
        for i in pick:
            data = self.corpora[names[min(i, len(names) - 1)]]
            start = int(rng.integers(0, len(data) - self.context - 1))
            rows.append(data[start:start + self.context + 1])
        xy = torch.stack(rows)
        return xy[:, :-1], xy[:, 1:]


class EpochBatches:
    """Exact two-corpus batches for multi-epoch, multi-stage recipes; a pure function of the step.

    ``stages`` is ``[(first_step, n_target, n_seqs), ...]`` (first at step 0): from ``first_step``
    on, ``n_target`` of every ``n_seqs`` consecutive sequences are target sequences, spread evenly
    (sequence ``l`` of the stage is a target one iff ``floor((l+1) p/q) > floor(l p/q)``, with
    ``p/q = n_target/n_seqs``), so a stage of exactly ``n_seqs`` sequences holds exactly
    ``n_target`` target sequences; the final stage's ratio holds for every later step.

    Sequence ``g = step * batch_size + j`` is the ``t``-th target sequence or the ``h``-th helper
    sequence of the stream (counting from 0). The target corpus is cut into ``n_w`` windows of
    ``context + 1`` tokens at stride ``context`` (``len(target) = n_w context + 1``); target
    sequence ``t`` is window ``perm_e[t mod n_w]`` of epoch ``e = t // n_w``, where ``perm_e`` is a
    permutation drawn from ``(seed, salt, e)``: every epoch covers the corpus exactly once, in a
    new order. Helper sequence ``h`` is window ``perm[h]`` of one permutation of the helper's
    windows: the helper is never repeated, and a step that would need more helper windows than
    there are raises ``ValueError`` (checked for ``total_steps`` at construction).
    """

    def __init__(self, target: np.ndarray, helper: np.ndarray | None, stages, batch_size: int,
                 context: int, seed: int, salt: int = 0, total_steps: int | None = None,
                 names: tuple[str, str] = ("target", "helper")):
        self.context, self.batch_size, self.seed, self.salt = context, batch_size, seed, salt
        self.names = names
        if (len(target) - 1) % context or len(target) < context + 1:
            raise ValueError(f"target corpus {names[0]!r} has {len(target)} tokens; need "
                             f"n * context + 1 = n * {context} + 1")
        self.target = np.asarray(target)
        self.n_w = (len(target) - 1) // context
        self.helper = None if helper is None else np.asarray(helper)
        self.n_h = 0 if helper is None else (len(helper) - 1) // context
        self.stages = [tuple(int(v) for v in st) for st in stages]
        firsts = [f for f, _, _ in self.stages]
        if not firsts or firsts[0] != 0 or firsts != sorted(set(firsts)):
            raise ValueError(f"stages must start at step 0 and increase, got {firsts}")
        if any(not 0 <= p <= q or q < 1 for _, p, q in self.stages):
            raise ValueError(f"each stage needs 0 <= n_target <= n_seqs, n_seqs > 0: {stages}")
        # target sequences before each stage
        self._before = [0]
        for (f0, p, q), (f1, _, _) in zip(self.stages, self.stages[1:]):
            self._before.append(self._before[-1] + ((f1 - f0) * batch_size * p) // q)
        if helper is None and any(p < q for _, p, q in self.stages):
            raise ValueError("a stage mixes in helper sequences but no helper corpus was given")
        self._perms: dict[int, np.ndarray] = {}
        self._helper_perm = None
        if total_steps is not None:
            _, h = self.counts(total_steps)
            if h > self.n_h:
                raise ValueError(
                    f"helper corpus {names[1]!r} has {self.n_h} windows of {context} tokens, but "
                    f"{total_steps} steps need {h}: the helper would be repeated. Use a larger "
                    f"helper corpus or a smaller run (D).")

    def counts(self, steps: int) -> tuple[int, int]:
        """(target, helper) sequences in the first ``steps`` steps."""
        g = steps * self.batch_size
        t = int(self._targets_before(np.array([g]))[0])
        return t, g - t

    def _targets_before(self, g: np.ndarray) -> np.ndarray:
        """Number of target sequences among sequences ``0 .. g - 1`` (vectorised over ``g``)."""
        firsts = np.array([f * self.batch_size for f, _, _ in self.stages])
        i = np.searchsorted(firsts, g, side="right") - 1
        i = np.maximum(i, 0)
        p = np.array([st[1] for st in self.stages])[i]
        q = np.array([st[2] for st in self.stages])[i]
        return np.array(self._before)[i] + ((g - firsts[i]) * p) // q

    def sources(self, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the batch at ``step``: (is_target, window index, epoch; -1 for helper rows)."""
        g = step * self.batch_size + np.arange(self.batch_size)
        before, upto = self._targets_before(g), self._targets_before(g + 1)
        is_t = upto > before
        win = np.empty(self.batch_size, dtype=np.int64)
        epoch = np.full(self.batch_size, -1, dtype=np.int64)
        for j in np.flatnonzero(is_t):
            e, pos = divmod(int(before[j]), self.n_w)
            win[j], epoch[j] = self._perm(e)[pos], e
        h = g[~is_t] - before[~is_t]
        if len(h):
            if h.max() >= self.n_h:
                raise ValueError(f"helper corpus {self.names[1]!r} exhausted at step {step} "
                                 f"({self.n_h} windows): it would be repeated")
            if self._helper_perm is None:
                self._helper_perm = np.random.default_rng(
                    [self.seed, self.salt, 1 << 30]).permutation(self.n_h)
            win[~is_t] = self._helper_perm[h]
        return is_t, win, epoch

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) > 4:
                self._perms.pop(min(self._perms))
            self._perms[epoch] = np.random.default_rng(
                [self.seed, self.salt, epoch]).permutation(self.n_w)
        return self._perms[epoch]

    def ratio(self, step: int) -> float:
        """The target ratio of the stage that ``step`` is in."""
        _, p, q = [st for st in self.stages if st[0] <= step][-1]
        return p / q

    def __call__(self, step: int, weights: dict[str, float] | None = None):
        if weights is not None:  # the Mixture driving ``train`` must agree with the stage table
            got = weights.get(self.names[0], 0.0)
            if abs(got - self.ratio(step)) > 1e-9:
                raise ValueError(f"step {step}: mixture gives target weight {got}, the stage "
                                 f"table {self.ratio(step)}")
        is_t, win, _ = self.sources(step)
        offsets = win[:, None] * self.context + np.arange(self.context + 1)
        xy = np.empty(offsets.shape, dtype=np.int64)
        xy[is_t] = self.target[offsets[is_t]]
        if not is_t.all():
            xy[~is_t] = self.helper[offsets[~is_t]]
        xy = torch.from_numpy(xy)
        return xy[:, :-1], xy[:, 1:]


def make_optimizer(model: torch.nn.Module, weight_decay: float, betas=(0.9, 0.95)):
    """AdamW; weight decay on matrices only (not on biases and layer norms)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=0.0, betas=betas)


def train(model, opt, batches: Batches, mixture: Mixture, lr: WSD, start: int, stop: int,
          grad_clip: float = 1.0, on_step: Callable[[int], None] | None = None) -> None:
    """THE training loop: steps ``start .. stop - 1``."""
    model.train()
    for step in range(start, stop):
        x, y = batches(step, mixture(step))
        for group in opt.param_groups:
            group["lr"] = lr(step)
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"non-finite training loss at step {step}")
        if on_step is not None:
            on_step(step + 1)


def eval_windows(corpora: dict[str, np.ndarray], weights: dict[str, float], n: int,
                 context: int) -> torch.Tensor:
    """``n`` fixed, evenly spaced validation windows, split across corpora by ``weights``."""
    total = sum(weights.values())
    counts = {k: round(n * w / total) for k, w in weights.items()}
    rows = []
    for name, k in counts.items():
        data = corpora[name]
        if len(data) < context + 2 or k < 1:
            raise ValueError(f"validation corpus {name!r} too small for {k} windows")
        starts = np.linspace(0, len(data) - context - 1, k).astype(np.int64)
        rows += [torch.from_numpy(data[s:s + context + 1].astype(np.int64)) for s in starts]
    return torch.stack(rows)


@torch.no_grad()
def evaluate(model, windows: torch.Tensor, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy (nats/token) over the windows."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch_size):
        xy = windows[i:i + batch_size]
        logits = model(input_ids=xy[:, :-1]).logits
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), xy[:, 1:].reshape(-1),
                                 reduction="sum").item()
        count += xy[:, 1:].numel()
    model.train()
    return total / count


def branch_start(total: int, cooldown_fraction: float) -> int:
    """Trunk step at which the cooldown branch ending at ``total`` steps leaves the trunk."""
    return total - max(1, round(cooldown_fraction * total))


def run_branches(model, opt, batches: Batches, mixture: Mixture, lr: WSD, step: int,
                 branches: list[int], cooldown_fraction: float,
                 on_branch: Callable[[int, torch.nn.Module], None],
                 save_trunk: Callable[[int], None], skip: set[int] = frozenset(),
                 checkpoint_every: int = 0, grad_clip: float = 1.0,
                 on_step: Callable[[int], None] | None = None,
                 branch_at: Callable[[int], int] | None = None) -> int:
    """Train the constant-LR trunk from ``step`` and anneal a branch ending at each of ``branches``.

    ``on_branch(total, model)`` is called with the annealed model; branches in ``skip`` (already
    recorded) are not re-run. ``save_trunk(step)`` checkpoints the trunk after each branch point
    and every ``checkpoint_every`` trunk steps. ``branch_at(total)``, if given, replaces
    ``branch_start(total, cooldown_fraction)`` (e.g. a cooldown sized on the final stage of a
    multi-stage run). Returns the trunk's final step.
    """
    for total in sorted(branches):
        start = branch_at(total) if branch_at else branch_start(total, cooldown_fraction)
        if total in skip:
            continue
        if start < step:
            raise RuntimeError(f"trunk is at step {step}, past the branch point {start} of "
                               f"the unrecorded annealed point {total}; delete the checkpoint")
        while step < start:
            nxt = min(start, step + checkpoint_every) if checkpoint_every else start
            train(model, opt, batches, mixture, lr, step, nxt, grad_clip, on_step)
            step = nxt
            save_trunk(step)
        trunk_state = copy.deepcopy((model.state_dict(), opt.state_dict()))
        train(model, opt, batches, mixture, lr.cooldown(start, total - start), start, total,
              grad_clip, on_step)
        on_branch(total, model)
        model.load_state_dict(trunk_state[0])
        opt.load_state_dict(trunk_state[1])
    return step
