"""The CUDA-graph wrapper's liveness check, on CPU tensors (capture itself needs a GPU:
tests/gpu/test_cuda.py)."""
import torch

from cherenkov.runtime.cuda_graphs import storage_uses


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


class _FakeGraph:
    """Stands in for torch.cuda.CUDAGraph on the CPU: what runs while capturing is recorded,
    not applied, and applied on each replay (as a real capture and replay would)."""
    capturing = None

    def __init__(self):
        self.recorded = []

    def replay(self):
        for fn in self.recorded:
            fn()


class _Capture:
    def __init__(self, graph):
        self.graph = graph

    def __enter__(self):
        _FakeGraph.capturing = self.graph

    def __exit__(self, *exc):
        _FakeGraph.capturing = None


def test_each_call_runs_the_plan_once_including_the_capturing_call(monkeypatch):
    """A plan that adds its input into a state tensor in place: after n calls through the
    graphed wrapper (warm-up, capture, replays, a moved input) the state holds n additions."""
    from cherenkov.runtime import cuda_graphs
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", _Capture)
    state = torch.zeros(3)

    def run_plan(inputs):
        x, s = inputs
        out = torch.empty(3)

        def apply():
            s.add_(x)
            out.copy_(s)
        if _FakeGraph.capturing is not None:
            _FakeGraph.capturing.recorded.append(apply)
        else:
            apply()
        inputs.clear()
        return [out]

    plan = cuda_graphs.GraphedPlan(run_plan, "step", warmup=1)
    total = torch.zeros(3)
    for i in range(6):
        x = torch.full((3,), float(i + 1))
        total += x
        out, = plan([x, state])
        torch.testing.assert_close(state, total)
        torch.testing.assert_close(out, total)
        del out
    assert plan.graph is not None and plan.captures == 1 and not plan.disabled
    assert plan.static_slots == [False, True]     # x copied in, the state read in place
