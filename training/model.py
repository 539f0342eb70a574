"""Tiny GPT-2 models (transformers ``GPT2LMHeadModel``) over byte-level tokens.

Configs are built from scratch (no hub download): vocabulary 256 (UTF-8 bytes), context 128,
no dropout, tied input/output embeddings (the GPT-2 default). ``N`` is the number of distinct
trainable parameters; ``N_nonemb`` excludes the token (``wte``) and position (``wpe``) embeddings
(the tied output head is the token embedding, so it is excluded too).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB = 256
CONTEXT = 128


@dataclass(frozen=True)
class Size:
    """A model shape: ``n_layer`` blocks of width ``d_model`` with ``n_head`` heads."""

    n_layer: int
    d_model: int
    n_head: int

    def __post_init__(self):
        if min(self.n_layer, self.d_model, self.n_head) < 1:
            raise ValueError(f"model size fields must be positive, got {self}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")


def build(size: Size, seed: int, attn: str = "sdpa") -> GPT2LMHeadModel:
    """A freshly initialised model; the initialisation is a function of ``seed`` only."""
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=CONTEXT, n_embd=size.d_model, n_layer=size.n_layer,
        n_head=size.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=0, eos_token_id=0, tie_word_embeddings=True,
    )
    cfg._attn_implementation = attn
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(cfg)


def param_counts(model: GPT2LMHeadModel) -> tuple[int, int]:
    """``(N, N_nonemb)``: total distinct parameters and parameters outside the embeddings."""
    total = sum(p.numel() for p in model.parameters())
    emb = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    return total, total - emb


def flops_per_token(size: Size, n_nonemb: int, context: int = CONTEXT) -> float:
    """Training FLOPs per token for throughput figures: ``6 N_nonemb`` plus attention
    ``6 n_layer context d_model`` (Kaplan et al. 2020, Table 1: forward ``2 n_layer context d``,
    times three for forward + backward) plus the output projection ``6 d_model VOCAB``."""
    return 6.0 * (n_nonemb + size.n_layer * context * size.d_model + size.d_model * VOCAB)


def model_scale(size: Size, n_nonemb: int, context: int = CONTEXT) -> int:
    """The M3 paper's model scale ``M`` (non-embedding training FLOPs per token, M3 Table 4):
    ``M = 6 N_nonemb + 12 n_layer d_model S`` with ``S`` the context length; for the paper's
    LLaMA blocks this is its ``72 n d^2 + 12 n d S``. The attention term counts both the scores
    and their weighted sum (``4 n_layer d S`` forward, times three); the vocabulary projection is
    left out."""
    return 6 * n_nonemb + 12 * size.n_layer * size.d_model * context
