"""attention() through the Triton interpreter vs the fp64 math reference: outputs and gradients."""
import logging
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from cherenkov.attention import (alibi, alibi_slopes, attention, attention_math, block_mask,
                                 causal, document, prefix_lm, relative_bias, sliding_window,
                                 tanh_softcap)
from cherenkov.attention import launch, launch_decode
from cherenkov.attention.codegen import kernel_source
from cherenkov.attention.trace import trace_mods

BLOCK = (16, 16)


def make_qkv(B, H, HK, Q, KV, D, dtype=torch.float32, grad=True):
    mk = lambda *s: torch.randn(*s, dtype=dtype).requires_grad_(grad)
    return mk(B, H, Q, D), mk(B, HK, KV, D), mk(B, HK, KV, D)


def check(q, k, v, factory=None, mask_mod=None, captured=(), tol=1e-4, grads=True, block=BLOCK):
    """`factory(*captured)` builds the score_mod, so the reference can use fp64 copies."""
    B, H, Q, _ = q.shape
    gqa = H != k.shape[1]
    bm = block_mask(mask_mod, B, H, Q, k.shape[2], block=block) if mask_mod else None
    score_mod = factory(*captured) if factory else None
    out, lse = attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, block_mask=bm,
                         enable_gqa=gqa, return_lse=True)
    ins = [t.detach().double().requires_grad_(t.requires_grad) for t in (q, k, v)]
    caps = [c.detach().double().requires_grad_(c.requires_grad) for c in captured]
    ref, ref_lse = attention_math(*ins, factory(*caps) if factory else None, mask_mod,
                                  enable_gqa=gqa, return_lse=True)
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse.double()[finite], ref_lse[finite], rtol=tol, atol=tol)
    if not grads:
        return out
    go = torch.randn_like(ref)
    ours = torch.autograd.grad(out, (q, k, v, *captured), go.to(out.dtype))
    theirs = torch.autograd.grad(ref, (*ins, *caps), go)
    for name, a, b in zip(["dq", "dk", "dv"] + [f"captured{i}" for i in range(len(caps))],
                          ours, theirs):
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol * scale, msg=name)
    return out


DOC_IDS = torch.tensor([0] * 20 + [1] * 50 + [2] * 31)
MASK_MODS = {
    "causal": causal,
    "sliding_window": sliding_window(12),
    "prefix_lm": prefix_lm(20),
    "document": document(DOC_IDS[:37].clone(), causal=False),
    "user_strided": lambda b, h, q, kv: ((q - kv) % 3 != 0) | (q == kv),
}


@pytest.mark.parametrize("name", sorted(MASK_MODS))
def test_mask_mods(name):
    check(*make_qkv(1, 2, 2, 37, 37 if name == "document" else 101, 16), mask_mod=MASK_MODS[name])


def test_alibi_with_slope_gradients():
    slopes = alibi_slopes(4).requires_grad_()
    check(*make_qkv(1, 4, 4, 37, 101, 16), alibi, causal, captured=(slopes,))


def test_tanh_softcap():
    check(*make_qkv(2, 2, 2, 37, 101, 16), lambda: tanh_softcap(1.5))


def test_relative_bias_with_table_gradients():
    table = torch.randn(2, 2 * 101 - 1).requires_grad_()
    check(*make_qkv(1, 2, 2, 37, 101, 16), relative_bias, captured=(table,))


def test_user_score_mod_reading_captured_tensors():
    """Per-head gain, per-key bias (even keys only) and per-query bias, all learned."""
    gain = (1.0 + 0.3 * torch.randn(2)).requires_grad_()
    key_bias = torch.randn(101).requires_grad_()
    query_bias = torch.randn(37).requires_grad_()

    def factory(gain, key_bias, query_bias):
        def user_mod(score, b, h, q_idx, kv_idx):
            even = torch.where(kv_idx % 2 == 0, key_bias[kv_idx], 0.0)
            return score * gain[h] + even - query_bias[q_idx] * 0.5
        return user_mod
    check(*make_qkv(2, 2, 2, 37, 101, 16), factory, sliding_window(30),
          captured=(gain, key_bias, query_bias))


def test_user_score_mod_without_captures():
    check(*make_qkv(1, 2, 2, 37, 101, 16),
          lambda: lambda s, b, h, q, kv: torch.where(kv > q, s * 0.5, torch.sigmoid(s) * 2.0))


@pytest.mark.parametrize("D", [80, 96])
def test_padded_head_dims_gqa_and_odd_lengths(D):
    check(*make_qkv(2, 4, 2, 37, 101, D), mask_mod=causal)


def test_transposed_inputs_sequence_major_layout():
    """q, k, v viewed from (B, S, H, D) storage, as attention layers usually hold them."""
    mk = lambda S: torch.randn(1, S, 2, 32).transpose(1, 2).requires_grad_()
    q, k, v = mk(37), mk(45), mk(45)
    assert not q.is_contiguous()
    check(q, k, v, mask_mod=causal)


def test_gqa_needs_enable_gqa():
    q, k, v = make_qkv(1, 4, 2, 8, 8, 16, grad=False)
    with pytest.raises(ValueError, match="enable_gqa"):
        attention(q, k, v)


def test_mqa_with_alibi():
    slopes = alibi_slopes(4)
    check(*make_qkv(1, 4, 1, 33, 47, 32), lambda: alibi(slopes), causal)


def test_fully_masked_rows_give_zero_output_and_no_nan():
    q, k, v = make_qkv(1, 2, 2, 37, 101, 16)
    mask = lambda b, h, q_idx, kv_idx: (q_idx >= 10) & (kv_idx <= q_idx)
    out = check(q, k, v, mask_mod=mask)
    assert torch.equal(out[:, :, :10], torch.zeros_like(out[:, :, :10]))
    _, lse = attention(q, k, v, mask_mod=mask, return_lse=True)
    assert bool((lse[:, :, :10] == -math.inf).all()) and bool(torch.isfinite(lse[:, :, 10:]).all())
    dq, = torch.autograd.grad(attention(q, k, v, mask_mod=mask).sum(), q)
    assert not dq.isnan().any() and torch.equal(dq[:, :, :10], torch.zeros_like(dq[:, :, :10]))


def test_fp16():
    q, k, v = make_qkv(1, 2, 2, 37, 101, 64, dtype=torch.float16)
    out = check(q, k, v, lambda: tanh_softcap(20.0), causal, tol=5e-3)
    assert out.dtype == torch.float16


@pytest.mark.parametrize("scale", [0.3, -0.7, 0.0])
def test_no_mask_default_block_mask_and_scale(scale):
    # zero and negative scales too (a row max of raw scores would be wrong for them)
    q, k, v = make_qkv(1, 1, 1, 40, 70, 16, grad=False)
    out = attention(q, k, v, scale=scale)
    torch.testing.assert_close(out.double(), attention_math(q.double(), k.double(), v.double(),
                                                            scale=scale), rtol=1e-4, atol=1e-4)
    out = attention(q, k, v, scale=scale, mask_mod=causal)
    torch.testing.assert_close(out.double(), attention_math(q.double(), k.double(), v.double(),
                                                            mask_mod=causal, scale=scale),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("Q, groups, splits", [(1, 8, 2), (5, 2, 3), (16, 1, 7)])
def test_decode_kernel(Q, groups, splits):
    B, HK, KV, D = 2, 2, 300, 64
    q, k, v = make_qkv(B, HK * groups, HK, Q, KV, D, grad=False)
    mask = lambda b, h, q_idx, kv_idx: kv_idx <= q_idx + 250 + 10 * h      # varies with h
    bm = block_mask(mask, B, HK * groups, Q, KV, block=(16, 32))
    traced = trace_mods(None, mask)
    from cherenkov.attention.codegen import load_kernels
    plan = launch.Plan(load_kernels(traced, interpret=True), traced, bm, D ** -0.5, True)
    out, lse = launch_decode.decode(plan, q, k, v, [], num_splits=splits)
    ref, ref_lse = attention_math(q.double(), k.double(), v.double(), mask_mod=mask,
                                  enable_gqa=True, return_lse=True)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(launch.natural_lse(lse).double(), ref_lse, rtol=1e-4, atol=1e-4)


def test_decode_through_api_with_score_mod():
    slopes = alibi_slopes(8)
    q, k, v = make_qkv(1, 8, 2, 1, 257, 32, grad=False)
    check(q, k, v, lambda: alibi(slopes), grads=False)


def test_untraceable_mod_falls_back_to_math(caplog):
    q, k, v = make_qkv(1, 1, 1, 8, 8, 16, grad=False)
    weird = lambda s, b, h, q_idx, kv_idx: torch.erf(s)
    with caplog.at_level(logging.WARNING, logger="cherenkov.attention"):
        out = attention(q, k, v, score_mod=weird)
    torch.testing.assert_close(out, attention_math(q, k, v, score_mod=weird))
    assert "math implementation" in caplog.text


def test_generated_source_contains_rendered_mods():
    traced = trace_mods(tanh_softcap(30.0), sliding_window(8))
    text = kernel_source(traced, "interpret")
    assert "def _score_mod(score, sm_scale, b, h, q_idx, kv_idx, ):" in text
    assert "tl.exp2(_t1 * 2.88539" in text and "< 8)" in text
    # on NVIDIA GPUs tanh is the one-instruction hardware approximation
    gpu = kernel_source(traced, "cuda")
    assert "tanh.approx.f32" in gpu and "tl.exp2(_t1 * 2.88539" not in gpu
    assert "tanh.approx.f32" not in kernel_source(traced, "hip")


@pytest.mark.parametrize("Q, KV, block", [(96, 96, (128, 64)), (64, 96, (64, 64)),
                                          (70, 33, (64, 32))])
def test_kernel_tiles_smaller_than_mask_tiles(Q, KV, block):
    """The interpreter's 32 x 32 kernel tiles walk each mask tile in several steps, and
    lengths that are multiples of the kernel tile but not of the mask tile need tail masks."""
    check(*make_qkv(1, 2, 2, Q, KV, 32), mask_mod=causal, block=block)


@settings(max_examples=12, deadline=None)
@given(B=st.integers(1, 2), HK=st.integers(1, 2), groups=st.integers(1, 2),
       Q=st.integers(1, 70), KV=st.integers(1, 70), D=st.sampled_from([16, 24, 40]),
       mask=st.sampled_from(["none", "causal", "window"]),
       block=st.sampled_from([(16, 16), (32, 64), (64, 32)]), seed=st.integers(0, 2 ** 16))
def test_random_shapes(B, HK, groups, Q, KV, D, mask, block, seed):
    torch.manual_seed(seed)
    mask_mod = {"none": None, "causal": causal, "window": sliding_window(7)}[mask]
    check(*make_qkv(B, HK * groups, HK, Q, KV, D), mask_mod=mask_mod, block=block)


def test_attention_inside_a_compiled_function():
    """cherenkov.attention and block_mask called in compiled code run as themselves between
    the compiled graphs (Dynamo used to trace into the Triton interpreter and fail); values
    and gradients as eager's."""
    import cherenkov
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        bm = block_mask(causal, 1, 1, 40, 40, block=(16, 16))
        return (attention(q * 2, k, v, block_mask=bm) * 3).sum()
    torch._dynamo.reset()
    out = cherenkov.compile(f, strict=True)(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v))
    ref = (attention_math(q * 2, k, v, None, causal) * 3).sum()
    want = torch.autograd.grad(ref, (q, k, v))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-4)
    for a, b in zip(grads, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_unmasked_decode_over_a_growing_cache_builds_no_block_mask(monkeypatch):
    """A decode loop (a token appended to a KV cache per call, no mask): every length runs the
    decode kernels over all KV blocks, matching the math reference, and no block mask is
    built per length."""
    from cherenkov.attention import api
    monkeypatch.setattr(api, "_full_mask", lambda *a: pytest.fail("built a full block mask"))
    monkeypatch.setattr(api, "build_block_mask", lambda *a: pytest.fail("built a block mask"))
    torch.manual_seed(0)
    B, HK, G, D, MAX = 1, 2, 2, 32, 600
    k_cache, v_cache = torch.randn(B, HK, MAX, D), torch.randn(B, HK, MAX, D)
    slopes = alibi_slopes(HK * G)
    # within one 64-token block count and across; a shorter cache after a longer one reads a
    # prefix of the grown block lists
    for L, mod in ((256, None), (257, None), (300, alibi(slopes)), (600, None), (270, None)):
        q = torch.randn(B, HK * G, 1, D)
        k, v = k_cache[:, :, :L], v_cache[:, :, :L]
        out, lse = attention(q, k, v, score_mod=mod, enable_gqa=True, return_lse=True)
        ref, ref_lse = attention_math(q.double(), k.double(), v.double(), score_mod=mod,
                                      enable_gqa=True, return_lse=True)
        torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-4, atol=1e-4)


def test_an_interpreter_that_cannot_run_the_kernels_falls_back_to_math(monkeypatch, caplog):
    """Triton 3.6's interpreter with numpy 2.4 cannot loop over a loaded bound: kernel_mode
    says so (probed once) and the API answers with the math implementation, logged."""
    from cherenkov.attention import codegen
    from cherenkov.runtime import loader
    monkeypatch.setattr(loader, "interpreter_fault", lambda: "interpreter cannot loop here")
    assert codegen.kernel_mode(torch.device("cpu")) == (None, "interpreter cannot loop here")
    q, k, v = make_qkv(1, 2, 2, 24, 24, 16, grad=False)
    with caplog.at_level(logging.WARNING, logger="cherenkov.attention"):
        out = attention(q, k, v, mask_mod=causal)
    torch.testing.assert_close(out, attention_math(q, k, v, mask_mod=causal))
    assert "interpreter cannot loop here" in caplog.text


@pytest.mark.skipif(tuple(int(x) for x in __import__("triton").__version__.split(".")[:2])
                    < (3, 9), reason="the probe fails on Triton 3.6 with numpy 2.4 (as it should)")
def test_the_interpreter_probe_passes_on_the_ci_stack():
    from cherenkov.runtime.loader import interpreter_fault
    assert interpreter_fault() is None


def test_package_level_entry_points_match_the_issue_api():
    """`cherenkov.attention(q, k, v, ...)` and `cherenkov.block_mask(...)`, as documented, call
    the DSL's functions (the package `cherenkov.attention` is callable)."""
    import cherenkov
    from cherenkov.attention import attention_math, causal
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 37, 16, dtype=torch.float64) for _ in range(3))
    mask = cherenkov.block_mask(causal, 1, 2, 37, 37, device="cpu")
    assert isinstance(mask, cherenkov.attention.BlockMask)
    out = cherenkov.attention(q, k, v, block_mask=mask)
    ref = attention_math(q, k, v, mask_mod=causal)
    torch.testing.assert_close(out, ref)
