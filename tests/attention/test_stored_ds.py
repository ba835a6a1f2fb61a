"""dQ from the dS tiles the dK/dV kernel stores (launch_bwd.DS_STORE / DS_BUDGET, kernels_src
DS_STORE and _attn_bwd_dq_ds) instead of a dQ kernel recomputing S and dP: the same gradients
as the dQ kernel's in Triton's interpreter -- masks, score mods, GQA, ragged lengths, an lse
gradient, heads in several chunks -- "auto" taking it for score mods only, and captured-tensor
gradients keeping the dQ kernel."""
import pytest
import torch

from cherenkov.attention import (alibi, alibi_slopes, attention, causal, document, launch_bwd,
                                 relative_bias, sliding_window, tanh_softcap)


def _grads(monkeypatch, budget, q, k, v, lse_grad=False, **kw):
    monkeypatch.setattr(launch_bwd, "DS_STORE", "on" if budget else "off")
    monkeypatch.setattr(launch_bwd, "DS_BUDGET", budget)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out, lse = attention(q, k, v, return_lse=True, **kw)
    loss = (out * torch.linspace(-1, 1, out.shape[-1])).sum()
    if lse_grad:
        loss = loss + (lse * 0.3).sum()
    return torch.autograd.grad(loss, (q, k, v))


def _spy(monkeypatch, name):
    calls = []
    real = getattr(launch_bwd, name)

    def spy(*args, **kwargs):
        calls.append(args[-2:] if name == "_dq_ds_kernel" else name)
        return real(*args, **kwargs)
    monkeypatch.setattr(launch_bwd, name, spy)
    return calls


@pytest.mark.parametrize("case", ["causal", "softcap", "alibi_gqa", "documents", "window_ragged",
                                  "chunks"])
def test_stored_ds_matches_the_dq_kernel(case, monkeypatch):
    torch.manual_seed(0)
    B, H, HK, Q, KV, D = 1, 2, 2, 64, 64, 16
    kw = dict(mask_mod=causal)
    if case == "softcap":
        kw["score_mod"] = tanh_softcap(2.0)
    elif case == "alibi_gqa":
        H, HK = 4, 2
        kw.update(score_mod=alibi(alibi_slopes(4)), enable_gqa=True)
    elif case == "documents":
        kw["mask_mod"] = document(offsets=torch.tensor([0, 20, 45, 64]), causal=True)
    elif case == "window_ragged":
        Q, KV, D = 37, 101, 24
        kw["mask_mod"] = sliding_window(16)
    else:                             # 2 x 2 kv heads of 2 query heads, 1 kv head per chunk
        B, H, HK, Q, KV = 2, 4, 2, 40, 70
        kw["enable_gqa"] = True
    q = torch.randn(B, H, Q, D)
    k, v = torch.randn(B, HK, KV, D), torch.randn(B, HK, KV, D)
    lse_grad = case in ("causal", "chunks")
    ref = _grads(monkeypatch, 0, q, k, v, lse_grad, **kw)
    chunks = _spy(monkeypatch, "_dq_ds_kernel")
    # the dense dS of one kv head's query heads: (H / HK) x 1 x 2 tiles of 64 x 64, 4 bytes
    budget = (H // HK) * 2 * 64 * 64 * 4 if case == "chunks" else 64 << 20
    got = _grads(monkeypatch, budget, q, k, v, lse_grad, **kw)
    assert chunks == ([(h, 1) for h in range(B * HK)] if case == "chunks" else [(0, B * HK)])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("score_mod, stored", [(None, False), (tanh_softcap(5.0), True)])
def test_auto_stores_ds_for_score_mods(score_mod, stored, monkeypatch):
    dq_kernel = _spy(monkeypatch, "_dq_kernel")
    q, k, v = (torch.randn(1, 2, 64, 16, requires_grad=True) for _ in range(3))
    attention(q, k, v, score_mod=score_mod, mask_mod=causal).sum().backward()
    assert launch_bwd.DS_STORE == "auto" and dq_kernel == ([] if stored else ["_dq_kernel"])


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setattr(launch_bwd, "DS_STORE", "fast")
    q, k, v = (torch.randn(1, 1, 16, 16, requires_grad=True) for _ in range(3))
    with pytest.raises(ValueError, match="DS_STORE"):
        attention(q, k, v, mask_mod=causal).sum().backward()


def test_a_head_too_large_for_the_budget_takes_the_dq_kernel(monkeypatch):
    dq_kernel = _spy(monkeypatch, "_dq_kernel")
    monkeypatch.setattr(launch_bwd, "DS_STORE", "on")
    monkeypatch.setattr(launch_bwd, "DS_BUDGET", 64 * 64 * 4 - 1)      # less than one tile
    q, k, v = (torch.randn(1, 1, 64, 16, requires_grad=True) for _ in range(3))
    attention(q, k, v, mask_mod=causal).sum().backward()
    assert dq_kernel == ["_dq_kernel"] and torch.isfinite(q.grad).all()


def test_captured_tensor_gradients_keep_the_dq_kernel(monkeypatch):
    table = torch.randn(2 * 32 - 1, requires_grad=True)
    dq_kernel = _spy(monkeypatch, "_dq_kernel")
    monkeypatch.setattr(launch_bwd, "DS_STORE", "on")
    q, k, v = (torch.randn(1, 2, 32, 16, requires_grad=True) for _ in range(3))
    out = attention(q, k, v, score_mod=relative_bias(table), mask_mod=causal)
    out.sum().backward()
    assert dq_kernel == ["_dq_kernel"] and table.grad is not None


def test_auto_leaves_a_per_head_derivative_to_the_gluon_dq(monkeypatch):
    """Where the Gluon dQ takes a call (never on the CPU: asked of _ds_chunk directly), "auto"
    stores dS only for score mods whose derivative varies per score (softcap), not for ALiBi's
    one number per (b, h); "on" stores it either way."""
    from cherenkov.attention import block_mask
    from cherenkov.attention.codegen import compile_mods
    from cherenkov.attention.launch import Plan
    q = k = torch.randn(1, 2, 64, 16)
    m = block_mask(causal, 1, 2, 64, 64, block=(32, 32))

    def chunk(mod, gluon_dq):
        traced, kernels = compile_mods(mod, causal, interpret=True)
        return launch_bwd._ds_chunk(Plan(kernels, traced, m, 0.25, True), q, k, (), gluon_dq)
    slopes, softcap = alibi(alibi_slopes(2)), tanh_softcap(5.0)
    assert chunk(slopes, False) == 2 and chunk(softcap, False) == 2
    assert chunk(slopes, True) == 0 and chunk(softcap, True) == 2
    monkeypatch.setattr(launch_bwd, "DS_STORE", "on")
    assert chunk(slopes, True) == 2
