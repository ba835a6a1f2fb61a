"""lowering/layouts.py and the layout-aware passes: a computed elementwise value records
eager's layout (its saved copy, returned result and readers follow it), and a reduction over
a channels-last value counts as a column reduction (split_reductions)."""
import pytest
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov import backend
from cherenkov.ir.graph import Node, TensorMeta, laid_out_strides
from cherenkov.ir.ops import Op
from cherenkov.lowering.layouts import in_eager_layout
from cherenkov.passes.split_reductions import _column_wise

CPU = torch.device("cpu")


def _input(shape, strides=None, dtype=torch.float32):
    return Node(Op.INPUT, (), (0,), TensorMeta(shape, dtype, CPU, strides))


def test_elementwise_values_record_eager_layout_only():
    cl = torch.empty(2, 8, 4, 5).contiguous(memory_format=torch.channels_last)
    x = _input((2, 8, 4, 5), cl.stride())
    relu = Node(Op.MAXIMUM, (x, x), (), TensorMeta((2, 8, 4, 5), torch.float32, CPU))
    laid = in_eager_layout(relu, cl, set())
    assert laid.meta.stride == cl.stride() and laid.op == Op.MAXIMUM
    assert in_eager_layout(relu, torch.empty(2, 8, 4, 5), set()) is relu      # row-major
    assert in_eager_layout(relu, cl, {id(relu)}) is relu        # an earlier node's value
    assert in_eager_layout(relu, cl[:, :, :2], set()) is relu   # another shape
    view = Node(Op.PERMUTE, (x,), ((0, 2, 3, 1),), TensorMeta((2, 4, 5, 8), torch.float32, CPU))
    assert in_eager_layout(view, cl.permute(0, 2, 3, 1), set()) is view      # views: never
    gappy = torch.empty(2, 8, 4, 10)[..., ::2]
    assert in_eager_layout(relu, gappy, set()) is relu                       # not dense


def test_laid_out_strides_follow_elementwise_operands():
    cl = torch.empty(2, 8, 4, 5).contiguous(memory_format=torch.channels_last).stride()
    x = _input((2, 8, 4, 5), cl)
    mean = _input((1, 8, 1, 1))
    wide = Node(Op.EXPAND, (mean,), ((2, 8, 4, 5),), TensorMeta((2, 8, 4, 5), torch.float32, CPU))
    sub = Node(Op.SUB, (wide, x), (), TensorMeta((2, 8, 4, 5), torch.float32, CPU))
    sq = Node(Op.MUL, (sub, sub), (), TensorMeta((2, 8, 4, 5), torch.float32, CPU))
    assert laid_out_strides(sq) == cl
    assert laid_out_strides(_input((2, 8, 4, 5))) == (160, 20, 5, 1)


def test_reduction_over_channels_last_is_column_wise():
    shape = (2, 8, 4, 5)
    cl = torch.empty(shape).contiguous(memory_format=torch.channels_last).stride()

    def over_channels(x):          # BatchNorm's statistics: (C, N, H, W), reducing N, H, W
        return Node(Op.PERMUTE, (x,), ((1, 0, 2, 3),),
                    TensorMeta((8, 2, 4, 5), torch.float32, CPU))
    assert _column_wise(over_channels(_input(shape, cl)))
    assert not _column_wise(over_channels(_input(shape)))                # along rows of W
    cast = Node(Op.CAST, (_input(shape, cl),), (torch.float32,),
                TensorMeta(shape, torch.float32, CPU))
    assert _column_wise(over_channels(cast))      # through an elementwise value
    rows = Node(Op.PERMUTE, (_input(shape, cl),), ((0, 2, 3, 1),),       # sum over C
                TensorMeta((2, 4, 5, 8), torch.float32, CPU))
    assert not _column_wise(rows)


def _against_eager(fn, x, cpu_backend, **tol):
    """fn(x) and the gradient of x for a random dy, compiled against eager (values and
    strides); the compile infos of the graphs it made."""
    torch.manual_seed(0)
    xg = x.detach().requires_grad_(True)
    want = fn(xg)
    dy = torch.randn_like(want)
    (want_grad,) = torch.autograd.grad(want, xg, dy)
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    xc = x.detach().requires_grad_(True)
    out = cherenkov.compile(fn, strict=True, cpu_backend=cpu_backend)(xc)
    (grad,) = torch.autograd.grad(out, xc, dy)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(grad, want_grad, **tol)
    assert out.stride() == want.stride() and grad.stride() == want_grad.stride()
    return [info for _, info in backend.COMPILED[start:]]


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_saved_activation_of_a_channels_last_input_keeps_its_layout(cpu_backend):
    """relu(2x + 1) saves its result for the backward: stored channels-last, as eager's, so
    the forward's kernel walks x's memory order for both its stores and the backward's for
    its loads (each access at address xindex)."""
    x = torch.randn(2, 8, 4, 5).contiguous(memory_format=torch.channels_last)
    infos = _against_eager(lambda x: F.relu(x * 2 + 1), x, cpu_backend)
    if cpu_backend == "triton":
        sources = [k[3] for info in infos for k in info.kernels]
        assert len(sources) == 2, sources
        for src in sources:
            accesses = [ln for ln in src.splitlines() if "tl.store(" in ln
                        or ("tl.load(" in ln and "zeros" not in ln)]
            assert accesses and all("+ (xindex)" in ln for ln in accesses), accesses


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_batch_norm_relu_pool_on_channels_last_matches_eager(cpu_backend):
    x = torch.randn(2, 8, 6, 7).contiguous(memory_format=torch.channels_last)
    w, b = torch.rand(8) + 0.5, torch.randn(8)

    def fn(x):
        y = F.batch_norm(x, None, None, w, b, training=True)
        return F.max_pool2d(F.relu(y), 3, 2, 1)
    _against_eager(fn, x, cpu_backend, atol=1e-4, rtol=1e-4)
