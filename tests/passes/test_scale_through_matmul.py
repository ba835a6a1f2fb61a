"""passes/scale_through_matmul.py: a matmul reading x * s (s one broadcast element) reads x,
the scale moving to its output or to its smaller operand, when every reader of the product is
such a matmul and the moved scales cost fewer bytes; x + zeros is x."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import cherenkov
from cherenkov.ir.ops import Op
from cherenkov.lowering.from_fx import lower_fx
from cherenkov.passes.cse import eliminate_common_subexpressions
from cherenkov.passes.scale_through_matmul import drop_zero_adds, scale_through_matmuls

aten = torch.ops.aten


def _lowered(fn, *inputs):
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    graph, _ = lower_fx(gm, list(inputs), strict=True, name="g")
    return eliminate_common_subexpressions(graph)


def _largest_mul(graph):
    return max((n.meta.numel for n in graph.nodes() if n.op is Op.MUL), default=0)


def lm_head_backward(d, g, w, x):
    """As the backward of the cross-entropy made in the forward reads: D * s into the LM
    head's input and weight gradients (D (N, V), w (V, H), x (N, H))."""
    scaled = aten.mul.Tensor(d, g)
    dx = aten.mm.default(scaled, w)
    dw = aten.permute.default(aten.mm.default(aten.permute.default(scaled, [1, 0]), x), [1, 0])
    return dx, dw


def _inputs(n=24, v=64, h=8, dtype=torch.float32):
    torch.manual_seed(0)
    return (torch.randn(n, v, dtype=dtype), torch.tensor(0.37), torch.randn(v, h, dtype=dtype),
            torch.randn(n, h, dtype=dtype))


def test_the_scale_leaves_the_large_operand():
    inputs = _inputs()
    before = _lowered(lm_head_backward, *inputs)
    after = scale_through_matmuls(before)
    assert _largest_mul(before) == 24 * 64
    # dx scaled at its output (24 x 8 < w's 64 x 8); dw through x (24 x 8 < its 64 x 8 output)
    assert _largest_mul(after) == 24 * 8
    mms = [n for n in after.nodes() if n.op is Op.MATMUL]
    assert len(mms) == 2 and all(i.op is not Op.MUL for mm in mms for i in mm.inputs[:1])


def test_numerics_match_eager_compiled_on_the_cpu():
    inputs = _inputs()
    want = lm_head_backward(*inputs)
    got = cherenkov.compile(lm_head_backward, strict=True, dynamic=False)(*inputs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_half_precision_stays_within_its_rounding():
    inputs = _inputs(dtype=torch.bfloat16)
    want = [t.float() for t in lm_head_backward(*[t.double() if t.dim() else t
                                                   for t in inputs])]
    got = cherenkov.compile(lm_head_backward, strict=True, dynamic=False)(*inputs)
    for a, b in zip(got, want):
        assert a.dtype is torch.bfloat16
        torch.testing.assert_close(a.float(), b, rtol=2e-2, atol=2e-2)


def test_left_alone_when_something_else_reads_the_product_or_it_is_small():
    d, g, w, x = _inputs()

    def also_returned(d, g, w):
        scaled = aten.mul.Tensor(d, g)
        return aten.mm.default(scaled, w), scaled

    def small_product(x, g, w):      # (24, 8) @ (8, 64): the product is the smallest
        return aten.mm.default(aten.mul.Tensor(x, g), aten.permute.default(w, [1, 0]))

    for fn, args in ((also_returned, (d, g, w)), (small_product, (x, g, w))):
        graph = _lowered(fn, *args)
        assert scale_through_matmuls(graph) is graph, fn.__name__


def test_both_operands_scaled():
    a, b, s, t = torch.randn(6, 40), torch.randn(40, 5), torch.tensor(1.5), torch.tensor(-2.0)

    def fn(a, b, s, t):
        return aten.mm.default(aten.mul.Tensor(a, s), aten.mul.Tensor(b, t))
    got = cherenkov.compile(fn, strict=True, dynamic=False)(a, b, s, t)
    torch.testing.assert_close(got, fn(a, b, s, t), rtol=1e-5, atol=1e-5)
    assert _largest_mul(scale_through_matmuls(_lowered(fn, a, b, s, t))) == 6 * 5


def test_adding_zeros_is_dropped_but_not_onto_an_input():
    x = torch.randn(4, 8)

    def plus_zeros(x):
        return aten.add.Tensor(aten.mul.Tensor(x, 2.0), aten.full.default([4, 8], 0.0))

    def input_plus_zeros(x):
        return aten.add.Tensor(x, aten.full.default([4, 8], 0.0))
    graph = drop_zero_adds(_lowered(plus_zeros, x))
    assert not [n for n in graph.nodes() if n.op is Op.ADD]
    graph = _lowered(input_plus_zeros, x)
    assert drop_zero_adds(graph) is graph


def test_fp16_products_keep_their_scale():
    # (x @ w) could pass fp16's range before a scale below 1 brings it back: left alone
    x, w = torch.full((32, 64), 100., dtype=torch.half), torch.full((64, 4), 100., dtype=torch.half)

    def fn(x, s, w):
        return aten.mm.default(aten.mul.Tensor(x, s), w)
    graph = _lowered(fn, x, torch.tensor(.01), w)
    assert scale_through_matmuls(graph) is graph
    got = cherenkov.compile(fn, strict=True, dynamic=False)(x, torch.tensor(.01), w)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, fn(x, torch.tensor(.01), w))


def test_zero_adds_never_make_an_output_an_input_view_or_another_output():
    a, b = torch.randn(3, 4), torch.randn(4)
    compile = lambda f: cherenkov.compile(f, strict=True, dynamic=False)   # noqa: E731
    out = compile(lambda a: a[1:] + torch.zeros(2, 4))(a)
    before = a.clone()
    out.fill_(7.0)
    torch.testing.assert_close(a, before)                # a fresh tensor, not a's rows
    y1, y2 = compile(lambda a: (lambda y: (y, y + torch.zeros(3, 4)))(a * 2))(a)
    assert y1.data_ptr() != y2.data_ptr()
    out = compile(lambda b: b.expand(3, 4) + torch.zeros(3, 4))(b)
    out.add_(1.0)                                         # writable: not an expanded view of b
    torch.testing.assert_close(out, b.expand(3, 4) + 1)


def test_no_scale_moves_onto_an_empty_matmul():
    """mm(x * s, b) with an empty contracted or output dim: the scale would be a pointwise node
    of no elements after lowering (which leaves those to PyTorch) -- found by the OpInfo sweep
    on linalg.multi_dot's backward of a (2, 0) @ (0, 2) product, which crashed building it."""
    g = torch.randn(2, 2)
    graph = scale_through_matmuls(_lowered(lambda g, b: aten.mm.default(g * 1.0, b), g,
                                           torch.randn(2, 0)))
    assert not any(n.op is Op.MUL and n.meta.numel == 0 for n in graph.nodes())
    a = torch.randn(2, 0, requires_grad=True)
    b = torch.randn(0, 2, requires_grad=True)
    out = cherenkov.compile(lambda a, b: torch.linalg.multi_dot([a, b]) * 1, strict=True)(a, b)
    out.backward(g)
    assert torch.equal(out, torch.zeros(2, 2))
    assert a.grad.shape == (2, 0) and b.grad.shape == (0, 2)
