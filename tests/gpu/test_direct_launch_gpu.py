"""GPU: the direct Triton launch path -- the process-wide probe agrees with Triton's own launch,
and large attention calls (outputs too big for the per-kernel check), TMA descriptors
included, launch directly and match a process that launches through Triton only."""
import pytest
import torch

import cherenkov.attention as ca
from cherenkov.attention import kernel_launch
from cherenkov.runtime import triton_launch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_probe_kernel_launched_directly_matches_tritons_launch():
    from cherenkov.runtime.launch_probe import direct_launch_matches
    assert direct_launch_matches(torch.cuda.current_device())


def test_large_calls_launch_directly_and_agree_with_the_regular_path(monkeypatch):
    B, H, S, D = 4, 16, 4096, 128               # o and lse: over the 64 MB check limit
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    bm = ca.block_mask(ca.causal, B, H, S, S, device="cuda")

    def run():
        out = ca.attention(q, k, v, block_mask=bm)
        return (out, *torch.autograd.grad(out, (q, k, v), do))

    monkeypatch.setitem(kernel_launch._state, "direct", False)      # Triton's path only
    regular = run()
    monkeypatch.setitem(kernel_launch._state, "direct", None)       # not yet decided
    monkeypatch.setattr(triton_launch.TritonLaunch, "verified", False)
    monkeypatch.setattr(triton_launch.TritonLaunch, "probed", False)
    direct = [run() for _ in range(2)][-1]   # the first call of a new kernel compiles
    assert kernel_launch.direct_ok()
    for a, b in zip(direct, regular):
        assert torch.equal(a, b)
