"""What a kernel's index ranges decide before it runs: a comparison of an index value with a
constant that holds, or fails, for every lane (`x % 64 < 64`, the select of a concatenation
or a padding the index never leaves). The builder (`KernelBuilder._fold`) then emits a
constant, and the and / or / where it feeds collapses, instead of a mask per element.

Integer arithmetic on index values -- a pooling backward's window `(h + 1 - r // 3) // 2`
built from iotas -- folds into one index expression (`index_arithmetic`), rendered at the
level its variables need (x, r or both) in the kernel's index width, with C's `//` and `%`
where the operand is non-negative: not int64 floor divisions (a sign fix-up each) on every
element of an (XBLOCK, RBLOCK) tile.
"""
from __future__ import annotations

from cherenkov.codegen import indexing as ix
from cherenkov.ir.ops import Op

INDEX_LIMIT = 2 ** 31 - 1      # a folded expression's every partial sum fits in int32


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


def clamped_range(op: Op, args, ranges: dict, known: dict) -> tuple | None:
    """The (lo, hi) range of max / min of an index value of known range and an integer
    constant (a clamp into the output's windows), or None."""
    if op not in (Op.MAXIMUM, Op.MINIMUM) or len(args) != 2:
        return None
    a, b = args if args[0] in ranges else args[::-1]
    c = known.get(b)
    if a not in ranges or type(c) is not int:
        return None
    f = max if op == Op.MAXIMUM else min
    return f(ranges[a][0], c), f(ranges[a][1], c)


def _bound(e) -> float:
    """An upper bound of |any partial sum| while `e` (and every expression inside it) is
    evaluated."""
    e = ix.as_lin(e)
    total = abs(e.const)
    for a, c in e.terms:
        lo, hi = ix.rng(ix.atom(a))
        total += abs(c) * max(abs(lo), abs(hi))
        if isinstance(a, (ix.Div, ix.Mod, ix.Within)):
            total = max(total, _bound(a.expr))
    return total


def _divides_non_negatives(e) -> bool:
    """Every division and modulo inside `e` has a non-negative operand (C's // and % then
    agree with floor semantics)."""
    for a, _ in ix.as_lin(e).terms:
        if isinstance(a, (ix.Div, ix.Mod)) and ix.rng(a.expr)[0] < 0:
            return False
        if isinstance(a, (ix.Div, ix.Mod, ix.Within)) and not _divides_non_negatives(a.expr):
            return False
    return True


def _shifted(e, d: int):
    """`e` plus a multiple k * d of d that makes it non-negative, and k; None if unbounded."""
    lo = ix.rng(e)[0]
    if lo == float("-inf"):
        return None
    k = max(0, -(-int(-lo) // d))
    return ix.add(e, k * d), k


def index_arithmetic(op: Op, args: list) -> "ix.Lin | None":
    """`op` over `args` (index expressions, or int constants) as one index expression, or
    None: a product of two indices, a division by a non-positive constant, an operand of
    unbounded range, or a result that could leave int32 while evaluated."""
    lins = [a if isinstance(a, ix.Lin) else ix.const(a) for a in args]
    if op == Op.ADD and len(lins) == 2:
        out = ix.add(*lins)
    elif op == Op.SUB and len(lins) == 2:
        out = ix.add(lins[0], ix.mul(lins[1], -1))
    elif op == Op.NEG and len(lins) == 1:
        out = ix.mul(lins[0], -1)
    elif op == Op.MUL and len(lins) == 2 and any(not isinstance(a, ix.Lin) for a in args):
        e, k = (lins[0], args[1]) if not isinstance(args[1], ix.Lin) else (lins[1], args[0])
        out = ix.mul(e, k)
    elif op in (Op.FLOORDIV, Op.REMAINDER) and len(lins) == 2 \
            and not isinstance(args[1], ix.Lin) and args[1] > 0:
        shifted = _shifted(lins[0], args[1])      # floor semantics: C's // and % agree
        if shifted is None:                       # with them on non-negative operands
            return None
        e, k = shifted
        d = args[1]
        out = ix.add(ix.floordiv(e, d), -k) if op == Op.FLOORDIV else ix.mod(e, d)
        if not _divides_non_negatives(out):   # simplified into a division of a part that
            whole = ix.Div(e, d) if op == Op.FLOORDIV else ix.Mod(e, d)     # can be negative
            out = ix.add(ix.atom(whole), -k if op == Op.FLOORDIV else 0)
    else:
        return None
    return out if _bound(out) <= INDEX_LIMIT else None
