# k_3d1e65169618ea1f: 1330 us/step, 23 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    n = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(m == n, m + 0.6931471805599453, m + libdevice.log1p(tl.exp(n - m)))


@triton.jit
def _logcumsumexp(x, axis):
    return tl.associative_scan(x, axis, _logaddexp)


@triton.jit
def _logsumexp_along(x, axis):
    return tl.reduce(x, axis, _logaddexp)


@triton.jit
def _cummax(x, axis):
    return tl.associative_scan(x, axis, _maximum)


@triton.jit
def _cummin(x, axis):
    return tl.associative_scan(x, axis, _minimum)


@triton.jit
def k_3d1e65169618ea1f(in_0, in_1, in_2, in_3, in_4, in_5, out_0, out_1, out_2, out_3, out_4, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    rbase = tl.arange(0, RBLOCK)[None, :]
    rindex = rbase
    rmask = rindex < 768
    t23_acc = tl.full([1, RBLOCK], 0, tl.float32)
    t25_acc = tl.full([1, RBLOCK], 0, tl.float32)
    t26_acc = tl.full([1, RBLOCK], 0, tl.float32)
    for xi in tl.range(0, 32, XBLOCK, num_stages=3):
        xindex = tl.program_id(0) * 32 + xi + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < 16384
        t0 = tl.load(in_0 + (rindex + xindex * 768), xmask & rmask, other=0).to(tl.float32)
        t1 = t0
        t2 = tl.load(in_1 + (rindex), xmask & rmask, other=0)
        t3 = (t1 * t2)
        t4 = tl.sum(tl.where(xmask & rmask, t3, 0), 1)[:, None]
        t5 = tl.load(in_2 + (rindex + xindex * 768), xmask & rmask, other=0)
        t6 = tl.load(in_3 + (xindex), xmask, other=0)
        t7 = (t5 - t6)
        t8 = tl.load(in_4 + (xindex), xmask, other=0)
        t9 = (t7 * t8)
        t10 = (t3 * t9)
        t11 = tl.sum(tl.where(xmask & rmask, t10, 0), 1)[:, None]
        t12 = tl.load(in_5 + (rindex + xindex * 768), xmask & rmask, other=0)
        t13 = tl.full([1, 1], 768.0, tl.float32)
        t14 = tl.div_rn(t8, t13)
        t15 = (t3 * t13)
        t16 = (t15 - t4)
        t17 = (t9 * t11)
        t18 = (t16 - t17)
        t19 = (t14 * t18)
        t20 = (t12 + t19)
        tl.store(out_0 + (rindex + xindex * 768), t20, xmask & rmask)
        t21 = _bf16(t20).to(tl.float32)
        tl.store(out_1 + (rindex + xindex * 768), _bf16(t21), xmask & rmask)
        t22 = t21
        t23_acc = t23_acc + tl.where(xmask & rmask, t22, 0)
        t24 = (t1 * t9)
        t25_acc = t25_acc + tl.where(xmask & rmask, t24, 0)
        t26_acc = t26_acc + tl.where(xmask & rmask, t1, 0)
    xindex = tl.program_id(0) * 32 + tl.zeros([1, 1], tl.int32)
    xmask = xindex < 16384
    t23 = t23_acc
    t25 = t25_acc
    t26 = t26_acc
    tl.store(out_2 + (((xindex) // 32) * 768 + rindex), t23, xmask & rmask)
    tl.store(out_3 + (((xindex) // 32) * 768 + rindex), t25, xmask & rmask)
    tl.store(out_4 + (((xindex) // 32) * 768 + rindex), t26, xmask & rmask)


# k_621437253f0da460: 943 us/step, 12 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    n = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(m == n, m + 0.6931471805599453, m + libdevice.log1p(tl.exp(n - m)))


@triton.jit
def _logcumsumexp(x, axis):
    return tl.associative_scan(x, axis, _logaddexp)


@triton.jit
def _logsumexp_along(x, axis):
    return tl.reduce(x, axis, _logaddexp)


@triton.jit
def _cummax(x, axis):
    return tl.associative_scan(x, axis, _maximum)


@triton.jit
def _cummin(x, axis):
    return tl.associative_scan(x, axis, _minimum)


@triton.jit
def k_621437253f0da460(in_0, in_1, out_0, out_1, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < 98304
    rbase = tl.arange(0, RBLOCK)[:, None]
    t6 = tl.full([1, 1], 0.044715, tl.float32)
    t9 = tl.full([1, 1], 0.7978845608028654, tl.float32)
    t11 = tl.full([1, 1], 2.0, tl.float32)
    t16 = tl.full([1, 1], 1.0, tl.float32)
    t19 = tl.full([1, 1], 0.134145, tl.float32)
    t28_acc = tl.full([RBLOCK, XBLOCK], 0, tl.float32)
    for roffset in tl.range(0, 512, RBLOCK, num_stages=3):
        rindex = roffset + rbase
        rmask = rindex < 512
        t0 = tl.load(in_0 + (((xindex) // 3072) * 1572864 + ((xindex) % 3072) + rindex * 3072), xmask & rmask, other=0).to(tl.float32)
        t1 = t0
        t2 = tl.load(in_1 + (((xindex) // 3072) * 1572864 + ((xindex) % 3072) + rindex * 3072), xmask & rmask, other=0).to(tl.float32)
        t3 = t2
        t4 = (t3 * t3)
        t5 = (t4 * t3)
        t7 = (t5 * t6)
        t8 = (t3 + t7)
        t10 = (t8 * t9)
        t12 = (t10 * t11)
        t13 = tl.sigmoid(t12)
        t14 = (t3 * t11)
        t15 = (t14 * t13)
        t17 = (t16 - t13)
        t18 = (t15 * t17)
        t20 = (t4 * t19)
        t21 = (t20 + t16)
        t22 = (t21 * t9)
        t23 = (t18 * t22)
        t24 = (t13 + t23)
        t25 = (t1 * t24)
        t26 = _bf16(t25).to(tl.float32)
        t27 = t26
        tl.store(out_0 + (((xindex) // 3072) * 1572864 + ((xindex) % 3072) + rindex * 3072), _bf16(t26), xmask & rmask)
        t28_acc = t28_acc + tl.where(xmask & rmask, t27, 0)
    t28 = tl.sum(t28_acc, 0)[None, :]
    tl.store(out_1 + (xindex), t28, xmask)


# k_a14c1ca25b2d047c: 863 us/step, 23 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    n = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(m == n, m + 0.6931471805599453, m + libdevice.log1p(tl.exp(n - m)))


@triton.jit
def _logcumsumexp(x, axis):
    return tl.associative_scan(x, axis, _logaddexp)


@triton.jit
def _logsumexp_along(x, axis):
    return tl.reduce(x, axis, _logaddexp)


@triton.jit
def _cummax(x, axis):
    return tl.associative_scan(x, axis, _maximum)


@triton.jit
def _cummin(x, axis):
    return tl.associative_scan(x, axis, _minimum)


@triton.jit
def k_a14c1ca25b2d047c(in_0, in_1, in_2, in_3, out_0, out_1, out_2, out_3, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < 16384
    rbase = tl.arange(0, RBLOCK)[None, :]
    rindex = rbase
    rmask = rindex < 768
    t0 = tl.load(in_0 + (rindex + xindex * 768), xmask & rmask, other=0)
    t1 = tl.load(in_1 + (rindex + xindex * 768), xmask & rmask, other=0).to(tl.float32)
    t2 = t1
    t3 = (t0 + t2)
    tl.store(out_0 + (rindex + xindex * 768), t3, xmask & rmask)
    t4 = tl.sum(tl.where(xmask & rmask, t3, 0), 1)[:, None]
    t5 = tl.full([1, 1], 768.0, tl.float32)
    t6 = tl.div_rn(t4, t5)
    tl.store(out_1 + (xindex), t6, xmask)
    t7 = (t3 - t6)
    t8 = (t7 * t7)
    t9 = tl.sum(tl.where(xmask & rmask, t8, 0), 1)[:, None]
    t10 = tl.div_rn(t9, t5)
    t11 = tl.full([1, 1], 1e-05, tl.float32)
    t12 = (t10 + t11)
    t13 = tl.rsqrt(t12)
    tl.store(out_2 + (xindex), t13, xmask)
    t14 = (t7 * t13)
    t15 = tl.load(in_2 + (rindex), xmask & rmask, other=0)
    t16 = (t14 * t15)
    t17 = tl.load(in_3 + (rindex), xmask & rmask, other=0)
    t18 = (t16 + t17)
    t19 = _bf16(t18).to(tl.float32)
    tl.store(out_3 + (rindex + xindex * 768), _bf16(t19), xmask & rmask)


# k_c14e0502dc57706c: 569 us/step, 12 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    n = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(m == n, m + 0.6931471805599453, m + libdevice.log1p(tl.exp(n - m)))


@triton.jit
def _logcumsumexp(x, axis):
    return tl.associative_scan(x, axis, _logaddexp)


@triton.jit
def _logsumexp_along(x, axis):
    return tl.reduce(x, axis, _logaddexp)


@triton.jit
def _cummax(x, axis):
    return tl.associative_scan(x, axis, _maximum)


@triton.jit
def _cummin(x, axis):
    return tl.associative_scan(x, axis, _minimum)


@triton.jit
def k_c14e0502dc57706c(in_0, out_0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < 50331648
    t0 = tl.load(in_0 + (xindex), xmask, other=0).to(tl.float32)
    t1 = t0
    t2 = (t1 * t1)
    t3 = (t2 * t1)
    t4 = tl.full([1], 0.044715, tl.float32)
    t5 = (t3 * t4)
    t6 = (t1 + t5)
    t7 = tl.full([1], 0.7978845608028654, tl.float32)
    t8 = (t6 * t7)
    t9 = tl.full([1], 2.0, tl.float32)
    t10 = (t8 * t9)
    t11 = tl.sigmoid(t10)
    t12 = (t1 * t11)
    t13 = _bf16(t12).to(tl.float32)
    tl.store(out_0 + (xindex), _bf16(t13), xmask)


# k_ba0cc5a067c64eaa: 522 us/step, 12 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    n = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(m == n, m + 0.6931471805599453, m + libdevice.log1p(tl.exp(n - m)))


@triton.jit
def _logcumsumexp(x, axis):
    return tl.associative_scan(x, axis, _logaddexp)


@triton.jit
def _logsumexp_along(x, axis):
    return tl.reduce(x, axis, _logaddexp)


@triton.jit
def _cummax(x, axis):
    return tl.associative_scan(x, axis, _maximum)


@triton.jit
def _cummin(x, axis):
    return tl.associative_scan(x, axis, _minimum)


@triton.jit
def k_ba0cc5a067c64eaa(in_0, in_1, in_2, out_0, out_1, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < 73728
    rbase = tl.arange(0, RBLOCK)[:, None]
    t0 = (((xindex) % 2304)) + tl.zeros([1, XBLOCK], tl.int64)
    t1 = tl.full([1, 1], 0, tl.int64)
    t2 = tl.full([1, 1], 1, tl.int1)
    t3 = tl.full([1, 1], 768, tl.int64)
    t4 = (t0 < t3)
    t6 = (((xindex) % 2304)) + tl.zeros([1, XBLOCK], tl.int64)
    t7 = tl.full([1, 1], 768, tl.int64)
    t8 = (t6 >= t7)
    t9 = tl.full([1, 1], 1536, tl.int64)
    t10 = (t6 < t9)
    t11 = (t8 & t10)
    t13 = (((xindex) % 2304)) + tl.zeros([1, XBLOCK], tl.int64)
    t14 = tl.full([1, 1], 1536, tl.int64)
    t15 = (t13 >= t14)
    t16 = tl.full([1, 1], 2304, tl.int64)
    t17 = tl.full([1, 1], 1, tl.int1)
    t22_acc = tl.full([RBLOCK, XBLOCK], 0, tl.float32)
    for roffset in tl.range(0, 512, RBLOCK, num_stages=3):
        rindex = roffset + rbase
        rmask = rindex < 512
        t5 = tl.load(in_0 + (((xindex) // 2304) * 393216 + ((xindex) % 2304) + rindex * 768), xmask & rmask & t4, other=0).to(tl.float32)
        t12 = tl.load(in_1 + (((xindex) // 2304) * 393216 + ((xindex) % 2304) + rindex * 768 - 768), xmask & rmask & t11, other=0).to(tl.float32)
        t18 = tl.load(in_2 + (((xindex) // 2304) * 393216 + ((xindex) % 2304) + rindex * 768 - 1536), xmask & rmask & t15, other=0).to(tl.float32)
        t19 = tl.where(t11, t12, t18)
        t20 = tl.where(t4, t5, t19)
        t21 = t20
        tl.store(out_0 + (((xindex) // 2304) * 1179648 + ((xindex) % 2304) + rindex * 2304), _bf16(t20), xmask & rmask)
        t22_acc = t22_acc + tl.where(xmask & rmask, t21, 0)
    t22 = tl.sum(t22_acc, 0)[None, :]
    tl.store(out_1 + (xindex), t22, xmask)


# k_e32027ea9a14ea79: 121 us/step, 50 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    n = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(m == n, m + 0.6931471805599453, m + libdevice.log1p(tl.exp(n - m)))


@triton.jit
def _logcumsumexp(x, axis):
    return tl.associative_scan(x, axis, _logaddexp)


@triton.jit
def _logsumexp_along(x, axis):
    return tl.reduce(x, axis, _logaddexp)


@triton.jit
def _cummax(x, axis):
    return tl.associative_scan(x, axis, _maximum)


@triton.jit
def _cummin(x, axis):
    return tl.associative_scan(x, axis, _minimum)


@triton.jit
def k_e32027ea9a14ea79(in_0, out_0, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < 768
    rbase = tl.arange(0, RBLOCK)[:, None]
    rindex = rbase
    rmask = rindex < 512
    t0 = tl.load(in_0 + (rindex * 768 + xindex), xmask & rmask, other=0)
    t1 = tl.sum(t0, 0)[None, :]
    tl.store(out_0 + (xindex), t1, xmask)


# k_88c88bcf36635e4c: 119 us/step, 24 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    n = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(m == n, m + 0.6931471805599453, m + libdevice.log1p(tl.exp(n - m)))


@triton.jit
def _logcumsumexp(x, axis):
    return tl.associative_scan(x, axis, _logaddexp)


@triton.jit
def _logsumexp_along(x, axis):
    return tl.reduce(x, axis, _logaddexp)


@triton.jit
def _cummax(x, axis):
    return tl.associative_scan(x, axis, _maximum)


@triton.jit
def _cummin(x, axis):
    return tl.associative_scan(x, axis, _minimum)


@triton.jit
def k_88c88bcf36635e4c(in_0, out_0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < 2359296
    t0 = tl.load(in_0 + (xindex), xmask, other=0)
    t1 = _bf16(t0).to(tl.float32)
    tl.store(out_0 + (xindex), _bf16(t1), xmask)


# k_9f340318e70c3397: 72 us/step, 1 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice

    @triton.jit
    def _bf16(x):       # the interpreter truncates fp32 -> bf16: round to nearest even
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(tl.bfloat16)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def _bf16(x):
        return x.to(tl.bfloat16)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _maximum)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _minimum)


@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))


@triton.jit
def _logaddexp(a, b):
    m = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    n = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(m == n, m + 0.6931471805599453, m + libdevice.log1p(tl.exp(n - m)))


@triton.jit
def _logcumsumexp(x, axis):
    return tl.associative_scan(x, axis, _logaddexp)


@triton.jit
def _logsumexp_along(x, axis):
    return tl.reduce(x, axis, _logaddexp)


@triton.jit
def _cummax(x, axis):
    return tl.associative_scan(x, axis, _maximum)


@triton.jit
def _cummin(x, axis):
    return tl.associative_scan(x, axis, _minimum)


@triton.jit
def k_9f340318e70c3397(in_0, in_1, in_2, in_3, in_4, in_5, in_6, in_7, out_0, out_1, out_2, out_3, out_4, out_5, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    rbase = tl.arange(0, RBLOCK)[None, :]
    rindex = rbase
    rmask = rindex < 768
    t26_acc = tl.full([1, RBLOCK], 0, tl.float32)
    t28_acc = tl.full([1, RBLOCK], 0, tl.float32)
    t29_acc = tl.full([1, RBLOCK], 0, tl.float32)
    for xi in tl.range(0, 32, XBLOCK, num_stages=3):
        xindex = tl.program_id(0) * 32 + xi + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < 16384
        t0 = tl.load(in_0 + (rindex + xindex * 768), xmask & rmask, other=0).to(tl.float32)
        t1 = tl.load(in_1 + ((0) + tl.zeros([1, 1], tl.int32))).to(tl.float32)
        t2 = (t0 * t1)
        t3 = t2
        t4 = tl.load(in_2 + (rindex), xmask & rmask, other=0)
        t5 = (t3 * t4)
        t6 = tl.sum(tl.where(xmask & rmask, t5, 0), 1)[:, None]
        t7 = tl.load(in_3 + (rindex + xindex * 768), xmask & rmask, other=0)
        t8 = tl.load(in_4 + (rindex + xindex * 768), xmask & rmask, other=0).to(tl.float32)
        t9 = t8
        t10 = (t7 + t9)
        t11 = tl.load(in_5 + (xindex), xmask, other=0)
        t12 = (t10 - t11)
        t13 = tl.load(in_6 + (xindex), xmask, other=0)
        t14 = (t12 * t13)
        t15 = (t5 * t14)
        t16 = tl.sum(tl.where(xmask & rmask, t15, 0), 1)[:, None]
        t17 = tl.full([1, 1], 768.0, tl.float32)
        t18 = tl.div_rn(t13, t17)
        t19 = (t5 * t17)
        t20 = (t19 - t6)
        t21 = (t14 * t16)
        t22 = (t20 - t21)
        t23 = (t18 * t22)
        tl.store(out_0 + (rindex + xindex * 768), t23, xmask & rmask)
        t24 = _bf16(t23).to(tl.float32)
        tl.store(out_1 + (rindex + xindex * 768), _bf16(t24), xmask & rmask)
        t25 = t24
        t26_acc = t26_acc + tl.where(xmask & rmask, t25, 0)
        t27 = (t3 * t14)
        t28_acc = t28_acc + tl.where(xmask & rmask, t27, 0)
        t29_acc = t29_acc + tl.where(xmask & rmask, t3, 0)
        t30 = tl.load(in_7 + (rindex + xindex * 768), xmask & rmask, other=0).to(tl.float32)
        t31 = (t30 * t1)
        tl.store(out_5 + (rindex + xindex * 768), _bf16(t31), xmask & rmask)
    xindex = tl.program_id(0) * 32 + tl.zeros([1, 1], tl.int32)
    xmask = xindex < 16384
    t26 = t26_acc
    t28 = t28_acc
    t29 = t29_acc
    tl.store(out_2 + (((xindex) // 32) * 768 + rindex), t26, xmask & rmask)
    tl.store(out_3 + (((xindex) // 32) * 768 + rindex), t28, xmask & rmask)
    tl.store(out_4 + (((xindex) // 32) * 768 + rindex), t29, xmask & rmask)
