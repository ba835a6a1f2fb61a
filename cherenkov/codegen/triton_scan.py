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

from cherenkov.codegen.kernel_ir import Scan, scan_identity
from cherenkov.codegen.triton_ops import const_literal, register_type
from cherenkov.ir.ops import Op

# op -> (scan of a chunk v, its total, combining a carry a with b)
_SCAN = {Op.CUMSUM: ("tl.cumsum({v}, axis=1)", "tl.sum({v}, 1)[:, None]", "{a} + {b}"),
         Op.CUMPROD: ("tl.cumprod({v}, axis=1)", "_prod({v}, 1)[:, None]", "{a} * {b}"),
         Op.LOGCUMSUMEXP: ("_logcumsumexp({v}, axis=1)", "_logsumexp_along({v}, 1)[:, None]",
                           "_logaddexp({a}, {b})"),
         Op.CUMMAX: ("_cummax({v}, axis=1)", "_max({v}, 1)[:, None]", "_maximum({a}, {b})"),
         Op.CUMMIN: ("_cummin({v}, axis=1)", "_min({v}, 1)[:, None]", "_minimum({a}, {b})")}


def scan_rows(renderer, pid: str) -> None:
    """Append the body of scan kernel `renderer.k` to `renderer.lines` (a triton_renderer
    _Renderer, whose `stmt` renders every other statement)."""
    k, lines = renderer.k, renderer.lines
    lines += [f"    xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
              f"    xmask = xindex < {k.X}",
              "    rbase = tl.arange(0, RBLOCK)[None, :]"]
    fills = {s.out: const_literal(scan_identity(s.op, k.dtypes[s.out]), k.dtypes[s.out])
             for s in k.body if isinstance(s, Scan)}
    for out, fill in fills.items():
        lines.append(f"    c_{out} = tl.full([XBLOCK, 1], {fill}, {register_type(k.dtypes[out])})")
    lines += [f"    for roffset in {renderer.loop_range(f'0, {k.R}, RBLOCK')}:",
              "        rindex = roffset + rbase",
              f"        rmask = rindex < {k.R}"]
    ind = "        "
    for s in k.body:
        if not isinstance(s, Scan):
            renderer.stmt(s, ind)
            continue
        scan, total, combine = _SCAN[s.op]
        v, c = f"v_{s.out}", f"c_{s.out}"
        lines += [f"{ind}{v} = tl.where(xmask & rmask, {s.src}, {fills[s.out]})",
                  f"{ind}{s.out} = {combine.format(a=c, b=scan.format(v=v))}",
                  f"{ind}{c} = {combine.format(a=c, b=total.format(v=v))}"]
