"""lowering/scatter.py: writes at run-time indices (`x[idx] = v`, index_put without
accumulate, index_copy, index_fill, put, diagonal_scatter, scatter with several indices per
row) compile into one
SCATTER_SET kernel over a copy of the base -- no PyTorch op left -- through both CPU renderers,
forward and backward; colliding writes leave the last one, as eager's CPU loop does; under
deterministic algorithms a CUDA graph keeps PyTorch's op."""
import types

import pytest
import torch

import cherenkov
from cherenkov import backend
from cherenkov.lowering import scatter
from cherenkov.lowering.registry import Unsupported
from tests.lowering.compiled import compiled as _compiled


def _assign(x, v, idx):
    y = x * 2
    y[idx] = v + 1
    return y


CASES = {
    "assign rows": (_assign, lambda: (torch.randn(6, 5), torch.randn(3, 5),
                                      torch.tensor([4, 0, -1]))),
    "colliding rows": (_assign, lambda: (torch.randn(6, 5), torch.randn(3, 5),
                                         torch.tensor([1, 1, 1]))),
    "assign a scalar": (lambda x, i: (x + 1).index_put((i,), torch.tensor(-3.0)),
                        lambda: (torch.randn(5, 4), torch.tensor([3, 1]))),
    "scatter along dim 1": (lambda x, i, s: (x * 1).scatter(1, i, s * 3),
                            lambda: (torch.randn(3, 5), torch.tensor([[0, 1, 2], [4, 3, 2]]),
                                     torch.randn(2, 4))),
    "scatter a value": (lambda x, i: (x - 1).scatter(0, i, 7.5),
                        lambda: (torch.randn(4, 3), torch.tensor([[3, 0, 1], [2, 2, 0]]))),
    "bool scatter": (lambda x, i: (x > 0).scatter(1, i, True),
                     lambda: (torch.randn(3, 5), torch.tensor([[0, 4], [1, 1]]))),
    "index_copy": (lambda x, i, s: (x + 1).index_copy(1, i, s),
                   lambda: (torch.randn(4, 6), torch.tensor([5, 0]), torch.randn(4, 2))),
    "index_fill": (lambda x, i: (x + 1).index_fill(0, i, -2.0),
                   lambda: (torch.randn(5, 3), torch.tensor([4, 1]))),
    "put (flat indices)": (lambda x, i, s: (x * 2).put(i, s + 1),
                           lambda: (torch.randn(3, 4), torch.tensor([[0, 11], [-1, 5]]),
                                    torch.randn(2, 2))),
    "put accumulate": (lambda x, i, s: (x * 2).put(i, s + 1, accumulate=True),
                       lambda: (torch.randn(3, 4), torch.tensor([7, 2, 9]), torch.randn(3))),
    "diagonal_scatter below": (lambda x, s: torch.diagonal_scatter(x * 2, s, -1),
                               lambda: (torch.randn(3, 4), torch.randn(2))),
    "diagonal_scatter dims 1, 2": (lambda y, s: torch.diagonal_scatter(y + 1, s, 0, 1, 2),
                                   lambda: (torch.randn(2, 3, 4), torch.randn(2, 3))),
    "int64 rows": (lambda x, v, i: _assign(x, v, i),
                   lambda: (torch.randint(-9, 9, (6, 2)), torch.randint(0, 9, (2, 2)),
                            torch.tensor([5, 2]))),
}


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_writes_compile_and_match_eager(case, cpu_backend):
    fn, make = CASES[case]
    torch.manual_seed(0)
    args = make()
    out, externs, sources = _compiled(fn, *args, cpu_backend=cpu_backend)
    assert not externs and sources
    want = fn(*args)
    assert out.dtype == want.dtype and torch.equal(out, want), case


def test_colliding_writes_leave_the_last_as_eager_on_the_cpu():
    x, v = torch.zeros(3, 2), torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    out, externs, _ = _compiled(lambda x, v, i: x.index_put((i,), v), x, v,
                                torch.tensor([1, 1, 1]))
    assert not externs and out[1].tolist() == [3.0, 3.0] and out[0].tolist() == [0.0, 0.0]


def test_gradients_through_an_assignment():
    x = torch.randn(6, 5, requires_grad=True)
    v = torch.randn(3, 5, requires_grad=True)
    idx = torch.tensor([4, 0, 2])

    def loss(x, v, idx):
        y = (x * 2).index_put((idx,), v * 3)
        return (y * y).sum()

    out, externs, _ = _compiled(loss, x, v, idx)
    assert not externs
    got = torch.autograd.grad(out, (x, v))
    want = torch.autograd.grad(loss(x, v, idx), (x, v))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_deterministic_algorithms_keep_pytorchs_scatter_on_cuda():
    ctx = types.SimpleNamespace(out=types.SimpleNamespace(dtype=torch.float32),
                                device=torch.device("cuda"))
    before = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        with pytest.raises(Unsupported, match="deterministic"):
            scatter.writes_allowed(ctx)
        ctx.device = torch.device("cpu")        # the C++ kernel writes in order anyway
        scatter.writes_allowed(ctx)
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("reduce,include_self", [("sum", True), ("sum", False), ("mean", True),
                                                 ("mean", False), ("prod", True)])
def test_scatter_reduce_sum_and_mean_compile(reduce, include_self, cpu_backend):
    """sum / mean as scatter-adds (of the values, and of ones for the counts); untouched
    elements keep the input; prod stays PyTorch's, with the same result."""
    torch.manual_seed(0)
    x, src = torch.randn(4, 6), torch.randn(4, 5)
    idx = torch.tensor([[0, 0, 2, 5, 0], [1, 1, 1, 1, 1], [5, 4, 3, 2, 1], [3, 3, 0, 0, 3]])

    def fn(x, i, s):
        return (x * 2).scatter_reduce(1, i, s + 1, reduce, include_self=include_self)

    out, externs, _ = _compiled(fn, x, idx, src, cpu_backend=cpu_backend)
    assert bool(externs) == (reduce == "prod")
    torch.testing.assert_close(out, fn(x, idx, src))


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce_max_and_min_compile(reduce, include_self, dtype, cpu_backend):
    """SCATTER_MAX / MIN (atomic on the GPU, in order in C++); without include_self the
    elements the values reach start from the identity (a SCATTER_SET first), so a value
    smaller than x still wins there; untouched elements keep x. Exact, as eager."""
    torch.manual_seed(0)
    x, src = (torch.randn(4, 6) * 5).to(dtype), (torch.randn(4, 5) * 5).to(dtype)
    idx = torch.tensor([[0, 0, 2, 5, 0], [1, 1, 1, 1, 1], [5, 4, 3, 2, 1], [3, 3, 0, 0, 3]])

    def fn(x, i, s):
        return (x * 2).scatter_reduce(1, i, s + 1, reduce, include_self=include_self)

    out, externs, sources = _compiled(fn, x, idx, src, cpu_backend=cpu_backend)
    assert not externs and (cpu_backend == "triton" or
                            any(f"{reduce[1:]}=" in s for s in sources))
    want = fn(x, idx, src)
    assert out.dtype == want.dtype and torch.equal(out, want)


def test_nan_propagates_through_a_scattered_max_on_the_cpu():
    x = torch.tensor([[1.0, 2.0, float("nan")]])
    src = torch.tensor([[float("nan"), 5.0, 0.0]])
    idx = torch.tensor([[0, 1, 2]])
    fn = lambda x, i, s: x.scatter_reduce(1, i, s, "amax")          # noqa: E731
    out, externs, _ = _compiled(fn, x, idx, src, cpu_backend="cpp")
    assert not externs
    torch.testing.assert_close(out, fn(x, idx, src), equal_nan=True)


@pytest.mark.parametrize("reduce", ["amax", "amin", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_is_scatter_reduce_over_slices(reduce, include_self):
    torch.manual_seed(0)
    x, src = torch.randn(5, 4), torch.randn(6, 4)
    idx = torch.tensor([0, 4, 0, 2, 2, 0])              # rows hit 3 times, twice, never

    def fn(x, i, s):
        return (x * 2).index_reduce(0, i, s + 1, reduce, include_self=include_self)

    out, externs, _ = _compiled(fn, x, idx, src)
    assert not externs
    torch.testing.assert_close(out, fn(x, idx, src))


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_histc_counts_with_atens_bins(cpu_backend):
    """Elements outside [min, max], NaN and infinities uncounted; max itself in the last bin;
    bins whose edges fall between float neighbours as ATen rounds them. A range from the
    data (min == max) stays PyTorch's, with the same counts."""
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, -1.0, 5.0, 2.5, 3.999, float("nan"),
                      float("inf"), float("-inf"), 0.9999999])
    cases = [(x, 4, 0, 4), (x, 5, 1, 3), (x, 1, -10, 10), (x, 7, -0.3, 2.2),
             (torch.randn(1000, dtype=torch.float64), 13, -2, 2)]
    for t, bins, lo, hi in cases:
        fn = lambda t: torch.histc(t * 1, bins=bins, min=lo, max=hi)         # noqa: E731
        out, externs, _ = _compiled(fn, t, cpu_backend=cpu_backend)
        assert not externs and torch.equal(out, fn(t)), (bins, lo, hi)
    finite = x[x.isfinite()]
    fn = lambda t: torch.histc(t * 1, bins=3, min=2, max=2)                  # noqa: E731
    out, externs, _ = _compiled(fn, finite, cpu_backend=cpu_backend)
    assert any("data's range" in r for _, r in externs) and torch.equal(out, fn(finite))
