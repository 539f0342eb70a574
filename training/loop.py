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
                 on_step: Callable[[int], None] | None = None) -> int:
    """Train the constant-LR trunk from ``step`` and anneal a branch ending at each of ``branches``.

    ``on_branch(total, model)`` is called with the annealed model; branches in ``skip`` (already
    recorded) are not re-run. ``save_trunk(step)`` checkpoints the trunk after each branch point
    and every ``checkpoint_every`` trunk steps. Returns the trunk's final step.
    """
    for total in sorted(branches):
        start = branch_start(total, cooldown_fraction)
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
