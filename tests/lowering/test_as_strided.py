"""lowering/movement.py: as_strided of a computed value that reads all of it row-major from its
start is a reshape (group_norm's decomposition does so); any other as_strided of a computed
value stays PyTorch's, with the same result."""
import torch

import cherenkov
from cherenkov import backend


def _compiled_externs(fn, *args):
    start = len(backend.COMPILED)
    out = cherenkov.compile(fn)(*args)
    return out, [r for _, info in backend.COMPILED[start:] for _, r in info.externs]


def test_a_row_major_full_read_is_a_reshape():
    x = torch.randn(2, 3, 2, 1)
    fn = lambda x: torch.as_strided(x * 2, (2, 6), (6, 1)) + 1          # noqa: E731
    out, externs = _compiled_externs(fn, x)
    assert not externs
    torch.testing.assert_close(out, fn(x))


def test_other_reads_stay_pytorchs_and_agree():
    x = torch.randn(4, 6)
    for size, stride, offset in (((6, 4), (1, 6), 0), ((2, 6), (6, 1), 6), ((3, 3), (6, 1), 0)):
        fn = lambda x: torch.as_strided(x * 2, size, stride, offset) + 1    # noqa: E731
        out, externs = _compiled_externs(fn, x)
        assert any("as_strided of a computed value" in r for r in externs), (size, stride)
        torch.testing.assert_close(out, fn(x))


def test_group_norm_compiles_whole_forward_and_backward():
    x = torch.randn(2, 6, 5, 5, requires_grad=True)
    w, b = torch.randn(6, requires_grad=True), torch.randn(6, requires_grad=True)
    fn = lambda x, w, b: torch.nn.functional.group_norm(x, 3, w, b)     # noqa: E731
    start = len(backend.COMPILED)
    out = cherenkov.compile(fn, strict=True)(x, w, b)
    grads = torch.autograd.grad(out.square().sum(), (x, w, b))
    assert not any(info.externs for _, info in backend.COMPILED[start:])
    ref = fn(x, w, b)
    torch.testing.assert_close(out, ref)
    for g, r in zip(grads, torch.autograd.grad(ref.square().sum(), (x, w, b))):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def test_as_strided_scatter_of_a_row_major_run_is_a_slice_scatter():
    """Writing into a row-major run of a fresh or computed buffer (functionalization's form,
    e.g. a channels-last global average pool's backward) compiles; a view that is no run
    (transposed, or a gap between rows) stays PyTorch's with the same result."""
    from tests.lowering.compiled import compiled
    b, s = torch.randn(10), torch.randn(2, 3)
    for size, stride, offset in (((2, 3), (3, 1), 2), ((2, 5), (5, 1), 0), ((2, 3, 1), (3, 1, 7), 4)):
        n = torch.Size(size).numel()
        fn = lambda b, s: torch.as_strided_scatter(                           # noqa: E731
            b * 1, s.reshape(-1)[:n].reshape(size) * 2, size, stride, offset)
        src = torch.randn(2, 5)
        out, externs, _ = compiled(fn, b, src)
        assert not externs, (size, stride)
        assert torch.equal(out, fn(b, src))
    for size, stride, offset in (((3, 2), (1, 3), 0), ((2, 3), (4, 1), 0)):
        fn = lambda b, s: torch.as_strided_scatter(b * 1, s * 2, size, stride, offset)  # noqa
        src = torch.randn(size)
        torch._dynamo.reset()
        out, externs = _compiled_externs(fn, b, src)
        assert torch.equal(out, fn(b, src)), (size, stride)
        assert any("no row-major run" in r for r in externs)
    x = torch.randn(2, 5, 9, 11).contiguous(memory_format=torch.channels_last).requires_grad_()
    dy = torch.randn(2, 5, 1, 1)
    pool = cherenkov.compile(lambda x: torch.nn.functional.adaptive_avg_pool2d(x, 1))
    start = len(backend.COMPILED)
    got = torch.autograd.grad(pool(x), x, dy)[0]
    assert not [e for _, info in backend.COMPILED[start:] for e in info.externs]
    want = torch.autograd.grad(torch.nn.functional.adaptive_avg_pool2d(x, 1), x, dy)[0]
    torch.testing.assert_close(got, want)
