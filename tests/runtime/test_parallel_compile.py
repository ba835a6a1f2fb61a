"""Parallel Triton compilation: the worker protocol, and that nothing breaks without a GPU
(workers answer with an error, the kernel then compiles at its first launch)."""
import json
import subprocess
import sys
from pathlib import Path

import torch

import cherenkov
from cherenkov.runtime import parallel_compile

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def double(a, out, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out + x, tl.load(a + x) * 2)
'''


def test_worker_answers_one_line_per_job_and_reports_errors(tmp_path):
    path = tmp_path / "kmod.py"
    path.write_text(KERNEL)
    good = {"path": str(path), "module": "kmod", "fn": "double", "args": ["*float32", "*float32"],
            "kwargs": [["XBLOCK", 64], ["num_warps", 4]], "target": None}
    missing = dict(good, fn="no_such_kernel")
    worker = [sys.executable, "-c", parallel_compile._BOOT,
              str(Path(parallel_compile.__file__).with_name("compile_worker.py"))]
    proc = subprocess.run(worker,
                          input=json.dumps(good) + "\n\n" + json.dumps(missing) + "\n",
                          capture_output=True, text=True, timeout=120)
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0 and len(replies) == 2
    assert replies[1] == {"ok": False, "error": replies[1]["error"]}
    assert "no_such_kernel" in replies[1]["error"]
    assert replies[0]["ok"] in (True, False)        # without a GPU: an answer, never a crash


RECORDER = '''import os


class Recorder:
    def warmup(self, *args, grid, **kwargs):
        with open(os.environ["RECORD_TO"], "a") as f:
            f.write(repr(sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_")))
                    + "\\n")


record = Recorder()
'''


def test_worker_takes_on_the_submitting_process_s_triton_environment(tmp_path, monkeypatch):
    """Triton's cache directory and cache key read TRITON_* variables: before each job the
    worker's are made exactly the submitter's (set, changed and removed), so what it compiles
    is what the first launch here looks up."""
    path = tmp_path / "recmod.py"
    path.write_text(RECORDER)
    out = tmp_path / "seen.txt"
    monkeypatch.setenv("RECORD_TO", str(out))
    monkeypatch.setenv("TRITON_STALE_SETTING", "1")          # the worker starts with this
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "before"))
    worker = parallel_compile._Worker()
    try:
        job = parallel_compile.Job(str(path), "recmod", "record", (), ())
        monkeypatch.delenv("TRITON_STALE_SETTING")
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "after"))   # as Inductor does
        assert worker.run(job, None)
        first = sorted(parallel_compile.triton_env().items())
        monkeypatch.setenv("TRITON_DEBUG", "0")
        assert worker.run(job, None)
        second = sorted(parallel_compile.triton_env().items())
    finally:
        worker.close()
    seen = out.read_text().splitlines()
    assert ("TRITON_CACHE_DIR", str(tmp_path / "after")) in first
    assert not any(k == "TRITON_STALE_SETTING" for k, _ in first)
    assert seen == [repr(first), repr(second)] and ("TRITON_DEBUG", "0") in second


def test_compile_all_without_workers_does_nothing(monkeypatch):
    monkeypatch.setattr(parallel_compile, "_pool", None)
    job = parallel_compile.Job("nowhere.py", "m", "k", ("*float32",), (("XBLOCK", 8),))
    assert parallel_compile.compile_all([job], 0) == 0
    assert parallel_compile._pool is None
    assert cherenkov.config.current(compile_workers=0).compile_workers == 0


def test_failing_workers_leave_compilation_to_the_first_launch(monkeypatch, tmp_path):
    """Jobs the workers cannot compile (here: no module file) are answered, counted as not
    compiled, and a compiled graph still runs correctly."""
    monkeypatch.setattr(parallel_compile, "_pool", None)
    monkeypatch.setattr(parallel_compile, "_failed", False)
    try:
        jobs = [parallel_compile.Job(str(tmp_path / f"m{i}.py"), f"m{i}", "k", ("*float32",),
                                     (("XBLOCK", 8),)) for i in range(3)]
        assert parallel_compile.compile_all(jobs, 2) == 0
        assert len(parallel_compile._pool.workers) == 2
        assert parallel_compile.compile_all(jobs, 2) == 0       # already tried: not resent
        x = torch.randn(8)
        torch.testing.assert_close(cherenkov.compile(lambda t: t * 2 + 1)(x), x * 2 + 1)
    finally:
        parallel_compile.shutdown()


def test_a_hung_worker_never_holds_a_compile_for_long(monkeypatch, tmp_path):
    """A worker stuck on a job (here: a module that sleeps on import) is given up after
    MAX_WAIT_S; the pool is then not used again, and compiling goes on at first launch."""
    path = tmp_path / "slow.py"
    path.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(parallel_compile, "_pool", None)
    monkeypatch.setattr(parallel_compile, "_failed", False)
    monkeypatch.setattr(parallel_compile, "MAX_WAIT_S", 2.0)
    try:
        job = parallel_compile.Job(str(path), "slow", "k", ("*float32",), (("XBLOCK", 8),))
        assert parallel_compile.compile_all([job], 1) == 0
        assert parallel_compile._failed and parallel_compile._pool is None
        assert parallel_compile.compile_all([job], 1) == 0      # no pool: returns at once
    finally:
        parallel_compile.shutdown()


def test_the_worker_does_not_import_cherenkov(tmp_path):
    """Started by path, a worker imports torch and triton only (the cherenkov package would
    bring Dynamo: seconds per worker). (That it answers Triton's device queries from the
    target it is given, without a GPU context, is checked in tests/gpu.)"""
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nassert 'cherenkov' not in sys.modules, 'cherenkov imported'\n"
                     "assert 'torch._dynamo' not in sys.modules, 'dynamo imported'\n")
    job = {"path": str(probe), "module": "probe", "fn": "no_such_fn", "args": [], "kwargs": [],
           "target": None}
    worker = [sys.executable, "-c", parallel_compile._BOOT,
              str(Path(parallel_compile.__file__).with_name("compile_worker.py"))]
    proc = subprocess.run(worker, input=json.dumps(job) + "\n", capture_output=True, text=True,
                          timeout=120)
    reply = json.loads(proc.stdout.splitlines()[0])
    # the module ran its asserts (an AssertionError would be the reply), then the lookup failed
    assert reply["ok"] is False and "no_such_fn" in reply["error"], reply


def test_submitted_jobs_are_shared_not_compiled_twice(monkeypatch, tmp_path):
    """A job started early by submit() (an attention kernel at lowering) and asked for again by
    compile_all() (the graph's wait) is one future: the workers see it once."""
    monkeypatch.setattr(parallel_compile, "_pool", None)
    monkeypatch.setattr(parallel_compile, "_failed", False)
    try:
        jobs = [parallel_compile.Job(str(tmp_path / f"m{i}.py"), f"m{i}", "k", ("*float32",),
                                     (("XBLOCK", 8),)) for i in range(4)]
        parallel_compile.submit(jobs[:2], 2)
        pool = parallel_compile._pool
        early = dict(pool.futures)
        assert len(early) == 2
        assert parallel_compile.compile_all(jobs + jobs[:1], 2) == 0   # none can compile here
        assert len(pool.futures) == 4
        assert all(pool.futures[key] is future for key, future in early.items())
        assert all(f.done() for f in pool.futures.values())
    finally:
        parallel_compile.shutdown()
