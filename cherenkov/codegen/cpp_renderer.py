"""Kernel IR → readable C++: OpenMP-parallel rows, vectorizable loops over each row.

One `extern "C"` function per kernel, its parameters the buffers (inputs then outputs, in
`Kernel.inputs + Kernel.outputs` order). The loop nest reads the value levels directly:

    void k0(const float* __restrict in_0, float* __restrict out_0) {
      #pragma omp parallel for num_threads(ck_num_threads)
      for (int64_t x = 0; x < 8; ++x) {             // level "x": one scalar per row
        // stage 0: reductions over the row
        float t1_acc = -inf; ...
        #pragma omp simd reduction(max:t1_acc) ...
        for (int64_t r = 0; r < 16; ++r) { ... }     // level "xr": computed inside the r loop
        const float t1 = ...;
        // stage 1: ...
      }
    }

Level "c" values are computed once before the parallel loop. Reductions are staged like the
Triton renderer's looped mode: a reduction whose input needs an earlier reduction's result runs
in a later loop over r, and each loop recomputes the xr values it needs -- the same statements,
so the same numerics as every other stage. Index expressions address each input from the
start of its storage (they include the storage offset); outputs are contiguous.
"""
from __future__ import annotations

import torch

from cherenkov.codegen import indexing as ix
from cherenkov.codegen.cpp_columns import PARALLEL_MIN_ELEMENTS, ColumnLoops
from cherenkov.codegen.cpp_ops import (LOW_PRECISION, cast_expr, literal, load_expr,
                                       register_type, render_op, storage_type, store_expr)
from cherenkov.codegen.kernel_ir import (Cast, Compute, Constant, IndexValue, Kernel, Load,
                                         Reduce, Scan, Store, inputs_of,
                                         per_element_closure, scan_identity)
from cherenkov.ir.ops import Op

_RANK = {"c": 0, "x": 1, "xr": 2}
ROW_BUFFER_MAX = 16384     # elements of one row kept in a per-thread buffer (64 KB of fp32)
TRANSCENDENTAL = {Op.EXP, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P, Op.TANH,
                  Op.SIGMOID, Op.ERF, Op.ERFC, Op.POW, Op.SIN, Op.COS, Op.TAN, Op.SQRT, Op.RSQRT,
                  Op.DIV}
ATOMIC_TYPES = {torch.float32, torch.float64, torch.int64, torch.int32}
# a scan's step: combining its running value (a) with the next element (b)
SCAN_STEP = {Op.CUMSUM: "{a} + {b}", Op.CUMPROD: "{a} * {b}",
             Op.LOGCUMSUMEXP: "ck_logaddexp({a}, {b})", Op.CUMMAX: "ck_maximum({a}, {b})",
             Op.CUMMIN: "ck_minimum({a}, {b})"}
# ANY/ALL fold int flags with | and &: a bool ||/&& reduction stops gcc vectorizing the loop
_SIMD_CLAUSE = {Op.SUM: "+", Op.PROD: "*", Op.MAX: "max", Op.MIN: "min", Op.ANY: "|",
                Op.ALL: "&"}


class _Renderer(ColumnLoops):
    def __init__(self, kernel: Kernel):
        self.split = None           # x = x0 * d + x1 when the pointwise loop is split
        self.owned_columns = False  # a scatter whose threads own disjoint columns
        self.rows_kept: set[str] = set()       # xr values kept in row buffers between passes
        self.rows_written: set[str] = set()
        self.in_loop: set[str] = set()          # xr values declared in the current pass over r
        self.k = kernel
        self.names = {b.name: f"in_{i}" for i, b in enumerate(kernel.inputs)}
        self.names.update({b.name: f"out_{i}" for i, b in enumerate(kernel.outputs)})
        self.buffer_dtype = {b.name: b.dtype for b in kernel.inputs + kernel.outputs}
        self.stmt_of = {getattr(s, "out", None): s for s in kernel.body}
        self.lines: list[str] = []

    # ---- levels and stages ----------------------------------------------------------------
    def index_level(self, e: ix.Lin) -> str:
        names = ix.variables(e)
        if "r" in names or any(self.k.levels.get(n) == "xr" for n in names):
            return "xr"
        if "x" in names or any(self.k.levels.get(n) == "x" for n in names):
            return "x"
        return "c"

    def placement(self, s) -> str:
        """Where a statement runs: before the row loop ("c"), per row ("x"), per element."""
        if isinstance(s, Reduce):
            return "x"
        if isinstance(s, Store):
            level = max(self.k.levels.get(s.src, "c"), self.index_level(s.index), key=_RANK.get)
            return "x" if level == "c" else level        # a store always runs per row
        return self.k.levels[s.out]

    def stages(self) -> dict[int, int]:
        """Statement position -> stage: how many reductions precede it on any dependency path."""
        by_value: dict[str, int] = {}
        stage: dict[int, int] = {}
        for i, s in enumerate(self.k.body):
            st = max([by_value.get(d, 0) for d in inputs_of(s)] + [0])
            if isinstance(s, Reduce):
                st += 1
            stage[i] = st
            if getattr(s, "out", None):
                by_value[s.out] = st
        return stage

    def serial(self) -> bool:
        """Scatter-adds into types OpenMP cannot update atomically, and scatters that write
        (the last write to an element wins, as in eager on the CPU) or take a max / min, run
        the rows in order."""
        return any(isinstance(s, Store) and (s.scatter in ("set", "max", "min") or (
            s.scatter == "add" and self.buffer_dtype[s.buffer] not in ATOMIC_TYPES))
            for s in self.k.body)

    # ---- whole kernel ---------------------------------------------------------------------
    def render(self) -> str:
        k = self.k
        params = [f"const {storage_type(b.dtype)}* __restrict {self.names[b.name]}"
                  for b in k.inputs]
        params += [f"{storage_type(b.dtype)}* __restrict {self.names[b.name]}" for b in k.outputs]
        self.lines.append(f"// kernel {k.name}: {k.X} rows x {k.R} reduction elements, "
                          f"{k.fused_ops} fused ops")
        for text in str(k).splitlines()[1:]:
            self.lines.append(f"//   {text.strip().rstrip('#').rstrip()}")
        self.lines.append(f'extern "C" void {k.name}({", ".join(params)}) {{')
        body = k.body
        consts = [s for s in body if self.placement(s) == "c"]
        if consts:
            self.lines.append("  // values constant over the whole kernel")
            for s in consts:
                self.stmt(s, "  ")
        if self.column_form():
            self.columns()
            self.lines.append("}")
            return "\n".join(self.lines) + "\n"
        period = self.scatter_period()
        if period:
            self.scatter_by_columns(period)
            self.lines.append("}")
            return "\n".join(self.lines) + "\n"
        # a pointwise kernel's rows are its elements: vectorize across them too
        simd = " simd" if k.R == 1 and not any(isinstance(s, Store) and s.scatter
                                                for s in body) else ""
        if self.serial():
            self.lines.append("  // serial: a scatter's writes, or adds into 16-bit or bool "
                              "elements, in order")
        elif k.X * k.R >= PARALLEL_MIN_ELEMENTS and k.X > 1:
            self.lines.append(f"  #pragma omp parallel for{simd} num_threads(ck_num_threads) "
                              "schedule(static)")
        elif simd:
            self.lines.append("  #pragma omp simd")
        inner = self.inner_period() if simd and not self.serial() else 0
        if inner:
            # x = x0 * inner + x1: a value broadcast along the inner dim (a bias) is read at
            # x1 instead of x % inner, so the inner loop vectorizes for any element type
            self.split = ix.add(ix.mul(ix.var("x0", k.X // inner), inner), ix.var("x1", inner))
            if self.lines[-1].strip() == "#pragma omp simd":
                self.lines.pop()
            else:
                self.lines[-1] = self.lines[-1].replace(" simd", "")
            self.lines.append(f"  for (int64_t x0 = 0; x0 < {k.X // inner}; ++x0) {{")
            self.lines.append("    #pragma omp simd")
            self.lines.append(f"    for (int64_t x1 = 0; x1 < {inner}; ++x1) {{")
            self.row("      ")
            self.lines.append("    }")
        else:
            self.lines.append(f"  for (int64_t x = 0; x < {k.X}; ++x) {{")
            self.row("    ")
        self.lines.append("  }")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def inner_period(self) -> int:
        """The period d of `x % d` reads in a pointwise kernel (a broadcast operand), if any."""
        k = self.k
        if k.R != 1:
            return 0
        best = 0
        for s in k.body:
            index = getattr(s, "index", None)
            if index is None:
                continue
            for a, _ in index.terms:
                if (isinstance(a, ix.Mod) and a.expr == ix.var("x", k.X) and k.X % a.divisor == 0
                        and a.divisor >= 16):
                    best = max(best, a.divisor)
        return best

    def row(self, ind: str) -> None:
        """The body of one row: per stage, its row-level work, then one loop over r."""
        k = self.k
        stage = self.stages()
        placed = [(i, s, self.placement(s)) for i, s in enumerate(k.body)]
        last = max(stage.values(), default=0)
        passes = []
        for st in range(last + 1):
            passes.append([s for i, s, p in placed if (
                isinstance(s, Store) and p == "xr" and stage[i] == st) or (
                isinstance(s, Reduce) and k.levels.get(s.src) == "xr" and stage[i] == st + 1)])
        self.rows_kept = self.rows_to_keep([p for p in passes if p])
        self.rows_written: set[str] = set()
        for v in sorted(self.rows_kept):
            self.lines.append(f"{ind}alignas(64) {register_type(k.dtypes[v])} {v}_row[{k.R}];")
        for st in range(last + 1):
            row_work = [s for i, s, p in placed if p == "x" and stage[i] == st and
                        not (isinstance(s, Reduce) and k.levels.get(s.src) == "xr")]
            sinks = [s for i, s, p in placed if (
                isinstance(s, Store) and p == "xr" and stage[i] == st) or (
                isinstance(s, Reduce) and k.levels.get(s.src) == "xr" and stage[i] == st + 1)]
            if not row_work and not sinks:
                continue
            if last:
                self.lines.append(f"{ind}// stage {st}")
            for s in row_work:
                if isinstance(s, Reduce):
                    self.reduce_row_value(s, ind)
                else:
                    self.stmt(s, ind)
            if sinks:
                self.loop(sinks, ind)

    def closure(self, sinks: list, stop: set) -> set[str]:
        """The xr values a pass over r must compute; values in `stop` are read back from their
        row buffer, without their inputs."""
        return per_element_closure(self.k, sinks, stop)

    def rows_to_keep(self, passes: list[list]) -> set[str]:
        """xr values with a transcendental in them that several passes over r need: computed
        once into a row buffer (R <= ROW_BUFFER_MAX elements) instead of once per pass."""
        if self.k.R > ROW_BUFFER_MAX or len(passes) < 2:
            return set()
        count: dict[str, int] = {}
        for sinks in passes:
            for v in self.closure(sinks, set()):
                count[v] = count.get(v, 0) + 1
        costly = set()
        for s in self.k.body:
            out = getattr(s, "out", None)
            if out in count and isinstance(s, Compute) and (
                    s.op in TRANSCENDENTAL or any(a in costly for a in s.args)):
                costly.add(out)
        return {v for v in costly if count[v] > 1}

    def loop(self, sinks: list, ind: str) -> None:
        """One pass over r: recompute the xr values the sinks need (or read those kept in row
        buffers by an earlier pass), fold or store them."""
        k = self.k
        needed = self.closure(sinks, self.rows_written)
        self.in_loop = needed
        reductions = [s for s in sinks if isinstance(s, Reduce)]
        clauses = []
        for s in reductions:
            clauses += self.init_acc(s, ind)
        scalar = any(s.op in (Op.ARGMAX, Op.ARGMIN) for s in reductions)
        scans = [s for s in k.body if isinstance(s, Scan) and s.out in needed]
        for s in scans:
            dtype = k.dtypes[s.out]
            self.lines.append(f"{ind}{register_type(dtype)} {s.out}_run = "
                              f"{literal(scan_identity(s.op, dtype), dtype)};")
        if scalar:
            self.lines.append(f"{ind}// argmax/argmin: a scalar scan keeps the first extreme index")
        elif scans:
            self.lines.append(f"{ind}// running sums: each element needs the one before, in order")
        elif any(isinstance(s, Store) and s.scatter for s in sinks):
            self.lines.append(f"{ind}// scatter: lanes may hit one element, so no simd")
        else:
            self.lines.append(f"{ind}#pragma omp simd" + "".join(f" reduction({c})" for c in clauses))
        self.lines.append(f"{ind}for (int64_t r = 0; r < {k.R}; ++r) {{")
        inner = ind + "  "
        for s in k.body:
            out = getattr(s, "out", None)
            if out not in needed:
                continue
            if out in self.rows_written:
                self.declare(inner, out, f"{out}_row[r]")
                continue
            self.stmt(s, inner)
            if out in self.rows_kept:
                self.lines.append(f"{inner}{out}_row[r] = {out};")
        for s in sinks:
            if isinstance(s, Reduce):
                self.update_acc(s, inner)
            else:
                self.stmt(s, inner)
        self.lines.append(f"{ind}}}")
        self.in_loop = set()
        self.rows_written |= needed & self.rows_kept
        for s in reductions:
            self.finish_acc(s, ind)

    # ---- statements -----------------------------------------------------------------------
    def index(self, e: ix.Lin) -> str:
        """C++ for an index expression; floor division/modulo made explicit where C differs."""
        e = ix.as_lin(e)
        if self.split is not None:
            e = ix.substitute(e, "x", self.split)
        parts = []
        for a, c in e.terms:
            if isinstance(a, (ix.Var, ix.Dyn)):
                text = a.name
            elif isinstance(a, ix.Within):
                text = f"({self.index(a.expr)})"
            else:
                inner = self.index(a.expr)
                nonneg = ix.rng(a.expr)[0] >= 0
                if isinstance(a, ix.Div):
                    text = f"({inner}) / {a.divisor}" if nonneg else \
                        f"ck_floordiv_i<int64_t, int64_t>({inner}, {a.divisor})"
                else:
                    text = f"({inner}) % {a.divisor}" if nonneg else \
                        f"ck_mod_i<int64_t, int64_t>({inner}, {a.divisor})"
                text = f"({text})"
            parts.append(text if c == 1 else f"{text} * {c}")
        if e.const or not parts:
            parts.append(str(e.const))
        return " + ".join(parts).replace("+ -", "- ")

    def stored(self, value: str, dtype: torch.dtype) -> str:
        """The bits a store of `value` writes into a `dtype` buffer. A value cast to the
        buffer's 16-bit float type is stored from the cast's source, rounded once: rounding it
        again would give the same bits, but the compiler cannot tell, and keeps both."""
        cast = self.stmt_of.get(value)
        if (isinstance(cast, Cast) and dtype in LOW_PRECISION and cast.dtype == dtype
                and (self.k.levels.get(cast.src, "c") in ("c", "x") or cast.src in self.in_loop)):
            return store_expr(f"static_cast<float>({cast.src})", dtype)
        return store_expr(value, dtype)

    def declare(self, ind: str, out: str, text: str) -> None:
        self.lines.append(f"{ind}const {register_type(self.k.dtypes[out])} {out} = {text};")

    def stmt(self, s, ind: str) -> None:
        k, out = self.k, getattr(s, "out", None)
        if isinstance(s, Load):
            dtype = self.buffer_dtype[s.buffer]
            elem = load_expr(f"{self.names[s.buffer]}[{self.index(s.index)}]", dtype)
            if s.mask:       # masked-off elements read as 0 and touch no memory
                elem = f"{s.mask} ? {elem} : {register_type(k.dtypes[out])}(0)"
            self.declare(ind, out, elem)
        elif isinstance(s, IndexValue):
            self.declare(ind, out, self.index(s.index))
        elif isinstance(s, Constant):
            self.declare(ind, out, literal(s.value, s.dtype))
        elif isinstance(s, Compute):
            arg_dtypes = [k.dtypes[a] for a in s.args]
            self.declare(ind, out, render_op(s.op, list(s.args), k.dtypes[out], arg_dtypes))
        elif isinstance(s, Cast):
            self.declare(ind, out, cast_expr(s.src, k.dtypes[s.src], s.dtype))
        elif isinstance(s, Scan):
            run = f"{out}_run"
            self.lines.append(f"{ind}{run} = {SCAN_STEP[s.op].format(a=run, b=s.src)};")
            self.declare(ind, out, run)
        elif isinstance(s, Store):
            if s.mask:                      # a run-time index out of range writes nothing
                self.lines.append(f"{ind}if ({s.mask}) {{")
                self.store(s, ind + "  ")
                self.lines.append(f"{ind}}}")
            else:
                self.store(s, ind)
        else:
            raise TypeError(f"unexpected statement {s!r}")

    def store(self, s: Store, ind: str) -> None:
        dtype = self.buffer_dtype[s.buffer]
        target = f"{self.names[s.buffer]}[{self.index(s.index)}]"
        if s.scatter in ("max", "min"):     # in order (`serial`, or columns owned)
            value = f"ck_{s.scatter}imum({load_expr(target, dtype)}, {s.src})"
            self.lines.append(f"{ind}{target} = {store_expr(value, dtype)};")
        elif not s.atomic_add:
            self.lines.append(f"{ind}{target} = {self.stored(s.src, dtype)};")
        elif dtype in ATOMIC_TYPES and not self.owned_columns:  # rows may collide on one element: add atomically
            self.lines.append(f"{ind}#pragma omp atomic")
            self.lines.append(f"{ind}{target} += {s.src};")
        else:                               # the row loop runs serially (see `serial`)
            value = f"{load_expr(target, dtype)} + {s.src}"
            self.lines.append(f"{ind}{target} = {store_expr(value, dtype)};")

    # ---- reductions -----------------------------------------------------------------------
    def acc_type(self, s: Reduce) -> str:
        if s.op in (Op.ANY, Op.ALL):
            return "int"
        if s.op in (Op.ARGMAX, Op.ARGMIN):
            return register_type(self.k.dtypes[s.src])
        return register_type(self.k.dtypes[s.out])

    def tracks_nan(self, s: Reduce) -> bool:
        """A float max/min keeps a NaN flag beside its accumulator (NaN wins, as in PyTorch)."""
        return s.op in (Op.MAX, Op.MIN) and self.k.dtypes[s.src].is_floating_point

    def init_acc(self, s: Reduce, ind: str) -> list[str]:
        """Declare the accumulators of `s`; return its `omp simd` reduction clauses."""
        t, a = self.acc_type(s), f"{s.out}_acc"
        floating = t in ("float", "double")
        if s.op in (Op.ARGMAX, Op.ARGMIN):
            start = "-" if s.op == Op.ARGMAX else ""
            fill = f"{start}std::numeric_limits<{t}>::infinity()" if floating else \
                f"std::numeric_limits<{t}>::{'lowest' if s.op == Op.ARGMAX else 'max'}()"
            self.lines += [f"{ind}{t} {a} = {fill};", f"{ind}int64_t {s.out}_idx = 0;"]
            return []
        self.lines.append(f"{ind}{t} {a} = {self.identity(s)};")
        if s.op in (Op.MAX, Op.MIN):
            clauses = [f"{_SIMD_CLAUSE[s.op]}:{a}"]
            if self.tracks_nan(s):      # NaN propagates, as in PyTorch: track it beside the max/min
                # an int flag with `|`: a bool `||` reduction stops gcc vectorizing the loop
                self.lines.append(f"{ind}int {s.out}_nan = 0;")
                clauses.append(f"|:{s.out}_nan")
            return clauses
        return [f"{_SIMD_CLAUSE[s.op]}:{a}"]

    def identity(self, s: Reduce) -> str:
        """The starting value of an accumulator of `s` (ARGMAX/ARGMIN excluded)."""
        t = self.acc_type(s)
        if s.op in (Op.MAX, Op.MIN):
            if t in ("float", "double"):
                return f"{'-' if s.op == Op.MAX else ''}std::numeric_limits<{t}>::infinity()"
            return f"std::numeric_limits<{t}>::{'lowest' if s.op == Op.MAX else 'max'}()"
        return {Op.SUM: "0", Op.PROD: "1", Op.ANY: "0", Op.ALL: "1"}[s.op]

    def as_type(self, value: str, ctype: str) -> str:
        same = register_type(self.k.dtypes[value]) == ctype
        return value if same else f"static_cast<{ctype}>({value})"

    def update_acc(self, s: Reduce, ind: str) -> None:
        a, v, t = f"{s.out}_acc", s.src, self.acc_type(s)
        floating = self.k.dtypes[s.src].is_floating_point
        if s.op in (Op.ARGMAX, Op.ARGMIN):
            cmp = ">" if s.op == Op.ARGMAX else "<"
            take = f"{v} {cmp} {a}" + (f" || ({v} != {v} && {a} == {a})" if floating else "")
            self.lines.append(f"{ind}if ({take}) {{ {a} = {v}; {s.out}_idx = r; }}")
        elif s.op in (Op.ANY, Op.ALL):
            self.lines.append(f"{ind}{a} {'|' if s.op == Op.ANY else '&'}= ({v} != 0);")
        else:
            nan = f"{s.out}_nan" if self.tracks_nan(s) else None
            self.lines += [ind + line for line in
                           self.fold(s.op, a, self.as_type(v, t), nan, f"({v} != {v})")]

    @staticmethod
    def fold(op: Op, acc: str, value: str, nan: str | None, is_nan: str) -> list[str]:
        """Statements folding `value` into `acc` for SUM/PROD/MAX/MIN; with `nan` (a flag
        beside a float max/min) also `nan |= is_nan`."""
        if op == Op.SUM:
            return [f"{acc} += {value};"]
        if op == Op.PROD:
            return [f"{acc} *= {value};"]
        cmp = ">" if op == Op.MAX else "<"
        return [f"{acc} = {value} {cmp} {acc} ? {value} : {acc};"] + (
            [f"{nan} |= {is_nan};"] if nan else [])

    def finish_acc(self, s: Reduce, ind: str) -> None:
        a = f"{s.out}_acc"
        if s.op in (Op.ARGMAX, Op.ARGMIN):
            self.declare(ind, s.out, f"{s.out}_idx")
        elif self.tracks_nan(s):
            t = self.acc_type(s)
            self.declare(ind, s.out, f"{s.out}_nan ? std::numeric_limits<{t}>::quiet_NaN() : {a}")
        else:
            self.declare(ind, s.out, a)

    def reduce_row_value(self, s: Reduce, ind: str) -> None:
        """A reduction of a value constant along r: R copies of it, combined."""
        v, R = s.src, self.k.R
        t = register_type(self.k.dtypes[s.out])
        if s.op == Op.SUM:
            text = f"static_cast<{t}>({v}) * static_cast<{t}>({R})"
        elif s.op == Op.PROD:
            self.lines.append(f"{ind}{t} {s.out}_acc = 1;")
            self.lines.append(f"{ind}for (int64_t r = 0; r < {R}; ++r) {s.out}_acc *= {v};")
            text = f"{s.out}_acc"
        elif s.op in (Op.ARGMAX, Op.ARGMIN):
            text = "0"
        elif s.op in (Op.ANY, Op.ALL):
            text = f"({v} != 0)"
        else:
            text = v
        self.declare(ind, s.out, text)


def render_cpp(kernel: Kernel) -> str:
    """C++ source of one kernel: an `extern "C" void <kernel.name>(buffers...)` function.

    It needs `cpp_ops.PRELUDE` above it (helpers and `ck_num_threads`); `cpp_build` puts one
    prelude and every kernel of a graph into one translation unit."""
    if not kernel.name.isidentifier():
        raise ValueError(f"kernel name {kernel.name!r} is not a C identifier")
    return _Renderer(kernel).render()
