"""The planner's cost adapter: achievable (not datasheet) rates, flash attention at its measured
rate, and a one-device simulation whose step time and breakdown add up, op by op, to a hand
roofline of the layer graphs."""
import pytest

from cherenkov.hw import cluster
from cherenkov.models import ModelConfig
from cherenkov.parallel.layer_graph import (causal_tile_overhead, embedding_graph, head_graph,
                                            layer_graph)
from cherenkov.planner.costs import (BANDWIDTH_EFFICIENCY, MATMUL_EFFICIENCY,
                                     MEMORY_BOUND_EFFICIENCY, ClusterCosts,
                                     flash_attention_efficiency)
from cherenkov.planner.program import OPTIMIZER_BYTES_MOVED
from cherenkov.planner.result import simulate_plan
from cherenkov.planner.search import Planner, Request
from cherenkov.planner.plan import Choice

TINY = ModelConfig("llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=192, vocab=256,
                   seq=64, name="tiny-llama")


def test_unmeasured_preset_runs_at_the_typical_fraction_of_its_datasheet():
    dev = cluster("8xH100").device
    c = ClusterCosts(cluster("8xH100"))
    assert not dev.measured_flops and dev.measured_copy_bandwidth is None
    assert c.matmul_rate == pytest.approx(MATMUL_EFFICIENCY * 989.5e12)
    assert c.bandwidth == pytest.approx(BANDWIDTH_EFFICIENCY * 3.35e12)
    # 1 TFLOP of matmul, negligible bytes: 1e12 / (0.79 * 989.5e12) + launch.
    assert c.kernel(1e12, 1.0, True) == pytest.approx(1e12 / c.matmul_rate + dev.launch_overhead_s)


def test_measured_figures_win_over_the_typical_fraction():
    c = ClusterCosts(cluster("1xH200"))
    assert c.matmul_rate == 780e12 and c.bandwidth == 4.22e12
    # a memory-bound kernel at the measured fraction of copy bandwidth, a matmul's bytes at copy
    assert c.kernel(0.0, 4.22e9, False) == pytest.approx(1e-3 / MEMORY_BOUND_EFFICIENCY + 4e-6)
    assert c.kernel(0.0, 4.22e9, True) == pytest.approx(1e-3 + 4e-6)
    assert 0.3 < MEMORY_BOUND_EFFICIENCY < 1


def test_attention_runs_at_the_flash_fraction_of_the_matmul_rate():
    for d in (64, 128):
        c = ClusterCosts(cluster("1xH200"), head_dim=d)
        eff = flash_attention_efficiency(d)
        assert 0.25 < eff < 0.5
        t = c.kernel(1e12, 1.0, True, "attention") - 4e-6
        assert t == pytest.approx(1e12 / (eff * 780e12))
        assert c.kernel(1e12, 1.0, True, "matmul") < c.kernel(1e12, 1.0, True, "attention")
    assert causal_tile_overhead(1024) == 1.125 and causal_tile_overhead(64) == 2.0


def _hand_op_seconds(op, head_dim):
    """Roofline of one op's forward + backward on our H200, written out by hand."""
    rate = {"matmul": 780e12, "attention": 780e12 * flash_attention_efficiency(head_dim)}.get(
        op.kind, 67e12)  # not on tensor cores: the fp32 vector rate (datasheet, unmeasured)
    bwd_flops = {"matmul": 2.0, "attention": 2.5}.get(op.kind, 2.0)
    bwd_bytes = 1.0 if op.kind == "cross_entropy" else 2.0
    bandwidth = 4.22e12 * (1.0 if op.kind in ("matmul", "attention") else MEMORY_BOUND_EFFICIENCY)
    fwd = max(op.flops / rate, op.bytes / bandwidth) + 4e-6
    bwd = max(bwd_flops * op.flops / rate, bwd_bytes * op.bytes / bandwidth) + 4e-6
    return fwd, bwd


def test_one_device_step_is_the_sum_of_its_kernels_and_the_optimizer():
    b, s = 2, 64
    req = Request(TINY, cluster("1xH200"), b, s)
    planner = Planner(req)
    plan = planner.make_plan(Choice(1, 1, 1, 1, 0, b, 1, "1f1b", 1, "none"))
    pred = simulate_plan(plan)
    graphs = {"embed": embedding_graph(TINY, b, s), "layer": layer_graph(TINY, b, s),
              "head": head_graph(TINY, b, s)}
    fwd = {k: sum(_hand_op_seconds(op, TINY.head_dim)[0] for op in g.ops) for k, g in graphs.items()}
    bwd = {k: sum(_hand_op_seconds(op, TINY.head_dim)[1] for op in g.ops) for k, g in graphs.items()}
    model = sum(fwd[k] + bwd[k] for k in ("embed", "head")) + TINY.layers * (
        fwd["layer"] + bwd["layer"])
    params = sum(g.param_count for g in graphs.values()) + (TINY.layers - 1) * graphs["layer"].param_count
    optimizer = OPTIMIZER_BYTES_MOVED * params / (4.22e12 * MEMORY_BOUND_EFFICIENCY) + 4e-6
    assert pred.step_time_s == pytest.approx(model + optimizer, rel=1e-9)
    bd = pred.breakdown
    assert bd["compute"] == pytest.approx(model, rel=1e-9)
    assert bd["other"] == pytest.approx(optimizer, rel=1e-9)
    assert bd["exposed_comm"] == 0.0 and bd["bubble"] == 0.0
    assert sum(bd.values()) == pytest.approx(pred.step_time_s, rel=1e-9)
    # Kernels at achievable rates: MFU against the datasheet stays below 780/989.5.
    assert 0 < pred.mfu < MATMUL_EFFICIENCY
