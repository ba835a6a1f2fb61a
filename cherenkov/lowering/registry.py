"""The lowering registry: aten op → function that builds IR nodes, one table keyed by op.

    @lowering(aten.exp)
    def _(ctx, x): return ctx.unary(Op.EXP, x)

A lowering receives the `LoweringContext` and the FX node's arguments with tensors replaced by
IR nodes. It returns an IR node (or a list of them for multi-output ops). An op with no entry
here, or whose lowering raises `Unsupported`, becomes an `extern` node run by PyTorch, with the
reason recorded -- never a crash, never a wrong answer.

Two kinds of tensor never reach a lowering, which then declines and the op runs as extern:
complex ones (kernels compute on real dtypes only), and zero-element ones, which need no
kernel (a lowering registered with `empty_inputs=True`, like cat, still sees empty inputs).
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
from torch.utils._pytree import tree_leaves

LOWERINGS: dict[object, Callable] = {}


class Unsupported(Exception):
    """Raised by a lowering for an input it does not handle; the op then runs as extern."""


def _is_empty(value) -> bool:
    return any(int(s) == 0 for s in value.shape)


def _declining(fn, empty_inputs: bool, empty_outputs: bool = False):
    """`fn`, declining complex and zero-element tensors before it sees them."""
    @functools.wraps(fn)
    def lower(ctx, *args, **kwargs):
        outs = [o for o in tree_leaves(ctx.out) if isinstance(o, torch.Tensor)]
        ins = [v for v in tree_leaves((args, kwargs)) if getattr(v, "meta", None) is not None]
        if any(t.dtype.is_complex for t in outs + ins):
            raise Unsupported("complex dtypes")
        if not empty_outputs and any(_is_empty(o) for o in outs):
            raise Unsupported("zero-element output")
        if not empty_inputs and any(_is_empty(v) for v in ins):
            raise Unsupported("zero-element input")
        return fn(ctx, *args, **kwargs)
    return lower


def lowering(*targets, empty_inputs: bool = False, empty_outputs: bool = False):
    """`empty_outputs=True`: an op with auxiliary outputs that may be empty (flash attention's
    debug mask) still reaches its lowering, which must handle them."""
    def register(fn):
        fn = _declining(fn, empty_inputs, empty_outputs)
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
