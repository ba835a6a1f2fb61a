"""Lowerings of PyTorch's elementwise aten ops (unary, binary, ternary, casts, activations).

Type promotion is PyTorch's: the fake output's dtype is the result type; arithmetic runs in it,
comparisons run in the promoted type of their operands.
"""
from __future__ import annotations

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten

UNARY = {
    aten.neg: Op.NEG, aten.abs: Op.ABS, aten.exp: Op.EXP, aten.exp2: Op.EXP2,
    aten.expm1: Op.EXPM1, aten.log: Op.LOG, aten.log2: Op.LOG2, aten.log1p: Op.LOG1P,
    aten.log10: Op.LOG10,
    aten.sqrt: Op.SQRT, aten.rsqrt: Op.RSQRT, aten.reciprocal: Op.RECIPROCAL, aten.sin: Op.SIN,
    aten.cos: Op.COS, aten.tan: Op.TAN, aten.asin: Op.ASIN, aten.acos: Op.ACOS,
    aten.atan: Op.ATAN, aten.sinh: Op.SINH, aten.cosh: Op.COSH, aten.tanh: Op.TANH,
    aten.asinh: Op.ASINH, aten.acosh: Op.ACOSH, aten.atanh: Op.ATANH, aten.erf: Op.ERF,
    aten.erfc: Op.ERFC, aten.erfinv: Op.ERFINV, aten.sigmoid: Op.SIGMOID, aten.floor: Op.FLOOR,
    aten.ceil: Op.CEIL, aten.trunc: Op.TRUNC, aten.sign: Op.SIGN, aten.lgamma: Op.LGAMMA,
}
BINARY = {
    aten.mul: Op.MUL, aten.maximum: Op.MAXIMUM, aten.minimum: Op.MINIMUM, aten.atan2: Op.ATAN2,
    aten.hypot: Op.HYPOT, aten.copysign: Op.COPYSIGN, aten.nextafter: Op.NEXTAFTER,
    aten.remainder: Op.REMAINDER, aten.fmod: Op.FMOD, aten.pow: Op.POW,
    aten.bitwise_and: Op.BITWISE_AND, aten.bitwise_or: Op.BITWISE_OR,
    aten.bitwise_xor: Op.BITWISE_XOR, aten.bitwise_left_shift: Op.SHL,
    aten.bitwise_right_shift: Op.SHR,
}
COMPARE = {aten.eq: Op.EQ, aten.ne: Op.NE, aten.lt: Op.LT, aten.le: Op.LE, aten.gt: Op.GT,
           aten.ge: Op.GE}
LOGICAL = {aten.logical_and: Op.AND, aten.logical_or: Op.OR, aten.logical_xor: Op.XOR}


def _dtype_of(value):
    return value.dtype if hasattr(value, "dtype") else None


def _register_unary(target, op):
    @lowering(target)
    def lower(ctx, x):
        if ctx.out.dtype.is_complex or x.dtype.is_complex:
            raise Unsupported("complex dtypes")
        if op == Op.SIGN and x.dtype == torch.bool:
            return x
        if op == Op.ABS and x.dtype == torch.bool:
            raise Unsupported("abs of bool (eager raises: runs as aten)")
        if op in (Op.FLOOR, Op.CEIL, Op.TRUNC) and not x.dtype.is_floating_point \
                and ctx.out.dtype == x.dtype:
            return x            # integers are whole already (returns.py copies an output)
        return ctx.unary(op, x)


# bool arithmetic is logic: Triton's int1 multiply/bitwise ops are not numpy's bool ones
BOOL_OPS = {Op.BITWISE_AND: Op.AND, Op.BITWISE_OR: Op.OR, Op.BITWISE_XOR: Op.XOR, Op.MUL: Op.AND,
            Op.ADD: Op.OR, Op.MAXIMUM: Op.OR, Op.MINIMUM: Op.AND}


def _binary_or_logic(ctx, op, a, b):
    if ctx.out.dtype == torch.bool and op in BOOL_OPS:
        return ctx.binary(BOOL_OPS[op], a, b)
    return ctx.binary(op, a, b)


def _register_binary(target, op):
    @lowering(target)
    def lower(ctx, a, b):
        return _binary_or_logic(ctx, op, a, b)


def _register_compare(target, op):
    @lowering(target)
    def lower(ctx, a, b):
        compute = torch.result_type(_fakeish(a), _fakeish(b))
        return ctx.pointwise(op, [a, b], torch.bool, compute)


def _register_logical(target, op):
    @lowering(target)
    def lower(ctx, a, b):
        return ctx.pointwise(op, [ctx.cast(_as_bool(ctx, a), torch.bool),
                                  ctx.cast(_as_bool(ctx, b), torch.bool)], torch.bool)


def _fakeish(value):
    """Something torch.result_type understands: a meta tensor of the same rank, or a scalar."""
    if hasattr(value, "meta") and value.meta is not None:
        return torch.empty([1] * len(value.shape), dtype=value.dtype, device="meta")
    return value


def _as_bool(ctx, x):
    if not hasattr(x, "meta"):
        return ctx.const(bool(x), torch.bool)
    if x.dtype == torch.bool:
        return x
    return ctx.pointwise(Op.NE, [x, 0], torch.bool, x.dtype)


for _t, _op in UNARY.items():
    _register_unary(_t, _op)
for _t, _op in BINARY.items():
    _register_binary(_t, _op)
for _t, _op in COMPARE.items():
    _register_compare(_t, _op)
for _t, _op in LOGICAL.items():
    _register_logical(_t, _op)


@lowering(aten.isnan)
def _isnan(ctx, x):
    if not x.dtype.is_floating_point:
        return ctx.const(False, torch.bool, x.shape)
    return ctx.pointwise(Op.ISNAN, [x], torch.bool, x.dtype)


@lowering(aten.isinf)
def _isinf(ctx, x):
    if not x.dtype.is_floating_point:
        return ctx.const(False, torch.bool, x.shape)
    return ctx.pointwise(Op.ISINF, [x], torch.bool, x.dtype)


@lowering(aten.logical_not)
def _logical_not(ctx, x):
    return ctx.pointwise(Op.NOT, [_as_bool(ctx, x)], torch.bool)


@lowering(aten.bitwise_not)
def _bitwise_not(ctx, x):
    return ctx.unary(Op.NOT if x.dtype == torch.bool else Op.BITWISE_NOT, x)


@lowering(aten.add)
def _add(ctx, a, b, alpha=1):
    if ctx.out.dtype == torch.bool:
        return ctx.binary(Op.OR, a, b)
    if alpha != 1:
        b = ctx.binary(Op.MUL, b, alpha)
    return ctx.binary(Op.ADD, a, b)


@lowering(aten.sub)
def _sub(ctx, a, b, alpha=1):
    if alpha != 1:
        b = ctx.binary(Op.MUL, b, alpha)
    return ctx.binary(Op.SUB, a, b)


@lowering(aten.rsub)
def _rsub(ctx, a, b, alpha=1):
    return _sub(ctx, b, a, alpha)


@lowering(aten.div.Tensor, aten.div.Scalar)
def _div(ctx, a, b):
    # an integer operand of a 16-bit float quotient (a mean's count) goes through fp32
    a, b = (cast_value(ctx, v, ctx.out.dtype) if hasattr(v, "meta") else v for v in (a, b))
    return ctx.binary(Op.DIV, a, b)


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(ctx, a, b, rounding_mode=None):
    if rounding_mode is None:
        return ctx.binary(Op.DIV, a, b)
    op = Op.FLOORDIV if rounding_mode == "floor" else Op.TRUNCDIV
    return ctx.binary(op, a, b)


@lowering(aten.floor_divide)
def _floor_divide(ctx, a, b):
    return ctx.binary(Op.FLOORDIV, a, b)


@lowering(aten.round.default)
def _round(ctx, x):
    return ctx.unary(Op.ROUND, x)


@lowering(aten.round.decimals)
def _round_decimals(ctx, x, decimals=0):
    """Eager's form: round(x * 10^d) / 10^d, or round(x / 10^-d) * 10^-d for d < 0, with the
    power of ten in the tensor's dtype."""
    if not ctx.out.dtype.is_floating_point:
        raise Unsupported("round(decimals=) of an integer tensor (eager raises)")
    power = float(torch.tensor(10.0 ** abs(decimals), dtype=ctx.out.dtype))
    scale, unscale = (Op.MUL, Op.DIV) if decimals >= 0 else (Op.DIV, Op.MUL)
    return ctx.binary(unscale, ctx.unary(Op.ROUND, ctx.binary(scale, x, power)), power)


@lowering(aten.fmax.default, aten.fmin.default)
def _fmax_fmin(ctx, a, b):
    """maximum / minimum that take the number where one side is NaN (NaN only if both are)."""
    op = Op.MAXIMUM if ctx.target == aten.fmax.default else Op.MINIMUM
    dtype = ctx.out.dtype
    if not dtype.is_floating_point:
        return _binary_or_logic(ctx, op, a, b)
    a, b = ctx.cast(a, dtype), ctx.cast(b, dtype)
    either = ctx.binary(op, a, b)
    a_nan = ctx.pointwise(Op.ISNAN, [a], torch.bool, dtype)
    b_nan = ctx.pointwise(Op.ISNAN, [b], torch.bool, dtype)
    return ctx.where(b_nan, a, ctx.where(a_nan, b, either))


@lowering(aten.signbit.default)
def _signbit(ctx, x):
    """The sign bit: copysign(1, x) < 0 reads it for -0.0 and negative NaNs too."""
    if x.dtype == torch.bool:
        return ctx.const(False, torch.bool, x.shape)
    if not x.dtype.is_floating_point:
        return ctx.pointwise(Op.LT, [x, 0], torch.bool, x.dtype)
    signed = ctx.pointwise(Op.COPYSIGN, [1.0, x], x.dtype)
    return ctx.pointwise(Op.LT, [signed, 0.0], torch.bool, x.dtype)


@lowering(aten.ldexp.Tensor, aten.ldexp.default)
def _ldexp(ctx, x, other):
    """x * 2**other, the power in the result's dtype (as eager: a float64 x times 2**200
    stays finite; 2**-1100 underflows to 0)."""
    dtype = ctx.out.dtype
    if not dtype.is_floating_point:
        raise Unsupported(f"ldexp into {dtype}")
    return ctx.binary(Op.MUL, x, ctx.pointwise(Op.POW, [2.0, other], dtype), dtype)


@lowering(aten.relu)
def _relu(ctx, x):
    return ctx.binary(Op.MAXIMUM, x, 0)


@lowering(aten.clamp, aten.clamp_min, aten.clamp_max, aten.clip)
def _clamp(ctx, x, lo=None, hi=None):
    if ctx.target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        lo, hi = None, lo
    if lo is not None:
        x = ctx.binary(Op.MAXIMUM, x, lo)
    if hi is not None:
        x = ctx.binary(Op.MINIMUM, x, hi)
    return ctx.cast(x, ctx.out.dtype)


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx, cond, a, b):
    return ctx.where(cond, a, b)


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx, x, mask, value):
    return ctx.where(mask, value, x)


def cast_value(ctx, x, dtype):
    """x cast to dtype; to a 16-bit float from anything but fp32 it goes through fp32 (one more
    rounding only past 2**24), because Triton's interpreter casts int/f64 -> bf16 wrongly."""
    if (dtype in (torch.bfloat16, torch.float16) and hasattr(x, "meta")
            and x.dtype not in (torch.float32, torch.bfloat16, torch.float16)):
        x = ctx.cast(x, torch.float32)
    return ctx.cast(x, dtype)


@lowering(aten._to_copy, aten.to.dtype, aten.to.dtype_layout)
def _to_copy(ctx, x, *args, **kwargs):
    if ctx.out.device != x.meta.device:
        raise Unsupported("device change")
    if ctx.out.dtype.is_complex or x.dtype.is_complex:
        raise Unsupported("complex dtypes")
    return cast_value(ctx, x, ctx.out.dtype)


@lowering(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(ctx, a, b, w):
    return ctx.binary(Op.ADD, a, ctx.binary(Op.MUL, w, ctx.binary(Op.SUB, b, a)))


@lowering(aten.addcmul)
def _addcmul(ctx, x, a, b, value=1):
    return ctx.binary(Op.ADD, x, ctx.binary(Op.MUL, ctx.binary(Op.MUL, a, b), value))


@lowering(aten.addcdiv)
def _addcdiv(ctx, x, a, b, value=1):
    return ctx.binary(Op.ADD, x, ctx.binary(Op.MUL, ctx.binary(Op.DIV, a, b), value))


@lowering(aten.gelu)
def _gelu(ctx, x, approximate="none"):
    dtype = ctx.out.dtype
    if approximate == "tanh":
        inner = ctx.binary(Op.MUL, ctx.binary(Op.ADD, x, ctx.binary(
            Op.MUL, ctx.binary(Op.MUL, ctx.binary(Op.MUL, x, x), x), 0.044715)),
            0.7978845608028654)
        return ctx.binary(Op.MUL, ctx.binary(Op.MUL, x, 0.5),
                          ctx.binary(Op.ADD, ctx.unary(Op.TANH, inner), 1.0), dtype)
    cdf = ctx.binary(Op.MUL, ctx.binary(Op.ADD, ctx.unary(
        Op.ERF, ctx.binary(Op.MUL, x, 0.7071067811865476)), 1.0), 0.5)
    return ctx.binary(Op.MUL, x, cdf, dtype)


@lowering(aten.pow.Tensor_Scalar)
def _pow_scalar(ctx, x, exponent):
    """Strength-reduce small constant exponents: x**2 is a multiply, not a libdevice pow."""
    if ctx.out.dtype.is_complex or x.dtype.is_complex:
        raise Unsupported("complex dtypes")
    if not ctx.out.dtype.is_floating_point and not isinstance(exponent, bool) and \
            isinstance(exponent, int) and exponent < 0:
        raise Unsupported("an integer to a negative power (eager raises: runs as aten)")
    if exponent == 2:
        return ctx.binary(Op.MUL, x, x)
    if exponent == 3:
        return ctx.binary(Op.MUL, ctx.binary(Op.MUL, x, x), x)
    if exponent == 1:
        return ctx.cast(x, ctx.out.dtype)
    if exponent == 0.5 and ctx.out.dtype.is_floating_point:
        return ctx.unary(Op.SQRT, x)
    if exponent == -0.5 and ctx.out.dtype.is_floating_point:
        return ctx.unary(Op.RSQRT, x)
    if exponent == -1 and ctx.out.dtype.is_floating_point:
        return ctx.unary(Op.RECIPROCAL, x)
    return ctx.binary(Op.POW, x, exponent)

