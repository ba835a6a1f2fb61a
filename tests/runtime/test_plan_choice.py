"""runtime/plan_choice.py: with autotune on, a graph whose matmul epilogues were chosen as
templates is also planned without them, both plans are timed on its inputs and the faster
runs. On CPU the tuning verdict, the CUDA gate and the clock are stood in for."""
import os

import pytest
import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.ir.graph import Graph, Node, TensorMeta
from cherenkov.ir.ops import Op
from cherenkov.passes import matmul_epilogues
from cherenkov.runtime import plan_choice
from cherenkov.templates import epilogue_tuning
from cherenkov.templates.fused_epilogue import FusedMatmul
from cherenkov.templates.tile_config import interpreter_config

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="Triton kernels on CPU need TRITON_INTERPRET=1")


def test_faster_takes_the_quicker_plan_and_the_first_on_a_tie():
    times = {"a": 2.0, "b": 1.0, "c": 1.0}
    best, seconds = plan_choice.faster({k: k for k in times}, [], timer=lambda p, i: times[p])
    assert best == "b" and seconds == times
    best, _ = plan_choice.faster({"x": 1, "y": 2}, [], timer=lambda p, i: 1.0)
    assert best == "x"


def test_only_graphs_without_side_effects_are_run_twice():
    meta = TensorMeta((4,), torch.float32, torch.device("cpu"))
    x = Node(Op.INPUT, (), (0,), meta)
    y = Node(Op.EXP, (x,), (), meta)
    assert plan_choice.measurable(Graph([x], [y]))
    assert not plan_choice.measurable(Graph([x], [y], mutations=[(0, 0)]))
    drop = Node(Op.RANDOM, (x,), (torch.ops.aten.rand_like.default, (), {}, ""), meta)
    assert not plan_choice.measurable(Graph([x], [drop]))
    cfg = cherenkov.config.Config
    assert not plan_choice.wanted(cfg(autotune=True), torch.device("cpu"))
    assert not plan_choice.wanted(cfg(), torch.device("cuda"))
    assert plan_choice.wanted(cfg(autotune=True), torch.device("cuda"))
    assert not plan_choice.wanted(cfg(autotune=True, matmul_templates="on"),
                                  torch.device("cuda"))


def _fused(plan) -> int:
    return sum(isinstance(n.args[0], FusedMatmul) for n in plan.graph.nodes()
               if n.op is Op.MATMUL)


@pytest.mark.parametrize("templates_faster", [True, False])
def test_the_faster_whole_plan_runs(monkeypatch, templates_faster):
    monkeypatch.setattr(matmul_epilogues, "applies", lambda config, device: True)
    monkeypatch.setattr(epilogue_tuning, "choose",
                        lambda ep, config, spec, device: interpreter_config(ep.M, ep.N, ep.K))
    monkeypatch.setattr(plan_choice, "wanted", lambda config, device: True)
    timed = []

    def clock(plan, inputs):
        timed.append(_fused(plan))
        return 1.0 if (_fused(plan) > 0) == templates_faster else 2.0
    monkeypatch.setattr(plan_choice, "time_plan", clock)

    def f(x, w, r):
        return torch.relu(x @ w) + r

    x, w, r = torch.randn(40, 24), torch.randn(24, 48), torch.randn(40, 48)
    start = len(COMPILED)
    got = cherenkov.compile(f, autotune=True, strict=True)(x, w, r)
    torch.testing.assert_close(got, f(x, w, r), rtol=1e-5, atol=1e-5)
    (g, info), = COMPILED[start:]
    plan = next(iter(g.cache.values()))
    assert sorted(timed) == [0, 1] and set(info.plans_timed) == {"templates", "cuBLAS"}
    assert _fused(plan) == (1 if templates_faster else 0)


def test_seeded_ops_and_attention_dropout_are_side_effects():
    """Random numbers drawn outside Op.RANDOM (an extern poisson; an attention op with
    dropout_p > 0) make a graph unmeasurable: 26 extra runs would move the generator."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from cherenkov.lowering.from_fx import lower_fx
    from cherenkov.lowering.library import Slot
    rates = torch.rand(8) * 5
    gm = make_fx(lambda r: torch.poisson(r) + 1.0)(rates)
    graph, _ = lower_fx(gm, [rates], strict=True, name="g")
    assert not plan_choice.measurable(graph)
    meta = TensorMeta((1, 2, 16, 8), torch.float16, torch.device("cuda"))
    q = Node(Op.INPUT, (), (0,), meta)
    flash = torch.ops.aten._scaled_dot_product_flash_attention.default
    for p, ok in ((0.0, True), (0.1, False)):
        node = Node(Op.ATTENTION, (q, q, q), (flash, (Slot(0), Slot(1), Slot(2), p), {}, ""),
                    (meta,))
        out = Node(Op.GETITEM, (node,), (0,), meta)
        assert plan_choice.measurable(Graph([q], [out])) is ok


def test_a_plan_that_fails_while_timed_leaves_the_other(monkeypatch):
    monkeypatch.setattr(matmul_epilogues, "applies", lambda config, device: True)
    monkeypatch.setattr(epilogue_tuning, "choose",
                        lambda ep, config, spec, device: interpreter_config(ep.M, ep.N, ep.K))
    monkeypatch.setattr(plan_choice, "wanted", lambda config, device: True)

    def broken(plan, inputs):
        if _fused(plan):
            raise RuntimeError("out of memory")
        return 1.0
    monkeypatch.setattr(plan_choice, "time_plan", broken)

    def f(x, w):
        return torch.relu(x @ w)

    x, w = torch.randn(40, 24), torch.randn(24, 48)
    start = len(COMPILED)
    got = cherenkov.compile(f, autotune=True, strict=True)(x, w)
    torch.testing.assert_close(got, f(x, w))
    (g, info), = COMPILED[start:]
    assert _fused(next(iter(g.cache.values()))) == 0
