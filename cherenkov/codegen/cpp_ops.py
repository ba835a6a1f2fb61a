"""How each elementwise op, cast and literal of the kernel IR reads in C++ source.

The C++ twin of `triton_ops.py`, with the same numerics: floats are computed in `float` (fp64
stays `double`); bf16/fp16 live as their 16 bits in memory and as `float` in registers, so they
are rounded only by explicit casts and at stores. Integer division and remainder follow
Python/PyTorch (floor) semantics; where PyTorch defines a result C leaves undefined (integer
division by zero, shifts past the width, NaN in max/min) the helpers in `PRELUDE` give
PyTorch's answer instead of undefined behaviour.
"""
from __future__ import annotations

import torch

from cherenkov.ir.ops import Op

# ---- types ---------------------------------------------------------------------------------

_STORAGE = {
    torch.float32: "float", torch.float64: "double", torch.bfloat16: "uint16_t",
    torch.float16: "uint16_t", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
}
LOW_PRECISION = {torch.bfloat16: "bf16", torch.float16: "f16"}


def storage_type(dtype: torch.dtype) -> str:
    """The C++ element type of a buffer of `dtype` (bf16/fp16 as their raw 16 bits)."""
    if dtype not in _STORAGE:
        raise NotImplementedError(f"no C++ storage type for {dtype}")
    return _STORAGE[dtype]


def register_type(dtype: torch.dtype) -> str:
    """The C++ type a value of IR dtype `dtype` is computed in."""
    if dtype in LOW_PRECISION:
        return "float"
    return storage_type(dtype)


def load_expr(ptr_elem: str, dtype: torch.dtype) -> str:
    """Widen one element read from memory to its register type."""
    if dtype in LOW_PRECISION:
        return f"ck_{LOW_PRECISION[dtype]}_to_f({ptr_elem})"
    return ptr_elem


def store_expr(value: str, dtype: torch.dtype) -> str:
    """Narrow a register value to the bits stored in a buffer of `dtype` (RNE rounding)."""
    if dtype in LOW_PRECISION:
        return f"ck_f_to_{LOW_PRECISION[dtype]}({value})"
    if dtype == torch.bool:
        return f"({value} != 0)"
    return value        # the value already has the buffer's type (the builder casts first)


def cast_expr(value: str, src: torch.dtype, dst: torch.dtype) -> str:
    """An explicit Cast: rounds to bf16/fp16 (result kept in float), truncates to integers."""
    if dst == src:
        return value
    if dst in LOW_PRECISION:
        kind = LOW_PRECISION[dst]
        return f"ck_{kind}_to_f(ck_f_to_{kind}(static_cast<float>({value})))"
    if dst == torch.bool:
        return f"({value} != 0)"
    return f"static_cast<{register_type(dst)}>({value})"


def literal(value, dtype: torch.dtype) -> str:
    """A constant of IR dtype `dtype`, exact (hex floats) and typed."""
    if dtype == torch.bool:
        return "true" if value else "false"
    ctype = register_type(dtype)
    if dtype.is_floating_point:
        v = float(value)
        if v != v:
            return f"std::numeric_limits<{ctype}>::quiet_NaN()"
        if v in (float("inf"), float("-inf")):
            return f"{'-' if v < 0 else ''}std::numeric_limits<{ctype}>::infinity()"
        return f"static_cast<{ctype}>({v.hex()})"    # exact double, rounded once to the type
    v = int(value)
    if v == -2 ** 63:
        return f"static_cast<{ctype}>(INT64_MIN)"
    return f"static_cast<{ctype}>(INT64_C({v}))"


# ---- elementwise ops -----------------------------------------------------------------------

UNARY = {
    Op.NEG: "(-{0})", Op.EXP: "ck_exp({0})", Op.EXP2: "std::exp2({0})",
    Op.EXPM1: "std::expm1({0})", Op.LOG: "std::log({0})", Op.LOG2: "std::log2({0})",
    Op.LOG10: "std::log10({0})",
    Op.LOG1P: "std::log1p({0})", Op.SQRT: "std::sqrt({0})", Op.RSQRT: "({1}(1) / std::sqrt({0}))",
    Op.RECIPROCAL: "({1}(1) / {0})", Op.SIN: "std::sin({0})", Op.COS: "std::cos({0})",
    Op.TAN: "std::tan({0})", Op.ASIN: "std::asin({0})", Op.ACOS: "std::acos({0})",
    Op.ATAN: "std::atan({0})", Op.SINH: "std::sinh({0})", Op.COSH: "std::cosh({0})",
    Op.TANH: "ck_tanh({0})", Op.ASINH: "std::asinh({0})", Op.ACOSH: "std::acosh({0})",
    Op.ATANH: "std::atanh({0})", Op.ERF: "std::erf({0})", Op.ERFC: "std::erfc({0})",
    Op.ERFINV: "ck_erfinv({0})", Op.SIGMOID: "({1}(1) / ({1}(1) + ck_exp(-{0})))",
    Op.FLOOR: "std::floor({0})", Op.CEIL: "std::ceil({0})", Op.ROUND: "std::nearbyint({0})",
    Op.TRUNC: "std::trunc({0})", Op.NOT: "({0} == 0)", Op.ISNAN: "({0} != {0})",
    Op.ISINF: "(std::fabs({0}) == std::numeric_limits<double>::infinity())",
    Op.LGAMMA: "std::lgamma({0})", Op.SIGN: "static_cast<{1}>(({0} > 0) - ({0} < 0))",
}
BINARY = {
    Op.ADD: "({0} + {1})", Op.SUB: "({0} - {1})", Op.MUL: "({0} * {1})", Op.DIV: "({0} / {1})",
    Op.MAXIMUM: "ck_maximum({0}, {1})", Op.MINIMUM: "ck_minimum({0}, {1})",
    Op.ATAN2: "std::atan2({0}, {1})", Op.HYPOT: "std::hypot({0}, {1})",
    Op.COPYSIGN: "std::copysign({0}, {1})", Op.NEXTAFTER: "std::nextafter({0}, {1})",
    Op.EQ: "({0} == {1})", Op.NE: "({0} != {1})", Op.LT: "({0} < {1})", Op.LE: "({0} <= {1})",
    Op.GT: "({0} > {1})", Op.GE: "({0} >= {1})",
    Op.BITWISE_AND: "({0} & {1})", Op.BITWISE_OR: "({0} | {1})", Op.BITWISE_XOR: "({0} ^ {1})",
    Op.SHL: "ck_shl({0}, {1})", Op.SHR: "ck_shr({0}, {1})",
}
LOGICAL = {Op.AND: "&", Op.OR: "|", Op.XOR: "^"}


def render_op(op: Op, args: list[str], dtype: torch.dtype, arg_dtypes) -> str:
    """Source for `op(*args)`; `dtype` is the result's IR dtype, `arg_dtypes` the operands'."""
    ctype = register_type(dtype)
    floating = any(d.is_floating_point for d in arg_dtypes)
    if op == Op.WHERE:
        return f"({args[0]} ? {args[1]} : {args[2]})"
    if op == Op.FMA:
        return f"std::fma({args[0]}, {args[1]}, {args[2]})"
    if op in (Op.FLOORDIV, Op.TRUNCDIV, Op.REMAINDER, Op.FMOD):
        kind = "f" if floating else "i"
        name = {Op.FLOORDIV: "floordiv", Op.TRUNCDIV: "truncdiv", Op.REMAINDER: "mod",
                Op.FMOD: "fmod"}[op]
        return f"ck_{name}_{kind}({args[0]}, {args[1]})"
    if op == Op.ABS:
        if arg_dtypes[0] == torch.bool:
            return args[0]
        return f"std::fabs({args[0]})" if floating else f"ck_iabs({args[0]})"
    if op == Op.BITWISE_NOT:
        return f"(!{args[0]})" if arg_dtypes[0] == torch.bool else f"(~{args[0]})"
    if op in LOGICAL:
        a, b = (x if d == torch.bool else f"({x} != 0)" for x, d in zip(args, arg_dtypes))
        return f"({a} {LOGICAL[op]} {b})"
    if op == Op.POW:
        return f"std::pow({args[0]}, {args[1]})" if floating else f"ck_ipow({args[0]}, {args[1]})"
    if op == Op.DIV and not floating:
        raise NotImplementedError("integer true division")
    if op in UNARY:
        return UNARY[op].format(args[0], ctype)
    if op in BINARY:
        return BINARY[op].format(*args)
    raise NotImplementedError(f"no C++ rendering for {op.name}")


PRELUDE = r'''// Generated by Cherenkov's C++ renderer (cherenkov/codegen/cpp_renderer.py).
// Numerics: floats in float (double for fp64); bf16/fp16 rounded (RNE) only at casts and stores.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
static inline int ck_thread_id() { return omp_get_thread_num(); }
static inline int ck_thread_count() { return omp_get_num_threads(); }
#else
static inline int ck_thread_id() { return 0; }
static inline int ck_thread_count() { return 1; }
#endif

// bit casts the vectorizer sees through (it gives up on memcpy into a local)
#if defined(__has_builtin)
#if __has_builtin(__builtin_bit_cast)
#define CK_BIT_CAST(T, v) __builtin_bit_cast(T, v)
#endif
#endif
#ifndef CK_BIT_CAST
template <class T, class F> static inline T ck_bit_cast(F v) { T t; std::memcpy(&t, &v, sizeof t); return t; }
#define CK_BIT_CAST(T, v) ck_bit_cast<T>(v)
#endif

static int ck_num_threads = 1;
extern "C" void cherenkov_set_num_threads(int n) { ck_num_threads = n > 0 ? n : 1; }
// set by an integer division by zero; the runtime raises after the call, as eager does
static int ck_zero_divisor = 0;
extern "C" int cherenkov_take_zero_divisor() {
    return __atomic_exchange_n(&ck_zero_divisor, 0, __ATOMIC_RELAXED);
}

// ---- bf16: the high 16 bits of an fp32 ------------------------------------------------------
static inline float ck_bf16_to_f(uint16_t b) {
    return CK_BIT_CAST(float, static_cast<uint32_t>(b) << 16);
}
static inline uint16_t ck_f_to_bf16(float f) {
    uint32_t u = CK_BIT_CAST(uint32_t, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;        // NaN, as PyTorch writes it
    u += 0x7fffu + ((u >> 16) & 1u);                           // round to nearest even
    return static_cast<uint16_t>(u >> 16);
}

// ---- fp16: _Float16 where the compiler has it, else exact bit conversion --------------------
#if defined(__FLT16_MAX__) && !defined(CK_NO_FLOAT16)
static inline float ck_f16_to_f(uint16_t h) { return CK_BIT_CAST(_Float16, h); }
static inline uint16_t ck_f_to_f16(float f) { return CK_BIT_CAST(uint16_t, static_cast<_Float16>(f)); }
#else
static inline float ck_bits_f(uint32_t u) { return CK_BIT_CAST(float, u); }
static inline uint32_t ck_f_bits(float f) { return CK_BIT_CAST(uint32_t, f); }
static inline float ck_f16_to_f(uint16_t h) {
    const uint32_t shifted_exp = 0x7c00u << 13;
    uint32_t o = (h & 0x7fffu) << 13, exp = shifted_exp & o;
    o += (127u - 15u) << 23;
    if (exp == shifted_exp) o += (128u - 16u) << 23;                   // inf / NaN
    else if (exp == 0) o = ck_f_bits(ck_bits_f(o + (1u << 23)) - ck_bits_f(113u << 23));  // subnormal
    return ck_bits_f(o | ((h & 0x8000u) << 16));
}
static inline uint16_t ck_f_to_f16(float f) {
    uint32_t u = ck_f_bits(f), sign = u & 0x80000000u; u ^= sign;
    uint16_t o;
    if (u >= (127u + 16u) << 23) o = u > (255u << 23) ? 0x7e00 : 0x7c00;  // NaN / overflow
    else if (u < (113u << 23))                                             // subnormal result
        o = static_cast<uint16_t>(ck_f_bits(ck_bits_f(u) + ck_bits_f(126u << 23)) - (126u << 23));
    else {
        uint32_t odd = (u >> 13) & 1u;
        u += ((15u - 127u) << 23) + 0xfffu + odd;                          // round to nearest even
        o = static_cast<uint16_t>(u >> 13);
    }
    return static_cast<uint16_t>(o | (sign >> 16));
}
#endif

// ---- PyTorch semantics where C differs ------------------------------------------------------
template <class T> static inline T ck_maximum(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; if (b != b) return b; }
    return a > b ? a : b;
}
template <class T> static inline T ck_minimum(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; if (b != b) return b; }
    return a < b ? a : b;
}
// logaddexp as eager's logcumsumexp combines: equal operands (infinities too) give max + log 2
template <class T> static inline T ck_logaddexp(T a, T b) {
    const T m = ck_maximum(a, b), n = ck_minimum(a, b);
    return m == n ? m + T(0.6931471805599453) : m + std::log1p(std::exp(n - m));
}
template <class T> static inline T ck_iabs(T a) { return a < 0 ? static_cast<T>(-a) : a; }
// integer division: 0 for a zero divisor (C would trap) and the flag set, wrapping for MIN / -1
template <class T, class U> static inline auto ck_truncdiv_i(T a, U b) {
    using R = std::common_type_t<T, U>;
    if (b == 0) { __atomic_store_n(&ck_zero_divisor, 1, __ATOMIC_RELAXED); return R(0); }
    if (b == -1) return static_cast<R>(R(0) - static_cast<R>(a));
    return static_cast<R>(a / b);
}
template <class T, class U> static inline auto ck_fmod_i(T a, U b) {
    using R = std::common_type_t<T, U>;
    if (b == 0) { __atomic_store_n(&ck_zero_divisor, 1, __ATOMIC_RELAXED); return R(0); }
    if (b == -1) return R(0);
    return static_cast<R>(a % b);
}
template <class T, class U> static inline auto ck_floordiv_i(T a, U b) {
    auto q = ck_truncdiv_i(a, b); auto r = ck_fmod_i(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<decltype(q)>(q - 1) : q;
}
template <class T, class U> static inline auto ck_mod_i(T a, U b) {
    auto r = ck_fmod_i(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<decltype(r)>(r + b) : r;
}
// floating floor division and remainder exactly as ATen's div_floor / remainder
template <class T> static inline T ck_floordiv_f(T a, T b) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b), div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
    if (div == 0) return std::copysign(T(0), a / b);
    T floordiv = std::floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
    return floordiv;
}
template <class T> static inline T ck_mod_f(T a, T b) {
    T mod = std::fmod(a, b);
    if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
    return mod;
}
template <class T> static inline T ck_truncdiv_f(T a, T b) { return std::trunc(a / b); }
template <class T> static inline T ck_fmod_f(T a, T b) { return std::fmod(a, b); }
template <class T, class U> static inline T ck_shl(T a, U b) {
    return (b < 0 || b >= static_cast<U>(8 * sizeof(T))) ? T(0)
        : static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) << b);
}
template <class T, class U> static inline T ck_shr(T a, U b) {
    if (b < 0 || b >= static_cast<U>(8 * sizeof(T))) return a < 0 ? T(-1) : T(0);
    return static_cast<T>(a >> b);
}
template <class T, class U> static inline T ck_ipow(T a, U b) {
    if (b < 0) return a == 1 ? T(1) : a == -1 ? ((b & 1) ? T(-1) : T(1)) : T(0);
    T result = 1;
    while (b) { if (b & 1) result = static_cast<T>(result * a); a = static_cast<T>(a * a); b >>= 1; }
    return result;
}
// ---- vectorizable float exp and tanh (Cephes; <= 2 ulp), plain arithmetic the compiler can
// turn into SIMD, where libm's expf/tanhf calls would keep the loop scalar. fp64 uses libm.
// Fused multiply-add where the hardware has one (one instruction, one rounding); elsewhere a
// multiply then an add, since a libm fma call would keep the loops scalar.
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define CK_FMA(a, b, c) std::fma(a, b, c)
#else
#define CK_FMA(a, b, c) ((a) * (b) + (c))
#endif
// exp(x) = 2^k exp(r). Nothing is clamped up front (a clamp lets gcc specialize the clamped
// lanes, a pile of masked moves): 2^k is built without a float -> int conversion, so every x
// is defined, and out of range (or NaN) the final selects replace the result. Without FMA
// this is bit for bit the unfused Cephes formula; with it, at most 1 ulp from the correctly
// rounded exp, the same on every machine with FMA (both checked on all 2^32 inputs).
static inline float ck_exp(float x) {
    const float k = std::floor(x * 1.44269504088896341f + 0.5f);
    float r = CK_FMA(k, -0.693359375f, x);
    r = CK_FMA(k, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = CK_FMA(p, r, 1.3981999507e-3f); p = CK_FMA(p, r, 8.3334519073e-3f);
    p = CK_FMA(p, r, 4.1665795894e-2f); p = CK_FMA(p, r, 1.6666665459e-1f);
    p = CK_FMA(p, r, 5.0000001201e-1f);
    // 2^k = 2^k1 2^k2, k1 = floor(k / 2) (k in [-150, 128] in range): k1 + 127 is the low
    // mantissa bits of k1 + (2^23 + 127), shifted up into the exponent field
    const float k1 = std::floor(k * 0.5f), k2 = k - k1;
    const float s1 = CK_BIT_CAST(float, CK_BIT_CAST(uint32_t, k1 + 8388735.0f) << 23);
    const float s2 = CK_BIT_CAST(float, CK_BIT_CAST(uint32_t, k2 + 8388735.0f) << 23);
    float y = (CK_FMA(p * r, r, r) + 1.0f) * s1 * s2;
    y = x > 88.72283935546875f ? std::numeric_limits<float>::infinity() : y;
    y = x < -103.972084045410f ? 0.0f : y;
    return x != x ? x : y;
}
static inline double ck_exp(double x) { return std::exp(x); }
template <class T> static inline double ck_exp(T x) { return std::exp(static_cast<double>(x)); }
static inline float ck_tanh(float x) {
    float a = std::fabs(x), z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                    + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    float big = 1.0f - 2.0f / (ck_exp(2.0f * (a > 20.0f ? 20.0f : a)) + 1.0f);
    big = std::copysign(big, x);
    return a < 0.625f ? small : (x != x ? x : big);
}
static inline double ck_tanh(double x) { return std::tanh(x); }
template <class T> static inline double ck_tanh(T x) { return std::tanh(static_cast<double>(x)); }

// erfinv: ATen's calc_erfinv (rational approximation + two Newton steps)
template <class T> static inline T ck_erfinv(T y) {
    const double a[4] = {0.886226899, -1.645349621, 0.914624893, -0.140543331};
    const double b[4] = {-2.118377725, 1.442710462, -0.329097515, 0.012229801};
    const double c[4] = {-1.970840454, -1.624906493, 3.429567803, 1.641345311};
    const double d[2] = {3.543889200, 1.637067800};
    double x, z, num, dem, yd = y, ay = std::fabs(yd);
    if (ay > 1.0) return std::numeric_limits<T>::quiet_NaN();
    if (ay == 1.0) return std::copysign(std::numeric_limits<T>::infinity(), y);
    if (ay <= 0.7) {
        z = yd * yd;
        num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
        dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0;
        x = yd * num / dem;
    } else {
        z = std::sqrt(-std::log((1.0 - ay) / 2.0));
        num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
        dem = (d[1] * z + d[0]) * z + 1.0;
        x = std::copysign(num, yd) / dem;
    }
    const double two_over_sqrt_pi = 1.128379167095512573896158903121545171688;
    x = x - (std::erf(x) - yd) / (two_over_sqrt_pi * std::exp(-x * x));
    x = x - (std::erf(x) - yd) / (two_over_sqrt_pi * std::exp(-x * x));
    return static_cast<T>(x);
}
'''
