"""lowering/scan.py: cumsum, cumprod, logcumsumexp, cummax and cummin compile into a scan
kernel of their own -- the scanned dim moved last, pointwise producers inlined, the result
stored in eager's layout -- through both CPU renderers, forward and backward; rows longer
than a tile carry their running value from one chunk to the next (Triton)."""
import pytest
import torch

import cherenkov
import cherenkov.compiler as compiler
from cherenkov import backend
from cherenkov.codegen.triton_renderer import BlockConfig
from cherenkov.ir.graph import Node, TensorMeta
from cherenkov.ir.ops import Op
from cherenkov.ir.verifier import VerificationError, verify
from tests.lowering.compiled import compiled as _compiled


def _scans(source: str) -> bool:
    """Whether a kernel source scans: C++ (its kernel IR comment) or Triton."""
    return any(t in source for t in ("= scan_", "tl.cumsum(v_", "tl.cumprod(v_",
                                     "_logcumsumexp(v_", "_cummax(v_", "_cummin(v_"))


CASES = {
    "cumsum along a middle dim": (lambda x: (x * 2).cumsum(1), lambda: (torch.randn(4, 37, 5),)),
    "cumsum along the last dim, then scaled": (lambda x: (x + 1).cumsum(-1) * 3,
                                               lambda: (torch.randn(6, 50),)),
    "cumprod along dim 0": (lambda x: (x * 0.5 + 1).cumprod(0), lambda: (torch.randn(9, 4),)),
    "bool cumsum (int64 result)": (lambda x: (x > 0).cumsum(2), lambda: (torch.randn(2, 3, 11),)),
    "bf16 cumsum (fp32 running sum)": (lambda x: x.bfloat16().cumsum(1),
                                       lambda: (torch.randn(3, 200),)),
    "int cumsum into float64": (lambda i: i.cumsum(0, dtype=torch.float64),
                                lambda: (torch.randint(-5, 5, (17,)),)),
    "position ids from a mask": (lambda m: m.long().cumsum(-1) * m - 1,
                                 lambda: ((torch.rand(3, 21) > 0.3).long(),)),
    "ones cumsum plus input": (lambda x: torch.ones_like(x).cumsum(1) + x,
                               lambda: (torch.randn(3, 8),)),
    "1-d cumprod of ints": (lambda i: i.cumprod(0), lambda: (torch.randint(1, 3, (12,)),)),
    "logcumsumexp along the last dim": (lambda x: torch.logcumsumexp(x * 2, -1),
                                        lambda: (torch.randn(5, 37),)),
    "logcumsumexp of infinities and NaN": (lambda x: torch.logcumsumexp(x, 1), lambda: (
        torch.tensor([[0.0, float("-inf"), 1.0, float("inf"), 2.0],
                      [float("-inf")] * 5,
                      [1.0, float("nan"), 0.0, -1.0, 3.0],
                      [float("inf"), float("inf"), 0.0, 1.0, float("-inf")]]),)),
    "bf16 logcumsumexp along dim 0": (lambda x: torch.logcumsumexp(x.bfloat16(), 0),
                                      lambda: (torch.randn(30, 3),)),
}


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_scans_compile_and_match_eager(case, cpu_backend):
    fn, make = CASES[case]
    torch.manual_seed(0)
    args = make()
    out, externs, sources = _compiled(fn, *args, cpu_backend=cpu_backend)
    assert not externs and any(_scans(s) for s in sources), case
    want = fn(*args)
    assert out.dtype == want.dtype and out.shape == want.shape
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_a_scan_over_one_element_or_a_scalar_is_the_input_and_needs_no_scan():
    for fn, x in ((lambda x: (x + 1).cumsum(1), torch.randn(4, 1)),
                  (lambda x: (x * 3).cumprod(0), torch.tensor(2.5))):
        out, externs, sources = _compiled(fn, x)
        assert not externs and not any(_scans(s) for s in sources)
        torch.testing.assert_close(out, fn(x))


def test_a_scan_takes_in_its_readers_at_its_own_elements():
    """Along the last dim the reader (* 3, position ids' * mask - 1) computes each element
    where the scan does: one kernel, the scan's value never stored."""
    for fn, x in ((lambda x: (x + 1).cumsum(-1) * 3, torch.randn(6, 50)),
                  (lambda m: m.cumsum(-1) * m - 1, (torch.rand(3, 21) > 0.3).long())):
        out, externs, sources = _compiled(fn, x, cpu_backend="cpp")
        assert not externs and len(sources) == 1
        kernel = sources[0].split("extern")[0]
        assert "scan_cumsum" in kernel and "mul" in kernel and kernel.count("store") == 1
        torch.testing.assert_close(out, fn(x))


def test_the_scan_kernel_stores_in_eagers_layout():
    """Along a middle dim the reader (* 3) walks elements in another order than the scan's
    rows: it stays a kernel of its own and reads the scan's buffer contiguous -- the scan
    stored each element where eager's result has it. The producer (x + 1) is inlined."""
    x = torch.randn(4, 37, 5)
    _, _, sources = _compiled(lambda x: (x + 1).cumsum(1) * 3, x, cpu_backend="cpp")
    kernels = [s.split("extern")[0] for s in sources]
    scan = [k for k in kernels if "scan_cumsum" in k]
    assert len(scan) == 1 and "add" in scan[0] and "mul" not in scan[0]
    reader = [k for k in kernels if "mul" in k]
    assert len(reader) == 1 and "load buf" in reader[0] and "[x]" in reader[0]


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "logcumsumexp"])
def test_gradients_through_scans(op):
    torch.manual_seed(0)
    x = torch.randn(3, 9, requires_grad=True)
    x.data[1, 4] = 0.0                      # cumprod's gradient has a case for zeros

    def loss(x):
        return (getattr(torch, op)(x * 1.5, 1) ** 2).sum()

    torch._dynamo.reset()
    start = len(backend.COMPILED)
    got = torch.autograd.grad(cherenkov.compile(loss, strict=True)(x), x)[0]
    infos = [info for _, info in backend.COMPILED[start:]]
    assert len(infos) == 2 and not any(info.externs for info in infos)
    torch.testing.assert_close(got, torch.autograd.grad(loss(x), x)[0], rtol=1e-4, atol=1e-5)


@pytest.fixture(params=[False, True], ids=["tiles", "transposed-tiles"])
def small_tiles(monkeypatch, request):
    original = compiler.choose_blocks

    def choose(kernel, interpret, device=None):
        if kernel.R > 1:
            return BlockConfig(XBLOCK=4, RBLOCK=16, persistent=False, num_warps=4,
                               transposed=request.param, stages=2 if request.param else 0)
        return original(kernel, interpret, device=device)
    monkeypatch.setattr(compiler, "choose_blocks", choose)


@pytest.mark.parametrize("op,dim", [("cumsum", -1), ("cumprod", -1), ("cumsum", 0),
                                    ("logcumsumexp", -1)])
def test_rows_longer_than_a_tile_carry_their_running_value(small_tiles, op, dim):
    """301 elements in chunks of 16, 7 rows in tiles of 4 -- or tiles (RBLOCK, XBLOCK), as a
    scan down columns gets on the GPU: each chunk starts from the total of the chunks before
    it (a sum, or a product: the inputs stay near 1)."""
    torch.manual_seed(0)
    x = torch.randn(7, 301) * 0.01 + (1.0 if op == "cumprod" else 0.0)
    x = x if dim == -1 else x.t().contiguous()
    fn = lambda x: getattr(torch, op)(x * 1.0, dim)          # noqa: E731
    out, externs, sources = _compiled(fn, x, cpu_backend="triton")
    assert not externs and any("for roffset in " in s and "0, 301, RBLOCK" in s for s in sources)
    torch.testing.assert_close(out, fn(x), rtol=1e-5, atol=1e-5)


def test_the_verifier_rejects_a_scan_that_changes_shape():
    x = Node(Op.INPUT, (), (0,), TensorMeta((4, 5), torch.float32, torch.device("cpu")))
    bad = Node(Op.CUMSUM, (x,), (), TensorMeta((4, 6), torch.float32, torch.device("cpu")))

    class G:
        def nodes(self):
            return [x, bad]
    with pytest.raises(VerificationError, match="scan"):
        verify(G())


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("shape,dim", [((6, 50), -1), ((4, 37, 5), 1), ((9, 4), 0)])
def test_a_cumsums_gradient_is_one_scan_from_the_end(shape, dim, cpu_backend):
    """dx = 2 * flip(cumsum(flip(dy))): no flip left -- the backward's scan walks each row
    from its end; along the last dim the * 2 joins it (one kernel)."""
    torch.manual_seed(0)
    x, dy = torch.randn(*shape, requires_grad=True), torch.randn(*shape)
    f = lambda x: (x * 2).cumsum(dim)          # noqa: E731
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    got = torch.autograd.grad(cherenkov.compile(f, strict=True, cpu_backend=cpu_backend)(x),
                              x, dy)[0]
    infos = [info for _, info in backend.COMPILED[start:]]
    assert len(infos) == 2 and not any(i.externs for i in infos)
    assert len(infos[1].kernels) == (1 if dim == -1 else 2)
    if cpu_backend == "cpp":
        ir = "".join(k[3].split("extern")[0] for k in infos[1].kernels)
        assert "scan_cumsum" in ir and "flip" not in ir
    torch.testing.assert_close(got, torch.autograd.grad(f(x), x, dy)[0])


@pytest.mark.parametrize("fn", [lambda y: y.flip(1).cumsum(1).flip(1),      # one scan
                                lambda y: y.cumsum(1).flip(1),              # no inner flip
                                lambda y: y.flip(1).cumsum(1).flip(0),      # another dim
                                lambda y: y.flip(1).cumprod(1).flip(1)],
                         ids=["suffix sums", "flipped sums", "other dim", "suffix products"])
def test_flips_around_scans(fn):
    y = torch.randn(3, 11)
    out, externs, _ = _compiled(fn, y, cpu_backend="cpp")
    assert not externs
    torch.testing.assert_close(out, fn(y))


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_cummax_and_cummin_values_and_eagers_indices(op, dtype, cpu_backend):
    """Ties take the latest index, a NaN holds the value and every later NaN takes the index,
    as eager's loop; along the last dim and along dim 0; ints start from the least int."""
    torch.manual_seed(0)
    x = torch.randint(-3, 4, (4, 13)).to(dtype)
    if dtype.is_floating_point:
        x[1, 5] = x[1, 9] = float("nan")
        x[2, 0] = float("-inf")
    for dim in (1, 0):
        fn = lambda x: getattr(torch, op)(x * 1, dim)          # noqa: E731
        (values, indices), externs, sources = _compiled(fn, x, cpu_backend=cpu_backend)
        want_values, want_indices = fn(x)
        assert not externs and any(_scans(s) for s in sources)
        torch.testing.assert_close(values, want_values, equal_nan=True)
        assert torch.equal(indices, want_indices), (dim, indices, want_indices)


def test_cummax_gradient_goes_to_the_index():
    x = torch.tensor([[1.0, 3.0, 2.0, 3.0, 5.0]], requires_grad=True)
    fn = lambda x: (torch.cummax(x * 2, 1).values * torch.arange(5.0)).sum()    # noqa: E731
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    got = torch.autograd.grad(cherenkov.compile(fn, strict=True)(x), x)[0]
    assert not [e for _, i in backend.COMPILED[start:] for e in i.externs]
    torch.testing.assert_close(got, torch.autograd.grad(fn(x), x)[0])


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_masked_scatter_is_a_running_count_and_a_gather(cpu_backend):
    """x.masked_scatter(mask, source): a cumsum of the (broadcast) mask picks each element's
    source index, masked_scatter_backward the running count again and a scatter of the
    gradient to those ranks; gradients of x and source as eager's. A source shorter than the
    mask's count, where eager raises, reads NaN."""
    torch.manual_seed(0)
    x, source = torch.randn(3, 4, requires_grad=True), torch.randn(14, requires_grad=True)
    fn = lambda x, m, s: (x * 2).masked_scatter(m, s * 3)                    # noqa: E731
    for mask in (torch.rand(3, 4) > 0.5, torch.rand(4) > 0.3):
        torch._dynamo.reset()
        start = len(backend.COMPILED)
        out = cherenkov.compile(fn, strict=True, cpu_backend=cpu_backend)(x, mask, source)
        want = fn(x, mask, source)
        assert torch.equal(out, want)
        got = torch.autograd.grad(out.sum(), (x, source))           # compiles the backward
        assert not [e for _, info in backend.COMPILED[start:] for e in info.externs]
        torch.testing.assert_close(got, torch.autograd.grad(want.sum(), (x, source)))
    short, full = torch.randn(2), torch.ones(3, 4, dtype=torch.bool)
    out, externs, _ = _compiled(fn, x.detach(), full, short, cpu_backend=cpu_backend)
    assert not externs and torch.equal(out.flatten()[:2], short * 3)
    assert out.flatten()[2:].isnan().all()
