"""Triton helper functions shared by the generated kernels' prelude (triton_renderer) and the
attention mods' (attention/render), as source text.

FLOORDIV_F is ATen's div_floor: fmod based (Triton's float % is fmod), so 1 // 0.1 is 9 as in
eager (floor(1 / 0.1) is 10), inf // 2 is NaN, x // 0 is x / 0, and a zero quotient keeps
the sign of a / b.
"""

FLOORDIV_F = '''@triton.jit
def _floordiv_f(a, b):
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    return tl.where(b == 0, a / b, tl.where(d == 0, 0.0 * (a / b), f))
'''
