"""Render traced mods as Triton helper functions that the attention kernels call inline.

For `score_mod = lambda s, b, h, q, kv: s + slopes[h] * (kv - q)` the output reads

    @triton.jit
    def _score_mod(score, b, h, q_idx, kv_idx, C0, C0_s0, C0_n0, ):
        _t0 = (h * C0_s0)
        _t1 = (h < C0_n0)
        _t2 = tl.load(C0 + _t0, mask=_t1, other=0).to(tl.float32)
        ...
        return _t4

Helpers: `_score_mod` (forward), `_score_mod_grad` (value and d value / d score),
`_score_mod_q0` and `_row_shift` (row_terms.py), `_score_cols`, `_score_tile`, `_score_rest`
and `_score_rest_grad` (tile_terms.py), `_capture_grads` (atomically accumulates gradients of
captured tensors, reducing over the tile first when the index does not vary along a tile axis)
and `_mask_mod`; where a captured tensor is read one element per (b, h) (hoist.py), `_hoist_Ck`
loads it and `_h` versions of the loops' helpers read that value in Ck's place. Every captured
tensor k is passed as `Ck, Ck_s0, ..., Ck_n0, ...` (strides, then sizes); its gradient buffer as
`Gk`. PRELUDE holds torch's floor division and remainder.
"""
from __future__ import annotations

import math

from cherenkov.codegen.triton_helpers import FLOORDIV_F

from .fold import SM_SCALE, constant_divisor, finite_derivative, scaled_mods
from .hoist import hoistable
from .row_terms import Q0, split_rows
from .tile_terms import COLS, J, N0, split_tiles
from .trace import LEAVES, Node, TracedMods, const, depends_on, partials, topo_order

_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
    "and": "&", "or": "|", "xor": "^",
}
_CALL = {
    "minimum": "tl.minimum", "maximum": "tl.maximum", "where": "tl.where", "exp": "tl.exp",
    "exp2": "tl.exp2", "log": "tl.log", "sqrt": "tl.sqrt", "abs": "tl.abs",
    "sigmoid": "tl.sigmoid", "sin": "tl.sin", "cos": "tl.cos",
}


def _literal(value) -> str:
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    return repr(value)


# torch's floor division and remainder (the result of % takes the divisor's sign); Triton's
# // and % truncate like C. Float floor division is ATen's div_floor (triton_helpers).
PRELUDE = """@triton.jit
def _floordiv_i(a, b):
    q = a // b
    return q - (((a % b) != 0) & (((a % b) < 0) != (b < 0))).to(q.dtype)


@triton.jit
def _mod_i(a, b):
    r = a % b
    return r + tl.where((r != 0) & ((r < 0) != (b < 0)), b, 0)


@triton.jit
def _div_const(x, c, r):
    y = x * r
    return tl.fma(tl.fma(-y, c, x), r, y)


@triton.jit
def _mod_f(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


""" + FLOORDIV_F


def _int_power(x: str, e: int, one: str = "1.0") -> str:
    """x ** e for an integer e, by squaring (no log: negative bases stay right); `one` is
    the dtype's 1 (an integer to a power >= 0 stays an integer)."""
    if e == 0:
        return f"tl.where({x} == {x}, {one}, {one})"      # a tile of ones (x ** 0 is 1, NaN too)
    if e < 0:
        return f"(1.0 / {_int_power(x, -e)})"
    if e == 1:
        return x
    half = _int_power(x, e // 2)
    sq = f"({half} * {half})"
    return f"({sq} * {x})" if e % 2 else sq


def _expr(node: Node, a: list[str], target: str) -> str:
    op = node.op
    if op == "div":         # true division: a bool operand counts as 0 / 1 (int1 cannot divide)
        a = [f"({x}).to(tl.float32)" if arg.dtype == "b" else x for x, arg in zip(a, node.args)]
        # a full-precision division is an instruction sequence per score. By a constant c: a
        # power of two is an exact product; a dividend that varies with the score is x * (1 / c)
        # (within 1 ulp of the quotient; it feeds the softmax, and softcap's two correcting
        # FMAs per score cost its forward 9% on the H200: 0.777 vs 0.847 ms,
        # bench/results/2026-11-30_attention_h200_cd8950a.md); any other float x is the product
        # corrected once with an exact residual (fma), the quotient division gives
        # (test_div_const_matches_division_in_float32; the plain product gave 1.9999999 for
        # (kv + q) / 41 at 82 and flipped a floor of it); an integer x / 3 stays a division
        c = constant_divisor(node.args[1])
        if c is not None and (abs(math.frexp(c)[0]) == 0.5 or (
                "score" in depends_on(node.args[0]) and target != "interpret")):
            return f"({a[0]} * {_literal(1.0 / c)})"
        if c is not None and node.args[0].dtype == "f" and target != "interpret":
            return f"_div_const({a[0]}, {_literal(c)}, {_literal(1.0 / c)})"
        # (the CPU interpreter keeps the division: it has no fma and its speed is moot)
    if op in ("floordiv", "mod"):
        kind = "f" if node.dtype == "f" else "i"
        return f"_{op}_{kind}({a[0]}, {a[1]})"
    if op in ("and", "or", "xor") and node.dtype == "b" and target == "interpret":
        # Triton's interpreter cannot | a scalar bool from a float comparison (tl.exp(h * 0.5)
        # >= 3) with a tile; compared with 0 it can
        return f"(({a[0]} != 0) {_INFIX[op]} ({a[1]} != 0))"
    if op in _INFIX:
        return f"({a[0]} {_INFIX[op]} {a[1]})"
    if op in _CALL:
        return f"{_CALL[op]}({', '.join(a)})"
    if op == "neg":
        return f"(-{a[0]})"
    if op == "not":
        return f"({a[0]} == 0)"
    if op == "bnot":
        return f"(~{a[0]})"
    if op == "tanh" and target == "cuda":
        # one MUFU instruction (max relative error 2^-11, far below the bf16 rounding of the
        # scores it caps); the exp2-and-divide form costs an ex2 plus a full-precision
        # division per score, which made softcapped attention MUFU/ALU-bound. Two scores per
        # instruction in half precision (tanh.approx.f16x2) lost: 2.97 -> 3.11 ms softcap
        # fwd+bwd, the conversions cost more (bench/results/2026-11-30_attention_tanh_h200_41a626c)
        return (f'tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", '
                f'[({a[0]}).to(tl.float32)], dtype=tl.float32, is_pure=True, pack=1)')
    if op == "tanh":   # elsewhere: 1 - 2 / (e^2x + 1), saturating cleanly at +-1, and its
        # Taylor series below |x| = 0.125, where the exp form's absolute error (~1e-7) would be
        # a large relative one (a softcap with a large cap divides the scores down there)
        x = a[0]
        return (f"tl.where(tl.abs({x}) < 0.125, {x} * (1.0 - {x} * {x} * (0.3333333333333333 - "
                f"{x} * {x} * (0.13333333333333333 - {x} * {x} * 0.05396825396825397))), "
                f"1.0 - 2.0 / (tl.exp2({x} * 2.8853900817779268) + 1.0))")
    if op == "pow":
        exp = node.args[1]
        if exp.op == "const" and float(exp.value).is_integer() and abs(exp.value) <= 64:
            return _int_power(a[0], int(exp.value), "1" if node.dtype == "i" else "1.0")
        if exp.op == "const" or (node.args[0].op == "const" and node.args[0].value > 0):
            # a positive base, or any base to a fractional power (NaN below 0, as in torch)
            return f"tl.exp2(tl.log2({a[0]}) * {a[1]})"
        raise NotImplementedError("pow of a traced base to a traced exponent")   # trace refuses
    if op == "cast":
        return {"f": f"({a[0]}).to(tl.float32)", "i": f"({a[0]}).to(tl.int32)",
                "b": f"({a[0]} != 0)"}[node.value]
    raise NotImplementedError(f"no Triton rendering for op {op}")


def needs_int64(traced: TracedMods) -> bool:
    """Whether the mods' integer arithmetic may leave int32 (the kernels' index type; torch's
    is int64): a product of two varying integers, a multiplier above 1024 or a constant near
    2**31 (a hash-style mask: q_idx * 1103515245 + ...). Offsets into captured tensors
    (index * stride) do not count: a tensor that large is out of reach anyway."""
    roots = [r for r in (traced.score, traced.mask) if r is not None]
    for n in topo_order(roots):
        if n.op == "const" and n.dtype == "i" and abs(n.value) >= 1 << 30:
            return True
        if n.op == "mul" and n.dtype == "i" and not any(a.op == "stride" for a in n.args):
            consts = [a for a in n.args if a.op == "const"]
            if not consts or any(abs(c.value) > 1024 for c in consts):
                return True
    return False


# Largest sequence length for which a float consumer of an index difference may compute it in
# float32 from the index vectors (exact: see _index_linear's bounds).
FLOAT_INDEX_MAX_LEN = 1 << 22
_FLOAT_OPS = ("add", "sub", "mul", "div", "minimum", "maximum", "where")


def _index_linear(n: Node) -> bool:
    """An integer sum/difference of at most two q/kv indices (q0, the first query row, counts
    as one), a few b, h and constants summing below 2**22 (ALiBi's kv_idx - q_idx, or the
    kv_idx - q0 row_terms.py makes of it): its float32 value is exact when computed from
    converted index vectors. (kv_idx - q0 as integers cost the forward's full tiles 16
    registers kept across the loop and spills there, on sm_90 as compiled by Triton 3.9.)"""
    if n.dtype != "i" or n.op not in ("add", "sub", "neg"):
        return False
    seq, bh, consts, stack = 0, 0, 0, [n]
    while stack:
        m = stack.pop()
        if m.op in ("add", "sub", "neg") and m.dtype == "i":
            stack.extend(m.args)
        elif m.op in ("q_idx", "kv_idx", "q0", "j", "n0"):
            seq += 1
        elif m.op in ("b", "h"):
            bh += 1
        elif m.op == "const" and isinstance(m.value, int) and not isinstance(m.value, bool):
            consts += abs(m.value)
        else:
            return False
    # every partial sum stays below 2**24: two indices < 2**22, eight b/h < 2**16, constants
    return seq <= 2 and bh <= 8 and consts < 1 << 22


class _Emitter:
    """Names nodes and emits one assignment per interior node, in dependency order; `wide`:
    the index arguments are widened to int64 first (see needs_int64). `float_index`: a float
    operation on an index difference takes it as float32 computed from the converted index
    vectors: an int-to-float conversion per score element runs on the GPU's quarter-rate
    pipe beside exp2 (ALiBi's forward was 11% slower than causal's for it); only for
    sequence lengths below FLOAT_INDEX_MAX_LEN, where that is exact."""

    def __init__(self, target: str, indent: str = "    ", wide: bool = False,
                 float_index: bool = False, indices: tuple = LEAVES[1:],
                 hoisted: dict[int, Node] | None = None):
        self.target, self.indent = target, indent
        self.float_index = float_index
        # {k: load}: Ck holds that load's value (hoist.py), read in the load's place
        self.hoisted = {k: str(n) for k, n in (hoisted or {}).items()}
        self.names: dict[int, str] = {}
        self.fnames: dict[int, str] = {}
        # `indices`: the index arguments the function takes (widened when `wide`)
        self.lines: list[str] = ([f"{indent}{x} = ({x}).to(tl.int64)" for x in indices]
                                 if wide else [])

    def name(self, node: Node) -> str:
        """The node's name, emitting the lines of what it depends on first (in topological
        order, iteratively; an index difference only float operations read is left to
        fname, so its integer tile is never built)."""
        for n in self._order(node):
            if id(n) not in self.names and (n is node or not self._floated(n)):
                self._name_one(n)
        return self.names[id(node)]

    def _is_held(self, n: Node) -> bool:
        return n.op == "load" and self.hoisted.get(n.value) == str(n)

    def _order(self, root: Node) -> list[Node]:
        """topo_order, not entering hoisted loads (their offsets are computed before the loop,
        in _hoist_Ck)."""
        return topo_order([root], self._is_held if self.hoisted else None)

    def _floated(self, n: Node) -> bool:
        return self.float_index and _index_linear(n)

    def _name_one(self, n: Node) -> None:
        if n.op in LEAVES or any(n is x for x in (SM_SCALE, Q0, J, N0, COLS)):
            name = n.op
        elif n.op == "const":
            name = _literal(n.value)
        elif n.op == "stride":
            name = f"C{n.value[0]}_s{n.value[1]}"
        elif n.op == "size":
            name = f"C{n.value[0]}_n{n.value[1]}"
        else:
            rhs = self._rhs(n)           # may emit the float index lines it reads first
            name = f"_t{len(self.lines)}"
            self.lines.append(f"{self.indent}{name} = {rhs}")
        self.names[id(n)] = name

    def fname(self, node: Node) -> str:
        """A float32 name for an _index_linear node, computed from converted index vectors."""
        if id(node) in self.fnames:
            return self.fnames[id(node)]
        if node.op == "const":
            return _literal(float(node.value))
        if node.op in LEAVES or any(node is x for x in (Q0, J, N0)):
            rhs = f"({node.op}).to(tl.float32)"
        elif node.op == "neg":
            rhs = f"(-{self.fname(node.args[0])})"
        else:
            rhs = f"({self.fname(node.args[0])} {_INFIX[node.op]} {self.fname(node.args[1])})"
        tmp = f"_t{len(self.lines)}"
        self.lines.append(f"{self.indent}{tmp} = {rhs}")
        self.fnames[id(node)] = tmp
        return tmp

    def _arg(self, n: Node, i: int, a: Node) -> str:
        floating = (n.dtype == "f" and n.op in _FLOAT_OPS and (n.op != "where" or i > 0)) \
            or (n.op == "cast" and n.value == "f")
        if floating and self._floated(a):
            return self.fname(a)
        return self.name(a)

    def _rhs(self, n: Node) -> str:
        if self._is_held(n):
            load = f"C{n.value}"           # loaded before the loop (_hoist_Ck)
        else:
            args = [self._arg(n, i, a) for i, a in enumerate(n.args)]
            if n.op != "load":
                return _expr(n, args, self.target)
            load = _load(n.value, args)
        return {"f": f"{load}.to(tl.float32)", "i": load, "b": f"({load} != 0)"}[n.dtype]

    def body(self) -> str:
        return "\n".join(self.lines)


def _load(k: int, args: list[str]) -> str:
    if len(args) == 1:
        return f"tl.load(C{k} + {args[0]})"
    # every index inside its dim (after negative ones wrapped)
    return f"tl.load(C{k} + {args[0]}, mask={args[1]}, other=0)"


def capture_params(traced: TracedMods) -> str:
    """`C0, C0_s0, ..., C0_n0, ...` (pointer, strides, sizes) for every captured tensor
    (trailing comma, or empty)."""
    parts = []
    for k, t in enumerate(traced.captured):
        parts += ([f"C{k}"] + [f"C{k}_s{d}" for d in range(t.dim())]
                  + [f"C{k}_n{d}" for d in range(t.dim())])
    return "".join(p + ", " for p in parts)


def grad_params(traced: TracedMods) -> str:
    return "".join(f"G{k}, " for k in traced.grad_indices())


def _function(name: str, params: str, emitter: _Emitter, ret: str) -> str:
    body = emitter.body()
    return (f"@triton.jit\ndef {name}({params}):\n" + (body + "\n" if body else "")
            + f"    return {ret}\n")


def render_score_mod(traced: TracedMods, target: str, wide: bool = False,
                     float_index: bool = False) -> str:
    """`_score_mod(score, sm_scale, ...)`: mod(score * sm_scale) * log2(e) from the raw dot
    product `score` (the decode kernel's), `_score_mod_q0` (the same less its row terms,
    row_terms.py: the forward's), `_row_shift` (those row terms), `_score_mod_grad` (the whole
    value and d mod / d score: the backward's) and `_scale_ds`, constants folded (fold.py)."""
    caps = capture_params(traced)
    params = f"score, sm_scale, b, h, q_idx, kv_idx, {caps}"
    value, d = scaled_mods(traced)
    em = _Emitter(target, wide=wide, float_index=float_index)
    fwd = _function("_score_mod", params, em, _as_tile(value, em))

    # the forward's tiles: the score less its row terms (row_terms.py)
    shifted, row = split_rows(value)
    q0_params = f"score, sm_scale, b, h, q_idx, kv_idx, q0, {caps}"
    out = [fwd]
    hoisted = hoistable(traced)
    # the loops' helpers, and (with hoistable loads) the same reading Ck's value: `_h`
    for suffix, held in _variants(hoisted):
        em = _Emitter(target, wide=wide, float_index=float_index, hoisted=held)
        out.append(_function("_score_mod_q0" + suffix, q0_params, em, _as_tile(shifted, em)))
        em = _Emitter(target, wide=wide, float_index=float_index, hoisted=held)
        out.append(_grad_function("_score_mod_grad" + suffix, params, em, value, d))
    out += _render_tiles(shifted, d, caps, target, wide, float_index, hoisted)
    return "\n\n".join((*out, _render_row_shift(row, caps, target, wide),
                        *([_render_row_shift(row, caps, target, wide, hoisted)] if hoisted else []),
                        _render_scale_ds(d), render_capture_grads(traced, target, wide),
                        _render_hoists(traced, hoisted, target, wide)))


def _render_tiles(shifted: Node, d: Node, caps: str, target: str, wide: bool,
                  float_index: bool, hoisted: dict[int, Node]) -> list[str]:
    """The loops over key tiles' helpers (tile_terms.py): `_score_cols(sm_scale, b, h, j, q0,
    ...)` (the per-key vector, j the keys' places in a tile), `_score_tile(sm_scale, b, h, n0,
    q0, ...)` (the tile's number), `_score_rest(score, ..., q0, cols, ...)` (the rest, per
    score) and `_score_rest_grad` (it and d mod / d score), each with its `_h` version. A mod
    with no such terms gets zeros and its `_score_mod_q0` as the rest (the kernels then do not
    call them: tile_terms.has_tile_terms)."""
    split = split_tiles(shifted)
    rest, cols, tile = split if split else (shifted, const(0.0), const(0.0))
    out = []
    for suffix, held in _variants(hoisted):
        def emitter(*indices):
            return _Emitter(target, wide=wide, float_index=float_index, hoisted=held,
                            indices=indices)
        em = emitter("b", "h")
        out.append(_function("_score_cols" + suffix, f"sm_scale, b, h, j, q0, {caps}", em,
                             f"(j * 0).to(tl.float32) + {em.name(cols)}"))
        em = emitter("b", "h")
        out.append(_function("_score_tile" + suffix, f"sm_scale, b, h, n0, q0, {caps}", em,
                             f"sm_scale * 0.0 + {em.name(tile)}"))
        params = f"score, sm_scale, b, h, q_idx, kv_idx, q0, cols, {caps}"
        em = emitter(*LEAVES[1:])
        out.append(_function("_score_rest" + suffix, params, em, _as_tile(rest, em)))
        out.append(_grad_function("_score_rest_grad" + suffix, params, emitter(*LEAVES[1:]),
                                  rest, d))
    return out


def _grad_function(name: str, params: str, em: "_Emitter", value: Node, d: Node) -> str:
    """A helper returning (value, d value / d score) as tiles; a constant derivative is
    returned as a tile (older Triton cannot return constexprs)."""
    tile = _as_tile(value, em)
    d_score = _score_tile(_literal(float(d.value))) if d.op == "const" else em.name(d)
    return _function(name, params, em, f"{tile}, {d_score}")


def _variants(hoisted: dict[int, Node]) -> tuple:
    """(name suffix, hoisted loads) of each version of a loop helper: the plain one, and with
    hoistable loads (hoist.py) the `_h` one reading their values."""
    return (("", None), ("_h", hoisted)) if hoisted else (("", None),)


def _render_hoists(traced: TracedMods, hoisted: dict[int, Node], target: str,
                   wide: bool) -> str:
    """`_hoist_Ck(b, h, ...)`: the value of each hoistable load (hoist.py), as stored."""
    caps, out = capture_params(traced), []
    for k, load in hoisted.items():
        em = _Emitter(target, wide=wide, indices=("b", "h"))
        out.append(_function(f"_hoist_C{k}", f"b, h, {caps}", em,
                             _load(k, [em.name(a) for a in load.args])))
    return "\n\n".join(out)


def _render_row_shift(row: Node | None, caps: str, target: str, wide: bool,
                      hoisted: dict[int, Node] | None = None) -> str:
    """`_row_shift(sm_scale, b, h, q_idx, q0, ...)`: the row terms the tiles leave out, a
    float32 vector of q_idx's shape (zeros for a mod without them); `_row_shift_h` with
    `hoisted`."""
    em = _Emitter(target, wide=wide, indices=("b", "h", "q_idx"), hoisted=hoisted)
    value = "0.0" if row is None else em.name(row)
    name = "_row_shift_h" if hoisted else "_row_shift"
    return _function(name, f"sm_scale, b, h, q_idx, q0, {caps}", em,
                     f"(q_idx * 0).to(tl.float32) + {value}")   # no tl.zeros_like: Gluon


def _render_scale_ds(d: Node) -> str:
    """`_scale_ds(ds, p, dsdx)`: the score gradient through the mod. Where p is 0 (masked)
    ds is 0, and a derivative that may be infinite there would make it NaN: those are
    guarded; a finite one (softcap's, a constant) is one multiply (or none for 1)."""
    if d.op == "const" and d.value == 1.0:
        body = "ds"
    elif finite_derivative(d):
        body = "ds * dsdx"
    else:
        body = "tl.where(p == 0.0, 0.0, ds * dsdx)"
    return f"@triton.jit\ndef _scale_ds(ds, p, dsdx):\n    return {body}\n"


def _as_tile(node: Node, em: "_Emitter") -> str:
    """The node's name, as a tile of the scores' shape even where it folded to a constant or a
    per-launch scalar, or varies along one tile axis only (a mod not reading the score)."""
    if "score" not in depends_on(node):
        return _score_tile(em.name(node))
    return em.name(node)


def _score_tile(value: str) -> str:
    """`value` broadcast to a float32 tile of the scores' shape. The zeros come from the index
    tiles (whose broadcast is that shape): Gluon's tensors carry layouts, which tl.zeros_like
    and tl.full cannot give."""
    return f"((q_idx * 0 + kv_idx * 0).to(tl.float32) + {value})"


def render_capture_grads(traced: TracedMods, target: str, wide: bool = False) -> str:
    """Accumulate grad * d score_mod / d (captured value) into G buffers with atomics.

    `grad` and `valid` are (BLOCK_M, BLOCK_N) tiles laid out as (q, kv)."""
    params = (f"score, grad, valid, b, h, q_idx, kv_idx, {capture_params(traced)}"
              f"{grad_params(traced)}")
    loads = traced.grad_loads()
    em = _Emitter(target, wide=wide)
    if loads:
        for load, d in zip(loads, partials(traced.score, loads)):
            contrib, off = em.name(d), em.name(load.args[0])
            inside = em.name(load.args[1]) if len(load.args) > 1 else None
            k = load.value
            c = f"_c{len(em.lines)}"
            em.lines.append(f"    {c} = tl.where(valid, grad * {contrib}, 0.0)")
            # an offset uniform along a tile axis sums the tile along it first; one that varies
            # with the score itself varies per element, like one of q_idx and kv_idx both
            deps = depends_on(load.args[0])
            axes = {"q_idx", "kv_idx"} if "score" in deps else deps & {"q_idx", "kv_idx"}
            if not axes:
                val = f"tl.sum(tl.sum({c}, 1), 0)"
            elif axes == {"q_idx"}:
                val = f"tl.sum({c}, 1)[:, None]"
            elif axes == {"kv_idx"}:
                val = f"tl.sum({c}, 0)[None, :]"
            else:
                val, inside = c, "valid" if inside is None else f"({inside}) & valid"
            mask = "" if inside is None else f", mask={inside}"
            em.lines.append(f"    tl.atomic_add(G{k} + {off}, {val}{mask})")
    else:
        em.lines.append("    pass")
    return f"@triton.jit\ndef _capture_grads({params}):\n{em.body()}\n"


def render_mask_mod(traced: TracedMods, target: str, wide: bool = False) -> str:
    # (a causal window's q - kv < W and q >= kv as one unsigned comparison measured no
    # faster: 0.350 ms forward, 1.242 forward + backward at 4x16x4096x128, as before --
    # bench/results/2026-11-30_attention_window_h200_426445c.md)
    hoisted = hoistable(traced)
    text = []
    for suffix, held in _variants(hoisted):
        em = _Emitter(target, wide=wide, hoisted=held)
        if traced.mask is None or traced.mask.op == "const":
            keep = traced.mask is None or bool(traced.mask.value)
            out = "(q_idx >= 0) & (kv_idx >= 0)" if keep else "(q_idx < 0) & (kv_idx < 0)"
        else:
            out = em.name(traced.mask)
        text.append(_function("_mask_mod" + suffix, f"b, h, q_idx, kv_idx, "
                              f"{capture_params(traced)}", em, out))
    return "\n\n".join(text)


def render_mods(traced: TracedMods, target: str, float_index: bool = False) -> str:
    """All helper functions for one (score_mod, mask_mod) pair, as Triton source text; `wide`
    (int64 indices) is decided once for all of them; `float_index` (see _Emitter) only for
    kernels run on sequences shorter than FLOAT_INDEX_MAX_LEN."""
    wide = needs_int64(traced)
    return (PRELUDE + "\n\n" + render_score_mod(traced, target, wide, float_index) + "\n\n"
            + render_mask_mod(traced, target, wide))
