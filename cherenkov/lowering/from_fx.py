"""FX (aten, after our decompositions) → Cherenkov graph IR, for one set of concrete shapes.

Each FX node runs once on fake tensors to learn its output (shape, dtype, strides); the
registered lowering, if any, then builds IR nodes, and their shape and dtype are checked against
the fake output. An op without a lowering, or whose lowering declines, becomes `extern`.
"""
from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._pytree import tree_leaves, tree_map

from cherenkov.ir.graph import Graph, Node, TensorMeta
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.lowering import registry
from cherenkov.lowering.context import LoweringContext
from cherenkov.lowering.library import library_node
from cherenkov.lowering.registry import Unsupported
from cherenkov.lowering.layouts import in_eager_layout
from cherenkov.lowering.returns import as_eager_returns

# importing these fills the registry
from cherenkov.lowering import (attention, creation, elementwise, movement, prims,  # noqa: F401
                                adaptive_pooling, distance, pooling, reductions, sampling, scan,
                                scatter, search, special, templates)

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


def _in_mode(value: torch.Tensor, fake_mode: FakeTensorMode) -> torch.Tensor:
    """An input as a fake tensor of `fake_mode`. An input that is another mode's fake (a
    graph compiled ahead from AOTAutograd's example inputs, maybe restrided views of them)
    is remade from its layout: converting it would reach into the other mode's base."""
    if not (isinstance(value, FakeTensor) and value.fake_mode is not fake_mode):
        return fake_mode.from_tensor(value)
    extent = value.storage_offset() + 1 + sum((n - 1) * st for n, st in
                                              zip(value.shape, value.stride()) if n > 0)
    with fake_mode:
        storage = torch.empty(extent if value.numel() else 0, dtype=value.dtype,
                              device=value.device)
        return storage.as_strided(value.shape, value.stride(), value.storage_offset())


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
    made: set[int] = set()                # ids of the IR values earlier FX nodes lowered to

    def ir_of(value):
        return tree_map(lambda n: env[n] if isinstance(n, torch.fx.Node) else n, value)

    def fake_of(value):
        return tree_map(lambda n: fake_env[n] if isinstance(n, torch.fx.Node) else n, value)

    transfers: dict[Node, Node] = {}
    constants: dict[Node, torch.Tensor] = {}   # one-element CPU constants of a device graph

    def on_device(value):
        """`value` with every tensor on another device (a CPU scalar read by a CUDA graph's
        kernels) replaced by its copy to the graph's device, made once per tensor; a
        one-element constant (`torch.tensor(-3.0)` in the traced code) by its value, there."""
        def move(n):
            if not (isinstance(n, Node) and isinstance(n.meta, TensorMeta)
                    and n.meta.device != device):
                return n
            if n in constants and n not in transfers:
                transfers[n] = ctx.const(constants[n].item(), n.dtype, n.shape)
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
                fake_env[fx_node] = _in_mode(value, fake_mode)
            else:
                node = Node(Op.INPUT, (), (placeholder_index,), None)
                env[fx_node] = value
                fake_env[fx_node] = value
            graph_inputs.append(node)
            placeholder_index += 1
        elif fx_node.op == "get_attr":
            tensor = getattr(gm, fx_node.target)
            if not isinstance(tensor, torch.Tensor):
                users = ", ".join(sorted({_op_name(u.target) for u in fx_node.users}))
                raise GraphNotSupported(f"{fx_node.target} is a subgraph of a higher-order op "
                                        f"({users}), which has no lowering")
            fake_env[fx_node] = fake_mode.from_tensor(tensor)
            env[fx_node] = library_node(lambda t=tensor: t, (), {}, tensor, "constant tensor",
                                        op=Op.EXTERN)
            if tensor.device.type == "cpu" and device.type != "cpu" and tensor.numel() == 1:
                constants[env[fx_node]] = tensor
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
            if target in _CONSTANT_COPIES and args[0] in constants:
                tensor = constants[args[0]]    # a copy of the constant: the graph's own, run
                env[fx_node] = library_node(   # on the CPU only where something reads it there
                    lambda t=tensor: t.clone(), (), {}, tensor, "constant tensor", op=Op.EXTERN)
                constants[env[fx_node]] = tensor
                continue
            if _devices(fake_out) - {device}:
                env[fx_node] = off_device(target, args, kwargs, fake_out)
                continue
            value = _lower_call(ctx, target, on_device(args), on_device(kwargs), fake_out,
                                report, strict)
            env[fx_node] = in_eager_layout(value, fake_out, made)
            made.update(id(v) for v in tree_leaves(env[fx_node]) if isinstance(v, Node))
        elif fx_node.op == "output":
            returned = ir_of(fx_node.args[0])
            if not isinstance(returned, (list, tuple)):
                returned = [returned]
            fx_returned = fx_node.args[0] if isinstance(fx_node.args[0], (list, tuple)) \
                else [fx_node.args[0]]
            # outputs the caller gets (backend.caller_outputs): all but a forward's saved
            # activations, which may share memory
            visible = gm.meta.get("cherenkov_caller_outputs", len(returned))
            for i, value in enumerate(as_eager_returns(returned, fx_returned, env, fake_env,
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


_CONSTANT_COPIES = {torch.ops.aten.lift_fresh_copy.default, torch.ops.aten.lift_fresh.default,
                    torch.ops.aten.clone.default, torch.ops.aten.detach.default,
                    torch.ops.aten.alias.default}


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
