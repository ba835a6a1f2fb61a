"""The epilogue ops a matmul template can fuse, one registry keyed by name.

Each op says what it needs (nothing, a per-column vector, a tensor of C's shape, or a scalar),
the Triton code applied to the fp32 accumulator tile `acc` (BLOCK_M, BLOCK_N), and the eager
PyTorch function that computes the same thing after a cuBLAS matmul. An epilogue is an ordered
tuple of names, applied left to right; the final cast to the output dtype is the store itself.

    ("bias", "gelu_tanh")           GPT-2 c_fc:           gelu(x @ W + b)
    ("bias", "residual")            GPT-2 c_proj:         x @ W + b + r
    ("scale", "residual")           scaled attention out: s * (x @ W) + r
    ("silu", "mul")                 SwiGLU:               silu(x @ Wg) * u

Operands of op i are kernel arguments named `ep{i}` (pointer or scalar) with strides
`ep{i}_sb, ep{i}_sm, ep{i}_sn` (batch, row, column; 0 where broadcast).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

# what an epilogue op reads besides the accumulator
NONE, COLUMN, TENSOR, SCALAR = "none", "column", "tensor", "scalar"

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class EpilogueOp:
    name: str
    operand: str                 # NONE | COLUMN | TENSOR | SCALAR
    code: str                    # Triton expression of `acc` (and `v`, the loaded operand)
    eager: Callable              # eager(acc_fp32, operand_or_None) -> tensor


EPILOGUES: dict[str, EpilogueOp] = {}


def _register(name, operand, code, eager):
    EPILOGUES[name] = EpilogueOp(name, operand, code, eager)


# 0.5 x (1 + tanh(y)) == x sigmoid(2y): no libdevice tanh needed (the interpreter lacks it).
_register("gelu_tanh", NONE,
          f"acc * tl.sigmoid({2 * _SQRT_2_OVER_PI!r} * (acc + 0.044715 * acc * acc * acc))",
          lambda x, v: torch.nn.functional.gelu(x, approximate="tanh"))
_register("gelu_erf", NONE, f"0.5 * acc * (1.0 + tl.erf(acc * {1 / math.sqrt(2.0)!r}))",
          lambda x, v: torch.nn.functional.gelu(x))
_register("silu", NONE, "acc * tl.sigmoid(acc)", lambda x, v: torch.nn.functional.silu(x))
_register("relu", NONE, "tl.maximum(acc, 0.0)", lambda x, v: torch.relu(x))
_register("bias", COLUMN, "acc + v[None, :]", lambda x, v: x + v)
_register("scale", SCALAR, "acc * v", lambda x, v: x * v)
_register("residual", TENSOR, "acc + v", lambda x, v: x + v)
_register("mul", TENSOR, "acc * v", lambda x, v: x * v)


def check_epilogue(names) -> tuple[str, ...]:
    names = tuple(names)
    for n in names:
        if n not in EPILOGUES:
            raise ValueError(f"unknown epilogue op {n!r}; known: {sorted(EPILOGUES)}")
    return names


def eager_epilogue(acc: torch.Tensor, names, operands, out_dtype) -> torch.Tensor:
    """Apply the epilogue in eager PyTorch to an fp32 product (the cuBLAS alternative)."""
    x = acc.float()
    for name, v in zip(names, operands):
        op = EPILOGUES[name]
        if isinstance(v, torch.Tensor):
            v = v.float()
        x = op.eager(x, v)
    return x.to(out_dtype)
