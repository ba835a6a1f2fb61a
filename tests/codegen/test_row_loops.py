"""Row-loop kernels (`row_loops=True`, the default; GPU presets, Triton only): a norm backward's
row kernel takes in the column partials of the weight gradients, so dy and x are read once.
Checked in the Triton interpreter on the H200 preset, against eager."""
import pytest
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov.backend import COMPILED


def rms_norm(x, r, w):
    h = x + r
    return (h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-5)) * w


def layer_norm(x, r, w, b):
    return F.layer_norm(x + r, (x.shape[-1],), w, b)


def _grads(fn, n_params, backend, row_loops, **options):
    torch.manual_seed(0)
    x, r = torch.randn(512, 64, requires_grad=True), torch.randn(512, 64, requires_grad=True)
    ps = [torch.randn(64, requires_grad=True) for _ in range(n_params)]
    start = len(COMPILED)
    f = cherenkov.compile(fn, strict=True, device="h200", cpu_backend=backend,
                          row_loops=row_loops, **options)
    out = f(x, r, *ps)
    dy = torch.randn_like(out)
    got = torch.autograd.grad(out, [x, r, *ps], dy)
    want = torch.autograd.grad(fn(x, r, *ps), [x, r, *ps], dy)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    backward = [info for _, info in COMPILED[start:] if info.name.startswith("backward")]
    assert len(backward) == 1
    return backward[0], x.numel() * 4


@pytest.mark.parametrize("fn,n_params", [(rms_norm, 1), (layer_norm, 2)])
def test_norm_backward_reads_its_rows_once(fn, n_params):
    info, full = _grads(fn, n_params, "triton", True)
    looped = [k for k in info.kernels if "for xi in range(0, 32, XBLOCK)" in k[3]]
    assert len(looped) == 1                         # dx and the weight-gradient partials
    # reads dy and one saved full tensor, writes dx (3 full tensors) plus small vectors
    assert sum(k[2] for k in info.kernels) < 3.3 * full
    plain, _ = _grads(fn, n_params, "triton", False)
    assert not any("for xi" in k[3] for k in plain.kernels)
    assert sum(k[2] for k in plain.kernels) > 4.5 * full     # dy and x read twice


@pytest.mark.parametrize("step,stages", [(2, 0), (4, 0), (1, 2)])
def test_several_rows_per_step(monkeypatch, step, stages):
    """XBLOCK rows per loop step: the column partials sum the step's rows before the lanes'
    running values; software-pipelined loops (tl.range); gradients as eager's."""
    import dataclasses
    from cherenkov.codegen import blocks
    chosen = blocks.row_loop_blocks
    monkeypatch.setattr(blocks, "row_loop_blocks", lambda k, interpret, device: dataclasses.replace(
        chosen(k, interpret, device), XBLOCK=step, stages=stages))
    info, _ = _grads(layer_norm, 2, "triton", True)
    loop = f"tl.range(0, 32, XBLOCK, num_stages={stages})" if stages else "range(0, 32, XBLOCK)"
    assert any(f"for xi in {loop}" in k[3] for k in info.kernels)


@pytest.mark.parametrize("rows", [8, 16])
def test_rows_per_program(rows):
    """row_loop_rows: each row-loop program covers that many rows (512 / rows column
    partials; at most as many as the usual column split's chunks), the gradients as eager's."""
    info, _ = _grads(layer_norm, 2, "triton", True, row_loop_rows=rows)
    assert [k for k in info.kernels if f"for xi in range(0, {rows}, XBLOCK)" in k[3]]
    assert not any("for xi in range(0, 32, XBLOCK)" in k[3] for k in info.kernels)


def test_bias_gradient_alone_keeps_the_usual_split():
    """No row reduction over the same elements: the column reduction is not cut into 32-row
    chunks for a row loop that would never take it in."""
    def bias_gelu(x, b):
        return F.gelu(x + b, approximate="tanh")
    x, b = torch.randn(512, 64, requires_grad=True), torch.randn(64, requires_grad=True)
    start = len(COMPILED)
    f = cherenkov.compile(bias_gelu, strict=True, device="h200", cpu_backend="triton",
                          row_loops=True)
    out = f(x, b)
    dy = torch.randn_like(out)
    got = torch.autograd.grad(out, [x, b], dy)
    want = torch.autograd.grad(bias_gelu(x, b), [x, b], dy)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    backward = [info for _, info in COMPILED[start:] if info.name.startswith("backward")][0]
    assert not any("for xi" in k[3] for k in backward.kernels)
    assert not any("range(0, 32)" in k[3] or "< 32\n" in k[3] for k in backward.kernels)


def test_cpp_backend_never_gets_row_loops():
    info, _ = _grads(rms_norm, 1, "cpp", True)
    assert not any("for xi" in k[3] for k in info.kernels)
