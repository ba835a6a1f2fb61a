"""Gluon source of the cross-entropy rows kernel that reads each row of logits once.

cross_entropy_kernel.py's Triton kernel reads a row twice (its max / sum pass, then the
gradient pass), and at GPT-2's 16384 x 50304 the second read mostly misses L2: 1.10-1.13 ms,
69-71% of copy bandwidth. Here one program per row copies the whole row into shared memory
with cp.async as it starts -- every slice in flight at once, one commit group per slice --
then, as the slices land:

    pass 1 (each slice as it arrives): a running max per register lane, no exponentials;
    one block max;   pass 2: sum of exp2((x - max) * log2 e) per lane; one block sum;
    pass 3: dlogits = exp2((x - lse) * log2 e) - onehot(target), stored to global memory

so HBM sees one read and one write per element, two block reductions per row, two
exponentials per element. A row of bf16 at V=50304 takes 100.6 KB of shared memory: two
programs per SM, one loading while the other computes and stores. cross_entropy_smem.py
decides when it runs (and with what slices); the Triton kernel stays the fallback.
Imported only where Triton has Gluon (Triton 3.6 and 3.9 both do).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

# cp.async: async_copy_global_to_shared in Triton 3.6, async_load in 3.9
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
# a CTA-wide barrier: thread_barrier in Triton 3.6, barrier in 3.9
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

LOG2E = gl.constexpr(1.4426950408889634)


@gluon.jit
def _buffer(dtype: gl.constexpr, n: gl.constexpr, first, BLOCK_V: gl.constexpr,
            SMEM_LAYOUT: gl.constexpr):
    """n slices of shared memory (n a power of two), or `first` standing in where n is 0."""
    if n > 0:
        buf = gl.allocate_shared_memory(dtype, [n, BLOCK_V], SMEM_LAYOUT)
    else:
        buf = first
    return buf


@gluon.jit
def _slice(p1, p2, p3, p4, i: gl.constexpr, N1: gl.constexpr, N2: gl.constexpr,
           N3: gl.constexpr):
    """Slice i of the row: the buffers hold N1, N2, N3 and the rest of them in turn."""
    if i < N1:
        s = p1.index(i)
    elif i < N1 + N2:
        s = p2.index(i - N1)
    elif i < N1 + N2 + N3:
        s = p3.index(i - N1 - N2)
    else:
        s = p4.index(i - N1 - N2 - N3)
    return s


@gluon.jit
def cross_entropy_rows_smem(logits_ptr, stride_row, grad_ptr, grad_stride_row, targets_ptr,
                            loss_ptr, V, ignore_index, WRITE_GRAD: gl.constexpr,
                            BLOCK_V: gl.constexpr, N1: gl.constexpr, N2: gl.constexpr,
                            N3: gl.constexpr, N4: gl.constexpr, VEC: gl.constexpr,
                            WARPS: gl.constexpr):
    # shared memory shapes are powers of two: the row's N1 + N2 + N3 + N4 slices (each a power
    # of two or 0; cross_entropy_smem.parts) in up to four buffers. VEC elements a thread
    # (16 bytes), WARPS the launch's num_warps (constexpr numbers, not layouts, so a compile
    # worker's job can name them)
    N_SLICES: gl.constexpr = N1 + N2 + N3 + N4
    LAYOUT: gl.constexpr = gl.BlockedLayout([VEC], [32], [WARPS], [0])
    SMEM_LAYOUT: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    row = gl.program_id(0).to(gl.int64)               # int64 row offsets: rows x V > 2^31
    base = logits_ptr + row * stride_row
    offs = gl.arange(0, BLOCK_V, layout=LAYOUT)
    dtype: gl.constexpr = logits_ptr.dtype.element_ty
    p1 = gl.allocate_shared_memory(dtype, [N1, BLOCK_V], SMEM_LAYOUT)
    p2 = _buffer(dtype, N2, p1, BLOCK_V, SMEM_LAYOUT)
    p3 = _buffer(dtype, N3, p1, BLOCK_V, SMEM_LAYOUT)
    p4 = _buffer(dtype, N4, p1, BLOCK_V, SMEM_LAYOUT)
    for i in gl.static_range(N_SLICES):               # the whole row in flight at once
        cols = i * BLOCK_V + offs
        _async_load(_slice(p1, p2, p3, p4, i, N1, N2, N3), base + cols, mask=cols < V)
        async_copy.commit_group()
    target = gl.load(targets_ptr + row)
    valid = target != ignore_index
    known = (target >= 0) & (target < V)              # a target out of range reads nothing: NaN
    safe_target = gl.where(valid & known, target, 0)
    target_logit = gl.load(base + safe_target).to(gl.float32)

    m_lane = gl.full([BLOCK_V], -float("inf"), gl.float32, layout=LAYOUT)
    for i in gl.static_range(N_SLICES):               # pass 1: each slice as it lands
        async_copy.wait_group(N_SLICES - 1 - i)
        _cta_barrier()                           # other threads' copies into the slice
        cols = i * BLOCK_V + offs
        x = _slice(p1, p2, p3, p4, i, N1, N2, N3).load(LAYOUT).to(gl.float32)
        m_lane = gl.maximum(m_lane, gl.where(cols < V, x, -float("inf")))
    m = gl.max(m_lane, axis=0)
    m2 = m * LOG2E
    s_lane = gl.zeros([BLOCK_V], gl.float32, layout=LAYOUT)
    for i in gl.static_range(N_SLICES):               # pass 2: the sum, from shared memory
        cols = i * BLOCK_V + offs
        x = _slice(p1, p2, p3, p4, i, N1, N2, N3).load(LAYOUT).to(gl.float32)
        s_lane += gl.where(cols < V, gl.exp2(x * LOG2E - m2), 0.0)
    lse = m + gl.log(gl.sum(s_lane, axis=0))
    loss = gl.where(known, lse - target_logit, float("nan"))
    gl.store(loss_ptr + row, gl.where(valid, loss, 0.0))
    if WRITE_GRAD:                                    # pass 3: the gradient
        grad_base = grad_ptr + row * grad_stride_row
        keep = gl.where(valid, gl.where(known, 1.0, float("nan")), 0.0)
        lse2 = lse * LOG2E
        for i in gl.static_range(N_SLICES):
            cols = i * BLOCK_V + offs
            x = _slice(p1, p2, p3, p4, i, N1, N2, N3).load(LAYOUT).to(gl.float32)
            p = gl.exp2(x * LOG2E - lse2) - gl.where(cols == safe_target, 1.0, 0.0)
            gl.store(grad_base + cols, (p * keep).to(grad_ptr.dtype.element_ty),
                     mask=cols < V, cache_modifier=".cs")
