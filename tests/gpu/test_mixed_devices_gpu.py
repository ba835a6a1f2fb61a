"""GPU: a graph on CUDA tensors that also reads a CPU scalar tensor computes on the GPU what
eager computes (the scalar reaches the kernels as a copy, never as a host pointer)."""
import pytest
import torch

import cherenkov

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cuda_graph_reading_a_cpu_scalar_tensor():
    x = torch.randn(300, 257, device="cuda")
    s = torch.tensor(1.5)

    def fn(x, s):
        return (x * s + (s * 2).exp()).softmax(-1), s + 1

    got, got_s = cherenkov.compile(fn, strict=True)(x, s)
    want, want_s = fn(x, s)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert got.device.type == "cuda" and got_s.device.type == "cpu"
    torch.testing.assert_close(got_s, want_s)
