"""GPU: kernels compiled by the worker processes are the ones the first launch uses, and the
compiled optimizer step writes CUDA parameters in place."""
import pytest
import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.runtime import parallel_compile
from tests.optim_steps import plans_since, step_alongside

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_workers_compile_a_graphs_kernels(monkeypatch):
    waited = []
    real = parallel_compile.wait_for

    def spy(future):
        compiled = real(future)
        waited.append(compiled)
        return compiled
    monkeypatch.setattr(parallel_compile, "wait_for", spy)
    x = torch.randn(300, 257, device="cuda")
    fn = lambda t: (torch.softmax(t * 3.0, -1) + t.sin()).sum(0)  # noqa: E731
    got = cherenkov.compile(fn, strict=True, compile_workers=2)(x)
    torch.testing.assert_close(got, fn(x), rtol=1e-4, atol=1e-4)
    # each generated kernel's first launch waited for its own worker job, which compiled it
    assert waited and any(waited), f"workers compiled none: {waited}"


@pytest.mark.parametrize("foreach", [False, True], ids=["per-tensor", "foreach"])
def test_compiled_adamw_on_cuda_matches_eager(foreach):
    """AdamW's step compiled on the device, written into the parameters in place; torch's CUDA
    default (multi-tensor, foreach) decomposes into generated kernels, no library call, whose
    per-parameter updates share launches."""
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(64, 33, device="cuda")),
            torch.nn.Parameter(torch.randn(7, device="cuda")),
            torch.nn.Parameter(torch.randn(3, 5, 2, device="cuda"))]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt = torch.optim.AdamW(ours, lr=0.01, foreach=foreach)
    opt_ref = torch.optim.AdamW(ref, lr=0.01, foreach=foreach)
    start = len(COMPILED)
    step_alongside(cherenkov.compile(opt.step, strict=True), opt_ref, ours, ref, atol=1e-5)
    plans = plans_since(start)
    assert plans and not any(s.kind == "library" for cg in plans for s in cg.steps)
    updating = [cg for cg in plans if cg.graph.mutations]
    assert updating and all(cg.in_place for cg in updating)
    # the per-parameter updates share combo launches (combine_updates), still in place
    assert any(s.label.startswith("combo") for cg in updating for s in cg.steps)


def test_attention_kernels_go_to_the_workers_and_workers_hold_no_gpu_context(submitted_jobs):
    """An SDPA call's kernels (forward, and its backward's from the forward graph) are handed
    to the workers at lowering, with arguments that make the first launch a cache hit; the
    workers answer Triton's device queries themselves, so none opens a CUDA context."""
    import shutil
    import subprocess
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    fn = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q, k, v, is_causal=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):    # the op Cherenkov's kernels replace
        out = cherenkov.compile(fn, strict=True)(q, k, v)
        out.sum().backward()
    ref = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    fn(*ref).sum().backward()
    torch.testing.assert_close(out, fn(*ref), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(q.grad, ref[0].grad, rtol=2e-2, atol=2e-2)
    names = {j.fn for j in submitted_jobs}
    assert {"_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq"} <= names, names
    pool = parallel_compile._pool
    assert pool is not None
    done = [f for f in pool.futures.values() if f.done() and not f.cancelled()]
    assert done and all(f.exception() is None and f.result() for f in done)
    if shutil.which("nvidia-smi"):
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.split()
        workers = {str(w.proc.pid) for w in pool.workers}
        assert not workers & set(apps), "a compile worker opened a CUDA context"
