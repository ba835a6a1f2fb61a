"""Block sizes, warps and persistent-vs-looped for a kernel, from the device it runs on.

Everything on a GPU is derived from the hardware model (`cherenkov.hw`):

- vector width: a thread loads 16 bytes at a time (8 bf16 or 4 fp32 elements), the widest
  global access; each thread handles 2 such vectors per tile so loads stay in flight;
- register budget: at half occupancy a thread may hold registers_per_sm / (max_threads_per_sm
  / 2) registers (64 on Hopper); a row value lives in fp32, about LIVE_ROW_VALUES copies of it
  at once (input, centred value, output), so a thread keeps at most 16 row elements;
- a persistent reduction (whole row in registers, one pass over memory) is chosen when the
  row fits in one program at that budget: max warps (1024 threads) x 16 = 16384 elements;
  longer rows loop over r in RBLOCK chunks of 2 warps x 32 elements per thread, the loop
  unrolled twice (a loop keeps only its running values across chunks, so small programs
  leave room for many rows in flight per SM; the H200 read 16384 x 50304 bf16 logits for a
  cross-entropy's logsumexp at 96.7% of copy bandwidth this way, 92.1% with 4 warps,
  `bench/results/2026-11-30_ce_variants_h200_4d8a1e1.txt`); a looped kernel that also
  writes its rows keeps 4 warps and no unrolling (the cross-entropy backward at V=50304,
  as forward+backward minus forward in the memory suite: 854 us with 4 warps at b6cf6d7,
  892 us with 2 at ffc298e); chunks twice as long when the row pads no further to them
  (16384 x 128256 logits with 4 warps: 96.7% vs 91.4%, `..._5b1177a.txt`);
- enough programs: short rows pack several per program, but never so many that fewer than
  PROGRAMS_PER_SM programs per SM remain.

Under the Triton interpreter (CPU) tiles are big instead, so few program instances run
(each costs milliseconds there).

    >>> h200 = hw.device("h200")
    >>> gpu_blocks(32768, 4096, 2, h200)       # add + LayerNorm rows, bf16
    BlockConfig(XBLOCK=1, RBLOCK=4096, persistent=True, num_warps=8, transposed=False, stages=0, unroll=0)
    >>> gpu_blocks(16384, 50304, 2, h200)      # cross-entropy over a 50304 vocab
    BlockConfig(XBLOCK=1, RBLOCK=2048, persistent=False, num_warps=2, transposed=False, stages=0, unroll=2)
    >>> gpu_blocks(16384, 65536, 2, h200)      # 65536 = 16 x 4096: no more padding
    BlockConfig(XBLOCK=1, RBLOCK=4096, persistent=False, num_warps=2, transposed=False, stages=0, unroll=2)
"""
from __future__ import annotations

import dataclasses

from cherenkov import hw
from cherenkov.codegen.kernel_ir import Kernel
from cherenkov.codegen.triton_renderer import BlockConfig

VECTOR_BYTES = 16          # widest global load/store per thread (LDG.128)
VECTORS_PER_THREAD = 2     # 16-byte vectors each thread handles per tile
LIVE_ROW_VALUES = 3        # fp32 copies of a row element alive at once in a persistent row
MAX_BLOCK_THREADS = 1024   # CUDA / HIP limit on threads per program
POINTWISE_WARPS = 4
LOOPED_WARPS = 2
LOOPED_ELEMENTS_PER_THREAD = 32
LOOPED_UNROLL = 2          # loop iterations unrolled together (loads of two chunks in flight)
WRITING_LOOPED_WARPS = 4   # a looped kernel that also writes its rows (a cross-entropy backward)
PROGRAMS_PER_SM = 2        # keep at least this many programs per SM when packing rows
ROW_LOOP_STAGES = 3        # rows in flight per row-loop program (see row_loop_blocks)
COLUMN_STAGES = 3          # tiles in flight per looped column-reduction program
COLUMN_WARPS = 8           # ... which run 64 x 64 tiles (see column_blocks)
COLUMN_STAGED_INPUTS = 2   # inputs per tile staged when not told (a GeLU gradient's two)
TAPS_MAX_R = 64            # window kernels: reductions over at most this many taps ...
TAPS_MIN_X = 1 << 16       # ... of at least this many outputs (see taps_blocks)
TAPS_XBLOCK = 512
# a scan's row shares its running values across warps in shared memory: int64 position ids
# over 8192-element rows (one row a program) ran 43 us with 16 warps, 68 with the 32 a
# reduction's row would get and 65 with 8 (torch.compile 41 us in that run;
# bench/results/2026-12-01_window_blocks_gpu_h200_4087ddc.md)
SCAN_MAX_WARPS = 16


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def prev_pow2(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1)


def element_bytes(kernel: Kernel) -> int:
    """Size of the narrowest element type among the kernel's full-size buffers (those with a
    value per (x, r)): it sets how many elements make one 16-byte vector."""
    full = [b.dtype.itemsize for b in kernel.inputs + kernel.outputs
            if b.numel >= kernel.X * kernel.R]
    return min(full) if full else 4


def row_elements_per_thread(spec: hw.DeviceSpec) -> int:
    """fp32 row elements one thread may keep in registers (16 on NVIDIA datacenter GPUs)."""
    regs = spec.registers_per_sm // max(1, spec.max_threads_per_sm // 2)
    return prev_pow2(max(1, regs // LIVE_ROW_VALUES))


def max_warps(spec: hw.DeviceSpec) -> int:
    return max(1, MAX_BLOCK_THREADS // spec.warp_size)


def persistent_capacity(spec: hw.DeviceSpec) -> int:
    """Longest row (elements) reduced with the whole row in registers."""
    return max_warps(spec) * spec.warp_size * row_elements_per_thread(spec)


def elements_per_thread(elem_bytes: int, spec: hw.DeviceSpec) -> int:
    """Elements a thread handles per tile: two 16-byte vectors, within the row budget."""
    vec = max(1, VECTOR_BYTES // elem_bytes)
    return min(VECTORS_PER_THREAD * vec, max(vec, row_elements_per_thread(spec)))


def row_warps(rblock: int, elem_bytes: int, spec: hw.DeviceSpec) -> int:
    """Warps for one row of `rblock` elements held whole in a program."""
    per_thread = elements_per_thread(elem_bytes, spec)
    return max(1, min(max_warps(spec), rblock // (spec.warp_size * per_thread)))


def gpu_blocks(X: int, R: int, elem_bytes: int, spec: hw.DeviceSpec,
               writes_rows: bool = False) -> BlockConfig:
    """Block configuration for an (X, R) domain on the GPU `spec` describes; `writes_rows`:
    the kernel stores values per element, not only per row."""
    warp = spec.warp_size
    vec = max(1, VECTOR_BYTES // elem_bytes)
    per_thread = elements_per_thread(elem_bytes, spec)
    min_programs = PROGRAMS_PER_SM * spec.sm_count
    if R == 1:
        warps = POINTWISE_WARPS
        xblock = warps * warp * per_thread
        while xblock > warp * vec and -(-X // xblock) < min_programs:
            xblock //= 2
        warps = max(1, min(warps, xblock // (warp * vec)))
        return BlockConfig(XBLOCK=xblock, num_warps=warps)
    rblock = next_pow2(R)
    if rblock > persistent_capacity(spec):
        warps, unroll = (WRITING_LOOPED_WARPS, 0) if writes_rows else (LOOPED_WARPS, LOOPED_UNROLL)
        chunk = warps * warp * LOOPED_ELEMENTS_PER_THREAD
        if -(-R // (2 * chunk)) * 2 <= -(-R // chunk):    # twice as long, no more padding
            chunk *= 2
        return BlockConfig(XBLOCK=1, RBLOCK=chunk, persistent=False, num_warps=warps,
                           unroll=unroll)
    row_threads = max(1, rblock // per_thread)
    if row_threads >= POINTWISE_WARPS * warp:          # a long row: one row per program
        return BlockConfig(XBLOCK=1, RBLOCK=rblock, persistent=True,
                           num_warps=row_warps(rblock, elem_bytes, spec))
    xblock = max(1, min(next_pow2(X), POINTWISE_WARPS * warp * per_thread // rblock))
    while xblock > 1 and -(-X // xblock) < min_programs:
        xblock //= 2
    warps = max(1, min(POINTWISE_WARPS, xblock * rblock // (warp * per_thread)))
    return BlockConfig(XBLOCK=xblock, RBLOCK=rblock, persistent=True, num_warps=warps)


def interpreter_blocks(kernel: Kernel) -> BlockConfig:
    """Big tiles, few programs: the Triton interpreter pays per program instance."""
    tile_elements, max_persistent = 1 << 16, 1 << 16
    X, R = kernel.X, kernel.R
    if R == 1:
        xblock = min(next_pow2(X), 1 << 16)
        return BlockConfig(XBLOCK=max(xblock, 16), num_warps=4 if xblock >= 512 else 2)
    rblock = next_pow2(R)
    persistent = rblock <= max_persistent
    if not persistent:
        rblock = 1 << 14
    xblock = max(1, min(next_pow2(X), tile_elements // rblock))
    elems = xblock * rblock
    num_warps = 16 if elems >= 16384 else 8 if elems >= 2048 else 4 if elems >= 512 else 2
    return BlockConfig(XBLOCK=xblock, RBLOCK=rblock, persistent=persistent, num_warps=num_warps)


def is_column_reduction(kernel: Kernel) -> bool:
    """True when the kernel's loads walk memory along x and jump along r (reducing the rows
    of a column): tiles must then be wide in x for coalesced loads."""
    from cherenkov.codegen.kernel_ir import r_strides
    if kernel.R == 1:
        return False
    strides = r_strides(kernel)
    return bool(strides) and all(st != 1 for st in strides)


def column_blocks(X: int, R: int, elem_bytes: int, spec: hw.DeviceSpec,
                  staged_bytes: int | None = None) -> BlockConfig:
    """Wide in x (a warp reads 16-byte vectors of neighbouring columns), short in r: 64
    columns x 32 rows of 16-bit elements. The bias-gradient kernels of bias + GeLU on the H200
    (sweep at 2b5c06b, forward + backward): 16384 x 3072 3319 GB/s vs 3137 with 128 x 32 and
    3322 with 64 x 64; 32768 x 4096 3686 vs 3625 and 3466.

    A loop over r of 16-bit elements has its loads software-pipelined (COLUMN_STAGES deep,
    when that many tiles of its inputs fit in half the SM's shared memory) over 64 x 64 tiles
    with 8 warps: 3707 and 3909 GB/s on the same two cases (sweep at 41bf5e9; 4 warps and
    64 x 32, pipelined 4 deep: 3696 and 3820). Wider elements keep the unpipelined tiles (not
    measured). `staged_bytes`: bytes per element of the tile's inputs (default two of
    elem_bytes); stages - 1 tiles of them sit in shared memory, at most half the SM's, else
    fewer stages (a kernel reading eight fp32 inputs through a bf16 one would need 256 KB)."""
    vec = max(1, VECTOR_BYTES // elem_bytes)
    xblock = min(next_pow2(X), spec.warp_size * vec // 4)
    while xblock > vec and -(-X // xblock) < PROGRAMS_PER_SM * spec.sm_count:
        xblock //= 2
    rblock = min(next_pow2(R), max(8, 2048 // xblock))
    stages, warps = 0, POINTWISE_WARPS
    if elem_bytes <= 2:
        wide = min(next_pow2(R), max(8, 4096 // xblock))
        per_tile = xblock * wide * (staged_bytes if staged_bytes is not None
                                    else elem_bytes * COLUMN_STAGED_INPUTS)
        if wide < R:
            stages = next((n for n in (COLUMN_STAGES, 2)
                           if (n - 1) * per_tile <= spec.sram_per_sm_bytes / 2), 0)
        if stages:
            rblock, warps = wide, COLUMN_WARPS
    return BlockConfig(XBLOCK=xblock, RBLOCK=rblock, persistent=rblock >= R,
                       num_warps=warps, transposed=True, stages=stages)


def choose_blocks(kernel: Kernel, interpret: bool,
                  device: hw.DeviceSpec | None = None) -> BlockConfig:
    """The block configuration for `kernel`: interpreter tiles, or from `device` (default:
    the live device, `cherenkov.hw.current_device()`)."""
    if kernel.row_loop:
        return row_loop_blocks(kernel, interpret, device)
    if interpret:
        return interpreter_blocks(kernel)
    spec = device if device is not None else hw.current_device()
    if is_window(kernel):
        return taps_blocks(kernel)
    if is_column_reduction(kernel):
        staged = sum(b.dtype.itemsize for b in kernel.inputs if b.numel >= kernel.X * kernel.R)
        return column_blocks(kernel.X, kernel.R, element_bytes(kernel), spec, staged or None)
    if kernel.halves:
        return halves_blocks(kernel.X, element_bytes(kernel), spec)
    writes_rows = any(b.numel >= kernel.X * kernel.R for b in kernel.outputs)
    cfg = gpu_blocks(kernel.X, kernel.R, element_bytes(kernel), spec, writes_rows)
    if kernel.is_scan and cfg.num_warps > SCAN_MAX_WARPS:
        cfg = dataclasses.replace(cfg, num_warps=SCAN_MAX_WARPS)
    return cfg


def is_window(kernel: Kernel) -> bool:
    """A reduction over a few taps of many outputs whose loads do not walk r contiguously:
    a pooling window (r reaches the address through // and %), a gathered pooling backward."""
    from cherenkov.codegen.kernel_ir import r_strides
    return (1 < kernel.R <= TAPS_MAX_R and kernel.X >= TAPS_MIN_X and not kernel.row_loop
            and not kernel.is_scan and not kernel.halves and 1 not in r_strides(kernel))


def taps_blocks(kernel: Kernel) -> BlockConfig:
    """TAPS_XBLOCK outputs per program, a loop over the taps one at a time (unrolled): no tap
    padded to a power of two, each step a coalesced row of outputs. On the H200 against one
    (XBLOCK, RBLOCK) tile over the taps (bench/results/2026-12-01_window_blocks_gpu_h200_4087ddc.md,
    bf16, ResNet-50 shapes): 3x3 average pool 153 us vs 261 (256 x 16 tiles, 8 warps) and
    969 (the column tiles before); its forward+backward 937 vs 2586; a 3x3 stride-2 max pool
    85 vs 66 (tiles) and 486; its forward+backward 1212 vs 1480."""
    return BlockConfig(XBLOCK=TAPS_XBLOCK, RBLOCK=1, persistent=False, num_warps=POINTWISE_WARPS,
                       unroll=kernel.R)


def halves_blocks(X: int, elem_bytes: int, spec: hw.DeviceSpec) -> BlockConfig:
    """A halves kernel's lanes each load and store two elements of their own (plus, for RoPE,
    four table entries): a quarter of a pointwise tile's lanes per thread. RoPE forward on the
    H200 (sweep at 2b5c06b): 512 lanes 3878 GB/s, 1024 3582, 2048 3423."""
    cfg = gpu_blocks(X, 1, elem_bytes, spec)
    xblock = max(spec.warp_size, cfg.XBLOCK // 4)
    warps = max(1, min(cfg.num_warps, xblock // spec.warp_size))
    return BlockConfig(XBLOCK=xblock, num_warps=warps)


def row_loop_blocks(kernel: Kernel, interpret: bool,
                    device: hw.DeviceSpec | None) -> BlockConfig:
    """A row-loop kernel: one whole row per tile (XBLOCK 1), warps as a persistent row's, and
    its loads software-pipelined ROW_LOOP_STAGES deep when that many rows of its row-sized
    inputs fit in half the SM's shared memory. Without pipelining each program waits for
    its next rows' loads after every row's reductions; with it the H200 ran the LayerNorm
    backward at 90% instead of 74% of copy bandwidth (RMSNorm 94% vs 87%; the loop sweep
    at da64103, 3 stages beat 2)."""
    rblock = next_pow2(kernel.R)
    if interpret:
        return BlockConfig(XBLOCK=1, RBLOCK=rblock, persistent=True, num_warps=4)
    spec = device if device is not None else hw.current_device()
    staged = rblock * sum(b.dtype.itemsize for b in kernel.inputs
                          if b.numel in (kernel.X * kernel.R, kernel.R))   # per row
    stages = next((n for n in (ROW_LOOP_STAGES, 2) if n * staged <= spec.sram_per_sm_bytes / 2),
                  0)
    return BlockConfig(XBLOCK=1, RBLOCK=rblock, persistent=True, stages=stages,
                       num_warps=row_warps(rblock, element_bytes(kernel), spec))
