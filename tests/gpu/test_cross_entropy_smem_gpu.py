"""GPU: the shared-memory cross-entropy kernel (templates/cross_entropy_smem*.py) computes
what torch does -- losses, softmax - onehot, ignored rows, out-of-range targets (NaN), the
gradient in place over the logits -- and calls it does not take run the Triton kernel."""
import pytest
import torch

from cherenkov.templates import cross_entropy_smem
from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 8,
    reason="needs CUDA sm_80+")


def _reference(x, t, ignore_index=-100):
    xf = x.float()
    loss = torch.nn.functional.cross_entropy(xf, t.clamp(0, x.shape[1] - 1), reduction="none")
    loss = torch.where(t == ignore_index, 0.0, loss)
    p = torch.softmax(xf, 1)
    rows = torch.arange(x.shape[0], device=x.device)
    keep = (t != ignore_index) & (t >= 0) & (t < x.shape[1])
    p[rows[keep], t[keep]] -= 1
    p[t == ignore_index] = 0
    return loss, p


@pytest.mark.parametrize("rows, vocab, dtype, block_v", [
    (64, 50304, torch.bfloat16, 4096), (33, 32000, torch.bfloat16, 4096),
    (33, 32000, torch.bfloat16, 2048), (17, 8000, torch.float32, 1024),
    (9, 1024, torch.float16, 4096), (5, 16, torch.bfloat16, 4096)])
@pytest.mark.parametrize("in_place", [False, True])
def test_matches_torch(rows, vocab, dtype, block_v, in_place):
    g = torch.Generator(device="cuda").manual_seed(rows)
    x = (torch.randn(rows, vocab, device="cuda", generator=g) * 3).to(dtype)
    t = torch.randint(0, vocab, (rows,), device="cuda", generator=g)
    t[1] = -100                                          # ignored: loss 0, gradient row 0
    ref_loss, ref_grad = _reference(x, t)
    assert cross_entropy_smem.unsupported(x, x, block_v) is None
    loss = torch.empty(rows, device="cuda")
    grad = x.clone() if in_place else torch.empty_like(x)
    assert cross_entropy_smem.launch(grad if in_place else x, grad, t, loss, -100, True,
                                     block_v=block_v)
    tol = dict(rtol=2e-2, atol=1e-2) if dtype != torch.float32 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss, ref_loss, **tol)
    torch.testing.assert_close(grad.float(), ref_grad, rtol=2e-2, atol=4e-3)
    assert (grad[1] == 0).all()


def test_loss_only_and_out_of_range_targets():
    x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
    t = torch.tensor([0, 5000, -7, 4095], device="cuda")       # two outside [0, V)
    loss = torch.empty(4, device="cuda")
    cross_entropy_rows(x, t, loss, -100, False, smem=True)
    assert torch.isnan(loss[1]) and torch.isnan(loss[2])
    ref, _ = _reference(x, t.clamp(0, 4095))
    torch.testing.assert_close(loss[[0, 3]], ref[[0, 3]], rtol=1e-2, atol=1e-2)


def test_calls_it_does_not_take_run_the_triton_kernel():
    for vocab in (1000, 1001):          # V not a multiple of 16: Triton could not see 16 bytes
        x = torch.randn(6, vocab, device="cuda", dtype=torch.bfloat16)
        assert "16-byte" in cross_entropy_smem.unsupported(x, x)
    t = torch.randint(0, 1001, (6,), device="cuda")
    loss = torch.empty(6, device="cuda")
    grad = torch.empty_like(x)
    cross_entropy_rows(x, t, loss, -100, True, grad=grad)
    ref_loss, ref_grad = _reference(x, t)
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=1e-2)
    torch.testing.assert_close(grad.float(), ref_grad, rtol=2e-2, atol=4e-3)
    big = torch.randn(2, 131072, device="cuda", dtype=torch.bfloat16)  # over its shared memory
    assert "shared memory" in cross_entropy_smem.unsupported(big, big)


def test_a_compile_worker_builds_the_launch(tmp_path, monkeypatch):
    """The job a graph's lowering queues (cross_entropy_smem.compile_job) compiles in a worker
    into Triton's cache, and the launch it stands for then runs and is right."""
    from cherenkov.runtime import parallel_compile
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    job = cross_entropy_smem.compile_job(torch.bfloat16, 4096, 4096, 4096, torch.int64, -100)
    assert parallel_compile.compile_all([job]) == 1
    assert any(tmp_path.rglob("cross_entropy_rows_smem*"))
    x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 4096, (8,), device="cuda")
    loss, grad = torch.empty(8, device="cuda"), torch.empty_like(x)
    assert cross_entropy_smem.launch(x, grad, t, loss, -100, True)
    ref_loss, ref_grad = _reference(x, t)
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=1e-2)
    torch.testing.assert_close(grad.float(), ref_grad, rtol=2e-2, atol=4e-3)
