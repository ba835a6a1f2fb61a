"""Which IR values fusion stores (realizes) beyond the ones it must -- reductions, library
reads, outputs -- and what counts as a buffer already (inputs, library results).

A value read by several consumers is stored when inlining it would cost more than storing it
once (`realize_shared`); a value broadcast into a larger domain is stored when recomputing it
per element costs more time than writing and re-reading it (`realize_broadcast_work`); a
value every reader rounds to one narrower float type is stored rounded (`realize_narrowed`).
"""
from __future__ import annotations

from cherenkov.ir.graph import Node, TensorMeta, numel
from cherenkov.ir.ops import GroupOp, Op


def is_library(node: Node) -> bool:
    return node.op in GroupOp.LIBRARY or (node.op == Op.GETITEM)


def is_buffer_source(node: Node) -> bool:
    return node.op == Op.INPUT or is_library(node)


def node_bytes(node: Node) -> int:
    return node.meta.nbytes if isinstance(node.meta, TensorMeta) else 0


def _readers(node: Node, users, realized):
    """The computations that read `node`, looking through views that are inlined."""
    for u in users.get(node, []):
        if u.op in GroupOp.VIEW and u not in realized:
            yield from _readers(u, users, realized)
        else:
            yield u


def _consumers(node: Node, users, realized) -> int:
    return sum(1 for _ in _readers(node, users, realized))


def _float_cast(node: Node) -> tuple[int, int] | None:
    """(bytes per element before, after) of a cast between float types, else None."""
    if node.op != Op.CAST or not isinstance(node.meta, TensorMeta) \
            or not isinstance(node.inputs[0].meta, TensorMeta) \
            or not (node.dtype.is_floating_point and node.inputs[0].dtype.is_floating_point):
        return None
    return node.inputs[0].dtype.itemsize, node.dtype.itemsize


def _widening(node: Node) -> bool:
    sizes = _float_cast(node)
    return sizes is not None and sizes[0] < sizes[1]


def realize_shared(nodes, users, realized, views) -> None:
    """Realize computed values with k >= 2 consumers whose closure (the buffers an inlined copy
    reads) costs more to re-read k times than storing the value once and reading it k times:
    k * C > (k + 1) * bytes(value). Walks in topological order, so a realized value ends the
    closures of the values computed from it. A float widening cast is stored as the value it
    widens (the channels-last stem's backward stored the ReLU gradient as float32: 205 MB
    written and read where 103 would do)."""
    closure: dict[Node, dict] = {}
    for n in nodes:
        if n in realized or is_buffer_source(n) or n.op == Op.CONST or n in views:
            closure[n] = {n: node_bytes(n)} if n.op != Op.CONST else {}
            continue
        reads: dict = {}
        for i in n.inputs:
            reads.update(closure.get(i, {}))
        closure[n] = reads
        if n.op in GroupOp.VIEW or not isinstance(n.meta, TensorMeta):
            continue
        k = _consumers(n, users, realized)
        if k < 2:
            continue
        size = node_bytes(n)
        cost = sum(min(b, numel(n.shape) * r.meta.dtype.itemsize) for r, b in reads.items()
                   if isinstance(r.meta, TensorMeta))
        if k * cost > (k + 1) * size:
            src = n.inputs[0] if _widening(n) else None
            if src is not None and src not in realized and src not in views \
                    and not is_buffer_source(src) and src.op != Op.CONST:
                # a float32 copy of a bfloat16 value (a decomposition's upcast): store the
                # value, each reader widens it as it loads -- half the bytes either way
                realized.add(src)
                closure[n] = {src: node_bytes(src)}
            else:
                realized.add(n)
                closure[n] = {n: size}


# FLOPs one element of an op costs when inlined: transcendental functions are tens of
# instructions (libdevice polynomials and range reduction; pow is log, multiply and exp);
# the rest about one. 48 is low still for the rotary tables' pow/cos/sin of angles up to 2k
# rad: Inductor's RoPE kernels (which inline them) ran at ~14 ns per element on the H200.
TRANSCENDENTAL = frozenset({
    Op.EXP, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P, Op.SIN, Op.COS, Op.TAN,
    Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.ASINH, Op.ACOSH, Op.ATANH, Op.ERF, Op.ERFC,
    Op.ERFINV, Op.POW, Op.ATAN2, Op.HYPOT})
TRANSCENDENTAL_FLOPS = 48
BROADCAST_REUSE = 4     # consumers evaluating a value at least this many times per element


def _element_flops(node: Node) -> int:
    if node.op in TRANSCENDENTAL:
        return TRANSCENDENTAL_FLOPS
    return 1 if node.op in GroupOp.ELEMENTWISE else 0


def _evaluations(node: Node, users, realized) -> int:
    """Elements at which consumers evaluate `node` when it is inlined (through an expand,
    more than it has): a reduction evaluates its whole input."""
    return sum(numel(u.inputs[0].shape) if u.op in GroupOp.REDUCTION else numel(u.shape)
               for u in _readers(node, users, realized) if isinstance(u.meta, TensorMeta))


def realize_broadcast_work(nodes, users, realized, views, device) -> None:
    """Realize a computed value that consumers evaluate many times per element (it is
    broadcast into a larger domain) when recomputing it costs more time than storing it once:
    the rotary cos/sin tables of a (T, D/2) grid computed from arange, inlined into every
    (B, H, T, D) element of q and k, made Llama's RoPE kernels compute-bound (0.44 ms each,
    64 per step on the H200; Inductor's, which do the same, 0.23 ms). Roofline on `device`:
    the extra evaluations' FLOPs against writing and re-reading the value (and a launch)."""
    from cherenkov import cost
    work: dict[Node, int] = {}
    for n in nodes:
        if n in realized or is_buffer_source(n) or n.op == Op.CONST or n in views:
            work[n] = 0
            continue
        work[n] = _element_flops(n) + sum(work.get(i, 0) for i in n.inputs)
        if n.op in GroupOp.VIEW or not isinstance(n.meta, TensorMeta) or work[n] < TRANSCENDENTAL_FLOPS:
            continue
        size = numel(n.shape)
        evaluations = _evaluations(n, users, realized)
        if evaluations < BROADCAST_REUSE * size:
            continue
        # a stored value may need a kernel of its own: its launch counts against storing
        recompute = (cost.kernel_time(device, (evaluations - size) * work[n], 0)
                     - cost.kernel_time(device, 0, 0))
        store = cost.kernel_time(device, 0, 2 * node_bytes(n))
        if recompute > store:
            realized.add(n)
            work[n] = 0


def realize_narrowed(nodes, users, realized, outside) -> None:
    """Realize the cast of a stored value that is read only through it: one cast to a
    narrower float type (a pooling backward's float32 sum over its candidate windows, which
    the BatchNorm backward reads as bfloat16). The fusion then makes the cast the producer's
    epilogue and stores the rounded value alone -- half the bytes written, and half for every
    reader (the channels-last stem's backward wrote and read 205 MB of float32 for it).
    `outside`: values stored for their own sake (outputs, library reads, view bases)."""
    for n in nodes:
        if n not in realized or n in outside:
            continue
        readers = set(_readers(n, users, realized))
        if len(readers) != 1:
            continue
        (cast,) = readers
        sizes = _float_cast(cast)
        if sizes is not None and sizes[1] < sizes[0] and cast.inputs[0] is n \
                and cast not in realized:
            realized.add(cast)
