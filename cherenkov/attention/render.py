"""Render traced mods as Triton helper functions that the attention kernels call inline.

For `score_mod = lambda s, b, h, q, kv: s + slopes[h] * (kv - q)` the output reads

    @triton.jit
    def _score_mod(score, b, h, q_idx, kv_idx, C0, C0_numel, C0_s0, ):
        _t0 = (h * C0_s0)
        _t1 = tl.load(C0 + _t0, mask=(_t0 >= 0) & (_t0 < C0_numel), other=0).to(tl.float32)
        ...
        return _t4

Helpers: `_score_mod` (forward), `_score_mod_grad` (value and d value / d score),
`_capture_grads` (atomically accumulates gradients of captured tensors, reducing over the
tile first when the index does not vary along a tile axis) and `_mask_mod`. Every captured
tensor k is passed as `Ck, Ck_numel, Ck_s0, ...`; its gradient buffer as `Gk`.
"""
from __future__ import annotations

import math

from .trace import LEAVES, Node, TracedMods, depends_on, partials, topo_order

_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
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


def _expr(node: Node, a: list[str], target: str) -> str:
    op = node.op
    if op in _INFIX:
        return f"({a[0]} {_INFIX[op]} {a[1]})"
    if op in _CALL:
        return f"{_CALL[op]}({', '.join(a)})"
    if op == "neg":
        return f"(-{a[0]})"
    if op == "not":
        return f"({a[0]} == 0)"
    if op == "tanh" and target == "cuda":
        # one MUFU instruction (max relative error 2^-11, far below the bf16 rounding of the
        # scores it caps); the exp2-and-divide form costs an ex2 plus a full-precision
        # division per score, which made softcapped attention MUFU/ALU-bound
        return (f'tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", '
                f'[({a[0]}).to(tl.float32)], dtype=tl.float32, is_pure=True, pack=1)')
    if op == "tanh":   # elsewhere: 1 - 2 / (e^2x + 1), exact enough, saturates cleanly at +-1
        return f"(1.0 - 2.0 / (tl.exp2({a[0]} * 2.8853900817779268) + 1.0))"
    if op == "pow":
        e = node.args[1].value
        if isinstance(e, (int, float)) and float(e).is_integer() and 0 <= e <= 4:
            return "(" + " * ".join([a[0]] * int(e)) + ")" if e > 0 else "1.0"
        return f"tl.exp2(tl.log2({a[0]}) * {_literal(float(e))})"
    if op == "cast":
        return {"f": f"({a[0]}).to(tl.float32)", "i": f"({a[0]}).to(tl.int32)",
                "b": f"({a[0]} != 0)"}[node.value]
    raise NotImplementedError(f"no Triton rendering for op {op}")


class _Emitter:
    """Names nodes and emits one assignment per interior node, in dependency order."""

    def __init__(self, target: str, indent: str = "    "):
        self.target, self.indent = target, indent
        self.names: dict[int, str] = {}
        self.lines: list[str] = []

    def name(self, node: Node) -> str:
        for n in topo_order([node]):
            if id(n) in self.names:
                continue
            if n.op in LEAVES:
                self.names[id(n)] = n.op
            elif n.op == "const":
                self.names[id(n)] = _literal(n.value)
            elif n.op == "stride":
                self.names[id(n)] = f"C{n.value[0]}_s{n.value[1]}"
            else:
                tmp = f"_t{len(self.lines)}"
                self.lines.append(f"{self.indent}{tmp} = {self._rhs(n)}")
                self.names[id(n)] = tmp
        return self.names[id(node)]

    def _rhs(self, n: Node) -> str:
        args = [self.names[id(a)] for a in n.args]
        if n.op != "load":
            return _expr(n, args, self.target)
        k, off = n.value, args[0]
        if n.args[0].op == "const":
            load = f"tl.load(C{k} + {off})"
        else:
            load = f"tl.load(C{k} + {off}, mask=({off} >= 0) & ({off} < C{k}_numel), other=0)"
        return {"f": f"{load}.to(tl.float32)", "i": load, "b": f"({load} != 0)"}[n.dtype]

    def body(self) -> str:
        return "\n".join(self.lines)


def capture_params(traced: TracedMods) -> str:
    """`C0, C0_numel, C0_s0, ...` for every captured tensor (trailing comma, or empty)."""
    parts = []
    for k, t in enumerate(traced.captured):
        parts += [f"C{k}", f"C{k}_numel"] + [f"C{k}_s{d}" for d in range(t.dim())]
    return "".join(p + ", " for p in parts)


def grad_params(traced: TracedMods) -> str:
    ks = sorted({n.value for n in traced.grad_loads()})
    return "".join(f"G{k}, " for k in ks)


def _function(name: str, params: str, emitter: _Emitter, ret: str) -> str:
    body = emitter.body()
    return (f"@triton.jit\ndef {name}({params}):\n" + (body + "\n" if body else "")
            + f"    return {ret}\n")


def _score_result(traced: TracedMods, em: _Emitter) -> str:
    if traced.score is None:
        return "score"
    if traced.score.op == "const":
        return f"(score * 0.0 + {em.name(traced.score)})"
    return em.name(traced.score)


def render_score_mod(traced: TracedMods, target: str) -> str:
    caps = capture_params(traced)
    em = _Emitter(target)
    out = _score_result(traced, em)
    fwd = _function("_score_mod", f"score, b, h, q_idx, kv_idx, {caps}", em, out)

    em = _Emitter(target)
    out = _score_result(traced, em)
    # A constant derivative is returned as a tile (older Triton cannot return constexprs).
    d_score = "tl.full(score.shape, 1.0, tl.float32)"
    if traced.score is not None:
        score_leaf = next((n for n in topo_order([traced.score]) if n.op == "score"), None)
        d = partials(traced.score, [score_leaf])[0] if score_leaf is not None else None
        if d is None or d.op == "const":
            value = 0.0 if d is None else float(d.value)
            d_score = f"tl.full(score.shape, {_literal(value)}, tl.float32)"
        else:
            d_score = em.name(d)
    grad = _function("_score_mod_grad", f"score, b, h, q_idx, kv_idx, {caps}", em,
                     f"{out}, {d_score}")
    return fwd + "\n\n" + grad + "\n\n" + render_capture_grads(traced, target)


def render_capture_grads(traced: TracedMods, target: str) -> str:
    """Accumulate grad * d score_mod / d (captured value) into G buffers with atomics.

    `grad` and `valid` are (BLOCK_M, BLOCK_N) tiles laid out as (q, kv)."""
    params = (f"score, grad, valid, b, h, q_idx, kv_idx, {capture_params(traced)}"
              f"{grad_params(traced)}")
    loads = traced.grad_loads()
    em = _Emitter(target)
    if loads:
        for load, d in zip(loads, partials(traced.score, loads)):
            contrib, off = em.name(d), em.name(load.args[0])
            k = load.value
            c = f"_c{len(em.lines)}"
            em.lines.append(f"    {c} = tl.where(valid, grad * {contrib}, 0.0)")
            inb = f"({off} >= 0) & ({off} < C{k}_numel)"
            axes = depends_on(load.args[0]) & {"q_idx", "kv_idx"}
            if not axes:
                val = f"tl.sum(tl.sum({c}, 1), 0)"
            elif axes == {"q_idx"}:
                val = f"tl.sum({c}, 1)[:, None]"
            elif axes == {"kv_idx"}:
                val = f"tl.sum({c}, 0)[None, :]"
            else:
                val, inb = c, f"{inb} & valid"
            em.lines.append(f"    tl.atomic_add(G{k} + {off}, {val}, mask={inb})")
    else:
        em.lines.append("    pass")
    return f"@triton.jit\ndef _capture_grads({params}):\n{em.body()}\n"


def render_mask_mod(traced: TracedMods, target: str) -> str:
    em = _Emitter(target)
    if traced.mask is None or traced.mask.op == "const":
        keep = traced.mask is None or bool(traced.mask.value)
        out = "(q_idx >= 0) & (kv_idx >= 0)" if keep else "(q_idx < 0) & (kv_idx < 0)"
    else:
        out = em.name(traced.mask)
    return _function("_mask_mod", f"b, h, q_idx, kv_idx, {capture_params(traced)}", em, out)


def render_mods(traced: TracedMods, target: str) -> str:
    """All helper functions for one (score_mod, mask_mod) pair, as Triton source text."""
    return render_score_mod(traced, target) + "\n\n" + render_mask_mod(traced, target)
