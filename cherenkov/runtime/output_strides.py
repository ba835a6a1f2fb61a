"""The strides of a compiled plan's outputs as it returns them.

A view step returns its chain of views applied to its base (`CompiledGraph._view_step`): an
expand keeps stride 0, a permute its permuted strides, where the traced graph may have
recorded the layout of a copy. AOTAutograd is told these strides while it compiles a forward
(backend.py, as Inductor reports its own), so a backward compiled ahead is compiled for the
saved activations it will be given.
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import TensorMeta


def output_strides(compiled) -> list[tuple | None]:
    """Per output of `compiled` (a CompiledGraph): its strides, None where not a tensor."""
    strides = []
    for out in compiled.graph.outputs:
        meta = getattr(out, "meta", None)
        if not isinstance(meta, TensorMeta):
            strides.append(None)
        elif out in compiled.views:
            base, ops = compiled.views[out]
            b = base.meta
            t = torch.empty_strided(b.shape, b.strides, dtype=b.dtype, device="meta")
            for op in ops:
                t = op(t)
            strides.append(tuple(t.stride()))
        else:
            strides.append(tuple(meta.strides))
    return strides
