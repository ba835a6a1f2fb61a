"""libdevice for Triton's interpreter: the math functions Triton's CPU interpreter lacks.

On a GPU, generated kernels call `triton.language.extra.libdevice`. The interpreter runs
kernels as numpy code and does not implement libdevice, so under it the kernels import this
module instead: the same names, computed by numpy on the tensors' arrays.
"""
from __future__ import annotations

import numpy as np
import scipy.special
import triton.language as tl
from triton.runtime.interpreter import TensorHandle


def _wrap(fn):
    def apply(*args):
        ref = next(a for a in args if isinstance(a, tl.tensor))
        arrays = [a.handle.data if isinstance(a, tl.tensor) else np.asarray(a) for a in args]
        with np.errstate(all="ignore"):
            out = fn(*arrays)
        out = np.asarray(out).astype(arrays[0].dtype if isinstance(args[0], tl.tensor)
                                     else ref.handle.data.dtype, copy=False)
        shape = np.broadcast_shapes(*[a.shape for a in arrays])
        out = np.broadcast_to(out, shape).copy()
        ty = tl.block_type(ref.dtype, list(shape)) if shape else ref.dtype
        return tl.tensor(TensorHandle(out, ref.dtype.scalar if hasattr(ref.dtype, "scalar")
                                      else ref.dtype), ty)
    return apply


def _nextafter(a, b):
    return np.nextafter(a, b.astype(a.dtype))


tanh = _wrap(np.tanh)
erfc = _wrap(scipy.special.erfc)
erfinv = _wrap(scipy.special.erfinv)
expm1 = _wrap(np.expm1)
log1p = _wrap(np.log1p)
log10 = _wrap(np.log10)
tan = _wrap(np.tan)
asin = _wrap(np.arcsin)
acos = _wrap(np.arccos)
atan = _wrap(np.arctan)
sinh = _wrap(np.sinh)
cosh = _wrap(np.cosh)
asinh = _wrap(np.arcsinh)
acosh = _wrap(np.arccosh)
atanh = _wrap(np.arctanh)
pow = _wrap(np.power)  # noqa: A001 -- libdevice's name
atan2 = _wrap(np.arctan2)
hypot = _wrap(np.hypot)
copysign = _wrap(np.copysign)
nextafter = _wrap(_nextafter)
nearbyint = _wrap(np.rint)
trunc = _wrap(np.trunc)
fmod = _wrap(np.fmod)
lgamma = _wrap(scipy.special.gammaln)
