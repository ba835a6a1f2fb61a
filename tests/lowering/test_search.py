"""lowering/search.py: bucketize and searchsorted as counts of the boundaries below each value
(NaN past all of them, as eager), in both CPU backends."""
import pytest
import torch

from tests.lowering.compiled import compiled

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_bucketize_and_searchsorted_match_eager(cpu_backend):
    x = torch.tensor([[NAN, 1.0, 2.5, -INF, INF, 2.0], [3.0, 0.0, 1.0, 2.0, 3.5, -1.0]])
    b = torch.tensor([1.0, 2.0, 3.0])
    for right in (False, True):
        for out_int32 in (False, True):
            fn = lambda x, b: torch.bucketize(x * 1, b, right=right,       # noqa: E731
                                              out_int32=out_int32)
            out, externs, _ = compiled(fn, x, b, cpu_backend=cpu_backend)
            assert not externs and out.dtype == fn(x, b).dtype
            assert torch.equal(out, fn(x, b)), (right, out_int32)
    rows = torch.tensor([[1.0, 2.0, 3.0], [0.0, 5.0, 6.0]])
    values = torch.tensor([[2.5, 2.0, NAN], [5.0, 7.0, -1.0]])
    for side in ("left", "right"):
        fn = lambda s, v: torch.searchsorted(s, v * 1, side=side)            # noqa: E731
        out, externs, _ = compiled(fn, rows, values, cpu_backend=cpu_backend)
        assert not externs and torch.equal(out, fn(rows, values)), side
    ints, bounds = torch.tensor([3, 0, 7, 5, 1]), torch.tensor([1, 3, 5])
    fn = lambda x, b: torch.bucketize(x + 0, b, right=True)                   # noqa: E731
    out, externs, _ = compiled(fn, ints, bounds, cpu_backend=cpu_backend)
    assert not externs and torch.equal(out, fn(ints, bounds))


def test_long_boundaries_and_sorters_stay_pytorchs():
    x, b = torch.randn(8), torch.sort(torch.randn(2000)).values
    fn = lambda x, b: torch.bucketize(x * 1, b)                               # noqa: E731
    out, externs, _ = compiled(fn, x, b)
    assert any("binary search" in r for _, r in externs) and torch.equal(out, fn(x, b))
    s = torch.randn(5)
    fn = lambda s, v: torch.searchsorted(s, v * 1, sorter=torch.argsort(s))   # noqa: E731
    v = torch.randn(4)
    torch._dynamo.reset()
    out = torch.compile(fn, backend="cherenkov")(s, v)
    assert torch.equal(out, fn(s, v))
