"""A scan kernel (a cumsum's) in Triton: each program walks its rows' r in RBLOCK chunks,
in order, carrying each row's running total from one chunk to the next.

    c_t2 = tl.full([XBLOCK, 1], 0, tl.float32)
    for roffset in range(0, 4096, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < 4096
        t0 = tl.load(in_0 + (rindex + xindex * 4096), xmask & rmask, other=0)
        t1 = t0.to(tl.float32)
        v_t2 = tl.where(xmask & rmask, t1, 0)       # lanes past the row add nothing
        t2 = c_t2 + tl.cumsum(v_t2, axis=1)
        c_t2 = c_t2 + tl.sum(v_t2, 1)[:, None]
        tl.store(out_0 + (rindex + xindex * 4096), t2, xmask & rmask)

A row that fits one tile (the usual case: `blocks.gpu_blocks` keeps rows up to 16384 whole)
runs the loop once. A scan down columns (a cumsum along dim 0 of a row-major tensor) gets
`blocks.column_blocks`' transposed tiles -- x the fast axis, so neighbouring columns' loads
coalesce -- and its loads software-pipelined across chunks. Within a chunk the scan is
Triton's (a tree), across chunks the carry adds each chunk's total: rounding differs from
eager's serial CPU loop by a few ulps of the total.
"""
from __future__ import annotations

import torch

from cherenkov.codegen.kernel_ir import Scan
from cherenkov.codegen.triton_ops import register_type
from cherenkov.ir.ops import Op

# op -> (scan of a chunk v, its total, combining a carry a with b, the identity)
_SCAN = {Op.CUMSUM: ("tl.cumsum({v}, axis=1)", "tl.sum({v}, 1)[:, None]", "{a} + {b}", "0"),
         Op.CUMPROD: ("tl.cumprod({v}, axis=1)", "_prod({v}, 1)[:, None]", "{a} * {b}", "1"),
         Op.LOGCUMSUMEXP: ("_logcumsumexp({v}, axis=1)", "_logsumexp_along({v}, 1)[:, None]",
                           "_logaddexp({a}, {b})", "float('-inf')"),
         Op.CUMMAX: ("_cummax({v}, axis=1)", "_max({v}, 1)[:, None]", "_maximum({a}, {b})",
                     "lowest"),
         Op.CUMMIN: ("_cummin({v}, axis=1)", "_min({v}, 1)[:, None]", "_minimum({a}, {b})",
                     "highest")}


def _fill(op: Op, dtype: torch.dtype) -> str:
    """The scan's identity for values of `dtype` (a running max of ints starts at the least)."""
    fill = _SCAN[op][3]
    if fill not in ("lowest", "highest"):
        return fill
    if dtype.is_floating_point:
        return "float('-inf')" if fill == "lowest" else "float('inf')"
    info = torch.iinfo(dtype)
    return str(info.min if fill == "lowest" else info.max)


def scan_rows(renderer, pid: str) -> None:
    """Append the body of scan kernel `renderer.k` to `renderer.lines` (a triton_renderer
    _Renderer, whose `stmt` renders every other statement)."""
    k, lines = renderer.k, renderer.lines
    lines += [f"    xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
              f"    xmask = xindex < {k.X}",
              "    rbase = tl.arange(0, RBLOCK)[None, :]"]
    for s in k.body:
        if isinstance(s, Scan):
            fill = _fill(s.op, k.dtypes[s.out])
            lines.append(f"    c_{s.out} = tl.full([XBLOCK, 1], {fill}, "
                         f"{register_type(k.dtypes[s.out])})")
    lines += [f"    for roffset in {renderer.loop_range(f'0, {k.R}, RBLOCK')}:",
              "        rindex = roffset + rbase",
              f"        rmask = rindex < {k.R}"]
    ind = "        "
    for s in k.body:
        if not isinstance(s, Scan):
            renderer.stmt(s, ind)
            continue
        scan, total, combine, _ = _SCAN[s.op]
        fill = _fill(s.op, k.dtypes[s.out])
        v, c = f"v_{s.out}", f"c_{s.out}"
        lines += [f"{ind}{v} = tl.where(xmask & rmask, {s.src}, {fill})",
                  f"{ind}{s.out} = {combine.format(a=c, b=scan.format(v=v))}",
                  f"{ind}{c} = {combine.format(a=c, b=total.format(v=v))}"]
