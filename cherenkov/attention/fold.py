"""The score mod as the kernels use it: from the raw dot product, in the log2 domain, with its
constant factors folded.

The kernels want `mod(qk * sm_scale) * log2(e)` per score (exp2 is the hardware's
exponential). Written as traced, tanh softcap costs five multiplies around its tanh:

    qk * sm_scale * (1/30) -> tanh -> * 30 -> * log2(e)          derivative: 30 * (1 - t*t) * (1/30)

Triton does not reassociate float products, so each is an instruction per score on the pipes
that already carry the softmax (the backward's softcap tiles ran 28% slower than causal
ones). Folded, the same values cost two (and the derivative one fma):

    qk * (sm_scale/30) -> tanh -> * (30 log2 e)                    derivative: 1 - t*t

`scaled_mods(traced)` rebuilds the score graph and its derivative with the leaf `score` now
meaning the raw qk and a new leaf `sm_scale`, merging every chain of factors that do not vary
per score (constants, sm_scale, b, h and what only they index) into one coefficient, pushing
a coefficient through negation, division by a constant (of a score-dependent dividend: the
renderer multiplies by the reciprocal there anyway) and sums whose terms both take it. Values
change by reassociation only (a few ulp of float32). On the H200 softcap's forward + backward
went 3.077 -> 2.919 ms at 4x16x4096x128 (bench/results/2026-11-30_attention_h200_fee7e19.md).
"""
from __future__ import annotations

import math

from .trace import LEAVES, Node, TracedMods, const, depends_on, make, topo_order

SM_SCALE = Node("sm_scale")          # the kernel's softmax scale, a per-launch scalar
LOG2E = 1.4426950408889634
PER_SCORE = {"score", "q_idx", "kv_idx"}


class _Folder:
    def __init__(self, score_leaf: Node):
        self.score_leaf = score_leaf
        self.memo: dict[int, Node] = {}
        self.uniform: dict[int, tuple] = {}       # id -> (node, answer): the node kept alive

    def coefficient(self, n: Node) -> bool:
        """A float value that does not vary per score (constants, sm_scale, b, h, loads at
        such offsets): a factor of it folds into one multiply per tile."""
        hit = self.uniform.get(id(n))
        if hit is None or hit[0] is not n:
            hit = self.uniform[id(n)] = (n, n.dtype == "f" and not (depends_on(n) & PER_SCORE))
        return hit[1]

    def absorbs(self, n: Node) -> bool:
        """Multiplying n by a coefficient costs nothing extra: n is one, or has one to fold
        it into (through negation, division by a constant and sums of such terms)."""
        if n.dtype != "f":
            return False
        if self.coefficient(n):
            return True
        if n.op == "mul":
            return any(self.coefficient(a) for a in n.args)
        if n.op == "neg":
            return self.absorbs(n.args[0])
        if n.op == "div":
            return _divisor(n) is not None
        if n.op in ("add", "sub"):
            return self.absorbs(n.args[0]) and self.absorbs(n.args[1])
        return False

    def mul(self, a: Node, b: Node) -> Node:
        if self.coefficient(a) and not self.coefficient(b):
            a, b = b, a                             # b: the coefficient, if either is one
        if a.dtype != "f" or not self.coefficient(b) or self.coefficient(a):
            return make("mul", a, b)
        if a.op == "mul":
            x, y = a.args
            if self.coefficient(y):
                return self.mul(x, self.mul(y, b))
            if self.coefficient(x):
                return self.mul(y, self.mul(x, b))
        if a.op == "neg":
            return self.mul(a.args[0], self.neg(b))
        if a.op == "div" and _divisor(a) is not None:
            return self.mul(a.args[0], make("div", b, const(_divisor(a))))
        if a.op in ("add", "sub") and self.absorbs(a):
            return make(a.op, self.mul(a.args[0], b), self.mul(a.args[1], b))
        return make("mul", a, b)

    def neg(self, a: Node) -> Node:
        if a.op == "const":
            return make("neg", a)
        if a.op == "neg" and a.args[0].dtype == "f":
            return a.args[0]
        if a.op == "mul" and self.coefficient(a.args[1]) and not self.coefficient(a.args[0]):
            return self.mul(a.args[0], self.neg(a.args[1]))
        if a.op == "mul" and self.coefficient(a.args[0]) and not self.coefficient(a.args[1]):
            return self.mul(a.args[1], self.neg(a.args[0]))
        return make("neg", a)

    def rebuild(self, root: Node) -> Node:
        for n in topo_order([root]):
            if id(n) in self.memo:
                continue
            if n is self.score_leaf:
                new = make("mul", Node("score"), SM_SCALE)
            elif n.op in LEAVES or not n.args:
                new = n
            else:
                args = tuple(self.memo[id(a)] for a in n.args)
                if n.op == "mul":
                    new = self.mul(*args)
                elif n.op == "neg" and args[0].dtype == "f":
                    new = self.neg(args[0])
                elif n.op == "div" and constant_divisor(args[1]) is not None and \
                        args[0].dtype == "f" and "score" in depends_on(args[0]):
                    # the renderer's x * (1 / c) for a score-dependent dividend, as a product
                    new = self.mul(args[0], const(1.0 / constant_divisor(args[1])))
                elif n.op == "load":
                    new = Node("load", args, value=n.value, dtype=n.dtype)
                elif n.op == "cast":
                    new = args[0] if args[0].dtype == n.value else \
                        Node("cast", args, value=n.value, dtype=n.value)
                else:
                    new = make(n.op, *args)
            self.memo[id(n)] = new
        return self.memo[id(root)]


def constant_divisor(c: Node) -> float | None:
    """c's value when it is a nonzero finite constant with a normal reciprocal (a divisor
    a product by 1 / c can stand in for)."""
    if c.op != "const" or isinstance(c.value, bool) or not c.value or \
            not math.isfinite(c.value) or not 2.0 ** -126 <= abs(1.0 / c.value) <= 2.0 ** 126:
        return None
    return float(c.value)


def _divisor(n: Node) -> float | None:
    return constant_divisor(n.args[1]) if n.op == "div" and n.args[0].dtype == "f" else None


def scaled_mods(traced: TracedMods) -> tuple[Node, Node]:
    """(mod(score * sm_scale) * log2(e), d mod / d score at score * sm_scale) over the leaves
    score (the raw qk), sm_scale, b, h, q_idx, kv_idx. Without a score mod: score * sm_scale *
    log2(e) and 1; a mod not reading the score has derivative 0."""
    if traced.score is None:
        return make("mul", Node("score"), make("mul", SM_SCALE, const(LOG2E))), const(1.0)
    leaf = next((n for n in topo_order([traced.score]) if n.op == "score"), Node("score"))
    folder = _Folder(leaf)
    value = folder.mul(folder.rebuild(traced.score), const(LOG2E))
    d = traced.score_derivative()
    return value, const(0.0) if d is None else d if d.op == "const" else folder.rebuild(d)


# ops that keep finite arguments finite (at attention-score magnitudes): a derivative built of
# these alone needs no guard where p is 0 (below)
_FINITE_OPS = frozenset(("const", "score", "b", "h", "q_idx", "kv_idx", "sm_scale", "add", "sub",
                         "mul", "neg", "tanh", "sigmoid", "sin", "cos", "abs", "where", "minimum",
                         "maximum", "cast", "eq", "ne", "lt", "le", "gt", "ge", "and", "or",
                         "xor", "not"))


def finite_derivative(d: Node) -> bool:
    """Whether d mod / d score is finite wherever the score is: the backward's
    ds = p * (dp - delta) * d needs no `where(p == 0, 0, ...)` (which keeps a masked score's
    infinite derivative from making 0 * inf = NaN) -- softcap's 1 - t*t, a constant."""
    return all(n.op in _FINITE_OPS and (n.op != "const" or math.isfinite(n.value))
               for n in topo_order([d]))
