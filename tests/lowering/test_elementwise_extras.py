"""lowering/elementwise.py and movement.py: fmax/fmin, log10, round(decimals=), signbit and
diagonal (trace) compile into kernels -- no PyTorch op left -- and agree with eager on the
values where they differ from their plain neighbours: NaNs on one side or both, -0.0 and
negative NaNs, negative decimals, integer tensors, off-diagonals and diagonals of other dims.
Through both CPU renderers (C++ and Triton in the interpreter)."""
import pytest
import torch

import cherenkov
from cherenkov import backend


def _compiled(fn, *args, **options):
    start = len(backend.COMPILED)
    out = cherenkov.compile(fn, strict=True, **options)(*args)
    infos = [info for _, info in backend.COMPILED[start:]]
    return out, [e for info in infos for e in info.externs], sum(len(i.kernels) for i in infos)


def _floats():
    torch.manual_seed(0)
    x, y = torch.randn(6, 7) * 3, torch.randn(6, 7) * 3
    x[0, 0] = y[1, 1] = float("nan")              # NaN on one side ...
    x[2, 2] = y[2, 2] = float("nan")              # ... and on both
    x[3, 3], x[3, 4] = -0.0, 0.0
    x[4, 4] = -float("nan")                       # a NaN whose sign bit is set
    x[5, 5] = -float("inf")
    return x, y


def _float_ops(x, y):
    return (torch.fmax(x, y), torch.fmin(x, y), torch.log10(x.abs() + 1e-3),
            torch.round(x * 10, decimals=2), torch.round(x * 100, decimals=-1),
            torch.signbit(x), torch.signbit(y * 0.0))


def _diagonals(x):
    x = x * 2
    return (torch.diagonal(x), torch.diagonal(x, 2), torch.diagonal(x, -3),
            torch.diagonal(x.view(2, 3, 7), 1, 2, 0), torch.diagonal(x.view(2, 3, 7), -1, -1, 1),
            torch.trace(x + 1))


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_nan_aware_rounding_sign_ops_compile_and_match_eager(cpu_backend):
    x, y = _floats()
    outs, externs, kernels = _compiled(_float_ops, x, y, cpu_backend=cpu_backend)
    assert not externs and kernels
    for got, want in zip(outs, _float_ops(x, y)):
        torch.testing.assert_close(got, want, equal_nan=True)
    assert outs[0][0, 0] == y[0, 0] and outs[1][1, 1] == x[1, 1]      # the number, not NaN
    assert outs[0][2, 2].isnan() and outs[5][3, 3] and not outs[5][3, 4] and outs[5][4, 4]


def test_integer_fmax_and_signbit_and_a_bf16_log10():
    a, b = torch.randint(-5, 5, (4, 5)), torch.randint(-5, 5, (4, 5))
    fn = lambda a, b: (torch.fmax(a, b), torch.fmin(a, b), torch.signbit(a))   # noqa: E731
    outs, externs, _ = _compiled(fn, a, b)
    assert not externs
    for got, want in zip(outs, fn(a, b)):
        assert got.dtype == want.dtype and torch.equal(got, want)
    h = torch.rand(64, dtype=torch.bfloat16) + 0.5
    out, externs, _ = _compiled(lambda h: torch.log10(h * 3), h)
    assert not externs and out.dtype == torch.bfloat16
    torch.testing.assert_close(out, torch.log10(h * 3))


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_diagonals_and_trace_compile_forward_and_backward(cpu_backend):
    x = torch.randn(6, 7, requires_grad=True)
    outs, externs, _ = _compiled(_diagonals, x, cpu_backend=cpu_backend)
    assert not externs
    want = _diagonals(x)
    for got, ref in zip(outs, want):
        assert got.shape == ref.shape
        torch.testing.assert_close(got, ref)
    grad = torch.autograd.grad(sum(o.sum() for o in outs), x)[0]
    torch.testing.assert_close(grad, torch.autograd.grad(sum(o.sum() for o in want), x)[0])


def test_an_empty_diagonal_gives_eagers_empty_result():
    x = torch.randn(3, 4)
    fn = lambda x: torch.diagonal(x * 2, 5) + 1      # noqa: E731 -- offset past the matrix
    out, externs, _ = _compiled(fn, x)
    assert out.shape == (0,) and torch.equal(out, fn(x))


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_ldexp_computes_the_power_as_eager_does(cpu_backend):
    """x * 2**e with the power in the result's dtype: 1e-300 * 2**200 stays finite in
    float64, 2 * 2**-1100 underflows to 0, as in eager."""
    x = torch.tensor([1.5, -3.0, 0.25, 1e-300, 2.0], dtype=torch.float64)
    e = torch.tensor([3, -2, 0, 200, -1100])
    fn = lambda x, e: (torch.ldexp(x, e), torch.ldexp(x.float(), e * 1.0))   # noqa: E731
    torch._dynamo.reset()
    out, externs, kernels = _compiled(fn, x, e, cpu_backend=cpu_backend)
    assert not externs and kernels
    for got, want in zip(out, fn(x, e)):           # (float32: 0 * 2**200 is NaN in both)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)


def test_addmv_is_a_library_matmul_not_a_fallback():
    a, m, v = torch.randn(5), torch.randn(5, 7), torch.randn(7)
    fn = lambda a, m, v: torch.addmv(a * 2, m, v, beta=0.5, alpha=3.0)   # noqa: E731
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    out, externs, _ = _compiled(fn, a, m, v)
    assert not externs and backend.COMPILED[start][1].library_calls.get("matmul") == 1
    torch.testing.assert_close(out, fn(a, m, v))


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_digamma_follows_atens_formula(dtype, cpu_backend):
    """Poles at 0 (signed), NaN at negative integers and -inf, reflection for other
    negatives, exactly PSI_10 at 10, the asymptotic series past it; polygamma(0, x) too."""
    x = torch.tensor([0.0, -0.0, 1e-8, 0.5, 1.0, 2.5, 9.999, 10.0, 11.0, 1e20, float("inf"),
                      float("-inf"), float("nan"), -0.5, -1.0, -2.7, -10.5, 3.3e-3, 123.4],
                     dtype=dtype)
    fn = lambda x: (torch.digamma(x * 1), torch.polygamma(0, x + 0))     # noqa: E731
    _special_matches(fn, x, cpu_backend, rtol=0 if dtype == torch.float64 else 1e-6, atol=1e-6)


def _special_matches(fn, x, cpu_backend, rtol, atol):
    """fn's outputs compiled into kernels (no PyTorch op left) agree with eager's: the same
    NaNs and infinities, the rest within (rtol, atol)."""
    torch._dynamo.reset()
    out, externs, kernels = _compiled(fn, x, cpu_backend=cpu_backend)
    assert not externs and kernels
    for got, want in zip(out, fn(x)):
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
        torch.testing.assert_close(got, want, equal_nan=True, rtol=rtol, atol=atol)


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_angle_of_real_numbers(cpu_backend):
    """pi below 0 (-inf too), 0 at or above (-0.0 too), NaN kept; integers give floats."""
    for x in (torch.tensor([-1.0, 0.0, 1.0, float("nan"), -0.0, float("-inf"), float("inf")]),
              torch.tensor([-2, 0, 3]), torch.tensor([-1.0, 2.0], dtype=torch.bfloat16)):
        fn = lambda x: torch.angle(x * 1)                                   # noqa: E731
        torch._dynamo.reset()
        out, externs, kernels = _compiled(fn, x, cpu_backend=cpu_backend)
        want = fn(x)
        assert not externs and kernels and out.dtype == want.dtype
        torch.testing.assert_close(out, want, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_i0_and_i0e_follow_atens_series(dtype, cpu_backend):
    """Both Chebyshev series (|x| <= 8 and beyond, the seam at 8 included), signs, the
    overflow of i0 past ~89 in fp32, infinities and NaN, as eager's."""
    x = torch.tensor([0.0, -0.0, 1e-8, 0.5, -3.0, 7.999, 8.0, 8.001, 20.0, -50.0, 88.0, 89.5,
                      700.0, float("inf"), float("-inf"), float("nan")], dtype=dtype)
    fn = lambda x: (torch.i0(x * 1), torch.special.i0e(x * 1))             # noqa: E731
    _special_matches(fn, x, cpu_backend, rtol=1e-14 if dtype == torch.float64 else 1e-6, atol=0)
