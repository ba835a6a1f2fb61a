"""Kernels whose loops run in another order than the row-major nest of `cpp_renderer`.

- Column reductions (a bias or LayerNorm-weight gradient: loads step a row length along r):
  looping r inside each x would stride through memory, so each thread folds a block of rows
  into its own partial row of every reduction (the inner loop walks contiguous columns) and
  one pass over the columns combines the partials in thread order.
- Scatters of whole rows (an embedding backward: element x goes to row f(x // C), column
  x % C; a row assignment x[idx] = v): threads own disjoint column ranges, so no two write
  into one element -- no atomics, rows in order.

A mixin of `cpp_renderer._Renderer`: it uses the renderer's statement and reduction helpers.
"""
from __future__ import annotations

from cherenkov.codegen import indexing as ix
from cherenkov.codegen.kernel_ir import Constant, IndexValue, Load, Reduce, Store, inputs_of
from cherenkov.ir.ops import Op

PARALLEL_MIN_ELEMENTS = 1 << 15     # below this, thread start-up costs more than it saves


class ColumnLoops:
    # ---- scatters of whole rows: threads own columns --------------------------------------
    def scatter_period(self) -> int:
        """C when the kernel adds (or writes) element x into row f(x // C), column x % C (an
        embedding backward: each token's gradient row into its vocabulary row): threads that
        own disjoint column ranges then never write the same element -- no atomics, and
        colliding writes land in row order."""
        k = self.k
        stores = [s for s in k.body if isinstance(s, Store) and s.scatter]
        if k.R != 1 or len(stores) != 1:
            return 0
        x = ix.var("x", k.X)
        cols = [(a, c) for a, c in stores[0].index.terms
                if isinstance(a, ix.Mod) and a.expr == x]
        if len(cols) != 1 or cols[0][1] != 1:
            return 0
        period = cols[0][0].divisor
        if period < 2 or k.X % period:
            return 0
        rest = ix.add(stores[0].index, ix.mul(ix.atom(cols[0][0]), -1))
        return period if self.row_only(rest, period, set()) else 0

    def row_only(self, e, period: int, seen: set) -> bool:
        """Whether `e` depends on x only through x // period (x // d for d a multiple of it)."""
        x = ix.var("x", self.k.X)
        for a, _ in ix.as_lin(e).terms:
            if isinstance(a, ix.Var):
                if a.name == "x":
                    return False
            elif isinstance(a, ix.Dyn):
                if not self.row_only_value(a.name, period, seen):
                    return False
            elif isinstance(a, ix.Div) and a.expr == x:
                if a.divisor % period:
                    return False
            elif not self.row_only(a.expr, period, seen):
                return False
        return True

    def row_only_value(self, name: str, period: int, seen: set) -> bool:
        if name in seen or self.k.levels.get(name) == "c":
            return True
        seen.add(name)
        s = self.stmt_of.get(name)
        if isinstance(s, (Load, IndexValue)):
            return self.row_only(s.index, period, seen) and (
                not getattr(s, "mask", None) or self.row_only_value(s.mask, period, seen))
        if isinstance(s, Constant):
            return True
        return s is not None and all(self.row_only_value(d, period, seen) for d in inputs_of(s))

    def scatter_by_columns(self, period: int) -> None:
        k = self.k
        self.owned_columns = True
        self.split = ix.add(ix.mul(ix.var("x0", k.X // period), period), ix.var("x1", period))
        self.lines += [
            "  // scatter of whole rows: each thread owns a range of columns, so no two",
            "  // threads write into one element (no atomics; rows in order, deterministic)",
            "  #pragma omp parallel num_threads(ck_num_threads)",
            "  {",
            "    const int64_t nth = ck_thread_count(), tid = ck_thread_id();",
            f"    const int64_t c0 = {period} * tid / nth, c1 = {period} * (tid + 1) / nth;",
            f"    for (int64_t x0 = 0; x0 < {k.X // period}; ++x0) {{",
            "      #pragma omp simd",
            "      for (int64_t x1 = c0; x1 < c1; ++x1) {"]
        self.row("        ")
        self.lines += ["      }", "    }", "  }"]

    # ---- column reductions: rows outer, columns inner -------------------------------------
    def column_form(self) -> bool:
        """A kernel that reduces down columns (its loads step a row length along r) with one
        stage of plain reductions: looping over r inside each x would stride through memory,
        so it is rendered with the loops swapped (see `columns`)."""
        from cherenkov.codegen.blocks import is_column_reduction
        k = self.k
        if k.R == 1 or k.X < 8 or k.X * k.R < PARALLEL_MIN_ELEMENTS or self.serial():
            return False
        if not is_column_reduction(k):
            return False
        stage = self.stages()
        for i, s in enumerate(k.body):
            p = self.placement(s)
            if isinstance(s, Reduce):
                if s.op not in (Op.SUM, Op.PROD, Op.MAX, Op.MIN) or stage[i] != 1 \
                        or k.levels.get(s.src) != "xr":
                    return False
            elif p == "xr" and (stage[i] != 0 or isinstance(s, Store)):
                return False
        return True

    def columns(self) -> None:
        """Each thread folds a contiguous block of rows into its own partial row of every
        reduction (the inner loop walks columns: contiguous, vectorized); then one pass over
        the columns combines the partials in thread order and runs the per-column rest."""
        k = self.k
        reductions = [s for s in k.body if isinstance(s, Reduce)]
        needed = self.full_closure(reductions)
        self.lines.append("  // column reduction: rows split across threads, columns inner")
        self.lines.append(f"  const int nt = ck_num_threads < {k.R} ? ck_num_threads : {k.R};")
        for s in reductions:
            t = self.part_type(s)
            self.lines.append(f"  std::vector<{t}> {s.out}_part((size_t)nt * {k.X}, "
                              f"{self.identity(s)});")
            if self.tracks_nan(s):
                self.lines.append(f"  std::vector<int> {s.out}_nanp((size_t)nt * {k.X}, 0);")
        self.lines.append("  #pragma omp parallel num_threads(nt)")
        self.lines.append("  {")
        self.lines.append("    const int64_t tid = ck_thread_id();")
        for s in reductions:
            self.lines.append(f"    {self.part_type(s)}* __restrict {s.out}_p = "
                              f"{s.out}_part.data() + tid * {k.X};")
            if self.tracks_nan(s):
                self.lines.append(f"    int* __restrict {s.out}_n = {s.out}_nanp.data() + tid * {k.X};")
        self.lines.append("    #pragma omp for schedule(static)")
        self.lines.append(f"    for (int64_t r = 0; r < {k.R}; ++r) {{")
        self.lines.append("      #pragma omp simd")
        self.lines.append(f"      for (int64_t x = 0; x < {k.X}; ++x) {{")
        self.in_loop = {v for v in needed if k.levels.get(v) == "xr"}
        for s in k.body:
            if getattr(s, "out", None) in needed:
                self.stmt(s, "        ")
        for s in reductions:
            nan = f"{s.out}_n[x]" if self.tracks_nan(s) else None
            self.lines += ["        " + line for line in self.fold(
                s.op, f"{s.out}_p[x]", self.as_type(s.src, self.part_type(s)), nan,
                f"({s.src} != {s.src})")]
        self.in_loop = set()
        self.lines += ["      }", "    }", "  }"]
        if k.X >= PARALLEL_MIN_ELEMENTS // 16:
            self.lines.append("  #pragma omp parallel for num_threads(ck_num_threads) "
                              "schedule(static)")
        self.lines.append(f"  for (int64_t x = 0; x < {k.X}; ++x) {{")
        for s in k.body:
            if isinstance(s, Reduce):
                self.combine(s, "    ")
            elif self.placement(s) == "x":
                self.stmt(s, "    ")
        self.lines.append("  }")

    def full_closure(self, sinks) -> set[str]:
        """Every per-column or per-element value the sinks read (not the kernel constants)."""
        needed: set[str] = set()
        stack = [d for s in sinks for d in inputs_of(s)]
        while stack:
            d = stack.pop()
            if d in needed or self.k.levels.get(d) not in ("x", "xr"):
                continue
            needed.add(d)
            stack.extend(inputs_of(self.stmt_of[d]))
        return needed

    def part_type(self, s: Reduce) -> str:
        """Float sums down a column accumulate in double: each thread adds its rows one after
        another (no tree), so a float accumulator would lose ~R ulps where eager's cascade and
        the Triton renderer's tiles lose ~log R."""
        t = self.acc_type(s)
        return "double" if s.op == Op.SUM and t == "float" else t

    def combine(self, s: Reduce, ind: str) -> None:
        t, a = self.part_type(s), f"{s.out}_acc"
        self.lines.append(f"{ind}{t} {a} = {s.out}_part[x];")
        if self.tracks_nan(s):
            self.lines.append(f"{ind}int {s.out}_nan = {s.out}_nanp[x];")
        self.lines.append(f"{ind}for (int t = 1; t < nt; ++t) {{")
        at = f"(size_t)t * {self.k.X} + x"
        nan = f"{s.out}_nan" if self.tracks_nan(s) else None
        self.lines += [f"{ind}  " + line for line in self.fold(
            s.op, a, f"{s.out}_part[{at}]", nan, f"{s.out}_nanp[{at}]")]
        self.lines.append(f"{ind}}}")
        self.finish_acc(s, ind)
