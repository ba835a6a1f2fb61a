"""The shared-memory cross-entropy kernel (templates/cross_entropy_smem*.py) on the CPU: it
compiles for sm_90 (cp.async of 16 bytes, one wait per slice, the row's shared memory as
planned), its slices split into power-of-two buffers, and the calls it does not take go to
the Triton kernel. Its results on the GPU: tests/gpu/test_cross_entropy_smem_gpu.py."""
import os
import re

import pytest
import torch

from cherenkov.templates import cross_entropy_smem
from cherenkov.templates.cross_entropy_smem import parts, slices, unsupported
from tests.sm90_compiling import run_script

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("n", [1, 2, 7, 8, 13, 15, 16, 31])
def test_parts_are_powers_of_two_that_add_up(n):
    p = parts(n)
    if bin(n).count("1") > 4:
        assert p is None
        return
    assert sum(p) == n and len(p) == 4 and list(p) == sorted(p, reverse=True)
    assert all(x == 0 or x & (x - 1) == 0 for x in p)
    assert p[0] > 0


def test_slices_cover_the_row():
    assert slices(50304, 4096) == 13 and slices(32000, 4096) == 8 and slices(4096, 4096) == 1


def test_cpu_tensors_are_not_taken():
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    assert unsupported(x, x) == "not CUDA"


def test_off_switch(monkeypatch):
    monkeypatch.setattr(cross_entropy_smem, "ENABLED", "off")
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    assert "off" in unsupported(x, x)


def test_cpu_rows_still_match_torch():
    """On the CPU the Triton kernel (or its torch form) runs, smem left at its default."""
    from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 96, generator=g)
    t = torch.tensor([3, -100, 95, 0, 17])
    loss = torch.empty(5)
    grad = torch.empty_like(x)
    cross_entropy_rows(x, t, loss, -100, True, grad=grad)
    ref = torch.nn.functional.cross_entropy(x, t, reduction="none", ignore_index=-100)
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    p = torch.softmax(x, 1)
    p[torch.arange(5), t.clamp(min=0)] -= 1
    p[1] = 0
    torch.testing.assert_close(grad, p, rtol=1e-5, atol=1e-6)


def test_compiles_for_sm90():
    run = run_script(os.path.join(HERE, "sm90_ce_smem_compile.py"), timeout=600)
    lines = [line for line in run.stdout.splitlines() if "shared memory" in line]
    assert len(lines) == 5, run.stdout
    for line in lines:
        vocab, dtype, block = re.match(r"V=(\d+) (\w+) block (\d+)", line).groups()
        n, size = slices(int(vocab), int(block)), 2 if dtype == "bf16" else 4
        shared = int(re.search(r"shared memory (\d+)", line).group(1))
        assert n * int(block) * size <= shared <= n * int(block) * size + 1024, line
        copies = int(block) * n * size // 16 // 256            # 8 warps: 256 threads
        assert f"cp.async {copies}; 16-byte {copies};" in line, line
        assert f"wait_group {n}" in line, line


def test_a_failed_build_is_remembered_per_launch_signature(monkeypatch):
    """A kernel that failed to build sends its own signature's calls to the Triton kernel, not
    every call's."""
    monkeypatch.setattr(cross_entropy_smem, "_FAILED", {})
    a = torch.empty(2, 64, dtype=torch.bfloat16, device="meta")
    b = torch.empty(2, 128, dtype=torch.bfloat16, device="meta")
    cross_entropy_smem._FAILED[cross_entropy_smem._signature(a, a, 2048)] = "boom"
    assert "boom" in unsupported(a, a, 2048)
    assert unsupported(b, b, 2048) != unsupported(a, a, 2048)


def test_lowering_queues_the_launch_for_the_compile_workers(monkeypatch):
    """The op's lowering hands the compile workers the job of the launch it will make: the
    kernel's own arguments, its constexprs named as the kernel names them."""
    from types import SimpleNamespace

    from cherenkov.lowering.templates import _queue_rows_kernel, _rows_of_forward_grad
    from cherenkov.templates.cross_entropy_smem_kernel import cross_entropy_rows_smem as fn
    monkeypatch.setattr(cross_entropy_smem, "unsupported_rows", lambda *a, **k: None)
    value = SimpleNamespace(meta=SimpleNamespace(shape=(64, 50304), strides=(50304, 1),
                                                 dtype=torch.bfloat16))
    targets = SimpleNamespace(meta=SimpleNamespace(dtype=torch.int64))
    ctx = SimpleNamespace(device=torch.device("cuda"), compile_jobs=[], later_jobs=[])
    _queue_rows_kernel(ctx, _rows_of_forward_grad, value, targets, -100, "mean")
    assert ctx.compile_jobs == []          # not waited for: compiled as the graph goes on
    (job,) = ctx.later_jobs
    assert job.fn == "cross_entropy_rows_smem" and os.path.exists(job.path)
    assert job.args == ("*bfloat16", 50304, "*bfloat16", 50304, "*int64", "*float32", 50304, -100)
    kwargs = dict(job.kwargs)
    assert kwargs.pop("num_warps") == cross_entropy_smem.NUM_WARPS
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    assert set(kwargs) == constexprs
    assert len(job.args) == len(fn.arg_names) - len(constexprs)
    assert sum(kwargs[k] for k in ("N1", "N2", "N3", "N4")) == slices(50304, kwargs["BLOCK_V"])
    monkeypatch.setattr(cross_entropy_smem, "unsupported_rows", lambda *a, **k: "no")
    _queue_rows_kernel(ctx, _rows_of_forward_grad, value, targets, -100, "mean")
    assert len(ctx.later_jobs) == 1                       # a call it does not take: no job


def test_the_fused_lm_head_queues_its_chunks_kernel(monkeypatch):
    from types import SimpleNamespace

    from cherenkov.lowering.templates import _queue_rows_kernel, _rows_of_chunks
    monkeypatch.setattr(cross_entropy_smem, "unsupported_rows", lambda *a, **k: None)
    x = SimpleNamespace(meta=SimpleNamespace(shape=(8192, 2048), dtype=torch.bfloat16))
    w = SimpleNamespace(meta=SimpleNamespace(shape=(32000, 2048), dtype=torch.float32))
    t = SimpleNamespace(meta=SimpleNamespace(dtype=torch.int64))
    ctx = SimpleNamespace(device=torch.device("cuda"), compile_jobs=[], later_jobs=[])
    _queue_rows_kernel(ctx, _rows_of_chunks, x, w, None, t, -100, "mean", True, True, False)
    _queue_rows_kernel(ctx, _rows_of_chunks, x, w, None, t, -100, "mean", False, False, False)
    grad, loss_only = ctx.later_jobs
    assert grad.args[:4] == ("*bfloat16", 32000, "*bfloat16", 32000)
    assert dict(grad.kwargs)["WRITE_GRAD"] and not dict(loss_only.kwargs)["WRITE_GRAD"]
    odd = SimpleNamespace(meta=SimpleNamespace())     # anything that raises: no job, no failure
    _queue_rows_kernel(ctx, _rows_of_chunks, x, w, None, odd, -100, "mean", True, True, False)
    assert len(ctx.later_jobs) == 2
