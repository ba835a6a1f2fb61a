"""Our own decompositions: tanh-GeLU as x * sigmoid(2u) matches PyTorch's definition."""
import pytest
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov.capture.decompositions import decomposition_table

aten = torch.ops.aten


def test_tanh_gelu_and_its_backward_equal_pytorch_in_fp64():
    x = torch.linspace(-40, 40, 20001, dtype=torch.float64)
    g = torch.randn_like(x)
    table = decomposition_table()
    torch.testing.assert_close(table[aten.gelu.default](x, approximate="tanh"),
                               F.gelu(x, approximate="tanh"), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(table[aten.gelu_backward.default](g, x, approximate="tanh"),
                               aten.gelu_backward(g, x, approximate="tanh"),
                               rtol=1e-12, atol=1e-12)


def test_exact_gelu_keeps_pytorchs_decomposition():
    x = torch.randn(64, dtype=torch.float64)
    table = decomposition_table()
    torch.testing.assert_close(table[aten.gelu.default](x), F.gelu(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_tanh_gelu_forward_and_gradient(dtype):
    x = (torch.randn(37, 19) * 3).to(dtype).requires_grad_()
    fn = lambda x: F.gelu(x, approximate="tanh")  # noqa: E731
    out = cherenkov.compile(fn, strict=True)(x)
    want = fn(x)
    tol = {} if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(out, want, **tol)
    g = torch.randn_like(want)
    got, = torch.autograd.grad(out, x, g)
    ref, = torch.autograd.grad(want, x, g)
    torch.testing.assert_close(got, ref, **tol)
