"""SDPA with an explicit attention mask, in compiled graphs, runs Cherenkov's kernels: a
boolean mask as a mask_mod reading it, an additive one as a score_mod adding it (pairs at
-inf masked, whole tiles skipped); broadcast dims are read at 0, never expanded. The CPU ops
through the Triton interpreter; the CUDA memory-efficient ops (what SDPA calls with a mask on
the GPU) traced with fake tensors and run here the same way. Against eager / the math."""
import pytest
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov.attention.sdpa_routing import mask_mods
from cherenkov.backend import COMPILED

B, H, Q, KV, D = 1, 2, 37, 45, 16


def _masks():
    torch.manual_seed(1)
    keep = torch.rand(Q, KV) > 0.3
    keep[:, 0] = True                                          # no row left empty
    bias = torch.randn(B, H, Q, KV)
    bias[..., 5:9] = float("-inf")
    return {"bool (Q, KV)": keep, "additive (B, H, Q, KV)": bias,
            "additive (1, 1, Q, KV) with -inf": torch.where(keep, 0.0, float("-inf"))[None, None]}


@pytest.mark.parametrize("name", list(_masks()))
def test_masked_sdpa_in_a_compiled_graph(name):
    mask = _masks()[name]

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.manual_seed(0)
    q = torch.randn(B, H, Q, D, requires_grad=True)
    k, v = (torch.randn(B, H, KV, D, requires_grad=True) for _ in range(2))
    start = len(COMPILED)
    out = cherenkov.compile(fn, strict=True, cpu_backend="triton")(q, k, v)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref = fn(q, k, v)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    for a, e in zip(grads, torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    infos = [info for _, info in COMPILED[start:]]
    assert len(infos) == 2 and all(i.library_calls.get("attention") == 1 and not i.externs
                                   for i in infos)


def test_broadcast_dims_are_read_at_zero():
    mask = torch.zeros(Q, KV).bool()
    score_mod, mask_mod, varies = mask_mods(mask, 4, 8, Q, KV)
    assert score_mod is None and varies == (1, 1)          # one block mask serves all (b, h)
    assert mask_mods(torch.zeros(4, 1, Q, KV), 4, 8, Q, KV)[2] == (4, 1)
    from cherenkov.attention.trace import trace_mods
    traced = trace_mods(None, mask_mod)
    assert [tuple(t.shape) for t in traced.captured] == [(1, 1, Q, KV)]


def test_a_mask_that_does_not_broadcast_is_refused():
    from cherenkov.attention.sdpa_routing import supported
    assert "attention mask of shape" in supported((B, H, Q, D), (B, H, KV, D), (B, H, KV, D),
                                                 0.0, torch.zeros(3, Q, KV))
    assert "dtype" in supported((B, H, Q, D), (B, H, KV, D), (B, H, KV, D), 0.0,
                                torch.zeros(Q, KV, dtype=torch.int32))


def test_calls_stay_with_pytorch_where_the_kernels_cannot_run(monkeypatch):
    """On CPU without a working interpreter (Triton 3.6 with numpy 2.4) SDPA calls are not
    routed (they failed at run time before), and a compiled model still matches eager."""
    from cherenkov.attention.sdpa_routing import supported
    from cherenkov.runtime import loader
    cpu = torch.device("cpu")
    shapes = ((B, H, Q, D), (B, H, KV, D), (B, H, KV, D), 0.0)
    assert supported(*shapes, dtype=torch.float32, device=cpu) is None
    monkeypatch.setattr(loader, "interpreter_fault", lambda: "interpreter cannot loop here")
    assert supported(*shapes, dtype=torch.float32, device=cpu) == "interpreter cannot loop here"

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2
    q, k, v = (torch.randn(B, H, Q, D) for _ in range(3))
    out = cherenkov.compile(fn, strict=True)(q, k, v)
    torch.testing.assert_close(out, fn(q, k, v))


def test_the_cuda_memory_efficient_ops_run_our_kernels():
    """aten._scaled_dot_product_efficient_attention (and its backward), traced with fake
    tensors as the GPU graph has them: lse padded to 32, the RNG placeholders, no dbias."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from cherenkov.compiler import compile_fx
    from cherenkov.config import Config
    bias = _masks()["additive (B, H, Q, KV)"]

    def fwd(q, k, v, bias):
        out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, bias, True)
        return out, lse

    def bwd(do, q, k, v, bias, out, lse):
        seed = offset = torch.empty((), dtype=torch.long)
        return torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            do, q, k, v, bias, out, lse, seed, offset, 0.0, [True, True, True, False])[:3]
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, Q, D), torch.randn(B, H, KV, D), torch.randn(B, H, KV, D)
    config = Config(strict=True, cpu_backend="triton")
    compiled, info = compile_fx(make_fx(fwd, tracing_mode="fake")(q, k, v, bias),
                                [q, k, v, bias], config)
    assert info.library_calls.get("attention") == 1 and not info.externs
    out, lse = compiled([q, k, v, bias])
    qr, kr, vr = (t.double().requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=bias.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-5)
    assert lse.shape == (B, H, 64)                              # Q rounded up to 32
    want_lse = torch.logsumexp(qr @ kr.transpose(-1, -2) / D ** 0.5 + bias.double(), -1)
    torch.testing.assert_close(lse[..., :Q].double(), want_lse, rtol=1e-4, atol=1e-4)

    do = torch.randn_like(out)
    args = [do, q, k, v, bias, out, lse]
    compiled, info = compile_fx(make_fx(bwd, tracing_mode="fake")(*args), args, config)
    assert info.library_calls.get("attention") == 1 and not info.externs
    got = compiled(list(args))
    want = torch.autograd.grad(ref, (qr, kr, vr), do.double())
    for a, e in zip(got, want):
        torch.testing.assert_close(a.double(), e, rtol=1e-4, atol=1e-4)


def test_masks_of_one_form_share_their_kernels():
    """A new mask every step (the same form: dtype and broadcast dims) is data for the same
    kernels, traced and rendered once; each call still reads its own mask."""
    from cherenkov.attention import sdpa_routing
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, Q, D), torch.randn(B, H, KV, D), torch.randn(B, H, KV, D)
    plans = []
    for seed in (1, 2):
        keep = torch.rand(Q, KV, generator=torch.Generator().manual_seed(seed)) > 0.5
        keep[:, 0] = True
        out, _ = sdpa_routing.forward(q, k, v, False, attn_mask=keep)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                                   rtol=1e-4, atol=1e-5)
        plans.append(sdpa_routing._masked_plan(q, k, keep, None)[0])
    assert plans[0].kernels is plans[1].kernels and plans[0].traced is plans[1].traced


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_sdpa_the_cpu_interpreter_cannot_run_keeps_pytorchs_op(dtype):
    """16-bit and fp64 dots are wrong in Triton's CPU interpreter: such calls stay PyTorch's."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, Q, D, dtype=dtype, requires_grad=True) for _ in range(3))
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch._dynamo.reset()
    out = cherenkov.compile(f, strict=True, cpu_backend="triton")(q, k, v)
    want = f(q, k, v)
    go = torch.randn_like(out)
    got_g = torch.autograd.grad(out, (q, k, v), go)
    want_g = torch.autograd.grad(want, (q, k, v), go)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-9
    torch.testing.assert_close(out, want, rtol=tol, atol=tol)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
