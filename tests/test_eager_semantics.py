"""Cases where compiled code differed from eager (found by a fuzzing session): aliasing of
outputs and inputs, input updates, layouts of casts, integer literals and rounding ops, float
floor division, in-place slice updates (the eager fallback of a graph that updates an input:
tests/test_backend.py). Each runs on both CPU backends (C++ kernels, and Triton's interpreter)."""
import pytest
import torch

import cherenkov

BACKENDS = ["cpp", "triton"]


def compiled(f, backend):
    torch._dynamo.reset()
    return cherenkov.compile(f, strict=True, cpu_backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("f", [lambda a: (a + 1, a + 1),
                               lambda a: (a.relu(), a.clamp(min=0)),
                               lambda a: (a.argmax(1), a.max(1).indices)],
                         ids=["add twice", "relu and clamp", "argmax twice"])
def test_equal_outputs_are_distinct_tensors(f, backend):
    a = torch.randn(3, 4)
    c = compiled(f, backend)(a)
    assert c[0].data_ptr() != c[1].data_ptr()
    before = c[1].clone()
    c[0].add_(100)
    assert torch.equal(c[1], before) and torch.equal(c[1], f(a)[1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("f", [lambda a: torch.cat([a]), lambda a: torch.cat([a, a[:0]]),
                               lambda a: torch.stack([a])[0]],
                         ids=["cat of one", "cat with an empty piece", "stack of one"])
def test_cat_of_one_tensor_does_not_alias_the_input(f, backend):
    a = torch.zeros(2, 3)
    c = compiled(f, backend)(a)
    c.fill_(7.0)
    assert a.eq(0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_swap_through_a_clone(backend):
    def f(a, b):
        t = a.clone()
        a.copy_(b)
        b.copy_(t)
    a, b = torch.tensor([1., 2.]), torch.tensor([3., 4.])
    compiled(f, backend)(a, b)
    assert a.tolist() == [3., 4.] and b.tolist() == [1., 2.]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x", [torch.arange(8.)[::2], torch.arange(3.).reshape(3, 1).expand(3, 4),
                               torch.arange(12.).reshape(3, 4).t()],
                         ids=["strided", "expanded", "transposed"])
def test_cast_of_a_strided_input_has_eager_layout(x, backend):
    f = lambda a: a.to(torch.float64)
    want, got = f(x), compiled(f, backend)(x)
    assert torch.equal(got, want) and got.stride() == want.stride()


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_literals_wrap_and_integer_rounding_is_identity(backend):
    f = lambda i, j: (torch.floor(i), torch.ceil(i), torch.trunc(i), j + 2 ** 31)
    i, j = torch.tensor([1, -2, 3]), torch.tensor([1, -2, 3], dtype=torch.int32)
    for got, want in zip(compiled(f, backend)(i, j), f(i, j)):
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_floor_divide_is_atens(backend):
    f = lambda a, b: torch.floor_divide(a, b)
    a = torch.tensor([1.0, 7.0, float("inf"), -1.0, 0.5, -7.5])
    b = torch.tensor([0.1, 0.7, 2.0, 0.3, 0.0, 2.0])
    torch.testing.assert_close(compiled(f, backend)(a, b), f(a, b), equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_add_into_a_column_slice(backend):
    def f(a, b):
        a[:, 1:] += b[:, :-1]
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    want = a.clone()
    f(want, b)
    compiled(f, backend)(a, b)
    torch.testing.assert_close(a, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("f, shape", [
    (lambda a: (a * 2).t().contiguous(), (4, 3)),
    (lambda a: (a * 2)[:, :1].expand(2, 5, 4).contiguous(), (2, 3, 4)),
    (lambda a: (a * 2).narrow(1, 1, 2).contiguous(), (4, 3)),
    (lambda a: (a * 2).t().clone(), (4, 3)),                 # clone keeps the transposed layout
], ids=["transposed", "expanded", "narrowed", "clone of transposed"])
def test_copy_of_a_view_of_a_computed_value_has_eager_layout(f, shape, backend):
    a = torch.randn(shape)
    want, got = f(a), compiled(f, backend)(a)
    assert torch.equal(got, want) and got.stride() == want.stride()
    got.add_(1)                                  # its own memory: no overlapping elements
    assert torch.equal(got, want + 1)


def test_gpu_split_of_a_bf16_column_sum_accumulates_in_float32():
    """Compiled for the H200 (split reductions on), run in the interpreter: a cancelling bf16
    column sum's partials were rounded to bf16 each (off by over 100%)."""
    torch.manual_seed(0)
    x = torch.randn(4096, 8)
    x[:2048] += 100.0
    x[2048:] -= 100.0
    x = x.bfloat16()
    f = lambda x: x.sum(0)
    torch._dynamo.reset()
    got = cherenkov.compile(f, strict=True, device="h200", cpu_backend="triton")(x)
    torch.testing.assert_close(got, f(x), rtol=1.6e-2, atol=1e-1)


def test_gpu_row_loop_with_an_integer_column_max():
    """An integer column max joining a row kernel (row loops on the H200) starts at the
    dtype's least value (-inf in an int64 accumulator did not compile)."""
    torch.manual_seed(0)
    x = torch.randint(-50, 50, (1024, 64))
    f = lambda x: (x.sum(-1), x.amax(0), x.amin(0))
    torch._dynamo.reset()
    got = cherenkov.compile(f, strict=True, device="h200", cpu_backend="triton")(x)
    for g, w in zip(got, f(x)):
        assert torch.equal(g, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_int64_max_and_min_stay_exact(backend):
    """Masked lanes filled with +-inf promoted int64 values to float32 (rounded results)."""
    torch.manual_seed(0)
    x = torch.randint(2 ** 40, 2 ** 41, (4, 300))
    f = lambda x: (x.amax(-1), x.amin(-1))
    for got, want in zip(compiled(f, backend)(x), f(x)):
        assert torch.equal(got, want)


@pytest.mark.parametrize("op", [torch.floor_divide, torch.remainder,
                                lambda a, b: torch.div(a, b, rounding_mode="trunc"), torch.fmod])
def test_integer_division_by_zero_raises_on_the_cpp_backend(op):
    """As eager (and Inductor-CPU) on the CPU: the C++ kernels flag a zero divisor."""
    f = lambda a, b: op(a, b) + 1
    a, b = torch.tensor([1, 2, 3]), torch.tensor([1, 0, 2])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, b)
    g = compiled(f, "cpp")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        g(a, b)
    assert torch.equal(g(a, b + 1), f(a, b + 1))          # and runs on once the divisor is not 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("f, error", [
    (lambda a: torch.abs(a > 0) + 0, "not implemented for 'Bool'"),
    (lambda a: a.long() ** -2 + 1, "negative integer powers"),
], ids=["abs of bool", "integer to a negative power"])
def test_ops_eager_refuses_raise_as_in_eager(f, error, backend):
    """Run as aten (their lowering declines), so compiled code raises eager's error instead
    of returning values (it returned a | 0 and 1 / a**2 truncated)."""
    a = torch.randn(8)
    with pytest.raises((RuntimeError, NotImplementedError), match=error):
        f(a)
    with pytest.raises((RuntimeError, NotImplementedError), match=error):
        compiled(f, backend)(a)
