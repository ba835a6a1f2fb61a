"""Compiling a graph's Triton kernels in parallel, in worker processes.

Triton compiles a kernel on its first launch, one after another: a GPT-2 training step has a
few dozen distinct kernels at a few hundred milliseconds each, most of its first step after
Dynamo's tracing. As Inductor does, we hand every new kernel to worker processes as soon as
the graph's kernels are rendered; each worker compiles it for the launch's exact
specialization (`JITFunction.warmup` with the argument dtypes and the launch options) into
Triton's on-disk cache, so the first launch here finds it compiled and only loads it.

Workers are plain `python -m cherenkov.runtime.compile_worker` processes speaking JSON lines
over pipes (multiprocessing's spawn would re-import the user's `__main__` script). Nothing
depends on them for correctness: a worker that fails, or one that cannot start, only means the
kernel is compiled at its first launch as before. They start when the backend first sees a
CUDA graph (`warm`), while AOTAutograd is still tracing; `Config.compile_workers`
(`CHERENKOV_COMPILE_WORKERS`) sets their number (0 turns this off; default: all CPU cores but
one, at most 16).
"""
from __future__ import annotations

import concurrent.futures as futures
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass

log = logging.getLogger("cherenkov")

MAX_WAIT_S = 60.0           # a graph never waits longer than this for its kernels; a pool
                            # that makes it wait that long is not used again


@dataclass(frozen=True)
class Job:
    """One kernel to compile: where its module lives, its name, the dtype of each pointer
    argument (torch dtype names, in order) and the launch's constexprs and options."""
    path: str
    module: str
    fn: str
    dtypes: tuple[str, ...]
    constexprs: tuple[tuple[str, int], ...]
    options: tuple[tuple[str, object], ...]

    @property
    def key(self) -> tuple:
        return (self.path, self.fn, self.dtypes, self.constexprs, self.options)


def workers(requested: int = -1) -> int:
    """Worker count for `Config.compile_workers` (-1: all CPU cores but one, at most 16 --
    the main process waits while they compile; Inductor uses every core up to 32)."""
    if requested >= 0:
        return requested
    return max(1, min(16, (os.cpu_count() or 2) - 1))


class _Worker:
    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cherenkov.runtime.compile_worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
        self.lock = threading.Lock()

    def run(self, jobs: list[Job]) -> int:
        """Send `jobs`, then read one reply per job; returns how many compiled."""
        with self.lock:
            for job in jobs:
                self.proc.stdin.write(json.dumps(asdict(job)) + "\n")
            self.proc.stdin.flush()
            ok = 0
            for _ in jobs:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError("compile worker exited")
                ok += bool(json.loads(line).get("ok"))
            return ok

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass


class _Pool:
    def __init__(self, n: int):
        self.workers = [_Worker() for _ in range(n)]
        self.threads = futures.ThreadPoolExecutor(max_workers=n)
        self.done: set[tuple] = set()


_pool: _Pool | None = None
_failed = False


def warm(requested: int = -1) -> None:
    """Start the worker processes (they import torch and triton once, in the background)."""
    _get_pool(requested)


def compile_all(jobs: list[Job], requested: int = -1) -> int:
    """Compile `jobs` in the workers and wait for them (at most MAX_WAIT_S); returns how many
    compiled there. A kernel already compiled there (shared by layers or graphs) is skipped."""
    pool = _get_pool(requested)
    if pool is None:
        return 0
    todo, seen = [], set()
    for job in jobs:
        if job.key not in pool.done and job.key not in seen:
            seen.add(job.key)
            todo.append(job)
    if not todo:
        return 0
    n = len(pool.workers)
    batches = [todo[i::n] for i in range(n)]
    running = [pool.threads.submit(w.run, b) for w, b in zip(pool.workers, batches) if b]
    done, late = futures.wait(running, timeout=MAX_WAIT_S)
    if late:
        _give_up(f"compile workers took over {MAX_WAIT_S:.0f} s", logging.WARNING)
    compiled = 0
    for future in done:
        try:
            compiled += future.result()
        except Exception as e:  # noqa: BLE001 -- those kernels compile at their first launch
            log.info("cherenkov: compile worker failed (%s)", e)
    pool.done.update(job.key for job in todo)
    return compiled


def _get_pool(requested: int) -> _Pool | None:
    global _pool
    n = workers(requested)
    if _pool is not None or _failed or n == 0:
        return _pool
    try:
        _pool = _Pool(n)
    except Exception as e:  # noqa: BLE001
        _give_up(f"no compile workers ({e})", logging.INFO)
    return _pool


def _give_up(why: str, level: int) -> None:
    """Stop using workers for the rest of the process: kernels compile at first launch."""
    global _failed
    log.log(level, "cherenkov: %s; compiling kernels at their first launch from now on", why)
    _failed = True
    shutdown()


def shutdown() -> None:
    global _pool
    if _pool is not None:
        for w in _pool.workers:
            w.close()
            if w.proc.poll() is None:
                w.proc.kill()
        _pool.threads.shutdown(wait=False)
    _pool = None
