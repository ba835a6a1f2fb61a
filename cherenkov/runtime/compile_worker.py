"""A compile worker (see parallel_compile.py): reads one JSON job per line on stdin, compiles
the kernel into Triton's on-disk cache, answers one JSON line per job on stdout.

    {"path": ..., "module": ..., "fn": ..., "args": ["*bfloat16", 4096, 0.125, ...],
     "kwargs": [[name, value], ...], "target": ["cuda", 90, 32] | null}
      ->  {"ok": true} | {"ok": false, "error": "..."}

An argument "*<dtype>" stands for a tensor of that dtype (Triton's warm-up takes the dtype
and assumes an aligned pointer); numbers are passed as they are, so integer specializations
(== 1, divisible by 16) match the real launch. With a target, the worker answers Triton's
device queries itself and never creates a CUDA context (each costs ~0.5 GiB of GPU memory).

Run by file path (`python -c <boot> compile_worker.py`), so starting one imports torch and
triton but not the cherenkov package and Dynamo with it (10 s -> 4 s per worker on the H200
machine, in an ad-hoc import timing).
"""
from __future__ import annotations

import importlib.util
import json
import sys


def _answer_device_queries(target) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    active = driver.active
    gpu = GPUTarget(target[0], target[1], target[2])
    active.get_current_target = lambda: gpu
    active.get_current_device = lambda: 0
    active.get_current_stream = lambda device=None: 0


def take_env(env: dict) -> None:
    """The submitting process's TRITON_* variables, exactly (see parallel_compile.triton_env)."""
    import os
    for k in [k for k in os.environ if k.startswith("TRITON_") and k not in env]:
        del os.environ[k]
    os.environ.update(env)


def _arg(value):
    import torch
    if isinstance(value, str) and value.startswith("*"):
        return getattr(torch, value[1:])
    return value


def compile_job(job: dict) -> None:
    module = sys.modules.get(job["module"])
    if module is None:
        spec = importlib.util.spec_from_file_location(job["module"], job["path"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[job["module"]] = module
    fn = getattr(module, job["fn"])
    kernel = fn.warmup(*map(_arg, job["args"]), grid=(1,), **dict(job["kwargs"]))
    _build_launcher(kernel)


def _build_launcher(kernel) -> None:
    """Build the kernel's host-side launcher too: Triton 3.6 compiles a C launcher per
    argument signature (gcc, ~0.3 s each, cached on disk by source) at the first launch --
    4.3 s of a Llama-style first step's run on the H200 machine; Triton 3.9's launcher is
    generic and this costs nothing. Needs no GPU context; a failure only leaves the build to
    the first launch."""
    from triton.runtime import driver
    try:
        driver.active.launcher_cls(kernel.src, kernel.metadata)
    except Exception:  # noqa: BLE001
        pass


def main() -> int:
    replies = sys.stdout
    sys.stdout = sys.stderr          # anything a compile prints must not reach the replies
    import torch  # noqa: F401 -- imported once, before the first job
    import triton  # noqa: F401
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            job = json.loads(line)
            if job.get("env") is not None:
                take_env(job["env"])
            if job.get("target"):
                _answer_device_queries(job["target"])
            compile_job(job)
            reply = {"ok": True}
        except Exception as e:  # noqa: BLE001 -- reported; the kernel compiles at first launch
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
