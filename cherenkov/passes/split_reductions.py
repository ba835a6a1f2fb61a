"""Split long reductions into few rows into two: partial sums over chunks, then their sum.

A column reduction of a (rows, cols) tensor -- a bias gradient, LayerNorm's weight gradient --
has few outputs (X = cols) and a long reduction (R = rows). One program per output leaves most
of the GPU idle. Viewing R as (S, R/S) and reducing in two steps gives S*X independent
partial reductions, laid out (S, X) so that neighbouring programs read neighbouring columns,
then a small reduction over S. A pure rewrite of the graph IR: the views fold into indexing.

Only sum/max/min/any/all split (argmax and prod do not), only on GPUs, and only when the
device has many more processors than there are outputs. Even small row-wise reductions split:
a cross-entropy's mean over 16384 token losses left whole (one program, 1024 threads) cost
~55 us on the H200 -- its target gathers are latency-bound in one SM -- against ~9 us for the
two split kernels (bench/results/2026-11-30_memory_h200_4968a55.md, tried and reverted).
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Graph, Node, TensorMeta, laid_out_strides, numel, rewritten
from cherenkov.ir.ops import Op

SPLITTABLE = {Op.SUM: Op.SUM, Op.MAX: Op.MAX, Op.MIN: Op.MIN, Op.ANY: Op.ANY, Op.ALL: Op.ALL}
MIN_CHUNK = 256          # keep each row-wise partial reduction at least this long
MIN_COLUMN_CHUNK = 64    # column-wise: a chunk of 64 rows is still a 64-row tile per program
OUTPUTS_PER_PROGRAM = 64  # a column-reduction program covers this many neighbouring outputs
# programs per SM a split should give: a column program keeps one (rows x 64 columns) tile in
# flight, so a handful per SM leave HBM latency exposed (GPT-2's bias gradients at 8 or 32
# chunks ran at 1.1-1.3 TB/s with 2-3 programs per SM); row-wise programs stream whole rows
ROW_LOOP_CHUNK = 32      # rows per program of a row-loop kernel (see fusion.joined_domain)
COLUMN_PROGRAMS_PER_SM = 8
ROW_PROGRAMS_PER_SM = 4


def choose_split(X: int, R: int, sm_count: int, column: bool = True) -> int:
    """How many chunks to cut R into (1 = leave it), so that the S*X partial reductions give
    every processor several programs: a column-wise program covers a few dozen neighbouring
    outputs, a row-wise one about one."""
    if column:
        want = COLUMN_PROGRAMS_PER_SM * sm_count * OUTPUTS_PER_PROGRAM
        min_chunk = MIN_COLUMN_CHUNK
    else:
        want, min_chunk = ROW_PROGRAMS_PER_SM * sm_count, MIN_CHUNK
    if X >= want or R < 2 * MIN_CHUNK:      # short reductions: not worth a second launch
        return 1
    S = 1
    while S * X < want and R % (2 * S) == 0 and R // (2 * S) >= min_chunk:
        S *= 2
    return S


def split_reductions(graph: Graph, sm_count: int, row_loops: bool = False,
                     row_loop_rows: int = ROW_LOOP_CHUNK) -> Graph:
    """`row_loops`: a column reduction over the elements some row reduction of the graph
    also reduces (a (rows, cols) tensor summed along its rows elsewhere: a norm backward)
    splits finer, into chunks of `row_loop_rows` rows, so the row kernel can take its
    partials in (S programs of a row loop: a few per SM, not the 32 a 4096-column split
    makes). Other column reductions split as without row loops: a lone 32-row partial
    kernel ran at half the bandwidth of the usual split (bias + GeLU backward, H200)."""
    rows = _row_domains(graph) if row_loops else set()

    def split(node: Node, rebuilt: Node) -> Node:
        if node.op not in SPLITTABLE:
            return rebuilt
        return _split(rebuilt, sm_count, rows, row_loop_rows) or rebuilt
    return rewritten(graph, split)


def _column_wise(src: Node) -> bool:
    """Whether the reduced elements are strided in memory: the reduction's input permutes the
    innermost dim of what it reads -- in that value's layout: a channels-last tensor's is C --
    into the kept dims (a sum over rows, not along a row; BatchNorm's statistics of a
    channels-last activation)."""
    if src.op != Op.PERMUTE:
        return False
    dims, below = src.args[0], src.inputs[0]
    if not isinstance(below.meta, TensorMeta):
        return dims[-1] != len(dims) - 1
    shape, strides = below.meta.shape, laid_out_strides(below)
    sized = [d for d in range(len(dims)) if shape[dims[d]] != 1]
    if not sized:
        return False
    innermost = min(sized, key=lambda d: (strides[dims[d]], -d))
    return innermost != sized[-1]


def _domain(node: Node) -> tuple[int, int]:
    """(outputs, elements reduced into each) of a reduction."""
    src = node.inputs[0]
    n = len(src.shape) - node.args[0]
    return numel(src.shape[:n]), numel(src.shape[n:])


def _row_domains(graph: Graph) -> set[tuple[int, int]]:
    """(rows, cols) of every reduction along rows in the graph."""
    return {_domain(n) for n in graph.nodes()
            if n.op in SPLITTABLE and not _column_wise(n.inputs[0])}


def _split(node: Node, sm_count: int, rows: set = frozenset(),
           row_loop_rows: int = ROW_LOOP_CHUNK) -> Node | None:
    """`rows`: (rows, cols) domains of the graph's row reductions (see split_reductions)."""
    src = node.inputs[0]
    n_red = node.args[0]
    kept, red = src.shape[: len(src.shape) - n_red], src.shape[len(src.shape) - n_red:]
    X, R = numel(kept), numel(red)
    column = _column_wise(src)
    S = choose_split(X, R, sm_count, column)
    if column and S > 1 and (R, X) in rows:
        while R % (2 * S) == 0 and R // (2 * S) >= row_loop_rows:
            S *= 2
    if S == 1:
        return None
    meta = src.meta
    flat = Node(Op.RESHAPE, (src,), ((X, S, R // S),), meta.replace(shape=(X, S, R // S), stride=None))
    # (S, X, R/S): neighbouring partial reductions read neighbouring outputs' data
    swapped = Node(Op.PERMUTE, (flat,), ((1, 0, 2),), meta.replace(shape=(S, X, R // S), stride=None))
    # a 16-bit float sum keeps its partial sums in float32: eager accumulates the whole
    # reduction in float32 and rounds once (bf16 partials of a cancelling sum were off by 100%)
    low = node.op == Op.SUM and node.meta.dtype in (torch.bfloat16, torch.float16)
    part_meta = node.meta.replace(dtype=torch.float32) if low else node.meta
    partial = Node(node.op, (swapped,), (1,), part_meta.replace(shape=(S, X), stride=None))
    back = Node(Op.PERMUTE, (partial,), ((1, 0),), part_meta.replace(shape=(X, S), stride=None))
    total = Node(node.op, (back,), (1,), node.meta.replace(shape=(X,), stride=None))
    if tuple(kept) == (X,):
        return total
    return Node(Op.RESHAPE, (total,), (tuple(kept),), node.meta.replace(shape=tuple(kept),
                                                                       stride=None))
