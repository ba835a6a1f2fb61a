"""Where the host time of an attention forward+backward goes, piece by piece, on the GPU machine.

Every figure is host microseconds per call with the GPU kept busy (a sleep kernel queued
first), so no call waits for the GPU: min and median of 7 repetitions of 20 calls. Beside
each, the time of a fixed pure-Python loop measured just before (`cpu`), which says how fast
the host ran at that moment. Per case (B=4 H=16 S=4096 D=128 bf16):

- `full`: cherenkov.attention forward and .backward(do), as the suite times it;
- `full, gluon via fn[grid]`: the same with the Gluon kernels launched by Triton's own path
  (launch_gluon.DIRECT off);
- `forward (autograd)`: the forward alone, inputs requiring grad (the graph is built);
- `launch.forward` / `launch_bwd.backward`: the launch code alone (no autograd, no API checks);
- `python only`: the same two with a kernel module that launches nothing (our Python);
- `flex fwd+bwd`: torch's compiled flex_attention on the same mask.
Once: an autograd Function doing nothing but allocate its output, forward and backward.

With `timeline` after OUT_DIR: per case, where one call's host time goes between the API,
the launch code and the autograd engine (perf_counter stamps around launch.forward and
launch_bwd.backward; medians of 20 calls with the GPU busy), under .backward(do),
torch.autograd.grad, the garbage collector off, and Python's thread switch interval at 50 us;
and the process's threads.

    CHERENKOV_COMMIT=<sha> python bench/attention_host_breakdown_gpu.py OUT_DIR [timeline [CASE ...]]
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import launch, launch_bwd, launch_gluon  # noqa: E402
from cherenkov.attention.codegen import compile_mods  # noqa: E402
from cherenkov.attention.render import FLOAT_INDEX_MAX_LEN  # noqa: E402
from cherenkov.bench.report import script_meta  # noqa: E402
from cherenkov.bench.suites.attention import _doc_offsets, qkv  # noqa: E402

B, H, S, D = 4, 16, 4096, 128


def cpu_ref_us() -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(2000):
        x += i * i
    return (time.perf_counter() - t0) * 1e6


def host(fn, grads=(), calls: int = 20, reps: int = 7) -> str:
    fn()
    torch.cuda.synchronize()
    times, refs = [], []
    for _ in range(reps):
        refs.append(cpu_ref_us())
        torch.cuda._sleep(int(2e9 * calls * 3e-3))
        t0 = time.perf_counter()
        for _ in range(calls):
            for t in grads:
                t.grad = None
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return (f"{min(times):7.0f} {statistics.median(times):7.0f}   (cpu {min(refs):.0f} "
            f"{statistics.median(refs):.0f})")


class _Compiled:
    """A compiled kernel whose launch does nothing (kernel_launch.Launcher's direct path calls
    run)."""
    function = packed_metadata = None

    def run(self, *args):
        return None


class _Kernel:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: _Compiled()


class _Nothing:
    """A kernel module whose kernels launch nothing: what is left is our Python and the
    allocations."""

    def __init__(self):
        self.kernels = {}

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self.kernels.setdefault(name, _Kernel())


class _Alloc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, g):
        return torch.empty_like(g)


def _write(out_dir, stem, meta, lines) -> int:
    path = os.path.join(out_dir, f"{stem}_{meta['commit']}.md")
    with open(path, "w") as f:
        f.write("\n".join(lines + ["```"]) + "\n")
    print(f"wrote {path}")
    return 0


def timeline(call, calls: int = 20) -> str:
    """Median us of each segment of `call(stamp)` (stamp(name) records a time) over `calls`
    calls with the GPU kept busy; stamps "begin" and "end" around each call."""
    call(lambda name: None)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9 * calls * 3e-3))
    runs = []
    for _ in range(calls):
        marks = []

        def stamp(name, marks=marks):
            marks.append((name, time.perf_counter()))
        stamp("begin")
        call(stamp)
        stamp("end")
        runs.append(marks)
    torch.cuda.synchronize()
    names = [n for n, _ in runs[0]]
    if any([n for n, _ in r] != names for r in runs):
        return "stamps differ between calls"
    seg = [f"{names[i]}->{names[i + 1]} "
           f"{statistics.median(r[i + 1][1] - r[i][1] for r in runs) * 1e6:.0f}"
           for i in range(len(names) - 1)]
    total = statistics.median(r[-1][1] - r[0][1] for r in runs) * 1e6
    return f"total {total:.0f}: " + ", ".join(seg)


def timelines(out_dir, q, k, v, do, cases, meta) -> int:
    import gc
    import threading
    lines = [f"# Host timeline of attention calls on {meta['gpu']}", "",
             f"torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}, "
             f"{meta['date']}; B={B} H={H} S={S} D={D} bf16; median us per segment of 20 calls "
             "with the GPU kept busy.", "",
             f"threads: {[t.name for t in threading.enumerate()]}, OS threads "
             f"{len(os.listdir('/proc/self/task'))}, switch interval {sys.getswitchinterval()}",
             "", "```"]
    real_fwd, real_bwd = launch.forward, launch_bwd.backward
    state = {"stamp": lambda name: None}

    def fwd(*a, **kw):
        state["stamp"]("fwd_in")
        out = real_fwd(*a, **kw)
        state["stamp"]("fwd_out")
        return out

    def bwd(*a, **kw):
        state["stamp"]("bwd_in")
        out = real_bwd(*a, **kw)
        state["stamp"]("bwd_out")
        return out
    launch.forward, launch_bwd.backward = fwd, bwd
    try:
        for name, (sm, mm) in cases.items():
            bm = ca.block_mask(mm, B, H, S, S, device="cuda")

            def by_backward(stamp, sm=sm, bm=bm):
                state["stamp"] = stamp
                out = ca.attention(q, k, v, score_mod=sm, block_mask=bm)
                stamp("api_out")
                for t in (q, k, v):
                    t.grad = None
                out.backward(do)

            def by_grad(stamp, sm=sm, bm=bm):
                state["stamp"] = stamp
                out = ca.attention(q, k, v, score_mod=sm, block_mask=bm)
                stamp("api_out")
                torch.autograd.grad(out, (q, k, v), do)
            lines.append(f"{name} .backward:      {timeline(by_backward)}")
            print(lines[-1], flush=True)
            lines.append(f"{name} autograd.grad:  {timeline(by_grad)}")
            print(lines[-1], flush=True)
            gc.disable()
            lines.append(f"{name} gc off:         {timeline(by_backward)}")
            gc.enable()
            print(lines[-1], flush=True)
            interval = sys.getswitchinterval()
            sys.setswitchinterval(5e-5)
            lines.append(f"{name} switch 50 us:   {timeline(by_backward)}")
            sys.setswitchinterval(interval)
            print(lines[-1], flush=True)
    finally:
        launch.forward, launch_bwd.backward = real_fwd, real_bwd
    return _write(out_dir, "attention_host_timeline", meta, lines)


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    torch._dynamo.config.cache_size_limit = 64
    q, k, v = qkv(B, H, S, D)
    do = torch.randn_like(q)
    slopes = ca.alibi_slopes(H, device="cuda")
    docs = ca.document(offsets=_doc_offsets(S, 8, "cuda"), causal=True)
    cases = {"document8": (None, docs), "sliding_window1024": (None, ca.sliding_window(1024)),
             "alibi": (ca.alibi(slopes), ca.causal), "causal": (None, ca.causal)}
    meta = script_meta()
    if sys.argv[2:3] == ["timeline"]:
        chosen = sys.argv[3:] or list(cases)
        return timelines(out_dir, q, k, v, do, {c: cases[c] for c in chosen}, meta)
    lines = [f"# Host time of attention calls, piece by piece, on {meta['gpu']}", "",
             f"torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}, "
             f"{meta['date']}; B={B} H={H} S={S} D={D} bf16. Host us per call with the GPU "
             "kept busy: min and median of 7 x 20 calls (cpu: a fixed Python loop's us just "
             "before each, min and median).", "", "```"]

    def row(label, text):
        lines.append(f"{label:34s} {text}")
        print(lines[-1], flush=True)
    x = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    row("autograd Function, empty_like", host(lambda: _Alloc.apply(x).backward(do), [x]))
    for name, (sm, mm) in cases.items():
        row(f"== {name}", "")
        bm = ca.block_mask(mm, B, H, S, S, device="cuda")

        def full(sm=sm, bm=bm):
            ca.attention(q, k, v, score_mod=sm, block_mask=bm).backward(do)
        row("full", host(full, [q, k, v]))
        launch_gluon.DIRECT = False
        row("full, gluon via fn[grid]", host(full, [q, k, v]))
        launch_gluon.DIRECT = True
        row("forward (autograd)", host(lambda sm=sm, bm=bm: ca.attention(q, k, v, score_mod=sm,
                                                                         block_mask=bm)))
        traced, kernels = compile_mods(sm, bm.mask_mod, interpret=False,
                                       float_index=S < FLOAT_INDEX_MAX_LEN)
        caps = list(traced.captured)
        for label, module in (("launch", kernels), ("python only", _Nothing())):
            plan = launch.Plan(module, traced, bm, D ** -0.5, False, coarsen=True)
            o, lse = launch.forward(plan, q.detach(), k.detach(), v.detach(), caps) \
                if module is kernels else (torch.empty_like(q), torch.empty(B, H, S,
                                                                           device="cuda"))
            row(f"{label}.forward", host(lambda plan=plan: launch.forward(
                plan, q.detach(), k.detach(), v.detach(), caps)))
            row(f"{label}.backward", host(lambda plan=plan, o=o, lse=lse: launch_bwd.backward(
                plan, q.detach(), k.detach(), v.detach(), o.detach(), lse, do, caps,
                [False] * len(caps))))
        try:
            fbm = create_block_mask(mm, None, None, S, S, device="cuda")
            flex_c = torch.compile(flex_attention, dynamic=False)
            row("flex fwd+bwd", host(lambda sm=sm, fbm=fbm, f=flex_c: f(
                q, k, v, score_mod=sm, block_mask=fbm).backward(do), [q, k, v]))
        except Exception as e:  # noqa: BLE001 -- report, go on
            row("flex fwd+bwd", f"failed: {type(e).__name__}: {str(e)[:200]}")
    return _write(out_dir, "attention_host_breakdown", meta, lines)


if __name__ == "__main__":
    sys.exit(main())
