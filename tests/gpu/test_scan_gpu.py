"""GPU: scan kernels (cumsum / cumprod) on CUDA -- every CPU case of tests/lowering/test_scan.py
on the device, rows long enough to loop over chunks with a carry (the blocks the hardware
model picks), and a backward -- against eager."""
import pytest
import torch

import cherenkov
from cherenkov import backend
from tests.lowering.test_scan import CASES, _scans

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _run(fn, *args):
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    out = cherenkov.compile(fn, strict=True)(*args)
    infos = [info for _, info in backend.COMPILED[start:]]
    return out, [e for i in infos for e in i.externs], [k[3] for i in infos for k in i.kernels]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_cases_on_the_device(case):
    fn, make = CASES[case]
    torch.manual_seed(0)
    args = tuple(a.cuda() for a in make())
    out, externs, sources = _run(fn, *args)
    assert not externs and any(_scans(s) for s in sources)
    want = fn(*(a.cpu() for a in args))
    assert out.dtype == want.dtype and out.is_cuda
    # against eager on the CPU, which sums 16-bit floats in fp32 as the kernel does (eager's
    # CUDA cumsum adds them in bf16); they may still round a value differently: one ulp
    low = want.dtype in (torch.bfloat16, torch.float16)
    torch.testing.assert_close(out.cpu(), want, rtol=1.6e-2 if low else 1e-5, atol=1e-5,
                               equal_nan=True)    # a NaN read carries through the rest of a row


@pytest.mark.parametrize("shape,dim", [((3, 40000), -1), ((40000, 3), 0), ((2, 70001), 1)])
def test_long_rows_loop_with_a_carry(shape, dim):
    """Rows past one tile (blocks.gpu_blocks keeps 16384 elements whole): the carry adds each
    chunk's total. fp32 against fp64: the error stays that of a float sum of the row."""
    torch.manual_seed(0)
    x = torch.randn(shape, device="cuda")
    out, externs, sources = _run(lambda x: (x * 2).cumsum(dim), x)
    assert not externs and any("tl.cumsum" in s for s in sources)
    want = (x.double() * 2).cumsum(dim)
    scale = want.abs().amax().item()
    assert (out.double() - want).abs().max().item() <= 1e-5 * scale + 1e-4


def test_bf16_backward_is_as_close_to_fp64_as_eagers():
    """dx = 0.5 * dy summed from the row's end. Eager's CUDA cumsum adds bf16 in bf16; the
    kernel adds in fp32 and rounds once, so its error is at most eager's."""
    torch.manual_seed(0)
    x = torch.randn(64, 3000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(64, 3000, device="cuda", dtype=torch.bfloat16)
    fn = cherenkov.compile(lambda x: x.cumsum(-1) * 0.5, strict=True)
    got = torch.autograd.grad(fn(x), x, dy)[0]
    want = torch.autograd.grad(x.cumsum(-1) * 0.5, x, dy)[0]
    exact = dy.double().flip(-1).cumsum(-1).flip(-1) * 0.5
    err, eager_err = ((g.double() - exact).abs().max().item() for g in (got, want))
    assert got.dtype == torch.bfloat16 and err <= max(eager_err, 2 ** -8 * exact.abs().max().item())
