"""Ops that run as calls into PyTorch: matmuls (cuBLAS), attention (SDPA), RNG, anything else.

A library node keeps the aten target and an argument template whose tensor positions are
`Slot(i)` pointing at the node's i-th input; the runtime fills the slots and calls the target.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten, tree_map

from cherenkov.ir.graph import Node, TensorMeta
from cherenkov.ir.ops import Op

aten = torch.ops.aten

MATMUL_TARGETS = {aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.addbmm, aten.dot, aten.mv,
                  aten.addmv, aten._scaled_mm}
ATTENTION_TARGETS = {
    aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_efficient_attention_backward,
    aten._scaled_dot_product_cudnn_attention, aten._scaled_dot_product_cudnn_attention_backward,
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward,
    aten.scaled_dot_product_attention, aten._flash_attention_forward,
    aten._flash_attention_backward, aten._efficient_attention_forward,
    aten._efficient_attention_backward,
}
RANDOM_TARGETS = {aten.native_dropout, aten.rand, aten.randn, aten.rand_like, aten.randn_like,
                  aten.bernoulli, aten.randint, aten.randint_like, aten.normal, aten.uniform,
                  aten.randperm, aten.multinomial, aten.exponential, aten.geometric,
                  aten.log_normal, aten.cauchy}


@dataclass(frozen=True, slots=True)
class Slot:
    index: int


def library_kind(target) -> Op:
    packet = getattr(target, "overloadpacket", target)
    if packet in MATMUL_TARGETS:
        return Op.MATMUL
    if packet in ATTENTION_TARGETS:
        return Op.ATTENTION
    if packet in RANDOM_TARGETS:
        return Op.RANDOM
    return Op.EXTERN


def _meta_of(value, device):
    if isinstance(value, torch.Tensor):
        return TensorMeta(tuple(int(s) for s in value.shape), value.dtype, value.device,
                          tuple(int(s) for s in value.stride()))
    return None


def library_node(target, args, kwargs, fake_out, reason: str = "", op: Op | None = None):
    """A node calling `target(*args, **kwargs)`, where args hold IR nodes for tensors."""
    inputs: list[Node] = []

    def to_slot(value):
        if isinstance(value, Node):
            inputs.append(value)
            return Slot(len(inputs) - 1)
        return value

    template_args = tree_map(to_slot, tuple(args))
    template_kwargs = tree_map(to_slot, dict(kwargs))
    if isinstance(fake_out, (tuple, list)):
        meta = tuple(_meta_of(o, None) for o in fake_out)
    else:
        meta = _meta_of(fake_out, None)
    op = op or library_kind(target)
    return Node(op, tuple(inputs), (target, template_args, template_kwargs, reason), meta)


def template_filler(template):
    """A fast `fill_template` for one template, built once: slots at the top level or inside
    a top-level list/tuple (cat's tensor list, index's index list) are filled without walking
    the tree on every call; deeper nesting falls back to the general walk."""
    def part(value):
        if isinstance(value, Slot):
            i = value.index
            return lambda vals: vals[i]
        if isinstance(value, (list, tuple)) and any(isinstance(v, Slot) for v in value):
            if any(isinstance(v, (list, tuple, dict)) for v in value):
                return lambda vals: fill_template(value, vals)
            kind = type(value)
            items = [(True, v.index) if isinstance(v, Slot) else (False, v) for v in value]
            return lambda vals: kind(vals[x] if is_slot else x for is_slot, x in items)
        if template_has_slots(value):
            return lambda vals: fill_template(value, vals)
        return lambda vals: value

    if isinstance(template, dict):
        parts = {k: part(v) for k, v in template.items()}
        return lambda vals: {k: f(vals) for k, f in parts.items()}
    parts = [part(v) for v in template]
    return lambda vals: [f(vals) for f in parts]


def fill_template(template, values):
    return tree_map(lambda v: values[v.index] if isinstance(v, Slot) else v, template)


def template_has_slots(template) -> bool:
    leaves, _ = tree_flatten(template)
    return any(isinstance(leaf, Slot) for leaf in leaves)
