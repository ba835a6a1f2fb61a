"""cherenkov/codegen/blocks.py: block choice from the hardware model (belongs in
tests/codegen/test_blocks.py; kept here because tests/bench is this work's test folder)."""
import pytest
import torch

from cherenkov import hw
from cherenkov.codegen.blocks import (choose_blocks, element_bytes, gpu_blocks,
                                      interpreter_blocks, persistent_capacity,
                                      row_elements_per_thread)
from cherenkov.codegen.kernel_ir import Buffer, Kernel

H200 = hw.device("h200")


def _kernel(X, R, dtype=torch.bfloat16):
    return Kernel("k", X, R, inputs=[Buffer("a", dtype, X * R), Buffer("w", dtype, R)],
                  outputs=[Buffer("o", dtype, X * R)])


def test_register_budget_from_the_h200_preset():
    # 65536 registers / (2048 threads / 2) = 64 per thread; / 3 live values -> 16 elements
    assert row_elements_per_thread(H200) == 16
    assert persistent_capacity(H200) == 32 * 32 * 16     # 32 warps x 32 lanes x 16


def test_layernorm_row_4096_bf16_is_persistent_with_16_byte_vectors():
    cfg = choose_blocks(_kernel(32768, 4096), interpret=False, device=H200)
    assert cfg.persistent and cfg.RBLOCK == 4096 and cfg.XBLOCK == 1
    threads = cfg.num_warps * 32
    assert cfg.RBLOCK // threads == 16                   # two 16-byte vectors of bf16 each
    assert -(-32768 // cfg.XBLOCK) >= 2 * H200.sm_count


@pytest.mark.parametrize("vocab", [50304, 128256])
def test_vocab_rows_loop_with_vectorized_chunks(vocab):
    cfg = choose_blocks(_kernel(16384, vocab), interpret=False, device=H200)
    assert not cfg.persistent and cfg.XBLOCK == 1
    per_thread = cfg.RBLOCK // (cfg.num_warps * 32)
    assert per_thread % 8 == 0                           # whole 16-byte bf16 vectors
    assert cfg.RBLOCK < vocab


def test_fp32_rows_use_4_element_vectors():
    cfg = gpu_blocks(32768, 4096, 4, H200)
    assert cfg.persistent and cfg.RBLOCK // (cfg.num_warps * 32) == 8   # two fp32 vectors


def test_short_rows_pack_but_keep_programs_for_every_sm():
    cfg = gpu_blocks(1 << 20, 64, 2, H200)
    assert cfg.persistent and cfg.XBLOCK > 1
    assert cfg.XBLOCK * cfg.RBLOCK // (cfg.num_warps * 32) <= 16
    few = gpu_blocks(300, 64, 2, H200)
    assert -(-300 // few.XBLOCK) >= min(300, 2 * H200.sm_count)


def test_pointwise_tiles_are_whole_vectors_and_fill_the_sms():
    big = gpu_blocks(32768 * 4096, 1, 2, H200)
    assert big.XBLOCK % (big.num_warps * 32 * 8) == 0
    small = gpu_blocks(4096, 1, 2, H200)
    assert small.XBLOCK >= 32 * 8 and small.XBLOCK % (small.num_warps * 32 * 8) == 0
    assert small.XBLOCK < big.XBLOCK


def test_a_device_with_fewer_registers_loops_sooner():
    small = H200.replace(registers_per_sm=32768)
    assert row_elements_per_thread(small) == 8
    assert gpu_blocks(32768, 16384, 2, H200).persistent
    assert not gpu_blocks(32768, 16384, 2, small).persistent


def test_element_bytes_from_full_size_buffers():
    k = Kernel("k", 16, 128, inputs=[Buffer("a", torch.bfloat16, 16 * 128),
                                     Buffer("stat", torch.float32, 16)],
               outputs=[Buffer("o", torch.float32, 16 * 128)])
    assert element_bytes(k) == 2


def test_interpreter_keeps_big_tiles():
    cfg = choose_blocks(_kernel(8, 64), interpret=True)
    assert cfg == interpreter_blocks(_kernel(8, 64))
    assert cfg.XBLOCK == 8 and cfg.RBLOCK == 64 and cfg.persistent


def test_row_loop_kernels_pipeline_their_rows_when_they_fit():
    """A row-loop kernel's loads run ROW_LOOP_STAGES rows ahead when that many rows of its
    inputs fit in half an SM's shared memory; fewer stages, then none, as rows grow."""
    from cherenkov.codegen.blocks import ROW_LOOP_STAGES
    spec = hw.device("h200")

    def stages(R, dtype=torch.bfloat16, n_inputs=2):
        X = 32 * 1024               # more rows than R: the per-row stats outnumber a row
        k = Kernel("k", X, R, row_loop=32,
                   inputs=[Buffer(f"i{j}", dtype, X * R) for j in range(n_inputs)]
                   + [Buffer("rstd", torch.float32, X), Buffer("mean", torch.float32, X)],
                   outputs=[Buffer("o", dtype, X * R)])
        cfg = choose_blocks(k, False, device=spec)
        assert cfg.XBLOCK == 1 and cfg.RBLOCK == R
        return cfg.stages
    assert stages(4096) == ROW_LOOP_STAGES                  # 3 x 16 KB
    assert stages(8192, torch.float32, 2) == 0              # 64 KB a row: 2 x 64 > 114 KB
    assert stages(8192, torch.bfloat16, 3) == 2             # 48 KB a row: 3 x 48 > 114 KB
    assert stages(8192, torch.bfloat16, 2) == 3             # 3 x 32 KB
    assert choose_blocks(Kernel("k", 64, 64, row_loop=32), True).stages == 0   # interpreter


def test_looped_chunks_double_only_when_the_row_pads_no_further():
    assert gpu_blocks(16384, 65536, 2, H200).RBLOCK == 4096       # 16 x 4096 = 32 x 2048
    assert gpu_blocks(16384, 50304, 2, H200).RBLOCK == 2048       # 13 x 4096 > 25 x 2048


def test_looped_kernels_that_write_rows_keep_four_warps():
    reads = gpu_blocks(16384, 50304, 2, H200)
    writes = gpu_blocks(16384, 50304, 2, H200, writes_rows=True)
    assert (reads.num_warps, reads.unroll, reads.RBLOCK) == (2, 2, 2048)
    assert (writes.num_warps, writes.unroll, writes.RBLOCK) == (4, 0, 4096)


def test_looped_column_sums_of_16_bit_elements_are_pipelined():
    from cherenkov.codegen.blocks import COLUMN_STAGES, column_blocks
    h200 = hw.device("h200")
    # GPT-2's GeLU gradient + bias-gradient partials: 32 splits x 3072 columns, 512 rows each
    cfg = column_blocks(32 * 3072, 512, 2, h200)
    assert (cfg.XBLOCK, cfg.RBLOCK, cfg.num_warps, cfg.stages) == (64, 64, 8, COLUMN_STAGES)
    assert not cfg.persistent and cfg.transposed
    # staged tiles fit half the SM's shared memory
    assert cfg.stages * cfg.XBLOCK * cfg.RBLOCK * 2 * 2 <= h200.sram_per_sm_bytes / 2
    # a single tile over r has no loop to pipeline; fp32 keeps the unpipelined tiles
    assert column_blocks(32 * 3072, 64, 2, h200).stages == 0
    fp32 = column_blocks(32 * 768, 512, 4, h200)
    assert fp32.stages == 0 and fp32.num_warps == 4


def test_pipelined_column_tiles_fit_shared_memory_or_are_not_pipelined():
    from cherenkov.codegen.blocks import column_blocks
    h200 = hw.device("h200")
    # eight fp32 inputs read beside a bf16 one: 64 x 64 tiles of them would need 256 KB staged
    for staged in (4, 16, 32):
        cfg = column_blocks(32 * 3072, 512, 2, h200, staged)
        assert max(cfg.stages - 1, 0) * cfg.XBLOCK * cfg.RBLOCK * staged \
            <= h200.sram_per_sm_bytes / 2
    wide = column_blocks(32 * 3072, 512, 2, h200, 32)
    assert (wide.stages, wide.RBLOCK, wide.num_warps) == (0, 32, 4)   # the unpipelined tile


def _cuda_kernels(fn, *inputs):
    """The fused kernels of fn traced on CPU tensors like `inputs`, lowered for CUDA (fake
    tensors: no GPU needed), as the H200 preset would fuse them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from cherenkov.lowering.from_fx import lower_fx
    from cherenkov.passes.fusion import fuse
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    for n in gm.graph.nodes:                  # recomputed on the CUDA inputs
        n.meta.pop("val", None)
        n.meta.pop("tensor_meta", None)
    with FakeTensorMode():
        cuda = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")
                for t in inputs]
    graph, report = lower_fx(gm, cuda)
    assert not report.externs
    return [g.kernel for g in fuse(graph, device=H200).groups if hasattr(g.kernel, "body")]


def test_pooling_windows_loop_over_their_taps():
    """ResNet-50's stem max pool (3x3, stride 2) and its gathered backward: 512 outputs per
    program, one tap at a time, in 32-bit index math."""
    from cherenkov.codegen.blocks import TAPS_XBLOCK
    from cherenkov.codegen.triton_renderer import render_triton
    aten = torch.ops.aten
    x = torch.empty(64, 64, 112, 112, dtype=torch.bfloat16)
    dy, idx = torch.empty(64, 64, 56, 56, dtype=torch.bfloat16), torch.empty(
        64, 64, 56, 56, dtype=torch.int64)
    forward = _cuda_kernels(lambda x: aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1]), x)
    backward = _cuda_kernels(lambda dy, x, i: aten.max_pool2d_with_indices_backward(
        dy, x, [3, 3], [2, 2], [1, 1], [1, 1], False, i), dy, x, idx)
    windows = [k for k in forward + backward if k.R > 1]
    assert sorted(k.R for k in windows) == [4, 9]          # the backward: 2 x 2 candidates
    for k in windows:
        cfg = choose_blocks(k, False, device=H200)
        assert (cfg.XBLOCK, cfg.RBLOCK, cfg.persistent, cfg.unroll) == (TAPS_XBLOCK, 1, False, k.R)
        source = render_triton(k, cfg).source
        assert "tl.program_id(0) * XBLOCK" in source and "to(tl.int64) * XBLOCK" not in source


def test_short_contiguous_rows_keep_their_tiles():
    k = _cuda_kernels(lambda x: x.view(-1, 16).sum(-1), torch.empty(1 << 22))[0]
    cfg = choose_blocks(k, False, device=H200)
    assert cfg.persistent and cfg.RBLOCK == 16 and cfg.XBLOCK > 1


def test_a_reduction_over_n_h_w_walks_each_plane_contiguously():
    """BatchNorm's statistics of an NCHW tensor reduce over (N, H, W): r % (H*W) steps the
    address by 1, a walk along r, not a column reduction (whose tiles would put the channels,
    12544 elements apart, on neighbouring lanes); a window's r % 3 walks nothing."""
    from cherenkov.codegen.blocks import is_column_reduction
    from cherenkov.codegen.kernel_ir import r_strides
    x = torch.empty(64, 64, 112, 112, dtype=torch.bfloat16)
    stats = _cuda_kernels(lambda x: x.float().sum((0, 2, 3)), x)
    k = next(k for k in stats if k.R > 1)
    assert (k.X, k.R) == (64, 64 * 112 * 112) and r_strides(k) == [1]
    assert not is_column_reduction(k) and not choose_blocks(k, False, device=H200).transposed
    window = _cuda_kernels(lambda x: torch.ops.aten.max_pool2d_with_indices(
        x, [3, 3], [2, 2], [1, 1]), x)[0]
    assert r_strides(window) == [0]


def test_per_channel_values_in_a_window_are_read_once_per_output():
    """A normalization inlined into a max pool's taps: the per-channel statistics' addresses
    lie inside their buffers for every lane, so they are read (and rsqrt computed) once per
    output before the loop over the taps, unguarded by the taps' padding mask; the input
    itself is read per tap, under it."""
    from cherenkov.codegen.triton_renderer import render_triton
    x = torch.empty(8, 64, 56, 56)
    m, v = torch.empty(64), torch.empty(64)
    fn = lambda x, m, v: torch.ops.aten.max_pool2d_with_indices(            # noqa: E731
        torch.relu((x - m[:, None, None]) * torch.rsqrt(v[:, None, None] + 1e-5)),
        [3, 3], [2, 2], [1, 1])
    k = next(k for k in _cuda_kernels(fn, x, m, v) if k.R == 9)
    source = render_triton(k, choose_blocks(k, False, device=H200)).source
    before, loop = source.split("for roffset", 1)
    assert before.count("tl.load(") == 2 and "tl.rsqrt" in before
    assert loop.count("tl.load(") == 1 and "rmask & " in loop.split("tl.load(", 1)[1]


def test_scans_hold_a_row_in_at_most_16_warps():
    from cherenkov.codegen.blocks import SCAN_MAX_WARPS
    m = torch.zeros(256, 8192, dtype=torch.int64)
    k = next(k for k in _cuda_kernels(lambda m: m.cumsum(-1) * m - 1, m) if k.is_scan)
    cfg = choose_blocks(k, False, device=H200)
    assert (cfg.XBLOCK, cfg.RBLOCK, cfg.num_warps) == (1, 8192, SCAN_MAX_WARPS)
    assert gpu_blocks(k.X, k.R, 8, H200).num_warps == 32      # a reduction's row: more
