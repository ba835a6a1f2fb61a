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


# the scans with no tl.* of their own: logaddexp as eager's logcumsumexp combines
# (NaN-propagating; equal operands, infinities included, give max + log 2), its scan and
# reduction along an axis; running max / min, NaN-propagating (the prelude's _maximum)
SCAN_HELPERS = '''@triton.jit
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
'''
