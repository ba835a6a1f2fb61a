"""Turn generated Triton source into a launchable kernel (compiled, or interpreted on CPU).

Triton reads a kernel's source from its file, so each module is written once into the cache
directory, named by the hash of its text, and imported from there.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path

CACHE_DIR = Path(os.environ.get("CHERENKOV_CACHE_DIR", Path.home() / ".cache" / "cherenkov")) / "kernels"


@contextlib.contextmanager
def _interpret_mode(enabled: bool):
    import triton
    knobs = getattr(triton, "knobs", None)
    if knobs is None:                     # Triton without knobs reads the environment
        old = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1" if enabled else "0"
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = old
        return
    old = knobs.runtime.interpret
    knobs.runtime.interpret = enabled
    try:
        yield
    finally:
        knobs.runtime.interpret = old


def interpreter_ready() -> bool:
    """True if Triton was imported in interpreter mode (so tl.sum etc. run on CPU)."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(tl.sum, InterpretedFunction)


_LOOP_PROBE = '''
import triton
import triton.language as tl


@triton.jit
def loop_probe(n_ptr, out_ptr, m):
    n = tl.load(n_ptr)
    acc = tl.zeros([1], tl.int32)
    for i in range(0, n):           # a bound loaded from memory
        acc += 1
    for i in range(0, m, 2):        # a runtime argument
        acc += 1
    tl.store(out_ptr + tl.arange(0, 1), acc)
'''


@functools.cache
def interpreter_fault() -> str | None:
    """Why Triton's interpreter cannot run our kernels (None: it can). Kernels loop over bounds
    that are runtime values (a vocabulary size, block counts loaded from memory); Triton 3.6's
    interpreter turns such a bound into an int through a one-element array, which numpy 2.4
    refuses (TypeError). Checked once, on a tiny kernel; callers fall back to torch."""
    import torch
    if not interpreter_ready():
        return "Triton's interpreter needs TRITON_INTERPRET=1 before triton is first imported"
    try:
        probe = load_module(_LOOP_PROBE, interpret=True).loop_probe
        out = torch.zeros(1, dtype=torch.int32)
        probe[(1,)](torch.tensor([3], dtype=torch.int32), out, 4)
        if int(out[0]) == 5:
            return None
        return f"Triton's interpreter ran 3 + 2 loop steps {int(out[0])} times"
    except Exception as e:  # noqa: BLE001 -- any failure means: do not interpret
        import numpy
        import triton
        return (f"Triton {triton.__version__}'s interpreter cannot run the kernels' loops "
                f"with numpy {numpy.__version__} ({type(e).__name__}: {str(e)[:120]})")


def load_module(source: str, interpret: bool):
    if interpret and not interpreter_ready():
        raise RuntimeError("kernels on CPU tensors need Triton's interpreter: set "
                           "TRITON_INTERPRET=1 before triton is first imported")
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    name = f"cherenkov_k_{digest}_{'i' if interpret else 'c'}"
    if name in sys.modules:
        return sys.modules[name]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"{name}.py"
    if not path.exists():
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(source)
        tmp.replace(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with _interpret_mode(interpret):
        spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
