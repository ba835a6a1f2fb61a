"""The lowering registry: aten op → function that builds IR nodes, one table keyed by op.

    @lowering(aten.exp)
    def _(ctx, x): return ctx.unary(Op.EXP, x)

A lowering receives the `LoweringContext` and the FX node's arguments with tensors replaced by
IR nodes. It returns an IR node (or a list of them for multi-output ops). An op with no entry
here, or whose lowering raises `Unsupported`, becomes an `extern` node run by PyTorch, with the
reason recorded -- never a crash, never a wrong answer.
"""
from __future__ import annotations

from typing import Callable

import torch

LOWERINGS: dict[object, Callable] = {}


class Unsupported(Exception):
    """Raised by a lowering for an input it does not handle; the op then runs as extern."""


def lowering(*targets):
    def register(fn):
        for target in targets:
            if isinstance(target, torch._ops.OpOverloadPacket):
                for name in target.overloads():
                    LOWERINGS.setdefault(getattr(target, name), fn)
            else:
                LOWERINGS[target] = fn
        return fn
    return register


def lookup(target) -> Callable | None:
    fn = LOWERINGS.get(target)
    if fn is None and isinstance(target, torch._ops.OpOverload):
        fn = LOWERINGS.get(target.overloadpacket)
    return fn
