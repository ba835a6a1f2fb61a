"""Horizontal fusion: small pointwise kernels that each read one graph input only -- autocast's
casts of the weights to bf16, ~100 launches of 1-5 us at the start of GPT-2's forward, where
the host issuing them falls behind the GPU -- become one launch (a combo kernel). Its programs
are the parts' programs laid end to end; each runs the part its index falls in (rendered by
compiler._triton_kernels from the parts' own sources).

    fusion = combine_input_casts(fusion, graph, plan_order(...))   # Triton, combine_casts

Off by default: on the H200 GPT-2's training step ran 30.4 ms with it, 30.5 without, in one run
(`2026-11-30_train_gpt2_combine_h200_d2af2ae.md`): no measurable gain for its compile time.

Only parts the plan's schedule launches one after another are combined (GPT-2's casts all
come first): a combo is one step, so moving a part next to others would allocate its output
early. A part must not be a value the graph writes back into an input (an optimizer's update,
which the plan writes in place, per kernel), nor big (a big kernel's launch is a small share
of it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cherenkov.codegen.kernel_ir import Kernel
from cherenkov.ir.graph import Graph
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.passes.fusion import FusionResult, Group
from cherenkov.runtime.schedule import Schedule

MAX_PART_ELEMENTS = 1 << 24     # bigger kernels keep their own launch
MAX_PARTS = 32                  # parts per combo kernel (its source and compile time grow)
MIN_PARTS = 2


@dataclass
class ComboKernel:
    """Stands in for a combo's kernel IR where the runtime and cost reports ask for one."""
    name: str
    parts: list[Kernel]
    body: list = field(default_factory=list)     # no statements of its own
    R: int = 1

    @property
    def X(self) -> int:
        return sum(p.X for p in self.parts)

    @property
    def fused_ops(self) -> int:
        return sum(p.fused_ops for p in self.parts)

    @property
    def inputs(self) -> list:
        return [b for p in self.parts for b in p.inputs]

    @property
    def outputs(self) -> list:
        return [b for p in self.parts for b in p.outputs]

    def flops(self) -> int:
        return sum(p.flops() for p in self.parts)

    def bytes_moved(self) -> int:
        return sum(p.bytes_moved() for p in self.parts)

    def __str__(self) -> str:
        return f"combo {self.name} of {len(self.parts)} kernels:\n" + "\n".join(
            str(p) for p in self.parts)


@dataclass(eq=False)
class ComboGroup(Group):
    parts: list = field(default_factory=list)    # the Groups, each rendered as its own part


def _part(group: Group, inputs: set, written_back: set) -> bool:
    k = group.kernel
    return (k is not None and group.R == 1 and not group.row_loop and len(group.reads) == 1
            and next(iter(group.reads)) in inputs and len(k.outputs) == 1
            and group.X <= MAX_PART_ELEMENTS
            and not any(m.op in GroupOp.SCATTER or m in written_back for m in group.members))


def combine_input_casts(fusion: FusionResult, graph: Graph, schedule: Schedule
                        ) -> FusionResult:
    """`fusion` with each run of small single-input kernels over graph inputs that `schedule`
    (the plan's: runtime/schedule.plan_order) launches one after another -- views between
    them allocate nothing -- combined, MAX_PARTS at most per combo, and that schedule kept
    with each combo at its first part's place (scheduled again, the plan could order
    everything differently and peak higher). Runs only: a part moved next to others would be
    allocated early (a cast read by a late matmul held through the whole forward)."""
    order = schedule.order
    inputs = {n for n in graph.inputs if n.op == Op.INPUT}
    written_back = {graph.outputs[position] for _, position in graph.mutations}
    runs, run = [], []
    for obj in order:
        if isinstance(obj, Group) and _part(obj, inputs, written_back):
            run.append(obj)
        elif isinstance(obj, Group) or not (obj in fusion.views or obj.op == Op.GETITEM):
            runs.append(run)
            run = []
    runs.append(run)
    chunks = [r[i:i + MAX_PARTS] for r in runs for i in range(0, len(r), MAX_PARTS)]
    combo_of = {}
    for chunk in (c for c in chunks if len(c) >= MIN_PARTS):
        combo = ComboGroup(members=[m for g in chunk for m in g.members],
                           X=sum(g.X for g in chunk), R=1,
                           reads={r for g in chunk for r in g.reads}, parts=chunk)
        combo.kernel = ComboKernel(f"combo{len(set(combo_of.values()))}",
                                   [g.kernel for g in chunk])
        combo_of.update((g, combo) for g in chunk)
    if not combo_of:
        return fusion

    def substituted(items):
        out, placed = [], set()
        for g in items:
            combo = combo_of.get(g) if isinstance(g, Group) else None
            if combo is None:
                out.append(g)
            elif combo not in placed:
                placed.add(combo)
                out.append(combo)
        return out
    kept = Schedule(substituted(order), schedule.chosen, schedule.peaks)
    return FusionResult(substituted(fusion.groups), fusion.realized, fusion.views, kept)
