"""A combo kernel's Triton source: several rendered pointwise kernels in one launch.

Each part becomes a `@triton.jit` function of its own program index (its source with
`tl.program_id(0)` replaced by a parameter); the combo's programs are the parts' grids laid
end to end, and each program calls the part its index falls in (passes/horizontal.py picks
the parts). Parts with the same text (one per transformer layer) are defined once.
"""
from __future__ import annotations

import hashlib

from cherenkov.codegen.triton_renderer import RenderedKernel


def render_combo(parts: list[tuple[RenderedKernel, int, int]], name: str = "combo"
                 ) -> RenderedKernel:
    """`parts`: (a rendered pointwise kernel, its XBLOCK, its number of outputs -- the last of
    its arguments), in launch order. The combo takes every distinct buffer once: the parts'
    inputs in first-use order, then their outputs (the launcher takes the last arguments for
    the outputs); it has no constexpr of its own."""
    order = [b for r, _, n in parts for b in r.arg_names[:len(r.arg_names) - n]]
    order += [b for r, _, n in parts for b in r.arg_names[len(r.arg_names) - n:]]
    names = list(dict.fromkeys(order))
    param = {b: f"a_{i}" for i, b in enumerate(names)}
    defs, seen = [], set()
    calls, start = [], 0
    for rendered, xblock, _ in parts:
        assert rendered.source.count("tl.program_id(0)") == 1, rendered.name
        text = rendered.source.replace("tl.program_id(0)", "pid")
        text = text.replace(f"def {rendered.name}(", "def part(pid, ", 1)
        fn = "p_" + hashlib.sha256(text.encode()).hexdigest()[:16]
        if fn not in seen:
            seen.add(fn)
            defs.append(text.replace("def part(", f"def {fn}(", 1))
        args = ", ".join(param[b] for b in rendered.arg_names)
        end = start + rendered.grid
        when = f"pid < {end}" if start == 0 else f"(pid >= {start}) & (pid < {end})"
        at = "pid" if start == 0 else f"pid - {start}"
        calls += [f"    if {when}:", f"        {fn}({at}, {args}, {xblock})"]
        start = end
    head = ["@triton.jit", f"def {name}({', '.join(param[n] for n in names)}):",
            "    pid = tl.program_id(0)"]
    source = "\n\n".join(defs) + "\n\n" + "\n".join(head + calls) + "\n"
    return RenderedKernel(name, source, names, start, max(r.num_warps for r, _, _ in parts))
