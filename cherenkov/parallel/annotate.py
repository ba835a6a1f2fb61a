"""`cherenkov.shard`: fix a weight's placement in model code; the planner fills in the rest.

    from cherenkov import shard, Shard, Replicate
    for block in model.layers:                      # Megatron's column-parallel up projection
        shard(block.feed_forward.w1.weight, [Shard(0)])

An annotation names the placement of a parameter over the tensor-parallel mesh axis (the axis
the planner shards layers over), in the parameter's own layout: an `nn.Linear` weight is
[out, in], so `Shard(0)` splits its output features. The planner reads the annotations of a
built-in model (`cherenkov.models` GPT or Llama) with `layer_placements`, maps them onto its
per-layer graph (whose matmul weights are [in, out]) and keeps only the sharding strategies that
honour them; everything else (tp degree, the other ops, pipeline, ZeRO, ...) it still chooses.
Any other model is read through its capture (`capture_model.py`), whose weights keep their
parameter paths inside the block.
Since one transformer block is solved and repeated, every block must carry the same
annotations. The tensor itself is unchanged: `shard` returns it, so it can wrap an expression.
"""
from __future__ import annotations

from cherenkov.ir.placement import Partial, Placement, Replicate, Shard

ATTR = "_cherenkov_placements"

# parameter path inside a block -> (the planner's weight name, stored transposed there?)
GPT_BLOCK = {
    "ln_1.weight": ("ln1.w", False), "ln_1.bias": ("ln1.b", False),
    "attn.c_attn.weight": ("qkv.w", True), "attn.c_attn.bias": ("qkv.bias", False),
    "attn.c_proj.weight": ("proj.w", True), "attn.c_proj.bias": ("proj.bias", False),
    "ln_2.weight": ("ln2.w", False), "ln_2.bias": ("ln2.b", False),
    "mlp.c_fc.weight": ("fc1.w", True), "mlp.c_fc.bias": ("fc1.bias", False),
    "mlp.c_proj.weight": ("fc2.w", True), "mlp.c_proj.bias": ("fc2.bias", False),
}
LLAMA_BLOCK = {   # wq/wk/wv are one qkv matmul to the planner, w1/w3 one gate_up matmul
    "attention_norm.weight": ("ln1.w", False), "ffn_norm.weight": ("ln2.w", False),
    "attention.wq.weight": ("qkv.w", True), "attention.wk.weight": ("qkv.w", True),
    "attention.wv.weight": ("qkv.w", True), "attention.wo.weight": ("proj.w", True),
    "feed_forward.w1.weight": ("gate_up.w", True), "feed_forward.w3.weight": ("gate_up.w", True),
    "feed_forward.w2.weight": ("fc2.w", True),
}


def shard(tensor, placements):
    """Record `placements` (one per mesh axis: today one, the tensor-parallel axis) on
    `tensor` for the planner; returns `tensor` unchanged."""
    if isinstance(placements, (Shard, Replicate, Partial)):
        placements = [placements]
    placements = tuple(placements)
    if len(placements) != 1:
        raise ValueError(f"cherenkov.shard: {len(placements)} placements given; layers are "
                         "sharded over one mesh axis (tensor parallel): give exactly one")
    p = placements[0]
    if not isinstance(p, (Shard, Replicate)):
        raise TypeError(f"cherenkov.shard: {p!r} is not Shard(dim) or Replicate() (a weight "
                        "is never a partial sum)")
    if isinstance(p, Shard) and not 0 <= p.dim < tensor.dim():
        raise ValueError(f"cherenkov.shard: Shard({p.dim}) of a {tensor.dim()}-d tensor "
                         f"of shape {tuple(tensor.shape)}")
    setattr(tensor, ATTR, placements)
    return tensor


def placement_of(tensor) -> Placement | None:
    placements = getattr(tensor, ATTR, None)
    return placements[0] if placements else None


def _planner_view(p: Placement, transposed: bool) -> Placement:
    if isinstance(p, Shard) and transposed:
        return Shard(1 - p.dim)
    return p


def layer_placements(model, captured=None) -> dict[str, Placement]:
    """The annotations of a built-in GPT or Llama model, or of any model with its
    `CapturedModel`, as {planner weight name: placement}.
    Raises ValueError for annotations the planner cannot honour: on a parameter outside the
    transformer blocks, on blocks that disagree, or on two parameters the planner fuses
    (wq/wk/wv, w1/w3) with different placements."""
    from cherenkov.models.gpt import GPT
    from cherenkov.models.llama import Llama
    if isinstance(model, GPT):
        blocks, table, prefix = model.h, GPT_BLOCK, "h"
    elif isinstance(model, Llama):
        blocks, table, prefix = model.layers, LLAMA_BLOCK, "layers"
    elif captured is not None:
        prefix = captured.block_path
        blocks = [model.get_submodule(path) for path in captured.blocks]
        table = {n: (n, False) for n, v in captured.layer.values.items() if v.weight}
        table.update(captured.block_layout)
    else:
        raise TypeError(f"cherenkov.shard annotations are read from cherenkov.models GPT or "
                        f"Llama modules, or through a CapturedModel, not {type(model).__name__}")
    block_params = {id(p) for b in blocks for p in b.parameters()}
    for name, param in model.named_parameters():
        if placement_of(param) is not None and id(param) not in block_params:
            raise ValueError(f"cherenkov.shard on {name}: only transformer-block weights are "
                             "planned from annotations (embedding and head are planned whole)")
    per_block = []
    for i, block in enumerate(blocks):
        found: dict[str, tuple[Placement, str]] = {}
        for path, param in block.named_parameters():
            p = placement_of(param)
            if p is None:
                continue
            if path not in table:  # a parameter the captured forward never used
                raise ValueError(f"cherenkov.shard on {prefix}.{i}.{path}: the planner found no "
                                 "use of it in the block's forward")
            name, transposed = table[path]
            q = _planner_view(p, transposed)
            where = f"{prefix}.{i}.{path}"
            if name in found and found[name][0] != q:
                raise ValueError(f"cherenkov.shard: {found[name][1]} and {where} are one "
                                 f"matmul to the planner ({name}) but are annotated "
                                 f"differently ({found[name][0]} vs {q} in its layout)")
            found[name] = (q, where)
        per_block.append({n: q for n, (q, _) in found.items()})
    for i, annotations in enumerate(per_block[1:], start=1):
        if annotations != per_block[0]:
            raise ValueError(f"cherenkov.shard: {prefix}.{i} is annotated differently from "
                             f"{prefix}.0 ({_show(annotations)} vs {_show(per_block[0])}); the "
                             "planner solves one block and repeats it, so annotate every "
                             "block alike")
    return per_block[0] if per_block else {}


def _show(annotations: dict) -> str:
    return "{" + ", ".join(f"{n}: {p}" for n, p in sorted(annotations.items())) + "}" \
        if annotations else "none"
