"""What one benchmark case is: an eager function, how to build its inputs, and how many bytes
it must move (the minimum any implementation reads and writes in device memory).

A case runs in one or two *modes*: "fwd" (the function) and "fwd+bwd" (the function, then the
gradients of its inputs listed in `grad_inputs` given a fixed upstream gradient). Bandwidth in
the reports is always `bytes / measured time` with these minimal bytes, so an implementation
that moves extra bytes (an unfused intermediate, a saved activation) shows up as lost GB/s.

    Case("softmax", softmax, inputs, grad_inputs=(0,), bytes={"fwd": 2 * E * 2,
         "fwd+bwd": 5 * E * 2}, shape="32768x4096 bf16")
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

MODES = ("fwd", "fwd+bwd")


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable                               # eager function: inputs -> tensor
    make_inputs: Callable[[torch.device], tuple]   # fresh random inputs on a device
    bytes: dict[str, int]                      # mode -> minimal bytes read + written
    shape: str = ""                            # for people: "32768x4096 bf16"
    grad_inputs: tuple[int, ...] = ()          # input positions that get gradients
    flops: dict[str, float] = field(default_factory=dict)   # mode -> FLOPs, where relevant

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(m for m in MODES if m in self.bytes and (m == "fwd" or self.grad_inputs))

    def label(self, mode: str) -> str:
        return f"{self.name} [{mode}]"


def prepare(case: Case, mode: str, inputs: tuple) -> tuple:
    """Inputs for one mode: the differentiable ones detached and marked requires_grad in
    fwd+bwd (so every copy is a leaf), untouched otherwise."""
    if mode == "fwd":
        return tuple(inputs)
    return tuple(x.detach().requires_grad_(True) if i in case.grad_inputs else x
                 for i, x in enumerate(inputs))


def step(fn: Callable, case: Case, mode: str, inputs: tuple, grad_out):
    """One timed unit of work: fn(inputs), and in fwd+bwd the input gradients as a tuple.
    torch.autograd.grad (not .backward) so nothing accumulates into .grad between calls."""
    if mode == "fwd":
        return fn(*inputs)
    out = fn(*inputs)
    wrt = [inputs[i] for i in case.grad_inputs]
    grads = tuple(torch.autograd.grad(out, wrt, grad_outputs=grad_out))
    return (tuple(out) if isinstance(out, (tuple, list)) else (out,)) + grads


def make_grad_out(out, seed: int = 1):
    """A fixed random upstream gradient shaped like the output (None for a scalar loss); a
    tuple of them, one seed each, for a tuple of outputs."""
    if isinstance(out, (tuple, list)):
        return tuple(make_grad_out(o, seed + i) for i, o in enumerate(out))
    if out.dim() == 0:
        return None
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(out.shape, generator=g, dtype=torch.float32).to(out.device, out.dtype)
