"""Kernel IR → readable Triton source.

Pointwise kernels (R == 1) tile x in 1-D blocks. Reduction kernels tile (XBLOCK, RBLOCK):
persistent when a whole row fits in one tile, otherwise looped: reductions are staged (a
reduction whose input needs an earlier reduction runs in a later loop over r), each loop
recomputing the xr-level values it needs -- the same statements, so the same numerics.
Scan kernels (a cumsum) walk r in order with a carry (triton_scan.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from cherenkov.codegen import indexing as ix
from cherenkov.codegen.kernel_ir import (Cast, Compute, Constant, IndexValue, Kernel, Load,
                                         Reduce, Store, inputs_of,
                                         per_element_closure)
from cherenkov.codegen.triton_helpers import FLOORDIV_F, SCAN_HELPERS
from cherenkov.codegen.triton_ops import const_literal, register_type, render_op, storage_type
from cherenkov.codegen.triton_scan import scan_rows
from cherenkov.ir.ops import Op

INT32_LIMIT = 2 ** 31 - 1


@dataclass(frozen=True)
class BlockConfig:
    XBLOCK: int
    RBLOCK: int = 1
    persistent: bool = True
    num_warps: int = 4
    transposed: bool = False    # tiles (RBLOCK, XBLOCK): x fastest, for column reductions
    stages: int = 0             # > 0: loops are tl.range(..., num_stages=stages), which
                                # software-pipelines every load in them (a plain range
                                # pipelines only loads feeding a dot)
    unroll: int = 0             # > 1: loops over r unrolled so many times (loop_unroll_factor)


@dataclass
class RenderedKernel:
    name: str
    source: str
    arg_names: list[str]        # buffer names in parameter order
    grid: int
    num_warps: int


# max and min propagate NaN as PyTorch's do (tl.max / tl.maximum drop it: a NaN activation
# through relu or clamp came back a number); PRELUDE defines the NaN-propagating forms
REDUCE_FN = {Op.SUM: "tl.sum", Op.MAX: "_max", Op.MIN: "_min", Op.ANY: "tl.max",
             Op.ALL: "tl.min", Op.PROD: "_prod"}


def arg_extreme_fill(op: Op, dtype: torch.dtype) -> str:
    """What masked-off lanes hold for argmax (lowest value) / argmin (highest value)."""
    if dtype.is_floating_point:
        return "float('-inf')" if op == Op.ARGMAX else "float('inf')"
    return "-9223372036854775807" if op == Op.ARGMAX else "9223372036854775807"


IDENTITY = {Op.SUM: "0", Op.PROD: "1", Op.MAX: "float('-inf')", Op.MIN: "float('inf')",
            Op.ANY: "0", Op.ALL: "1"}


def identity(op: Op, dtype: torch.dtype) -> str:
    """The reduction's identity for values of `dtype`: an integer max starts at the dtype's
    least value, not -inf (tl.full(-inf, tl.int64) does not compile)."""
    if op in (Op.MAX, Op.MIN) and not dtype.is_floating_point:
        if dtype == torch.bool:
            return "0" if op == Op.MAX else "1"
        info = torch.iinfo(dtype)
        return str(info.min if op == Op.MAX else info.max)
    return IDENTITY[op]


# a running value `a` and the next values `v` of a reduction, combined elementwise
COMBINE = {Op.SUM: "{a} + {v}", Op.PROD: "{a} * {v}", Op.MAX: "_maximum({a}, {v})",
           Op.MIN: "_minimum({a}, {v})", Op.ANY: "tl.maximum({a}, {v})",
           Op.ALL: "tl.minimum({a}, {v})"}


def _at_extreme(v: str, m: str) -> str:
    """Lanes of `v` at its reduced extreme `m`, a NaN being the extreme (as in PyTorch's
    argmax/argmin, which point at the first NaN)."""
    return f"(({v} == {m}) | (({v} != {v}) & ({m} != {m})))"


class _Renderer:
    def __init__(self, kernel: Kernel, config: BlockConfig):
        self.k = kernel
        self.cfg = config
        self.pointwise = kernel.R == 1
        self.lines: list[str] = []
        self.names = {b.name: f"in_{i}" for i, b in enumerate(kernel.inputs)}
        self.names.update({b.name: f"out_{i}" for i, b in enumerate(kernel.outputs)})
        self.stmt_of = {getattr(s, "out", None): s for s in kernel.body}
        self.out_dtype = {b.name: b.dtype for b in kernel.outputs}
        self.load_fill, self.prefilled = self._prefills()

    def _prefills(self) -> tuple[dict, set]:
        """Loads whose masked-off lanes may as well hold a reduction's identity: {load: fill}
        (its `other=`), and the reductions that then read them with no select of their own.
        A sum, max or min whose input is a float load, through float casts only (which keep 0
        and -inf), at the reduction's own mask. What masked-off lanes hold is never read
        otherwise (stores and every other reduction mask them), and the select costs: the
        looped logsumexp of a cross-entropy ran 3% faster without it on the H200
        (bench/results/2026-11-30_ce_variants_h200_28ed26c.txt)."""
        fills, direct = {}, set()
        for s in self.k.body:
            if not isinstance(s, Reduce) or s.op not in (Op.SUM, Op.MAX, Op.MIN):
                continue
            v = s.src
            while isinstance(self.stmt_of.get(v), Cast) and self.k.dtypes[v].is_floating_point \
                    and self.k.dtypes[self.stmt_of[v].src].is_floating_point:
                v = self.stmt_of[v].src
            load = self.stmt_of.get(v)
            if isinstance(load, Load) and load.mask is None and self.k.levels.get(v) == "xr" \
                    and self.k.dtypes[v].is_floating_point \
                    and fills.setdefault(v, IDENTITY[s.op]) == IDENTITY[s.op]:
                direct.add(s.out)
        return fills, direct

    def identity(self, s: Reduce) -> str:
        return identity(s.op, self.k.dtypes[s.src])

    def masked(self, s: Reduce, v: str, fill: str | None = None) -> str:
        """Reduction `s`'s input `v` with masked-off lanes at `fill` (default: its identity);
        as it is when its load filled them (a prefilled reduction reads its source unchanged)."""
        if s.out in self.prefilled:
            return v
        return f"tl.where(xmask & rmask, {v}, {self.identity(s) if fill is None else fill})"

    # ---- shapes of levels -----------------------------------------------------------------
    def mask_of(self, level: str) -> str | None:
        if level == "c":
            return None
        if level == "x" or self.pointwise:
            return "xmask"
        return "xmask & rmask"

    def full_shape(self, level: str) -> str:
        """Tile shape of a value at `level`; constants are one-element blocks of the same rank."""
        if self.pointwise:
            return "[1]" if level == "c" else "[XBLOCK]"
        return {"xr": "[XBLOCK, RBLOCK]", "x": "[XBLOCK, 1]", "c": "[1, 1]"}[level]

    def index(self, e: ix.Lin) -> str:
        return ix.render(e, lambda n: {"x": "xindex", "r": "rindex"}.get(n, n))

    # ---- statements -----------------------------------------------------------------------
    def stmt(self, s, indent: str) -> None:
        k, out = self.k, getattr(s, "out", None)
        if isinstance(s, Load):
            level = k.levels[out]
            masks = [m for m in (self.mask_of(level), s.mask) if m]
            mask = " & ".join(masks)
            index = self.index(s.index)
            if self._index_level(s.index) != level or level == "c":
                # a constant (or row-constant) address read at a finer level: make the
                # pointer a block of the value's shape, so masks and results line up
                index = f"({index}) + tl.zeros({self.full_shape(level)}, tl.int32)"
            ptr = f"{self.names[s.buffer]} + ({index})"
            other = self.load_fill.get(out, "0")
            text = f"tl.load({ptr}, {mask}, other={other})" if mask else f"tl.load({ptr})"
            dtype = k.dtypes[out]
            if register_type(dtype) != storage_type(dtype):
                text += f".to({register_type(dtype)})"
            self.emit(indent, out, text)
        elif isinstance(s, IndexValue):
            text = self.index(s.index)
            level = k.levels[out]
            self.emit(indent, out, f"({text}) + tl.zeros({self.full_shape(level)}, tl.int64)"
                      if level != "c" else f"tl.full({self.full_shape('c')}, {text}, tl.int64)")
        elif isinstance(s, Constant):
            self.emit(indent, out, f"tl.full({self.full_shape('c')}, "
                                   f"{const_literal(s.value, s.dtype)}, "
                                   f"{register_type(s.dtype)})")
        elif isinstance(s, Compute):
            arg_dtypes = [k.dtypes[a] for a in s.args]
            self.emit(indent, out, render_op(s.op, list(s.args), k.dtypes[out], arg_dtypes))
        elif isinstance(s, Cast):
            src_t, dst = k.dtypes[s.src], s.dtype
            text = s.src
            if dst in (torch.float16, torch.bfloat16) and src_t != dst:
                via = "" if register_type(src_t) == "tl.float32" else ".to(tl.float32)"
                rounded = f"_bf16({s.src}{via})" if dst == torch.bfloat16 else \
                    f"{s.src}{via}.to({storage_type(dst)})"
                text = f"{rounded}.to(tl.float32)"                       # round, keep fp32
            elif register_type(dst) != register_type(src_t):
                text = f"{s.src}.to({register_type(dst)})"
            self.emit(indent, out, text)
        elif isinstance(s, Store):
            level = self.store_level(s)
            if level == "c":
                level = "x"
            mask = self.mask_of(level)
            value = s.src
            if k.levels.get(s.src, "c") != level:     # a row value written to every element
                value = f"tl.broadcast_to({s.src}, {self.full_shape(level)})"
            index = self.index(s.index)
            if self._index_level(s.index) != level:
                index = f"({index}) + tl.zeros({self.full_shape(level)}, tl.int32)"
            if s.mask:
                mask = f"{mask} & {s.mask}"
            if s.scatter not in ("add", "max", "min") and \
                    self.out_dtype.get(s.buffer) == torch.bfloat16:
                value = f"_bf16({value})"        # (the interpreter's store would truncate)
            fn = f"tl.atomic_{s.scatter}" if s.scatter in ("add", "max", "min") else "tl.store"
            self.lines.append(f"{indent}{fn}({self.names[s.buffer]} + ({index}), {value}, {mask})")

    def _index_level(self, e: ix.Lin) -> str:
        """The level of an index: r makes it per element, x per row; a run-time index value
        has the level of that value."""
        levels = {"xr" if n == "r" else "x" if n == "x" else self.k.levels.get(n, "x")
                  for n in ix.variables(e)}
        return "xr" if "xr" in levels else "x" if "x" in levels else "c"

    def store_level(self, s: Store) -> str:
        """A store runs at the finer of its value's level and its index's level."""
        levels = (self.k.levels.get(s.src, "c"), self._index_level(s.index))
        if self.pointwise:
            return "x"
        return "xr" if "xr" in levels else "x" if "x" in levels else "c"

    def emit(self, indent: str, out: str, text: str) -> None:
        self.lines.append(f"{indent}{out} = {text}")

    # ---- reductions -----------------------------------------------------------------------
    def reduce_value(self, s: Reduce) -> str:
        v = s.src
        if self.k.levels[v] != "xr":
            v = f"tl.broadcast_to({v}, [XBLOCK, RBLOCK])"
        return v

    def persistent_reduce(self, s: Reduce, indent: str) -> None:
        v = self.reduce_value(s)
        m = "xmask & rmask"
        src_t = self.k.dtypes[s.src]
        if s.op in (Op.ARGMAX, Op.ARGMIN):
            red = "_max" if s.op == Op.ARGMAX else "_min"
            fill = arg_extreme_fill(s.op, src_t)
            vv, mm = f"{s.out}_v", f"{s.out}_m"
            self.lines.append(f"{indent}{vv} = tl.where({m}, {v}, {fill})")
            self.lines.append(f"{indent}{mm} = {red}({vv}, 1)[:, None]")
            self.lines.append(f"{indent}{s.out} = tl.min(tl.where({_at_extreme(vv, mm)}, "
                              f"rindex + tl.zeros([XBLOCK, RBLOCK], tl.int64), {self.k.R}), 1)[:, None]")
            return
        if s.op in (Op.ANY, Op.ALL):
            v = f"({v} != 0).to(tl.int32)"
        text = f"{REDUCE_FN[s.op]}({self.masked(s, v)}, 1)[:, None]"
        if s.op in (Op.ANY, Op.ALL):
            text = f"({text} != 0)"
        self.emit(indent, s.out, text)

    # ---- whole kernel ---------------------------------------------------------------------
    def render(self) -> RenderedKernel:
        k, cfg = self.k, self.cfg
        wide = max([k.X * k.R] + [b.numel for b in k.inputs + k.outputs]) > INT32_LIMIT
        params = [self.names[b.name] for b in k.inputs + k.outputs]
        head = [f"@triton.jit", f"def {k.name}({', '.join(params + ['XBLOCK: tl.constexpr'] + ([] if self.pointwise else ['RBLOCK: tl.constexpr']))}):"]
        # looped reductions of one row per program index rows in 64 bits too: their per-row
        # address math is amortized over a long row, and the H200 ran the cross-entropy's
        # logsumexp 2-4% faster so (bench/results/2026-11-30_ce_variants_h200_28ed26c.txt);
        # a window's loop over its taps (blocks.taps_blocks) keeps 32-bit index math
        looped = not (self.pointwise or k.row_loop or cfg.persistent or cfg.transposed) \
            and cfg.XBLOCK == 1
        pid = "tl.program_id(0).to(tl.int64)" if wide or looped else "tl.program_id(0)"
        if self.pointwise:
            self.lines += [f"    xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)",
                           f"    xmask = xindex < {k.X}"]
            for s in k.body:
                self.stmt(s, "    ")
        elif k.row_loop:
            self.row_loop(pid)
        elif k.is_scan:
            scan_rows(self, pid)
        else:
            self.lines += [f"    xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
                           f"    xmask = xindex < {k.X}",
                           f"    rbase = tl.arange(0, RBLOCK)[None, :]"]
            if cfg.persistent:
                self.lines += ["    rindex = rbase", f"    rmask = rindex < {k.R}"]
                for s in k.body:
                    if isinstance(s, Reduce):
                        self.persistent_reduce(s, "    ")
                    else:
                        self.stmt(s, "    ")
            else:
                self.looped()
        lines = _transpose_tiles(self.lines) if cfg.transposed and not self.pointwise else self.lines
        source = "\n".join(head + lines) + "\n"
        grid = k.X // k.row_loop if k.row_loop else -(-k.X // cfg.XBLOCK)
        return RenderedKernel(k.name, source, [b.name for b in k.inputs + k.outputs], grid,
                              cfg.num_warps)

    def row_loop(self, pid: str) -> None:
        """Each program loops over its `Kernel.row_loop` rows, XBLOCK rows per step (the
        whole row in one tile): the row's statements as a persistent kernel has them, and the
        column partials (`Reduce.over_rows`) combined per r lane across the rows, stored
        after the loop."""
        k, rows, step = self.k, self.k.row_loop, self.cfg.XBLOCK
        over = {s.out: s for s in k.body if isinstance(s, Reduce) and s.over_rows}
        after = [s for s in k.body if isinstance(s, Store) and s.src in over]
        start = f"{pid} * {rows}"
        self.lines += ["    rbase = tl.arange(0, RBLOCK)[None, :]", "    rindex = rbase",
                       f"    rmask = rindex < {k.R}"]
        for s in over.values():
            self.lines.append(f"    {s.out}_acc = tl.full([1, RBLOCK], "
                              f"{self.identity(s)}, {self.acc_type(s)})")
        ind = "        "
        self.lines += [f"    for xi in {self.loop_range(f'0, {rows}, XBLOCK')}:",
                       f"{ind}xindex = {start} + xi + tl.arange(0, XBLOCK)[:, None]",
                       f"{ind}xmask = xindex < {k.X}"]
        for s in k.body:
            if getattr(s, "out", None) in over:
                a = f"{s.out}_acc"
                v = f"tl.where(xmask & rmask, {s.src}, {self.identity(s)})"
                if step > 1:                  # the step's rows first, then the running value
                    v = f"{REDUCE_FN[s.op]}({v}, 0)[None, :]"
                self.lines.append(f"{ind}{a} = " + COMBINE[s.op].format(a=a, v=v))
            elif isinstance(s, Reduce):
                self.persistent_reduce(s, ind)
            elif not (isinstance(s, Store) and s in after):
                self.stmt(s, ind)
        # the partials' stores index by the program's first row
        self.lines += [f"    xindex = {start} + tl.zeros([1, 1], tl.int32)",
                       f"    xmask = xindex < {k.X}"]
        for s in over.values():
            self.lines.append(f"    {s.out} = {s.out}_acc")
        for s in after:
            self.stmt(s, "    ")

    def loop_range(self, bounds: str) -> str:
        opts = ([f"num_stages={self.cfg.stages}"] if self.cfg.stages else []) + \
            ([f"loop_unroll_factor={self.cfg.unroll}"] if self.cfg.unroll > 1 else [])
        return f"tl.range({bounds}, {', '.join(opts)})" if opts else f"range({bounds})"

    def online_pairs(self) -> dict[str, Reduce]:
        """sum(exp(a - max(a))) reductions -> their max: computed together in one pass over r
        (running max, rescaled running sum), as online softmax does."""
        pairs = {}
        for s in self.k.body:
            if not (isinstance(s, Reduce) and s.op == Op.SUM):
                continue
            e = self.stmt_of.get(s.src)
            if not (isinstance(e, Compute) and e.op == Op.EXP):
                continue
            d = self.stmt_of.get(e.args[0])
            if not (isinstance(d, Compute) and d.op == Op.SUB):
                continue
            m = self.stmt_of.get(d.args[1])
            if (isinstance(m, Reduce) and m.op == Op.MAX and m.src == d.args[0]
                    and self.k.levels[m.src] == "xr"
                    and self.k.dtypes[m.src] in (torch.float32, torch.float16, torch.bfloat16)):
                pairs[s.out] = m
        return pairs

    def looped(self) -> None:
        k = self.k
        self.pairs = self.online_pairs()
        self.paired_max = {m.out: s for s, m in self.pairs.items()}
        stage: dict[str, int] = {}
        for s in k.body:
            out = getattr(s, "out", None)
            deps = inputs_of(s)
            st = max([stage.get(d, 0) for d in deps] + [0])
            if isinstance(s, Reduce):
                st += 1
            if out in self.pairs:
                st = stage[self.pairs[out].out]
            if out:
                stage[out] = st
        sinks: dict[int, list] = {}
        for s in k.body:
            if isinstance(s, Reduce) and s.out in self.pairs:
                continue                          # rides along with its max
            if isinstance(s, Reduce) and k.levels[s.src] == "xr":
                sinks.setdefault(stage[s.src], []).append(s)
            elif isinstance(s, Store) and self.store_level(s) == "xr":
                sinks.setdefault(stage.get(s.src, 0), []).append(s)
        last = max([stage.get(getattr(s, "out", None), 0) for s in k.body] + list(sinks) + [0])
        for st in range(last + 1):
            for s in k.body:      # x-level work of this stage, before its loop
                out = getattr(s, "out", None)
                if isinstance(s, Reduce):
                    if out in self.pairs:
                        continue                  # finished together with its max
                    if stage[out] == st and k.levels[s.src] != "xr":
                        self.persistent_reduce_x(s)
                    elif stage[out] == st:
                        self.finish_acc(s)
                    continue
                if isinstance(s, Store):
                    if self.store_level(s) != "xr" and stage.get(s.src, 0) == st:
                        self.stmt(s, "    ")
                    continue
                if k.levels[out] != "xr" and stage[out] == st:
                    self.stmt(s, "    ")
            if st in sinks:
                self.loop(sinks[st], stage)

    def persistent_reduce_x(self, s: Reduce) -> None:
        # reduction of a value constant along r: combine R copies
        v = s.src
        if s.op == Op.SUM:
            self.emit("    ", s.out, f"{v} * {self.k.R}")
        elif s.op in (Op.ARGMAX, Op.ARGMIN):
            self.emit("    ", s.out, "tl.zeros([XBLOCK, 1], tl.int64)")
        elif s.op in (Op.ANY, Op.ALL):
            self.emit("    ", s.out, f"({v} != 0)")
        elif s.op == Op.PROD:
            raise NotImplementedError("product of a value constant along the reduction")
        else:
            self.emit("    ", s.out, v)

    def loop(self, sinks, stage) -> None:
        k = self.k
        needed = per_element_closure(k, sinks)
        for s in sinks:
            if isinstance(s, Reduce):
                self.init_acc(s)
        self.lines += [f"    for roffset in {self.loop_range(f'0, {k.R}, RBLOCK')}:",
                       "        rindex = roffset + rbase", f"        rmask = rindex < {k.R}"]
        for s in k.body:
            if getattr(s, "out", None) in needed:
                self.stmt(s, "        ")
        for s in sinks:
            if isinstance(s, Reduce):
                self.update_acc(s)
            else:
                self.stmt(s, "        ")

    def acc_type(self, s: Reduce) -> str:
        if s.op in (Op.ANY, Op.ALL):
            return "tl.int32"
        return register_type(self.k.dtypes[s.src])

    def init_acc(self, s: Reduce) -> None:
        t = self.acc_type(s)
        if s.out in getattr(self, "paired_max", {}):
            total = self.paired_max[s.out]
            # one running max and sum per row, rescaled once per block: one exp per element
            # (a running max per lane would rescale, i.e. exp, every element twice)
            self.lines.append(f"    {s.out}_acc = tl.full([XBLOCK, 1], float('-inf'), tl.float32)")
            self.lines.append(f"    {total}_acc = tl.zeros([XBLOCK, 1], tl.float32)")
            return
        if s.op in (Op.ARGMAX, Op.ARGMIN):
            fill = arg_extreme_fill(s.op, self.k.dtypes[s.src])
            self.lines.append(f"    {s.out}_acc = tl.full([XBLOCK, RBLOCK], {fill}, {t})")
            self.lines.append(f"    {s.out}_idx = tl.zeros([XBLOCK, RBLOCK], tl.int64)")
            return
        self.lines.append(f"    {s.out}_acc = tl.full([XBLOCK, RBLOCK], "
                          f"{self.identity(s)}, {t})")

    def update_acc(self, s: Reduce) -> None:
        m, v, a = "xmask & rmask", s.src, f"{s.out}_acc"
        ind = "        "
        if s.out in getattr(self, "paired_max", {}):
            total = f"{self.paired_max[s.out]}_acc"
            # a row still all -inf rescales by exp(-inf - 0) = 0, never by exp(-inf + inf)
            self.lines += [
                f"{ind}{s.out}_v = {self.masked(s, v, IDENTITY[Op.MAX])}",
                f"{ind}{s.out}_new = _maximum({a}, _max({s.out}_v, 1)[:, None])",
                f"{ind}{s.out}_ref = tl.where({s.out}_new == float('-inf'), 0.0, {s.out}_new)",
                f"{ind}{total} = {total} * tl.exp({a} - {s.out}_ref) + "
                f"tl.sum(tl.exp({s.out}_v - {s.out}_ref), 1)[:, None]",
                f"{ind}{a} = {s.out}_new"]
            return
        if s.op in (Op.ARGMAX, Op.ARGMIN):
            cmp = ">" if s.op == Op.ARGMAX else "<"
            self.lines.append(f"{ind}{s.out}_take = ({m}) & (({v} {cmp} {a}) | "
                              f"(({v} != {v}) & ({a} == {a})))")       # the first NaN wins
            self.lines.append(f"{ind}{a} = tl.where({s.out}_take, {v}, {a})")
            self.lines.append(f"{ind}{s.out}_idx = tl.where({s.out}_take, rindex + "
                              f"tl.zeros([XBLOCK, RBLOCK], tl.int64), {s.out}_idx)")
            return
        if s.op in (Op.ANY, Op.ALL):
            v = f"({v} != 0).to(tl.int32)"
        masked = self.masked(s, v)
        self.lines.append(f"{ind}{a} = " + COMBINE[s.op].format(a=a, v=masked))

    def finish_acc(self, s: Reduce) -> None:
        a = f"{s.out}_acc"
        if s.out in getattr(self, "paired_max", {}):
            total = self.paired_max[s.out]
            self.lines += [f"    {s.out} = {a}", f"    {total} = {total}_acc"]
            return
        if s.op in (Op.ARGMAX, Op.ARGMIN):
            red, mm = ("_max" if s.op == Op.ARGMAX else "_min"), f"{s.out}_m"
            self.lines.append(f"    {mm} = {red}({a}, 1)[:, None]")
            self.lines.append(f"    {s.out} = tl.min(tl.where({_at_extreme(a, mm)}, {s.out}_idx, "
                              f"{self.k.R}), 1)[:, None]")
            return
        text = f"{REDUCE_FN[s.op]}({a}, 1)[:, None]"
        if s.op in (Op.ANY, Op.ALL):
            text = f"({text} != 0)"
        self.lines.append(f"    {s.out} = {text}")


TRANSPOSE = [("[XBLOCK, RBLOCK]", "[RBLOCK, XBLOCK]"), ("[XBLOCK, 1]", "[1, XBLOCK]"),
             (", 1)[:, None]", ", 0)[None, :]"), (", axis=1)", ", axis=0)"),
             ("tl.arange(0, XBLOCK)[:, None]", "tl.arange(0, XBLOCK)[None, :]"),
             ("tl.arange(0, RBLOCK)[None, :]", "tl.arange(0, RBLOCK)[:, None]")]


def _transpose_tiles(lines: list[str]) -> list[str]:
    """The same kernel with tiles laid out (RBLOCK, XBLOCK) and reductions along axis 0.

    Triton's default layout makes the last tile axis the fastest-moving one across threads;
    when neighbouring x are neighbouring addresses (a column reduction), x must be that axis
    for the loads to coalesce. Every tile shape and reduction axis the renderer writes is one
    of the patterns below, so swapping them is a faithful transpose."""
    out = []
    for line in lines:
        for a, b in TRANSPOSE:
            line = line.replace(a, b)
        out.append(line)
    return out


PRELUDE = '''import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


''' + FLOORDIV_F + "\n\n" + SCAN_HELPERS


def render_triton(kernel: Kernel, config: BlockConfig) -> RenderedKernel:
    return _Renderer(kernel, config).render()
