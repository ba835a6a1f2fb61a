"""Stable, diffable text for a graph, jaxpr-style: shared values named, constants inline.

    { lambda ; a:f32[8,16] b:f32[16]. let
        c:f32[8,16] = expand[shape=(8, 16)] b
        d:f32[8,16] = add a c
      in (d) }
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Graph, Node, TensorMeta
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.ir.placement import format_placements

DTYPE_NAMES = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool", torch.complex64: "c64",
}


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def type_str(meta) -> str:
    if meta is None:
        return "?"
    if isinstance(meta, tuple):
        return "(" + ", ".join(type_str(m) for m in meta) + ")"
    text = f"{dtype_name(meta.dtype)}[{','.join(str(s) for s in meta.shape)}]"
    if meta.placements:
        text += "{" + format_placements(meta.mesh, meta.placements) + "}"
    return text


def _var_names():
    i = 0
    while True:
        n, name = i, ""
        while True:
            name = chr(ord("a") + n % 26) + name
            n = n // 26 - 1
            if n < 0:
                break
        yield name
        i += 1


def _fmt_arg(value) -> str:
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if callable(value) and hasattr(value, "__name__"):
        return str(value)
    return repr(value)


def _param_names(op: Op) -> tuple[str, ...]:
    if op in GroupOp.REDUCTION:
        return ("trailing",)
    if op in GroupOp.SCATTER:
        return ("by", "at")          # ("dim", dim) or ("index", dims)
    if op in GroupOp.SCAN:
        return ("reverse", "acc")
    return {
        Op.RESHAPE: ("shape",), Op.PERMUTE: ("dims",), Op.EXPAND: ("shape",),
        Op.SLICE: ("dim", "start", "step"), Op.CAT: ("dim",), Op.PAD: ("pads", "value"),
        Op.FLIP: ("dims",), Op.GATHER: ("dim",), Op.INDEX: ("dims",), Op.CAST: ("dtype",),
        Op.IOTA: ("dim",), Op.GETITEM: ("index",), Op.AS_STRIDED: ("size", "stride", "offset"),
        Op.WINDOW: ("kernel", "stride", "dilation", "padding", "fill"),
    }.get(op, ())


def format_graph(graph: Graph) -> str:
    names = _var_names()
    name_of: dict[Node, str] = {}
    for node in graph.inputs:
        name_of[node] = next(names)
    header = " ".join(f"{name_of[n]}:{type_str(n.meta)}" for n in graph.inputs)
    lines = [f"{{ lambda ; {header}. let"]
    for node in graph.nodes():
        if node.op in (Op.INPUT, Op.CONST):
            continue
        name_of[node] = next(names)
        operands = " ".join(
            _fmt_arg(i.args[0]) if i.op == Op.CONST else name_of[i] for i in node.inputs)
        lines.append(f"    {name_of[node]}:{type_str(node.meta)} = {_format_op(node)}"
                     + (f" {operands}" if operands else ""))
    outs = ", ".join("_" if o is None else (_fmt_arg(o.args[0]) if o.op == Op.CONST
                                            else name_of[o]) for o in graph.outputs)
    lines.append(f"  in ({outs}) }}")
    return "\n".join(lines)


def _format_op(node: Node) -> str:
    op = node.op.name.lower()
    if node.op in (Op.MATMUL, Op.ATTENTION, Op.RANDOM, Op.EXTERN):
        target = node.args[0]
        label = getattr(target, "__name__", str(target))
        return f"{op}[{label}]"
    names = _param_names(node.op)
    if not names or not node.args:
        return op
    params = ", ".join(f"{k}={_fmt_arg(v)}" for k, v in zip(names, node.args))
    return f"{op}[{params}]"
