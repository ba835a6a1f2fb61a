"""Trace a score_mod / mask_mod into a tiny expression graph and differentiate it symbolically.

The mod is called with `Sym` proxies for (score, b, h, q_idx, kv_idx). Operators, a few torch
functions (through `__torch_function__`) and indexing of captured tensors record `Node`s:

    softcap = lambda s, b, h, q, kv: 30 * torch.tanh(s / 30)
    trace_mods(softcap, None).score   ->   mul(30, tanh(div(score, 30)))

A captured tensor `t[i, j]` becomes `load(offset)` with offset = i * stride0 + j * stride1 read
from kernel arguments, so the tensor's values and sizes are runtime data, not source.
`partials(out, wrt)` builds d out / d w for each w by reverse-mode accumulation over the graph;
the backward kernels multiply these by the incoming gradient (the output is a scalar per
(q, kv) pair, so every adjoint is linear in that gradient).
"""
from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field

import torch


class TraceError(TypeError):
    """The mod uses something the tracer cannot render into a kernel."""


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    op: str
    args: tuple = ()
    value: object = None    # const: the number; load/stride/numel: capture index (and dim)
    dtype: str = "f"        # "f" float32, "i" integer, "b" bool

    def __str__(self):
        if self.op == "const":
            return repr(self.value)
        if self.op in LEAVES:
            return self.op
        if self.op in ("stride", "size"):
            return f"{self.op}{self.value}"
        inner = ", ".join(str(a) for a in self.args)
        return f"{self.op}[{self.value}]({inner})" if self.op == "load" else f"{self.op}({inner})"


LEAVES = ("score", "b", "h", "q_idx", "kv_idx")
ARITH = ("add", "sub", "mul", "floordiv", "mod", "minimum", "maximum")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
LOGIC = ("and", "or", "xor")
FLOAT_UNARY = ("tanh", "exp", "exp2", "log", "sqrt", "abs", "sigmoid", "sin", "cos")


def _result_dtype(op: str, args: tuple) -> str:
    kinds = {a.dtype for a in args}
    if op in COMPARE or op == "not":
        return "b"
    if op in LOGIC:
        return "b" if kinds == {"b"} else "i"
    if op == "abs":
        return "f" if "f" in kinds else "i"
    if op == "pow" and args[0].dtype != "f" and args[1].op == "const" \
            and args[1].dtype == "i" and args[1].value >= 0:
        return "i"                  # int ** int stays an integer in torch
    if op in ("div", "pow") or op in FLOAT_UNARY:
        return "f"
    if op == "where":
        kinds = {args[1].dtype, args[2].dtype}
        if kinds == {"b"}:
            return "b"
    if op == "neg":
        return "f" if "f" in kinds else "i"
    return "f" if "f" in kinds else "i"


_FOLD = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "neg": lambda a: -a,
}


def const(value) -> Node:
    if isinstance(value, bool):
        return Node("const", value=value, dtype="b")
    if isinstance(value, int):
        return Node("const", value=value, dtype="i")
    return Node("const", value=float(value), dtype="f")


def _is_const(node: Node, value) -> bool:
    return node.op == "const" and node.dtype != "b" and node.value == value


def _as_float(node: Node) -> Node:
    if node.dtype == "f":
        return node
    if node.op == "const":
        return const(float(node.value))
    return Node("cast", (node,), value="f", dtype="f")


def _as_bool(node: Node) -> Node:
    return node if node.dtype == "b" else make("ne", node, const(0))


def make(op: str, *args: Node) -> Node:
    """A new node, with constants folded and the identities x+0, x*1, x*0 applied."""
    if op == "invert":           # ~: logical not of a bool, the bitwise complement of an integer
        if args[0].dtype == "f":
            raise TraceError("~ of a float value")
        op = "not" if args[0].dtype == "b" else "bnot"
    positive_base = args[0].op == "const" and args[0].dtype == "f" and args[0].value > 0
    if op == "pow" and args[1].op != "const" and not positive_base:
        raise TraceError("pow with a traced exponent needs a positive float constant base "
                         "(an integer base to an integer power is integer arithmetic in torch)")
    if (op in FLOAT_UNARY and op != "abs") or (op == "pow" and args[1].op != "const"):
        args = tuple(_as_float(a) for a in args)   # torch computes these in floating point
    elif op == "pow" and args[0].dtype != "f" and (args[1].dtype == "f" or args[1].value < 0):
        args = (_as_float(args[0]), args[1])
    elif op == "pow" and args[0].dtype != "f" and args[1].value > 64:
        raise TraceError("an integer to a power above 64")    # rendered by squaring, <= 64
    if op in _FOLD and all(a.op == "const" for a in args):
        value = _FOLD[op](*(a.value for a in args))
        return const(float(value) if "f" in {a.dtype for a in args} or op == "div" else value)
    if op == "add":
        if _is_const(args[0], 0) and args[1].dtype == "f":
            return args[1]
        if _is_const(args[1], 0) and args[0].dtype == "f":
            return args[0]
    if op == "sub" and _is_const(args[1], 0) and args[0].dtype == "f":
        return args[0]
    if op == "mul":
        for x, y in (args, args[::-1]):
            if _is_const(x, 1) and y.dtype == "f":
                return y
            if _is_const(x, 0) and y.dtype == "f":
                return const(0.0)
    if op == "div" and _is_const(args[1], 1) and args[0].dtype == "f":
        return args[0]
    return Node(op, tuple(args), dtype=_result_dtype(op, args))


# ----------------------------------------------------------------------------------------------
# the tracer
class _Tracer:
    def __init__(self):
        self.captured: list[torch.Tensor] = []

    def capture(self, tensor: torch.Tensor) -> int:
        for i, t in enumerate(self.captured):
            if t is tensor:
                return i
        self.captured.append(tensor)
        return len(self.captured) - 1


_ACTIVE = threading.local()


def _tracer() -> _Tracer:
    tracer = getattr(_ACTIVE, "tracer", None)
    if tracer is None:
        raise TraceError("Sym used outside of trace_mods()")
    return tracer


def _load(tensor: torch.Tensor, index) -> Node:
    """`tensor[index]`: a load at offset sum(i_d * stride_d). As in torch, a negative index
    counts from the end of its dim; an index still outside the dim reads 0 (torch raises)."""
    index = index if isinstance(index, tuple) else (index,)
    if len(index) != tensor.dim():
        raise TraceError(f"index every dimension of a captured tensor: got {len(index)} "
                         f"indices for a tensor of shape {tuple(tensor.shape)}")
    k = _tracer().capture(tensor)
    offset, inside = const(0), None
    for dim, i in enumerate(index):
        if isinstance(i, slice) or i is None or i is Ellipsis:
            raise TraceError("slices are not supported when indexing a captured tensor")
        i = lift(i)
        if i.dtype != "i":
            raise TraceError(f"a captured tensor is indexed with a "
                             f"{'float' if i.dtype == 'f' else 'boolean'} expression")
        size = Node("size", value=(k, dim), dtype="i")
        nonneg = i.op in LEAVES or (i.op == "const" and i.value >= 0)
        if i.op == "const" and i.value < 0:
            i = make("add", i, size)
        elif not nonneg:
            i = make("where", make("lt", i, const(0)), make("add", i, size), i)
        ok = make("lt", i, size)
        if not nonneg:
            ok = make("and", make("ge", i, const(0)), ok)
        # where(a, b, False), not a & b: Triton's interpreter rejects a load mask made by &
        # of a scalar (an index of b or h) and a tile
        inside = ok if inside is None else make("where", inside, ok, const(False))
        term = make("mul", i, Node("stride", value=(k, dim), dtype="i"))
        offset = term if _is_const(offset, 0) else make("add", offset, term)
    kind = "b" if tensor.dtype == torch.bool else ("f" if tensor.is_floating_point() else "i")
    args = (offset,) if inside is None else (offset, inside)
    return Node("load", args, value=k, dtype=kind)


def lift(x) -> Node:
    """A Node for a Sym, a Python number or a one-element captured tensor."""
    if isinstance(x, Sym):
        return x.node
    if isinstance(x, (bool, int, float)):
        return const(x)
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise TraceError(f"a captured tensor of shape {tuple(x.shape)} is used without "
                             "indexing; index it with b, h, q_idx or kv_idx")
        return _load(x, (0,) * x.dim())
    raise TraceError(f"cannot trace a value of type {type(x).__name__}")


def _op(op: str, *args) -> "Sym":
    return Sym(make(op, *(lift(a) for a in args)))


def _binary(op: str, reflected: bool = False):
    if reflected:
        return lambda self, other: _op(op, other, self)
    return lambda self, other: _op(op, self, other)


_TORCH_BINARY = {
    "add": "add", "sub": "sub", "subtract": "sub", "mul": "mul", "multiply": "mul",
    "div": "div", "true_divide": "div", "divide": "div", "floor_divide": "floordiv",
    "remainder": "mod", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
    "bitwise_and": "and", "bitwise_or": "or",
    "and": "and", "or": "or", "xor": "xor", "bitwise_xor": "xor",
    "minimum": "minimum", "maximum": "maximum", "pow": "pow", "truediv": "div",
    "floordiv": "floordiv", "mod": "mod",
}
_TORCH_LOGICAL = {"logical_and": "and", "logical_or": "or", "logical_xor": "xor"}
_TORCH_UNARY = {name: name for name in FLOAT_UNARY} | {
    "neg": "neg", "negative": "neg", "logical_not": "not", "bitwise_not": "invert",
    "invert": "invert"}


class Sym:
    """A symbolic value inside a traced mod; arithmetic on it records Nodes."""
    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("sub"), _binary("sub", True)
    __mul__, __rmul__ = _binary("mul"), _binary("mul", True)
    __truediv__, __rtruediv__ = _binary("div"), _binary("div", True)
    __floordiv__, __rfloordiv__ = _binary("floordiv"), _binary("floordiv", True)
    __mod__, __rmod__ = _binary("mod"), _binary("mod", True)
    __pow__, __rpow__ = _binary("pow"), _binary("pow", True)
    __and__, __rand__ = _binary("and"), _binary("and", True)
    __or__, __ror__ = _binary("or"), _binary("or", True)
    __xor__, __rxor__ = _binary("xor"), _binary("xor", True)
    __eq__, __ne__ = _binary("eq"), _binary("ne")
    __lt__, __le__ = _binary("lt"), _binary("le")
    __gt__, __ge__ = _binary("gt"), _binary("ge")
    __hash__ = None

    def __neg__(self):
        return _op("neg", self)

    def __invert__(self):
        return _op("invert", self)

    def __abs__(self):
        return _op("abs", self)

    def __bool__(self):
        raise TraceError("a traced value was used as a Python bool (if/and/or/not); "
                         "use torch.where, & and | instead")

    def __repr__(self):
        return f"Sym({self.node})"

    def tanh(self): return _op("tanh", self)
    def exp(self): return _op("exp", self)
    def exp2(self): return _op("exp2", self)
    def log(self): return _op("log", self)
    def sqrt(self): return _op("sqrt", self)
    def abs(self): return _op("abs", self)
    def sigmoid(self): return _op("sigmoid", self)

    def clamp(self, min=None, max=None):
        out = self
        if min is not None:
            out = _op("maximum", out, min)
        if max is not None:
            out = _op("minimum", out, max)
        return out

    def to(self, dtype=None, *args, **kwargs):
        if isinstance(dtype, torch.dtype):
            kind = "f" if dtype.is_floating_point else ("b" if dtype == torch.bool else "i")
            if kind != self.node.dtype:
                return Sym(Node("cast", (self.node,), value=kind, dtype=kind))
        return self

    def float(self):
        return self.to(torch.float32)

    def double(self):
        return self.to(torch.float32)      # kernels compute in float32

    def long(self):
        return self.to(torch.int64)

    def int(self):
        return self.to(torch.int32)

    def bool(self):
        return self.to(torch.bool)

    def _new_scalar(self, size, value, dtype):
        """new_ones / new_zeros / new_full of a 0-d size: a constant (FlexAttention's no-op
        mask_mod is `b.new_ones(size=(), dtype=torch.bool)`)."""
        if tuple(size) != ():
            raise TraceError("new tensors inside a traced mod must be 0-d")
        kind = self.node.dtype if dtype is None else (
            "b" if dtype == torch.bool else "f" if dtype.is_floating_point else "i")
        return Sym(const(bool(value) if kind == "b" else float(value) if kind == "f"
                         else int(value)))

    def new_ones(self, size=(), *, dtype=None, device=None, **kwargs):
        return self._new_scalar(size, 1, dtype)

    def new_zeros(self, size=(), *, dtype=None, device=None, **kwargs):
        return self._new_scalar(size, 0, dtype)

    def new_full(self, size, fill_value, *, dtype=None, device=None, **kwargs):
        return self._new_scalar(size, fill_value, dtype)

    def sin(self): return _op("sin", self)
    def cos(self): return _op("cos", self)
    def neg(self): return _op("neg", self)

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise TraceError(f"Tensor.{name} is not supported inside a traced score_mod/mask_mod")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", str(func))
        if name == "__getitem__":
            tensor, index = args
            if not isinstance(tensor, torch.Tensor):
                raise TraceError("only captured tensors can be indexed")
            return Sym(_load(tensor, index))
        if name == "where" and not kwargs:
            return _op("where", *args)
        if name in ("clamp", "clip", "clamp_min", "clamp_max"):
            bound = {"clamp_min": "min", "clamp_max": "max"}.get(name)
            if bound and len(args) == 2:
                kwargs[bound] = args[1]
                args = args[:1]
            return Sym(lift(args[0])).clamp(*args[1:], **kwargs)
        bare = name.strip("_")
        if bare in _TORCH_LOGICAL and len(args) == 2 and not kwargs:   # truth values, not bits
            return Sym(make(_TORCH_LOGICAL[bare], _as_bool(lift(args[0])), _as_bool(lift(args[1]))))
        if name.startswith("__r") and bare[1:] in _TORCH_BINARY and not kwargs:   # t.__radd__(sym)
            return _op(_TORCH_BINARY[bare[1:]], args[1], args[0])
        if bare in _TORCH_BINARY and len(args) == 2:
            op = _TORCH_BINARY[bare]
            if "alpha" in kwargs and op in ("add", "sub"):
                args = (args[0], _op("mul", args[1], kwargs.pop("alpha")))
            if "rounding_mode" in kwargs and op == "div":
                mode = kwargs.pop("rounding_mode")
                if mode not in (None, "floor"):
                    raise TraceError(f"division with rounding_mode={mode!r} is not supported")
                op = "floordiv" if mode == "floor" else op
            if kwargs:          # anything else would change the result: never drop it
                raise TraceError(f"{name}(..., {', '.join(sorted(kwargs))}=...) is not "
                                 "supported inside a traced score_mod/mask_mod")
            return _op(op, *args)
        if bare in _TORCH_UNARY and len(args) == 1 and not kwargs:
            return _op(_TORCH_UNARY[bare], *args)
        raise TraceError(f"{name} is not supported inside a traced score_mod/mask_mod")


@dataclass
class TracedMods:
    """The traced graphs of one (score_mod, mask_mod) pair and the tensors they capture."""
    score: Node | None
    mask: Node | None
    captured: list[torch.Tensor] = field(default_factory=list)

    # (flags, indices) of the last grad_indices answer: the backward asks every call
    _grad_memo: tuple | None = field(default=None, repr=False, compare=False)
    _reads: dict = field(default_factory=dict, repr=False, compare=False)   # facts derived once

    def mask_reads_tensors(self) -> bool:
        """Whether the mask_mod reads a captured tensor (document ids, say), not only indices."""
        return self._reads_tensors("mask")

    def score_reads_tensors(self) -> bool:
        """Whether the score_mod reads a captured tensor (ALiBi's slopes, a bias table)."""
        return self._reads_tensors("score")

    def _reads_tensors(self, which: str) -> bool:     # walked once a graph: launches ask
        if which not in self._reads:
            root = getattr(self, which)
            self._reads[which] = root is not None and any(
                n.op == "load" for n in topo_order([root]))
        return self._reads[which]

    def grad_loads(self) -> list[Node]:
        """The loads in score_mod whose captured tensor requires grad (they get gradients)."""
        if self.score is None:
            return []
        return [n for n in topo_order([self.score]) if n.op == "load" and n.dtype == "f"
                and self.captured[n.value].requires_grad]

    def grad_indices(self) -> list[int]:
        """Indices of the captured tensors that get gradients, by their requires_grad now
        (remembered per flags: walking the graph was most of a backward call's Python)."""
        flags = tuple(t.requires_grad for t in self.captured)
        memo = self._grad_memo                  # one tuple: threads see a consistent pair
        if memo is None or memo[0] != flags:
            memo = self._grad_memo = (flags, sorted({n.value for n in self.grad_loads()}))
        return memo[1]

    def score_derivative(self) -> Node | None:
        """d score_mod / d score as a node (None: no score_mod, or one not reading the score)."""
        if self.score is None:
            return None
        leaf = next((n for n in topo_order([self.score]) if n.op == "score"), None)
        return partials(self.score, [leaf])[0] if leaf is not None else None

    @functools.cached_property
    def score_grad_varies(self) -> bool:
        """Whether the backward kernels hold a per-score derivative tile (softcap: yes; additive
        biases such as ALiBi: no, their derivative is the constant 1)."""
        d = self.score_derivative()
        return d is not None and d.op != "const"


def trace_mods(score_mod, mask_mod) -> TracedMods:
    tracer = _Tracer()
    _ACTIVE.tracer = tracer
    try:
        index = [Sym(Node(name, dtype="i")) for name in LEAVES[1:]]
        score = mask = None
        if score_mod is not None:
            score = lift(score_mod(Sym(Node("score")), *index))
            if score.dtype != "f":
                score = Node("cast", (score,), value="f", dtype="f")
        if mask_mod is not None:
            mask = lift(mask_mod(*index))
            if mask.dtype != "b":
                mask = make("ne", mask, const(0))
    finally:
        _ACTIVE.tracer = None
    return TracedMods(score, mask, tracer.captured)


def topo_order(outputs: list[Node], opaque=None) -> list[Node]:
    """Every node reachable from `outputs`, each after its arguments (unless opaque(node))."""
    order, seen = [], set()
    for root in outputs:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in seen:
                continue
            if expanded:
                seen.add(id(node))
                order.append(node)
                continue
            stack.append((node, True))
            if opaque is None or not opaque(node):
                stack.extend((a, False) for a in reversed(node.args) if id(a) not in seen)
    return order


def depends_on(node: Node) -> set[str]:
    """Which of score, b, h, q_idx, kv_idx the value of `node` varies with."""
    return {n.op for n in topo_order([node]) if n.op in LEAVES}


# symbolic reverse mode ------------------------------------------------------------------------
def _where_zero(cond, g, on_true: bool):
    zero = const(0.0)
    return make("where", cond, g, zero) if on_true else make("where", cond, zero, g)


def _local_grads(node: Node, g: Node) -> tuple:
    """Adjoints of node.args given the adjoint g of node (None: no gradient flows)."""
    a = node.args
    op = node.op
    if op == "add":
        return g, g
    if op == "sub":
        return g, make("neg", g)
    if op == "neg":
        return (make("neg", g),)
    if op == "mul":
        return make("mul", g, a[1]), make("mul", g, a[0])
    if op == "div":
        return make("div", g, a[1]), make("neg", make("div", make("mul", g, node), a[1]))
    if op == "pow":
        if a[1].op != "const":    # a positive constant base (make refuses others): d/de c^e
            return None, make("mul", g, make("mul", node, const(math.log(a[0].value))))
        e = a[1].value
        return make("mul", g, make("mul", const(float(e)), make("pow", a[0], const(e - 1)))), None
    if op == "tanh":
        return (make("mul", g, make("sub", const(1.0), make("mul", node, node))),)
    if op == "exp":
        return (make("mul", g, node),)
    if op == "exp2":
        return (make("mul", g, make("mul", node, const(0.6931471805599453))),)
    if op == "log":
        return (make("div", g, a[0]),)
    if op == "sqrt":
        return (make("div", make("mul", g, const(0.5)), node),)
    if op == "abs":
        return (make("where", make("ge", a[0], const(0.0)), g, make("neg", g)),)
    if op == "sigmoid":
        return (make("mul", g, make("mul", node, make("sub", const(1.0), node))),)
    if op == "sin":
        return (make("mul", g, make("cos", a[0])),)
    if op == "cos":
        return (make("neg", make("mul", g, make("sin", a[0]))),)
    if op == "where":
        return None, _where_zero(a[0], g, True), _where_zero(a[0], g, False)
    if op in ("minimum", "maximum"):
        first = make("le" if op == "minimum" else "ge", a[0], a[1])
        return _where_zero(first, g, True), _where_zero(first, g, False)
    if op == "cast":
        return (g,)
    if op == "mod":
        return g, make("neg", make("mul", g, make("floordiv", a[0], a[1])))
    return tuple(None for _ in a)      # integer / boolean ops, loads' offsets: no gradient


def partials(output: Node, wrt: list[Node]) -> list[Node]:
    """d output / d w for every w in `wrt` (const 0.0 where output does not depend on w)."""
    adjoint = {id(output): const(1.0)}
    for node in reversed(topo_order([output])):
        g = adjoint.get(id(node))
        if g is None or node.dtype != "f" or node.op in LEAVES or node.op == "load":
            continue
        for arg, ga in zip(node.args, _local_grads(node, g)):
            if ga is None or arg.dtype != "f":
                continue
            prev = adjoint.get(id(arg))
            adjoint[id(arg)] = ga if prev is None else make("add", prev, ga)
    return [adjoint.get(id(w), const(0.0)) for w in wrt]


# ----------------------------------------------------------------------------------------------
_TORCH_EVAL = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.true_divide,
    "floordiv": torch.floor_divide, "mod": torch.remainder, "minimum": torch.minimum,
    "maximum": torch.maximum, "pow": torch.pow, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt,
    "le": torch.le, "gt": torch.gt, "ge": torch.ge, "and": torch.bitwise_and,
    "or": torch.bitwise_or, "xor": torch.bitwise_xor, "neg": torch.neg,
    "not": torch.logical_not, "bnot": torch.bitwise_not, "where": torch.where,
    "tanh": torch.tanh, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "sqrt": torch.sqrt, "abs": torch.abs, "sigmoid": torch.sigmoid, "sin": torch.sin, "cos": torch.cos,
}


def evaluate(node: Node, leaves: dict, captured: list[torch.Tensor]) -> torch.Tensor:
    """The value of a traced graph on torch tensors (leaves: name -> tensor); for checking."""
    values = {}
    for n in topo_order([node]):
        if n.op in LEAVES or (not n.args and n.op in leaves):    # and fold.SM_SCALE
            out = leaves[n.op]
        elif n.op == "const":      # float constants in float64: checks at float64 precision
            out = torch.tensor(n.value, dtype=torch.float64 if n.dtype == "f" else None)
        elif n.op == "stride":
            out = torch.tensor(captured[n.value[0]].contiguous().stride(n.value[1]))
        elif n.op == "size":
            out = torch.tensor(captured[n.value[0]].shape[n.value[1]])
        elif n.op == "load":
            flat, off = captured[n.value].reshape(-1), values[id(n.args[0])]
            if len(n.args) > 1:
                inside = values[id(n.args[1])]
                out = torch.where(inside, flat[torch.where(inside, off, 0)], 0)
            else:
                out = flat[off]
        elif n.op == "cast":
            x = values[id(n.args[0])]
            out = {"f": x.double(), "i": x.long(), "b": x != 0}[n.value]
        else:
            out = _TORCH_EVAL[n.op](*(torch.as_tensor(values[id(a)]) for a in n.args))
        values[id(n)] = out
    return values[id(node)]
