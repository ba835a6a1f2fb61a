"""The matmul template: C = epilogue(prologue(A) @ B), rendered as one Triton kernel per spec.

A `MatmulSpec` names what is fused (epilogue ops from `epilogues.py`, the RMSNorm-style
prologue A' = A * row_scale[m] * col_scale[k]); `render(spec, persistent)` writes the kernel's
source, `compile_spec` caches it under `<cache>/templates/` (readable, one file per spec) and
imports it, and `matmul(...)` launches it. A and B take any strides (a transposed weight is a
stride swap, no copy), an optional batch dim (stride 0 broadcasts), and accumulate in fp32.
`config="cublas"` runs torch.mm plus the eager epilogue instead; `config=None` asks the
autotuner (on CPU: the small interpreter config, no timing).

Rendered for spec MatmulSpec(epilogue=("bias", "gelu_tanh")) the epilogue reads

        v = tl.load(ep0 + bo * ep0_sb + offs_n * ep0_sn, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + v[None, :]
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)

Program ids walk tiles in groups of GROUP_M row-tiles (the L2 swizzle of Triton's tutorial);
batch folds into the tile index, so one 1-D grid serves batched and persistent launches.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from cherenkov.runtime.loader import load_module
from cherenkov.templates.epilogues import (COLUMN, EPILOGUES, NONE, SCALAR, TENSOR,
                                           check_epilogue, eager_epilogue)
from cherenkov.templates.tile_config import TileConfig, interpreter_config

OPERAND_NAMES = {"bias": "bias", "residual": "residual", "mul": "mul", "scale": "scale"}


def cache_root() -> Path:
    return Path(os.environ.get("CHERENKOV_CACHE_DIR", Path.home() / ".cache" / "cherenkov"))


@dataclass(frozen=True)
class MatmulSpec:
    epilogue: tuple[str, ...] = ()
    row_scale: bool = False        # prologue: A[m, :] *= row_scale[m]   (RMSNorm's rstd)
    col_scale: bool = False        # prologue: A[:, k] *= col_scale[k]   (RMSNorm's weight)

    def __post_init__(self):
        object.__setattr__(self, "epilogue", check_epilogue(self.epilogue))

    @property
    def tag(self) -> str:
        parts = list(self.epilogue) + (["rowscale"] if self.row_scale else []) \
            + (["colscale"] if self.col_scale else [])
        return "_".join(parts) or "plain"


# -- rendering ------------------------------------------------------------------------------
def _params(spec: MatmulSpec) -> list[str]:
    ptrs = ["a_ptr", "b_ptr", "c_ptr"]
    strides = ["stride_ab", "stride_am", "stride_ak", "stride_bb", "stride_bk", "stride_bn",
               "stride_cb", "stride_cm", "stride_cn"]
    if spec.row_scale:
        ptrs.append("rs_ptr")
        strides += ["rs_sb", "rs_sm"]
    if spec.col_scale:
        ptrs.append("cs_ptr")
        strides += ["cs_sk"]
    for i, name in enumerate(spec.epilogue):
        kind = EPILOGUES[name].operand
        if kind in (COLUMN, TENSOR):
            ptrs.append(f"ep{i}")
            strides += [f"ep{i}_sb", f"ep{i}_sn"] if kind == COLUMN else \
                [f"ep{i}_sb", f"ep{i}_sm", f"ep{i}_sn"]
        elif kind == SCALAR:
            ptrs.append(f"ep{i}")
    return ptrs + ["M", "N", "K", "BATCH"] + strides + ["NUM_PROGS"] + [
        "BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_K: tl.constexpr",
        "GROUP_M: tl.constexpr", "EVEN_K: tl.constexpr", "PRECISION: tl.constexpr",
        "EVEN_M: tl.constexpr", "EVEN_N: tl.constexpr"]


def _epilogue_lines(spec: MatmulSpec) -> list[str]:
    lines = []
    for i, name in enumerate(spec.epilogue):
        op = EPILOGUES[name]
        if op.operand == COLUMN:
            lines.append(f"v = tl.load(ep{i} + bo * ep{i}_sb + offs_n * ep{i}_sn, "
                         f"mask=offs_n < N, other=0.0).to(tl.float32)")
        elif op.operand == TENSOR:
            lines.append(f"v = tl.load(ep{i} + bo * ep{i}_sb + offs_m[:, None] * ep{i}_sm + "
                         f"offs_n[None, :] * ep{i}_sn, mask=c_mask, other=0.0).to(tl.float32)")
        elif op.operand == SCALAR:
            lines.append(f"v = ep{i}")
        lines.append(f"acc = {op.code}")
    return lines


def render(spec: MatmulSpec, persistent: bool = False) -> str:
    """Python source of a module defining `matmul_kernel` for this spec."""
    body = []
    body += [
        "b_idx = tile // tiles_per_batch",
        "t = tile % tiles_per_batch",
        "group_id = t // (GROUP_M * tiles_n)",
        "first_m = group_id * GROUP_M",
        "group_size = tl.minimum(tiles_m - first_m, GROUP_M)",
        "pid_m = first_m + (t % (GROUP_M * tiles_n)) % group_size",
        "pid_n = (t % (GROUP_M * tiles_n)) // group_size",
        "bo = b_idx.to(tl.int64)",
        "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "offs_k = tl.arange(0, BLOCK_K)",
        # clamp: loads stay in bounds, no mask; a side the tiles divide needs none (a clamped
        # index hides consecutive addresses: a row-major B loaded element by element)
        "if EVEN_M:", "    a_rows = offs_m", "else:", "    a_rows = tl.where(offs_m < M, offs_m, 0)",
        "if EVEN_N:", "    b_cols = offs_n", "else:", "    b_cols = tl.where(offs_n < N, offs_n, 0)",
        "a_ptrs = a_ptr + bo * stride_ab + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak",
        "b_ptrs = b_ptr + bo * stride_bb + offs_k[:, None] * stride_bk + b_cols[None, :] * stride_bn",
    ]
    if spec.row_scale:
        body.append("rs = tl.load(rs_ptr + bo * rs_sb + a_rows * rs_sm).to(tl.float32)")
    body += [
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "for kk in range(0, tl.cdiv(K, BLOCK_K)):",
        "    if EVEN_K:",
        "        a = tl.load(a_ptrs)",
        "        b = tl.load(b_ptrs)",
        "    else:",
        "        k_left = K - kk * BLOCK_K",
        "        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)",
        "        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)",
    ]
    if spec.row_scale or spec.col_scale:
        scaled = "a.to(tl.float32)"
        if spec.row_scale:
            scaled += " * rs[:, None]"
        if spec.col_scale:
            body.append("    ks = kk * BLOCK_K + offs_k")
            body.append("    cs = tl.load(cs_ptr + ks * cs_sk, mask=ks < K, other=0.0).to(tl.float32)")
            scaled += " * cs[None, :]"
        body.append(f"    a = ({scaled}).to(a_ptr.dtype.element_ty)")
    body += [
        "    acc = tl.dot(a, b, acc, input_precision=PRECISION)",
        "    a_ptrs += BLOCK_K * stride_ak",
        "    b_ptrs += BLOCK_K * stride_bk",
        "c_mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]",
    ]
    body += _epilogue_lines(spec)
    body += [
        "c_ptrs = c_ptr + bo * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn",
        "tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)",
    ]
    head = [
        f'"""Generated by cherenkov.templates.matmul: {spec!r}, persistent={persistent}."""',
        "import triton", "import triton.language as tl", "", "",
        "@triton.jit",
        "def matmul_kernel(" + ", ".join(_params(spec)) + "):",
        "    pid = tl.program_id(0)",
        "    tiles_m = tl.cdiv(M, BLOCK_M)",
        "    tiles_n = tl.cdiv(N, BLOCK_N)",
        "    tiles_per_batch = tiles_m * tiles_n",
    ]
    if persistent:
        head.append("    for tile in range(pid, tiles_per_batch * BATCH, NUM_PROGS):")
        indent = " " * 8
    else:
        head.append("    tile = pid")
        indent = " " * 4
    return "\n".join(head + [indent + line for line in body]) + "\n"


_COMPILED: dict = {}


def compile_spec(spec: MatmulSpec, persistent: bool, interpret: bool):
    """The kernel for `spec` (rendered, written to the template cache, imported)."""
    folder = cache_root() / "templates"
    key = (spec, persistent, interpret, str(folder))
    if key not in _COMPILED:
        source = render(spec, persistent)
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"matmul_{spec.tag}{'_persistent' if persistent else ''}_{digest}.py"
        if not path.exists():
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(source)
            tmp.replace(path)
        _COMPILED[key] = load_module(source, interpret).matmul_kernel
    return _COMPILED[key]


# -- launching ------------------------------------------------------------------------------
def _as3d(t: torch.Tensor) -> torch.Tensor:
    return t if t.dim() == 3 else t.unsqueeze(0)


def _precision(dtype: torch.dtype) -> str:
    return "tf32" if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 else "ieee"


def launch(spec: MatmulSpec, config: TileConfig, a, b, out, operands, row_scale=None,
           col_scale=None) -> torch.Tensor:
    """Run the template. a (B?, M, K), b (B?, K, N), out (B?, M, N); operands per epilogue op."""
    interpret = a.device.type == "cpu"
    kernel = compile_spec(spec, config.persistent, interpret)
    a3, b3, c3 = _as3d(a), _as3d(b), _as3d(out)
    batch, m, k = a3.shape
    n = b3.shape[2]
    if b3.shape[0] != batch:
        b3 = b3.expand(batch, k, n)
    c_strides = c3.stride() if c3.shape[0] == batch else (0, *c3.stride()[1:])
    args = [a3, b3, c3]
    strides = [*a3.stride(), *b3.stride(), *c_strides]
    if spec.row_scale:
        rs = row_scale if row_scale.dim() == 2 else row_scale.unsqueeze(0)
        args.append(rs)
        strides += [rs.stride(0) if rs.shape[0] == batch else 0, rs.stride(1)]
    if spec.col_scale:
        args.append(col_scale)
        strides.append(col_scale.stride(0))
    for name, v in zip(spec.epilogue, operands):
        kind = EPILOGUES[name].operand
        if kind == COLUMN:
            v = v if v.dim() == 2 else v.unsqueeze(0)
            args.append(v)
            strides += [v.stride(0) if v.shape[0] == batch else 0, v.stride(1)]
        elif kind == TENSOR:
            v = _as3d(v).expand(batch, m, n)
            args.append(v)
            strides += list(v.stride())
        elif kind == SCALAR:
            args.append(float(v))
    tiles = batch * triton_cdiv(m, config.block_m) * triton_cdiv(n, config.block_n)
    if config.persistent:
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count \
            if a.device.type == "cuda" else 2
        programs = min(tiles, sms)
    else:
        programs = tiles
    kernel[(programs,)](
        *args, m, n, k, batch, *strides, programs,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        GROUP_M=config.group_m, EVEN_K=(k % config.block_k == 0),
        EVEN_M=(m % config.block_m == 0), EVEN_N=(n % config.block_n == 0),
        PRECISION=_precision(a.dtype), num_warps=config.num_warps,
        num_stages=config.num_stages, enable_fp_fusion=True)
    return out


def triton_cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


# -- the user-facing call --------------------------------------------------------------------
def _operands(epilogue, given: dict) -> list:
    ops = []
    for name in epilogue:
        if EPILOGUES[name].operand == NONE:
            ops.append(None)
            continue
        value = given.get(OPERAND_NAMES[name])
        if value is None:
            raise ValueError(f"epilogue op {name!r} needs the `{OPERAND_NAMES[name]}=` argument")
        ops.append(value)
    if len(set(epilogue)) != len(epilogue):
        raise ValueError(f"each epilogue op may appear once, got {epilogue}")
    return ops


def _output_shape(a, b) -> tuple[int, ...]:
    m, n = a.shape[-2], b.shape[-1]
    if a.dim() == 3 or b.dim() == 3:
        return (a.shape[0] if a.dim() == 3 else b.shape[0], m, n)
    return (m, n)


def cublas_matmul(a, b, epilogue=(), operands=(), row_scale=None, col_scale=None,
                  out_dtype=None) -> torch.Tensor:
    """What eager PyTorch would run: the prologue, torch.matmul (cuBLAS), the epilogue in fp32."""
    if row_scale is not None or col_scale is not None:
        af = a.float()
        if row_scale is not None:
            af = af * row_scale.float().unsqueeze(-1)
        if col_scale is not None:
            af = af * col_scale.float()
        a = af.to(a.dtype)
    return eager_epilogue(torch.matmul(a, b), epilogue, operands, out_dtype or a.dtype)


def matmul(a: torch.Tensor, b: torch.Tensor, epilogue=(), *, bias=None, residual=None,
           mul=None, scale=None, row_scale=None, col_scale=None, out_dtype=None, out=None,
           config: TileConfig | str | None = None) -> torch.Tensor:
    """epilogue(prologue(a) @ b) in one kernel.

    a: (M, K) or (B, M, K); b: (K, N) or (B, K, N), any strides. bias: (N,); residual, mul:
    broadcastable to the output; scale: a Python number; row_scale: (M,) or (B, M);
    col_scale: (K,). config: a TileConfig, "cublas", or None (autotuned, cached on disk).
    """
    spec = MatmulSpec(tuple(epilogue), row_scale is not None, col_scale is not None)
    operands = _operands(spec.epilogue, dict(bias=bias, residual=residual, mul=mul,
                                             scale=scale))
    out_dtype = out_dtype or (out.dtype if out is not None else a.dtype)
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul shapes do not match: {tuple(a.shape)} @ {tuple(b.shape)}")
    if config is None:
        if a.device.type == "cpu":
            config = interpreter_config(a.shape[-2], b.shape[-1], a.shape[-1])
        else:
            from cherenkov.templates.autotune import tuned_config
            config = tuned_config(spec, a, b, operands, row_scale, col_scale, out_dtype)
    if config == "cublas":
        result = cublas_matmul(a, b, spec.epilogue, operands, row_scale, col_scale, out_dtype)
        if out is not None:
            out.copy_(result)
            return out
        return result
    if out is None:
        out = torch.empty(_output_shape(a, b), device=a.device, dtype=out_dtype)
    return launch(spec, config, a, b, out, operands, row_scale, col_scale)
