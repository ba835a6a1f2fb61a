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
