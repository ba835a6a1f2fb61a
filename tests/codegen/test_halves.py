"""Halves kernels (passes/fusion.halves_of, builder `halves`): a pointwise kernel computing a
concatenation of two row halves (rotate-half in RoPE) gives each lane the elements j and
j + D/2 of a row, so each half is read without a select or mask and x1, x2 are loaded once.
Checked on both CPU backends against eager, forward and backward."""
import pytest
import torch

import cherenkov
from cherenkov.backend import COMPILED


def rope(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _tables(T, D):
    angle = torch.arange(T)[:, None] * torch.rand(D // 2)[None, :]
    angle = torch.cat((angle, angle), -1)
    return angle.cos()[:, None, :], angle.sin()[:, None, :]      # (T, 1, D)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_rope_forward_and_backward(backend):
    torch.manual_seed(0)
    B, T, H, D = 2, 8, 2, 16
    x = torch.randn(B, T, H, D, requires_grad=True)
    cos, sin = _tables(T, D)
    start = len(COMPILED)
    f = cherenkov.compile(rope, strict=True, device="h200", cpu_backend=backend)
    out = f(x, cos, sin)
    dy = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, [x], dy)
    torch.testing.assert_close(out, rope(x, cos, sin), rtol=1e-5, atol=1e-5)
    (want,) = torch.autograd.grad(rope(x, cos, sin), [x], dy)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if backend != "triton":
        return
    infos = [info for _, info in COMPILED[start:]]
    for info in infos:                      # forward and backward: one kernel each
        (name, _, _, source), = info.kernels
        assert f"xindex < {B * T * H * D // 2}" in source            # X/2 lanes
        body = source.split("def k_")[-1]                            # the kernel, not the prelude
        assert "tl.where" not in body                                # no select per element
        assert source.count("tl.store(") == 2                        # both halves
    fwd = infos[0].kernels[0][3]
    x_buffer = fwd.split("def ")[-1].split("(")[1].split(",")[0]     # first argument
    assert fwd.count(f"tl.load({x_buffer} ") == 2                    # x1 and x2, once each


def test_groups_without_halves_keep_one_element_per_lane():
    torch.manual_seed(0)
    x = torch.randn(4, 16)
    start = len(COMPILED)
    out = cherenkov.compile(lambda x: torch.cat((x[:, :4], x[:, 4:]), -1) * 2, strict=True,
                            device="h200", cpu_backend="triton")(x)   # unequal pieces
    torch.testing.assert_close(out, x * 2)
    (_, info), = COMPILED[start:]
    assert "xindex < 64" in info.kernels[0][3]


def test_halves_kernels_take_a_quarter_of_a_pointwise_tile_on_a_gpu():
    """Each lane of a halves kernel loads and stores two elements: on a GPU preset its tile
    has a quarter of a plain pointwise kernel's lanes."""
    from cherenkov import hw
    from cherenkov.codegen.blocks import choose_blocks
    from cherenkov.codegen.kernel_ir import Kernel
    spec = hw.device("h200")
    plain = choose_blocks(Kernel("k", 1 << 26, 1), False, device=spec)
    halves = choose_blocks(Kernel("k", 1 << 26, 1, halves=128), False, device=spec)
    assert halves.XBLOCK * 4 == plain.XBLOCK and halves.num_warps >= 1
    assert halves.XBLOCK >= spec.warp_size
