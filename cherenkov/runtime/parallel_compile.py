"""Compiling a graph's Triton kernels in parallel, in worker processes.

Triton compiles a kernel on its first launch, one after another: a GPT-2 training step has a
few dozen distinct kernels at a few hundred milliseconds each, most of its first step after
Dynamo's tracing. As Inductor does, we hand every new kernel to worker processes as soon as
the graph's kernels are rendered; each worker compiles it for the launch's exact
specialization (`JITFunction.warmup` with the argument dtypes and the launch options) into
Triton's on-disk cache, so the first launch here finds it compiled and only loads it.

Workers are plain Python processes running compile_worker.py by its path (not `-m`, which
would import the cherenkov package and Dynamo: 10 s instead of 4 s to start), speaking JSON
lines over pipes (multiprocessing's spawn would re-import the user's `__main__` script). Jobs
go to whichever worker is free (one queue), in the order submitted; `submit` starts jobs
without waiting (the attention kernels of an SDPA call, as soon as it is lowered),
`compile_all` waits for a list of jobs, sharing any already running, and a graph's generated
kernels are submitted with `submit_pending`, each launcher waiting for its own job at its
first launch (`wait_for`), so the graph's first run starts while later kernels compile. Nothing
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
import queue
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass

log = logging.getLogger("cherenkov")

MAX_WAIT_S = 60.0           # a graph never waits longer than this for its kernels; a pool
                            # that makes it wait that long is not used again
_BOOT = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


@dataclass(frozen=True)
class Job:
    """One kernel to compile: where its module lives, its name, its positional arguments as
    the launch passes them ("*<torch dtype name>" for a tensor, numbers as they are) and its
    keyword arguments (constexprs and launch options)."""
    path: str
    module: str
    fn: str
    args: tuple
    kwargs: tuple[tuple[str, object], ...]

    @property
    def key(self) -> tuple:
        return (self.path, self.fn, self.args, self.kwargs)


def triton_env() -> dict:
    """This process's TRITON_* environment, which a worker takes on before each job: Triton's
    cache directory and cache key read it, so a kernel compiled under another environment is
    not found at the first launch here. Inductor sets TRITON_CACHE_DIR in this process when
    it first compiles, after workers may have started: the train suite's Llama-style step,
    compiled after torch.compile's, spent 5.9 s in first kernel launches before workers took
    it on and 0.1 s after (bench/results/*_train_h200_6719263.md, ..._d59ad52.md)."""
    return {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}


def tensor_arg(dtype) -> str:
    """How a tensor argument of `dtype` appears in a Job's args."""
    return "*" + str(dtype).removeprefix("torch.")


def workers(requested: int = -1) -> int:
    """Worker count for `Config.compile_workers` (-1: all CPU cores but one, at most 16 --
    the main process waits while they compile; Inductor uses every core up to 32)."""
    if requested >= 0:
        return requested
    return max(1, min(16, (os.cpu_count() or 2) - 1))


def _target():
    """The current GPU's Triton target as (backend, arch, warp size), for the workers to use
    without touching the GPU; None where there is none (the worker then asks its driver)."""
    try:
        from triton.runtime import driver
        t = driver.active.get_current_target()
        return [t.backend, t.arch, t.warp_size]
    except Exception:  # noqa: BLE001 -- no GPU, or an interpreter-only Triton
        return None


class _Worker:
    def __init__(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compile_worker.py")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def run(self, job: Job, target) -> bool:
        self.proc.stdin.write(json.dumps(asdict(job) | {"target": target,
                                                        "env": triton_env()}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("compile worker exited")
        return bool(json.loads(line).get("ok"))

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()


class _Pool:
    """Workers serving one queue of jobs; each job's result is a Future, shared by every
    graph that needs the same kernel."""

    def __init__(self, n: int):
        self.target = _target()
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.futures: dict[tuple, futures.Future] = {}
        self.lock = threading.Lock()
        self.workers = [_Worker() for _ in range(n)]
        for w in self.workers:
            threading.Thread(target=self._serve, args=(w,), daemon=True).start()

    def _serve(self, worker: _Worker) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(worker.run(job, self.target))
            except Exception as e:  # noqa: BLE001 -- that kernel compiles at its first launch
                future.set_exception(e)

    def submit(self, jobs: list[Job]) -> list[futures.Future]:
        out = []
        with self.lock:
            for job in jobs:
                future = self.futures.get(job.key)
                if future is None:
                    future = self.futures[job.key] = futures.Future()
                    self.queue.put((job, future))
                out.append(future)
        return out

    def close(self) -> None:
        with self.lock:
            for future in self.futures.values():
                future.cancel()
            for _ in self.workers:
                self.queue.put(None)
        for w in self.workers:
            w.close()


_pool: _Pool | None = None
_failed = False


def warm(requested: int = -1) -> None:
    """Start the worker processes (they import torch and triton once, in the background)."""
    _get_pool(requested)


def submit(jobs: list[Job], requested: int = -1) -> None:
    """Start compiling `jobs` without waiting (no-op without workers)."""
    pool = _get_pool(requested)
    if pool is not None and jobs:
        pool.submit(jobs)


def submit_pending(jobs: list[Job], requested: int = -1) -> list[futures.Future] | None:
    """Start compiling `jobs` and return their futures, in `jobs`' order (None without
    workers): a kernel's first launch waits for its own (`wait_for`), so a graph's first run
    starts while its later kernels still compile."""
    pool = _get_pool(requested)
    if pool is None or not jobs:
        return None
    return pool.submit(jobs)


def wait_for(future: futures.Future) -> bool:
    """Wait for one job (at most MAX_WAIT_S, then the workers are given up); whether it
    compiled there (False: the launch compiles it, as without workers)."""
    if _failed:
        return False
    try:
        return bool(future.result(timeout=MAX_WAIT_S))
    except futures.TimeoutError:
        _give_up(f"a compile worker took over {MAX_WAIT_S:.0f} s", logging.WARNING)
    except Exception as e:  # noqa: BLE001 -- that kernel compiles at its first launch
        log.info("cherenkov: compile worker failed (%s)", e)
    return False


def compile_all(jobs: list[Job], requested: int = -1) -> int:
    """Compile `jobs` in the workers and wait for them (at most MAX_WAIT_S); returns how many
    of the distinct jobs compiled there. A kernel already submitted (shared by layers or
    graphs, or started early by `submit`) is waited for, not compiled again. (A graph's own
kernels are waited for one by one at their first launch: `submit_pending`, `wait_for`.)"""
    pool = _get_pool(requested)
    if pool is None or not jobs:
        return 0
    distinct = list({id(f): f for f in pool.submit(jobs)}.values())
    done, late = futures.wait(distinct, timeout=MAX_WAIT_S)
    if late:
        _give_up(f"compile workers took over {MAX_WAIT_S:.0f} s", logging.WARNING)
    compiled = 0
    for future in done:
        if future.cancelled():
            continue
        try:
            compiled += bool(future.result())
        except Exception as e:  # noqa: BLE001 -- those kernels compile at their first launch
            log.info("cherenkov: compile worker failed (%s)", e)
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
        _pool.close()
    _pool = None
