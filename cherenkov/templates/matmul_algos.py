"""cuBLAS's algorithm for each plain matmul, chosen by timing it on the step's own inputs.

torch.mm / addmm run the algorithm cuBLAS's heuristic ranks first. For GPT-2's matmuls on the
H200 another of the heuristic's candidates measured up to 10% faster, 0.68 ms a step in all
when each was timed alone (`bench/results/2026-12-01_cublaslt_algos_h200_d0294b9.md`).

In whole training steps the picks made by timing alone did not carry over: with it vs
without, GPT-2 30.2 vs 30.4 ms (`2026-12-01_train_matmul_algos_h200_ca993ff.md`, the backend
without it named "cherenkov-torchmatmuls"), then 29.6 vs 29.9 and 29.5 vs 29.8 with the weight
gradients taken too, while Llama ran 93.5 vs 91.4 and 92.8 vs 91.3 (`2026-12-02_train_matmul_
algos_h200_12967e8.md`, `2026-12-02_train_h200_d3ed553.md`): its problems' picks, 3-10%
faster alone, made its step slower. The final choice is now timed in the step itself
(`AlgoMatmul`: the fastest alone tried in turn by the step's own calls); with it
(`2026-12-02_train_matmul_algos_in_step_h200_ebebc3e.md`) GPT-2 ran 29.4 vs 29.7 ms and Llama
still 93.4 vs 91.1 -- though there every kept pick was faster than the heuristic's first in
its own calls (the LM head's forward 1.37 vs 1.58 ms, the gate/up projections 0.235 vs
0.267). Yet profiled in steady steps (`2026-12-02_profile_train_llama_matmul_algos_h200_
d7194da.md`) the kept picks' kernels ran 2-4% slower than torch's per call (Llama's 48 dW
calls of one problem 265 vs 256 us, 80 dX calls 122 vs 119, 32 forward 240 vs 235; matmuls
58.4 vs 57.0 ms of wall a step, cuDNN's attention 9.26 vs 8.80): the events read during the
first steps' trials do not hold later (what differs was not traced). So the option stays off
by default (config `matmul_algos`).

A library step computing mm(a, b), addmm(bias, a, b) or mm.dtype(a, b, float32) -- 2-D, half
precision operands, a 1-D bias, a row-major result in the operands' dtype (fp32 for mm.dtype:
passes/widen_matmul.py's weight gradients, which torch runs split-K with a reduction kernel
after) (`problem_of_node`) -- reads its problem off the operands on its first run
(`for_operands`: sizes, dtype, and the layouts the tensors have, which a kernel may have laid
out otherwise than the fake run promised), and runs that problem's `AlgoMatmul`: cuBLASLt's
candidates (`templates/cublaslt.py`: the heuristic's first 8 with a workspace, its first 8
without one: no split-K; a memset before the kernel either way for all of GPT-2's forward and
dX problems, `2026-12-02_cublaslt_memset_free_h200_891105f.md`), each checked against torch's
result first (on 64 rows spread over it), timed alone once (`pick`), the fastest then tried
in the step against the heuristic's first, the winner kept if it beats that by MARGIN; a
matmul torch runs in under MIN_MS is left to torch untried. The verdict is cached per
problem -- in memory, so the other layers' matmuls of that problem take it, and in the
on-disk autotune table for later processes. A call whose operands are not laid out or
aligned as planned runs torch's. Timing alone runs on the real inputs into torch's own
result, so it needs no memory beyond one result.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import statistics

import torch

from cherenkov.templates import cublaslt
from cherenkov.templates.autotune import cached_entry, close, store_entry

log = logging.getLogger("cherenkov")

TORCH = "torch"
MARGIN = 0.97                 # a candidate must take at most 97% of torch's time to be kept
WARMUP, REPS = 2, 10
MIN_REPS, SAMPLE_MS = 3, 1.0  # runs per timing: ~SAMPLE_MS of them, at least MIN_REPS
ROUNDS = 3                    # pick: every contender once a round, its median kept (the
                              # shortlist of AlgoMatmul times one round: the step decides)
KEEP_WITHIN = 1.10            # after round one: those within 10% of its fastest go on
REFERENCE = "ws#0"            # the heuristic's first: torch's algorithm, called directly
SHORTLIST = 3                 # candidates tried in the step (the fastest alone)
SAMPLES = 3                   # in-step times of each contender before deciding
KINDS = {"ws": (8, cublaslt.WORKSPACE_BYTES), "nows": (8, 0)}
MIN_MS = 0.02                 # torch's time under which nothing is tried (~1 us to win)
SAMPLE_ROWS = 64              # rows of the result each candidate is checked on
HALF = (torch.bfloat16, torch.float16)


def problem_of_node(target, metas: list, out_meta, device: torch.device):
    """The cuBLASLt problem of mm(a, b) / addmm(bias, a, b) / mm.dtype(a, b, float32) (a
    half-precision product written in fp32: passes/widen_matmul.py's weight gradients) with
    these input metas (a and b only for mm.dtype), or None when the call is not one we take
    (another op, a dtype, bias or result layout we leave to torch). The operands' layouts are
    checked at run time (`for_operands`)."""
    aten = torch.ops.aten
    widened = getattr(aten.mm, "dtype", None)
    if device.type != "cuda" or target not in (aten.mm.default, aten.addmm.default) and \
            (widened is None or target is not widened):
        return None
    n_args = 3 if target is aten.addmm.default else 2
    if len(metas) != n_args or out_meta is None or any(m is None for m in metas):
        return None
    a, b = metas[-2], metas[-1]
    out_dtype = torch.float32 if target is widened else None
    if len(getattr(out_meta, "shape", ())) != 2 or a.dtype not in HALF \
            or out_meta.dtype != (out_dtype or a.dtype):
        return None
    m, n = out_meta.shape
    if out_meta.strides != (n, 1) or len(a.shape) != 2 or len(b.shape) != 2 \
            or b.dtype != a.dtype:
        return None
    k = a.shape[1]
    if n_args == 3:
        bias = metas[0]
        if bias.shape != (n,) or bias.strides != (1,) or bias.dtype != out_meta.dtype:
            return None
    return cublaslt.Problem(m, n, k, tuple(a.strides), tuple(b.strides), a.dtype,
                            "bias" if n_args == 3 else "none", device.index or 0, out_dtype)


def problem_key(p: cublaslt.Problem) -> str:
    name = torch.cuda.get_device_name(p.device) if torch.cuda.is_available() else "cpu"
    library = os.path.basename(cublaslt._library_path() or "")
    return json.dumps(["cublaslt", p.m, p.n, p.k, list(p.a_strides), list(p.b_strides),
                       str(p.dtype), p.epilogue, name, torch.__version__, library]
                      + ([str(p.out_dtype)] if p.out_dtype is not None else []))


def events_median_ms(fn, warmup: int = WARMUP, reps: int = REPS) -> float:
    """Median of CUDA-event times of `fn` run back to back (no cache flush: a step's matmul
    reads what the kernel before it just wrote)."""
    for _ in range(warmup):
        fn()
    pairs = []
    for _ in range(reps):
        begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        fn()
        end.record()
        pairs.append((begin, end))
    torch.cuda.synchronize()
    return statistics.median(b.elapsed_time(e) for b, e in pairs)


def reps_for(first_ms: float) -> int:
    """Timed runs per sample: about SAMPLE_MS of runs, between MIN_REPS and REPS (the LM
    head's ~2 ms matmuls get MIN_REPS, a 0.1 ms one REPS)."""
    return max(MIN_REPS, min(REPS, round(SAMPLE_MS / max(first_ms, 1e-6))))


def pick(reference, candidates, expected, time_ms=None, same=close, rounds=ROUNDS):
    """(label of the fastest candidate taking at most MARGIN of the reference's time, or
    None; {label: ms or why not}). `candidates`: (label, run, result) -- `run()` computes,
    `result()` is what is compared with `expected` first (a candidate that raises or
    disagrees is not timed). A reference under MIN_MS is kept untried: little to win.

    Timed in ROUNDS rounds, each timing every contender once (the order rotated from round
    to round, so no one is always first after the checks or last), a contender's time the
    median of its rounds: timed once each in a row, the reference -- timed first, right
    after its own first call -- read up to 2x slow on the H200 (`2026-12-02_train_h200_
    31c7d60.json`: torch's 0.177 ms against the candidates' 0.089 for one of Llama's
    problems). After the first round only those within KEEP_WITHIN of its fastest, and the
    references, go on. The candidate labelled REFERENCE (the heuristic's first: the
    algorithm torch's call runs) counts as the reference too: a candidate must beat the
    fastest of them and torch's call -- timed alone torch's call read slower than the same
    algorithm called directly, and picks made against it ran Llama's step 2 ms slower
    (`2026-12-02_train_matmul_algos_h200_12967e8.md`). `time_ms(run)` -> ms; by default CUDA
    events, reps_for the reference."""
    first = (time_ms or events_median_ms)(reference)
    timings = {TORCH: first}
    if first < MIN_MS:
        return None, timings
    if time_ms is None:
        reps = reps_for(first)
        time_ms = lambda run: events_median_ms(run, warmup=1, reps=reps)  # noqa: E731
    runs = {TORCH: reference}
    for label, run, result in candidates:
        try:
            run()
            got = result()
        except Exception as e:  # noqa: BLE001 -- an algorithm the library refuses at run time
            timings[label] = type(e).__name__
            continue
        if not same(got, expected):
            timings[label] = "wrong result"
            continue
        runs[label] = run
    samples = {label: [] for label in runs}
    order = list(runs)
    for r in range(rounds):
        for label in order[r % len(order):] + order[:r % len(order)]:
            samples[label].append(time_ms(runs[label]))
        if r == 0:
            fastest = min(v[0] for v in samples.values())
            order = [lb for lb in order if lb in (TORCH, REFERENCE)
                     or samples[lb][0] <= fastest * KEEP_WITHIN]
    for label, times in samples.items():
        timings[label] = statistics.median(times)
    ref_ms = min(timings[lb] for lb in samples if lb in (TORCH, REFERENCE))
    best, best_ms = None, ref_ms * MARGIN
    for label in order:
        if label not in (TORCH, REFERENCE) and timings[label] < best_ms:
            best, best_ms = label, timings[label]
    return best, timings


def _candidates(problem: cublaslt.Problem) -> list[tuple[str, cublaslt.LtMatmul]]:
    found = []
    for kind, (count, workspace) in KINDS.items():
        found += [(f"{kind}#{i}", c)
                  for i, c in enumerate(cublaslt.candidates(problem, count, workspace))]
    return found


def for_operands(a: torch.Tensor, b: torch.Tensor, planned: cublaslt.Problem):
    """The problem's AlgoMatmul for a @ b as these operands are laid out (b may be a
    transposed view; `planned` gives sizes, dtypes and epilogue), or None: operands cuBLASLt
    cannot take (torch's call)."""
    problem = cublaslt.Problem(planned.m, planned.n, planned.k, tuple(a.stride()),
                               tuple(b.stride()), planned.dtype, planned.epilogue,
                               planned.device, planned.out_dtype)
    if cublaslt.operand_layout(problem.m, problem.k, problem.a_strides) is None or \
            cublaslt.operand_layout(problem.k, problem.n, problem.b_strides) is None:
        return None
    return _algo(problem)


@functools.cache
def _algo(problem: cublaslt.Problem) -> "AlgoMatmul":
    return AlgoMatmul(problem)


def aligned(*tensors) -> bool:
    return all(t is None or t.data_ptr() % cublaslt.ALIGNMENT == 0 for t in tensors)


def _output(a, b, bias, alloc) -> torch.Tensor | None:
    """A fresh output for a cuBLASLt call, or None when an operand or it is not aligned
    (torch's call then)."""
    if not aligned(a, b, bias):
        return None
    result = alloc()
    return result if aligned(result) else None


class AlgoMatmul:
    """The choice for one problem: `lt` (a planned cuBLASLt call) or None (torch's call).

    Decided in two phases. On its first run, every candidate is checked against torch's
    result and timed alone once (`pick`, one round); the SHORTLIST fastest that beat the
    heuristic's first (REFERENCE: torch's own algorithm, called directly) go on with it.
    Then, while undecided, each run of the problem in the step takes the next contender in
    turn, timed there by CUDA events around its call (read back when done, never waited
    for): once each has SAMPLES times, the fastest by median is kept if it beats the
    reference's by MARGIN, else torch's call. Timed alone, the picks made Llama's step 1.4-2.1
    ms slower while GPT-2's gained 0.3 (`2026-12-02_train_h200_d3ed553.md`); in the step a
    matmul reads what the kernel before it just wrote and runs at the step's clocks. A layer's
    problem is decided within a step or two (a layer stack runs it once a layer), the LM
    head's over SHORTLIST x SAMPLES steps. Every contender computes the right result (checked
    first), so the steps meanwhile are as correct as any. While a CUDA graph is captured,
    nothing is timed or tried: the verdict so far runs (torch's call if none)."""
    tuned: list = []             # (problem, verdict, timings) of every tuning in this process

    def __init__(self, problem: cublaslt.Problem):
        self.problem = problem
        self.key = problem_key(problem)
        self.lt: cublaslt.LtMatmul | None = None
        self.decided = False
        self.contenders: dict | None = None      # label -> LtMatmul, while trying in the step
        self.samples: dict = {}
        self.pending: list = []                   # (label, start event, end event)
        self.turn = 0
        self._take(cached_entry(self.key))

    def _take(self, entry: dict | None) -> None:
        """Decide by a stored verdict (the heuristic's order is the same for the same library
        and device, so a label names the same algorithm)."""
        if entry is None:
            return
        self.decided = True
        label = entry.get("choice", TORCH)
        if label == TORCH:
            return
        kind, index = label.split("#")
        count, workspace = KINDS[kind]
        found = cublaslt.candidates(self.problem, count, workspace)
        self.lt = found[int(index)] if int(index) < len(found) else None

    def run(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, torch_call,
            alloc, stream: int | None = None) -> torch.Tensor:
        """a @ b (+ bias) by this run's algorithm (a and b in the problem's layouts: `b` may
        be a transposed view); `torch_call()` is torch's result, `alloc()` a fresh output."""
        if not self.decided and not torch.cuda.is_current_stream_capturing():
            if self.contenders is None:
                self._shortlist(a, b, bias, torch_call)
            if not self.decided:
                return self._try_next(a, b, bias, torch_call, alloc, stream)
        return self._call(self.lt, a, b, bias, torch_call, alloc, stream)

    @staticmethod
    def _call(lt, a, b, bias, torch_call, alloc, stream) -> torch.Tensor:
        result = _output(a, b, bias, alloc) if lt is not None else None
        if result is None:
            return torch_call()
        lt(a, b, result, bias=bias, stream=stream)
        return result

    def _shortlist(self, a, b, bias, torch_call) -> None:
        # torch's result, kept as rows spread over it (a wrong algorithm is wrong
        # everywhere); its buffer is then the candidates' output: one result of memory
        out = torch_call()
        rows = torch.linspace(0, self.problem.m - 1, min(self.problem.m, SAMPLE_ROWS),
                              device=out.device).long()
        expected = out.index_select(0, rows)
        found = dict(_candidates(self.problem))
        runs = [(label, lambda lt=lt: lt(a, b, out, bias=bias),
                 lambda: out.index_select(0, rows)) for label, lt in found.items()]
        best, alone = pick(torch_call, runs, expected, rounds=1)
        del out
        timed = {k: v for k, v in alone.items() if k in found and isinstance(v, float)}
        if REFERENCE not in timed:            # nothing to measure against in the step
            return self._decide(best, found.get(best), alone)
        ahead = sorted((v, k) for k, v in timed.items() if k != REFERENCE and v < timed[REFERENCE])
        if not ahead:
            return self._decide(None, None, alone)
        self.contenders = {k: found[k] for k in [REFERENCE] + [k for _, k in ahead[:SHORTLIST]]}
        self.samples = {k: [] for k in self.contenders}

    def _try_next(self, a, b, bias, torch_call, alloc, stream) -> torch.Tensor:
        self._collect()
        if all(len(v) >= SAMPLES for v in self.samples.values()):
            medians = {k: statistics.median(v) for k, v in self.samples.items()}
            ref = medians[REFERENCE]
            best = min((k for k in medians if k != REFERENCE), key=medians.get)
            verdict = best if medians[best] < ref * MARGIN else None
            self._decide(verdict, self.contenders.get(verdict),
                         {TORCH: ref, **{k: v for k, v in medians.items() if k != REFERENCE}})
            return self._call(self.lt, a, b, bias, torch_call, alloc, stream)
        labels = list(self.contenders)
        label = labels[self.turn % len(labels)]
        self.turn += 1
        result = _output(a, b, bias, alloc)
        if result is None:
            return torch_call()
        current = torch.cuda.current_stream()
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record(current)
        self.contenders[label](a, b, result, bias=bias, stream=stream)
        end.record(current)
        self.pending.append((label, start, end))
        return result

    def _collect(self) -> None:
        """Times of the contenders' calls that have finished (in stream order)."""
        while self.pending and self.pending[0][2].query():
            label, start, end = self.pending.pop(0)
            self.samples[label].append(start.elapsed_time(end))

    def _decide(self, label: str | None, lt, timings: dict) -> None:
        """Keep `lt` (the algorithm labelled `label`; None: torch's call) from now on."""
        self.lt = lt
        self.decided, self.contenders, self.pending = True, None, []
        store_entry(self.key, {"choice": label or TORCH})
        AlgoMatmul.tuned.append((self.problem, label or TORCH, timings))
        log.info("cherenkov: matmul %dx%dx%d %s: %s (%s)", self.problem.m, self.problem.k,
                 self.problem.n, self.problem.epilogue, label or TORCH,
                 {k: round(v, 4) if isinstance(v, float) else v for k, v in timings.items()})
