"""Block masks: which (q-block, kv-block) tiles of an attention matrix are empty, partial or full.

The kernels skip empty tiles, evaluate the mask_mod only on partial ones and run full tiles
unmasked. For every (b, h, q-block) the mask keeps the kv-blocks that are partial
(`kv_num_blocks`, `kv_indices`) and full (`full_kv_num_blocks`, `full_kv_indices`), the same
layout as FlexAttention's BlockMask, plus the transposed lists per (b, h, kv-block) for the
dK/dV kernel. A mask that does not vary with b (or h) is stored with that dimension 1.

`str(mask)` draws the tile pattern ('#' full, '+' partial, '.' empty), e.g. causal 256 x 256
with 64 x 64 tiles:

    BlockMask(B=1, H=1, Q=256, KV=256, block=(64, 64), sparsity 37.5%)
    #...
    +#..    (the diagonal tiles are partial; the picture is (b=0, h=0))

Building evaluates the mask_mod on broadcast index grids, a chunk of query rows at a time,
on the target device (or, on CUDA, with a generated Triton kernel: one program per tile).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import torch

log = logging.getLogger("cherenkov")

EMPTY, PARTIAL, FULL = 0, 1, 2
# Tiles of the default block mask. 64 x 64 (every D=128 kernel tile is 64 x 64) was faster
# than 128 x 64 on the H200 at B=4 H=16 S=4096 D=128 bf16, forward+backward: causal 385 vs
# 379 TFLOP/s, sliding window 334 vs 316, 8 documents 200 vs 183 (finer tiles skip more of
# a ragged mask; bench/results/2026-11-30_attention_h200_cd8950a.md).
DEFAULT_BLOCK = (64, 64)
_CHUNK_ELEMENTS = 1 << 26        # mask values evaluated at once by the torch builder


@dataclass
class BlockMask:
    state: torch.Tensor              # (Bm, Hm, nQ, nKV) int8: EMPTY / PARTIAL / FULL
    kv_num_blocks: torch.Tensor      # (Bm, Hm, nQ) int32
    kv_indices: torch.Tensor         # (Bm, Hm, nQ, nKV) int32, partial blocks first
    full_kv_num_blocks: torch.Tensor
    full_kv_indices: torch.Tensor
    q_num_blocks: torch.Tensor       # (Bm, Hm, nKV) int32: transposed, for dK/dV
    q_indices: torch.Tensor          # (Bm, Hm, nKV, nQ)
    full_q_num_blocks: torch.Tensor
    full_q_indices: torch.Tensor
    block: tuple[int, int]           # (BLOCK_Q, BLOCK_KV)
    shape: tuple[int, int, int, int]  # (B, H, Q_LEN, KV_LEN)
    mask_mod: object = None
    # the states are the mask_mod's own (built by `block_mask`): a full tile is one where the
    # mask_mod holds everywhere, so coarser tiles (`coarsened`) evaluating it give the same
    # answer (a FlexAttention mask may call tiles full that its mask_mod would not)
    exact: bool = False
    _coarse: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_state(cls, state: torch.Tensor, block, shape, mask_mod=None, exact: bool = False
                   ) -> "BlockMask":
        """Compact a tile-state tensor into index lists: per row, the tiles of a kind first
        (a stable partition; one generated kernel per direction on CUDA, `_compact` else)."""
        state = state.to(torch.int8)
        rows = cols = None
        if state.device.type == "cuda":
            try:
                rows, cols = _lists_triton(state, False), _lists_triton(state, True)
            except Exception as e:  # noqa: BLE001 -- no Triton for this GPU: the torch lists
                log.info("cherenkov: block lists in torch (%s: %s)", type(e).__name__, e)
        if rows is None:
            transposed = state.transpose(-1, -2)
            rows = _compact(state == PARTIAL) + _compact(state == FULL)
            cols = _compact(transposed == PARTIAL) + _compact(transposed == FULL)
        return cls(state, *rows, *cols, block=tuple(block), shape=tuple(shape),
                   mask_mod=mask_mod, exact=exact)

    def coarsened(self, rows: int, cols: int = 1) -> "BlockMask":
        """This mask with tiles of `rows` times as many query rows and `cols` times as many
        key columns (kept on the mask): a tile is empty where all its parts are, full where
        all are, partial otherwise. Only for `exact` masks (see above); on the device,
        without a sync. Columns past the last tile count as empty (a tile reaching past the
        keys is partial: the kernels mask keys past KV_LEN themselves)."""
        if rows == 1 and cols == 1:
            return self
        if not self.exact:
            raise ValueError("only masks built from their mask_mod by block_mask() coarsen")
        got = self._coarse.get((rows, cols))
        if got is None:
            state = self.state
            pad = -state.shape[2] % rows                 # repeat the last row block
            if pad:
                state = torch.cat([state, state[:, :, -1:].expand(-1, -1, pad, -1)], dim=2)
            pad = -state.shape[3] % cols
            if pad:
                state = torch.cat([state, torch.full_like(state[..., :pad], EMPTY)], dim=3)
            parts = state.unflatten(3, (-1, cols)).unflatten(2, (-1, rows))
            # (Bm, Hm, nQ', rows, nKV', cols)
            full = (parts == FULL).all(5).all(3)
            empty = (parts == EMPTY).all(5).all(3)
            coarse = torch.where(full, FULL, torch.where(empty, EMPTY, PARTIAL)).to(torch.int8)
            got = self._coarse[(rows, cols)] = BlockMask.from_state(
                coarse, (self.block[0] * rows, self.block[1] * cols), self.shape,
                self.mask_mod, exact=True)
        return got

    @property
    def device(self) -> torch.device:
        # a recording stand-in (attention/flex_op.py) has lists but no state
        return (self.state if self.state is not None else self.kv_num_blocks).device

    def to_dense(self) -> torch.Tensor:
        """The tile states as a (B, H, nQ, nKV) tensor (broadcast dimensions expanded)."""
        B, H = self.shape[:2]
        return self.state.expand(B, H, *self.state.shape[2:])

    def sparsity(self) -> float:
        """Fraction of tiles skipped (empty)."""
        return float((self.state == EMPTY).float().mean())

    def __str__(self) -> str:
        B, H, Q, KV = self.shape
        head = (f"BlockMask(B={B}, H={H}, Q={Q}, KV={KV}, block={self.block}, "
                f"sparsity {100 * self.sparsity():.1f}%)")
        return head + "\n" + picture(self.state[0, 0])

    __repr__ = __str__


def _compact(hit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(count, indices) per row of a boolean tensor: the hit positions first, in increasing
    order, then the others in increasing order -- a stable sort on "not hit", by one prefix
    sum and one scatter (a segmented sort is several kernels on a GPU)."""
    h = hit.to(torch.int32)
    num = h.sum(-1, dtype=torch.int32)
    before = torch.cumsum(h, -1, dtype=torch.int32) - h           # hits before each position
    at = torch.arange(hit.shape[-1], device=hit.device, dtype=torch.int32).expand_as(h)
    slot = torch.where(hit, before, num.unsqueeze(-1) + at - before)
    idx = torch.empty_like(h).scatter_(-1, slot.to(torch.int64), at)
    return num.contiguous(), idx.contiguous()


def _lists_triton(state: torch.Tensor, transposed: bool, interpret: bool = False) -> tuple:
    """(partial count, partial indices, full count, full indices) of every row of `state`
    (Bm, Hm, nQ, nKV), or of its transpose, from one generated kernel: the torch version is
    ~11 small kernels per list, 44 launches per mask (a 32k document mask built in 1.23 ms on
    the H200 with those, 0.98 ms with this kernel: bench/results/*_block_mask_h200_*.md)."""
    from .codegen import compile_mods
    _, kernels = compile_mods(None, None, interpret=interpret)
    state = state.contiguous()
    Bm, Hm, nq, nk = state.shape
    rows, n = (nk, nq) if transposed else (nq, nk)
    stride_row, stride_el = (1, nk) if transposed else (nk, 1)
    dev = state.device
    num_p = torch.empty(Bm, Hm, rows, dtype=torch.int32, device=dev)
    num_f = torch.empty_like(num_p)
    idx_p = torch.empty(Bm, Hm, rows, n, dtype=torch.int32, device=dev)
    idx_f = torch.empty_like(idx_p)
    block = max(16, 1 << (n - 1).bit_length())
    kernels._block_lists[(Bm * Hm * rows,)](state, num_p, idx_p, num_f, idx_f, rows, n,
                                            nq * nk, stride_row, stride_el, BLOCK=block)
    return num_p, idx_p, num_f, idx_f


def picture(state: torch.Tensor, max_cells: int = 32) -> str:
    """A text picture of one (nQ, nKV) state grid, at most max_cells per side (grouped)."""
    state = state.cpu()
    nq, nk = state.shape
    gq, gk = math.ceil(nq / max_cells), math.ceil(nk / max_cells)
    lines = []
    for i in range(0, nq, gq):
        row = []
        for j in range(0, nk, gk):
            cell = state[i:i + gq, j:j + gk]
            if bool((cell == FULL).all()):
                row.append("#")
            elif bool((cell == EMPTY).all()):
                row.append(".")
            else:
                row.append("+")
        lines.append("".join(row))
    return "\n".join(lines)


def _index_grids(B, H, q_rows: torch.Tensor, KV_LEN, device):
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    h = torch.arange(H, device=device).view(1, H, 1, 1)
    q = q_rows.view(1, 1, -1, 1)
    kv = torch.arange(KV_LEN, device=device).view(1, 1, 1, KV_LEN)
    return b, h, q, kv


def _state_torch(mask_mod, B, H, Q_LEN, KV_LEN, block, device) -> torch.Tensor:
    """Tile states by evaluating mask_mod on index grids, `rows` query rows at a time."""
    bq, bk = block
    nq, nk = math.ceil(Q_LEN / bq), math.ceil(KV_LEN / bk)
    kv_pad = nk * bk
    # Probe which of b, h the mask varies with, on one row.
    probe = torch.as_tensor(mask_mod(*_index_grids(B, H, torch.zeros(1, dtype=torch.long,
                                                                       device=device),
                                                   KV_LEN, device)))
    Bm = B if probe.dim() == 4 and probe.shape[0] == B and B > 1 else 1
    Hm = H if probe.dim() == 4 and probe.shape[1] == H and H > 1 else 1
    rows = max(1, _CHUNK_ELEMENTS // max(1, Bm * Hm * kv_pad * bq)) * bq
    states = []
    kv_all = torch.arange(kv_pad, device=device)
    kv_ok = (kv_all < KV_LEN).view(1, 1, 1, kv_pad)
    for start in range(0, nq * bq, rows):
        q_rows = torch.arange(start, min(start + rows, nq * bq), device=device)
        q_ok = (q_rows < Q_LEN).view(1, 1, -1, 1)
        b, h, q, kv = _index_grids(Bm, Hm, q_rows.clamp(max=Q_LEN - 1), KV_LEN, device)
        kv = kv_all.clamp(max=KV_LEN - 1).view(1, 1, 1, kv_pad)
        m = torch.as_tensor(mask_mod(b, h, q, kv), device=device).to(torch.bool)
        m = m.expand(Bm, Hm, q_rows.numel(), kv_pad)
        valid = q_ok & kv_ok
        tiles = lambda x: x.reshape(Bm, Hm, -1, bq, nk, bk)
        any_on = tiles(m & valid).any(dim=5).any(dim=3)
        all_on = tiles(m | ~valid).all(dim=5).all(dim=3)
        states.append(torch.where(all_on, FULL, torch.where(any_on, PARTIAL, EMPTY)))
    return torch.cat(states, dim=2).to(torch.int8)


def _state_triton(mask_mod, B, H, Q_LEN, KV_LEN, block, device) -> torch.Tensor:
    """Tile states from a generated Triton kernel (one program per tile): CUDA only."""
    from .codegen import compile_mods, kernel_mode
    from .launch import capture_args
    from .trace import depends_on
    mode, reason = kernel_mode(device)
    if mode is None:
        raise RuntimeError(reason)
    traced, kernels = compile_mods(None, mask_mod, interpret=mode == "interpret")
    deps = depends_on(traced.mask) if traced.mask is not None else set()
    Bm = B if "b" in deps else 1
    Hm = H if "h" in deps else 1
    bq, bk = block
    nq, nk = math.ceil(Q_LEN / bq), math.ceil(KV_LEN / bk)
    state = torch.empty(Bm, Hm, nq, nk, dtype=torch.int8, device=device)
    # one warp per tile: the tile's count needs no cross-warp reduction; the 32k document
    # mask's states on the H200 took 0.32 ms with 1 warp, 0.48 with 2, 0.86 with 4, 1.33 with
    # 8 (bench/results/2026-11-30_block_mask_h200_4b21f48.md)
    kernels._block_state[(nq * nk, Bm * Hm)](
        state, *capture_args(traced.captured, device), Q_LEN, KV_LEN, Hm, nk,
        BLOCK_Q=bq, BLOCK_KV=bk, num_warps=1, enable_fp_fusion=True)
    return state


@torch.compiler.disable           # built eagerly inside compiled code (see api.attention)
def block_mask(mask_mod, B: int, H: int, Q_LEN: int, KV_LEN: int, block=DEFAULT_BLOCK,
               device=None, use_kernel: bool | None = None) -> BlockMask:
    """Build the BlockMask of `mask_mod` for (B, H, Q_LEN, KV_LEN) attention.

    `block` = (BLOCK_Q, BLOCK_KV), powers of two >= 16. `use_kernel` picks the generated
    Triton builder (default: when kernels compile for the device and the mask_mod traces)
    over the torch one.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    bq, bk = block
    for size in block:
        if size < 16 or size & (size - 1):
            raise ValueError(f"block sizes must be powers of two >= 16, got {block}")
    if mask_mod is None:
        nq, nk = math.ceil(Q_LEN / bq), math.ceil(KV_LEN / bk)
        state = torch.full((1, 1, nq, nk), FULL, dtype=torch.int8, device=device)
        return BlockMask.from_state(state, block, (B, H, Q_LEN, KV_LEN), None, exact=True)
    if use_kernel is None:
        from .codegen import kernel_mode
        use_kernel = device.type == "cuda" and kernel_mode(device)[0] == "jit"
    state = None
    if use_kernel:
        from .trace import TraceError
        try:
            state = _state_triton(mask_mod, B, H, Q_LEN, KV_LEN, block, device)
        except TraceError:
            state = None
    if state is None:
        state = _state_torch(mask_mod, B, H, Q_LEN, KV_LEN, block, device)
    return BlockMask.from_state(state, block, (B, H, Q_LEN, KV_LEN), mask_mod, exact=True)
