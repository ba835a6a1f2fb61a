"""The lowering registry's declines: zero-element outputs, unless a lowering takes them."""
import pytest
import torch

from cherenkov.lowering.registry import Unsupported, _declining


class Ctx:
    def __init__(self, out):
        self.out = out


def test_an_empty_auxiliary_output_declines_unless_the_lowering_takes_it():
    """Flash attention's forward returns an empty debug mask beside its output: a lowering
    registered with empty_outputs=True sees the call (and handles the placeholder); any
    other declines, so the op runs as extern."""
    outs = (torch.empty(2, 3), torch.empty(0))
    seen = []

    def fn(ctx, x):
        seen.append(x)
        return "lowered"
    with pytest.raises(Unsupported, match="zero-element output"):
        _declining(fn, empty_inputs=False)(Ctx(outs), 1)
    assert _declining(fn, empty_inputs=False, empty_outputs=True)(Ctx(outs), 1) == "lowered"
    assert seen == [1]


def test_the_cuda_flash_forward_lowering_takes_its_empty_debug_mask():
    from cherenkov.lowering.registry import LOWERINGS
    lower = LOWERINGS[torch.ops.aten._scaled_dot_product_flash_attention.default]
    # past the empty-output check, it reaches the routing decision (off in this context)
    with pytest.raises(Unsupported, match="routing off"):
        lower(type("C", (), {"out": (torch.empty(1, 1, 4, 8), torch.empty(0)),
                             "route_attention": False})(), None, None, None)


def test_the_cuda_flash_forward_op_runs_our_kernel():
    """The CUDA flash forward op (traced with fake tensors: it has no CPU kernel) becomes one
    attention library call, no extern, with its nine outputs rebuilt (the philox seed and
    offset, "meta" in PyTorch's meta function, as fake tensors on the inputs' device)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from cherenkov.compiler import compile_fx
    from cherenkov.config import Config

    def fn(q, k, v):
        out, lse, _, _, _, _, seed, offset, _ = \
            torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)
        return out, lse, seed, offset
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 16) for _ in range(3))
    gm = make_fx(fn, tracing_mode="fake")(q, k, v)
    compiled, info = compile_fx(gm, [q, k, v], Config(strict=True, cpu_backend="triton"))
    assert info.library_calls.get("attention") == 1 and not info.externs
    out, lse, seed, offset = compiled([q, k, v])
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    assert lse.shape == (1, 2, 16) and seed.shape == (2,) and offset.shape == ()
