"""The kernel IR's byte count, which the cost model (fusion, reports) reads."""
import torch

from cherenkov.codegen import indexing as ix
from cherenkov.codegen.kernel_ir import Buffer, Kernel, Load


def test_shifted_reads_of_one_buffer_count_once_and_a_column_walk_counts_again():
    x, r = ix.var("x", 64), ix.var("r", 64)
    k = Kernel("k", 64, 64, inputs=[Buffer("a", torch.float32, 4096)])
    row = ix.add(ix.mul(x, 64), r)
    k.body.append(Load("t0", "a", row))
    k.body.append(Load("t1", "a", ix.add(row, 32)))           # rotate-half style neighbour
    k.body.append(Load("t2", "a", ix.add(row, -32)))
    assert k.bytes_moved() == 4096 * 4
    k.body.append(Load("t3", "a", ix.add(ix.mul(r, 64), x)))  # down the columns
    assert k.bytes_moved() == 2 * 4096 * 4
