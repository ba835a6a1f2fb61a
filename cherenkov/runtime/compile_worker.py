"""A compile worker (see parallel_compile.py): reads one JSON job per line on stdin, compiles
the kernel into Triton's on-disk cache, answers one JSON line per job on stdout.

    {"path": ..., "module": ..., "fn": ..., "dtypes": [...], "constexprs": [[name, value]],
     "options": [[name, value]]}  ->  {"ok": true} | {"ok": false, "error": "..."}
"""
from __future__ import annotations

import importlib.util
import json
import sys


def compile_job(job: dict) -> None:
    import torch
    module = sys.modules.get(job["module"])
    if module is None:
        spec = importlib.util.spec_from_file_location(job["module"], job["path"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[job["module"]] = module
    fn = getattr(module, job["fn"])
    dtypes = [getattr(torch, name) for name in job["dtypes"]]
    fn.warmup(*dtypes, grid=(1,), **dict(job["constexprs"]), **dict(job["options"]))


def main() -> int:
    replies = sys.stdout
    sys.stdout = sys.stderr          # anything a compile prints must not reach the replies
    import torch  # noqa: F401 -- imported once, before the first job
    import triton  # noqa: F401
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            compile_job(json.loads(line))
            reply = {"ok": True}
        except Exception as e:  # noqa: BLE001 -- reported; the kernel compiles at first launch
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
