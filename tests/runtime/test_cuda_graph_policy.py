"""The CUDA-graph wrapper for one plan (its liveness check, its run-once and timed-judgement
protocols with a stand-in graph), on CPU tensors (capture itself needs a GPU:
tests/gpu/test_cuda.py). Plans sharing a pool: test_cuda_graph_pools.py."""
import pytest
import torch

from cherenkov.runtime.cuda_graphs import storage_uses
from tests.runtime.cuda_graph_fakes import FakeEvent, FakeGraph, add_calls, adding_plan, fake_cuda


def test_storage_uses_sees_views_and_holders_come_and_go():
    t = torch.empty(8)
    base = storage_uses([t])
    view = t[2:]
    assert storage_uses([t]) != base
    del view
    assert storage_uses([t]) == base
    other = torch.empty(8)
    assert storage_uses([t, other]) == base + storage_uses([other])


def test_an_alias_handed_out_counts_as_a_holder():
    """The wrapper returns detached aliases of its buffers: holding one must show up."""
    t = torch.empty(8)
    base = storage_uses([t])
    handed = t.detach()
    assert not handed._is_view() and storage_uses([t]) != base
    del handed
    assert storage_uses([t]) == base


@pytest.mark.parametrize("gpu_ms,graphed", [(1e-6, True), (1e6, False)])
def test_the_last_warm_up_call_is_timed_and_judged(monkeypatch, gpu_ms, graphed):
    """Launch-bound (the GPU took next to nothing next to the host's issue time): captured
    after the timed call. GPU-bound: never captured. Either way every call runs once."""
    from cherenkov.runtime import cuda_graphs, graph_policy
    fake_cuda(monkeypatch)
    monkeypatch.setattr(FakeEvent, "gpu_ms", gpu_ms)
    state, total = torch.zeros(3), torch.zeros(3)
    plan = cuda_graphs.GraphedPlan(adding_plan(state), "fwd", warmup=2, judge=graph_policy.judge)
    for i in range(5):
        x = torch.full((3,), float(i + 1))
        total += x
        out, = plan([x, state])
        torch.testing.assert_close(state, total)
        del out
        if i == 0:
            assert plan.verdict is None
    assert plan.verdict.use == graphed
    assert (plan.graph is not None) == graphed and plan.disabled == (not graphed)


def test_each_call_runs_the_plan_once_including_the_capturing_call(monkeypatch):
    """A plan that adds its input into a state tensor in place: after n calls through the
    graphed wrapper (warm-up, capture, replays, a moved input) the state holds n additions."""
    from cherenkov.runtime import cuda_graphs
    fake_cuda(monkeypatch)
    state = torch.zeros(3)

    plan = cuda_graphs.GraphedPlan(adding_plan(state), "step", warmup=1)
    add_calls(plan, state, 6)
    assert plan.graph is not None and plan.captures == 1 and not plan.disabled
    assert plan.static_slots == [False, True]     # x copied in, the state read in place


def _plan_with_views(state):
    """Adds x into `state` in place; returns its own sum, a view of `state` (an input read in
    place) and a view of x (an input copied in on replays)."""
    def run_plan(inputs):
        x, s = inputs
        out = torch.empty(3)

        def apply():
            s.add_(x)
            out.copy_(s * 2)
        if FakeGraph.capturing is not None:
            FakeGraph.capturing.recorded.append(apply)
        else:
            apply()
        inputs.clear()
        return [out, s[:2], x[1:]]
    return run_plan


def test_outputs_on_the_callers_inputs_do_not_stop_replays(monkeypatch):
    """An output viewing an input read in place (a forward's saved `x.t()`) is the caller's
    own tensor: every call after the capture replays. An output viewing an input that is
    copied in, held across a call, is never overwritten (that call runs without the graph)."""
    from cherenkov.runtime import cuda_graphs
    fake_cuda(monkeypatch)
    monkeypatch.setattr(FakeGraph, "replays", 0)
    state, total = torch.zeros(3), torch.zeros(3)
    plan = cuda_graphs.GraphedPlan(_plan_with_views(state), "fwd", warmup=1)
    for i in range(6):
        x = torch.full((3,), float(i + 1))
        total += x
        out, head, tail = plan([x, state])
        torch.testing.assert_close(out, total * 2)
        torch.testing.assert_close(head, total[:2])
        torch.testing.assert_close(tail, x[1:])
        del out, head, tail
    assert FakeGraph.replays == 4                  # calls 3..6 (call 2 captures)
    x = torch.full((3,), 10.0)
    _, _, held = plan([x, state])
    plan([torch.full((3,), 20.0), state])
    torch.testing.assert_close(held, x[1:])         # not overwritten by the next call's copy
    assert FakeGraph.replays == 5


def test_overlap_check_tells_slices_from_broadcasts():
    from cherenkov.runtime.cuda_graphs import _overlapping
    b = torch.zeros(5, 8)
    assert not _overlapping(b) and not _overlapping(b[:, :4]) and not _overlapping(b[:, ::2])
    assert not _overlapping(b.t()[1:]) and not _overlapping(b[1:3, 2:7])
    assert _overlapping(torch.zeros(3).expand(4, 3))
    assert _overlapping(torch.zeros(9).as_strided((3, 3), (1, 1)))


def test_a_moving_input_far_into_its_storage_is_not_captured(monkeypatch):
    """A copied input's buffer keeps its storage offset (the plan indexes from the storage
    start): an input far into a big storage would cost all of it again, so no capture."""
    from cherenkov.runtime import cuda_graphs
    fake_cuda(monkeypatch)
    monkeypatch.setattr(cuda_graphs, "MAX_OFFSET_WASTE", 1024)
    state = torch.zeros(3)
    plan = cuda_graphs.GraphedPlan(adding_plan(state), "fwd", warmup=1)
    for i in range(3):
        big = torch.zeros(4096)
        x = big[4000:4003]                          # 16 kB into its storage, 12 bytes long
        x += i + 1
        out, = plan([x, state])
        torch.testing.assert_close(state, torch.full((3,), float(sum(range(1, i + 2)))))
        del out
    assert plan.disabled and plan.graph is None
