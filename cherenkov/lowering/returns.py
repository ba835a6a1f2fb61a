"""A graph's returned values with eager's aliasing and layout.

The IR elides copies (clone, contiguous and copy lower to nothing: kernels read through them)
and computes values contiguous. What the caller gets back must still be what eager gives:
which outputs share memory with an input or with each other, and the layout of each.
`as_eager_returns` makes the copies and layouts that needs, on the lowered return values.
"""
from __future__ import annotations

import operator
import torch

from cherenkov.ir.graph import Node, dense_order, view_root
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.lowering.layouts import eager_strides


def as_eager_returns(returned: list, fx_returned: list, env: dict, fake_env: dict,
                     visible: int) -> list:
    """The graph's returned values with eager's aliasing and, where it is safe, layout.

    A copy the IR elided (clone, contiguous: kernels read through them) is made -- once per
    FX node copied, with the outputs that view it rebased onto the copy -- when it would
    otherwise be an input or share memory with an output that eager keeps apart (another FX
    root over the same IR value among the first `visible` outputs, those the caller gets).
    Outputs that view one FX root stay views of one buffer. A computed value (or a copy) is
    stored in eager's layout (`_in_eager_layout`) when the outputs over it all view one FX
    root and are all the caller's: they are rebased onto it."""
    roots = [(view_root(v), _fx_view_root(fx)) if isinstance(v, Node) else (None, None)
             for v, fx in zip(returned, fx_returned)]
    fx_roots_of: dict[Node, set] = {}
    for ir_root, fx_root in roots[:visible]:
        if ir_root is not None:
            fx_roots_of.setdefault(ir_root, set()).add(fx_root)

    # a copy the IR elided -- of an input, of a value another FX root's output shares, or of
    # a view the caller gets ((a * 2).t().contiguous() is dense in eager, a transposed view
    # here): eager's outputs are distinct tensors, in their own layout (equal outputs that are
    # no copies, a + 1 returned twice, CSE keeps apart)
    copied = [isinstance(v, Node) and _elided_copy(fx_root, env) and (
                  ir_root.op == Op.INPUT or (i < visible and (
                      len(fx_roots_of[ir_root]) > 1 or env[fx_root] is not ir_root)))
              for i, (v, (ir_root, fx_root)) in enumerate(zip(returned, roots))]
    # an IR value (or a copy) may be stored in eager's layout when every output over it
    # views one FX root and the caller gets them all: the views are rebased onto it
    keys = [("copy", fx_root) if c else ir_root for (ir_root, fx_root), c in zip(roots, copied)]
    over: dict = {}                          # IR root or copied FX root -> [(i, FX root)]
    for i, ((ir_root, fx_root), key) in enumerate(zip(roots, keys)):
        if ir_root is not None:
            over.setdefault(key, []).append((i, fx_root))
    relayable = {key for key, outs in over.items()
                 if all(i < visible and fx is outs[0][1] for i, fx in outs)}
    made: dict = {}                  # key of `over` -> the node its outputs are rebased onto
    out = []
    for i, (value, (ir_root, fx_root)) in enumerate(zip(returned, roots)):
        if not isinstance(value, Node):
            out.append(value)
            continue
        key, base = keys[i], (env[fx_root] if copied[i] else ir_root)
        if key not in made:
            made[key] = _copy(base, i) if copied[i] else base
            if key in relayable and (copied[i] or env.get(fx_root) is ir_root):
                made[key] = _in_eager_layout(made[key], fake_env.get(fx_root), i)
        if made[key] is not base:
            value = _rebased(value, base, made[key]) or _copy(value, i)
        out.append(value)
    return out


def _copy(value: Node, i: int) -> Node:
    """A contiguous copy of `value` made for output i (its args keep CSE from merging it
    with another output's copy)."""
    return Node(Op.CAST, (value,), (value.dtype, "copy", i), value.meta.replace(stride=None))


def _rebased(value: Node, old: Node, new: Node) -> Node | None:
    """`value`, a chain of IR views over `old`, over `new` instead; None if it is not one."""
    if value is old:
        return new
    if value.op not in GroupOp.VIEW:
        return None
    below = _rebased(value.inputs[0], old, new)
    return None if below is None else value.replace(inputs=(below,) + tuple(value.inputs[1:]))


def _in_eager_layout(value: Node, fake, i: int) -> Node:
    """A computed output whose eager result is laid out otherwise than contiguous (a
    pointwise op on a transposed or channels_last input keeps its layout) stored in eager's
    layout by the kernel that computes it: a layout node the fusion inlines its producer
    into. Views, inputs and library results keep theirs."""
    strides = eager_strides(value, fake)
    # a value laid out as eager's (lowering/layouts.py) returned through a copy eager makes
    # contiguous (`(x * 2).reshape(-1)` of a transposed x): stored again, contiguous
    if strides is None or dense_order(value.shape, value.meta.strides) == dense_order(
            value.shape, strides):
        return value
    want = None if fake.is_contiguous() else strides
    return Node(Op.CAST, (value,), (value.dtype, "layout", i), value.meta.replace(stride=want))


def _elided_copy(fx_root, env: dict) -> bool:
    """Whether FX node `fx_root` makes a new tensor in eager (it is no view) that the IR
    made none of: its value reads the storage one of its tensor arguments' does (a clone;
    a cat or stack of one tensor)."""
    if not isinstance(fx_root, torch.fx.Node) or fx_root.op != "call_function":
        return False
    value = env.get(fx_root)
    if not isinstance(value, Node):
        return False
    sources = []
    torch.fx.node.map_arg((fx_root.args, fx_root.kwargs), sources.append)
    return any(isinstance(env.get(a), Node) and view_root(env[a]) is view_root(value)
               for a in sources)


def _fx_view_root(arg):
    """The FX node an output aliases: through view ops (a returned alias AOTAutograd knows
    of) to a placeholder or to the value computed. A clone stops the walk: it is the root of
    a new tensor -- the caller may write into it, and the graph may update the input it was
    copied from in place (an optimizer's new momentum buffer is a clone of the gradient it
    then updates)."""
    while isinstance(arg, torch.fx.Node) and arg.op == "call_function":
        if arg.target is operator.getitem:          # a piece of split / unbind / chunk
            arg = arg.args[0]
            continue
        schema = getattr(arg.target, "_schema", None)
        if schema is None or not schema.returns or schema.returns[0].alias_info is None \
                or schema.returns[0].alias_info.is_write or not arg.args:
            return arg
        arg = arg.args[0]
    return arg
