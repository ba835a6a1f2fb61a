"""passes/widen_matmul.py: cast(mm(a, b), fp32) of half-precision operands becomes one
mm.dtype call writing fp32 -- on CUDA (the op has no CPU kernel), so the rewrite is checked
here on graphs lowered on the CPU, with the device check stood in for."""
import pytest
import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.from_fx import lower_fx
from cherenkov.passes import widen_matmul
from cherenkov.passes.cse import eliminate_common_subexpressions

aten = torch.ops.aten


def _lowered(fn, *inputs):
    gm = torch.fx.symbolic_trace(fn)
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*inputs)
    graph, _ = lower_fx(gm, list(inputs), strict=True, name="g")
    return eliminate_common_subexpressions(graph)


@pytest.fixture
def on_cuda(monkeypatch):
    monkeypatch.setattr(widen_matmul, "available", lambda device: True)
    return torch.device("cuda")


def _targets(graph):
    return [n.args[0] for n in graph.nodes() if n.op is Op.MATMUL]


def _casts(graph):
    return [n for n in graph.nodes() if n.op is Op.CAST]


def weight_grad(dy, x):     # as AOTAutograd writes a linear layer's weight gradient
    return aten._to_copy.default(
        aten.permute.default(aten.permute.default(
            aten.mm.default(aten.permute.default(dy, [1, 0]), x), [1, 0]), [1, 0]),
        dtype=torch.float32)


def test_cast_of_a_half_matmul_becomes_one_fp32_matmul(on_cuda):
    dy, x = torch.randn(8, 32, dtype=torch.bfloat16), torch.randn(8, 16, dtype=torch.bfloat16)
    graph = widen_matmul.widen_matmuls(_lowered(weight_grad, dy, x), on_cuda)
    assert _targets(graph) == [aten.mm.dtype] and not _casts(graph)
    (out,) = graph.outputs
    assert out.op is Op.MATMUL and out.dtype is torch.float32 and out.shape == (32, 16)
    assert out.args[1][-1] is torch.float32


def test_left_alone_when_the_matmul_is_read_elsewhere_or_the_layout_changes(on_cuda):
    a, b = torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(16, 4, dtype=torch.bfloat16)

    def two_readers(a, b):
        m = aten.mm.default(a, b)
        return aten._to_copy.default(m, dtype=torch.float32), m

    def transposed(a, b):
        return aten._to_copy.default(aten.permute.default(aten.mm.default(a, b), [1, 0]),
                                     dtype=torch.float32)

    def fp32_operands(a, b):
        f32 = torch.float32
        return aten._to_copy.default(aten.mm.default(aten._to_copy.default(a, dtype=f32),
                                                     aten._to_copy.default(b, dtype=f32)),
                                     dtype=f32)
    for fn in (two_readers, transposed, fp32_operands):
        graph = widen_matmul.widen_matmuls(_lowered(fn, a, b), on_cuda)
        assert aten.mm.dtype not in _targets(graph), fn.__name__


def test_off_the_gpu_nothing_changes():
    dy, x = torch.randn(8, 32, dtype=torch.bfloat16), torch.randn(8, 16, dtype=torch.bfloat16)
    graph = _lowered(weight_grad, dy, x)
    assert widen_matmul.widen_matmuls(graph, torch.device("cpu")) is graph
