"""The CUDA-graph wrapper's liveness check, on CPU tensors (capture itself needs a GPU:
tests/gpu/test_cuda.py)."""
import torch

from cherenkov.runtime.cuda_graphs import storage_uses


def test_storage_uses_sees_views_and_holders_come_and_go():
    t = torch.empty(8)
    base = storage_uses([t])
    view = t[2:]
    assert storage_uses([t]) != base
    del view
    assert storage_uses([t]) == base
    other = torch.empty(8)
    assert storage_uses([t, other]) == base + storage_uses([other])


def test_an_alias_handed_out_counts_as_a_holder():
    """The wrapper returns detached aliases of its buffers: holding one must show up."""
    t = torch.empty(8)
    base = storage_uses([t])
    handed = t.detach()
    assert not handed._is_view() and storage_uses([t]) != base
    del handed
    assert storage_uses([t]) == base
