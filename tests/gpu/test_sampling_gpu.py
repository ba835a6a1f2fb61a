"""GPU: grid_sample's kernel on CUDA against eager (modes, paddings, align_corners)."""
import pytest
import torch
import torch.nn.functional as F

from tests.lowering.compiled import compiled
from tests.lowering.test_sampling import _inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_on_the_device(mode, padding, align_corners):
    x, grid = (t.cuda() for t in _inputs())
    grid = grid.nan_to_num()
    grid[1, 3, 4] = 0.25
    fn = lambda x, g: F.grid_sample(x * 2, g, mode=mode, padding_mode=padding,    # noqa: E731
                                    align_corners=align_corners)
    out, externs, sources = compiled(fn, x, grid)
    assert not externs and sources and out.is_cuda
    torch.testing.assert_close(out, fn(x, grid), rtol=1e-5, atol=1e-5)
