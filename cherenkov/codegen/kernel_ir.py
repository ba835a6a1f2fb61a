"""Backend-neutral kernel IR: one kernel = an iteration domain and a list of SSA statements.

The domain is (X, R): X independent rows (`x`), each reducing over R elements (`r`); a
pointwise kernel has R == 1. A value lives at level "x" (one per row) or "xr" (one per
element); renderers turn levels into tile shapes (Triton) or loop nests (C++). Nothing here
knows about Triton. A scan (`Scan`, a cumsum) is per element too: its row's running sum up to
r; a kernel with one runs alone (fusion.py), its rows walked in order (with a carry between
chunks of r on the GPU).

    kernel k0 (X=8, R=16)
      t0 = load in0[r + x * 16]          # xr
      t1 = reduce_max t0                 # x
      t2 = sub t0 t1                     # xr
      store out0[r + x * 16] = t2
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cherenkov.codegen.indexing import Lin, render, variables
from cherenkov.ir.ops import Op


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    dtype: torch.dtype
    numel: int           # elements addressable (storage extent) for index-width decisions


@dataclass(frozen=True, slots=True)
class Load:
    out: str
    buffer: str
    index: Lin
    mask: str | None = None     # extra boolean value ANDed with the level's mask


@dataclass(frozen=True, slots=True)
class IndexValue:
    out: str
    index: Lin


@dataclass(frozen=True, slots=True)
class Constant:
    out: str
    value: object
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class Compute:
    out: str
    op: Op
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Cast:
    out: str
    src: str
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class Reduce:
    out: str
    op: Op           # SUM, PROD, MAX, MIN, ARGMAX, ARGMIN, ANY, ALL
    src: str
    # a row-loop kernel's column partial: combined over the rows a program loops over (per r
    # lane), not along r; its value is stored once, after the loop
    over_rows: bool = False


@dataclass(frozen=True, slots=True)
class Scan:
    out: str
    op: Op           # GroupOp.SCAN: src combined over r = 0 .. this lane's r, per row
    src: str


def scan_identity(op: Op, dtype: torch.dtype):
    """The value a scan's running value starts from (a max of ints from the least int)."""
    if op in (Op.CUMMAX, Op.CUMMIN) and not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return info.min if op == Op.CUMMAX else info.max
    return {Op.CUMSUM: 0, Op.CUMPROD: 1, Op.LOGCUMSUMEXP: float("-inf"),
            Op.CUMMAX: float("-inf"), Op.CUMMIN: float("inf")}[op]


@dataclass(frozen=True, slots=True)
class Store:
    buffer: str
    index: Lin
    src: str
    scatter: str | None = None  # at a run-time index, where two elements may meet: "add"
                                # (atomically added), "set" (written; one of them wins),
                                # "max" / "min" (atomically the max / min with what is there)
    mask: str | None = None     # a bool value: store only where it holds (a run-time index
                                # out of range writes nothing)

    @property
    def atomic_add(self) -> bool:
        return self.scatter == "add"


Statement = Load | IndexValue | Constant | Compute | Cast | Reduce | Scan | Store


@dataclass
class Kernel:
    name: str
    X: int
    R: int
    inputs: list[Buffer] = field(default_factory=list)
    outputs: list[Buffer] = field(default_factory=list)
    body: list[Statement] = field(default_factory=list)
    dtypes: dict[str, torch.dtype] = field(default_factory=dict)   # value -> IR dtype
    levels: dict[str, str] = field(default_factory=dict)           # value -> "c" | "x" | "xr"
    fused_ops: int = 0                                             # IR nodes computed inside
    # full-size pointwise values a reduction here does not read: computed at x*R + r, the
    # reduction's element only when it runs along rows
    unplaced: int = 0
    # > 0: a row-loop kernel -- each program loops over this many consecutive rows (x) with
    # the whole row (r) in one tile, and reduces its column partials over them
    row_loop: int = 0
    # > 0 (pointwise): a halves kernel -- lane x computes the elements j and j + halves/2 of a
    # row of `halves` elements (X counts lanes, half the elements)
    halves: int = 0

    @property
    def is_scan(self) -> bool:
        return any(isinstance(s, Scan) for s in self.body)

    @property
    def is_reduction(self) -> bool:
        return self.R > 1 or any(isinstance(s, Reduce) for s in self.body)

    def flops(self) -> int:
        """One operation per element each arithmetic statement or reduction computes."""
        return sum(self.X * (self.R if self.levels.get(s.out) == "xr" else 1)
                   for s in self.body if isinstance(s, (Compute, Reduce, Scan)))

    def bytes_moved(self) -> int:
        """Bytes read and written. A buffer read through one walk counts once (the cache serves
        repeats, and neighbours such as x and x + 64 of a rotate-half share cache lines); read
        through several walks (e.g. row- and column-wise) it counts once per walk, since each
        covers the whole of it. A walk is the index's steps along the kernel's variables."""
        from cherenkov.codegen.indexing import Var
        patterns: dict[str, set] = {}
        for s in self.body:
            if isinstance(s, Load):
                walk = s.index
                steps = tuple(sorted((a.name, c) for a, c in s.index.terms if isinstance(a, Var)))
                if steps:
                    walk = steps
                patterns.setdefault(s.buffer, set()).add(walk)
        total = 0
        for b in self.inputs:
            if b.name in patterns:
                total += len(patterns[b.name]) * min(b.numel, self.X * self.R) * b.dtype.itemsize
        for b in self.outputs:
            total += b.numel * b.dtype.itemsize
        return total

    def __str__(self) -> str:
        lines = [f"kernel {self.name} (X={self.X}, R={self.R})"]
        for s in self.body:
            lines.append("  " + format_statement(s) + f"    # {self.levels.get(getattr(s, 'out', ''), '')}")
        return "\n".join(lines)


def inputs_of(s: Statement) -> list[str]:
    """Names of the kernel values a statement reads (masks and run-time indices included)."""
    if isinstance(s, Load):
        deps = [s.mask] if s.mask else []
        return deps + sorted(variables(s.index) - {"x", "r"})
    if isinstance(s, IndexValue):
        return sorted(variables(s.index) - {"x", "r"})
    if isinstance(s, Compute):
        return list(s.args)
    if isinstance(s, (Cast, Reduce, Scan)):
        return [s.src]
    if isinstance(s, Store):
        return [s.src] + ([s.mask] if s.mask else []) + sorted(variables(s.index) - {"x", "r"})
    return []


def r_strides(kernel: "Kernel") -> list[int]:
    """For every load that walks the (x, r) domain -- its index depends on both x and r and its
    buffer holds at least a quarter of the domain (per-row and per-column vectors do not count,
    even when a split reduction indexes rows by x and r) -- the step of its address along r;
    0 when r reaches the address only through // or % (not a walk either way). A row kernel's
    loads all step 1; a column reduction's step the row length."""
    return _r_steps(kernel, Load, kernel.inputs)


def store_r_strides(kernel: "Kernel") -> list[int]:
    """`r_strides` for the kernel's stores of full-size outputs."""
    return _r_steps(kernel, Store, kernel.outputs)


RUN = 32    # r % m walks m elements at its coefficient's step: a walk when m >= a warp's lanes


def _r_steps(kernel: "Kernel", kind, buffers) -> list[int]:
    """(A gather -- an address through a value loaded at run time, such as cross-entropy's
    target logit -- walks nothing and does not count. A reduction over several dims, such as
    BatchNorm's over (N, H, W) of an NCHW tensor, walks r % (H*W) at step 1.)"""
    from cherenkov.codegen.indexing import Mod, Var
    big = {b.name for b in buffers if b.numel * 4 >= kernel.X * kernel.R}
    out = []
    for s in kernel.body:
        if isinstance(s, kind) and s.buffer in big and variables(s.index) == {"x", "r"}:
            direct = [abs(c) for a, c in s.index.terms if isinstance(a, Var) and a.name == "r"]
            direct = direct or [abs(c) for a, c in s.index.terms if isinstance(a, Mod)
                                and a.divisor >= RUN and variables(a.expr) == {"r"}
                                and a.expr.const == 0 and a.expr.terms[0][1] == 1]
            out.append(direct[0] if direct else 0)
    return out


def per_element_closure(kernel: "Kernel", sinks, stop=frozenset()) -> set[str]:
    """The per-element ("xr") values a pass over r must compute for `sinks`, walking inputs
    back through other xr values; values in `stop` are taken as given (not walked through)."""
    stmt_of = {getattr(s, "out", None): s for s in kernel.body}
    needed: set[str] = set()
    stack = [d for s in sinks for d in inputs_of(s)]
    while stack:
        d = stack.pop()
        if d in needed or kernel.levels.get(d) != "xr":
            continue
        needed.add(d)
        if d not in stop:
            stack.extend(inputs_of(stmt_of[d]))
    return needed


def format_statement(s: Statement) -> str:
    ident = lambda n: n  # noqa: E731
    if isinstance(s, Load):
        mask = f" if {s.mask}" if s.mask else ""
        return f"{s.out} = load {s.buffer}[{render(s.index, ident)}]{mask}"
    if isinstance(s, IndexValue):
        return f"{s.out} = index {render(s.index, ident)}"
    if isinstance(s, Constant):
        return f"{s.out} = {s.value!r}"
    if isinstance(s, Compute):
        return f"{s.out} = {s.op.name.lower()} {' '.join(s.args)}"
    if isinstance(s, Cast):
        return f"{s.out} = cast[{s.dtype}] {s.src}"
    if isinstance(s, Reduce):
        return f"{s.out} = reduce_{s.op.name.lower()} {s.src}"
    if isinstance(s, Scan):
        return f"{s.out} = scan_{s.op.name.lower()} {s.src}"
    op = {"add": "+=", "set": "=@", "max": "max=", "min": "min="}.get(s.scatter, "=")
    return f"store {s.buffer}[{render(s.index, ident)}] {op} {s.src}"
