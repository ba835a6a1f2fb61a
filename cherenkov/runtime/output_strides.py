"""The strides of a compiled plan's outputs as it returns them.

A view step returns its chain of views applied to its base as one as_strided
(`CompiledGraph._view_step`, its layout by ir/views.final_layout): an expand keeps stride 0, a
permute its permuted strides, where the traced graph may have recorded the layout of a copy.
A chain that copies (a reshape that is no view) returns a fresh tensor in the traced layout.
AOTAutograd is told these strides while it compiles a forward (backend.py, as Inductor reports
its own), so a backward compiled ahead is compiled for the saved activations it will be given.
"""
from __future__ import annotations

from cherenkov.ir.graph import TensorMeta


def output_strides(compiled) -> list[tuple | None]:
    """Per output of `compiled` (a CompiledGraph): its strides, None where not a tensor."""
    return [None if not isinstance(getattr(out, "meta", None), TensorMeta)
            else compiled.view_strides.get(out, tuple(out.meta.strides))
            for out in compiled.graph.outputs]
