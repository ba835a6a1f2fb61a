"""passes/memory_order.py: a pointwise kernel over channels-last (or transposed) tensors walks
their memory order, so its loads and stores are unit-stride in the lane index; results and
output layouts as eager's, in both CPU backends."""
import pytest
import torch

import cherenkov
from cherenkov import backend
from cherenkov.codegen import indexing as ix
from cherenkov.codegen.builder import _in_order
from cherenkov.ir.graph import TensorMeta
from cherenkov.passes.memory_order import layout_order


def test_layout_order_of_dense_permuted_layouts_only():
    cl = torch.empty(2, 8, 4, 5).contiguous(memory_format=torch.channels_last)
    assert layout_order(TensorMeta.of(cl)) == ((2, 8, 4, 5), (0, 2, 3, 1))
    assert layout_order(TensorMeta.of(torch.empty(4, 6).t())) == ((6, 4), (1, 0))
    assert layout_order(TensorMeta.of(torch.empty(2, 8, 4, 5))) is None      # row-major
    assert layout_order(TensorMeta.of(torch.empty(4, 6)[:, ::2])) is None     # not dense
    assert layout_order(TensorMeta((2, 3), torch.float32, torch.device("cpu"))) is None


def test_lane_order_maps_memory_order_to_row_major_positions():
    shape, perm = (2, 8, 4, 5), (0, 2, 3, 1)
    strides = (160, 1, 40, 8)                          # channels-last
    pos = _in_order(ix.var("x", 320), shape, perm)
    idx = ix.unravel(pos, shape)
    addr = ix.dot(idx, strides)
    assert addr == ix.var("x", 320)                    # lane x reads address x
    for x in (0, 1, 7, 8, 41, 319):
        c, w, h, n = x % 8, (x // 8) % 5, (x // 40) % 4, x // 160
        assert eval(str(pos), {"x": x}) == ((n * 8 + c) * 4 + h) * 5 + w


def _kernel_sources(fn, *args, backend_name):
    start = len(backend.COMPILED)
    torch._dynamo.reset()
    out = cherenkov.compile(fn, strict=True, cpu_backend=backend_name)(*args)
    return out, [k[3] for _, info in backend.COMPILED[start:] for k in info.kernels]


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", ["channels-last", "transposed"])
def test_pointwise_kernels_walk_memory_order(case, cpu_backend):
    if case == "channels-last":
        x = torch.randn(2, 8, 4, 5).contiguous(memory_format=torch.channels_last)
        fn = lambda x: torch.relu(x * 2 + 1)                 # noqa: E731
    else:
        x = torch.randn(6, 4).t()
        fn = lambda x: torch.sigmoid(x) * x                   # noqa: E731
    out, sources = _kernel_sources(fn, x, backend_name=cpu_backend)
    want = fn(x)
    torch.testing.assert_close(out, want)
    assert out.stride() == want.stride()
    if cpu_backend == "triton":
        (src,) = sources
        accesses = [line for line in src.splitlines() if "tl.load(" in line or "tl.store(" in line]
        assert accesses and all("+ (xindex)" in line for line in accesses), accesses


def test_mixed_layouts_keep_the_order_more_bytes_walk():
    """x channels-last, y and the result row-major: walking row-major keeps two of the
    three accesses unit-stride; the result is eager's either way."""
    x = torch.randn(2, 8, 4, 5).contiguous(memory_format=torch.channels_last)
    y = torch.randn(2, 8, 4, 5)
    fn = lambda x, y: (x + y).contiguous() * 3              # noqa: E731
    out, sources = _kernel_sources(fn, x, y, backend_name="triton")
    torch.testing.assert_close(out, fn(x, y))
    stores = [line for src in sources for line in src.splitlines() if "tl.store(" in line]
    assert stores and all("+ (xindex)" in line for line in stores)
