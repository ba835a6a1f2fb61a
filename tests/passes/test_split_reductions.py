"""Split reductions: column sums over many rows become partial sums plus a small sum, and
stay correct (run on CPU under the H200 preset, which is what triggers the split)."""
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.passes.split_reductions import choose_split


def test_split_factor_fills_the_device_and_keeps_chunks_long():
    assert choose_split(768, 16384, 132) == 128        # GPT-2 bias gradients: 128 chunks of 128 rows
    assert choose_split(2304, 16384, 132) == 32        # its qkv bias: 32 chunks of 512 rows
    assert choose_split(768, 16384, 132, column=False) == 1
    assert choose_split(1 << 20, 16384, 132) == 1      # plenty of outputs already
    assert choose_split(64, 300, 132) == 1             # too short to split
    assert 16384 % choose_split(96, 16384, 132) == 0


def test_column_sums_split_and_match_eager():
    x = torch.randn(1024, 24)
    start = len(COMPILED)
    fn = lambda x: (x.sum(0), x.amax(0), (x * 2).sum(0, keepdim=True))  # noqa: E731
    out = cherenkov.compile(fn, strict=True, device="h200")(x)
    for a, e in zip(out, fn(x)):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-4)
    kernels = [k for _, info in COMPILED[start:] for k in info.kernels]
    assert len(kernels) >= 2            # partial sums, then their sum


def test_layernorm_weight_gradient_with_split_reductions():
    x = torch.randn(1024, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    b = torch.randn(16, requires_grad=True)
    fn = lambda x, w, b: F.layer_norm(x, (16,), w, b)  # noqa: E731
    out = cherenkov.compile(fn, strict=True, device="h200")(x, w, b)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, w, b), g)
    want = torch.autograd.grad(fn(x, w, b), (x, w, b), g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_row_and_column_walks_of_one_buffer_never_share_a_kernel():
    from cherenkov.codegen import indexing as ix
    from cherenkov.codegen.kernel_ir import Buffer, Kernel, Load
    from cherenkov.passes.fusion import mixed_access
    x, r = ix.var("x", 64), ix.var("r", 64)
    k = Kernel("k", 64, 64, inputs=[Buffer("a", torch.float32, 4096)])
    k.body.append(Load("t0", "a", ix.add(ix.mul(x, 64), r)))          # along rows
    assert not mixed_access(k)
    k.body.append(Load("t1", "a", ix.add(ix.mul(r, 64), x)))          # down columns
    assert mixed_access(k)


def test_column_walks_of_pieces_smaller_than_the_domain_still_count():
    """A cat of three (rows, 64) pieces read down columns: each piece is a third of the
    domain, yet the kernel walks every one of them across rows."""
    from cherenkov.codegen import indexing as ix
    from cherenkov.codegen.blocks import is_column_reduction
    from cherenkov.codegen.kernel_ir import Buffer, Kernel, Load
    from cherenkov.passes.fusion import mixed_access
    x, r = ix.var("x", 192), ix.var("r", 256)
    k = Kernel("k", 192, 256, inputs=[Buffer(n, torch.float32, 256 * 64) for n in "abc"])
    for i, n in enumerate("abc"):
        k.body.append(Load(f"t{i}", n, ix.add(ix.mul(r, 64), ix.mod(x, 64))))
    assert is_column_reduction(k) and not mixed_access(k)
    k.body.append(Load("t3", "a", ix.add(ix.mul(ix.floordiv(x, 3), 256), r)))   # along rows
    assert mixed_access(k) and not is_column_reduction(k)


def test_cat_feeding_a_matmul_and_a_column_sum_matches_eager():
    q, k_, v = (torch.randn(512, 8) for _ in range(3))
    w = torch.randn(24, 5)
    fn = lambda q, k, v, w: (torch.cat([q, k, v], 1) @ w, torch.cat([q, k, v], 1).sum(0))  # noqa
    out = cherenkov.compile(fn, strict=True, device="h200")(q, k_, v, w)
    for a, e in zip(out, fn(q, k_, v, w)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_per_row_vectors_of_a_split_column_sum_do_not_count_as_row_walks():
    """Partial column sums over chunks of rows read a per-row statistic (mean, rstd) at
    chunk * rows_per_chunk + r: x and r both appear, yet it is no walk along rows."""
    from cherenkov.codegen import indexing as ix
    from cherenkov.codegen.blocks import is_column_reduction
    from cherenkov.codegen.kernel_ir import Buffer, Kernel, Load
    from cherenkov.passes.fusion import mixed_access
    cols, chunks, rows = 64, 8, 256
    x, r = ix.var("x", cols * chunks), ix.var("r", rows)
    row = ix.add(ix.mul(ix.floordiv(x, cols), rows), r)
    k = Kernel("k", cols * chunks, rows, inputs=[Buffer("g", torch.float32, chunks * rows * cols),
                                                 Buffer("mean", torch.float32, chunks * rows)])
    k.body.append(Load("t0", "g", ix.add(ix.mul(row, cols), ix.mod(x, cols))))
    k.body.append(Load("t1", "mean", row))
    assert is_column_reduction(k) and not mixed_access(k)
