"""Correctness before speed: an implementation's outputs (and gradients) against a reference
computed at higher precision, judged by how far eager itself lands from that reference.

For every output tensor, with rel(a, b) = ||a - b|| / ||b||:

    passed  <=>  rel(candidate, reference) <= 2 * rel(eager, reference) + floor(dtype)

The reference runs the same function on inputs upcast to fp32 (fp64 when the inputs are
already fp32). `floor` is half the output dtype's epsilon (bf16: 3.9e-3) or 1e-5 for fp32,
so a kernel that is right up to rounding passes and one that is off by a percent fails.
(Under the Triton interpreter fp32 -> bf16 casts truncate instead of rounding to nearest,
doubling bf16 rounding errors: CPU runs of the harness use fp32.)
NaN or a shape mismatch always fails.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

FACTOR = 2.0


def reference_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32


def upcast(inputs: tuple) -> tuple:
    """Floating-point tensors cast to their reference dtype, keeping requires_grad leaves."""
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            y = x.detach().to(reference_dtype(x.dtype))
            out.append(y.requires_grad_(x.requires_grad))
        else:
            out.append(x)
    return tuple(out)


def floor(dtype: torch.dtype) -> float:
    if dtype in (torch.float16, torch.bfloat16):
        return torch.finfo(dtype).eps / 2
    return 1e-5 if dtype == torch.float32 else 1e-10


def relative_error(a: torch.Tensor, ref: torch.Tensor) -> float:
    if a.shape != ref.shape:
        return float("inf")
    a64, r64 = a.detach().double(), ref.detach().double()
    err = ((a64 - r64).norm() / r64.norm().clamp_min(1e-30)).item()
    return err if err == err else float("inf")     # NaN -> inf


def flatten(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


@dataclass
class CheckResult:
    passed: bool
    errors: list[float] = field(default_factory=list)       # candidate vs reference, per output
    allowed: list[float] = field(default_factory=list)      # the bound each had to meet

    @property
    def worst(self) -> float:
        return max(self.errors, default=0.0)

    def describe(self) -> str:
        parts = [f"{e:.2e}<={a:.2e}" if e <= a else f"{e:.2e}>{a:.2e}"
                 for e, a in zip(self.errors, self.allowed)]
        return ("ok " if self.passed else "WRONG ") + ", ".join(parts)


def check(candidate, eager, reference) -> CheckResult:
    """Compare each output of candidate with reference, allowing twice eager's own error."""
    cands, eags, refs = flatten(candidate), flatten(eager), flatten(reference)
    if not (len(cands) == len(eags) == len(refs)):
        return CheckResult(False, [float("inf")], [0.0])
    errors, allowed = [], []
    for c, e, r in zip(cands, eags, refs):
        errors.append(relative_error(c, r))
        allowed.append(FACTOR * relative_error(e, r) + floor(e.dtype))
    return CheckResult(all(x <= a for x, a in zip(errors, allowed)), errors, allowed)
