"""GPU: scatter kernels on CUDA -- writes at run-time indices without collisions (where the
GPU's racing writes agree with eager), scatter_reduce sum / mean / amax / amin with atomics --
against eager."""
import pytest
import torch

from tests.lowering.compiled import compiled
from tests.lowering.test_scatter_set import CASES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("case", sorted(c for c in CASES if "colliding" not in c))
def test_writes_on_the_device(case):
    fn, make = CASES[case]
    torch.manual_seed(0)
    args = tuple(a.cuda() for a in make())
    out, externs, sources = compiled(fn, *args)
    assert not externs and sources
    want = fn(*args)
    assert out.dtype == want.dtype and torch.equal(out, want)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_on_the_device(reduce, include_self):
    torch.manual_seed(0)
    x, src = torch.randn(64, 96, device="cuda"), torch.randn(64, 80, device="cuda")
    idx = torch.randint(0, 96, (64, 80), device="cuda")     # many collisions per row

    def fn(x, i, s):
        return (x * 2).scatter_reduce(1, i, s + 1, reduce, include_self=include_self)

    out, externs, _ = compiled(fn, x, idx, src)
    assert not externs
    torch.testing.assert_close(out, fn(x, idx, src), rtol=1e-5, atol=1e-5)
