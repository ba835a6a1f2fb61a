"""lowering/distance.py: cdist's forward as one reduction over the features per pair, for
p = 0, 1, 2, inf and others, batched or not, against eager (whose p = 2 above 25 rows goes
through a matmul: the direct sum agrees to rounding); its backward, ATen's terms per pair."""
import pytest
import torch

from tests.lowering.compiled import compiled


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_cdist_matches_eager(cpu_backend):
    torch.manual_seed(0)
    a, b = torch.randn(2, 30, 4), torch.randn(2, 27, 4)
    b[0, 0] = a[0, 0]                                  # a zero distance
    for p in (0.0, 1.0, 2.0, 3.0, 0.5, float("inf")):
        fn = lambda a, b: torch.cdist(a * 1, b, p=p)                          # noqa: E731
        out, externs, _ = compiled(fn, a, b, cpu_backend=cpu_backend)
        assert not externs
        torch.testing.assert_close(out, fn(a, b), rtol=1e-5, atol=1e-5)
    a64, b64 = torch.randn(5, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    fn = lambda a, b: torch.cdist(a * 1, b)                                   # noqa: E731
    out, externs, _ = compiled(fn, a64, b64, cpu_backend=cpu_backend)
    assert not externs
    torch.testing.assert_close(out, fn(a64, b64))


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
def test_cdist_backward_matches_eager(cpu_backend):
    """Zero distances (a row repeated) and zero differences (one shared feature) included:
    their terms are 0, as ATen's."""
    import cherenkov
    from cherenkov import backend
    torch.manual_seed(0)
    for p in (1.0, 2.0, 3.0, 0.5, 1.5, float("inf"), 0.0):
        a = torch.randn(2, 6, 3, requires_grad=True)
        b = torch.randn(2, 5, 3, requires_grad=True)
        with torch.no_grad():
            b[0, 0] = a[0, 0]
            b[1, 1, 0] = a[1, 2, 0]
        fn = lambda a, b: torch.cdist(a * 2, b, p=p,                          # noqa: E731
                                      compute_mode="donot_use_mm_for_euclid_dist")
        torch._dynamo.reset()
        start = len(backend.COMPILED)
        out = cherenkov.compile(fn, strict=True, cpu_backend=cpu_backend)(a, b)
        dy = torch.randn_like(out)
        got = torch.autograd.grad(out, (a, b), dy)
        assert not [e for _, info in backend.COMPILED[start:] for e in info.externs], p
        want = torch.autograd.grad(fn(a, b), (a, b), dy)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
