"""lowering/pooling.py, adaptive_pooling.py: max / avg pooling (1-3d, padding, dilation, ceil
mode, divisors), adaptive average and max pooling (even and uneven windows) and their
backwards compile with no PyTorch op left -- windows (Op.WINDOW) reduced in the forward,
gathered sums in the backward -- through both CPU renderers, against eager."""
import pytest
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov import backend
from tests.lowering.compiled import compiled as _compiled


def _externs(infos):
    return [e for info in infos for e in info.externs]


def _since(start):
    return [info for _, info in backend.COMPILED[start:]]


CASES = {
    "max 3x3 s2 p1": lambda x: F.max_pool2d(x, 3, 2, 1),
    "max 3x3 s2 ceil mode": lambda x: F.max_pool2d(x, 3, 2, 0, ceil_mode=True),
    "max stride past the kernel": lambda x: F.max_pool2d(x, 2, 3, 1),     # rows in no window
    "max dilated, ceil mode": lambda x: F.max_pool2d(x, 2, 2, 0, dilation=2, ceil_mode=True),
    "max 1d": lambda x: F.max_pool1d(x.flatten(2), 4, 3, 2),
    "max 3d": lambda x: F.max_pool3d(x.unsqueeze(2).repeat(1, 1, 3, 1, 1), 2, 1, 1),
    "avg 3x3 s2 p1": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg without padding counts, ceil": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                               count_include_pad=False),
    # counting padding: every window spans its kernel (constant divisor), unless ceil_mode
    # leaves the last one past the padded input (2x2 s2 over 9 rows: 1 row there)
    "avg 3x3 s1 p1 counting padding": lambda x: F.avg_pool2d(x, 3, 1, 1),
    "avg ceil past the padded input": lambda x: F.avg_pool2d(x, 2, 2, 0, ceil_mode=True),
    "avg divisor override": lambda x: F.avg_pool2d(x, (2, 3), (1, 2), (1, 0), divisor_override=5),
    "avg 3d": lambda x: F.avg_pool3d(x.unsqueeze(2).repeat(1, 1, 4, 1, 1), 2, 2),
    "adaptive even (global)": lambda x: F.adaptive_avg_pool2d(x, 1),
    "adaptive uneven": lambda x: F.adaptive_avg_pool2d(x, (4, 3)),
    "adaptive larger than the input": lambda x: F.adaptive_avg_pool2d(x, (11, 13)),
    "relu into max pool": lambda x: F.max_pool2d(F.relu(x * 2 + 1), 3, 2, 1),
    "adaptive max even": lambda x: F.adaptive_max_pool2d(x[..., :8, :10], (4, 5)),
    "adaptive max uneven": lambda x: F.adaptive_max_pool2d(x, (4, 3)),
    "adaptive max 1d larger than the input": lambda x: F.adaptive_max_pool1d(x[:, :, 0], 13),
}


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_pooling_and_its_gradient_compile_and_match_eager(case, cpu_backend):
    fn = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 11, requires_grad=True)
    dy = torch.randn_like(fn(x))

    def step(x):
        return torch.autograd.grad(fn(x), x, dy)[0], fn(x)

    torch._dynamo.reset()
    start = len(backend.COMPILED)
    out = cherenkov.compile(fn, strict=True, cpu_backend=cpu_backend)(x)
    got = torch.autograd.grad(out, x, dy)[0]           # compiles the backward
    infos = _since(start)
    assert not _externs(infos) and len(infos) == 2, _externs(infos)
    want_grad, want = step(x)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(got, want_grad)


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_max_pool_indices_are_eagers(cpu_backend):
    """Flat indices into each input plane, the first of equal maxima; a window of -inf alone
    names its first element inside the input (not its padding), as eager's does."""
    x = torch.randint(-2, 3, (2, 2, 7, 8)).float()
    x[0, 0, :3, :3] = float("-inf")
    fn = lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)       # noqa: E731
    (values, indices), externs, _ = _compiled(fn, x, cpu_backend=cpu_backend)
    want_values, want_indices = fn(x)
    assert not externs
    torch.testing.assert_close(values, want_values)
    assert indices.dtype == torch.int64 and torch.equal(indices, want_indices)


@pytest.mark.parametrize("out_size", [(3, 4), (4, 4), (7, 9)], ids=["uneven", "even", "larger"])
def test_adaptive_max_pool_indices_are_eagers(out_size):
    """Flat indices into each input plane, the first of equal maxima; a window of -inf alone
    names its first element."""
    x = torch.randint(-2, 3, (2, 2, 4 if out_size == (4, 4) else 7, 8)).float()
    x[0, 0, :3, :3] = float("-inf")
    fn = lambda x: F.adaptive_max_pool2d(x, out_size, return_indices=True)   # noqa: E731
    (values, indices), externs, _ = _compiled(fn, x, cpu_backend="cpp")
    want_values, want_indices = fn(x)
    assert not externs
    torch.testing.assert_close(values, want_values)
    assert torch.equal(indices, want_indices)


def test_channels_last_and_bf16():
    x = torch.randn(2, 8, 10, 10).to(memory_format=torch.channels_last).bfloat16()
    for fn in (lambda x: F.max_pool2d(x, 2), lambda x: F.avg_pool2d(x, 3, 1, 1),
               lambda x: F.adaptive_avg_pool2d(x, (3, 3))):
        out, externs, _ = _compiled(fn, x, cpu_backend="cpp")
        assert not externs and out.dtype == torch.bfloat16
        torch.testing.assert_close(out, fn(x))


def test_the_max_pool_backward_gathers_instead_of_scattering():
    """Each input element sums the gradients of the windows that chose it: a reduction over
    the kernel's offsets, no scatter (no atomic adds, the same result on every run)."""
    x = torch.randn(1, 2, 8, 8, requires_grad=True)
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    pool = cherenkov.compile(lambda x: F.max_pool2d(x, 3, 2, 1), strict=True, cpu_backend="cpp")
    out = pool(x)
    torch.autograd.grad(out.sum(), x)
    infos = _since(start)
    backward = "".join(k[3].split("extern")[0] for k in infos[1].kernels)
    assert "reduce_sum" in backward and "+=" not in backward and "=@" not in backward
    # over the 2 x 2 windows that can hold an element (a stride-2 3x3 pool), not 9 offsets
    assert "128 rows x 4 reduction elements" in backward


def test_int_pooling_stays_pytorchs():
    x = torch.randint(0, 9, (1, 1, 6, 6))
    out, externs, _ = _compiled(lambda x: F.max_pool2d(x, 2), x)
    assert any("max_pool2d" in op and "non-float" in reason for op, reason in externs)
    assert torch.equal(out, F.max_pool2d(x, 2))


@pytest.mark.parametrize("case", ["max 3x3 s2 p1", "avg 3x3 s2 p1", "max 3d"])
def test_channels_last_pooling_runs_channels_fastest_and_returns_eagers_layout(case):
    """A channels-last input (C = 5): each kernel's lanes walk the channels (the input's
    fastest dim: `x % 5` steps the address by 1), and the output and the input's gradient
    come back channels-last, as eager's. (A pooling reading a value Cherenkov computed -- a
    ReLU saved for the backward -- reads it in its logical order, contiguous.)"""
    import re
    fn = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(2, 5, 9, 11)
    if case == "max 3d":
        x = x.unsqueeze(2).repeat(1, 1, 3, 1, 1).contiguous(memory_format=torch.channels_last_3d)
        fn = lambda x: F.max_pool3d(x, 2, 1, 1)      # noqa: E731 -- CASES' repeats in the fn
    else:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    dy = torch.randn_like(fn(x))
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    out = cherenkov.compile(fn, strict=True, cpu_backend="triton")(x)
    got = torch.autograd.grad(out, x, dy)[0]
    infos = _since(start)
    assert not _externs(infos) and len(infos) == 2
    want = fn(x)
    want_grad = torch.autograd.grad(want, x, dy)[0]
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(got, want_grad)
    assert out.stride() == want.stride() and got.stride() == want_grad.stride()
    for info in infos:
        pooled = [k[3] for k in info.kernels if "rindex" in k[3]]
        # x % 5 (or x % 60, merged with the next dim's 5 * ((x // 5) % 12)) at stride 1
        steps = [re.findall(r"\(\(xindex\) % (\d+)\)(?! \*)", s) for s in pooled]
        assert pooled and all(any(int(n) % 5 == 0 for n in st) for st in steps), steps


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("layout", ["contiguous", "channels-last", "unbatched"])
def test_scattered_max_pool_backward_matches_eager(cpu_backend, layout, monkeypatch):
    """pooling.MAX_POOL_BACKWARD = "scatter": each window's gradient added at its maximum."""
    from cherenkov.lowering import pooling
    monkeypatch.setattr(pooling, "MAX_POOL_BACKWARD", "scatter")
    torch.manual_seed(0)
    x = torch.randn(2, 5, 9, 11)
    if layout == "channels-last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "unbatched":
        x = x[0]
    fn = lambda x: F.max_pool2d(x, 3, 2, 1)                   # noqa: E731
    x.requires_grad_(True)
    dy = torch.randn_like(fn(x))
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    got = torch.autograd.grad(cherenkov.compile(fn, strict=True, cpu_backend=cpu_backend)(x),
                              x, dy)[0]
    want = torch.autograd.grad(fn(x), x, dy)[0]
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()
    backward = _since(start)[1]
    assert not _externs([backward])
    assert any("atomic" in k[3] or "+=" in k[3] for k in backward.kernels)
