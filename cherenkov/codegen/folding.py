"""What a kernel's index ranges decide before it runs: a comparison of an index value with a
constant that holds, or fails, for every lane (`x % 64 < 64`, the select of a concatenation
or a padding the index never leaves). The builder (`KernelBuilder._fold`) then emits a
constant, and the and / or / where it feeds collapses, instead of a mask per element."""
from __future__ import annotations

from cherenkov.ir.ops import Op


def _decide(holds_all: bool, holds_none: bool) -> bool | None:
    return True if holds_all else False if holds_none else None


# index in [lo, hi] (r) compared with constant c -> True / False for every lane, or None
_COMPARE = {
    Op.LT: lambda r, c: _decide(r[1] < c, r[0] >= c),
    Op.LE: lambda r, c: _decide(r[1] <= c, r[0] > c),
    Op.GT: lambda r, c: _decide(r[0] > c, r[1] <= c),
    Op.GE: lambda r, c: _decide(r[0] >= c, r[1] < c),
    Op.EQ: lambda r, c: _decide(r[0] == r[1] == c, c < r[0] or c > r[1]),
    Op.NE: lambda r, c: _decide(c < r[0] or c > r[1], r[0] == r[1] == c),
}
_FLIPPED = {Op.LT: Op.GT, Op.LE: Op.GE, Op.GT: Op.LT, Op.GE: Op.LE, Op.EQ: Op.EQ, Op.NE: Op.NE}


def is_comparison(op: Op) -> bool:
    return op in _COMPARE


def comparison(op: Op, a: str, b: str, ranges: dict, known: dict) -> bool | None:
    """`a op b` for every lane, when one side is an index value of known (lo, hi) range
    (`ranges`) and the other an integer constant (`known`); None when lanes may differ."""
    if a in ranges and isinstance(known.get(b), int):
        return _COMPARE[op](ranges[a], known[b])
    if b in ranges and isinstance(known.get(a), int):
        return _COMPARE[_FLIPPED[op]](ranges[b], known[a])
    return None
