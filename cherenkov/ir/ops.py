"""The closed op vocabulary of Cherenkov's graph IR, grouped by kind.

Every IR node carries one `Op`. Kinds are sets in `GroupOp`; passes ask for a kind
(`node.op in GroupOp.ELEMENTWISE`), never for a list of ops buried in an `if`.
"""
from __future__ import annotations

from enum import Enum, auto


class Op(Enum):
    # structural
    INPUT = auto()        # graph input; args = (position,)
    CONST = auto()        # scalar constant; args = (value,)
    GETITEM = auto()      # element of a multi-output node; args = (index,)
    IOTA = auto()         # index along a dim of the node's shape; args = (dim,)
    # elementwise: unary
    NEG = auto(); ABS = auto(); EXP = auto(); EXP2 = auto(); EXPM1 = auto(); LOG = auto()
    LOG2 = auto(); LOG10 = auto(); LOG1P = auto(); SQRT = auto(); RSQRT = auto()
    RECIPROCAL = auto()
    SIN = auto(); COS = auto(); TAN = auto(); ASIN = auto(); ACOS = auto(); ATAN = auto()
    SINH = auto(); COSH = auto(); TANH = auto(); ASINH = auto(); ACOSH = auto(); ATANH = auto()
    ERF = auto(); ERFC = auto(); ERFINV = auto(); SIGMOID = auto(); FLOOR = auto(); CEIL = auto()
    ROUND = auto(); TRUNC = auto(); SIGN = auto(); NOT = auto(); BITWISE_NOT = auto()
    ISNAN = auto(); ISINF = auto(); LGAMMA = auto(); DIGAMMA = auto()
    # elementwise: binary
    ADD = auto(); SUB = auto(); MUL = auto(); DIV = auto(); FLOORDIV = auto(); TRUNCDIV = auto()
    REMAINDER = auto(); FMOD = auto(); POW = auto(); MAXIMUM = auto(); MINIMUM = auto()
    ATAN2 = auto(); HYPOT = auto(); COPYSIGN = auto(); NEXTAFTER = auto()
    EQ = auto(); NE = auto(); LT = auto(); LE = auto(); GT = auto(); GE = auto()
    AND = auto(); OR = auto(); XOR = auto()
    BITWISE_AND = auto(); BITWISE_OR = auto(); BITWISE_XOR = auto()
    SHL = auto(); SHR = auto()
    # elementwise: ternary and casts
    WHERE = auto()
    FMA = auto()          # a * b + c rounded once (prims.fma: addcmul, lerp, Adam)
    CAST = auto()         # args = (dtype,)
    # reductions over the trailing dims; args = (number of reduced trailing dims,)
    SUM = auto(); PROD = auto(); MAX = auto(); MIN = auto(); ARGMAX = auto(); ARGMIN = auto()
    ANY = auto(); ALL = auto()
    # movement: views and data rearrangement, folded into index arithmetic
    RESHAPE = auto()      # args = (shape,)
    PERMUTE = auto()      # args = (dims,)
    EXPAND = auto()       # args = (shape,)
    SLICE = auto()        # args = (dim, start, step): output shape in meta
    CAT = auto()          # args = (dim,)
    PAD = auto()          # args = (pads per dim as ((lo, hi), ...), value)
    FLIP = auto()         # args = (dims,)
    GATHER = auto()       # inputs (src, index); args = (dim,): out[i][j] = src[i][index[i][j]]
    INDEX = auto()        # inputs (src, idx...); args = (dims indexed,): advanced indexing
    AS_STRIDED = auto()   # args = (size, stride, offset) over the input's contiguous storage
    WINDOW = auto()       # args = (kernel, stride, dilation, padding, fill) over the last
                          # len(kernel) dims: out[..., o, k] = x[..., o*stride + k*dilation -
                          # padding], fill outside x (a pooling's windows; shape (*lead, *O, *K))
    # matmul
    MATMUL = auto()       # args = (aten target,): mm / bmm / addmm / baddbmm
    # attention
    ATTENTION = auto()    # args = (aten target, ...): scaled-dot-product attention and its backward
    # random
    RANDOM = auto()       # args = (aten target, ...): dropout / rand
    # collective
    ALL_REDUCE = auto(); ALL_GATHER = auto(); REDUCE_SCATTER = auto(); ALL_TO_ALL = auto()
    # anything run by PyTorch as it is
    EXTERN = auto()       # args = (aten target, argument template, reason)
    SCATTER_ADD = auto()  # inputs (base, values, *indices); args = ("index", dims) | ("dim", dim)
    SCATTER_SET = auto()  # the same, each value written over its element (duplicates: one wins)
    SCATTER_MAX = auto(); SCATTER_MIN = auto()   # the same, each element the max / min of
                                                 # itself and the values it gets
    # scans: inclusive, along the last dim (lowering moves the scanned dim last); args =
    # (reverse, running dtype): reverse scans from the row's end
    CUMSUM = auto(); CUMPROD = auto(); LOGCUMSUMEXP = auto(); CUMMAX = auto(); CUMMIN = auto()


class GroupOp:
    UNARY = frozenset({
        Op.NEG, Op.ABS, Op.EXP, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P, Op.SQRT,
        Op.RSQRT, Op.RECIPROCAL, Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH,
        Op.COSH, Op.TANH, Op.ASINH, Op.ACOSH, Op.ATANH, Op.ERF, Op.ERFC, Op.ERFINV, Op.SIGMOID,
        Op.FLOOR, Op.CEIL, Op.ROUND, Op.TRUNC, Op.SIGN, Op.NOT, Op.BITWISE_NOT, Op.ISNAN, Op.ISINF,
        Op.LGAMMA, Op.DIGAMMA, Op.CAST})
    BINARY = frozenset({
        Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.TRUNCDIV, Op.REMAINDER, Op.FMOD, Op.POW,
        Op.MAXIMUM, Op.MINIMUM, Op.ATAN2, Op.HYPOT, Op.COPYSIGN, Op.NEXTAFTER, Op.EQ, Op.NE,
        Op.LT, Op.LE, Op.GT, Op.GE, Op.AND, Op.OR, Op.XOR, Op.BITWISE_AND, Op.BITWISE_OR,
        Op.BITWISE_XOR, Op.SHL, Op.SHR})
    TERNARY = frozenset({Op.WHERE, Op.FMA})
    COMPARISON = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.ISNAN, Op.ISINF})
    ELEMENTWISE = UNARY | BINARY | TERNARY | frozenset({Op.CONST, Op.IOTA})
    REDUCTION = frozenset({Op.SUM, Op.PROD, Op.MAX, Op.MIN, Op.ARGMAX, Op.ARGMIN, Op.ANY, Op.ALL})
    MOVEMENT = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SLICE, Op.CAT, Op.PAD, Op.FLIP,
                          Op.GATHER, Op.INDEX, Op.AS_STRIDED, Op.WINDOW})
    # movement that reads its input's elements in place (kernels fold it into addresses)
    VIEW = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SLICE})
    MATMUL = frozenset({Op.MATMUL})
    ATTENTION = frozenset({Op.ATTENTION})
    RANDOM = frozenset({Op.RANDOM})
    COLLECTIVE = frozenset({Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL})
    EXTERN = frozenset({Op.EXTERN})
    # what the fusion pass may put inside a generated kernel
    FUSIBLE = ELEMENTWISE | REDUCTION | MOVEMENT | frozenset({Op.INPUT})
    # what runs as a call into PyTorch (cuBLAS, SDPA, RNG, NCCL, anything else)
    LIBRARY = MATMUL | ATTENTION | RANDOM | COLLECTIVE | EXTERN
    # writes at run-time indices (atomic adds, or stores): a kernel of its own, never merged
    SCATTER = frozenset({Op.SCATTER_ADD, Op.SCATTER_SET, Op.SCATTER_MAX, Op.SCATTER_MIN})
    # running sums / products along each row: a kernel of its own over (rows, row length)
    SCAN = frozenset({Op.CUMSUM, Op.CUMPROD, Op.LOGCUMSUMEXP, Op.CUMMAX, Op.CUMMIN})
    # what always runs in a kernel of its own (pointwise producers inlined, never merged)
    ALONE = SCATTER | SCAN


def kind_of(op: Op) -> str:
    for name in ("ELEMENTWISE", "REDUCTION", "MOVEMENT", "MATMUL", "ATTENTION", "RANDOM",
                 "COLLECTIVE", "EXTERN", "SCATTER", "SCAN"):
        if op in getattr(GroupOp, name):
            return name.lower()
    return "structural"
