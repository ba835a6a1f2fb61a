"""How each elementwise op of the kernel IR reads in Triton source.

Floats are computed in fp32 (fp64 stays fp64): low-precision values are widened at load and
rounded only by explicit casts and at stores, whatever the fusion. Integer division and
remainder follow Python/PyTorch (floor) semantics, not C's.
"""
from __future__ import annotations

import torch

from cherenkov.ir.ops import Op

LIB = "libdevice"


def const_literal(value, dtype: torch.dtype) -> str:
    """A constant of IR dtype `dtype` as Triton source."""
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        v = float(value)
        if v != v:
            return "float('nan')"
        if v in (float("inf"), float("-inf")):
            return f"float('{'-' if v < 0 else ''}inf')"
        return repr(v)
    bits = dtype.itemsize * 8         # integers wrap to their dtype, as eager's do (int32 + 2**31)
    v = int(value) & ((1 << bits) - 1)
    if dtype.is_signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return str(v)


UNARY = {
    Op.NEG: "-{0}", Op.ABS: "tl.abs({0})", Op.EXP: "tl.exp({0})", Op.EXP2: "tl.exp2({0})",
    Op.EXPM1: LIB + ".expm1({0})", Op.LOG: "tl.log({0})", Op.LOG2: "tl.log2({0})",
    Op.LOG10: LIB + ".log10({0})",
    Op.LOG1P: LIB + ".log1p({0})", Op.SQRT: "tl.sqrt_rn({0})", Op.RSQRT: "tl.rsqrt({0})",
    Op.RECIPROCAL: "(1.0 / {0})", Op.SIN: "tl.sin({0})", Op.COS: "tl.cos({0})",
    Op.TAN: LIB + ".tan({0})", Op.ASIN: LIB + ".asin({0})", Op.ACOS: LIB + ".acos({0})",
    Op.ATAN: LIB + ".atan({0})", Op.SINH: LIB + ".sinh({0})", Op.COSH: LIB + ".cosh({0})",
    Op.TANH: LIB + ".tanh({0})", Op.ASINH: LIB + ".asinh({0})", Op.ACOSH: LIB + ".acosh({0})",
    Op.ATANH: LIB + ".atanh({0})", Op.ERF: "tl.erf({0})", Op.ERFC: LIB + ".erfc({0})",
    Op.ERFINV: LIB + ".erfinv({0})", Op.SIGMOID: "tl.sigmoid({0})",
    Op.FLOOR: "tl.floor({0})", Op.CEIL: "tl.ceil({0})", Op.ROUND: LIB + ".nearbyint({0})",
    Op.TRUNC: LIB + ".trunc({0})", Op.NOT: "({0} == 0)", Op.BITWISE_NOT: "(~{0})",
    Op.ISNAN: "({0} != {0})", Op.ISINF: "(tl.abs({0}) == float('inf'))",
    Op.LGAMMA: LIB + ".lgamma({0})",
}
BINARY = {
    Op.ADD: "({0} + {1})", Op.SUB: "({0} - {1})", Op.MUL: "({0} * {1})",
    Op.DIV: "tl.div_rn({0}, {1})", Op.POW: LIB + ".pow({0}, {1})",
    Op.MAXIMUM: "_maximum({0}, {1})", Op.MINIMUM: "_minimum({0}, {1})",     # NaN propagates
    Op.ATAN2: LIB + ".atan2({0}, {1})", Op.HYPOT: LIB + ".hypot({0}, {1})",
    Op.COPYSIGN: LIB + ".copysign({0}, {1})", Op.NEXTAFTER: LIB + ".nextafter({0}, {1})",
    Op.EQ: "({0} == {1})", Op.NE: "({0} != {1})", Op.LT: "({0} < {1})", Op.LE: "({0} <= {1})",
    Op.GT: "({0} > {1})", Op.GE: "({0} >= {1})", Op.AND: "({0} & {1})", Op.OR: "({0} | {1})",
    Op.XOR: "({0} ^ {1})", Op.BITWISE_AND: "({0} & {1})", Op.BITWISE_OR: "({0} | {1})",
    Op.BITWISE_XOR: "({0} ^ {1})", Op.SHL: "({0} << {1})", Op.SHR: "({0} >> {1})",
}

# the correctly-rounded fp32 intrinsics above have no fp64 form; fp64's `/` and sqrt are IEEE
FP64 = {Op.DIV: "({0} / {1})", Op.SQRT: "tl.sqrt({0})"}


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def register_type(dtype: torch.dtype) -> str:
    """The Triton type a value of IR dtype `dtype` is held in."""
    if dtype == torch.float64:
        return "tl.float64"
    if dtype.is_floating_point:
        return "tl.float32"
    return storage_type(dtype)


def storage_type(dtype: torch.dtype) -> str:
    return {
        torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
        torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32",
        torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8",
        torch.bool: "tl.int1",
    }[dtype]


def render_op(op: Op, args: list[str], dtype: torch.dtype, arg_dtypes) -> str:
    """Source for `op(*args)`; `dtype` is the result's IR dtype, `arg_dtypes` the operands'."""
    if op == Op.WHERE:
        return f"tl.where({args[0]}, {args[1]}, {args[2]})"
    if op == Op.FMA:
        return f"tl.fma({args[0]}, {args[1]}, {args[2]})"
    if op == Op.SIGN:
        a = args[0]
        return f"(({a} > 0).to({register_type(dtype)}) - ({a} < 0).to({register_type(dtype)}))"
    if op in (Op.FLOORDIV, Op.TRUNCDIV, Op.REMAINDER, Op.FMOD):
        return _division(op, args, arg_dtypes[0])
    if op == Op.ABS and arg_dtypes[0] == torch.bool:
        return args[0]
    if dtype == torch.float64 and op in FP64:
        return FP64[op].format(*args)
    if op in UNARY:
        return UNARY[op].format(*args)
    if op in BINARY:
        if op == Op.DIV and not is_float(dtype):
            raise NotImplementedError("integer true division")
        return BINARY[op].format(*args)
    raise NotImplementedError(f"no Triton rendering for {op.name}")


def _division(op: Op, args, dtype) -> str:
    a, b = args
    if is_float(dtype):
        if op == Op.FLOORDIV:
            return f"_floordiv_f({a}, {b})"
        if op == Op.TRUNCDIV:
            return f"{LIB}.trunc({a} / {b})"
        if op == Op.FMOD:
            return f"{LIB}.fmod({a}, {b})"
        r = f"{LIB}.fmod({a}, {b})"
        return f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})"
    # Triton's integer // and % truncate toward zero, like C
    if op == Op.TRUNCDIV:
        return f"({a} // {b})"
    if op == Op.FMOD:
        return f"({a} % {b})"
    q, r = f"({a} // {b})", f"({a} % {b})"
    fix = f"(({r} != 0) & (({r} < 0) != ({b} < 0)))"
    if op == Op.FLOORDIV:
        return f"tl.where({fix}, {q} - 1, {q})"
    return f"tl.where({fix}, {r} + {b}, {r})"
