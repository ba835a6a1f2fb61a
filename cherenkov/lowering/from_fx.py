"""FX (aten, after our decompositions) → Cherenkov graph IR, for one set of concrete shapes.

Each FX node runs once on fake tensors to learn its output (shape, dtype, strides); the
registered lowering, if any, then builds IR nodes, and their shape and dtype are checked against
the fake output. An op without a lowering, or whose lowering declines, becomes `extern`.
"""
from __future__ import annotations

import logging
import operator
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._pytree import tree_leaves, tree_map

from cherenkov.ir.graph import Graph, Node, TensorMeta, is_dense
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.lowering import registry
from cherenkov.lowering.context import LoweringContext
from cherenkov.lowering.library import library_node
from cherenkov.lowering.registry import Unsupported

# importing these fills the registry
from cherenkov.lowering import (attention, creation, elementwise, movement, prims,  # noqa: F401
                                reductions, scatter, templates)

log = logging.getLogger("cherenkov")


class LoweringError(Exception):
    """A lowering produced IR that disagrees with PyTorch (a bug in Cherenkov)."""


@dataclass
class LoweringReport:
    externs: list[tuple[str, str]] = field(default_factory=list)   # (op name, reason)
    compile_jobs: list = field(default_factory=list)    # library kernels to compile now
    later_jobs: list = field(default_factory=list)      # ... and for the backward graph

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name, _ in self.externs:
            counts[name] = counts.get(name, 0) + 1
        return counts


def _op_name(target) -> str:
    return str(getattr(target, "__name__", target))


class GraphNotSupported(RuntimeError):
    """The graph as a whole cannot be compiled (the backend runs it in eager, with this reason)."""


def graph_device(inputs: list) -> torch.device:
    """Where a graph's kernels run: the first accelerator among its tensor inputs, else the CPU.
    (An optimizer step on CUDA parameters also reads its CPU step counters.)"""
    devices = [t.device for t in inputs if isinstance(t, torch.Tensor)]
    return next((d for d in devices if d.type != "cpu"),
                devices[0] if devices else torch.device("cpu"))


def _devices(fake_out) -> set:
    flat = fake_out if isinstance(fake_out, (list, tuple)) else [fake_out]
    return {t.device for t in flat if isinstance(t, torch.Tensor)}


def lower_fx(gm: torch.fx.GraphModule, inputs: list, strict: bool = False,
             name: str = "graph", route_attention: bool = True) -> tuple[Graph, LoweringReport]:
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    device = graph_device(inputs)
    ctx = LoweringContext(device, route_attention, training=name.startswith("forward"))
    report = LoweringReport(compile_jobs=ctx.compile_jobs, later_jobs=ctx.later_jobs)
    env: dict[torch.fx.Node, object] = {}
    fake_env: dict[torch.fx.Node, object] = {}
    graph_inputs: list[Node] = []
    outputs: list = []
    scalar_outputs: dict[int, object] = {}
    mutations: list = []                  # (input index, new value)
    placeholder_index = 0

    def ir_of(value):
        return tree_map(lambda n: env[n] if isinstance(n, torch.fx.Node) else n, value)

    def fake_of(value):
        return tree_map(lambda n: fake_env[n] if isinstance(n, torch.fx.Node) else n, value)

    transfers: dict[Node, Node] = {}

    def on_device(value):
        """`value` with every tensor on another device (a CPU scalar read by a CUDA graph's
        kernels) replaced by its copy to the graph's device, made once per tensor."""
        def move(n):
            if not (isinstance(n, Node) and isinstance(n.meta, TensorMeta)
                    and n.meta.device != device):
                return n
            if n not in transfers:
                with fake_mode:
                    fake = torch.empty_strided(n.shape, n.meta.strides, dtype=n.dtype,
                                               device=device)
                transfers[n] = library_node(torch.ops.aten._to_copy.default, (n,),
                                            {"device": device, "non_blocking": True}, fake,
                                            f"copy from {n.meta.device} to {device}",
                                            op=Op.EXTERN)
            return transfers[n]
        return tree_map(move, value)

    def ours(x):
        """A fake tensor from the tracer's fake mode (a node's recorded value) as one of
        ours, for running an op the tracer left no value for."""
        if isinstance(x, FakeTensor) and x.fake_mode is not fake_mode:
            with fake_mode:
                return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
        return x

    def off_device(target, args, kwargs, fake_out):
        """An op whose result lives on another device than the graph's runs as a PyTorch call
        there (a CUDA optimizer step's `step += 1` on its CPU counter)."""
        where = ", ".join(sorted(str(d) for d in _devices(fake_out)))
        reason = f"{_op_name(target)} runs on {where} (the graph's kernels run on {device})"
        report.externs.append((_op_name(target), reason))
        return library_node(target, args, kwargs, fake_out, reason, op=Op.EXTERN)

    for fx_node in gm.graph.nodes:
        if fx_node.op == "placeholder":
            value = inputs[placeholder_index]
            if isinstance(value, torch.Tensor):
                node = Node(Op.INPUT, (), (placeholder_index,), TensorMeta.of(value))
                env[fx_node] = node
                fake_env[fx_node] = fake_mode.from_tensor(value)
            else:
                node = Node(Op.INPUT, (), (placeholder_index,), None)
                env[fx_node] = value
                fake_env[fx_node] = value
            graph_inputs.append(node)
            placeholder_index += 1
        elif fx_node.op == "get_attr":
            tensor = getattr(gm, fx_node.target)
            fake_env[fx_node] = fake_mode.from_tensor(tensor)
            env[fx_node] = library_node(lambda t=tensor: t, (), {}, tensor, "constant tensor",
                                        op=Op.EXTERN)
        elif fx_node.op == "call_function":
            target = fx_node.target
            args, kwargs = ir_of(fx_node.args), ir_of(fx_node.kwargs)
            if target is operator.getitem and isinstance(args[0], (list, tuple)):
                env[fx_node] = args[0][args[1]]
                fake_env[fx_node] = fake_of(fx_node.args)[0][args[1]]
                continue
            if target is operator.getitem and isinstance(args[0], Node):
                node = args[0]
                meta = node.meta[args[1]] if isinstance(node.meta, tuple) else None
                env[fx_node] = Node(Op.GETITEM, (node,), (args[1],), meta)
                fake_env[fx_node] = fake_of(fx_node.args)[0][args[1]]
                continue
            fake_args, fake_kwargs = fake_of(fx_node.args), fake_of(fx_node.kwargs)
            if target is torch.ops.aten.copy_.default:
                dst = args[0]
                if not (isinstance(dst, Node) and dst.op == Op.INPUT):
                    raise GraphNotSupported("copy_ into a value that is not a graph input "
                                            "(an in-place update of a view or intermediate)")
                if _devices(fake_args[0]) - {device}:
                    value = off_device(torch.ops.aten.copy.default, args, kwargs, fake_args[0])
                else:
                    value = _lower_call(ctx, torch.ops.aten.copy.default, on_device(args),
                                        kwargs, fake_args[0], report, strict)
                mutations.append((dst.args[0], value))
                env[fx_node] = value
                fake_env[fx_node] = fake_args[0]
                continue
            if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
                raise GraphNotSupported(f"in-place op {_op_name(target)} left in the graph "
                                        "(its update would be lost)")
            if not isinstance(target, torch._ops.OpOverload):
                # Python arithmetic on sizes (sym ints), specialized to concrete values
                env[fx_node] = fake_env[fx_node] = target(*fake_args, **fake_kwargs)
                continue
            fake_out = _traced_value(fx_node)
            if fake_out is None:
                fake_args, fake_kwargs = tree_map(ours, (fake_args, fake_kwargs))
                with fake_mode:
                    fake_out = target(*fake_args, **fake_kwargs)
            fake_env[fx_node] = fake_out
            if _devices(fake_out) - {device}:
                env[fx_node] = off_device(target, args, kwargs, fake_out)
                continue
            env[fx_node] = _lower_call(ctx, target, on_device(args), on_device(kwargs),
                                       fake_out, report, strict)
        elif fx_node.op == "output":
            returned = ir_of(fx_node.args[0])
            if not isinstance(returned, (list, tuple)):
                returned = [returned]
            fx_returned = fx_node.args[0] if isinstance(fx_node.args[0], (list, tuple)) \
                else [fx_node.args[0]]
            # outputs the caller gets (backend.caller_outputs): all but a forward's saved
            # activations, which may share memory
            visible = gm.meta.get("cherenkov_caller_outputs", len(returned))
            for i, value in enumerate(_as_eager_returns(returned, fx_returned, env, fake_env,
                                                        visible)):
                if isinstance(value, Node):
                    outputs.append(value)
                else:
                    outputs.append(None)
                    scalar_outputs[i] = value
    updates = []
    for index, value in mutations:
        updates.append((index, len(outputs)))
        outputs.append(value)
    return Graph(graph_inputs, outputs, name, scalar_outputs, updates), report


IR_VIEWS = (Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SLICE)


def _ir_view_root(value: Node) -> Node:
    """The node whose storage `value` reads in the IR: through views, and through what a
    clone, contiguous or copy lowers to (nothing: kernels read through them)."""
    while value.op in IR_VIEWS:
        value = value.inputs[0]
    return value


def _as_eager_returns(returned: list, fx_returned: list, env: dict, fake_env: dict,
                      visible: int) -> list:
    """The graph's returned values with eager's aliasing and, where it is safe, layout.

    A copy the IR elided (clone, contiguous: kernels read through them) is made -- once per
    FX node copied, with the outputs that view it rebased onto the copy -- when it would
    otherwise be an input or share memory with an output that eager keeps apart (another FX
    root over the same IR value among the first `visible` outputs, those the caller gets).
    Outputs that view one FX root stay views of one buffer. A computed caller output that is
    the only output over its IR value is stored in eager's layout (`_in_eager_layout`)."""
    roots = [(_ir_view_root(v), _fx_view_root(fx)) if isinstance(v, Node) else (None, None)
             for v, fx in zip(returned, fx_returned)]
    fx_roots_of: dict[Node, set] = {}
    for ir_root, fx_root in roots[:visible]:
        if ir_root is not None:
            fx_roots_of.setdefault(ir_root, set()).add(fx_root)
    uses = Counter(ir_root for ir_root, _ in roots if ir_root is not None)
    copies: dict = {}                                   # FX root -> its copy
    out = []
    for i, (value, (ir_root, fx_root)) in enumerate(zip(returned, roots)):
        if not isinstance(value, Node):
            out.append(value)
            continue
        if _elided_copy(fx_root, env) and (
                ir_root.op == Op.INPUT or (i < visible and len(fx_roots_of[ir_root]) > 1)):
            source = env[fx_root]
            if fx_root not in copies:       # ("copy", i): never merged with another (CSE)
                copies[fx_root] = Node(Op.CAST, (source,), (source.dtype, "copy", i),
                                       source.meta.replace(stride=None))
            value = _rebased(value, source, copies[fx_root]) or Node(
                Op.CAST, (value,), (value.dtype, "copy", i), value.meta.replace(stride=None))
        elif i < visible and uses[ir_root] == 1:
            value = _in_eager_layout(value, fake_env.get(fx_returned[i]), i)
        out.append(value)
    return out


def _rebased(value: Node, old: Node, new: Node) -> Node | None:
    """`value`, a chain of IR views over `old`, over `new` instead; None if it is not one."""
    if value is old:
        return new
    if value.op not in IR_VIEWS:
        return None
    below = _rebased(value.inputs[0], old, new)
    return None if below is None else value.replace(inputs=(below,) + tuple(value.inputs[1:]))


def _in_eager_layout(value: Node, fake, i: int) -> Node:
    """A computed output whose eager result is laid out otherwise than contiguous (a
    pointwise op on a transposed or channels_last input keeps its layout) stored in eager's
    layout by the kernel that computes it: a layout node the fusion inlines its producer
    into. Views, inputs and library results keep theirs."""
    if not isinstance(fake, torch.Tensor) or value.op in IR_VIEWS or value.op == Op.INPUT \
            or value.op in GroupOp.LIBRARY or not isinstance(value.meta, TensorMeta) \
            or tuple(fake.shape) != tuple(value.shape) or fake.is_contiguous() \
            or not is_dense(tuple(fake.shape), tuple(fake.stride())) \
            or value.meta.stride is not None:
        return value
    return Node(Op.CAST, (value,), (value.dtype, "layout", i),
                value.meta.replace(stride=tuple(fake.stride())))


def _elided_copy(fx_root, env: dict) -> bool:
    """Whether FX node `fx_root` makes a new tensor in eager (it is no view) that the IR
    made none of: its value reads the storage its first argument's does."""
    if not isinstance(fx_root, torch.fx.Node) or fx_root.op != "call_function" \
            or not fx_root.args or not isinstance(fx_root.args[0], torch.fx.Node):
        return False
    value, source = env.get(fx_root), env.get(fx_root.args[0])
    return isinstance(value, Node) and isinstance(source, Node) and \
        _ir_view_root(value) is _ir_view_root(source)


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


def _traced_value(fx_node: torch.fx.Node):
    """The output AOTAutograd's tracing recorded for the node (`meta["val"]`: fake tensors
    with their sizes, strides, dtype and device), when every tensor in it is static; running
    each op again on fake tensors was about half of lowering. None: compute it."""
    val = fx_node.meta.get("val")
    if val is None:
        return None
    for leaf in tree_leaves(val):
        if isinstance(leaf, FakeTensor):
            if any(isinstance(d, torch.SymInt) for d in (*leaf.shape, *leaf.stride())) \
                    or isinstance(leaf.storage_offset(), torch.SymInt):
                return None
        elif leaf is not None:
            return None
    return val


def _lower_call(ctx, target, args, kwargs, fake_out, report: LoweringReport, strict: bool):
    fn = registry.lookup(target)
    reason = f"no lowering for {_op_name(target)}"
    if fn is not None:
        ctx.out, ctx.target = fake_out, target
        try:
            result = fn(ctx, *args, **kwargs)
            _check(target, result, fake_out)
            return result
        except Unsupported as e:
            reason = f"{_op_name(target)}: {e}"
        except LoweringError:
            if strict:
                raise
            reason = f"{_op_name(target)}: lowering mismatch (bug), ran as extern"
    node = library_node(target, args, kwargs, fake_out, reason)
    if node.op == Op.EXTERN:
        report.externs.append((_op_name(target), reason))
        log.info("cherenkov extern: %s", reason)
    return node


def _check(target, result, fake_out):
    if isinstance(result, Node) and result.op in GroupOp.LIBRARY:
        return                        # a library call reproduces the op's outputs itself
    if isinstance(result, (list, tuple)):
        for r, f in zip(result, fake_out):
            _check(target, r, f)
        return
    if not isinstance(result, Node) or not isinstance(fake_out, torch.Tensor):
        raise LoweringError(f"{_op_name(target)} lowered to {type(result)}")
    shape = tuple(int(s) for s in fake_out.shape)
    if result.shape != shape or result.dtype != fake_out.dtype:
        raise LoweringError(f"{_op_name(target)}: lowering gives {result.dtype}{list(result.shape)}"
                            f", PyTorch gives {fake_out.dtype}{list(shape)}")
