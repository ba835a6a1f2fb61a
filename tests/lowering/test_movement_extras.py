"""lowering/movement.py: Tensor.unfold as a window along one dim; narrow and narrow_copy
(negative starts counted from the end), in both CPU backends, against eager."""
import pytest
import torch

from tests.lowering.compiled import compiled


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_unfold_is_a_window_along_one_dim(cpu_backend):
    x = torch.randn(3, 10, 4, requires_grad=True)
    for dim, size, step in ((1, 3, 2), (0, 2, 1), (-1, 4, 4), (1, 10, 3)):
        fn = lambda x: (x * 2).unfold(dim, size, step) + 1                  # noqa: E731
        out, externs, _ = compiled(fn, x, cpu_backend=cpu_backend)
        want = fn(x)
        assert not externs and out.shape == want.shape
        torch.testing.assert_close(out, want)
        dy = torch.randn_like(want)
        torch.testing.assert_close(torch.autograd.grad(out, x, dy)[0],
                                   torch.autograd.grad(want, x, dy)[0])


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_narrow_and_narrow_copy(cpu_backend):
    x = torch.randn(3, 6)
    for args in ((1, 1, 2), (0, -2, 2), (1, -3, 3), (1, 0, 6)):
        for fn in (lambda x: torch.narrow_copy(x * 2, *args),
                   lambda x: torch.narrow(x * 2, *args) + 0):
            out, externs, _ = compiled(fn, x, cpu_backend=cpu_backend)
            assert not externs and torch.equal(out, fn(x)), args
