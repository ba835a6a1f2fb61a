"""Programmatic dependent launch (PDL) for generated Triton kernels, on Hopper and later.

A GPU runs one kernel of a stream after another: the next kernel's blocks start only once the
previous kernel's last block has finished and its launch has gone through the front end --
a gap of a few microseconds at every kernel boundary, which a training step of a few hundred
small kernels pays a few hundred times (GPT-2's step on the H200: 1.6 ms of GPU idle in 30.2,
`bench/results/2026-11-30_profile_train_gpt2-style_cherenkov_only_h200_e4eb82d.md`). Launched
with PDL (Triton's `launch_pdl` option: the programmatic stream serialization attribute), a
kernel may start while the one before it is still running, once every block of that one has
signalled `griddepcontrol.launch_dependents`; its blocks then wait in `griddepcontrol.wait`
until the previous kernel has completed and its writes are visible.

So a kernel compiled for PDL here starts with both instructions, before it touches memory:

    gdc_launch_dependents()    # the next kernel may start once all our blocks have started
    gdc_wait()                 # nothing is read or written before the previous kernel is done

Waiting first thing keeps every ordering the stream had -- reads after the previous kernel's
writes, and writes after its reads (the caching allocator may hand this kernel's output a
block the previous one was still reading) -- so a PDL kernel is correct after any kernel,
PDL or not (a cuBLAS kernel that never signals lets it start when it exits). What overlaps is
the launch and the blocks' start against the previous kernel's last blocks. Both instructions
are no-ops in a kernel launched without the attribute.
"""
from __future__ import annotations

import re

IMPORT = "from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait"
CALLS = ("    gdc_launch_dependents()", "    gdc_wait()")


def with_dependent_launch(body: str, name: str = "kernel") -> str:
    """`body` (Triton source whose kernel is `def <name>(...):` on one line; a combo's part
    functions may come before it) with the two PDL instructions as the kernel's first
    statements and their import above everything."""
    match = re.search(rf"^def {re.escape(name)}\(.*\):[ \t]*$", body, re.MULTILINE)
    if match is None:
        raise ValueError(f"with_dependent_launch: no one-line `def {name}(...)` in the source")
    end = match.end()
    return IMPORT + "\n\n\n" + body[:end] + "\n" + "\n".join(CALLS) + body[end:]


def supported(device) -> bool:
    """PDL needs a CUDA device of compute capability 9.0 or later."""
    import torch
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9
