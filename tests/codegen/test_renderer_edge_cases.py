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
