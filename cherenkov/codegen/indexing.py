"""Integer index expressions with ranges: the arithmetic that views are folded into.

An expression is a linear form `c0 + c1*a1 + c2*a2 + ...` over atoms: kernel index variables
(`Var`, with a size), floor divisions and modulos of expressions by constants (`Div`, `Mod`),
and integer values loaded at run time (`Dyn`, for gather/index). Construction simplifies with
the ranges of the atoms, so that e.g. viewing (x, r) as one linear index and back again gives
back x and r:

    >>> x, r = var("x", 8), var("r", 16)
    >>> str(floordiv(add(mul(x, 16), r), 16)), str(mod(add(mul(x, 16), r), 16))
    ('x', 'r')
"""
from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Var:
    name: str
    size: int           # range [0, size)


@dataclass(frozen=True, slots=True)
class Dyn:
    name: str           # a kernel value holding an integer loaded at run time
    lo: int | None = None
    hi: int | None = None


@dataclass(frozen=True, slots=True)
class Div:
    expr: "Lin"
    divisor: int


@dataclass(frozen=True, slots=True)
class Mod:
    expr: "Lin"
    divisor: int


@dataclass(frozen=True, slots=True)
class Within:
    """`expr`, promised to lie in [lo, hi] wherever its value is used: a cat piece's local
    index, read only under the mask that selects that piece (lanes outside compute an address
    that is never dereferenced). The promise lets views of the piece fold as if it were whole."""
    expr: "Lin"
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class Lin:
    terms: tuple      # ((atom, coef), ...) sorted by str(atom), no zero coefs
    const: int = 0

    def __str__(self) -> str:
        return render(self, lambda name: name)


Atom = Var | Dyn | Div | Mod | Within


def _lin(terms: dict, const: int) -> Lin:
    terms = _merge_div_mod(dict(terms))
    const += terms.pop(_CONST_ATOM, 0)
    items = tuple(sorted(((a, c) for a, c in terms.items() if c != 0),
                         key=lambda t: _order_key(t[0])))
    return Lin(items, const)


@functools.lru_cache(maxsize=1 << 16)
def _order_key(a) -> str:
    """A canonical sort key for an atom (its repr), computed once per distinct atom."""
    return repr(a)


def _merge_div_mod(terms: dict) -> dict:
    """Undo an unravel followed by a ravel:
    c*k*(e // k) + c*(e % k) == c*e  and  c*k*((e // k) % m) + c*(e % k) == c*(e % (k*m))."""
    changed = True
    while changed:
        changed = False
        for m, c in list(terms.items()):
            if not isinstance(m, Mod) or terms.get(m) != c or c == 0:
                continue
            k = m.divisor
            whole = _single_atom(floordiv(m.expr, k)) or Div(m.expr, k)
            if terms.get(whole) == c * k:
                del terms[m], terms[whole]
                for a2, c2 in m.expr.terms:
                    terms[a2] = terms.get(a2, 0) + c * c2
                terms[_CONST_ATOM] = terms.get(_CONST_ATOM, 0) + c * m.expr.const
                changed = True
                break
            for other, c2 in list(terms.items()):
                if (isinstance(other, Mod) and c2 == c * k and _single_atom(other.expr) == whole):
                    del terms[m], terms[other]
                    merged = mod(m.expr, k * other.divisor)
                    for a3, c3 in merged.terms:
                        terms[a3] = terms.get(a3, 0) + c * c3
                    terms[_CONST_ATOM] = terms.get(_CONST_ATOM, 0) + c * merged.const
                    changed = True
                    break
            if changed:
                break
    return terms


_CONST_ATOM = None   # key under which merged constants travel through a terms dict


def _single_atom(e: "Lin"):
    """The atom `e` is (coefficient 1, no constant), or None."""
    if e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1:
        return e.terms[0][0]
    return None


def const(value: int) -> Lin:
    return Lin((), int(value))


def atom(a: Atom) -> Lin:
    if isinstance(a, Var) and a.size <= 1:
        return const(0)
    return Lin(((a, 1),), 0)


def var(name: str, size: int) -> Lin:
    return atom(Var(name, size))


def dyn(name: str, lo=None, hi=None) -> Lin:
    return atom(Dyn(name, lo, hi))


def within(e, lo: int, hi: int) -> Lin:
    """`e` with the promise that it lies in [lo, hi] where used (see `Within`)."""
    e = as_lin(e)
    elo, ehi = rng(e)
    if elo >= lo and ehi <= hi:
        return e
    return atom(Within(e, int(lo), int(hi)))


def as_lin(e) -> Lin:
    return e if isinstance(e, Lin) else const(e)


def add(*exprs) -> Lin:
    terms: dict = {}
    total = 0
    for e in exprs:
        e = as_lin(e)
        total += e.const
        for a, c in e.terms:
            terms[a] = terms.get(a, 0) + c
    return _lin(terms, total)


def mul(e, k: int) -> Lin:
    e = as_lin(e)
    k = int(k)
    return _lin({a: c * k for a, c in e.terms}, e.const * k)


def rng(e) -> tuple[float, float]:
    """Inclusive (lo, hi) bounds of an expression; +-inf when unknown."""
    e = as_lin(e)
    lo = hi = e.const
    for a, c in e.terms:
        alo, ahi = _atom_rng(a)
        lo += min(c * alo, c * ahi)
        hi += max(c * alo, c * ahi)
    return lo, hi


def _atom_rng(a) -> tuple[float, float]:
    if isinstance(a, Var):
        return 0, a.size - 1
    if isinstance(a, Dyn):
        return (float("-inf") if a.lo is None else a.lo, float("inf") if a.hi is None else a.hi)
    if isinstance(a, Within):
        return a.lo, a.hi
    lo, hi = rng(a.expr)
    if isinstance(a, Div):
        return (lo // a.divisor if lo != float("-inf") else lo,
                hi // a.divisor if hi != float("inf") else hi)
    if lo >= 0 and hi < a.divisor:
        return lo, hi
    return 0, a.divisor - 1


@functools.lru_cache(maxsize=1 << 18)
def floordiv(e, d: int) -> Lin:
    e, d = as_lin(e), int(d)
    if d == 1:
        return e
    # floor((d*q + rest) / d) == q + floor(rest / d) for integers
    exact = {a: c // d for a, c in e.terms if c % d == 0}
    rest = _lin({a: c for a, c in e.terms if c % d != 0}, e.const % d)
    q = _lin(exact, e.const // d)
    lo, hi = rng(rest)
    if lo >= 0 and hi < d:
        return q
    g = _split_factor(rest, d)
    if g:                                    # floor(e / (g*d')) == floor(floor(e / g) / d')
        return add(q, floordiv(floordiv(rest, g), d // g))
    if len(rest.terms) == 1 and rest.const == 0:
        a, c = rest.terms[0]
        if c == 1 and isinstance(a, Div):       # (e // a) // d == e // (a*d)
            return add(q, floordiv(a.expr, a.divisor * d))
        if c == 1 and isinstance(a, Mod) and a.divisor % d == 0:   # (e % kd) // d == (e // d) % k
            return add(q, mod(floordiv(a.expr, d), a.divisor // d))
        if c == 1 and isinstance(a, Within):    # the value is e's; the promise divides too
            return add(q, within(floordiv(a.expr, d), a.lo // d, a.hi // d))
    return add(q, atom(Div(rest, d)))


@functools.lru_cache(maxsize=1 << 18)
def mod(e, d: int) -> Lin:
    e, d = as_lin(e), int(d)
    if d == 1:
        return const(0)
    rest = _lin({a: c for a, c in e.terms if c % d != 0}, e.const % d)
    lo, hi = rng(rest)
    if lo >= 0 and hi < d:
        return rest
    g = _split_factor(rest, d)
    if g:                                    # (g*a + b) % (g*d') == g*(a % d') + b, 0 <= b < g
        big = _lin({a: c // g for a, c in rest.terms if c % g == 0}, 0)
        small = _lin({a: c for a, c in rest.terms if c % g != 0}, rest.const)
        return add(mul(mod(big, d // g), g), small)
    if len(rest.terms) == 1 and rest.const == 0:
        a, c = rest.terms[0]
        if c == 1 and isinstance(a, Mod) and a.divisor % d == 0:   # (e % kd) % d == e % d
            return mod(a.expr, d)
        if c == 1 and isinstance(a, Within):    # a promise on the range, not on the value
            return mod(a.expr, d)
    return atom(Mod(rest, d))


def _split_factor(e: Lin, d: int) -> int:
    """A factor g of d (1 < g < d) with e == g*a + b where 0 <= b < g, or 0."""
    for _, c in e.terms:
        g = _gcd(abs(c), d)
        if 1 < g < d:
            small = _lin({a: c2 for a, c2 in e.terms if c2 % g != 0}, e.const)
            lo, hi = rng(small)
            if lo >= 0 and hi < g:
                return g
    return 0


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


@functools.lru_cache(maxsize=1 << 18)
def unravel(linear, shape) -> tuple[Lin, ...]:
    """Multi-index of a row-major linear index into `shape`."""
    idx = []
    stride = 1
    for size in reversed(shape):
        if size == 1:
            idx.append(const(0))
        else:
            idx.append(mod(floordiv(linear, stride), size) if stride * size != _BIG else
                       floordiv(linear, stride))
        stride *= size
    idx.reverse()
    # the outermost index needs no modulo when the linear index is in range
    if shape and shape[0] != 1:
        inner = 1
        for s in shape[1:]:
            inner *= s
        idx[0] = floordiv(linear, inner) if rng(linear)[1] < inner * shape[0] else idx[0]
    return tuple(idx)


_BIG = -1  # sentinel: never equal to a product of sizes


@functools.lru_cache(maxsize=1 << 18)
def ravel(idx, shape) -> Lin:
    total = const(0)
    stride = 1
    for i, size in zip(reversed(idx), reversed(shape)):
        total = add(total, mul(i, stride))
        stride *= size
    return total


def dot(idx, strides, offset: int = 0) -> Lin:
    return add(offset, *[mul(i, s) for i, s in zip(idx, strides)])


def variables(e) -> set:
    """Names of Vars and Dyns an expression depends on."""
    out = set()
    for a, _ in as_lin(e).terms:
        if isinstance(a, (Var, Dyn)):
            out.add(a.name)
        else:
            out |= variables(a.expr)
    return out


def render(e, name_of) -> str:
    """Source text (Python/Triton/C share + * // %); `name_of` maps atom names to source names."""
    e = as_lin(e)
    parts = []
    for a, c in e.terms:
        if isinstance(a, (Var, Dyn)):
            text = name_of(a.name)
        elif isinstance(a, Div):
            text = f"({render(a.expr, name_of)}) // {a.divisor}"
        elif isinstance(a, Within):
            text = f"({render(a.expr, name_of)})"
        else:
            text = f"({render(a.expr, name_of)}) % {a.divisor}"
        if c == 1:
            parts.append(text if not isinstance(a, (Div, Mod)) else f"({text})")
        else:
            wrapped = text if isinstance(a, (Var, Dyn)) else f"({text})"
            parts.append(f"{wrapped} * {c}")
    if e.const or not parts:
        parts.append(str(e.const))
    return " + ".join(parts).replace("+ -", "- ")


def release(e) -> Lin:
    """`e` with every range promise (`Within`) dropped for the expression it wraps, simplified
    again: once the views are folded the promise has done its work, and without it terms such
    as 64 * ((x // 64) % 36) + x % 64 can merge (into x % 2304)."""
    e = as_lin(e)
    if not any(_has_within(a) for a, _ in e.terms):
        return e
    out = const(e.const)
    for a, c in e.terms:
        if isinstance(a, Within):
            term = release(a.expr)
        elif isinstance(a, Div):
            term = floordiv(release(a.expr), a.divisor)
        elif isinstance(a, Mod):
            term = mod(release(a.expr), a.divisor)
        else:
            term = atom(a)
        out = add(out, mul(term, c))
    return out


def _has_within(a) -> bool:
    if isinstance(a, Within):
        return True
    if isinstance(a, (Div, Mod)):
        return any(_has_within(b) for b, _ in a.expr.terms)
    return False


def substitute(e, name: str, value: Lin) -> Lin:
    """`e` with the variable `name` replaced by `value`, simplified again (so that
    substituting x = x0*d + x1 turns (x % d) into x1 and (x // d) into x0)."""
    e = as_lin(e)
    out = const(e.const)
    for a, c in e.terms:
        if isinstance(a, Var) and a.name == name:
            term = value
        elif isinstance(a, Div):
            term = floordiv(substitute(a.expr, name, value), a.divisor)
        elif isinstance(a, Mod):
            term = mod(substitute(a.expr, name, value), a.divisor)
        elif isinstance(a, Within):
            term = within(substitute(a.expr, name, value), a.lo, a.hi)
        else:
            term = atom(a)
        out = add(out, mul(term, c))
    return out

