"""The benchmark harness: for each case of a suite and each mode, build inputs once, check
every implementation against a high-precision reference, then time the ones that passed,
all in one process on identical inputs.

    results = run_suite(cases("smoke"), [EAGER, CHERENKOV], Settings(device=cpu))

Implementations are named builders (eager function -> callable): eager, torch.compile
(Inductor, default mode) and Cherenkov by default; tests add a deliberately wrong one to see
the check fail. For Cherenkov the kernels it generated (recorded by the backend in
`cherenkov.backend.COMPILED`) give the cost model's predicted time for the case.
"""
from __future__ import annotations

import gc
import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch

from cherenkov.bench.case import Case, make_grad_out, prepare, step
from cherenkov.bench.check import CheckResult, check, upcast
from cherenkov.bench.timing import copies_for, graph_replay_median_s, median_s, rotating


@dataclass(frozen=True)
class Implementation:
    name: str
    build: Callable[[Callable], Callable]      # eager function -> function to benchmark


def _torch_compile(fn):
    return torch.compile(fn, dynamic=False)


def _cherenkov(fn):
    import cherenkov
    return cherenkov.compile(fn, strict=True, dynamic=False)


log = logging.getLogger("cherenkov")

EAGER = Implementation("eager", lambda fn: fn)
TORCH_COMPILE = Implementation("torch.compile", _torch_compile)
CHERENKOV = Implementation("cherenkov", _cherenkov)
IMPLEMENTATIONS = {i.name: i for i in (EAGER, TORCH_COMPILE, CHERENKOV)}


@dataclass
class Settings:
    device: torch.device
    l2_bytes: float = 0.0                 # rotate inputs that fit in it
    time_budget_s: float = float("inf")   # variants not started by then are skipped
    time_wrong: bool = True               # still time an implementation that failed its
                                          # check (reported WRONG, left out of summaries)
    modes: tuple[str, ...] = ("fwd", "fwd+bwd")
    graph_replay: bool = True             # CUDA: time kernels by replaying a CUDA graph
    capture_error_mode: str = "global"    # torch.cuda.graph's, for the timing captures
    isolate: tuple[str, ...] = ()         # modes whose variants run in a fresh process each
    suite: tuple = ()                     # (suite name, scale, dtype): how a fresh process
                                          # rebuilds a case (see isolated.py)


@dataclass
class ImplResult:
    check: CheckResult | None = None
    time_s: float | None = None
    launched_s: float | None = None       # plain calls, host issue included (CUDA only)
    timing: str = "calls"                 # "cuda graph" when time_s is a graph replay
    error: str | None = None
    kernels: list = field(default_factory=list)     # (name, fused ops, bytes) it generated
    library_calls: dict = field(default_factory=dict)


@dataclass
class CaseResult:
    case: Case
    mode: str
    impls: dict[str, ImplResult] = field(default_factory=dict)
    skipped: str | None = None
    error: str | None = None
    reserved_after: int | None = None     # CUDA bytes still reserved after the variant is gone

    @property
    def bytes(self) -> int:
        return self.case.bytes[self.mode]

    @property
    def flops(self) -> float | None:
        return self.case.flops.get(self.mode)

    def time(self, impl: str) -> float | None:
        r = self.impls.get(impl)
        return r.time_s if r else None


def _compiled_count() -> int:
    from cherenkov.backend import COMPILED
    return len(COMPILED)


def _compiled_since(start: int) -> tuple[list, dict]:
    from cherenkov.backend import COMPILED
    kernels, calls = [], {}
    for _, info in COMPILED[start:]:
        kernels += [(k[0], k[1], k[2]) for k in info.kernels]
        for kind, n in info.library_calls.items():
            calls[kind] = calls.get(kind, 0) + n
    return kernels, calls


def _input_bytes(inputs: tuple) -> int:
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def _clone(inputs: tuple) -> tuple:
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def run_variant(case: Case, mode: str, impls: list[Implementation], settings: Settings,
                status: Callable[[str], None] = lambda s: None) -> CaseResult:
    """Check, then time, every implementation on one (case, mode)."""
    result = CaseResult(case, mode)
    dev = settings.device
    base = case.make_inputs(dev)
    n = copies_for(_input_bytes(base), settings.l2_bytes) if dev.type == "cuda" else 1
    copies = [prepare(case, mode, base)] + [prepare(case, mode, _clone(base)) for _ in range(n - 1)]
    first = copies[0]
    grad_out = make_grad_out(case.fn(*first)) if mode == "fwd+bwd" else None
    status("reference")
    reference = step(case.fn, case, mode, upcast(first),
                     None if grad_out is None else upcast((grad_out,))[0])
    eager_out = step(case.fn, case, mode, first, grad_out)
    for impl in impls:
        r = result.impls[impl.name] = ImplResult()
        try:
            status(f"compiling {impl.name}")
            start = _compiled_count()
            fn = impl.build(case.fn)
            out = step(fn, case, mode, first, grad_out)
            r.kernels, r.library_calls = _compiled_since(start)
            r.check = check(out, eager_out, reference)
            del out
            if not r.check.passed and not settings.time_wrong:
                continue
            status(f"timing {impl.name}")
            call = lambda inputs, fn=fn: step(fn, case, mode, inputs, grad_out)  # noqa: E731
            r.time_s = median_s(rotating(call, copies), dev)
            if dev.type == "cuda" and settings.graph_replay:
                r.launched_s = r.time_s
                try:
                    r.time_s = graph_replay_median_s(
                        call, copies, dev, settings.capture_error_mode,
                        fresh=lambda inputs: prepare(case, mode, inputs))
                    r.timing = "cuda graph"
                except Exception as e:  # noqa: BLE001 -- not capturable: keep the plain time
                    r.timing = f"calls (CUDA graph capture failed: {_short(e)})"
                    log.warning("%s %s: CUDA graph capture failed (%s); timed plainly",
                                case.label(mode), impl.name, _short(e))
                if r.timing != "cuda graph":
                    # the exception (and its frames: a graph, its memory pool) is gone once
                    # the except block has ended; release that memory before going on
                    gc.collect()
                    torch.cuda.synchronize(dev)
                    torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001 -- one failing implementation never stops a run
            r.error = _short(e)
            traceback.print_exc()
    return result


def _run_isolated(case: Case, mode: str, impls: list[Implementation], settings: Settings,
                  status: Callable[[str], None]) -> CaseResult:
    from cherenkov.bench import isolated
    status("in a fresh process")
    suite, scale, dtype = settings.suite
    req = isolated.request(suite, scale, dtype, case.name, mode, [i.name for i in impls],
                           settings)
    return CaseResult(case, mode, impls=isolated.run_elsewhere(req))


def run_suite(cases: list[Case], impls: list[Implementation], settings: Settings,
              progress=None) -> list[CaseResult]:
    """Every (case, mode), forward modes first; a variant that would start after the time
    budget is recorded as skipped. `progress` is a rich Progress or None."""
    variants = [(c, m) for m in settings.modes for c in cases if m in c.modes]
    task = progress.add_task("starting", total=len(variants)) if progress else None
    results, t0 = [], time.monotonic()
    for case, mode in variants:
        label = case.label(mode)

        def status(text, label=label):
            if progress is not None:
                progress.update(task, description=f"{label}: {text}")
        if time.monotonic() - t0 > settings.time_budget_s:
            results.append(CaseResult(case, mode, skipped="time budget spent"))
        else:
            try:
                torch._dynamo.reset()
                if mode in settings.isolate:
                    results.append(_run_isolated(case, mode, impls, settings, status))
                else:
                    results.append(run_variant(case, mode, impls, settings, status))
            except Exception as e:  # noqa: BLE001 -- e.g. out of memory building inputs
                traceback.print_exc()
                results.append(CaseResult(case, mode, error=_short(e)))
        gc.collect()
        if settings.device.type == "cuda":
            torch.cuda.empty_cache()
            results[-1].reserved_after = torch.cuda.memory_reserved(settings.device)
        if progress is not None:
            progress.advance(task)
    return results
