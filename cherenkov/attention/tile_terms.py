"""Terms of the score linear in the key index, taken out of the per-score work of a loop over
key tiles (the Gluon forward's and dQ's; the dK/dV kernel's, off by default).

After row_terms.py, ALiBi's score is qk * c + slope * (kv_idx - q0): per tile the kernel builds
the key indices, converts them to float, subtracts q0 and multiplies, on each thread's 32
columns of every tile (compiled for sm_90 the forward held 134 more int-to-float conversions
and 129 more predicate ops than causal's, the dQ kernel 68 more conversions:
bench/results/2026-12-02_attention_tile_terms_sass_cpu_e59742c.md; its forward ran 0.58 ms
against causal's 0.49). A term coef * X, X an integer sum linear in kv_idx (of kv_idx, q0, b, h
and constants, row_terms.linear_term) and not reading q_idx, is at key n0 + j of the tile whose
first key is n0

    coef * X(n0 + j) = coef * (X(j) - X(0))|q0=b=h=0  +  coef * X(n0)
                       a vector over j, alike on        one number
                       every tile: `cols`               per tile

(exact: X is linear). The kernels compute `cols` once per program, the number once per tile,
and per score only the rest (ALiBi's: qk * c + cols, one fma). A number t added to all of a
tile's scores moves the tile's row maxima by t: the forward keeps its running maximum in the
scores' own terms (m = max(s') + t, p = exp2(s' - (m - t))), the dQ kernel subtracts t from the
row's lse instead (p = exp2(s' - (lse - r - t)), r the row terms). Values change by float
reassociation only: cols is small, X(n0) as exact as X(kv) was (both integers below 2**24).

On the H200 (B=4 H=16 S=4096 D=128 bf16, causal ALiBi): forward 0.50-0.52 ms against 0.58,
dQ kernel 0.663-0.667 against 0.683, forward+backward 2.197 ms = 1.29x flex in the suite
(bench/results/2026-12-02_attention_h200_59b5980.md; 1.18-1.19x before). The dK/dV kernel
(rows_from_offsets: its loop runs over query tiles, so the row terms come from row offsets)
ran slower with them, 1.161-1.168 ms against 1.102-1.129: its vectors spill
(launch_bwd.DKDV_TILE_TERMS).
"""
from __future__ import annotations

import torch

from .fold import scaled_mods
from .row_terms import linear_term, scaled, split_rows, substitute, sum_terms, terms
from .trace import Node, TracedMods, const, depends_on, evaluate, make

J = Node("j", dtype="i")            # a key's place in its tile, 0 .. BLOCK_N - 1 (a vector)
N0 = Node("n0", dtype="i")          # the tile's first key (a kernel scalar)
COLS = Node("cols", dtype="f")      # the per-key vector, computed before the loop


def split_tiles(shifted: Node) -> tuple[Node, Node, Node] | None:
    """(rest, cols, tile) with shifted == rest + tile at kv_idx = n0 + j where rest reads the
    leaf `cols` (COLS) for cols' value; None when shifted (row_terms.split_rows' first part)
    has no term linear in kv_idx."""
    kept, cols, tile = [], [], []
    for sign, term in terms(shifted):
        found = linear_term(term)
        deps = depends_on(found[1]) if found is not None else set()
        if "kv_idx" not in deps or "q_idx" in deps:
            kept.append((sign, term))
            continue
        coef, x = found
        col = J if (beta := _kv_coefficient(x)) == 1 else make("mul", const(beta), J)
        cols.append((sign, _float(scaled(col, coef))))
        tile.append((sign, _float(scaled(substitute(x, {"kv_idx": N0}), coef))))
    if not cols:
        return None
    return sum_terms(kept + [(1, COLS)]), sum_terms(cols), sum_terms(tile)


def has_tile_terms(traced: TracedMods) -> bool:
    """Whether the score mod (row terms aside) has terms split_tiles takes out (kept on
    `traced`: every launch asks)."""
    memo = traced._reads
    if "tile_terms" not in memo:
        memo["tile_terms"] = traced.score is not None and split_tiles(
            split_rows(scaled_mods(traced)[0])[0]) is not None
    return memo["tile_terms"]


def rows_from_offsets(traced: TracedMods) -> bool:
    """Whether has_tile_terms and the row terms (row_terms.split_rows') of rows q at q0 equal
    those of rows q - q0 at 0 -- each term linear in q_idx or not reading it (ALiBi's; a
    per-row table's is not): the dK/dV kernel's loop over query tiles then computes them
    once, for the offsets 0 .. BLOCK_M - 1, and q0 is each tile's first row."""
    memo = traced._reads
    if "rows_from_offsets" not in memo:
        row = split_rows(scaled_mods(traced)[0])[1] if has_tile_terms(traced) else None
        memo["rows_from_offsets"] = has_tile_terms(traced) and (row is None or all(
            linear_term(term) is not None or "q_idx" not in depends_on(term)
            for _, term in terms(row)))
    return memo["rows_from_offsets"]


def _kv_coefficient(x: Node) -> int:
    """X(kv_idx=1) - X(kv_idx=0) of a linear integer X (row_terms.linear_term's)."""
    at = {name: torch.tensor(0) for name in ("q_idx", "b", "h", "q0")}
    one, zero = (int(evaluate(x, {**at, "kv_idx": torch.tensor(v)}, [])) for v in (1, 0))
    return one - zero


def _float(n: Node) -> Node:
    return n if n.dtype == "f" else Node("cast", (n,), value="f", dtype="f")
