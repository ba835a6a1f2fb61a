"""A compiled graph's cost report: each generated kernel's predicted time (the cost model's
roofline for its FLOPs and bytes) and, after a profiled call, its measured time beside it.

    cherenkov.profile_next_call()      # the next call of every compiled graph is timed
    loss = model(x); loss.backward()
    for name, report in cherenkov.cost_reports().items():
        print(name); print(report)
"""
from __future__ import annotations

import time

import torch

from cherenkov.cost import CostReport
from cherenkov.cost.ops import kernel_cost


def predicted_report(compiled, device_spec) -> CostReport:
    report = CostReport()
    for step in compiled.steps:
        kernel = getattr(step, "kernel", None)
        if kernel is not None:
            report.add(step.label, kernel_cost(device_spec, kernel.flops(), kernel.bytes_moved()))
    return report


def profiled_run(compiled, inputs: list, report: CostReport) -> list:
    """Run the plan once, timing every kernel step (CUDA events on GPUs, the host clock on
    CPUs), and fill the measured column of `report`."""
    cuda = compiled.device.type == "cuda"
    compiled.bind_stream()
    env = list(inputs) + [None] * (len(compiled.slot) - compiled.n_inputs)
    marks = []
    for step in compiled.steps:
        if cuda and getattr(step, "kernel", None) is not None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step.run(env)
            end.record()
            marks.append((step.label, start, end))
        elif getattr(step, "kernel", None) is not None:
            t0 = time.perf_counter()
            step.run(env)
            marks.append((step.label, t0, time.perf_counter()))
        else:
            step.run(env)
        for s in step.frees:
            env[s] = None
    if cuda:
        torch.cuda.synchronize()
    for label, a, b in marks:
        seconds = a.elapsed_time(b) / 1e3 if cuda else b - a
        report.measure(label, seconds)
    outs = [compiled.graph.scalar_outputs.get(i) if s is None else env[s]
            for i, s in enumerate(compiled.output_slots)]
    return compiled.apply_mutations([inputs[i] for i, _ in compiled.graph.mutations], outs)
