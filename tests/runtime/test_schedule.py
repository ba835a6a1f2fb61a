"""Execution order and memory: a backward run in the depth-first node order computes every
layer's input gradient first and every weight gradient after, keeping each layer's output
gradient alive across the whole backward; the memory-greedy order runs a weight gradient as
soon as it can free them. The plan keeps the order with the lower replayed peak."""
import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.runtime.memory_plan import live_bytes


def _backward_plan(layers: int):
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(64, 64, bias=False), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks)
    x = torch.randn(256, 64)
    start = len(COMPILED)
    compiled = cherenkov.compile(model, strict=True, dynamic=False)
    out = compiled(x)
    out.square().mean().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().mean().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)
    plans = [cg for sp, _ in COMPILED[start:] if sp is not None for cg in sp.cache.values()
             if cg.graph.name.startswith("backward")]
    assert len(plans) == 1
    return plans[0]


def test_backward_runs_weight_gradients_as_soon_as_they_free_memory():
    plan = _backward_plan(layers=6)
    peaks = plan.schedule.peaks
    assert plan.schedule.chosen == "memory-greedy", peaks
    assert peaks["memory-greedy"] < peaks["depth-first"]
    # replayed on the runtime's own steps and frees: after the first step, never more alive
    # than at the start plus one layer's worth (activation gradient + weight gradient)
    timeline = live_bytes(plan)
    one_layer = 256 * 64 * 4 + 64 * 64 * 4
    assert max(timeline[1:]) <= timeline[0] + 2 * one_layer, timeline
