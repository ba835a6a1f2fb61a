"""The forward's TMA-descriptor forms (launch.TMA "2d" / "4d") in Triton's interpreter: the
same outputs and LSE as pointer loads, and the choice of form (launch.tma_mode)."""
import pytest
import torch

from cherenkov.attention import (attention, attention_math, block_mask, causal, document,
                                 prefix_lm, sliding_window, tanh_softcap)
from cherenkov.attention import launch
from cherenkov.attention.tuning import _INTERPRETER


def _run(mode, q, k, v, monkeypatch, **kw):
    """attention() under launch.TMA = mode, and the descriptor forms its forward launched."""
    made = []
    real = launch._descriptors

    def spy(form, *args):
        made.append(form)
        return real(form, *args)
    with monkeypatch.context() as m:
        m.setattr(launch, "TMA", mode)
        m.setattr(launch, "_descriptors", spy)
        out, lse = attention(q, k, v, return_lse=True, **kw)
    return out, lse, made


def _layout(mode, q, k, v):
    o = torch.empty_like(q)
    return launch.tma_mode(q, k, v, o, _INTERPRETER.block_m, _INTERPRETER.block_n, True, mode)


@pytest.mark.parametrize("mode, B, H, HK, Q, KV, transposed, expect", [
    ("2d", 1, 2, 2, 64, 64, False, 2),      # contiguous, tile-multiple lengths
    ("4d", 1, 2, 1, 37, 45, False, 4),      # GQA, ragged lengths: zero-filled reads
    ("4d", 2, 2, 2, 40, 40, True, 4),       # (B, S, H, D) storage seen as (B, H, S, D)
    ("2d", 1, 2, 2, 37, 45, False, 0),      # 2-D refuses ragged lengths: pointers
])
def test_descriptor_forward_matches_pointer_loads(mode, B, H, HK, Q, KV, transposed, expect,
                                                  monkeypatch):
    def make(heads, length):
        if transposed:
            return torch.randn(B, length, heads, 16, dtype=torch.float16).transpose(1, 2)
        return torch.randn(B, heads, length, 16, dtype=torch.float16)
    q, k, v = make(H, Q), make(HK, KV), make(HK, KV)
    assert _layout(mode, q, k, v) == expect
    kw = dict(score_mod=tanh_softcap(5.0), enable_gqa=H != HK,
              block_mask=block_mask(causal, B, H, Q, KV, block=(32, 32)))
    out, lse, made = _run(mode, q, k, v, monkeypatch, **kw)
    ref, ref_lse, pointers = _run("off", q, k, v, monkeypatch, **kw)
    assert made == [expect] and pointers == [0]
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=0)


def test_descriptors_need_aligned_unpadded_layouts():
    q = torch.randn(1, 2, 32, 16, dtype=torch.float16)
    assert _layout("2d", q, q, q) == 2
    assert _layout("auto", q, q, q) == 0      # the interpreter takes descriptors only if asked
    assert _layout("off", q, q, q) == 0
    odd = torch.randn(1, 2, 32, 24, dtype=torch.float16)             # D padded to 32
    assert _layout("4d", odd, odd, odd) == 0
    narrow = torch.randn(1, 2, 32, 17, dtype=torch.float16)[..., :4]  # rows of 34 bytes
    assert _layout("4d", narrow, narrow, narrow) == 0
    assert launch.tma_mode(q, q, q, q, 32, 32, False, "auto") == 0   # CPU, not the interpreter


@pytest.mark.parametrize("name, mask_mod, Q, KV", [
    ("causal", causal, 100, 100),
    ("window", sliding_window(20), 77, 77),
    ("prefix", prefix_lm(30), 64, 96),
])
def test_coarsened_mask_is_the_mask_built_with_taller_tiles(name, mask_mod, Q, KV):
    fine = block_mask(mask_mod, 2, 1, Q, KV, block=(16, 16))
    tall = fine.coarsened(4)
    direct = block_mask(mask_mod, 2, 1, Q, KV, block=(64, 16))
    assert tall.block == (64, 16) and tall.exact and fine.coarsened(4) is tall
    for field in ("state", "kv_num_blocks", "full_kv_num_blocks", "q_num_blocks",
                  "full_q_num_blocks"):
        assert torch.equal(getattr(tall, field), getattr(direct, field)), field
    nonzero = tall.kv_num_blocks.max().item()
    assert torch.equal(tall.kv_indices[..., :nonzero], direct.kv_indices[..., :nonzero])


def test_flex_style_masks_are_not_coarsened():
    m = block_mask(causal, 1, 1, 64, 64, block=(16, 16))
    m.exact = False          # e.g. a FlexAttention BlockMask: full tiles need not be exact
    with pytest.raises(ValueError):
        m.coarsened(2)


@pytest.mark.parametrize("name, mask_mod, coarse", [
    ("causal", causal, True),
    ("prefix", prefix_lm(20), True),
    ("document", document(torch.tensor([0] * 30 + [1] * 34)), False),   # reads a tensor
])
def test_descriptor_forward_runs_index_masks_on_taller_tiles(name, mask_mod, coarse,
                                                             monkeypatch):
    """The interpreter's forward tile is 32 rows: a 16-row mask of index arithmetic is
    coarsened for it (same answer), one reading document ids is not."""
    q, k, v = (torch.randn(1, 2, 64, 16, dtype=torch.float16) for _ in range(3))
    m = block_mask(mask_mod, 1, 2, 64, 64, block=(16, 16))
    out, lse, made = _run("2d", q, k, v, monkeypatch, block_mask=m)
    assert made == [2] and ((2, 1) in m._coarse) == coarse
    ref = attention_math(q.double(), k.double(), v.double(), mask_mod=mask_mod)
    torch.testing.assert_close(out.double(), ref, rtol=2e-3, atol=2e-3)
    # a block mask given with another mask_mod than its own is never coarsened
    other = block_mask(mask_mod, 1, 2, 64, 64, block=(16, 16))
    _run("2d", q, k, v, monkeypatch, block_mask=other, mask_mod=lambda b, h, i, j: i >= j)
    assert not other._coarse


@pytest.mark.parametrize("score_mod", [None, tanh_softcap(5.0)])
def test_backward_descriptor_reads_match_pointer_loads(score_mod, monkeypatch):
    """The dQ kernel's K / V tiles and the dK/dV kernel's Q / dO tiles through 2-D
    descriptors -- with a score mod, the stored-dS backward's dS stores and dS / K reads
    (launch_bwd.DS_STORE) -- the gradients of pointer loads, to the ulp: the interpreter's
    dot of a descriptor's tile and of a pointer tile is numpy's matmul on arrays laid out
    differently, which on some CPUs sums in another order (one fp16 element in 2048 differed
    by one ulp on the machine of 2026-12-01's session, at 9eb9cce as at 7b43641; on the GPU,
    tests/gpu/test_attention_tma_gpu.py compares the two kernels' results)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16, dtype=torch.float16, requires_grad=True)
               for _ in range(3))
    do = torch.randn(1, 2, 64, 16, dtype=torch.float16)
    m = block_mask(causal, 1, 2, 64, 64, block=(32, 32))
    grads = {}
    for mode in ("2d", "off"):
        out, _, made = _run(mode, q, k, v, monkeypatch, block_mask=m, score_mod=score_mod)
        with monkeypatch.context() as mp:
            mp.setattr(launch, "TMA", mode)
            real = launch._descriptors
            mp.setattr(launch, "_descriptors", lambda form, *a: made.append(form) or real(form, *a))
            grads[mode] = torch.autograd.grad(out, (q, k, v), do)
        assert made == ([2, 2, 2] if mode == "2d" else [0, 0, 0])
    for ours, ref in zip(grads["2d"], grads["off"]):
        torch.testing.assert_close(ours, ref, rtol=1e-3, atol=1e-5)


def test_auto_leaves_masks_reading_tensors_on_pointers(monkeypatch):
    from cherenkov.attention.codegen import compile_mods
    doc = document(torch.tensor([0] * 30 + [1] * 34))
    plans = {}
    for name, mod in (("causal", causal), ("document", doc)):
        traced, kernels = compile_mods(None, mod, interpret=True)
        plans[name] = launch.Plan(kernels, traced, block_mask(mod, 1, 1, 64, 64), 1.0, True)
    monkeypatch.setattr(launch, "TMA", "auto")
    assert launch._mode_for(plans["causal"]) == "auto"
    assert launch._mode_for(plans["document"]) == "off"
    assert launch._mode_for(plans["document"], "2d") == "2d"     # asked for explicitly
