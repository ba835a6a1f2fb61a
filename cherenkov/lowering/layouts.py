"""Computed values laid out as eager lays them out.

A pointwise op on a channels-last (or otherwise permuted) tensor gives, in eager, a result in
the same layout. Cherenkov records that layout on the IR value it computes (`meta.stride`):
where the value is realized -- saved for the backward, read by a library call, returned --
the kernel stores it there, the runtime allocates it so, and every kernel reading it follows
those strides. Left row-major, a channels-last network's saved activations were written with
neighbouring lanes C elements apart by kernels reading channels-last inputs, and read so again
by the backward's (ReLU(2x + 1) forward + backward at 0.42x torch.compile on the H200,
bench/results/2026-12-01_pooling_gpu_h200_22204a6.md); reductions and pooling over such a value
take their order from it (split_reductions, lowering/pooling.py).

Only elementwise results the lowering of this FX node made take a layout (never a view, an
input, a library call's result or a value an earlier node already returned), and only a dense
layout that is not row-major.
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node, TensorMeta, dense_order, is_dense
from cherenkov.ir.ops import GroupOp, Op

_LAID_OUT = GroupOp.ELEMENTWISE - {Op.CONST, Op.IOTA}


def eager_strides(value, fake) -> tuple | None:
    """`fake`'s strides where they can lay out `value`: fake (the FX node's recorded result)
    a tensor of value's shape in a dense layout, value a computed tensor -- no view, input or
    library result, which have layouts of their own. None otherwise."""
    if not isinstance(value, Node) or not isinstance(fake, torch.Tensor) \
            or value.op in GroupOp.VIEW or value.op == Op.INPUT or value.op in GroupOp.LIBRARY \
            or not isinstance(value.meta, TensorMeta) or tuple(fake.shape) != tuple(value.shape):
        return None
    strides = tuple(int(s) for s in fake.stride())
    return strides if is_dense(value.shape, strides) else None


def in_eager_layout(value, fake, made: set[int]):
    """`value` (an FX node's lowering) with eager's layout `fake.stride()` recorded where it
    applies (see the module docstring); `made`: ids of values earlier FX nodes lowered to."""
    if not isinstance(value, Node) or id(value) in made or value.op not in _LAID_OUT:
        return value
    strides = eager_strides(value, fake)
    if strides is None or value.meta.stride is not None \
            or dense_order(value.shape, strides) is None:
        return value
    return value.replace(meta=value.meta.replace(stride=strides))
