"""The generated block-list kernel (used on CUDA) gives the torch compaction's lists exactly:
counts, hits in increasing order, then the rest in increasing order; rows and columns."""
import pytest
import torch

from cherenkov.attention.block_mask import FULL, PARTIAL, _compact, _lists_triton
from cherenkov.attention.codegen import interpreter_ready


@pytest.mark.skipif(not interpreter_ready(), reason="Triton interpreter unavailable")
@pytest.mark.parametrize("shape", [(1, 1, 5, 7), (2, 3, 4, 3), (1, 2, 1, 19)])
def test_kernel_lists_equal_the_torch_compaction(shape):
    g = torch.Generator().manual_seed(sum(shape))
    state = torch.randint(0, 3, shape, generator=g).to(torch.int8)
    for transposed in (False, True):
        got = _lists_triton(state, transposed, interpret=True)
        s = state.transpose(-1, -2) if transposed else state
        want = _compact(s == PARTIAL) + _compact(s == FULL)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and torch.equal(a, b)
