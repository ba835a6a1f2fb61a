"""A matmul with the elementwise work that reads its result, as one Triton kernel.

    l = addmm(bias, x, w.t())            (M, N)
    y = cast(gelu(cast(reshape(l))))     everything computed from l element by element
  ->
    l, y = fused(x, w, bias, *leaves)    l stored only if something else reads it

`passes/matmul_epilogues.py` finds such regions and builds their epilogue as kernel IR over
the tile domain (X = M rows, R = N columns) with the fusion pass's own KernelBuilder; the
matmul's value there is a load from the stand-in buffer `ACC`. Rendering puts the matmul
template's main loop (`templates/matmul.py`'s, layouts and sizes written in) in front of the
renderer's own statements, the loads of `ACC` reading the accumulator tile rounded to the
matmul's dtype: the statements, and so the numbers, of the kernel that would otherwise read
the matmul's output back from memory.

    (`Epilogue.reference` runs that pair -- cuBLAS, then the epilogue kernel -- for checks and
    for timing the alternative.)
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import torch

from cherenkov.codegen.kernel_ir import Kernel, Load
from cherenkov.codegen.triton_ops import storage_type
from cherenkov.codegen.triton_renderer import (INT32_LIMIT, PRELUDE, BlockConfig, _Renderer,
                                               render_triton)
from cherenkov.ir.graph import Node, TensorMeta
from cherenkov.runtime.loader import load_module
from cherenkov.templates.tile_config import TileConfig

ACC = "acc_in"


@dataclass(frozen=True)
class Operand:
    """A matmul operand as the kernel reads it: `root`'s buffer through a strided view."""
    root: Node
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass
class Epilogue:
    mm: Node                     # the matmul node (mm / addmm) the region starts at
    a: Operand                   # (M, K)
    b: Operand                   # (K, N)
    bias: Operand | None         # addmm's bias, broadcast to (M, N)
    kernel: Kernel               # the epilogue's statements; loads of ACC are the matmul's value
    flat: Kernel                 # the same epilogue as the fusion pass would run it alone:
                                 # pointwise over M*N elements (`reference`)
    leaves: list[Node]           # roots the epilogue reads, in kernel.inputs order (ACC left out)
    stored: list[Node]           # values written, in output order (the matmul first if stored)
    members: list[Node]          # the region's nodes after the matmul (views included)

    @property
    def store_mm(self) -> bool:
        """Whether the matmul's own value is one of the stored values (then the first)."""
        return bool(self.stored) and self.stored[0] is self.mm

    @property
    def M(self) -> int:
        return self.a.shape[0]

    @property
    def N(self) -> int:
        return self.b.shape[1]

    @property
    def K(self) -> int:
        return self.a.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.mm.meta.dtype

    @property
    def roots(self) -> list[Node]:
        """The fused node's inputs, in call order."""
        return [self.a.root, self.b.root] + ([self.bias.root] if self.bias else []) + self.leaves

    @functools.cached_property
    def signature(self) -> str:
        """What identifies the kernel's work apart from its tile config (the tuning key)."""
        text = render(self, TileConfig(16, 16, 16), persistent=False, name="k")
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def reference(self, tensors: list[torch.Tensor], interpret: bool):
        """A callable running cuBLAS and then the epilogue as its own kernel (what runs
        without the template) on `tensors` (the roots); returns the stored values."""
        from cherenkov.codegen.blocks import choose_blocks
        a, b = (_view(t, op) for t, op in zip(tensors, (self.a, self.b)))
        bias = _view(tensors[2], self.bias) if self.bias else None
        leaves = tensors[2 + (self.bias is not None):]
        kernel = self.flat
        cfg = choose_blocks(kernel, interpret)
        rendered = render_triton(kernel, cfg)
        fn = getattr(load_module(PRELUDE + "\n\n" + rendered.source, interpret), rendered.name)
        names = [b_.name for b_ in kernel.inputs]
        leaf_names = [b_.name for b_ in self.kernel.inputs if b_.name != ACC]
        blocks = {"XBLOCK": cfg.XBLOCK} | ({"RBLOCK": cfg.RBLOCK} if kernel.R > 1 else {})

        def run():
            mm = torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)
            outs = allocate([n.meta for n in self.stored[int(self.store_mm):]], a.device)
            by_name = dict(zip(leaf_names, leaves)) | {ACC: mm}
            fn[(rendered.grid,)](*[by_name[n] for n in names], *outs, **blocks,
                                 num_warps=cfg.num_warps, enable_fp_fusion=True)
            return [mm] + outs if self.store_mm else outs
        return run


def _view(t: torch.Tensor, op: Operand) -> torch.Tensor:
    return t.as_strided(op.shape, op.strides, t.storage_offset() + op.offset)


def allocate(metas: list[TensorMeta], device) -> list[torch.Tensor]:
    """Uninitialized tensors laid out as `metas` say."""
    return [torch.empty_strided(m.shape, m.strides, dtype=m.dtype, device=device) for m in metas]


# -- rendering ------------------------------------------------------------------------------
def _address(op: Operand, rows: str, cols: str) -> str:
    """Offsets of a (rows, cols) tile; a stride-0 side (a broadcast operand) keeps its term,
    so the offsets have the tile's shape."""
    sr, sc = op.strides
    return f"{rows} * {sr} + {cols} * {sc}" + (f" + {op.offset}" if op.offset else "")


def tma_ready(ep: Epilogue) -> bool:
    """Whether A and B can be read through TMA descriptors: one unit stride each, the other
    stride and the view's start on 16 bytes (the copy engine's rule), no broadcast side."""
    for op in (ep.a, ep.b):
        size = op.root.meta.dtype.itemsize
        rows, cols = op.shape
        sr, sc = op.strides
        outer, extent = (sr, cols) if sc == 1 else (sc, rows) if sr == 1 else (0, 0)
        if outer < max(extent, 1) or (outer * size) % 16 or (op.offset * size) % 16:
            return False
    return True


def _descriptor(op: Operand, ptr: str, name: str, block: tuple[int, int]):
    """(the line making a TMA descriptor over `op`'s (rows, cols) view, a function giving the
    load of the block at (row, col)). A column-major view is described transposed and its
    tile transposed back after the load."""
    (rows, cols), (sr, sc) = op.shape, op.strides
    base = f"{ptr} + {op.offset}" if op.offset else ptr
    if sc == 1:
        return (f"{name} = tl.make_tensor_descriptor({base}, [{rows}, {cols}], [{sr}, 1], "
                f"[{block[0]}, {block[1]}])", lambda r, c: f"{name}.load([{r}, {c}])")
    return (f"{name} = tl.make_tensor_descriptor({base}, [{cols}, {rows}], [{sc}, 1], "
            f"[{block[1]}, {block[0]}])", lambda r, c: f"{name}.load([{c}, {r}]).T")


def render(ep: Epilogue, cfg: TileConfig, persistent: bool, name: str,
           interpret: bool = False) -> str:
    """Python source of a module defining kernel `name` (sizes, layouts and tiles written in;
    its parameters are the roots' pointers and the stored values', in that order).
    `interpret`: the operands go to tl.dot as fp32 (exact for half inputs): Triton's
    interpreter multiplies bf16 tiles wrongly (numpy has no bf16)."""
    M, N, K = ep.M, ep.N, ep.K
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    wide = max([M * N, M * K, K * N] + [b.numel for b in ep.kernel.inputs + ep.kernel.outputs]
               ) > INT32_LIMIT
    r = _Renderer(ep.kernel, BlockConfig(bm, bn, persistent=True))
    names = r.names
    leaf_params = [names[b.name] for b in ep.kernel.inputs if b.name != ACC]
    out_params = (["mm_out"] if ep.store_mm else []) + [names[b.name] for b in ep.kernel.outputs]
    params = ["a_ptr", "b_ptr"] + (["bias_ptr"] if ep.bias else []) + leaf_params + out_params
    tiles_m, tiles_n = -(-M // bm), -(-N // bn)
    group = cfg.group_m * tiles_n
    lines = [f"group_id = tile // {group}",
             f"first_m = group_id * {cfg.group_m}",
             f"group_size = tl.minimum({tiles_m} - first_m, {cfg.group_m})",
             f"pid_m = first_m + (tile % {group}) % group_size",
             f"pid_n = (tile % {group}) // group_size"]
    if wide:
        lines += ["pid_m = pid_m.to(tl.int64)", "pid_n = pid_n.to(tl.int64)"]
    tma = cfg.tma and tma_ready(ep)
    lines += [f"offs_m = pid_m * {bm} + tl.arange(0, {bm})",
              f"offs_n = pid_n * {bn} + tl.arange(0, {bn})"]
    precision = "tf32" if ep.a.root.meta.dtype == torch.float32 \
        and torch.backends.cuda.matmul.allow_tf32 else "ieee"
    if interpret:
        precision = "ieee"
    if tma:         # TMA: whole tiles by the copy engine, out-of-bounds parts read as zeros
        make_a, load_a = _descriptor(ep.a, "a_ptr", "a_desc", (bm, bk))
        make_b, load_b = _descriptor(ep.b, "b_ptr", "b_desc", (bk, bn))
        descriptors = [make_a, make_b]
        lines += [f"acc = tl.zeros(({bm}, {bn}), dtype=tl.float32)",
                  f"for kk in range(0, {-(-K // bk)}):",
                  f"    a = {load_a(f'pid_m * {bm}', f'kk * {bk}')}",
                  f"    b = {load_b(f'kk * {bk}', f'pid_n * {bn}')}"]
        if interpret:
            lines += ["    a = a.to(tl.float32)", "    b = b.to(tl.float32)"]
        lines += [f"    acc = tl.dot(a, b, acc, input_precision={precision!r})"]
    else:
        descriptors = []
        lines += _pointer_loop(ep, cfg, interpret, precision)
    lines += ["xindex = offs_m[:, None]", f"xmask = xindex < {M}"]
    return _finish(ep, cfg, persistent, name, r, lines, params, descriptors, tiles_m * tiles_n)


def _pointer_loop(ep: Epilogue, cfg: TileConfig, interpret: bool, precision: str) -> list[str]:
    """The main loop loading A and B tiles by pointers (masked on the last K step)."""
    M, N, K = ep.M, ep.N, ep.K
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    lines = [f"offs_k = tl.arange(0, {bk})",
              # a clamped index (tl.where) hides the run of consecutive addresses from
              # Triton: a row-major B then loads element by element (10x slower on the H200);
              # a side the tiles divide needs no clamp
              "a_rows = offs_m" if M % bm == 0 else f"a_rows = tl.where(offs_m < {M}, offs_m, 0)",
              "b_cols = offs_n" if N % bn == 0 else f"b_cols = tl.where(offs_n < {N}, offs_n, 0)",
              f"a_ptrs = a_ptr + ({_address(ep.a, 'a_rows[:, None]', 'offs_k[None, :]')})",
              f"b_ptrs = b_ptr + ({_address(ep.b, 'offs_k[:, None]', 'b_cols[None, :]')})",
              f"acc = tl.zeros(({bm}, {bn}), dtype=tl.float32)",
              f"for kk in range(0, {-(-K // bk)}):"]
    if K % bk == 0:
        lines += ["    a = tl.load(a_ptrs)", "    b = tl.load(b_ptrs)"]
    else:
        lines += [f"    k_left = {K} - kk * {bk}",
                  "    a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)",
                  "    b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)"]
    if interpret:
        lines += ["    a = a.to(tl.float32)", "    b = b.to(tl.float32)"]
    return lines + [f"    acc = tl.dot(a, b, acc, input_precision={precision!r})",
                    f"    a_ptrs += {bk * ep.a.strides[1]}",
                    f"    b_ptrs += {bk * ep.b.strides[0]}"]


def _finish(ep: Epilogue, cfg: TileConfig, persistent: bool, name: str, r: _Renderer,
            lines: list[str], params: list[str], descriptors: list[str], tiles: int) -> str:
    """The epilogue after the main loop (per column half with `epilogue_split` 2), and the
    kernel around it: descriptors made once per program, the tile loop when persistent."""
    M, N, bm, bn = ep.M, ep.N, cfg.block_m, cfg.block_n
    split = cfg.epilogue_split if bn % (2 * 16) == 0 else 1
    if split == 2:      # the epilogue per column half: half the values live at once
        sub = bn // 2
        lines.append(f"acc_0, acc_1 = tl.split(tl.permute(tl.reshape(acc, ({bm}, 2, {sub})), "
                     "(0, 2, 1)))")
        halves = [("acc_0", f"pid_n * {bn} + tl.arange(0, {sub})"),
                  ("acc_1", f"pid_n * {bn} + {sub} + tl.arange(0, {sub})")]
    else:
        sub, halves = bn, [("acc", "offs_n")]
    for tile_acc, cols in halves:
        lines += [f"rindex = ({cols})[None, :]", f"rmask = rindex < {N}"]
        lines += [line.replace("XBLOCK", str(bm)).replace("RBLOCK", str(sub))
                  for line in _epilogue_lines(ep, tile_acc, r)]
    head = [f'"""Generated by cherenkov.templates.fused_epilogue: {ep.mm.args[0]} '
            f'{M}x{ep.K}x{N}, {cfg}, persistent={persistent}."""', PRELUDE, "",
            "@triton.jit", f"def {name}({', '.join(params)}):", "    pid = tl.program_id(0)"]
    head += ["    " + line for line in descriptors]
    if persistent:
        head.append(f"    for tile in range(pid, {tiles}, tl.num_programs(0)):")
        indent = " " * 8
    else:
        head.append("    tile = pid")
        indent = " " * 4
    return "\n".join(head + [indent + line for line in lines]) + "\n"


def _epilogue_lines(ep: Epilogue, acc: str, r: _Renderer) -> list[str]:
    """The epilogue on the tile `acc` at (xindex, rindex): bias, rounding to the matmul's
    dtype (its float dtypes only: `passes/matmul_epilogues._is_matmul`), its store if kept,
    then the renderer `r`'s statements, its loads of ACC reading that value."""
    lines = []
    if ep.bias:
        lines.append(f"{acc} += tl.load(bias_ptr + ({_address(ep.bias, 'xindex', 'rindex')}), "
                     "xmask & rmask, other=0.0).to(tl.float32)")
    # the matmul's value as its output buffer would hold it: rounded to its dtype (the
    # prelude's _bf16 rounds to nearest even in the interpreter too)
    stype = storage_type(ep.dtype)
    lines.append(f"value = {acc}" if ep.dtype == torch.float32 else
                 f"value = _bf16({acc}).to(tl.float32)" if ep.dtype == torch.bfloat16 else
                 f"value = {acc}.to({stype}).to(tl.float32)")
    if ep.store_mm:
        lines.append(f"tl.store(mm_out + (xindex * {ep.N} + rindex), value.to({stype}), "
                     "xmask & rmask)")
    r.lines = lines
    for s in ep.kernel.body:
        if isinstance(s, Load) and s.buffer == ACC:
            lines.append(f"{s.out} = value")
        else:
            r.stmt(s, "")
    return lines


def programs(ep: Epilogue, cfg: TileConfig, persistent: bool, sm_count: int) -> int:
    tiles = -(-ep.M // cfg.block_m) * -(-ep.N // cfg.block_n)
    return min(tiles, sm_count) if persistent else tiles


# -- the runtime callable -------------------------------------------------------------------
def _scratch_allocator() -> None:
    """Device-side TMA descriptors live in a per-launch scratch buffer Triton asks an
    allocator for: torch's caching allocator, unless the program set one already."""
    import triton
    from triton.runtime import _allocation
    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        triton.set_allocator(lambda size, alignment, stream: torch.empty(
            size, dtype=torch.int8, device="cuda"))


class FusedMatmul:
    """The fused node's call: (*roots) -> stored values (a tuple, in `Epilogue.stored` order)."""

    def __init__(self, ep: Epilogue, cfg: TileConfig, interpret: bool, sm_count: int = 2):
        self.metas: list[TensorMeta] = [n.meta for n in ep.stored]
        self.arg_dtypes = [r.meta.dtype for r in ep.roots] + [m.dtype for m in self.metas]
        persistent = cfg.persistent and not interpret
        if cfg.tma and not interpret:
            _scratch_allocator()
        self.name = f"mm_epilogue_{ep.signature}"
        self.source = render(ep, cfg, persistent, self.name, interpret)
        self.module = load_module(self.source, interpret)
        fn = getattr(self.module, self.name)
        grid = programs(ep, cfg, persistent, sm_count)
        self.options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        if interpret:
            self.launch = functools.partial(fn[(grid,)], **self.options)
        else:
            from cherenkov.runtime.triton_launch import TritonLaunch
            self.launch = TritonLaunch(fn, grid, (), self.options, len(self.metas), False)
        self.__name__ = f"fused_mm[{ep.M}x{ep.K}x{ep.N}, {cfg}]"

    def job(self):
        """The kernel as a compile-worker job (`runtime/parallel_compile.py`): its arguments'
        dtypes and the launch's options, so the first launch finds it compiled."""
        from cherenkov.runtime.parallel_compile import Job, tensor_arg
        return Job(self.module.__file__, self.module.__name__, self.name,
                   tuple(tensor_arg(d) for d in self.arg_dtypes),
                   tuple(sorted(self.options.items())))

    def __call__(self, *roots):
        outs = allocate(self.metas, roots[0].device)
        self.launch(*roots, *outs)
        return tuple(outs)

    def __repr__(self) -> str:
        return self.__name__
