"""Parameter and FLOP counts: analytic formulas, and the same counts from a meta-device module.

`param_count(cfg)` counts from the config alone; `meta_param_count(cfg)` builds the real
module on `torch.device("meta")` (shapes only, no storage) and sums `numel()`, so the formulas
are checked against the module that runs. FLOPs follow the convention of published MFU
figures (PaLM appendix B, Megatron, torchtitan): a training step costs
`6 * N_matmul + 12 * layers * heads * head_dim * seq` FLOPs per token, where `N_matmul` counts
every weight used in a matmul (the LM head included, embedding lookups excluded) and the
attention term is *not* halved for causal masking.
"""
from __future__ import annotations

import torch

from cherenkov.models.config import ModelConfig


def layer_param_count(cfg: ModelConfig) -> int:
    """Parameters of one transformer block."""
    h, f, d = cfg.hidden, cfg.ffn, cfg.head_dim
    q, kv = cfg.heads * d, cfg.kv_heads * d
    if cfg.arch == "gpt":
        attn = h * (q + 2 * kv) + (q + 2 * kv) + q * h + h
        mlp = h * f + f + f * h + h
        norms = 2 * 2 * h
    else:
        attn = h * (q + 2 * kv) + q * h
        mlp = 3 * h * f
        norms = 2 * h
    return attn + mlp + norms


def embedding_param_count(cfg: ModelConfig) -> int:
    """Token (and for gpt, position) embedding parameters."""
    return cfg.vocab * cfg.hidden + (cfg.seq * cfg.hidden if cfg.arch == "gpt" else 0)


def head_param_count(cfg: ModelConfig) -> int:
    """Final norm plus the LM head (zero extra if the head is tied to the token embedding)."""
    norm = 2 * cfg.hidden if cfg.arch == "gpt" else cfg.hidden
    return norm + (0 if cfg.tie_embeddings else cfg.vocab * cfg.hidden)


def param_count(cfg: ModelConfig) -> int:
    return embedding_param_count(cfg) + cfg.layers * layer_param_count(cfg) + head_param_count(cfg)


def matmul_param_count(cfg: ModelConfig) -> int:
    """Weights that take part in a matmul per token: all layer matrices plus the LM head."""
    h, f, d = cfg.hidden, cfg.ffn, cfg.head_dim
    q, kv = cfg.heads * d, cfg.kv_heads * d
    mlp = 2 * h * f if cfg.arch == "gpt" else 3 * h * f
    return cfg.layers * (h * (q + 2 * kv) + q * h + mlp) + cfg.vocab * h


def training_flops_per_token(cfg: ModelConfig, seq: int | None = None) -> float:
    """Model FLOPs of forward+backward per token (no recompute counted), PaLM convention."""
    seq = cfg.seq if seq is None else seq
    return 6.0 * matmul_param_count(cfg) + 12.0 * cfg.layers * cfg.heads * cfg.head_dim * seq


def build_model(cfg: ModelConfig, device: str | torch.device = "cpu") -> torch.nn.Module:
    """Instantiate the module for `cfg` (`device="meta"` allocates no weights)."""
    from cherenkov.models.gpt import GPT
    from cherenkov.models.llama import Llama
    with torch.device(device):
        return GPT(cfg) if cfg.arch == "gpt" else Llama(cfg)


def meta_param_count(cfg: ModelConfig) -> int:
    """Count parameters of the real module built on the meta device (tied weights once)."""
    model = build_model(cfg, "meta")
    return sum(p.numel() for p in model.parameters())


def meta_forward_flops(cfg: ModelConfig, batch: int, seq: int) -> int:
    """FLOPs of one forward pass measured by running the meta module under FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode
    model = build_model(cfg, "meta")
    idx = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(idx)
    return counter.get_total_flops()
