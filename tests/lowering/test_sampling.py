"""lowering/sampling.py: grid_sample (bilinear and nearest; zeros and border padding; both
align_corners) compiles into a kernel -- no PyTorch op left in the forward -- through both CPU
renderers, against eager, with grid points outside the input, on its edges and NaN;
reflection padding and the backward stay PyTorch's, with eager's results."""
import pytest
import torch
import torch.nn.functional as F

from cherenkov import backend
from tests.lowering.compiled import compiled


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 7)
    grid = torch.rand(2, 4, 6, 2) * 2.4 - 1.2              # some points outside [-1, 1]
    grid[0, 0, 0] = torch.tensor([-1.0, 1.0])              # corners and edges exactly
    grid[0, 0, 1] = torch.tensor([1.0, -1.0])
    grid[1, 3, 5] = torch.tensor([float("nan"), 0.0])
    grid[1, 3, 4] = torch.tensor([1e30, -1e30])
    return x, grid


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_matches_eager(mode, padding, align_corners, cpu_backend):
    x, grid = _inputs()
    fn = lambda x, g: F.grid_sample(x * 2, g, mode=mode, padding_mode=padding,    # noqa: E731
                                    align_corners=align_corners)
    out, externs, sources = compiled(fn, x, grid, cpu_backend=cpu_backend)
    want = fn(x, grid)
    assert not externs and sources
    finite = ~torch.isnan(grid).any(-1)[:, None].expand_as(want)   # eager's NaN point: ours 0
    torch.testing.assert_close(out[finite], want[finite], rtol=1e-5, atol=1e-5)


def test_bf16_and_what_stays_pytorchs():
    x, grid = _inputs()
    grid = grid.nan_to_num()
    grid[1, 3, 4] = 0.5            # (eager's bf16 path reads somewhere for 1e30: undefined)
    fn = lambda x, g: F.grid_sample(x, g, align_corners=False)             # noqa: E731
    xb, gb = x.bfloat16(), grid.bfloat16()
    out, externs, _ = compiled(fn, xb, gb)
    assert not externs and out.dtype == torch.bfloat16
    # ours samples in fp32 (eager's bf16 CPU path does not): against fp32 sampling of the
    # same bf16 values, at most eager's error plus a bf16 rounding
    exact = fn(xb.float(), gb.float())
    ours, eagers = ((o.float() - exact).abs().max().item() for o in (out, fn(xb, gb)))
    assert ours <= eagers + 2 ** -8 * exact.abs().max().item()
    reflect = lambda x, g: F.grid_sample(x, g, padding_mode="reflection")   # noqa: E731
    out, externs, _ = compiled(reflect, x, grid)
    assert [op for op, _ in externs] == ["grid_sampler_2d.default"]
    torch.testing.assert_close(out, reflect(x, grid))


def test_the_backward_runs_as_pytorchs_with_eagers_gradients():
    x, grid = _inputs()
    grid = grid.nan_to_num().requires_grad_(True)
    x.requires_grad_(True)
    fn = lambda x, g: (F.grid_sample(x, g, align_corners=True) ** 2).sum()  # noqa: E731
    start = len(backend.COMPILED)
    out, _, _ = compiled(fn, x, grid)
    got = torch.autograd.grad(out, (x, grid))
    externs = [op for _, info in backend.COMPILED[start:] for op, _ in info.externs]
    assert externs == ["grid_sampler_2d_backward.default"]
    for g, w in zip(got, torch.autograd.grad(fn(x, grid), (x, grid))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
