"""Shapes at the edges of the Triton renderer: constant-index loads under masks, constants
stored from reduction kernels, atomics at a single index, 0-d comparisons."""
import torch

import cherenkov


def check(fn, *args, grads=False):
    compiled = cherenkov.compile(fn, strict=True)
    out = compiled(*args)
    torch.testing.assert_close(out, fn(*args))
    if grads:
        outs = out if isinstance(out, tuple) else (out,)
        refs = fn(*args)
        refs = refs if isinstance(refs, tuple) else (refs,)
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        g = torch.autograd.grad(sum(o.sum() for o in outs), leaves)
        e = torch.autograd.grad(sum(r.sum() for r in refs), leaves)
        for a, b in zip(g, e):
            torch.testing.assert_close(a, b)


def test_constant_index_load_under_a_mask():
    check(lambda a, b: torch.cartesian_prod(a, b), torch.tensor([0.5]), torch.tensor([0.0, 1.0]))
    check(lambda a, b: torch.block_diag(a, b), torch.randn(1, 1), torch.randn(2, 3))


def test_constant_gradient_stored_next_to_a_reduction():
    a = torch.randn(5, requires_grad=True)
    b = torch.tensor(1.7, requires_grad=True)
    check(lambda a, b: torch.div(a, b, rounding_mode="floor") + a * b, a, b, grads=True)


def test_atomic_add_into_a_single_element():
    x = torch.tensor(1.0, requires_grad=True)
    check(lambda x: torch.index_select(x, 0, torch.tensor([0])) * 3, x, grads=True)
    w = torch.randn(1, 3, requires_grad=True)
    check(lambda w: torch.nn.functional.embedding(torch.tensor([0, 0, 0]), w), w, grads=True)


def test_zero_dim_comparisons():
    check(lambda a, b: torch.isclose(a, b), torch.tensor(1.0), torch.tensor(1.5))
    check(lambda a: torch.isfinite(a) & (a > 0), torch.tensor(2.0))
    check(lambda a, b: torch.logaddexp(a, b), torch.tensor(1.0), torch.tensor(-2.0))


def test_integer_to_bfloat16_casts():
    check(lambda n: (n.to(torch.bfloat16) * 2).float(), torch.arange(-40, 40))


def test_cat_of_transposed_pieces_matches_eager_on_both_cpu_backends():
    """The attention-backward cat (dq, dk, dv read through a transpose): each piece's index is
    folded under the promise that it is read only where the piece is selected (odd sizes so
    no piece boundary falls on a nice multiple)."""
    B, H, T, D = 2, 3, 5, 7
    pieces = [torch.randn(B, H, T, D) for _ in range(3)]
    extra = torch.randn(B, T, 2)

    def fn(a, b, c, e):
        flat = [t.transpose(1, 2).reshape(B, T, H * D) for t in (a, b, c)]
        return torch.cat(flat[:2] + [e] + flat[2:], 2)

    want = fn(*pieces, extra)
    for backend in ("cpp", "triton"):
        got = cherenkov.compile(fn, strict=True, cpu_backend=backend)(*pieces, extra)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_bfloat16_rounding_is_to_nearest_even_on_both_cpu_backends():
    """fp32 -> bf16 rounds to nearest even (Triton's interpreter truncates: the renderer's
    _bf16 rounds there); NaN and infinities pass through; the same bits as eager (a NaN's
    payload aside)."""
    x = torch.randn(4096) * 3
    x[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.3895314e38])

    def fn(t):
        return (t * 1.5).to(torch.bfloat16)

    want = fn(x)
    for backend in ("cpp", "triton"):
        got = cherenkov.compile(fn, strict=True, cpu_backend=backend)(x)
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan), backend
        assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16)), backend


def test_bfloat16_results_computed_in_fp32_are_rounded_when_stored():
    """A bf16 value computed in fp32 registers (a * b + a, exp(a) * b) is rounded to nearest
    even once, at its store, on both CPU backends (Triton's interpreter store truncates)."""
    a, b = torch.randn(4096, dtype=torch.bfloat16), torch.randn(4096, dtype=torch.bfloat16)
    for fn in (lambda a, b: a * b + a, lambda a, b: torch.exp(a) * b):
        want = fn(a.float(), b.float()).bfloat16()
        for backend in ("cpp", "triton"):
            got = cherenkov.compile(fn, strict=True, cpu_backend=backend)(a, b)
            assert (got.view(torch.int16) != want.view(torch.int16)).float().mean() < 1e-3, \
                backend
