"""Launch the generated attention kernels: grids, strides, tile configs, output buffers.

A `Plan` bundles what one attention call needs (kernel module, traced mods, block mask,
scale); `forward` (here), `launch_bwd.backward` and `launch_decode.decode` turn it plus
tensors into kernel launches, as decided once per call signature (memo.py). All
tensors are (B, H, S, D) with unit stride along D. The LSE passed between forward and
backward is log2-domain with +inf on fully masked rows (see kernels_src.py).
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field
from types import ModuleType

import torch

from cherenkov import hw

from . import launch_gluon, memo
from .block_mask import BlockMask
from .kernel_launch import descriptor, descriptor_class, launcher
from .trace import TracedMods
from .tuning import choose_config, next_power_of_2

LN2 = math.log(2.0)


@dataclass
class Plan:
    kernels: ModuleType
    traced: TracedMods
    mask: BlockMask
    scale: float
    interpret: bool
    # the traced mask_mod is the one `mask` was built from (its tiles may then be coarsened
    # for the forward: `_forward_mask`)
    coarsen: bool = False
    # launch decisions per call signature (memo.py); a plan kept across calls keeps them
    decisions: dict = field(default_factory=dict, repr=False, compare=False)

    def remember(self, kind: str, decide, *tensors, extra=()):
        """decide(self, *tensors, *extra), remembered per signature (memo.remembered)."""
        return memo.remembered(self.decisions, kind, decide, self, *tensors, extra=extra)

    @property
    def has_score_mod(self) -> bool:
        return self.traced.score is not None

    def mask_in_tiles(self, rows: int, cols: int) -> BlockMask | None:
        """The block mask in rows x cols tiles: the plan's own, or the same mask coarsened
        (BlockMask.coarsened, kept on the mask) when it was built from the plan's own mask_mod
        and that is index arithmetic only (causal, window, prefix: a few more partial tiles at
        the edges; a mask reading tensors -- documents -- keeps its finer tiles, which skip
        more); None otherwise, and while a CUDA graph is captured (nothing is built then)."""
        m = self.mask
        if m.block == (rows, cols):
            return m
        if rows % m.block[0] or cols % m.block[1] or not (m.exact and self.coarsen):
            return None
        key = (rows // m.block[0], cols // m.block[1])
        if key in m._coarse:
            return m._coarse[key]
        if self.traced.mask_reads_tensors() \
                or (m.device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            return None
        return m.coarsened(*key)


def kept_plan(cache, kernels, traced: TracedMods, mask: BlockMask, scale: float,
              interpret: bool, coarsen: bool = False) -> Plan:
    """The plan of the last call with the same kernels, traced mods, scale -- and block mask:
    one with another mask replaces it -- from `cache` (a ShapeCache), so its remembered launch
    decisions (memo.py) serve repeated calls. One plan per mod pair, so a loop building a new
    block mask every step keeps at most its last mask alive here, not one per step."""
    # the ids are of objects the kept plan holds (so none is reused while it is kept)
    key = (id(kernels), id(traced), scale, interpret, coarsen)
    plan = cache.get(key)
    if plan is None or plan.kernels is not kernels or plan.traced is not traced \
            or plan.mask is not mask:
        plan = cache.put(key, Plan(kernels, traced, mask, scale, interpret, coarsen=coarsen))
    return plan


def capture_args(captured, device) -> list:
    """Kernel arguments for captured tensors: (tensor, stride0, ..., size0, ...) each."""
    args = []
    for t in captured:
        t = t.detach()
        if t.dtype == torch.bool:
            t = t.to(torch.int8)
        t = t.to(device).contiguous()
        args += [t, *t.stride(), *t.shape]
    return args


def _dot_precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def _mask_strides(num: torch.Tensor, idx: torch.Tensor) -> tuple:
    """(b, h, row) strides of a count tensor and an index tensor, 0 on size-1 (broadcast)
    dims."""
    def bcast(t, dim):
        return 0 if t.shape[dim] == 1 else t.stride(dim)
    return (bcast(num, 0), bcast(num, 1), num.stride(2), bcast(idx, 0), bcast(idx, 1),
            idx.stride(2))


def check_mask(mask: BlockMask, B: int, H: int, Q_LEN: int, KV_LEN: int) -> None:
    mb, mh, mq, mk = mask.shape
    if (mq, mk) != (Q_LEN, KV_LEN) or mask.state.shape[0] not in (1, B) \
            or mask.state.shape[1] not in (1, H):
        raise ValueError(f"block mask built for (B={mb}, H={mh}, Q={mq}, KV={mk}) used with "
                         f"(B={B}, H={H}, Q={Q_LEN}, KV={KV_LEN})")


# How the forward reads Q, K, V and writes O: "auto" (TMA descriptors where `tma_mode` allows
# them), "off" (pointers), "2d" / "4d" (that descriptor form where possible, else pointers);
# for A/B runs in bench/.
TMA = "auto"


# Descriptors cost host time every call (a TensorDescriptor per tile operand, turned into a
# TMA descriptor by the launcher), hidden behind the kernels only when there is work enough --
# "auto" leaves calls of fewer scores on pointers (set when descriptor arguments still took
# Triton's own launch path, tens of microseconds more; not re-measured since they launch
# directly).
TMA_MIN_SCORES = 1 << 26
# head dims "auto" takes descriptors for: measured faster at D=128; at D=64 the causal forward
# on 128-row tiles took 0.440 ms vs 0.379 with pointers (S=4096, 2026-12-01_attention_h200_1edee46.md
# vs 2026-11-30_attention_h200_fee7e19.md)
TMA_HEAD_DIMS = (128,)

# The backward's descriptor reads (2-D only): "auto" follows TMA, "off" keeps pointers (A/B).
# Forward+backward on the H200 at B=4 H=16 S=4096 D=128 (best of 2 rounds, 6e13631): causal
# 2.413 vs 2.489 ms, prefix-LM 2.549 vs 2.646, softcap 2.864 vs 2.897, ALiBi 2.621 vs 2.626,
# sliding window 1.229 vs 1.209 (bench/results/2026-12-01_attention_tma_bwd_variants_h200_6e13631.md);
# a third stage or 8 warps for dQ lost everywhere.
TMA_BACKWARD = "auto"


def _backward_tma() -> str:
    """The backward's descriptor mode: TMA_BACKWARD where set, else TMA's ("4d" is a
    forward-only form: pointers)."""
    if "off" in (TMA, TMA_BACKWARD):
        return "off"
    mode = TMA if TMA_BACKWARD == "auto" else TMA_BACKWARD
    return "off" if mode == "4d" else mode


def _mode_for(plan: Plan, mode: str | None = None) -> str:
    """The descriptor mode for this plan's kernels: "auto" leaves masks that read tensors
    (documents: ragged, mostly partial 64 x 64 tiles) on pointers -- on the H200 their forward
    took 0.276 ms with descriptors vs 0.211 with pointers, forward+backward 1.118 vs 0.766
    (bench/results/2026-12-01_attention_tma_*_causal_document8_h200_5f824df.md)."""
    mode = TMA if mode is None else mode
    if mode == "auto" and plan.traced.mask_reads_tensors():
        return "off"
    return mode


@functools.lru_cache(maxsize=None)
def _hopper_class(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] >= 9


def tma_mode(q, k, v, o, block_m: int, block_n: int, interpret: bool, mode: str | None = None
             ) -> int:
    """0 (pointers), 2 (2-D descriptors over (B*H*S, D)) or 4 (4-D descriptors over
    (B, H, S, D)) for the loads and stores of q, k, v, o (o: the forward's output or the
    backward's dO). Descriptors need a Hopper-class GPU (or the interpreter, asked for
    explicitly), an unpadded power-of-two head dim, unit stride along D and 16-byte aligned
    strides and bases; the 2-D form also needs contiguous tensors and lengths that are
    multiples of the tiles (a tile never reaches into the next head)."""
    mode = TMA if mode is None else mode
    if mode == "off" or (mode == "auto" and interpret):
        return 0
    B, H, Q_LEN, D = q.shape
    if mode == "auto" and (B * H * Q_LEN * k.shape[2] < TMA_MIN_SCORES
                           or D not in TMA_HEAD_DIMS):
        return 0
    if not interpret and (not q.is_cuda or not _hopper_class(q.device)):
        return 0
    if D != max(16, next_power_of_2(D)) or descriptor_class() is None:
        return 0
    size = q.element_size()
    for t in (q, k, v, o):
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any(s * size % 16 for s in t.stride()[:-1]):
            return 0
    even = Q_LEN % block_m == 0 and k.shape[2] % block_n == 0
    if mode in ("auto", "2d") and even and all(t.is_contiguous() for t in (q, k, v, o)):
        return 2
    if mode == "4d":
        return 4
    return 0


# Heads whose programs run side by side (kernels_src._program_block): None sizes the groups
# by the L2 cache (head_group); a number fixes them (tests, A/B runs).
HEAD_GROUP: int | None = None


@functools.lru_cache(maxsize=None)
def _l2_bytes(device_index: int) -> float:
    return hw.current_device(torch.device("cuda", device_index)).l2_bytes


def head_group(n_heads: int, per_head_bytes: int, device: torch.device, interpret: bool) -> int:
    """How many heads' programs run interleaved: the largest divisor of the heads whose K and
    V (dK/dV: Q and dO) the L2 holds, so the longest blocks of all of them start first (one
    head after another left the last heads' longest blocks to start near the end) in groups
    of one size (a small last group is a tail of its own). At B=4 H=16 S=4096 D=128 on the
    H200 (60 MB L2: 16 heads of 64), against one head after another: forward 5.7-8% faster
    (causal, softcap, ALiBi, prefix-LM; documents 3.7%), forward+backward 3-5% (causal, ALiBi,
    prefix-LM, documents), softcap and sliding window within 1%; groups of 15,15,15,15,4 lost
    up to 5%, one group of all 64 lost 1-12%
    (bench/results/2026-12-01_attention_program_order_h200_{688701d,a6e8203}.md)."""
    if HEAD_GROUP is not None:
        return max(1, min(HEAD_GROUP, n_heads))
    if interpret or device.type != "cuda":
        return _largest_group(n_heads, per_head_bytes, 4 << 20)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _largest_group(n_heads, per_head_bytes, _l2_bytes(index))


def _query_head_group(plan: Plan, q, k) -> int:
    """head_group for kernels walking query blocks (forward, dQ): each head's K and V."""
    return head_group(q.shape[0] * q.shape[1], 2 * k.shape[2] * q.shape[3] * k.element_size(),
                      plan.mask.device, plan.interpret)


@functools.lru_cache(maxsize=256)
def _largest_group(n_heads: int, per_head_bytes: int, l2_bytes: float) -> int:
    most = max(1, min(n_heads, int(l2_bytes // max(per_head_bytes, 1))))
    return next(g for g in range(most, 0, -1) if n_heads % g == 0)


def _descriptors(mode: int, *tiles) -> list:
    """One descriptor (None for pointers) per (tensor, tile rows) in `tiles`, in `mode`'s form."""
    if mode == 0:
        return [None] * len(tiles)
    cls = descriptor_class()
    if mode == 2:
        flat = [t.view(-1, t.shape[-1]) for t, _ in tiles]
        return [descriptor(cls, f, f.shape, f.stride(), (rows, f.shape[-1]))
                for f, (_, rows) in zip(flat, tiles)]
    return [descriptor(cls, t, t.shape, t.stride(), (1, 1, rows, t.shape[-1]))
            for t, rows in tiles]


def _forward_mask(plan: Plan, D: int, dtype) -> BlockMask:
    """The block mask the descriptor forward runs on: the plan's, or -- where the forward's
    tiles want more query rows than its tiles have (128 vs the default 64) -- the same mask
    with taller tiles where Plan.mask_in_tiles gives them."""
    m = plan.mask
    want = choose_config("fwd_tma", D, dtype, (1 << 20, m.block[1]), plan.interpret).block_m
    if want <= m.block[0]:
        return m
    return plan.mask_in_tiles(want, m.block[1]) or m


@dataclass
class Launch:
    """One kernel launch as decided for a call signature: the grid, the scalar arguments that
    end its argument list (strides, lengths, scale, program order), constexprs and options;
    the block mask whose lists it reads, its descriptor mode and tiles."""
    grid: tuple
    tail: tuple
    constexprs: dict
    options: dict
    mask: BlockMask | None = None
    tma: int = 0
    block_m: int = 0
    block_n: int = 0

    @staticmethod
    def tiled(grid, tail, cfg, mask: BlockMask, tma: int, D: int, **constexprs) -> "Launch":
        """A launch in cfg's tiles over `mask`'s: the tile constexprs every attention kernel
        takes (D, D_PAD, BLOCK_M / N, SPARSE_M / N) ahead of `constexprs`, cfg's warps and
        stages."""
        return Launch(grid, tail, dict(D=D, D_PAD=max(16, next_power_of_2(D)),
                                       BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                       SPARSE_M=mask.block[0], SPARSE_N=mask.block[1],
                                       **constexprs),
                      dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages), mask, tma,
                      cfg.block_m, cfg.block_n)


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    """A stand-in (no memory) for a fresh contiguous tensor like t: what the decisions read of
    the outputs a call allocates (their strides; a fresh allocation is 16-byte aligned, which
    the call checks where a descriptor depends on it)."""
    return torch.empty_like(t, device="meta", memory_format=torch.contiguous_format)


def _gluon_forward_decision(plan: Plan, q, k, v):
    """(*_gluon_tiles, the kernel's constexprs) where the Gluon forward takes this call, else
    None."""
    tiles = _gluon_tiles(plan, q, k, v, q) if launch_gluon.usable(plan, q, k, v) else None
    return None if tiles is None else (*tiles, launch_gluon.constexprs(plan, q.shape[-1]))


def _forward_decision(plan: Plan, q, k, v, o=None) -> Launch:
    """The Triton forward's launch; `o`: the output (default: a fresh contiguous one)."""
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    o = _contiguous(q) if o is None else o
    m = plan.mask
    cfg = choose_config("fwd", D, q.dtype, m.block, plan.interpret)
    mode = _mode_for(plan)
    tma = tma_mode(q, k, v, o, cfg.block_m, cfg.block_n, plan.interpret, mode)
    if tma:
        m = _forward_mask(plan, D, q.dtype)
        cfg = choose_config("fwd_tma", D, q.dtype, m.block, plan.interpret)
        tma = tma_mode(q, k, v, o, cfg.block_m, cfg.block_n, plan.interpret, mode)
    n_m = triton_cdiv(Q_LEN, cfg.block_m)
    return Launch.tiled(
        (n_m * B * H,),
        (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
         *_mask_strides(m.kv_num_blocks, m.kv_indices),
         plan.scale, Q_LEN, KV_LEN, H, H // HK, n_m, _query_head_group(plan, q, k)),
        cfg, m, tma, D, EVEN_M=Q_LEN % cfg.block_m == 0, EVEN_N=KV_LEN % m.block[1] == 0,
        HAS_SCORE_MOD=plan.has_score_mod, DOT_PREC=_dot_precision(q.dtype), TMA=tma)


def _forward_decisions(plan: Plan, q, k, v) -> tuple:
    """(_gluon_forward_decision, _forward_decision): the Triton one decided too, for a call
    whose Gluon launch fails."""
    return _gluon_forward_decision(plan, q, k, v), _forward_decision(plan, q, k, v)


def forward(plan: Plan, q, k, v, captured) -> tuple[torch.Tensor, torch.Tensor]:
    caps = capture_args(captured, q.device)
    gluon, d = plan.remember("fwd", _forward_decisions, q, k, v)
    if gluon is not None:
        got = launch_gluon.guarded_forward(plan, gluon[0], q, k, v, caps, *gluon[1:])
        if got is not None:
            return got
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    if d.tma and o.data_ptr() % 16:        # not a caching allocator's block: decide anew
        d = _forward_decision(plan, q, k, v, o)
    m = d.mask
    launcher(plan.kernels._attn_fwd)(
        d.grid,
        (q, k, v, o, lse, *caps,
         m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks, m.full_kv_indices,
         *_descriptors(d.tma, (q, d.block_m), (k, d.block_n), (v, d.block_n), (o, d.block_m)),
         *d.tail),
        d.constexprs, (o, lse), **d.options)
    return o, lse


def _gluon_tiles(plan: Plan, q, k, v, x) -> tuple | None:
    """(the block mask in the Gluon kernels' tiles -- launch_gluon.tile_mask --, its strides,
    the query kernels' program order) where q, k, v and x (the forward's q again, the
    backward's dO) are in tma_mode's 2-D form over those tiles and the mask has them; None
    otherwise."""
    if tma_mode(q, k, v, x, launch_gluon.TILE, launch_gluon.TILE_N, plan.interpret, "2d") != 2:
        return None
    m = launch_gluon.tile_mask(plan)
    if m is None:
        return None
    return m, _mask_strides(m.kv_num_blocks, m.kv_indices), _query_head_group(plan, q, k)


memo.register(sys.modules[__name__], ("TMA", "TMA_MIN_SCORES", "TMA_HEAD_DIMS", "TMA_BACKWARD",
                                     "HEAD_GROUP"))


def unit_stride(x: torch.Tensor) -> torch.Tensor:
    """x with unit stride along its last dim (the kernels' layout), copied only if needed."""
    return x if x.stride(-1) == 1 else x.contiguous()


class Recorder:
    """Stands in for a kernel module: `rec.<kernel>[grid](*args, **kwargs)` records the call
    (run forward / backward on meta tensors with it to learn the launches a call will make)."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name: str):
        calls = self.calls

        class _Launch:
            def __getitem__(self, grid):
                return lambda *args, **kwargs: calls.append((name, args, kwargs))
        return _Launch()


def recorded_jobs(module, calls) -> list:
    """The recorded launches of `module`'s kernels as compile jobs for the worker pool
    (runtime/parallel_compile.py): tensors by dtype, numbers as they are."""
    from cherenkov.runtime.parallel_compile import Job, tensor_arg

    def arg(a):
        return tensor_arg(a.dtype) if isinstance(a, torch.Tensor) else a
    return [Job(module.SOURCE_PATH, module.__name__, name, tuple(map(arg, args)),
                tuple(kwargs.items())) for name, args, kwargs in calls]


def natural_lse(lse2: torch.Tensor) -> torch.Tensor:
    """Internal log2 LSE (+inf on empty rows) -> natural-log LSE (-inf on empty rows)."""
    return torch.where(torch.isinf(lse2), float("-inf"), lse2 * LN2)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
