"""Bytes a plan keeps alive, step by step: a static replay of `CompiledGraph.steps` with the
frees the runtime does (each slot dropped after its last reader, a backward's inputs too).

A kernel or library call allocates its outputs (an output written in place into an input
allocates nothing); a view or getitem shares its source's storage, which stays alive while
any slot on it is. Inputs start alive, as a backward's saved activations do. Used to compare
execution orders (the plan's peak is what `torch.cuda.max_memory_allocated` sees of it) and by
tests; it needs no device.
"""
from __future__ import annotations

from cherenkov.ir.graph import meta_nbytes


def live_bytes(compiled, inputs: bool = True) -> list[int]:
    """Bytes alive after each step of `compiled.steps` (not counting what the caller holds);
    with `inputs=False`, only what the plan itself allocates (a CUDA graph's pool)."""
    node_of = {s: n for n, s in compiled.slot.items()}
    storage: dict[int, int] = {}          # slot -> storage id
    size: dict[int, int] = {}             # storage id -> bytes
    holders: dict[int, int] = {}          # storage id -> live slots on it
    current = 0

    def hold(slot: int, sid: int, nbytes: int = 0) -> None:
        nonlocal current
        storage[slot] = sid
        if sid not in size:
            size[sid] = nbytes
            current += nbytes
        holders[sid] = holders.get(sid, 0) + 1

    def drop(slot: int) -> None:
        nonlocal current
        sid = storage.pop(slot, None)
        if sid is None:
            return
        holders[sid] -= 1
        if holders[sid] == 0:
            current -= size[sid]

    for i in range(compiled.n_inputs):
        node = node_of.get(i)
        hold(i, i, meta_nbytes(node.meta) if node is not None and inputs else 0)
    timeline = []
    for step in compiled.steps:
        for slot in getattr(step, "out_slots", ()):
            into = getattr(step, "into", {})
            if slot in into:
                hold(slot, storage.get(into[slot], slot))
            elif step.kind in ("view", "getitem") and step.reads and step.reads[0] in storage:
                hold(slot, storage[step.reads[0]])
            else:
                hold(slot, slot, meta_nbytes(node_of[slot].meta) if slot in node_of else 0)
        timeline.append(current)
        for slot in step.frees:
            drop(slot)
    return timeline
