"""`_foreach_*` ops (a list of tensors in, a list out: what torch.optim's multi-tensor
optimizers and clip_grad_norm_ call) decomposed into one call of the base op per tensor.

A foreach op is a batching device for eager mode: one launch for many tensors. Compiled, the
per-tensor ops fuse into each tensor's own chain (an AdamW step becomes one kernel per
parameter that reads p, g, m, v once and writes p, m, v once), which no foreach library call
can do. Argument lists (Tensor[] and Scalar[]) are indexed per tensor; everything else is
passed as is. Ops whose per-tensor form is not the base op called elementwise (`_foreach_max`
reduces, `_foreach_mm`, the `scalars`-tensor overloads of addcmul/addcdiv) stay whole.
"""
from __future__ import annotations

import functools

import torch

aten = torch.ops.aten

SKIP = {"max", "mm", "powsum"}


def _foreach_names() -> list[str]:
    return sorted({s.name.split("::")[1] for s in torch._C._jit_get_all_schemas()
                   if s.name.startswith("aten::_foreach_") and not s.name.endswith("_")})


def _per_tensor(op, base, *args, **kwargs):
    schema = op._schema.arguments
    listed = {a.name for a in schema if isinstance(a.type, torch.ListType)}
    names = [a.name for a in schema]
    n = next((len(a) for name, a in zip(names, args) if name in listed and
              isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)), 0)

    def pick(name, value, i):
        return value[i] if name in listed and isinstance(value, (list, tuple)) else value
    out = []
    for i in range(n):
        a = [pick(name, v, i) for name, v in zip(names, args)]
        kw = {k: pick(k, v, i) for k, v in kwargs.items()}
        if len(a) > 3 and base in (aten.addcmul, aten.addcdiv):    # value is keyword-only
            a, kw = a[:3], {**kw, "value": a[3]}
        out.append(base(*a, **kw))
    return out


def _norm(op, base, tensors, ord=2, dtype=None):
    return [aten.linalg_vector_norm(t, ord, dtype=dtype) for t in tensors]


def _zero(op, base, tensors):
    return [torch.zeros_like(t) for t in tensors]


SPECIAL = {"norm": _norm, "zero": _zero}     # per-tensor forms other than the base op


@functools.lru_cache(maxsize=1)
def foreach_decompositions() -> dict:
    table = {}
    for name in _foreach_names():
        base_name = name[len("_foreach_"):]
        if base_name in SKIP:
            continue
        packet = getattr(aten, name)
        base = getattr(aten, base_name, None)
        if base is None and base_name not in SPECIAL:
            continue
        for overload in packet.overloads():
            if "out" in overload:
                continue
            op = getattr(packet, overload)
            if base_name in ("addcmul", "addcdiv") and overload == "Tensor":
                continue
            impl = SPECIAL.get(base_name, _per_tensor)
            table[op] = functools.partial(impl, op, base)
    return table
