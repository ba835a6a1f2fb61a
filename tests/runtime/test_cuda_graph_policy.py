"""The CUDA-graph wrapper (its liveness check, its run-once and timed-judgement protocols with a
stand-in graph), on CPU tensors (capture itself needs a GPU:
tests/gpu/test_cuda.py)."""
import pytest
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

    replays = 0

    def replay(self):
        _FakeGraph.replays += 1
        for fn in self.recorded:
            fn()


class _FakeStream:
    """Stands in for torch.cuda.Stream: `current` is the stream work is issued on."""
    current = None

    def __init__(self, device=None):
        self.waits = []

    def wait_stream(self, other):
        self.waits.append(other)


class _OnStream:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        self.before, _FakeStream.current = _FakeStream.current, self.stream

    def __exit__(self, *exc):
        _FakeStream.current = self.before


class _Capture:
    def __init__(self, graph, pool=None, stream=None):
        self.graph = graph
        self.pool = pool
        self.stream = stream
        _Capture.streams.append(stream)

    streams: list = []          # the stream each capture was asked to run on

    pools = None                # the _FakePools a capture into a pool counts in, if any

    def __enter__(self):
        if self.pool is not None and _Capture.pools is not None:
            _Capture.pools.begin(0, self.pool)
        _FakeGraph.capturing = self.graph

    def __exit__(self, *exc):
        _FakeGraph.capturing = None


class _FakeEvent:
    gpu_ms = 1.0            # what every timed run "took" on the GPU

    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return _FakeEvent.gpu_ms


def _fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", _Capture)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(_Capture, "pools", None)
    monkeypatch.setattr(_Capture, "streams", [])
    default = _FakeStream()
    monkeypatch.setattr(_FakeStream, "current", default)
    monkeypatch.setattr(torch.cuda, "Stream", _FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", _OnStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _FakeStream.current)
    _fake_pool_routing(monkeypatch)


def _adding_plan(state):
    """A plan adding its input into `state` in place (applied on replay when captured)."""
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
    return run_plan


@pytest.mark.parametrize("gpu_ms,graphed", [(1e-6, True), (1e6, False)])
def test_the_last_warm_up_call_is_timed_and_judged(monkeypatch, gpu_ms, graphed):
    """Launch-bound (the GPU took next to nothing next to the host's issue time): captured
    after the timed call. GPU-bound: never captured. Either way every call runs once."""
    from cherenkov.runtime import cuda_graphs, graph_policy
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(_FakeEvent, "gpu_ms", gpu_ms)
    state, total = torch.zeros(3), torch.zeros(3)
    plan = cuda_graphs.GraphedPlan(_adding_plan(state), "fwd", warmup=2, judge=graph_policy.judge)
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


def _add_calls(plan, state, calls: int) -> None:
    """Call an `_adding_plan` `calls` times: after each, the state holds every addition once."""
    total = torch.zeros(3)
    for i in range(calls):
        x = torch.full((3,), float(i + 1))
        total += x
        out, = plan([x, state])
        torch.testing.assert_close(state, total)
        torch.testing.assert_close(out, total)
        del out


def test_each_call_runs_the_plan_once_including_the_capturing_call(monkeypatch):
    """A plan that adds its input into a state tensor in place: after n calls through the
    graphed wrapper (warm-up, capture, replays, a moved input) the state holds n additions."""
    from cherenkov.runtime import cuda_graphs
    _fake_cuda(monkeypatch)
    state = torch.zeros(3)

    plan = cuda_graphs.GraphedPlan(_adding_plan(state), "step", warmup=1)
    _add_calls(plan, state, 6)
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
        if _FakeGraph.capturing is not None:
            _FakeGraph.capturing.recorded.append(apply)
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
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(_FakeGraph, "replays", 0)
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
    assert _FakeGraph.replays == 4                  # calls 3..6 (call 2 captures)
    x = torch.full((3,), 10.0)
    _, _, held = plan([x, state])
    plan([torch.full((3,), 20.0), state])
    torch.testing.assert_close(held, x[1:])         # not overwritten by the next call's copy
    assert _FakeGraph.replays == 5


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
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(cuda_graphs, "MAX_OFFSET_WASTE", 1024)
    state = torch.zeros(3)
    plan = cuda_graphs.GraphedPlan(_adding_plan(state), "fwd", warmup=1)
    for i in range(3):
        big = torch.zeros(4096)
        x = big[4000:4003]                          # 16 kB into its storage, 12 bytes long
        x += i + 1
        out, = plan([x, state])
        torch.testing.assert_close(state, torch.full((3,), float(sum(range(1, i + 2)))))
        del out
    assert plan.disabled and plan.graph is None


N = 32          # elements: over cuda_graphs.COPY_OUT_ELEMENTS (tinier outputs are copied out)


def _by_address(t):
    """t's memory as a tensor that holds no reference to t's storage (a captured graph reads
    its inputs by address: it must not count as their holder)."""
    import ctypes
    return torch.frombuffer((ctypes.c_float * t.numel()).from_address(t.data_ptr()),
                            dtype=torch.float32)


def _mapping_plan(fn, n_out=1):
    """A plan computing fn(inputs) into fresh outputs (written on replay when captured)."""
    def run_plan(inputs):
        args = list(inputs)
        inputs.clear()
        outs = [torch.empty(N) for _ in range(n_out)]
        if _FakeGraph.capturing is not None:
            args = [_by_address(a) for a in args]

        def apply():
            for o, v in zip(outs, fn(*args)):
                o.copy_(v)
        if _FakeGraph.capturing is not None:
            _FakeGraph.capturing.recorded.append(apply)
        else:
            apply()
        return outs
    return run_plan


def _full(v):
    return torch.full((N,), float(v))


def _pair(monkeypatch):
    """A forward (x -> act, logits) and its backward (act -> grad) sharing one pool: the
    forward captured on its 2nd call and replaying from the 3rd, the backward captured on its
    4th, reading the forward's replayed activation in place (as compiler.py times them)."""
    from cherenkov.runtime import cuda_graphs
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(_FakeGraph, "replays", 0)
    group = cuda_graphs.PoolGroup()
    fwd = cuda_graphs.GraphedPlan(_mapping_plan(lambda x: (x * 2, x + 10), 2), "forward",
                                  warmup=1, group=group)
    bwd = cuda_graphs.GraphedPlan(_mapping_plan(lambda a: (a + 1,)), "backward", warmup=3,
                                  group=group)
    for _ in range(4):
        act, logits = fwd([_full(1)])
        del logits                            # not held while the backward runs
        grad, = bwd([act])
        torch.testing.assert_close(grad, _full(3))
        del act, grad
    assert fwd.graph is not None and bwd.graph is not None
    assert group.live() == [fwd, bwd] and bwd.static_slots == [True]
    return fwd, bwd


def test_a_forward_does_not_replay_over_its_backwards_held_outputs(monkeypatch):
    """The backward's capture may place its gradients on blocks the forward's replay writes:
    while a gradient is held (accumulation), the forward runs without its graph; once it is
    let go, the forward replays again."""
    fwd, bwd = _pair(monkeypatch)
    act, logits = fwd([_full(3)])
    del logits
    grad, = bwd([act])
    del act
    replays = _FakeGraph.replays
    act2, logits2 = fwd([_full(5)])                 # grad still held
    assert _FakeGraph.replays == replays
    torch.testing.assert_close(act2, _full(10))
    torch.testing.assert_close(grad, _full(7))
    del grad, act2, logits2
    out = fwd([_full(3)])
    assert _FakeGraph.replays == replays + 1
    torch.testing.assert_close(out[0], _full(6))


def test_a_recaptured_member_becomes_the_latest_in_its_pool(monkeypatch):
    """A forward that captures again takes blocks free now -- the backward's transient
    buffers' -- so it moves after the backward; the backward then sees its input moved,
    captures again and is the latest once more."""
    fwd, bwd = _pair(monkeypatch)
    fwd._release()
    assert fwd not in fwd.group.live()
    group = fwd.group
    # the forward captures again (the latest); the backward sees its input moved and lets go
    # of its graph; next call it captures again, reading the new replay buffers in place
    for after_fwd, after_bwd in (([bwd, fwd], [fwd]), ([fwd], [fwd, bwd])):
        act, logits = fwd([_full(1)])
        del logits
        assert group.live() == after_fwd
        grad, = bwd([act])
        assert group.live() == after_bwd
        torch.testing.assert_close(grad, _full(3))
        del act, grad
    replays = _FakeGraph.replays
    act, logits = fwd([_full(1)])
    del logits
    grad, = bwd([act])
    assert _FakeGraph.replays == replays + 2


def test_a_tiny_output_is_copied_out_and_a_graph_bypassed_on_every_call_is_given_up(
        monkeypatch):
    """A loss (tiny) kept from one step into the next call does not stop the replays: it is
    returned as a copy. A big output kept across calls makes each call run without the graph;
    after MAX_FALLBACKS such calls in a row the graph (and its pool) is given up."""
    from cherenkov.runtime import cuda_graphs
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(_FakeGraph, "replays", 0)

    def run_plan(inputs):
        x, = inputs
        inputs.clear()
        loss, big = torch.empty(()), torch.empty(N)

        def apply():
            loss.copy_(x.sum())
            big.copy_(x * 2)
        if _FakeGraph.capturing is not None:
            _FakeGraph.capturing.recorded.append(apply)
        else:
            apply()
        return [loss, big]
    plan = cuda_graphs.GraphedPlan(run_plan, "forward", warmup=1)
    losses = []
    for i in range(5):
        loss, big = plan([_full(i)])
        losses.append(loss)                         # every loss kept
        del big
    assert _FakeGraph.replays == 3 and plan.copied_out == {0}
    assert [v.item() for v in losses] == [N * i for i in range(5)]
    kept = []
    for i in range(cuda_graphs.MAX_FALLBACKS + 1):
        _, big = plan([_full(i)])
        kept.append(big)
        torch.testing.assert_close(big, _full(2 * i))
    assert plan.disabled and plan.graph is None
    assert all(torch.equal(b, _full(2 * i)) for i, b in enumerate(kept))


def test_a_plan_giving_up_its_graph_stays_watched_while_its_outputs_are_held(monkeypatch):
    """A backward bypassed on three calls in a row (its gradient kept) gives its graph up;
    its outputs may sit on blocks the forward's replay writes, so the forward keeps running
    without its graph until they are let go -- then it replays and the backward is
    forgotten."""
    from cherenkov.runtime import cuda_graphs
    fwd, bwd = _pair(monkeypatch)
    act, logits = fwd([_full(1)])
    del logits
    grad, = bwd([act])                                   # replayed: the graph's buffer
    for _ in range(cuda_graphs.MAX_FALLBACKS):
        torch.testing.assert_close(bwd([act])[0], _full(3))
    del act
    assert bwd.disabled and bwd.graph is None and bwd in fwd.group.live()
    replays = _FakeGraph.replays
    out = fwd([_full(4)])
    del out
    assert _FakeGraph.replays == replays                 # grad still held
    torch.testing.assert_close(grad, _full(3))
    del grad
    fwd([_full(4)])
    assert _FakeGraph.replays == replays + 1 and fwd.group.live() == [fwd]


def test_the_first_plan_in_its_pool_giving_up_keeps_nothing(monkeypatch):
    """A forward that gives its graph up (its loss-sized outputs kept by the caller each
    call) has no earlier member whose replay could overwrite them: its buffers are let go."""
    from cherenkov.runtime import cuda_graphs
    fwd, bwd = _pair(monkeypatch)
    kept = [fwd([_full(1)]) for _ in range(cuda_graphs.MAX_FALLBACKS + 1)]
    assert fwd.disabled and fwd.graph is None and fwd not in fwd.group.live()
    assert fwd.owned == [] and fwd.static_outputs == []
    for i, (act, logits) in enumerate(kept):
        torch.testing.assert_close(act, _full(2))


class _FakePools:
    """Stands in for the allocator's pool bookkeeping (CUDACachingAllocator): routing a
    thread into a pool, or capturing into it, is a use; a pool whose uses fell to zero keeps
    its live blocks but refuses new users, as the allocator asserts."""

    def __init__(self):
        self.uses: dict = {}
        self.routed: list = []
        self.streams: list = []          # the stream current at each routing

    def begin(self, device, pool):
        if self.uses.get(pool, 1) <= 0:
            raise RuntimeError("it->second->use_count > 0 INTERNAL ASSERT FAILED")
        self.uses[pool] = self.uses.get(pool, 0) + 1

    def route(self, device, pool):
        self.begin(device, pool)
        self.routed.append(pool)
        self.streams.append(_FakeStream.current)

    def release(self, device, pool):
        self.uses[pool] -= 1
        assert self.uses[pool] >= 0


def _fake_pool_routing(monkeypatch) -> _FakePools:
    pools = _FakePools()
    monkeypatch.setattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool", pools.route,
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", lambda device, pool: None,
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", pools.release, raising=False)
    _Capture.pools = pools
    return pools


def _pooled_adding_plan(monkeypatch, calls: int):
    """(the fake pools, the group, an adding plan warmed up twice in it) after `calls` calls."""
    from cherenkov.runtime import cuda_graphs
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(_FakeGraph, "replays", 0)
    pools = _fake_pool_routing(monkeypatch)
    group = cuda_graphs.PoolGroup(pooled=True)
    state = torch.zeros(3)
    plan = cuda_graphs.GraphedPlan(_adding_plan(state), "fwd", warmup=2, group=group)
    _add_calls(plan, state, calls)
    return pools, group, plan


def test_a_pooled_plan_warms_up_in_its_pool_and_captures_before_running(monkeypatch):
    """cuda_graphs_pooled: the warm-up calls allocate from the group's pool; the capturing
    call runs nothing itself -- its result is the first replay -- so an in-place update is
    applied once on every call, the capturing one included."""
    pools, group, plan = _pooled_adding_plan(monkeypatch, calls=5)
    pool = group.handle(0)
    # routed: the group's own hold on its pool, then the two warm-up calls (each let go after)
    assert pools.routed == [pool] * 3
    assert pools.uses[pool] == 2                # the group's hold and the capture
    # the warm-ups and the capture ran on the group's side stream (the allocator's free
    # blocks are per stream), which waited for the default stream's work first
    side = group.stream(0)
    assert pools.streams[1:] == [side, side] and _Capture.streams == [side]
    assert side.waits and _FakeStream.current is not side
    assert _FakeGraph.replays == 3          # the capturing call (the 3rd) replayed too
    assert plan.captures == 1 and group.live() == [plan]


def test_a_pooled_training_pair_matches_the_plain_one(monkeypatch):
    from cherenkov.runtime import cuda_graphs
    _fake_cuda(monkeypatch)
    monkeypatch.setattr(_FakeGraph, "replays", 0)
    _fake_pool_routing(monkeypatch)
    group = cuda_graphs.PoolGroup(pooled=True)
    fwd = cuda_graphs.GraphedPlan(_mapping_plan(lambda x: (x * 2, x + 10), 2), "forward",
                                  warmup=2, group=group)
    bwd = cuda_graphs.GraphedPlan(_mapping_plan(lambda a: (a + 1,)), "backward", warmup=4,
                                  group=group)
    for i in range(7):
        act, logits = fwd([_full(i)])
        torch.testing.assert_close(logits, _full(i + 10))
        del logits
        grad, = bwd([act])
        torch.testing.assert_close(grad, _full(2 * i + 1))
        del act, grad
    assert fwd.graph is not None and bwd.graph is not None and bwd.static_slots == [True]
    assert group.live() == [fwd, bwd]


def test_pooled_warm_ups_after_the_first_capture_stay_out_of_the_pool(monkeypatch):
    """A backward still warming up after its forward captured allocates outside the pool:
    there its gradients could take the forward's transient blocks, which the forward's
    replays overwrite with nothing watching. The backward captures one call after it first
    sees the forward's replay buffers (the forward's capturing call is its first replay)."""
    from cherenkov.runtime import cuda_graphs
    _fake_cuda(monkeypatch)
    pools = _fake_pool_routing(monkeypatch)
    group = cuda_graphs.PoolGroup(pooled=True)
    fwd = cuda_graphs.GraphedPlan(_mapping_plan(lambda x: (x * 2, x + 10), 2), "forward",
                                  warmup=2, group=group)
    bwd = cuda_graphs.GraphedPlan(_mapping_plan(lambda a: (a + 1,)), "backward", warmup=3,
                                  group=group)
    routed_by_call = []
    for i in range(5):
        before = len(pools.routed)
        act, logits = fwd([_full(i)])
        del logits
        grad, = bwd([act])
        torch.testing.assert_close(grad, _full(2 * i + 1))
        del act, grad
        routed_by_call.append(len(pools.routed) - before)
    # calls 1-2: both plans warm up in the pool; call 3: the forward captures, the backward's
    # last warm-up runs outside; call 4: the backward captures (reading in place)
    assert routed_by_call[1:] == [2, 0, 0, 0] and routed_by_call[0] == 3   # + the group's hold
    assert fwd.captures == 1 and bwd.captures == 1 and bwd.static_slots == [True]


def test_a_group_lets_its_pool_go_when_no_captured_plan_is_left(monkeypatch):
    """Once every plan captured in the pool is released (its graph gone), the group's use
    goes too -- the pool's blocks return to the device as their tensors go -- and a later
    capture takes a fresh pool, which the allocator would otherwise refuse."""
    pools, group, plan = _pooled_adding_plan(monkeypatch, calls=3)
    first = group.handle(0)
    plan._release()
    assert pools.uses[first] == 1               # the capture's own (its graph object's)
    assert group.handle(0) is not first and pools.uses[group.handle(0)] == 1


def test_a_pool_group_holds_its_pool_while_it_lives(monkeypatch):
    """The allocator refuses to route into a pool nobody uses any more: the group keeps one
    use for its whole life, so warm-ups one after another each find the pool open, and lets
    it go when the group goes."""
    import gc

    from cherenkov.runtime import cuda_graphs
    _fake_cuda(monkeypatch)
    pools = _fake_pool_routing(monkeypatch)
    group = cuda_graphs.PoolGroup(pooled=True)
    pool = group.handle(0)
    for _ in range(3):
        with cuda_graphs.allocating_in(pool, 0):
            pass
    assert pools.uses[pool] == 1 and group.handle(0) is pool
    del group
    gc.collect()
    assert pools.uses[pool] == 0


class _Member:
    """Stands in for a GraphedPlan in a pool group's bookkeeping."""

    def __init__(self, group, name, graph):
        from cherenkov.runtime.cuda_graphs import storage_uses
        self.group, self.name, self.graph = group, name, graph
        self.owned = [torch.zeros(3)]
        self.baseline = storage_uses(self.owned)

    def _release(self):
        self.group.forget(self)


def test_a_given_up_member_ahead_of_a_recaptured_plan_is_let_go_once_unheld():
    """A backward that gave up its graph while its gradients were held, then its forward
    capturing again (now behind it in the pool's order): once the gradients go, the given-up
    member goes too, wherever it stands (found in review: it used to stay, holding the pool)."""
    from cherenkov.runtime import cuda_graphs
    group = cuda_graphs.PoolGroup()
    given_up = _Member(group, "backward", graph=None)
    replaying = _Member(group, "forward", graph=object())
    group.captured(given_up)
    group.captured(replaying)
    held = given_up.owned[0].view(-1)
    assert group.clash(replaying) is None and given_up in group.live()     # still watched
    del held
    assert group.clash(replaying) is None and group.live() == [replaying]
