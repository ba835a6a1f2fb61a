"""Suite `train`: whole training steps (forward, backward, AdamW) of two built-in models, for
eager, torch.compile (Inductor, default mode) and Cherenkov, one after another in one process.

| config      | model                                                                    | B x T     |
|-------------|--------------------------------------------------------------------------|-----------|
| gpt2-style  | 12 layers, d=768, 12 heads, vocab 50304, untied LM head (163M params)     | 16 x 1024 |
| llama-style | 16 layers, d=2048, 16 heads, SwiGLU 5632, RMSNorm, vocab 32000 (953M)      | 4 x 2048  |

(the configurations of `/work/shared/baselines/README.md`). Every backend starts from the same
weights (`torch.manual_seed(seed)` before building the model on the device; a checksum of the
weights is recorded) and sees the same fixed pool of token batches (tokens drawn from a Zipf
law over the vocabulary, so the loss has something to learn). A step is

    with autocast(bf16): _, loss = model(idx, targets)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)   # AdamW, fused on CUDA

Step 0 is timed alone on the wall clock (it includes compiling); steps 1..warmup are warm-up;
the remaining steps are timed one by one with CUDA events (no synchronization between them) and
their median is the step time. The loss of every step is kept: the curves of torch.compile and
Cherenkov are compared with eager's, max over steps of |loss - loss_eager| / |loss_eager|,
against a tolerance of 2e-2 under bf16 autocast (1e-4 in fp32).

FLOPs per step (model FLOPs, no recompute counted, embedding lookups excluded):

    6 * N_matmul * B * T  +  6 * layers * d * T^2 * B

N_matmul counts every weight of a matmul (attention and MLP matrices, the LM head); the second
term is attention's QK^T and PV (4 * B * T^2 * d per layer forward, x3 for forward+backward)
halved for the causal mask. MFU is TFLOP/s over the probe's (or preset's) bf16 matmul rate,
and over the datasheet's dense bf16 peak. The results as text: train_report.py.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import os
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch

from cherenkov.models import ModelConfig, build_model, matmul_param_count, param_count

ORDER = ("eager", "torch.compile", "cherenkov", "cherenkov+cudagraphs")
REFERENCE = "eager"
LATE = {"cherenkov+cudagraphs", "cherenkov+opt"}   # optional: after every config's others


@dataclass(frozen=True)
class TrainCase:
    name: str
    model: ModelConfig
    batch: int
    seq: int
    target_speedup: float = 1.0     # issue 6: Cherenkov tok/s over torch.compile's

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def shape(self) -> str:
        return f"B={self.batch} T={self.seq}"


def cases(scale: str = "full", dtype: torch.dtype = torch.bfloat16) -> list[TrainCase]:
    """The two configs at full size, or tiny models of the same families ("smoke")."""
    if scale == "full":
        gpt = ModelConfig("gpt", layers=12, hidden=768, heads=12, vocab=50304, seq=1024,
                          name="gpt2-style")
        llama = ModelConfig("llama", layers=16, hidden=2048, heads=16, ffn=5632, vocab=32000,
                            seq=2048, name="llama-style")
        return [TrainCase("gpt2-style", gpt, 16, 1024, 1.15),
                TrainCase("llama-style", llama, 4, 2048, 1.10)]
    gpt = ModelConfig("gpt", layers=2, hidden=32, heads=2, vocab=64, seq=16, name="gpt2-tiny")
    llama = ModelConfig("llama", layers=2, hidden=32, heads=2, kv_heads=1, ffn=64, vocab=64,
                        seq=16, name="llama-tiny")
    return [TrainCase("gpt2-style", gpt, 2, 16, 1.15), TrainCase("llama-style", llama, 2, 16, 1.10)]


def extra_cases(scale: str = "full") -> list[TrainCase]:
    """Run only when named in full with --cases: GPT-2 whose forward returns the loss alone
    (not the logits too), so Cherenkov may fuse the LM head into the cross-entropy
    (`linear_ce`)."""
    gpt = cases(scale)[0]
    return [dataclasses.replace(gpt, name="gpt2-loss-only",
                                model=gpt.model.replace(return_logits=False))]


def step_flops(cfg: ModelConfig, batch: int, seq: int) -> float:
    """Model FLOPs of one training step, attention counted for the causal half."""
    return (6.0 * matmul_param_count(cfg) * batch * seq
            + 6.0 * cfg.layers * cfg.hidden * seq * seq * batch)


# ---- backends ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backend:
    name: str
    build: Callable[[torch.nn.Module], Callable]    # model -> callable(idx, targets)
    # optimizer -> its compiled step; None: the optimizer runs eagerly as torch's fused AdamW.
    # With it, AdamW is built multi-tensor (foreach, torch's CUDA default) and its step compiled
    compile_step: Callable[[torch.optim.Optimizer], Callable] | None = None


def _cherenkov(**options):
    def build(model):
        import cherenkov
        return cherenkov.compile(model, strict=True, dynamic=False, **options)
    return build


def _cherenkov_step(opt):
    import cherenkov
    return cherenkov.compile(opt.step, strict=True, dynamic=False)


BACKENDS = {b.name: b for b in (
    Backend("eager", lambda m: m),
    Backend("torch.compile", lambda m: torch.compile(m, dynamic=False)),
    Backend("cherenkov", _cherenkov()),
    Backend("cherenkov+cudagraphs", _cherenkov(cuda_graphs=True)),
    # the same, warm-ups in the graphs' shared pool and capture before running
    Backend("cherenkov+cudagraphs-pooled", _cherenkov(cuda_graphs=True,
                                                      cuda_graphs_pooled=True)),
    # matmul + epilogue templates where they measure faster than cuBLAS + a kernel: tuned
    # while compiling (its first step pays for that) and cached on disk for later runs
    Backend("cherenkov+autotune", _cherenkov(autotune=True)),
    # autocast's weight casts in a few combo launches (passes/horizontal.py; off by default)
    Backend("cherenkov+combine", _cherenkov(combine_casts=True)),
    # generated kernels launched without programmatic dependent launch (codegen/
    # dependent_launch.py; on by default since 2026-12-01_train_pdl_h200_7efcacd)
    Backend("cherenkov-nopdl", _cherenkov(pdl=False)),
    # recompute vs save by torch's min-cut instead of the cost model's (passes/partition.py,
    # the default since 2026-12-01_train_partitioner_h200_bba4aa9, where it was the "+")
    Backend("cherenkov-torchpartitioner", _cherenkov(partitioner="torch")),
    # autograd's zero fill for unused outputs' gradients (the logits), as torch.compile has it
    Backend("cherenkov-zerofill", _cherenkov(unused_grads=False)),
    # matmuls by the fastest of cuBLASLt's candidates, timed on their first run, instead of
    # torch's call (templates/matmul_algos.py; off by default: 2026-12-01_train_matmul_algos_*)
    Backend("cherenkov+matmul-algos", _cherenkov(matmul_algos=True)),
    # row-loop kernels (a norm backward with its weight gradients' partials) over 16 rows a
    # program instead of 32: twice the programs, for GPT-2's 768-wide rows (passes/
    # split_reductions.py)
    Backend("cherenkov-rows16", _cherenkov(row_loop_rows=16)),
    # the same for the matmuls of at least 0.5 ms at the device's matmul rate only (the LM
    # head's: GPT-2's and Llama's other matmuls take under 0.25 ms)
    Backend("cherenkov+matmul-algos-large", _cherenkov(matmul_algos=True,
                                                       matmul_algos_min_ms=0.5)),
    # each graph compiled at its first call (AOTAutograd's lazy backward) instead of when
    # AOTAutograd hands it over (config compile_ahead, the default)
    Backend("cherenkov-lazy", _cherenkov(compile_ahead=False)),
    # the optimizer step compiled too (run when named with --impls), each by its own compiler
    Backend("torch.compile+opt", lambda m: torch.compile(m, dynamic=False),
            lambda opt: torch.compile(opt.step, dynamic=False)),
    Backend("cherenkov+opt", _cherenkov(), _cherenkov_step),
)}


@dataclass
class Settings:
    device: torch.device
    dtype: torch.dtype = torch.bfloat16     # autocast dtype; float32 means no autocast
    steps: int = 50
    warmup: int = 5
    lr: float = 6e-4
    seed: int = 0
    batches: int = 4                        # fixed batches, cycled
    time_budget_s: float = float("inf")     # no backend starts after this
    tolerance: float | None = None          # relative loss tolerance; None: by dtype

    @property
    def loss_tolerance(self) -> float:
        if self.tolerance is not None:
            return self.tolerance
        return 1e-4 if self.dtype == torch.float32 else 2e-2


@dataclass
class BackendResult:
    name: str
    losses: list[float] = field(default_factory=list)
    first_step_s: float | None = None
    step_times_s: list[float] = field(default_factory=list)
    peak_bytes: int | None = None
    # reserved by the allocator at its peak: CUDA graph pools' buffers count here (replays
    # allocate nothing, so the allocated peak does not see a graph's intermediates)
    peak_reserved_bytes: int | None = None
    # reserved before the backend built its model: blocks earlier backends in the process
    # left alive or cached, counted in its reserved peak too (a fresh process has none)
    reserved_before_bytes: int | None = None
    weights_checksum: float | None = None
    kernels: int = 0
    library_calls: dict = field(default_factory=dict)
    compile_seconds: dict = field(default_factory=dict)   # Cherenkov's phases, all graphs
    cuda_graphs: list = field(default_factory=list)       # (graph, decision) per Cherenkov plan
    # (M x K x N epilogue, verdict, {candidate: ms}) per matmul problem timed on its first run
    matmul_algos: list = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None

    @property
    def step_s(self) -> float | None:
        return statistics.median(self.step_times_s) if self.step_times_s else None


def make_batches(case: TrainCase, n: int, seed: int, device) -> list[tuple]:
    """n fixed (idx, targets) pairs of shape (B, T): Zipf(1.1) tokens, targets shifted by one."""
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    probs = 1.0 / torch.arange(1, case.model.vocab + 1, dtype=torch.float64) ** 1.1
    out = []
    for _ in range(n):
        seqs = torch.multinomial(probs, case.batch * (case.seq + 1), replacement=True,
                                 generator=g).view(case.batch, case.seq + 1)
        out.append((seqs[:, :-1].contiguous().to(device), seqs[:, 1:].contiguous().to(device)))
    return out


def prepared(case: TrainCase, device) -> tuple:
    """(settings, batches, model) of `case` on `device` as the suite makes them -- the seed's
    weights, in train mode -- with the device's peak statistics reset after the build (for
    the measuring scripts in bench/)."""
    settings = Settings(device)
    batches = make_batches(case, settings.batches, settings.seed, device)
    torch.manual_seed(settings.seed)
    model = build_model(case.model, device).train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    return settings, batches, model


def script_setup(argv: list[str], steps: int) -> tuple:
    """(out folder, case, backend names, settings, batches, results header) from a bench/
    script's command line `OUT_DIR [gpt2-style|llama-style] [backend ...]` (GPT-2 and
    Cherenkov + torch.compile when not given)."""
    out = argv[1] if len(argv) > 1 else "bench/results"
    config = argv[2] if len(argv) > 2 else "gpt2-style"
    names = argv[3:] or ["cherenkov", "torch.compile"]
    case = next(c for c in cases("full") if c.name == config)
    settings = Settings(torch.device("cuda"))
    batches = make_batches(case, settings.batches, settings.seed, settings.device)
    results = {"commit": os.environ.get("CHERENKOV_COMMIT", "unknown"), "config": config,
               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "steps": steps, "backends": {}}
    return out, case, names, settings, batches, results


def script_results(results: dict, names: list[str], path: str, run: Callable[[str], dict]):
    """Yield (name, result) of `run(name)` for each backend in turn -- {"error": ...} when it
    raised (the others still run) -- with every result so far written to `path` as JSON
    first, so a run cut short keeps them (for bench/ scripts)."""
    for name in names:
        try:
            r = run(name)
        except Exception as e:  # noqa: BLE001 -- the other backends still count
            r = {"error": f"{type(e).__name__}: {e}"[:300]}
        results["backends"][name] = r
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
        yield name, r


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _train_step(fn, opt, idx, tgt, settings: Settings, step=None) -> torch.Tensor:
    with torch.autocast(settings.device.type, dtype=settings.dtype,
                        enabled=settings.dtype != torch.float32):
        _, loss = fn(idx, tgt)
    loss.backward()
    (step or opt.step)()
    opt.zero_grad(set_to_none=True)
    return loss.detach().clone()


def script_backend(case: TrainCase, name: str, settings: Settings, batches: list,
                   warm: int = 6) -> tuple:
    """(model, optimizer, step function) of backend `name` on `case` after `warm` steps, as
    the suite builds them (fused AdamW, or foreach with the backend's compiled step put in
    as opt.step), for bench/ scripts; `script_release` drops them."""
    backend = BACKENDS[name]
    torch.manual_seed(settings.seed)
    model = build_model(case.model, settings.device).train()
    compiled_opt = backend.compile_step is not None
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=not compiled_opt,
                            foreach=True if compiled_opt else None)
    fn = backend.build(model)
    if compiled_opt:
        opt.step = backend.compile_step(opt)
    for i in range(warm):
        _train_step(fn, opt, *batches[i % len(batches)], settings)
    torch.cuda.synchronize()
    return model, opt, fn


def script_release() -> None:
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()


def event_step_ms(fn, opt, batches: list, settings: Settings, n: int) -> list[float]:
    """GPU ms of n steps issued back to back, CUDA events around each (for bench/ scripts)."""
    events = []
    for i in range(n):
        begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        _train_step(fn, opt, *batches[i % len(batches)], settings)
        end.record()
        events.append((begin, end))
    torch.cuda.synchronize()
    return [b.elapsed_time(e) for b, e in events]


def host_and_wall(fn, opt, batches: list, settings: Settings, reps: int = 5) -> tuple:
    """Median (host time to issue a step, the step's wall time when synchronized), seconds,
    from an idle GPU (for the profiling scripts in bench/)."""
    _sync(settings.device)
    host, wall = [], []
    for i in range(reps):
        t0 = time.perf_counter()
        _train_step(fn, opt, *batches[i % len(batches)], settings)
        host.append(time.perf_counter() - t0)
        _sync(settings.device)
        wall.append(time.perf_counter() - t0)
    return sorted(host)[reps // 2], sorted(wall)[reps // 2]


def _release_cherenkov(start: int, result: BackendResult, tuned_start: int = 0) -> None:
    """Count what Cherenkov compiled since `start`, then drop its plans (and their buffers)."""
    from cherenkov.backend import COMPILED
    from cherenkov.templates.matmul_algos import AlgoMatmul
    for p, verdict, timings in AlgoMatmul.tuned[tuned_start:]:
        result.matmul_algos.append((f"{p.m}x{p.k}x{p.n} {p.epilogue}", verdict, timings))
    for graph, info in COMPILED[start:]:
        result.kernels += len(info.kernels)
        for phase, s in info.seconds.items():
            result.compile_seconds[phase] = result.compile_seconds.get(phase, 0.0) + s
        for kind, n in info.library_calls.items():
            result.library_calls[kind] = result.library_calls.get(kind, 0) + n
        if info.cuda_graphs is not None:
            result.cuda_graphs.append((info.name, str(info.cuda_graphs)))
        graph.cache.clear()


def train_backend(case: TrainCase, backend: Backend, batches: list, settings: Settings,
                  status: Callable[[str], None] = lambda s: None) -> BackendResult:
    """Train `steps` steps from the seed's weights; never raises (errors are recorded)."""
    from cherenkov.backend import COMPILED
    from cherenkov.templates.matmul_algos import AlgoMatmul
    r = BackendResult(backend.name)
    dev, start, tuned_start = settings.device, len(COMPILED), len(AlgoMatmul.tuned)
    model = opt = fn = step = None
    try:
        torch.manual_seed(settings.seed)
        if dev.type == "cuda":
            r.reserved_before_bytes = torch.cuda.memory_reserved(dev)
        model = build_model(case.model, dev).train()
        r.weights_checksum = sum(p.detach().double().sum().item() for p in model.parameters())
        if dev.type == "cuda":     # the peak from here on: weights, optimizer, activations
            torch.cuda.reset_peak_memory_stats(dev)
        compiled_opt = backend.compile_step is not None
        opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                                weight_decay=0.1, fused=dev.type == "cuda" and not compiled_opt,
                                foreach=True if compiled_opt else None)
        fn = backend.build(model)
        step = backend.compile_step(opt) if compiled_opt else opt.step
        status("first step (compiling)")
        _sync(dev)
        t0 = time.perf_counter()
        losses = [_train_step(fn, opt, *batches[0], settings, step)]
        _sync(dev)
        r.first_step_s = time.perf_counter() - t0
        status("training")
        timed = []
        for i in range(1, settings.steps):
            idx, tgt = batches[i % len(batches)]
            if i <= settings.warmup:
                losses.append(_train_step(fn, opt, idx, tgt, settings, step))
            elif dev.type == "cuda":
                begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                begin.record()
                losses.append(_train_step(fn, opt, idx, tgt, settings, step))
                end.record()
                timed.append((begin, end))
            else:
                t = time.perf_counter()
                losses.append(_train_step(fn, opt, idx, tgt, settings, step))
                timed.append(time.perf_counter() - t)
        _sync(dev)
        r.step_times_s = [b.elapsed_time(e) / 1e3 for b, e in timed] if dev.type == "cuda" \
            else timed
        r.losses = torch.stack(losses).float().cpu().tolist()
        if dev.type == "cuda":
            r.peak_bytes = torch.cuda.max_memory_allocated(dev)
            r.peak_reserved_bytes = torch.cuda.max_memory_reserved(dev)
    except Exception as e:  # noqa: BLE001 -- one failing backend never stops the others
        traceback.print_exc()
        text = f"{type(e).__name__}: {e}".strip()
        r.error = text.splitlines()[0][:300]
    finally:
        _release_cherenkov(start, r, tuned_start)
        del model, opt, fn, step
        torch._dynamo.reset()
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return r


def schedule(cases: list[TrainCase], backends: list[Backend]) -> list[tuple]:
    """(case, backend) in running order: every config's essential backends first, then the
    optional ones (LATE) for every config, so a slow option never crowds out a baseline."""
    early = [(c, b) for c in cases for b in backends if b.name not in LATE]
    return early + [(c, b) for c in cases for b in backends if b.name in LATE]


def run_all(cases: list[TrainCase], backends: list[Backend], settings: Settings,
            status: Callable[[str], None] = lambda s: None,
            done: Callable[[dict], None] = lambda results: None) -> dict:
    """case name -> [BackendResult in the order of `backends`]; a backend that would start
    after the time budget is recorded as skipped. `done(results)` runs after each backend."""
    t0 = time.monotonic()
    results = {c.name: {} for c in cases}
    batches = {}
    for case, b in schedule(cases, backends):
        if time.monotonic() - t0 > settings.time_budget_s:
            r = BackendResult(b.name, skipped="time budget spent")
        else:
            if case.name not in batches:
                batches[case.name] = make_batches(case, settings.batches, settings.seed,
                                                  settings.device)
            r = train_backend(case, b, batches[case.name], settings,
                              lambda s, b=b, c=case: status(f"{c.name} {b.name}: {s}"))
        results[case.name][b.name] = r
        done(ordered(results, backends))
    return ordered(results, backends)


def ordered(results: dict, backends: list[Backend]) -> dict:
    return {name: [by[b.name] for b in backends if b.name in by] for name, by in results.items()}


def run(args) -> int:
    """`cherenkov bench train`: uses the bench flags --out --cpu --smoke --cases --impls
    --time-budget --dtype --list, and --steps where the bench CLI offers it."""
    import sys
    from cherenkov import hw
    from cherenkov.bench.cli import empty_selection, pick_device, select
    from cherenkov.bench.report import metadata, result_paths
    from cherenkov.bench.suites.train_report import row, write

    scale = "smoke" if (args.smoke or args.cpu) else "full"
    dtype = getattr(torch, args.dtype or ("float32" if args.cpu else "bfloat16"))
    named = {p.lower() for p in args.cases or ()}
    chosen = select(cases(scale, dtype), args.cases) + [
        c for c in extra_cases(scale) if c.name in named]
    if empty_selection(chosen, args.cases):
        return 2
    if args.list:
        for c in chosen:
            print(f"{c.name:14s} {c.shape:14s} {param_count(c.model) / 1e6:8.1f}M params  "
                  f"{step_flops(c.model, c.batch, c.seq) / 1e12:.3g} TFLOP/step")
        return 0
    device = pick_device(args)
    if device is None:
        return 0
    names = args.impls or (["eager", "cherenkov"] if args.cpu else list(ORDER))
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        print(f"cherenkov bench train: unknown backend(s) {unknown}; known: {list(BACKENDS)}",
              file=sys.stderr)
        return 2
    steps = getattr(args, "steps", None) or (50 if scale == "full" else 3)
    settings = Settings(device=device, dtype=dtype, steps=steps,
                        warmup=min(5, max(1, steps // 10)) if steps > 2 else 0,
                        time_budget_s=args.time_budget)
    spec = hw.current_device(device)
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                               TextColumn, TimeElapsedColumn)
    console = Console(stderr=True)
    console.print(f"[bold]cherenkov bench train[/] on {spec.name} ({device}), "
                  f"{len(chosen)} configs x {len(names)} backends, {steps} steps, scale {scale}")
    meta = metadata(device, spec, "train", 0.0, scale)
    meta.pop("copy_bandwidth_Bps")
    meta.pop("model_bandwidth_Bps")
    meta.update(achievable_flops=spec.achievable_flops(dtype, True),
                datasheet_flops=spec.flops(dtype, True))
    settings_json = {"steps": settings.steps, "warmup": settings.warmup, "lr": settings.lr,
                     "seed": settings.seed, "batches": settings.batches,
                     "dtype": str(dtype).removeprefix("torch."),
                     "loss_tolerance": settings.loss_tolerance, "backends": names,
                     "clock": "CUDA events" if device.type == "cuda" else "wall clock"}
    md, js = result_paths(meta, args.out, "train")
    by_name, t0 = {c.name: c for c in chosen}, time.monotonic()

    def save(results):      # after every backend, so a killed run still leaves its results
        meta["wall_s"] = time.monotonic() - t0
        rows = [row(by_name[n], rs, settings, spec) for n, rs in results.items() if rs]
        write(meta, settings_json, rows, md, js)

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("starting", total=len(chosen) * len(names))

        def done(results):
            save(results)
            progress.advance(task)
        run_all(chosen, [BACKENDS[n] for n in names], settings,
                lambda s: progress.update(task, description=s), done)
    print(md.read_text())
    console.print(f"wrote {md} and {js}")
    return 0
