"""Fused chunked LM head + cross-entropy vs F.cross_entropy(x @ W.T + b) at fp64."""
import pytest
import torch
import torch.nn.functional as F

from cherenkov import hw
from cherenkov.templates import (choose_chunk_size, linear_ce_estimate, linear_cross_entropy,
                                 should_fuse_linear_ce)

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

T, H, V = 23, 13, 41


def _inputs(tokens=T, ignore=(3, 10), ignore_index=-100, bias=True, shape=None):
    x = torch.randn(*(shape or (tokens,)), H, requires_grad=True)
    w = (torch.randn(V, H) * 0.5).requires_grad_()
    b = torch.randn(V, requires_grad=True) if bias else None
    t = torch.randint(0, V, shape or (tokens,))
    flat = t.view(-1)
    for i in ignore:
        flat[i] = ignore_index
    return x, w, b, t


def _reference(x, w, b, t, **kw):
    logits = x.double() @ w.double().T + (b.double() if b is not None else 0)
    return F.cross_entropy(logits.reshape(-1, V), t.reshape(-1), **kw)


def _check(x, w, b, t, scale=1.7, **kw):
    params = [p for p in (x, w, b) if p is not None]
    loss = linear_cross_entropy(x, w, t, b, **kw)
    grads = torch.autograd.grad(loss * scale, params)
    kw.pop("chunk_size", None)
    ref = _reference(x, w, b, t, **kw)
    ref_grads = torch.autograd.grad(ref * scale, params)
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, ref_grads):
        assert g.shape == r.shape and g.dtype == torch.float32
        torch.testing.assert_close(g.double(), r.double(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("chunk_size", [7, None, 64])
def test_loss_and_grads_match_eager(reduction, chunk_size):
    _check(*_inputs(), reduction=reduction, chunk_size=chunk_size)


def test_without_bias_with_3d_input_and_custom_ignore_index():
    x, w, b, t = _inputs(bias=False, shape=(2, 9), ignore=(0, 17), ignore_index=5)
    _check(x, w, b, t, ignore_index=5, chunk_size=4)


def test_only_x_needs_grad_and_no_grad_forward():
    x, w, b, t = _inputs()
    w.requires_grad_(False)
    b.requires_grad_(False)
    loss = linear_cross_entropy(x, w, t, b, chunk_size=5)
    (gx,) = torch.autograd.grad(loss, [x])
    ref = _reference(x, w, b, t)
    torch.testing.assert_close(gx.double(), torch.autograd.grad(ref, [x])[0].double(),
                               rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(x, w, t, b, chunk_size=6).double(),
                                   ref.detach(), rtol=1e-5, atol=1e-5)


def test_bf16_inputs_accumulate_grads_in_fp32():
    x, w, b, t = (v.detach().bfloat16().requires_grad_() if v.is_floating_point() else v
                  for v in _inputs())
    loss = linear_cross_entropy(x, w, t, b, chunk_size=8)
    gx, gw, gb = torch.autograd.grad(loss, [x, w, b])
    assert loss.dtype == gx.dtype == gw.dtype == torch.bfloat16
    ref = _reference(x, w, b, t)
    rx, rw, rb = torch.autograd.grad(ref, [x, w, b])
    torch.testing.assert_close(loss.double(), ref, rtol=2e-2, atol=2e-2)
    for g, r in ((gx, rx), (gw, rw), (gb, rb)):
        torch.testing.assert_close(g.double(), r.double(), rtol=3e-2, atol=3e-3)


def test_bad_arguments_raise():
    x, w, b, t = _inputs()
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(x, w, t, b, reduction="none")
    with pytest.raises(ValueError, match="do not match"):
        linear_cross_entropy(x, w, t[:-1], b)


def test_a_target_out_of_range_gives_nan_not_a_number_from_past_the_row():
    x, w, b, t = _inputs()
    x.requires_grad_(True)
    t = t.clone()
    t[3] = w.shape[0] + 5                     # past the vocabulary
    loss = linear_cross_entropy(x, w, t, b)
    assert torch.isnan(loss)
    (gx,) = torch.autograd.grad(loss, [x])
    assert torch.isnan(gx).any()
    t[3] = -100                                # ignored: fine again
    assert torch.isfinite(linear_cross_entropy(x, w, t, b))


def test_fuse_decision_large_vs_tiny():
    h200 = hw.device("h200")
    assert should_fuse_linear_ce(16384, 50304, 768, torch.bfloat16, h200)
    assert should_fuse_linear_ce(8192, 32000, 2048, torch.bfloat16, h200)
    assert not should_fuse_linear_ce(8, 16, 4, torch.bfloat16, h200)
    big = linear_ce_estimate(16384, 50304, 768, torch.bfloat16, h200)
    assert big["fused_logits_bytes"] < big["eager_logits_bytes"] / 4


def test_chunk_size_respects_memory_budget_and_compute_floor():
    h200 = hw.device("h200")
    c = choose_chunk_size(16384, 50304, 768, torch.bfloat16, h200, budget_bytes=2**30)
    assert c * 50304 * 2 <= 2**30 * 1.05 and 16384 / c <= 8
    floor = choose_chunk_size(16384, 50304, 768, torch.bfloat16, h200, budget_bytes=2**20)
    assert floor >= 512          # memory alone would allow 10 rows; the grad_W update needs more
    assert choose_chunk_size(10, 50304, 768, torch.bfloat16, h200) == 10
