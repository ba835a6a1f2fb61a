"""GPU: the attention kernels' TMA-descriptor forms (launch.tma_mode) -- which calls take them,
and that forward and gradients match the pointer-load kernels (bf16, Hopper)."""
import pytest
import torch

import cherenkov.attention as ca
from cherenkov.attention import launch

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="needs a Hopper-class CUDA device")


def _qkv(B, H, S, D=128, grad=True):
    return [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
            for _ in range(3)]


def test_auto_takes_descriptors_only_with_work_enough():
    small, big = _qkv(1, 2, 256, grad=False), _qkv(2, 8, 2048, grad=False)
    d64 = _qkv(2, 8, 2048, D=64, grad=False)
    assert launch.tma_mode(*d64, d64[0], 128, 64, False) == 0       # measured slower
    assert launch.tma_mode(*small, small[0], 128, 64, False) == 0
    assert launch.tma_mode(*big, big[0], 128, 64, False) == 2
    ragged = _qkv(2, 8, 2000, grad=False)                 # not a tile multiple: 4-D only
    assert launch.tma_mode(*ragged, ragged[0], 128, 64, False) == 0
    assert launch.tma_mode(*ragged, ragged[0], 128, 64, False, "4d") == 4


@pytest.mark.parametrize("mode", ["2d", "4d"])
@pytest.mark.parametrize("S, mask", [(2048, "causal"), (1000, "window")])
def test_descriptor_kernels_match_pointer_kernels(mode, S, mask, monkeypatch):
    torch.manual_seed(0)
    q, k, v = _qkv(2, 4, S)
    do = torch.randn_like(q)
    mask_mod = ca.causal if mask == "causal" else ca.sliding_window(256)
    bm = ca.block_mask(mask_mod, 2, 4, S, S, device="cuda")
    results = {}
    for m in (mode, "off"):
        monkeypatch.setattr(launch, "TMA", m)
        out = ca.attention(q, k, v, block_mask=bm, score_mod=ca.tanh_softcap(20.0))
        results[m] = (out, *torch.autograd.grad(out, (q, k, v), do))
    for name, ours, ref in zip(("out", "dq", "dk", "dv"), results[mode], results["off"]):
        err = ((ours.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        assert err < 2e-2, (name, err)
