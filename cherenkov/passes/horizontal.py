"""Horizontal fusion: small pointwise kernels the schedule launches back to back become one
launch (a combo kernel). Its programs are the parts' programs laid end to end; each runs the
part its index falls in (rendered by compiler._triton_kernels from the parts' own sources).

Two kinds of parts, each its own pass:

- `combine_input_casts`: kernels reading one graph input into one output -- autocast's casts
  of the weights to bf16, ~100 launches of 1-5 us at the start of GPT-2's forward. Off by
  default (config combine_casts): on the H200 GPT-2's training step ran 30.4 ms with it, 30.5
  without, in one run (`2026-11-30_train_gpt2_combine_h200_d2af2ae.md`).
- `combine_updates`: kernels writing a value back into a graph input -- a compiled optimizer
  step, one kernel per parameter reading p, g, m, v and writing p, m, v in place (config
  combine_updates): a multi-tensor step in a few launches, each parameter still read and
  written once, where per-parameter launches leave the GPU waiting on the host for the small
  ones (GPT-2's biases and norm weights). On the H200, with combos of up to 32 parts
  (`2026-11-30_optimizer_5471e41.md`): GPT-2's 149 parameters 6.17 -> 1.25 ms (torch's fused
  AdamW 1.34), Llama's 7.00 -> 6.60; now up to MAX_UPDATE_PARTS (8: compile time, below).

Only parts the plan's schedule launches one after another are combined: a combo is one step,
so moving a part next to others would allocate its output early. A big part keeps its own
launch (a big kernel's launch is a small share of it).

    fusion = combine_updates(fusion, graph, plan_order(...))     # Triton, combine_updates
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
# an AdamW update per part: Triton's compile time grows faster than the parts (sm_90, this
# repo's CPU: 1 part 1.0 s, 8 parts 1.9 s, 16 parts 6.5 s, 32 parts 12.3 s), and the compile
# workers build combos side by side, so smaller combos finish sooner for a few more launches
MAX_UPDATE_PARTS = 8
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


def _small_pointwise(group: Group) -> bool:
    k = group.kernel
    return (k is not None and group.R == 1 and not group.row_loop and bool(group.reads)
            and group.X <= MAX_PART_ELEMENTS
            and not any(m.op in GroupOp.SCATTER for m in group.members))


def _cast_part(group: Group, inputs: set, written_back: set) -> bool:
    return (_small_pointwise(group) and len(group.reads) == 1 and group.reads <= inputs
            and len(group.kernel.outputs) == 1
            and not any(m in written_back for m in group.members))


def _update_part(group: Group, inputs: set, written_back: set) -> bool:
    """Reading anything computed before (an AdamW step reads the step count it just
    incremented): a run is cut where a part would read another part's output."""
    return _small_pointwise(group) and any(m in written_back for m in group.members)


def combine_input_casts(fusion: FusionResult, graph: Graph, schedule: Schedule
                        ) -> FusionResult:
    """`fusion` with each run of small single-input kernels over graph inputs combined."""
    return _combine(fusion, graph, schedule, _cast_part, MAX_PARTS)


def combine_updates(fusion: FusionResult, graph: Graph, schedule: Schedule) -> FusionResult:
    """`fusion` with each run of small kernels over graph inputs that write a value back into
    one (an optimizer's per-parameter updates) combined."""
    return _combine(fusion, graph, schedule, _update_part, MAX_UPDATE_PARTS)


def _combine(fusion: FusionResult, graph: Graph, schedule: Schedule, is_part,
             max_parts: int) -> FusionResult:
    """`fusion` with each run of kernels `is_part` accepts that `schedule` (the plan's:
    runtime/schedule.plan_order) launches one after another -- views between them allocate
    nothing -- combined, max_parts at most per combo, and that schedule kept with each combo
    at its first part's place (scheduled again, the plan could order everything differently
    and peak higher). Runs only: a part moved next to others would be allocated early (a
    cast read by a late matmul held through the whole forward)."""
    order = schedule.order
    inputs = {n for n in graph.inputs if n.op == Op.INPUT}
    written_back = {graph.outputs[position] for _, position in graph.mutations}
    runs, run, made = [], [], set()      # made: the current run's members (one launch
    for obj in order:                    # has no order between its parts)
        if isinstance(obj, Group) and not isinstance(obj, ComboGroup) \
                and is_part(obj, inputs, written_back):
            if obj.reads & made:
                runs.append(run)
                run, made = [], set()
            run.append(obj)
            made.update(obj.members)
        elif isinstance(obj, Group) or not (obj in fusion.views or obj.op == Op.GETITEM):
            runs.append(run)
            run, made = [], set()
        else:                    # a view or getitem: its step runs after the combo, placed
            made.add(obj)        # at the run's first part
    runs.append(run)
    chunks = [r[i:i + max_parts] for r in runs for i in range(0, len(r), max_parts)]
    combo_of = {}
    named = len([g for g in fusion.groups if isinstance(g, ComboGroup)])
    for i, chunk in enumerate(c for c in chunks if len(c) >= MIN_PARTS):
        combo = ComboGroup(members=[m for g in chunk for m in g.members],
                           X=sum(g.X for g in chunk), R=1,
                           reads={r for g in chunk for r in g.reads}, parts=chunk)
        combo.kernel = ComboKernel(f"combo{named + i}", [g.kernel for g in chunk])
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
