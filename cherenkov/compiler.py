"""The pipeline for one captured graph at one set of shapes: lower → fuse → render → runtime.

    compiled, info = compile_fx(gm, inputs, config)

Every stage can be dumped (`CHERENKOV_DUMP=dir`): the FX graph, the IR before and after
fusion, each kernel's IR and Triton source, and a summary with kernels, extern calls (with
reasons) and estimated bytes moved.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cherenkov.codegen.blocks import choose_blocks
from cherenkov.codegen import dependent_launch
from cherenkov.codegen.combo import render_combo
from cherenkov.codegen.triton_renderer import PRELUDE, render_triton
from cherenkov.config import Config
from cherenkov.ir.ops import Op
from cherenkov.ir.printer import format_graph
from cherenkov.ir.verifier import verify
from cherenkov.lowering.from_fx import graph_device, lower_fx
from cherenkov.passes.cse import eliminate_common_subexpressions
from cherenkov.passes.fusion import fuse, is_library, is_scatter
from cherenkov.passes.horizontal import ComboGroup, combine_input_casts, combine_updates
from cherenkov.passes.matmul_epilogues import fuse_matmul_epilogues
from cherenkov.passes.one_hot_sums import sum_one_hots
from cherenkov.passes.split_reductions import split_reductions
from cherenkov.passes.scale_through_matmul import scale_through_matmuls
from cherenkov.passes.widen_matmul import widen_matmuls
from cherenkov.runtime.compiled_graph import CompiledGraph
from cherenkov.runtime import graph_policy, parallel_compile, plan_choice
from cherenkov.runtime.loader import load_module
from cherenkov.runtime.schedule import plan_order
from cherenkov.runtime.triton_launch import TritonLaunch

log = logging.getLogger("cherenkov")
_graph_ids = itertools.count()


@dataclass
class CompileInfo:
    name: str
    kernels: list = field(default_factory=list)          # (name, fused ops, bytes, source)
    externs: list = field(default_factory=list)          # (op, reason)
    library_calls: dict = field(default_factory=dict)    # kind -> count
    report: object = None                                # CostReport after a profiled call
    seconds: dict = field(default_factory=dict)          # compile phase -> wall seconds
    cuda_graphs: object = None                           # graph_policy.GraphDecision
    plans_timed: dict = field(default_factory=dict)      # plan -> seconds (plan_choice.py)

    def summary(self) -> dict:
        return {
            "graph": self.name,
            "kernels": len(self.kernels),
            "fused_ops_per_kernel": [k[1] for k in self.kernels],
            "estimated_bytes_moved": sum(k[2] for k in self.kernels),
            "library_calls": self.library_calls,
            "externs": [{"op": op, "reason": reason} for op, reason in self.externs],
            "cuda_graphs": str(self.cuda_graphs),
            "plans_timed": self.plans_timed,
        }


def uses_interpreter(device: torch.device, config: Config) -> bool:
    return config.interpret or device.type != "cuda"


def compile_fx(gm: torch.fx.GraphModule, inputs: list, config: Config, name: str | None = None):
    name = name or f"graph{next(_graph_ids)}"
    clock = [time.perf_counter()]
    seconds: dict[str, float] = {}

    def lap(phase: str) -> None:
        now = time.perf_counter()
        seconds[phase] = seconds.get(phase, 0.0) + now - clock[0]
        clock[0] = now
    device = graph_device(inputs)
    # the attention kernels are Triton: on CPU they only pay off under the Triton backend
    route = config.attention == "cherenkov" and (device.type != "cpu" or config.cpu_backend
                                                 == "triton")
    graph, report = lower_fx(gm, inputs, strict=config.strict, name=name, route_attention=route)
    if config.strict:
        verify(graph)
    lowered = graph
    if device.type == "cuda" and not uses_interpreter(device, config):
        # library kernels (attention) start compiling now, while the passes run
        parallel_compile.submit(report.compile_jobs + report.later_jobs, config.compile_workers)
    lap("lower")
    graph = eliminate_common_subexpressions(graph)
    graph = sum_one_hots(graph)
    graph = widen_matmuls(graph, device)
    graph = scale_through_matmuls(graph)
    from cherenkov.hw import device_for_config
    spec = device_for_config(config.device, device)
    untemplated = graph
    graph = fuse_matmul_epilogues(graph, device, config, spec)
    cpp = device.type == "cpu" and config.cpu_backend == "cpp" and not config.interpret
    row_loops = config.row_loops and spec.kind == "gpu" and not cpp    # Triton kernels only
    info = CompileInfo(name, externs=list(report.externs), seconds=seconds)

    def planned(graph):
        """The graph fused, its kernels built, as a runnable plan."""
        if spec.kind == "gpu" and config.fusion:
            graph = split_reductions(graph, spec.sm_count, row_loops, config.row_loop_rows)
        fusion = fuse(graph, enable=config.fusion, device=spec, row_loops=row_loops)
        if config.fusion and not cpp:
            fusion = _combined(graph, fusion, config)
        lap("passes")
        if cpp:
            kernels, sources = _cpp_kernels(fusion)
            lap("kernels")
        else:
            interpret = uses_interpreter(device, config)
            pdl = config.pdl and not interpret and dependent_launch.supported(device)
            kernels, sources = _triton_kernels(fusion, interpret, spec, config.compile_workers,
                                               lap, report.compile_jobs, config.fp_contract, pdl)
        compiled = CompiledGraph(graph, fusion, kernels, device,
                                 tune_matmuls=_tuned_matmul_flop(config, spec, device))
        lap("plan")
        return graph, fusion, sources, compiled

    graph, fusion, sources, compiled = planned(graph)
    if graph is not untemplated and plan_choice.wanted(config, device) \
            and plan_choice.measurable(untemplated):
        # templates chosen region by region: the whole plan with them against the plan
        # without, on this graph's inputs (runtime/plan_choice.py)
        alternative = None
        try:
            alternative = planned(untemplated)
            best, info.plans_timed = plan_choice.faster(
                {"templates": compiled, "cuBLAS": alternative[3]}, inputs)
        except Exception as e:  # noqa: BLE001 -- a plan that fails here is not the one to keep
            log.warning("cherenkov [%s] plan choice failed (%s: %s): %s", name,
                        type(e).__name__, e, "cuBLAS plan kept" if alternative else
                        "template plan kept")
            best = "cuBLAS" if alternative is not None else "templates"
        if best == "cuBLAS":
            graph, fusion, sources, compiled = alternative
        lap("plan choice")
    for _, kernel in sources:
        info.kernels.append((kernel.name, kernel.fused_ops, kernel.bytes_moved(), kernel.source))
    for node in graph.nodes():
        if node.op in (Op.MATMUL, Op.ATTENTION, Op.RANDOM, Op.EXTERN):
            kind = node.op.name.lower()
            info.library_calls[kind] = info.library_calls.get(kind, 0) + 1
    on_cuda = device.type == "cuda"
    plan = graph_policy.PlanEstimate()
    if on_cuda and config.cuda_graphs != "off":
        try:
            plan = graph_policy.estimate(compiled, spec)
        except Exception as e:  # noqa: BLE001 -- advisory: it never costs the compiled graph
            plan.blockers.append(f"no estimate ({type(e).__name__}: {e})")
    # a training graph's forward and backward: one CUDA graph pool (cuda_graphs.PoolGroup)
    meta = getattr(gm, "meta", {})
    group = meta.get("cherenkov_pool_group")
    info.cuda_graphs = graph_policy.decide(plan, config.cuda_graphs, spec, on_cuda, device)
    log.info("cherenkov [%s] CUDA graphs %s", name, info.cuda_graphs)
    if info.cuda_graphs.measure:         # its pool share goes back with it, or if judged off
        release = graph_policy.POOLS.held_by(compiled, device, plan)
    if info.cuda_graphs.use:
        # a forward runs normally for `warmup` calls (the last one timed and judged when
        # measuring: the third, as the second checks each kernel's direct launch against
        # Triton's and is no measure of either side), runs and captures on the next and
        # replays from the one after; its backward waits two calls more, until it has seen
        # the same replay buffers twice, so the saved activations it reads are read in place
        warmup = 3 if info.cuda_graphs.measure else 1
        if group is not None and group.pooled:
            # the capture comes before the call's run: the calls before it must have made
            # each kernel's first launch and its direct-launch check (a check syncs)
            warmup = max(warmup, 2)
        judge = None
        backward = name.startswith("backward")
        if info.cuda_graphs.measure:
            def judge(host_s, device_s, info=info, release=release):
                verdict = group.verdict if group is not None else None
                info.cuda_graphs = graph_policy.judge_pair(host_s, device_s, backward, verdict)
                if group is not None and not backward:
                    group.verdict = info.cuda_graphs
                if not info.cuda_graphs.use:
                    release()
                return info.cuda_graphs
        # (pooled: the forward's capturing call is its first replay, one call sooner)
        wait = 1 if group is not None and group.pooled else 2
        compiled.use_cuda_graphs(warmup + wait if backward else warmup, judge, group,
                                 meta.get("cherenkov_caller_outputs"))
    if config.dump_dir:
        try:
            _dump(Path(config.dump_dir) / name, gm, lowered, graph, fusion, sources, info)
        except OSError as e:    # a dump that cannot be written never costs the compiled graph
            warnings.warn(f"cherenkov: dump_dir={config.dump_dir!r} not written: {e}",
                          stacklevel=2)
    if config.log_fallbacks:
        for op, reason in report.externs:
            log.warning("cherenkov [%s] extern %s: %s", name, op, reason)
    return compiled, info


@dataclass
class LaunchableKernel:
    """What the runtime needs of a generated kernel: its buffers in argument order and a
    callable taking the tensors; `source` is the rendered text (Triton or C++)."""
    name: str
    arg_names: list
    launch: object
    source: str
    fused_ops: int = 0
    kernel: object = None

    def bytes_moved(self) -> int:
        return self.kernel.bytes_moved()


def _tuned_matmul_flop(config: Config, spec, device: torch.device) -> float | None:
    """The FLOPs a matmul must do for matmul_algos to tune it (its time at the device's
    matmul rate at least matmul_algos_min_ms), or None: no matmul is tuned."""
    if not config.matmul_algos or device.type != "cuda":
        return None
    return config.matmul_algos_min_ms * 1e-3 * spec.achievable_flops(torch.bfloat16)


def _combined(graph, fusion, config):
    """`fusion` with the runs of small kernels over graph inputs its schedule launches back to
    back combined, in that schedule (passes/horizontal.py): input casts with combine_casts,
    updates written back into inputs with combine_updates."""
    updates = config.combine_updates and graph.mutations   # else no part to find: the
    if not (config.combine_casts or updates):               # plan schedules once, later
        return fusion
    order = plan_order(graph, fusion.groups, fusion.realized, fusion.views, is_library)
    if config.combine_casts:
        fusion = combine_input_casts(fusion, graph, order)
        order = fusion.schedule or order
    if updates:
        fusion = combine_updates(fusion, graph, order)
    return fusion


def _triton_kernels(fusion, interpret: bool, spec, workers: int = -1, lap=lambda phase: None,
                    library_jobs: list = (), fp_contract: bool = True, pdl: bool = False):
    """Each fused group's Triton kernel rendered, loaded and handed to the compile workers;
    `pdl`: compiled for programmatic dependent launch (codegen/dependent_launch.py)."""
    kernels, sources, jobs = {}, [], [] if interpret else list(library_jobs)
    launchers = []                    # (TritonLaunch, its job), in jobs' order after library_jobs
    for group in fusion.groups:
        if isinstance(group, ComboGroup):
            parts = []
            for part in group.parts:
                cfg = choose_blocks(part.kernel, interpret, device=spec)
                parts.append((render_triton(part.kernel, cfg), cfg.XBLOCK,
                              len(part.kernel.outputs)))
            rendered, blocks = render_combo(parts, group.kernel.name), {}
        else:
            cfg = choose_blocks(group.kernel, interpret, device=spec)
            rendered = render_triton(group.kernel, cfg)
            blocks = {"XBLOCK": cfg.XBLOCK} | ({"RBLOCK": cfg.RBLOCK} if group.R > 1 else {})
        # name the function by its text, so identical kernels (one per transformer layer)
        # share one module and Triton compiles them once
        body = rendered.source.replace(f"def {rendered.name}(", "def kernel(", 1)
        if pdl:
            body = dependent_launch.with_dependent_launch(body)
        fn_name = "k_" + hashlib.sha256(body.encode()).hexdigest()[:16]
        source = PRELUDE + "\n\n" + body.replace("def kernel(", f"def {fn_name}(", 1)
        module = load_module(source, interpret)
        fn = getattr(module, fn_name)
        if interpret:
            launcher = functools.partial(fn[(rendered.grid,)], **blocks,
                                         num_warps=rendered.num_warps)
        else:
            # FMA contraction, as Inductor's kernels and nvcc's (eager's) have it; without it
            # the compute-heavier pointwise kernels (tanh-GeLU, RoPE) issue more instructions
            options = {"num_warps": rendered.num_warps, "enable_fp_fusion": fp_contract}
            if pdl:
                options["launch_pdl"] = True
            launcher = TritonLaunch(fn, rendered.grid, tuple(blocks.values()), options,
                                    len(group.kernel.outputs), is_scatter(group))
            dtype_of = {b.name: b.dtype for b in group.kernel.inputs + group.kernel.outputs}
            jobs.append(parallel_compile.Job(
                module.__file__, module.__name__, fn_name,
                tuple(parallel_compile.tensor_arg(dtype_of[n]) for n in rendered.arg_names),
                tuple(blocks.items()) + tuple(sorted(options.items()))))
            launchers.append(launcher)
        kernels[group] = LaunchableKernel(rendered.name, rendered.arg_names, launcher,
                                          source, group.kernel.fused_ops, group.kernel)
        sources.append((group, kernels[group]))
    lap("render")
    if jobs:
        # the library kernels (attention) are waited for here; each generated kernel at its
        # own first launch, so the first run overlaps the later kernels' compiling
        pending = parallel_compile.submit_pending(jobs, workers)
        if pending is not None:
            first = len(jobs) - len(launchers)
            parallel_compile.compile_all(jobs[:first], workers)
            for launcher, future in zip(launchers, pending[first:]):
                launcher.pending = future
        lap("triton compile")
    return kernels, sources


def _cpp_kernels(fusion):
    from cherenkov.runtime.cpp_build import compile_graph_kernels
    built = compile_graph_kernels([g.kernel for g in fusion.groups])
    kernels, sources = {}, []
    for group in fusion.groups:
        k = group.kernel
        fn = built[k.name]
        kernels[group] = LaunchableKernel(k.name, [b.name for b in k.inputs + k.outputs], fn,
                                          fn.source, k.fused_ops, k)
        sources.append((group, kernels[group]))
    return kernels, sources


def _dump(folder: Path, gm, lowered, graph, fusion, sources, info: CompileInfo) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "0_fx_graph.txt").write_text(gm.print_readable(print_output=False))
    report = gm.meta.get("cherenkov_partition") if hasattr(gm, "meta") else None
    if report is not None:                   # what the recompute partitioner saved, and why
        (folder / "0_partition.txt").write_text(str(report) + "\n")
    (folder / "1_ir_lowered.txt").write_text(format_graph(lowered) + "\n")
    (folder / "2_ir_after_cse.txt").write_text(format_graph(graph) + "\n")
    lines = []
    for group, launchable in sources:
        members = ", ".join(m.op.name.lower() for m in group.members)
        lines.append(f"{launchable.name}: domain (X={group.X}, R={group.R}); realized: {members}")
        lines.append(str(group.kernel))
        lines.append("")
        suffix = "cpp" if "extern \"C\"" in launchable.source else "py"
        (folder / f"kernel_{launchable.name}.{suffix}").write_text(launchable.source)
    (folder / "3_kernels.txt").write_text("\n".join(lines))
    (folder / "summary.json").write_text(json.dumps(info.summary(), indent=2) + "\n")
