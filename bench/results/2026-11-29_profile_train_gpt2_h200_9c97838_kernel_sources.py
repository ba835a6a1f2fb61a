# k_e1653c0d33162739: 1369 us/step, 12 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_e1653c0d33162739(in_0, in_1, out_0, out_1, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < 98304
    rbase = tl.arange(0, RBLOCK)[:, None]
    t6 = tl.full([1, 1], 0.044715, tl.float32)
    t9 = tl.full([1, 1], 0.7978845608028654, tl.float32)
    t11 = tl.full([1, 1], 2.0, tl.float32)
    t16 = tl.full([1, 1], 1.0, tl.float32)
    t19 = tl.full([1, 1], 0.134145, tl.float32)
    t28_acc = tl.full([RBLOCK, XBLOCK], 0, tl.float32)
    for roffset in range(0, 512, RBLOCK):
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
        t26 = t25.to(tl.bfloat16).to(tl.float32)
        t27 = t26
        tl.store(out_0 + (((xindex) // 3072) * 1572864 + ((xindex) % 3072) + rindex * 3072), t26, xmask & rmask)
        t28_acc = t28_acc + tl.where(xmask & rmask, t27, 0)
    t28 = tl.sum(t28_acc, 0)[None, :]
    tl.store(out_1 + (xindex), t28, xmask)


# k_418aa6b1c00527fb: 1339 us/step, 23 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_418aa6b1c00527fb(in_0, in_1, in_2, in_3, in_4, out_0, out_1, out_2, out_3, out_4, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    rbase = tl.arange(0, RBLOCK)[None, :]
    rindex = rbase
    rmask = rindex < 768
    t19_acc = tl.full([1, RBLOCK], 0, tl.float32)
    t21_acc = tl.full([1, RBLOCK], 0, tl.float32)
    t22_acc = tl.full([1, RBLOCK], 0, tl.float32)
    for xi in tl.range(0, 32, XBLOCK, num_stages=3):
        xindex = tl.program_id(0) * 32 + xi + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < 16384
        t0 = tl.load(in_0 + (rindex + xindex * 768), xmask & rmask, other=0).to(tl.float32)
        t1 = t0
        t2 = tl.load(in_1 + (rindex), xmask & rmask, other=0)
        t3 = (t1 * t2)
        t4 = tl.sum(tl.where(xmask & rmask, t3, 0), 1)[:, None]
        t5 = tl.load(in_2 + (rindex + xindex * 768), xmask & rmask, other=0)
        t6 = (t3 * t5)
        t7 = tl.sum(tl.where(xmask & rmask, t6, 0), 1)[:, None]
        t8 = tl.load(in_3 + (rindex + xindex * 768), xmask & rmask, other=0)
        t9 = tl.load(in_4 + (xindex), xmask, other=0)
        t10 = tl.full([1, 1], 768.0, tl.float32)
        t11 = (t3 * t10)
        t12 = (t11 - t4)
        t13 = (t5 * t7)
        t14 = (t12 - t13)
        t15 = (t9 * t14)
        t16 = (t8 + t15)
        tl.store(out_0 + (rindex + xindex * 768), t16, xmask & rmask)
        t17 = t16.to(tl.bfloat16).to(tl.float32)
        tl.store(out_1 + (rindex + xindex * 768), t17, xmask & rmask)
        t18 = t17
        t19_acc = t19_acc + tl.where(xmask & rmask, t18, 0)
        t20 = (t1 * t5)
        t21_acc = t21_acc + tl.where(xmask & rmask, t20, 0)
        t22_acc = t22_acc + tl.where(xmask & rmask, t1, 0)
    xindex = tl.program_id(0) * 32 + tl.zeros([1, 1], tl.int32)
    xmask = xindex < 16384
    t19 = t19_acc
    t21 = t21_acc
    t22 = t22_acc
    tl.store(out_2 + (((xindex) // 32) * 768 + rindex), t19, xmask & rmask)
    tl.store(out_3 + (((xindex) // 32) * 768 + rindex), t21, xmask & rmask)
    tl.store(out_4 + (((xindex) // 32) * 768 + rindex), t22, xmask & rmask)


# k_5b523f570710cdf0: 1215 us/step, 1 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_5b523f570710cdf0(in_0, in_1, in_2, in_3, in_4, in_5, in_6, out_0, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < 16384
    rbase = tl.arange(0, RBLOCK)[None, :]
    t0 = tl.load(in_0 + (xindex), xmask, other=0)
    t1 = tl.full([1, 1], -100, tl.int64)
    t2 = (t0 != t1)
    t4 = tl.full([1, 1], 0, tl.int64)
    t5 = tl.where(t2, t0, t4)
    t7 = tl.full([1, 1], -1.0, tl.float32)
    t8 = tl.full([1, 1], 0.0, tl.float32)
    t10 = tl.load(in_1 + ((0) + tl.zeros([1, 1], tl.int32)))
    t11 = tl.load(in_2 + ((0) + tl.zeros([1, 1], tl.int32)))
    t12 = tl.div_rn(t10, t11)
    t13 = tl.where(t2, t12, t8)
    t21 = tl.load(in_5 + (xindex), xmask, other=0)
    t23 = tl.load(in_6 + (xindex), xmask, other=0)
    t17_acc = tl.full([XBLOCK, RBLOCK], 0, tl.float32)
    for roffset in range(0, 50304, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < 50304
        t3 = (rindex) + tl.zeros([XBLOCK, RBLOCK], tl.int64)
        t6 = (t3 == t5)
        t9 = tl.where(t6, t7, t8)
        t14 = (t9 * t13)
        t15 = t14.to(tl.bfloat16).to(tl.float32)
        t16 = t15
        t17_acc = t17_acc + tl.where(xmask & rmask, t16, 0)
    t17 = tl.sum(t17_acc, 1)[:, None]
    for roffset in range(0, 50304, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < 50304
        t3 = (rindex) + tl.zeros([XBLOCK, RBLOCK], tl.int64)
        t6 = (t3 == t5)
        t9 = tl.where(t6, t7, t8)
        t14 = (t9 * t13)
        t15 = t14.to(tl.bfloat16).to(tl.float32)
        t16 = t15
        t18 = tl.load(in_3 + (rindex + xindex * 50304), xmask & rmask, other=0).to(tl.float32)
        t19 = tl.load(in_4 + (rindex + xindex * 50304), xmask & rmask, other=0).to(tl.float32)
        t20 = t19
        t22 = (t20 - t21)
        t24 = (t22 - t23)
        t25 = t24.to(tl.bfloat16).to(tl.float32)
        t26 = t25
        t27 = tl.exp(t26)
        t28 = (t27 * t17)
        t29 = (t16 - t28)
        t30 = t29.to(tl.bfloat16).to(tl.float32)
        t31 = (t18 + t30)
        tl.store(out_0 + (rindex + xindex * 50304), t31, xmask & rmask)


# k_f6cee98f65f80d5b: 1084 us/step, 22 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_f6cee98f65f80d5b(in_0, in_1, in_2, in_3, out_0, out_1, out_2, out_3, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
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
    t7 = (t3 - t6)
    t8 = (t7 * t7)
    t9 = tl.sum(tl.where(xmask & rmask, t8, 0), 1)[:, None]
    t10 = tl.div_rn(t9, t5)
    t11 = tl.full([1, 1], 1e-05, tl.float32)
    t12 = (t10 + t11)
    t13 = tl.rsqrt(t12)
    t14 = (t7 * t13)
    tl.store(out_1 + (rindex + xindex * 768), t14, xmask & rmask)
    t15 = tl.load(in_2 + (rindex), xmask & rmask, other=0)
    t16 = (t14 * t15)
    t17 = tl.load(in_3 + (rindex), xmask & rmask, other=0)
    t18 = (t16 + t17)
    t19 = t18.to(tl.bfloat16).to(tl.float32)
    tl.store(out_2 + (rindex + xindex * 768), t19, xmask & rmask)
    t20 = tl.div_rn(t13, t5)
    tl.store(out_3 + (xindex), t20, xmask)


# k_d9b835cbd1921d23: 565 us/step, 12 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_d9b835cbd1921d23(in_0, out_0, XBLOCK: tl.constexpr):
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
    t13 = t12.to(tl.bfloat16).to(tl.float32)
    tl.store(out_0 + (xindex), t13, xmask)


# k_8df5f5a069eed0b5: 480 us/step, 12 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_8df5f5a069eed0b5(in_0, in_1, in_2, out_0, out_1, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < 73728
    rbase = tl.arange(0, RBLOCK)[:, None]
    t0 = (((xindex) % 2304)) + tl.zeros([1, XBLOCK], tl.int64)
    t1 = tl.full([1, 1], 0, tl.int64)
    t2 = (t0 >= t1)
    t3 = tl.full([1, 1], 768, tl.int64)
    t4 = (t0 < t3)
    t5 = (t2 & t4)
    t7 = (((xindex) % 2304)) + tl.zeros([1, XBLOCK], tl.int64)
    t8 = tl.full([1, 1], 768, tl.int64)
    t9 = (t7 >= t8)
    t10 = tl.full([1, 1], 1536, tl.int64)
    t11 = (t7 < t10)
    t12 = (t9 & t11)
    t14 = (((xindex) % 2304)) + tl.zeros([1, XBLOCK], tl.int64)
    t15 = tl.full([1, 1], 1536, tl.int64)
    t16 = (t14 >= t15)
    t17 = tl.full([1, 1], 2304, tl.int64)
    t18 = (t14 < t17)
    t19 = (t16 & t18)
    t24_acc = tl.full([RBLOCK, XBLOCK], 0, tl.float32)
    for roffset in range(0, 512, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < 512
        t6 = tl.load(in_0 + (((xindex) // 2304) * 393216 + ((xindex) % 2304) + rindex * 768), xmask & rmask & t5, other=0).to(tl.float32)
        t13 = tl.load(in_1 + (((xindex) // 2304) * 393216 + ((xindex) % 2304) + rindex * 768 - 768), xmask & rmask & t12, other=0).to(tl.float32)
        t20 = tl.load(in_2 + (((xindex) // 2304) * 393216 + ((xindex) % 2304) + rindex * 768 - 1536), xmask & rmask & t19, other=0).to(tl.float32)
        t21 = tl.where(t12, t13, t20)
        t22 = tl.where(t5, t6, t21)
        t23 = t22
        tl.store(out_0 + (((xindex) // 2304) * 1179648 + ((xindex) % 2304) + rindex * 2304), t22, xmask & rmask)
        t24_acc = t24_acc + tl.where(xmask & rmask, t23, 0)
    t24 = tl.sum(t24_acc, 0)[None, :]
    tl.store(out_1 + (xindex), t24, xmask)


# k_431d57ac729c0918: 449 us/step, 1 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_431d57ac729c0918(in_0, out_0, out_1, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < 16384
    rbase = tl.arange(0, RBLOCK)[None, :]
    t2_acc = tl.full([XBLOCK, 1], float('-inf'), tl.float32)
    t5_acc = tl.zeros([XBLOCK, 1], tl.float32)
    for roffset in range(0, 50304, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < 50304
        t0 = tl.load(in_0 + (rindex + xindex * 50304), xmask & rmask, other=0).to(tl.float32)
        t1 = t0
        t2_v = tl.where(xmask & rmask, t1, float('-inf'))
        t2_new = tl.maximum(t2_acc, tl.max(t2_v, 1)[:, None])
        t2_ref = tl.where(t2_new == float('-inf'), 0.0, t2_new)
        t5_acc = t5_acc * tl.exp(t2_acc - t2_ref) + tl.sum(tl.exp(t2_v - t2_ref), 1)[:, None]
        t2_acc = t2_new
    t2 = t2_acc
    t5 = t5_acc
    tl.store(out_0 + (xindex), t2, xmask)
    t6 = tl.log(t5)
    tl.store(out_1 + (xindex), t6, xmask)


# k_ba3a3acee6094e4b: 125 us/step, 50 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_ba3a3acee6094e4b(in_0, out_0, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < 768
    rbase = tl.arange(0, RBLOCK)[:, None]
    rindex = rbase
    rmask = rindex < 512
    t0 = tl.load(in_0 + (rindex * 768 + xindex), xmask & rmask, other=0)
    t1 = tl.sum(tl.where(xmask & rmask, t0, 0), 0)[None, :]
    tl.store(out_0 + (xindex), t1, xmask)


# k_26a7d1a52c5495ce: 118 us/step, 24 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_26a7d1a52c5495ce(in_0, out_0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < 2359296
    t0 = tl.load(in_0 + (xindex), xmask, other=0)
    t1 = t0.to(tl.bfloat16).to(tl.float32)
    tl.store(out_0 + (xindex), t1, xmask)


# k_2bb3b3955f3c3c21: 94 us/step, 24 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_2bb3b3955f3c3c21(in_0, out_0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < 2359296
    t0 = tl.load(in_0 + (xindex), xmask, other=0).to(tl.float32)
    t1 = t0
    tl.store(out_0 + (xindex), t1, xmask)


# k_50174eef65aa8d66: 66 us/step, 1 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_50174eef65aa8d66(in_0, in_1, in_2, in_3, in_4, in_5, in_6, out_0, out_1, out_2, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    rbase = tl.arange(0, RBLOCK)[None, :]
    rindex = rbase
    rmask = rindex < 768
    t24_acc = tl.full([1, RBLOCK], 0, tl.float32)
    t25_acc = tl.full([1, RBLOCK], 0, tl.float32)
    for xi in tl.range(0, 32, XBLOCK, num_stages=3):
        xindex = tl.program_id(0) * 32 + xi + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < 16384
        t0 = tl.load(in_0 + (rindex + xindex * 768), xmask & rmask, other=0).to(tl.float32)
        t1 = t0
        t2 = tl.load(in_1 + (rindex), xmask & rmask, other=0)
        t3 = (t1 * t2)
        t4 = tl.sum(tl.where(xmask & rmask, t3, 0), 1)[:, None]
        t5 = tl.load(in_2 + (rindex + xindex * 768), xmask & rmask, other=0)
        t6 = tl.load(in_3 + (((xindex) % 1024) * 768 + rindex), xmask & rmask, other=0)
        t7 = (t5 + t6)
        t8 = tl.load(in_4 + (xindex), xmask, other=0)
        t9 = (t7 - t8)
        t10 = tl.load(in_5 + (xindex), xmask, other=0)
        t11 = (t9 * t10)
        t12 = (t3 * t11)
        t13 = tl.sum(tl.where(xmask & rmask, t12, 0), 1)[:, None]
        t14 = tl.load(in_6 + (rindex + xindex * 768), xmask & rmask, other=0)
        t15 = tl.full([1, 1], 768.0, tl.float32)
        t16 = tl.div_rn(t10, t15)
        t17 = (t3 * t15)
        t18 = (t17 - t4)
        t19 = (t11 * t13)
        t20 = (t18 - t19)
        t21 = (t16 * t20)
        t22 = (t14 + t21)
        tl.store(out_0 + (rindex + xindex * 768), t22, xmask & rmask)
        t23 = (t1 * t11)
        t24_acc = t24_acc + tl.where(xmask & rmask, t23, 0)
        t25_acc = t25_acc + tl.where(xmask & rmask, t1, 0)
    xindex = tl.program_id(0) * 32 + tl.zeros([1, 1], tl.int32)
    xmask = xindex < 16384
    t24 = t24_acc
    t25 = t25_acc
    tl.store(out_1 + (((xindex) // 32) * 768 + rindex), t24, xmask & rmask)
    tl.store(out_2 + (((xindex) // 32) * 768 + rindex), t25, xmask & rmask)


# k_4efa24c2677aa1da: 61 us/step, 24 launches

import triton
import triton.language as tl
if triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False:
    from cherenkov.codegen import interpreter_libdevice as libdevice
else:
    from triton.language.extra import libdevice


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def k_4efa24c2677aa1da(in_0, out_0, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < 768
    rbase = tl.arange(0, RBLOCK)[:, None]
    rindex = rbase
    rmask = rindex < 512
    t0 = tl.load(in_0 + (rindex * 768 + xindex), xmask & rmask, other=0)
    t1 = tl.sum(tl.where(xmask & rmask, t0, 0), 0)[None, :]
    t2 = t1.to(tl.bfloat16).to(tl.float32)
    t3 = t2
    tl.store(out_0 + (xindex), t3, xmask)
