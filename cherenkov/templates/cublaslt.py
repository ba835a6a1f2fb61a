"""cuBLASLt's fused matmul epilogues, called through ctypes.

cuBLAS computes GELU and its gradient in a matmul's epilogue, at the matmul's own rate:

    GELU_AUX_BIAS   D = gelu(A @ B + bias), AUX = A @ B + bias      (the forward: both kept)
    DGELU_BGRAD     D = (A @ B) * gelu'(AUX), BIAS = column sums of D (the backward)

PyTorch does not expose these (its `_addmm_activation` keeps no pre-activation, so the
backward could not use it), so we call the library torch itself loaded: the
`libcublasLt.so` mapped into this process. The enum values below are cublasLt.h's.

Row-major D (M, N) = A (M, K) @ B (K, N) is column-major D^T = B^T @ A^T, so cuBLAS's first
operand is our B and its second our A; any 2-D operand with one unit stride is a column-major
matrix with a leading dimension (transposed or not). A bias (N,) and bias gradient run along
our columns, which are cuBLAS's rows, where cuBLAS puts them.

`LtMatmul(problem)` builds the descriptors once and asks the library's heuristic for an
algorithm (None from `plan` when there is none: the caller takes the unfused path); a call
sets the pointers and launches on the current stream (CUDA-graph capturable).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
from dataclasses import dataclass

import torch

log = logging.getLogger("cherenkov")

# cublasLt.h / library_types.h
CUDA_TYPES = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 14}
COMPUTE_32F = 68
OP_N, OP_T = 0, 1
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
DESC_AUX_POINTER, DESC_AUX_LD = 11, 12
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = (5, 6, 7, 8)          # A, B, C, D
EPILOGUES = {"none": 1, "bias": 4, "gelu_aux_bias": 164, "gelu_aux": 160, "dgelu": 192,
             "dgelu_bgrad": 208}
WORKSPACE_BYTES = 32 << 20                 # what torch gives cuBLASLt on Hopper
ALIGNMENT = 16                             # bytes every pointer must have (checked per call)


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t),
                ("state", ctypes.c_int), ("waves", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


def _library_path() -> str | None:
    """The libcublasLt torch loaded (the same copy torch's matmuls use), else one on disk."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(path).startswith("libcublasLt.so"):
                    return path
    except OSError:
        pass
    import ctypes.util
    return ctypes.util.find_library("cublasLt")


@functools.cache
def library():
    """The loaded library with the signatures we call, or None (no CUDA, not found)."""
    if not torch.cuda.is_available():
        return None
    torch.cuda.init()
    path = _library_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        log.info("cherenkov: cuBLASLt not loadable (%s): %s", path, e)
        return None
    p, vp = ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p
    sig = {
        "cublasLtCreate": [p],
        "cublasLtMatmulDescCreate": [p, ctypes.c_int, ctypes.c_int],
        "cublasLtMatmulDescSetAttribute": [vp, ctypes.c_int, vp, ctypes.c_size_t],
        "cublasLtMatmulDescDestroy": [vp],
        "cublasLtMatrixLayoutCreate": [p, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.c_int64],
        "cublasLtMatrixLayoutDestroy": [vp],
        "cublasLtMatmulPreferenceCreate": [p],
        "cublasLtMatmulPreferenceSetAttribute": [vp, ctypes.c_int, vp, ctypes.c_size_t],
        "cublasLtMatmulPreferenceDestroy": [vp],
        "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, ctypes.c_int,
                                           ctypes.POINTER(_Heuristic),
                                           ctypes.POINTER(ctypes.c_int)],
        "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp,
                           ctypes.c_size_t, vp],
    }
    for name, argtypes in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLASLt {what} failed with status {status}")


@functools.cache
def _handle(device: int):
    lib = library()
    handle = ctypes.c_void_p()
    with torch.cuda.device(device):
        _check(lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    return handle


@functools.cache
def _workspace(device: int) -> torch.Tensor:
    return torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=f"cuda:{device}")


@dataclass(frozen=True)
class Problem:
    """D (m, n) = A (m, k) @ B (k, n) with `epilogue`; strides of A and B as given (one of
    each pair 1), D and AUX row-major (m, n). A and B are `dtype`; D is `out_dtype` when
    given (float32: a half-precision product written as the fp32 accumulator, as
    aten.mm.dtype does; no bias then), else `dtype`."""
    m: int
    n: int
    k: int
    a_strides: tuple[int, int]
    b_strides: tuple[int, int]
    dtype: torch.dtype
    epilogue: str
    device: int = 0
    out_dtype: torch.dtype | None = None

    @property
    def d_dtype(self) -> torch.dtype:
        return self.out_dtype or self.dtype


def operand_layout(rows: int, cols: int, strides: tuple[int, int]):
    """(transpose op, column-major rows, cols, ld) of the row-major (rows, cols) matrix with
    `strides` as cuBLAS sees its transpose (cols, rows); None when neither stride is 1."""
    s_row, s_col = strides
    if s_col == 1 and s_row >= max(cols, 1):
        return OP_N, cols, rows, s_row           # memory is column-major (cols, rows)
    if s_row == 1 and s_col >= max(rows, 1):
        return OP_T, rows, cols, s_col           # memory is column-major (rows, cols)
    return None


class LtMatmul:
    """One planned problem: descriptors and the heuristic's algorithm, reused every call."""

    def __init__(self, problem: Problem, lib, algo: _Heuristic, desc, layouts):
        self.problem, self.lib, self.algo = problem, lib, algo
        self.desc, self.layouts = desc, layouts
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.handle = _handle(problem.device)
        workspace = _workspace(problem.device)
        self.workspace = (workspace.data_ptr(), workspace.numel())

    def _set(self, attribute: int, value: int) -> None:
        v = ctypes.c_void_p(value)
        _check(self.lib.cublasLtMatmulDescSetAttribute(
            self.desc, attribute, ctypes.byref(v), ctypes.sizeof(v)), "set pointer")

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                 bias: torch.Tensor | None = None, aux: torch.Tensor | None = None,
                 stream: int | None = None) -> None:
        """out = epilogue(a @ b) in place; `bias` is read (bias epilogues) or written (bgrad),
        `aux` written (gelu_aux) or read (dgelu). Only the tensors' addresses are read (their
        layouts are the problem's). `stream`: the raw CUDA stream (default: the current)."""
        if bias is not None:
            self._set(DESC_BIAS_POINTER, bias.data_ptr())
        if aux is not None:
            self._set(DESC_AUX_POINTER, aux.data_ptr())
        la, lb, ld = self.layouts
        if stream is None:
            stream = torch._C._cuda_getCurrentRawStream(self.problem.device)
        _check(self.lib.cublasLtMatmul(
            self.handle, self.desc, ctypes.byref(self.alpha), b.data_ptr(), la,
            a.data_ptr(), lb, ctypes.byref(self.beta), out.data_ptr(), ld, out.data_ptr(), ld,
            ctypes.byref(self.algo.algo), *self.workspace, stream), "cublasLtMatmul")

    def __del__(self):
        try:
            _destroy(self.lib, self.desc, self.layouts)
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass


def _descriptors(lib, p: Problem):
    """(matmul descriptor, [layout of cuBLAS's A, B, D]) for `p`, or None (a layout cuBLAS
    cannot take)."""
    first = operand_layout(p.k, p.n, p.b_strides)       # our B: cuBLAS's A, op(A) = (n, k)
    second = operand_layout(p.m, p.k, p.a_strides)      # our A: cuBLAS's B, op(B) = (k, m)
    if first is None or second is None:
        return None
    dtype = CUDA_TYPES[p.dtype]
    desc = ctypes.c_void_p()
    layouts = [ctypes.c_void_p() for _ in range(3)]
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), COMPUTE_32F,
                                        CUDA_TYPES[torch.float32]), "desc create")

    def attr(attribute, value, ctype=ctypes.c_int32):
        v = ctype(value)
        _check(lib.cublasLtMatmulDescSetAttribute(desc, attribute, ctypes.byref(v),
                                                  ctypes.sizeof(v)), f"attribute {attribute}")
    attr(DESC_TRANSA, first[0])
    attr(DESC_TRANSB, second[0])
    attr(DESC_EPILOGUE, EPILOGUES[p.epilogue], ctypes.c_uint32)
    if "aux" in p.epilogue or "dgelu" in p.epilogue:
        attr(DESC_AUX_LD, p.n, ctypes.c_int64)
    types = (dtype, dtype, CUDA_TYPES[p.d_dtype])
    for layout, ctype, (_, rows, cols, ld) in zip(layouts, types,
                                                  (first, second, (None, p.n, p.m, p.n))):
        _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), ctype, rows, cols, ld),
               "layout create")
    return desc, layouts


def _destroy(lib, desc, layouts) -> None:
    lib.cublasLtMatmulDescDestroy(desc)
    for layout in layouts:
        lib.cublasLtMatrixLayoutDestroy(layout)


def candidates(problem: Problem, count: int = 1,
               workspace_bytes: int = WORKSPACE_BYTES) -> list[LtMatmul]:
    """Up to `count` planned matmuls for `problem`, the library's heuristic's order (its
    first is what cuBLAS would run); [] when there is no cuBLASLt here, the layout or dtype
    is not one we pass, or no algorithm takes this epilogue and shape. `workspace_bytes` 0
    keeps to algorithms without a workspace (no split-K reduction; cuBLAS may still memset
    before the kernel: `2026-12-02_cublaslt_memset_free_h200_891105f.md`)."""
    lib = library()
    p = problem
    if lib is None or p.dtype not in (torch.float16, torch.bfloat16) \
            or p.d_dtype not in (p.dtype, torch.float32) \
            or (p.d_dtype != p.dtype and p.epilogue != "none"):
        return []
    made = _descriptors(lib, p)
    if made is None:
        return []
    desc, layouts = made
    pref = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "preference create")
    size = ctypes.c_uint64(workspace_bytes)
    _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE_BYTES,
                                                    ctypes.byref(size), 8), "workspace")
    for which in PREF_MIN_ALIGNMENT:
        align = ctypes.c_uint32(ALIGNMENT)
        _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, which, ctypes.byref(align), 4),
               "alignment")
    results, found = (_Heuristic * count)(), ctypes.c_int(0)
    with torch.cuda.device(p.device):
        status = lib.cublasLtMatmulAlgoGetHeuristic(
            _handle(p.device), desc, layouts[0], layouts[1], layouts[2], layouts[2], pref,
            count, results, ctypes.byref(found))
    lib.cublasLtMatmulPreferenceDestroy(pref)
    _destroy(lib, desc, layouts)
    if status != 0:
        log.info("cherenkov: no cuBLASLt algorithm for %s (status %d)", p, status)
        return []
    planned = []
    for result in results[:found.value]:
        if result.state == 0:
            own_desc, own_layouts = _descriptors(lib, p)
            planned.append(LtMatmul(p, lib, result, own_desc, own_layouts))
    return planned


@functools.cache
def plan(problem: Problem) -> LtMatmul | None:
    """What cuBLAS's heuristic picks for `problem`, or None (see `candidates`)."""
    found = candidates(problem, 1)
    return found[0] if found else None


def problem_of(a: torch.Tensor, b: torch.Tensor, epilogue: str,
               out_dtype: torch.dtype | None = None) -> Problem:
    return Problem(a.shape[0], b.shape[1], a.shape[1], tuple(a.stride()), tuple(b.stride()),
                   a.dtype, epilogue, a.device.index or 0, out_dtype)
