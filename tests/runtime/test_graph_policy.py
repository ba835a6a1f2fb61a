"""The CUDA-graph policy (runtime/graph_policy.py): which plans replay through a CUDA graph by
default. Plans are compiled on the CPU and judged as if for a GPU from the hardware presets."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import cherenkov
from cherenkov import hw
from cherenkov.compiler import compile_fx
from cherenkov.config import Config
from cherenkov.lowering.library import library_node
from cherenkov.runtime import graph_policy
from cherenkov.runtime.graph_policy import (MAX_AUTO_WRITTEN_INPUTS, GraphDecision,
                                            PlanEstimate, decide, estimate, judge)

H200 = hw.device("h200")


def _plan(fn, *inputs):
    compiled, info = compile_fx(make_fx(fn)(*inputs), list(inputs), Config(strict=True))
    return compiled, info


def test_a_small_capturable_graph_is_measured_then_judged():
    compiled, _ = _plan(lambda x, w: torch.relu(x @ w).sum(-1) * 2, torch.randn(8, 64),
                        torch.randn(64, 64))
    plan = estimate(compiled, H200)
    assert plan.launches >= 2 and not plan.blockers
    assert plan.host_s == pytest.approx(plan.launches * H200.launch_overhead_s, rel=0.5)
    assert 0 < plan.device_s < plan.host_s          # the roofline also calls it launch-bound
    assert plan.pool_bytes > 0
    decision = decide(plan, "auto", H200, on_cuda=True)
    assert decision.use and decision.measure and str(decision).startswith("measuring: ")


def test_the_measured_verdict():
    on = judge(host_s=40e-6, device_s=50e-6)
    assert on.use and not on.measure and "launch-bound" in on.reason
    off = judge(host_s=1e-3, device_s=10e-3)
    assert not off.use and "GPU-bound" in off.reason
    edge = graph_policy.HOST_FRACTION
    assert judge(edge * 1e-3, 1e-3).use and not judge(edge * 0.99e-3, 1e-3).use


def test_a_small_plan_short_of_the_fraction_by_a_launch_latency_is_launch_bound():
    # a 2-kernel plan on the H200 (tests/gpu): host 77 us vs GPU 104 us from idle, 0.74
    assert judge(host_s=77e-6, device_s=104e-6).use
    slack = graph_policy.LATENCY_SLACK_S
    assert judge(100e-6, 100e-6 + 0.9 * slack).use and not judge(100e-6, 100e-6 + 1.5 * slack).use


def test_predicted_gpu_time_counts_matmul_flops():
    small, _ = _plan(lambda x, w: x @ w, torch.randn(16, 32), torch.randn(32, 16))
    big, _ = _plan(lambda x, w: x @ w, torch.randn(256, 512), torch.randn(512, 256))
    slow = H200.replace(peak_flops={k: v * 1e-6 for k, v in H200.peak_flops.items()},
                        measured_flops={})
    t_small, t_big = estimate(small, slow).device_s, estimate(big, slow).device_s
    # 2 * 256 * 256 * 512 vs 2 * 16 * 16 * 32 FLOPs: 4096x, compute-bound on the slow device
    assert t_big / t_small == pytest.approx(4096, rel=0.05)


def test_working_set_over_the_pool_share_keeps_a_plan_off():
    compiled, _ = _plan(lambda x: (x * 2).exp().sum(), torch.randn(64, 64))
    plan = estimate(compiled, H200)
    tiny = H200.replace(memory_bytes=plan.pool_bytes / graph_policy.POOL_FRACTION / 2)
    decision = decide(plan, "auto", tiny, True)
    assert not decision.use and "reserved" in decision.reason
    assert decide(plan, "on", tiny, True).use          # asked for: graphed anyway


def test_modes_and_devices():
    plan = PlanEstimate(host_s=1e-4, device_s=1e-6, pool_bytes=1, launches=20)
    assert decide(plan, "off", H200, True) == GraphDecision(False, "cuda_graphs='off'")
    assert not decide(plan, "auto", H200, on_cuda=False).use
    assert not decide(plan, "on", H200, on_cuda=False).use
    busy = PlanEstimate(host_s=1e-5, device_s=1e-3, pool_bytes=1, launches=2)
    assert decide(busy, "on", H200, True) == GraphDecision(True, decide(busy, "on", H200,
                                                                        True).reason)
    assert decide(busy, "auto", H200, True).measure       # auto: the measurement decides


def _with_library_step(compiled, node):
    step = type(compiled.steps[0])("library", lambda env: None, "extra")
    step.node, step.out_slots = node, []
    compiled.steps.append(step)
    return compiled


def test_host_synchronizing_ops_and_host_outputs_block_capture_even_when_asked():
    compiled, _ = _plan(lambda x: x * 2, torch.randn(8))
    x = next(iter(compiled.slot))
    nonzero = library_node(torch.ops.aten.nonzero.default, (x,), {},
                           torch.empty(3, 1, dtype=torch.long))
    plan = estimate(_with_library_step(compiled, nonzero), H200)
    assert any("nonzero" in b for b in plan.blockers)
    for mode in ("auto", "on"):
        decision = decide(plan, mode, H200, True)
        assert not decision.use and "cannot capture" in decision.reason

    compiled, _ = _plan(lambda x: x * 2, torch.randn(8))
    x = next(iter(compiled.slot))
    # (the plan is on the CPU here, so an output on the meta device stands for a host copy)
    to_host = library_node(torch.ops.aten._to_copy.default, (x,), {"device": "meta"},
                           torch.empty(8, device="meta"))
    plan = estimate(_with_library_step(compiled, to_host), H200)
    assert any("another device" in b for b in plan.blockers)


@pytest.mark.parametrize("given,mode", [(True, "on"), (False, "off"), ("auto", "auto"),
                                        ("1", "on"), ("off", "off"), (" Auto ", "auto")])
def test_config_spellings(given, mode):
    assert Config(cuda_graphs=given).cuda_graphs == mode


def test_config_rejects_other_modes_and_reads_the_environment():
    with pytest.raises(ValueError, match="cuda_graphs"):
        Config(cuda_graphs="sometimes")
    assert Config().cuda_graphs == "auto"
    assert Config.from_env({"CHERENKOV_CUDA_GRAPHS": "0"}).cuda_graphs == "off"
    assert Config.from_env({"CHERENKOV_CUDA_GRAPHS": "auto"}).cuda_graphs == "auto"


def test_cpu_plans_record_why_they_are_not_graphed():
    from cherenkov.backend import COMPILED
    fn = lambda x: (x * 2).sigmoid().sum(-1)  # noqa: E731
    compiled = cherenkov.compile(fn, strict=True)
    x = torch.randn(4, 6)
    torch.testing.assert_close(compiled(x), fn(x))
    _, info = COMPILED[-1]
    assert info.cuda_graphs == GraphDecision(False, "not on a CUDA device")
    assert info.summary()["cuda_graphs"].startswith("off: ")


def test_a_device_without_a_rate_for_the_dtype_is_estimated_by_bytes():
    """float64 matmuls on a device whose spec lists no fp64 rate: no error, bytes only."""
    compiled, _ = _plan(lambda a, b: a @ b, torch.randn(32, 32, dtype=torch.float64),
                        torch.randn(32, 32, dtype=torch.float64))
    no_fp64 = H200.replace(peak_flops={k: v for k, v in H200.peak_flops.items()
                                       if not k.startswith("fp64")},
                           measured_flops={})
    plan = estimate(compiled, no_fp64)
    assert plan.device_s > 0 and not plan.blockers


def test_auto_plans_share_one_pool_budget_per_device():
    """Measured plans take their pool's share (rounded to the allocator's 2 MiB segments);
    past TOTAL_FRACTION of device memory further plans stay ungraphed until shares return."""
    pools = graph_policy.PoolBudget()
    small = H200.replace(memory_bytes=100 * 2**20)          # 5% = 5 MiB: two 2 MiB shares
    plan = PlanEstimate(host_s=1e-4, device_s=1e-5, pool_bytes=1000, launches=5)
    assert pools.share(plan) == 2 << 20
    first = decide(plan, "auto", small, True, "cuda:0", pools)
    second = decide(plan, "auto", small, True, "cuda:0", pools)
    third = decide(plan, "auto", small, True, "cuda:0", pools)
    assert first.measure and second.measure
    assert not third.use and "graph pools already hold 4 MiB" in third.reason
    assert decide(plan, "auto", small, True, "cuda:1", pools).measure   # another device
    assert decide(plan, "on", small, True, "cuda:0", pools).use         # asked for: no cap
    pools.give_back("cuda:0", pools.share(plan))
    assert decide(plan, "auto", small, True, "cuda:0", pools).measure
    assert pools.reserved["cuda:0"] == 4 << 20


def test_a_training_backward_well_ahead_of_its_host_is_not_graphed():
    # GPT-2's backward on the H200 at 2cfa4ab: the host issued it in 55% of the GPU's time;
    # graphed, it held 1.3 GB more and ran no faster
    assert not judge(host_s=9956e-6, device_s=18195e-6).use
    # the overhead suite's graphed plans (host 126 us vs GPU 144, 559 vs 612) still are
    assert judge(host_s=126e-6, device_s=144e-6).use and judge(559e-6, 612e-6).use


def test_a_backward_follows_its_graphed_forward():
    from cherenkov.runtime.graph_policy import GraphDecision, judge_pair
    graphed, not_graphed = GraphDecision(True, "launch-bound"), GraphDecision(False, "GPU-bound")
    assert judge_pair(1e-3, 19e-3, True, graphed).use                 # GPU-bound, follows
    assert not judge_pair(1e-3, 19e-3, True, not_graphed).use
    assert judge_pair(9e-3, 10e-3, True, not_graphed).use             # launch-bound itself
    assert not judge_pair(1e-3, 19e-3, False, graphed).use            # a forward: judged
    # a training pair is held to the working-set limits like any plan (c9a07cd graphed
    # GPT-2's past them: 1.6x torch.compile's peak memory, no faster)
    plan = PlanEstimate(host_s=1e-3, device_s=10e-3, pool_bytes=int(0.2 * H200.memory_bytes),
                        launches=400)
    assert not decide(plan, "auto", H200, on_cuda=True).use


def _functional_plan(fn, *inputs):
    """As captured: in-place updates of inputs as copy_ into them at the end."""
    gm = make_fx(torch.func.functionalize(fn, remove="mutations_and_views"))(*inputs)
    return compile_fx(gm, list(inputs), Config(strict=True))


def test_auto_leaves_a_plan_updating_many_inputs_ungraphed():
    """An optimizer step updates all its state in place: auto mode does not graph it (a graph
    copies its new gradients in on every replay); 'on' still does, and a plan updating one
    input (a running statistic) is still measured."""
    def step(*ts):
        for p, g in zip(ts[0::2], ts[1::2]):
            p.add_(g, alpha=-0.1)
    tensors = [torch.randn(16) for _ in range(2 * (MAX_AUTO_WRITTEN_INPUTS + 1))]
    compiled, _ = _functional_plan(step, *tensors)
    plan = estimate(compiled, H200)
    assert plan.writes_inputs == MAX_AUTO_WRITTEN_INPUTS + 1
    decision = decide(plan, "auto", H200, on_cuda=True)
    assert not decision.use and "optimizer step" in decision.reason
    assert decide(plan, "on", H200, on_cuda=True).use
    compiled, _ = _functional_plan(lambda x, stat: stat.mul_(0.9).add_(x.sum(0)),
                                   torch.randn(4, 8), torch.zeros(8))
    one = estimate(compiled, H200)
    assert one.writes_inputs == 1 and decide(one, "auto", H200, on_cuda=True).measure
