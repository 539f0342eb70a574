"""Training speed of the sweep's GPT-2 sizes: tokens/s and achieved FLOP/s vs the fp32 matmul peak.

For each size of a sweep config and each variant (HF GPT-2 with eager attention, with SDPA
attention, SDPA under ``torch.compile``; a ``_fused`` suffix, e.g. ``compile_fused``, swaps in
AdamW's fused kernel), time ``--steps`` optimizer steps at the config's batch size after warm-up
steps. Achieved FLOP/s counts ``6 N_nonemb + 6 n_layer ctx d + 6 d V``
per token (training.model.flops_per_token); the peak is the best fp32 ``torch.mm`` rate measured
in the same run with the same thread count. A variant is numerically sound if its losses over
the timed steps match the eager variant's to 1e-4 relative.

    python benchmarks/train_speed.py [--config training/configs/ptpp.toml] [--steps 30]
        [--threads 1] [--variants eager,sdpa,compile] [--sizes s1,s4]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from training import sweep
from training.loop import make_optimizer
from training.model import CONTEXT, VOCAB, Size, build, flops_per_token, param_counts


def matmul_peak(n: int = 512, repeats: int = 20) -> float:
    """Best fp32 FLOP/s of an n x n matmul over ``repeats`` timings."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(5):
            torch.mm(a, b)
        best = min(best, (time.perf_counter() - t) / 5)
    return 2 * n**3 / best


def time_variant(size: Size, variant: str, batch: int, steps: int, warmup: int = 5):
    """(tokens/s, losses over the timed steps) for one size and variant."""
    model = build(size, seed=0, attn="eager" if variant == "eager" else "sdpa")
    opt = make_optimizer(model, 0.1)
    if variant.endswith("_fused"):  # the same groups, one fused AdamW kernel for all tensors
        opt = torch.optim.AdamW([{k: v for k, v in g.items() if k != "lr"} for g in opt.param_groups],
                                lr=0.0, fused=True)
    for g in opt.param_groups:
        g["lr"] = 1e-3
    fwd = torch.compile(model) if variant.startswith("compile") else model
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, VOCAB, (warmup + steps, batch, CONTEXT + 1), generator=gen)
    losses = []
    for i in range(warmup + steps):
        if i == warmup:
            t = time.perf_counter()
        x, y = data[i, :, :-1], data[i, :, 1:]
        logits = fwd(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= warmup:
            losses.append(loss.item())
    return steps * batch * CONTEXT / (time.perf_counter() - t), np.array(losses)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="training/configs/ptpp.toml")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 = one sweep worker)")
    ap.add_argument("--variants", default="eager,sdpa,compile")
    ap.add_argument("--sizes", default=None, help="comma-separated size names (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = sweep.load_config(args.config)
    peak = matmul_peak()
    print(f"threads={args.threads} batch={cfg['batch_size']}x{CONTEXT} "
          f"fp32 matmul peak {peak / 1e9:.1f} GFLOP/s\n")
    print("| size | N | N_nonemb | variant | tokens/s | GFLOP/s | % of peak | max rel. loss diff |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in cfg["sizes"].items():
        if args.sizes and name not in args.sizes.split(","):
            continue
        size = Size(**s)
        n, n_ne = param_counts(build(size, 0))
        ref = None
        for variant in args.variants.split(","):
            try:
                tps, losses = time_variant(size, variant, cfg["batch_size"], args.steps)
            except Exception as e:  # noqa: BLE001 - e.g. no C++ compiler for torch.compile
                print(f"| {name} | {n} | {n_ne} | {variant} | failed: {type(e).__name__} |||")
                continue
            ref = losses if ref is None else ref
            diff = float(np.max(np.abs(losses / ref - 1)))
            fl = tps * flops_per_token(size, n_ne)
            print(f"| {name} | {n} | {n_ne} | {variant} | {tps:,.0f} | {fl / 1e9:.2f} | "
                  f"{100 * fl / peak:.1f} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
