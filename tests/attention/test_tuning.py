"""Attention tiles: pipeline stages follow the device's shared memory."""
import dataclasses

import torch

from cherenkov import hw
from cherenkov.attention.tuning import choose_config


def test_stages_shrink_with_shared_memory():
    h200 = hw.device("h200")
    small = dataclasses.replace(h200, sram_per_sm_bytes=64 * 1024)
    big = choose_config("fwd", 128, torch.bfloat16, device=h200)
    little = choose_config("fwd", 128, torch.bfloat16, device=small)
    assert big.num_stages >= little.num_stages >= 1
    assert little.num_stages < big.num_stages
    # every stage's K and V tiles plus the Q tile fit in the smaller shared memory
    d, b = 128, 2
    assert little.block_m * d * b + little.num_stages * 2 * little.block_n * d * b <= 64 * 1024


def test_interpreter_tiles_are_small():
    cfg = choose_config("fwd", 80, torch.float32, interpret=True)
    assert cfg.block_m <= 32 and cfg.block_n <= 32


def test_score_mods_with_a_varying_derivative_issue_dp_first(monkeypatch):
    """softcap's derivative varies per score: its dK/dV kernel is launched with DP_FIRST (dP's
    matmul beside S's, 64-row steps); ALiBi's and no mod's are not."""
    from cherenkov.attention import (alibi, alibi_slopes, attention, attention_math, causal,
                                     launch_bwd, tanh_softcap)
    from cherenkov.attention.trace import trace_mods
    assert trace_mods(tanh_softcap(30.0), None).score_grad_varies
    assert not trace_mods(alibi(alibi_slopes(4)), None).score_grad_varies
    assert not trace_mods(None, None).score_grad_varies
    seen = []
    real = launch_bwd.launcher

    def spy(fn):
        la = real(fn)
        if getattr(fn, "__name__", "") == "_attn_bwd_dkdv":
            def call(grid, args, constexprs, *rest, **kw):
                seen.append(constexprs["DP_FIRST"])
                return la(grid, args, constexprs, *rest, **kw)
            return call
        return la
    monkeypatch.setattr(launch_bwd, "launcher", spy)
    torch.manual_seed(0)
    for mod in (tanh_softcap(2.0), alibi(alibi_slopes(2))):
        q, k, v = (torch.randn(1, 2, 40, 16, requires_grad=True) for _ in range(3))
        out = attention(q, k, v, score_mod=mod, mask_mod=causal)
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        ref = attention_math(q.double(), k.double(), v.double(), mod, causal)
        ref_grads = torch.autograd.grad(ref, (q, k, v), torch.ones_like(ref))
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r, atol=1e-3, rtol=1e-3)
    assert seen == [True, False]


def test_decode_splits_fill_one_wave():
    """The attention bench's decode (B=8, 4 kv heads, D=128 bf16) on the H200: two programs fit
    per SM by shared memory, so 264 slots over 32 (batch, kv head) pairs: 8 splits."""
    from cherenkov.attention.launch_decode import _decode_splits
    h200 = hw.device("h200")
    cfg = choose_config("decode", 128, torch.bfloat16, (128, 64), device=h200)
    per_cta = (cfg.num_stages * 2 * cfg.block_n + 16) * 128 * 2
    assert int(h200.sram_per_sm_bytes // per_cta) == 2
    assert _decode_splits(cfg, 32, 128, 16, 2, h200) == 2 * h200.sm_count // 32 == 8
    assert _decode_splits(cfg, 4096, 128, 16, 2, h200) == 1     # many pairs: no split


def test_override_changes_the_table_inside_the_block_only():
    from cherenkov.attention import tuning
    h200 = hw.device("h200")
    before = choose_config("dq", 128, torch.bfloat16, device=h200)
    swept = tuning.KernelConfig(32, 32, 4, 2)
    with tuning.override(128, {"dq": swept}):
        inside = choose_config("dq", 128, torch.bfloat16, device=h200)
        assert (inside.block_m, inside.block_n) == (32, 32)
    assert choose_config("dq", 128, torch.bfloat16, device=h200) == before
