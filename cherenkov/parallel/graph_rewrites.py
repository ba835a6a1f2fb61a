"""Rewrites of a captured block's op list, and re-instantiating a captured graph at any size.

`from_graph.py` maps aten ops onto planner ops one by one; these passes then make the op list
say what a compiled training step does, as `layer_graph.py`'s hand-written graphs do:

  - `merge_sibling_matmuls`: matmuls reading the same activation (wq/wk/wv, w1/w3, or a
    parallel block's qkv and MLP up projection) become one matmul with the weights side by
    side, `attention.wq+wk+wv`, and a free `slice` per original output (an elementwise op
    with no FLOPs or bytes). Under tensor parallelism the input is then gathered once and its
    gradient reduced once, as for `layer_graph`'s qkv and gate_up.
  - `dedupe_saved`: a tensor saved for backward by two ops is stored once.
  - `mark_fused_qkv`: the one matmul that makes all of an attention's q, k and v gets the
    attention's heads, so the matmul rule splits it by heads.
  - `rescale`: a graph captured at (b0, s0) at another (batch, seq). Every activation is per
    token, so FLOPs scale with b*s; attention's are recomputed by `attention_flops`, and
    bytes by `op_bytes`, from the new shapes.
"""
from __future__ import annotations

from dataclasses import replace

from cherenkov.parallel.layer_graph import LayerGraph, LayerOp, Value, attention_flops


def op_bytes(op: LayerOp, values: dict[str, Value]) -> float:
    """Forward HBM bytes of an op by the conventions of `layer_graph.py` (a slice: none)."""
    if op.attr("slice"):
        return 0.0
    size = lambda names: sum(values[n].nbytes for n in names)
    if op.kind == "embedding":
        return 2.0 * values[op.output].nbytes + size(op.inputs)
    if op.kind == "cross_entropy":
        return 2.0 * size(op.inputs)
    extra = size(op.weights) if op.kind in ("matmul", "elementwise") else 0
    return float(size(op.inputs) + values[op.output].nbytes + extra)


def _unique(name: str, taken) -> str:
    base, k = name, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def _merged_name(group: list[LayerOp]) -> str:
    """attention.wq + attention.wk + attention.wv -> attention.wq+wk+wv."""
    parents = {op.name.rpartition(".")[0] for op in group}
    if len(parents) == 1:
        leaves = "+".join(op.name.rpartition(".")[2] for op in group)
        return ".".join(filter(None, (parents.pop(), leaves)))
    return "+".join(op.name for op in group)


def merge_sibling_matmuls(ops: list[LayerOp], values: dict[str, Value],
                          layout: dict[str, tuple[str, bool]]) -> list[LayerOp]:
    """One matmul per activation for all matmuls reading it, then a free slice per output.
    Updates `values` (merged weights replace the originals) and `layout` (each original
    parameter -> the merged weight it now lives in)."""
    siblings: dict[str, list[LayerOp]] = {}
    for op in ops:
        if op.kind == "matmul" and values[op.weights[0]].weight:
            siblings.setdefault(op.inputs[0], []).append(op)
    for x, group in siblings.items():
        if len(group) < 2:
            continue
        name = _merged_name(group)
        first = values[group[0].weights[0]]
        n = sum(values[op.output].shape[-1] for op in group)
        weights = [_unique(f"{name}.weight", values)]
        values[weights[0]] = Value(weights[0], (first.shape[0], n), first.itemsize, weight=True)
        biases = [b for op in group for b in op.weights[1:]]
        if biases:
            weights.append(_unique(f"{name}.bias", values))
            values[weights[1]] = Value(weights[1], (sum(values[b].numel for b in biases),),
                                       first.itemsize, weight=True)
        for op in group:
            for i, old in enumerate(op.weights):
                layout[old] = (weights[min(i, len(weights) - 1)], layout.get(old, (old, False))[1])
                del values[old]
        out = _unique(name, set(values) | {op.name for op in ops})
        one = values[group[0].output]
        values[out] = replace(one, name=out, shape=one.shape[:2] + (n,))   # (b, s, sum of n)
        merged = LayerOp(out, "matmul", (x,), out, tuple(weights),
                         flops=sum(op.flops for op in group), saved=(x,))
        slices = [LayerOp(op.output, "elementwise", (out,), op.output, attrs=(("slice", 1),))
                  for op in group]
        at = ops.index(group[0])
        ops = [op for op in ops if op not in group]
        ops[at:at] = [replace(op, bytes=op_bytes(op, values)) for op in [merged] + slices]
    return ops


def dedupe_saved(ops: list[LayerOp]) -> list[LayerOp]:
    """A tensor saved by several ops is stored once: only its first saver keeps it."""
    seen: set = set()
    out = []
    for op in ops:
        keep = tuple(s for s in op.saved if s not in seen)
        seen.update(op.saved)
        out.append(op if keep == op.saved else replace(op, saved=keep))
    return out


def mark_fused_qkv(ops: list[LayerOp], values: dict[str, Value]) -> list[LayerOp]:
    """Heads attributes on the one matmul making all of an attention's q, k and v (through
    slices and pointwise ops such as RoPE), when its width is (heads + 2 kv_heads) head_dim."""
    producer = {op.output: op for op in ops}

    def source(value):
        op = producer.get(value)
        while op is not None and op.kind == "elementwise" and len(op.inputs) == 1:
            op = producer.get(op.inputs[0])
        return op

    ops = list(ops)
    for att in [op for op in ops if op.kind == "attention"]:
        found = {source(v) for v in att.inputs}
        mm = found.pop() if len(found) == 1 else None
        h, kv, d = att.attr("heads"), att.attr("kv_heads"), att.attr("head_dim")
        if mm is not None and mm.kind == "matmul" and \
                values[mm.output].shape[-1] == (h + 2 * kv) * d:
            ops[ops.index(mm)] = replace(mm, attrs=(("heads", h), ("kv_heads", kv),
                                                    ("head_dim", d)))
    return ops


def rescale(graph: LayerGraph, batch: int, seq: int, name: str) -> LayerGraph:
    """`graph` (captured at some b0, s0) at `batch` sequences of length `seq`."""
    b0, s0 = graph.values[graph.input].shape[:2]
    scale = batch * seq / (b0 * s0)
    acts = {graph.input} | {op.output for op in graph.ops}
    values = {n: replace(v, shape=(batch, seq) + v.shape[2:]) if n in acts else v
              for n, v in graph.values.items()}
    ops = []
    for op in graph.ops:
        if op.kind == "attention":
            flops = attention_flops(batch, seq, op.attr("heads"), op.attr("head_dim"),
                                    bool(op.attr("causal", 1)))
        else:
            flops = op.flops * scale
        ops.append(replace(op, flops=flops, bytes=op_bytes(op, values)))
    return replace(graph, name=name, values=values, ops=tuple(ops))
