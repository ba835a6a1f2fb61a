"""What the lowering tests share: a function compiled from a fresh Dynamo cache, with what
its compiled graphs left to PyTorch and the kernels they generated."""
import torch

import cherenkov
from cherenkov import backend


def compiled(fn, *args, **options):
    """(fn's output, extern ops with reasons, kernel sources) of `cherenkov.compile(fn,
    strict=True, **options)(*args)`; Dynamo reset first (one code object, many
    parametrizations: no recompile limit)."""
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    out = cherenkov.compile(fn, strict=True, **options)(*args)
    infos = [info for _, info in backend.COMPILED[start:]]
    return out, [e for info in infos for e in info.externs], [k[3] for i in infos
                                                               for k in i.kernels]
