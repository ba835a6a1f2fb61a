"""Terms of the score that are constant along a query row, taken out of the per-score work.

Softmax is invariant to a constant added along a row: exp(s + r) / sum exp(s + r) equals
exp(s) / sum exp(s). So a term of the (log2-domain, folded) score that varies neither with the
score nor with kv_idx -- a bias per head, a bias per query row -- need not be computed per
score: the forward kernel works with s' = s - r and stores the row's log-sum-exp as lse' + r,
r computed once per row vector (`_row_shift`); the backward recomputes p = exp2(s - lse) from
the whole score (the Gluon dQ kernel as lse - r less tile_terms.py's per-tile number).

A term coef * X, coef a per-launch float (constants, sm_scale, loads at b / h) and X an
integer sum of q_idx, kv_idx, b, h and constants -- ALiBi's slope * (kv_idx - q_idx) -- is
split at the program's first query row q0:

    X(q, kv) = X(q0, kv) + (X(q, 0) - X(q0, 0))

(exact: X is linear). The first part varies with the key only, a vector the kernel computes
once per tile column (kv_idx - q0: small near the diagonal, as precise as the original); the
second is a row term. ALiBi's score, a subtract, a multiply and an add per score, becomes one
fma of a key vector (computed from the converted index vectors, render._index_linear).

On the H200 (B=4 H=16 S=4096 D=128 bf16, causal ALiBi) the forward took 0.624-0.625 ms,
0.640-0.641 before; forward + backward 2.422-2.428 vs 2.436-2.506
(bench/results/2026-12-01_attention_alibi_h200_6c6be76*.md). The same split in the backward
(dK/dV tiles of 64 query rows, q0 their first, lse - r per tile) was slower: forward +
backward 2.524-2.529 ms (..._10875ef*.md); so the backward keeps the whole score.

Values change by float reassociation only.
"""
from __future__ import annotations

from .fold import PER_SCORE
from .trace import Node, const, depends_on, make, topo_order

Q0 = Node("q0", dtype="i")                  # the program's first query row, a kernel scalar
_INDEX_LEAVES = ("q_idx", "kv_idx", "b", "h")


def split_rows(value: Node) -> tuple[Node, Node | None]:
    """(value - r, r) with r the row terms of value's top-level sum (None and value itself
    when it has none). value is a float node over score, sm_scale, b, h, q_idx, kv_idx."""
    kept, rows = [], []
    for sign, term in terms(value):
        if not depends_on(term) & {"score", "kv_idx"}:
            rows.append((sign, term))
            continue
        split = _split_linear(term)
        if split is None:
            kept.append((sign, term))
        else:
            kept.append((sign, split[0]))
            rows.append((sign, split[1]))
    if not rows:
        return value, None
    shifted = sum_terms(kept)
    if shifted.dtype != "f":
        shifted = Node("cast", (shifted,), value="f", dtype="f")
    return shifted, sum_terms(rows)


def terms(value: Node) -> list[tuple[int, Node]]:
    """value's top-level sum as (sign, term) pairs (_flatten)."""
    out: list[tuple[int, Node]] = []
    _flatten(value, 1, out)
    return out


def _flatten(n: Node, sign: int, out: list, coef: Node | None = None) -> None:
    """The float sum under n as (sign, term) pairs, through products of a sum and a
    coefficient (log2(e) times a sum with an integer term); integer sums stay whole terms."""
    if n.dtype == "f" and n.op in ("add", "sub", "neg"):
        signs = (sign, -sign) if n.op == "sub" else (-sign,) if n.op == "neg" else (sign, sign)
        for arg, s in zip(n.args, signs):
            _flatten(arg, s, out, coef)
        return
    if n.op == "mul" and n.dtype == "f":
        for x, c in (n.args, n.args[::-1]):
            if _coefficient(c) and x.dtype == "f" and x.op in ("add", "sub", "neg"):
                _flatten(x, sign, out, c if coef is None else make("mul", c, coef))
                return
    out.append((sign, n if coef is None else _scaled(n, coef)))


def _scaled(n: Node, coef: Node) -> Node:
    """n * coef, merged into a coefficient n already has (score * (sm_scale * log2 e): one
    multiply per score, as fold.py makes it)."""
    if n.op == "mul":
        for x, c in (n.args, n.args[::-1]):
            if _coefficient(c):
                return make("mul", x, make("mul", c, coef))
    return make("mul", n, coef)


def sum_terms(pairs: list[tuple[int, Node]]) -> Node:
    if not pairs:
        return const(0.0)
    sign, total = pairs[0]
    total = total if sign > 0 else make("neg", total)
    for sign, term in pairs[1:]:
        total = make("add" if sign > 0 else "sub", total, term)
    return total


def _coefficient(n: Node) -> bool:
    """A float that does not vary per score (fold.py's coefficients)."""
    return n.dtype == "f" and not depends_on(n) & PER_SCORE


def _index_sum(n: Node) -> bool:
    """An integer sum / difference of q_idx, kv_idx, b, h, q0 and integer constants, and their
    multiples by integer constants (linear in q_idx and kv_idx)."""
    for m in topo_order([n]):
        if m.op in ("add", "sub", "neg") and m.dtype == "i":
            continue
        if m.op == "mul" and m.dtype == "i" and any(a.op == "const" for a in m.args):
            continue
        if m.op in _INDEX_LEAVES or m is Q0 or (m.op == "const" and m.dtype == "i"):
            continue
        return False
    return n.dtype == "i"


def linear_term(term: Node) -> tuple[Node | None, Node] | None:
    """(coef, X) for a term coef * X (or X, or X cast to float): coef a product of
    coefficients (None for none), X an index sum (_index_sum); None for any other term."""
    coef, x = None, term
    while x.op == "mul" and x.dtype == "f":
        a, b = x.args
        if _coefficient(b):
            c, x = b, a
        elif _coefficient(a):
            c, x = a, b
        else:
            return None
        coef = c if coef is None else make("mul", c, coef)
    if x.op == "cast" and x.value == "f":
        x = x.args[0]
    return (coef, x) if _index_sum(x) else None


def scaled(x: Node, coef: Node | None) -> Node:
    """coef * x (x itself for no coef)."""
    return x if coef is None else make("mul", x, coef)


def _split_linear(term: Node) -> tuple[Node, Node] | None:
    """(coef * X(q0, kv), coef * (X(q, 0) - X(q0, 0))) for a linear_term coef * X whose X
    reads both q_idx and kv_idx; None otherwise."""
    found = linear_term(term)
    if found is None or not {"q_idx", "kv_idx"} <= depends_on(found[1]):
        return None
    coef, x = found
    col = substitute(x, {"q_idx": Q0})
    row = make("sub", substitute(x, {"kv_idx": const(0)}),
               substitute(x, {"q_idx": Q0, "kv_idx": const(0)}))
    return scaled(col, coef), scaled(row, coef)


def substitute(n: Node, leaves: dict[str, Node]) -> Node:
    memo: dict[int, Node] = {}
    for m in topo_order([n]):
        if m.op in leaves:
            memo[id(m)] = leaves[m.op]
        elif m.args:
            memo[id(m)] = make(m.op, *(memo[id(a)] for a in m.args))
        else:
            memo[id(m)] = m
    return memo[id(n)]
