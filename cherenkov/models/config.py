"""Model configurations: one dataclass for both families, named presets, and an HF reader.

A `ModelConfig` is all the planner and the model builders need: the architecture family
(`"gpt"`: LayerNorm, GeLU-tanh, 4h MLP, learned positions, biases; `"llama"`: RMSNorm, RoPE,
SwiGLU, grouped-query attention, no biases) and its sizes.

    >>> preset("llama3-8b").layers, preset("llama3-8b").kv_heads
    (32, 8)
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    arch: str            # "gpt" | "llama"
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int             # maximum sequence length (learned positions for gpt, RoPE cache for llama)
    kv_heads: int = 0    # 0 means "same as heads" (multi-head attention)
    ffn: int = 0         # 0 means the family default: 4*hidden for gpt
    dropout: float = 0.0
    tie_embeddings: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    name: str = "custom"
    return_logits: bool = True   # with targets: (logits, loss) as nanoGPT; False: (None, loss),
                                 # so a compiler may fuse the LM head into the cross-entropy

    def __post_init__(self):
        if self.arch not in ("gpt", "llama"):
            raise ValueError(f"arch must be 'gpt' or 'llama', got {self.arch!r}")
        for name, least in (("layers", 1), ("hidden", 1), ("heads", 1), ("vocab", 1), ("seq", 1),
                            ("kv_heads", 0), ("ffn", 0)):          # kv_heads, ffn: 0 = default
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn == 0:
            if self.arch == "gpt":
                object.__setattr__(self, "ffn", 4 * self.hidden)
            else:  # Llama's rule: 2/3 of 4h, rounded up to a multiple of 256
                f = int(2 * 4 * self.hidden / 3)
                object.__setattr__(self, "ffn", 256 * ((f + 255) // 256))
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} is not divisible by heads={self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} is not divisible by kv_heads={self.kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig("gpt", layers=2, hidden=64, heads=4, vocab=256, seq=64,
                        tie_embeddings=True, name="tiny"),
    "tiny-llama": ModelConfig("llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=192,
                              vocab=256, seq=64, name="tiny-llama"),
    "gpt2": ModelConfig("gpt", layers=12, hidden=768, heads=12, vocab=50257, seq=1024,
                        tie_embeddings=True, name="gpt2"),
    "gpt2-medium": ModelConfig("gpt", layers=24, hidden=1024, heads=16, vocab=50257, seq=1024,
                               tie_embeddings=True, name="gpt2-medium"),
    "gpt2-large": ModelConfig("gpt", layers=36, hidden=1280, heads=20, vocab=50257, seq=1024,
                              tie_embeddings=True, name="gpt2-large"),
    "gpt2-xl": ModelConfig("gpt", layers=48, hidden=1600, heads=25, vocab=50257, seq=1024,
                           tie_embeddings=True, name="gpt2-xl"),
    "llama3-8b": ModelConfig("llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                             vocab=128256, seq=8192, rope_theta=500000.0, name="llama3-8b"),
    "llama3-70b": ModelConfig("llama", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                              vocab=128256, seq=8192, rope_theta=500000.0, name="llama3-70b"),
    "llama3-405b": ModelConfig("llama", layers=126, hidden=16384, heads=128, kv_heads=8,
                               ffn=53248, vocab=128256, seq=8192, rope_theta=500000.0,
                               name="llama3-405b"),
    # A ~1.02-trillion-parameter Llama-style model (not a published model; for planning at scale).
    "llama-1t": ModelConfig("llama", layers=128, hidden=24576, heads=192, kv_heads=8, ffn=90112,
                            vocab=128256, seq=8192, rope_theta=500000.0, name="llama-1t"),
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}") from None


def from_hf_config(source) -> ModelConfig:
    """Read a Hugging Face `config.json` (path, directory or dict) of a GPT-2 or Llama model."""
    if isinstance(source, (str, os.PathLike)):
        path = os.path.join(source, "config.json") if os.path.isdir(source) else source
        with open(path) as f:
            cfg = json.load(f)
    else:
        cfg = dict(source)
    model_type = cfg.get("model_type", "")
    name = cfg.get("_name_or_path") or model_type or "hf"
    if model_type == "gpt2":
        hidden = cfg["n_embd"]
        return ModelConfig("gpt", layers=cfg["n_layer"], hidden=hidden, heads=cfg["n_head"],
                           vocab=cfg["vocab_size"], seq=cfg.get("n_positions", 1024),
                           ffn=cfg.get("n_inner") or 4 * hidden,
                           dropout=float(cfg.get("resid_pdrop", 0.0)),
                           tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
                           norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)), name=name)
    if model_type in ("llama", "mistral"):
        heads = cfg["num_attention_heads"]
        return ModelConfig("llama", layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"],
                           heads=heads, kv_heads=cfg.get("num_key_value_heads") or heads,
                           ffn=cfg["intermediate_size"], vocab=cfg["vocab_size"],
                           seq=cfg.get("max_position_embeddings", 2048),
                           tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                           norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
                           rope_theta=float(cfg.get("rope_theta", 10000.0)), name=name)
    raise ValueError(f"unsupported HF model_type {model_type!r}: only 'gpt2' and 'llama' are read")
