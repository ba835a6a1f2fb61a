"""dQ added up by the dK/dV kernel (launch.DQ_ACCUMULATE, kernels_src ACC_DQ) instead of its own
kernel: the same gradients as the dQ kernel's in Triton's interpreter (pointer atomics; the
TMA reduce-add form compiles in sm90_compile.py) -- masks, score mods, GQA, ragged lengths, an
lse gradient -- and captured-tensor gradients keep the dQ kernel."""
import pytest
import torch

from cherenkov.attention import (alibi, alibi_slopes, attention, causal, document, launch,
                                 relative_bias, sliding_window, tanh_softcap)


def _grads(monkeypatch, mode, q, k, v, lse_grad=False, **kw):
    monkeypatch.setattr(launch, "DQ_ACCUMULATE", mode)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out, lse = attention(q, k, v, return_lse=True, **kw)
    loss = (out * torch.linspace(-1, 1, out.shape[-1])).sum()
    if lse_grad:
        loss = loss + (lse * 0.3).sum()
    return torch.autograd.grad(loss, (q, k, v))


@pytest.mark.parametrize("case", ["causal", "softcap", "alibi_gqa", "documents", "window_ragged"])
def test_accumulated_dq_matches_the_dq_kernel(case, monkeypatch):
    torch.manual_seed(0)
    H, HK, Q, KV, D = 2, 2, 64, 64, 16
    kw = dict(mask_mod=causal)
    if case == "softcap":
        kw["score_mod"] = tanh_softcap(2.0)
    elif case == "alibi_gqa":
        H, HK = 4, 2
        kw.update(score_mod=alibi(alibi_slopes(4)), enable_gqa=True)
    elif case == "documents":
        kw["mask_mod"] = document(offsets=torch.tensor([0, 20, 45, 64]), causal=True)
    else:
        Q, KV, D = 37, 53, 24
        kw["mask_mod"] = sliding_window(16)
    q = torch.randn(1, H, Q, D)
    k, v = torch.randn(1, HK, KV, D), torch.randn(1, HK, KV, D)
    lse_grad = case == "causal"
    ref = _grads(monkeypatch, "off", q, k, v, lse_grad, **kw)
    got = _grads(monkeypatch, "atomic", q, k, v, lse_grad, **kw)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, atol=2e-5, rtol=1e-4)


def test_captured_tensor_gradients_keep_the_dq_kernel(monkeypatch):
    table = torch.randn(2 * 32 - 1, requires_grad=True)
    seen = []
    real = launch._dq_kernel

    def spy(*args, **kwargs):
        seen.append("dq kernel")
        return real(*args, **kwargs)
    monkeypatch.setattr(launch, "_dq_kernel", spy)
    monkeypatch.setattr(launch, "DQ_ACCUMULATE", "atomic")
    q, k, v = (torch.randn(1, 2, 32, 16, requires_grad=True) for _ in range(3))
    out = attention(q, k, v, score_mod=relative_bias(table), mask_mod=causal)
    out.sum().backward()
    assert seen == ["dq kernel"] and table.grad is not None


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setattr(launch, "DQ_ACCUMULATE", "fast")
    q, k, v = (torch.randn(1, 1, 16, 16, requires_grad=True) for _ in range(3))
    with pytest.raises(ValueError, match="DQ_ACCUMULATE"):
        attention(q, k, v, mask_mod=causal).sum().backward()
