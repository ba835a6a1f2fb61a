"""GPU: pooling kernels on CUDA -- every CPU case of tests/lowering/test_pooling.py on the
device, forward and input gradient against eager, and eager's max indices."""
import pytest
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov import backend
from tests.lowering.test_pooling import CASES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_cases_on_the_device(case):
    fn = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 11, device="cuda", requires_grad=True)
    dy = torch.randn_like(fn(x))
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    out = cherenkov.compile(fn, strict=True)(x)
    got = torch.autograd.grad(out, x, dy)[0]
    assert not [e for _, i in backend.COMPILED[start:] for e in i.externs]
    torch.testing.assert_close(out, fn(x))
    torch.testing.assert_close(got, torch.autograd.grad(fn(x), x, dy)[0])


def test_max_indices_and_bf16_channels_last():
    x = torch.randint(-2, 3, (4, 8, 15, 17), device="cuda").float()
    fn = lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)      # noqa: E731
    values, indices = cherenkov.compile(fn, strict=True)(x)
    want_values, want_indices = fn(x)
    torch.testing.assert_close(values, want_values)
    assert torch.equal(indices, want_indices)
    xb = torch.randn(4, 16, 20, 20, device="cuda").bfloat16().to(
        memory_format=torch.channels_last)
    for f in (lambda x: F.max_pool2d(x, 2), lambda x: F.adaptive_avg_pool2d(x, 1)):
        torch.testing.assert_close(cherenkov.compile(f, strict=True)(xb), f(xb))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channels_last_stem_forward_and_backward(dtype):
    """BatchNorm (training) + ReLU + max pool on a channels-last input: its statistics split
    as column reductions, its saved activations channels-last (lowering/layouts.py)."""
    torch.manual_seed(0)
    x = torch.randn(8, 32, 28, 30, device="cuda", dtype=dtype).to(
        memory_format=torch.channels_last)
    w = torch.rand(32, device="cuda") + 0.5
    b = torch.randn(32, device="cuda")

    def fn(x):
        return F.max_pool2d(F.relu(F.batch_norm(x, None, None, w, b, training=True)), 3, 2, 1)
    xg = x.detach().requires_grad_(True)
    want = fn(xg)
    dy = torch.randn_like(want)
    (want_grad,) = torch.autograd.grad(want, xg, dy)
    torch._dynamo.reset()
    xc = x.detach().requires_grad_(True)
    out = cherenkov.compile(fn, strict=True)(xc)
    (grad,) = torch.autograd.grad(out, xc, dy)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out, want, **tol)
    torch.testing.assert_close(grad, want_grad, **tol)
    assert out.stride() == want.stride() and grad.stride() == want_grad.stride()
