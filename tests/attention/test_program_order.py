"""The kernels' program order (kernels_src._program_block, launch.head_group): programs run
groups of heads, block by block within a group; every (block, head) runs exactly once for any
group size, including one that does not divide the heads (Triton's interpreter)."""
import pytest
import torch

from cherenkov.attention import attention, attention_math, causal, launch


def test_head_group_holds_half_the_l2_and_stays_in_range(monkeypatch):
    cpu = torch.device("cpu")
    mib = 1 << 20
    assert launch.head_group(64, 1 * mib, cpu, True) == 4          # 4 MiB stand-in L2
    assert launch.head_group(64, 64 * mib, cpu, True) == 1         # never below one head
    assert launch.head_group(3, 1024, cpu, True) == 3              # never above the heads
    assert launch.head_group(6, 1 * mib, cpu, True) == 3           # 3 + 3, not 4 + 2
    assert launch.head_group(5, 1 * mib, cpu, True) == 1           # no group of one size
    monkeypatch.setattr(launch, "_l2_bytes", lambda index: 60 * mib)
    monkeypatch.setattr(launch.torch.cuda, "current_device", lambda: 0)
    assert launch.head_group(64, 2 * mib, torch.device("cuda"), False) == 16   # of 30 at most
    monkeypatch.setattr(launch, "HEAD_GROUP", 4)
    assert launch.head_group(64, 2 * mib, torch.device("cuda"), False) == 4
    assert launch.head_group(3, 2 * mib, cpu, True) == 3


@pytest.mark.parametrize("group, B, H, HK", [(3, 1, 5, 5), (2, 2, 3, 1), (1, 1, 2, 2)])
def test_every_block_of_every_head_runs_once(group, B, H, HK, monkeypatch):
    """Forward and gradients match the math reference whatever the head group: a program
    skipped or run twice would leave rows unwritten (torch.empty) or wrong."""
    monkeypatch.setattr(launch, "HEAD_GROUP", group)
    torch.manual_seed(0)
    S, D = 45, 16
    q = torch.randn(B, H, S, D, requires_grad=True)
    k, v = (torch.randn(B, HK, S, D, requires_grad=True) for _ in range(2))
    out = attention(q, k, v, mask_mod=causal, enable_gqa=HK != H)
    ref = attention_math(q.double(), k.double(), v.double(), None, causal,
                         enable_gqa=HK != H)
    torch.testing.assert_close(out.double(), ref, atol=2e-4, rtol=1e-3)
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    ref_grads = torch.autograd.grad(ref, (q, k, v), do.double())
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-3, rtol=1e-3)
