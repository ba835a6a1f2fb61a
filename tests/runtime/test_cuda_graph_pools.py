"""CUDA-graph plans sharing one memory pool (a training graph's forward and backward,
cuda_graphs.PoolGroup): replays never overwrite a held output, given-up graphs, pooled
warm-ups and captures, the pool's use counts; on CPU tensors with stand-ins for CUDA."""
import torch

from tests.runtime.cuda_graph_fakes import (N, Capture, FakeGraph, FakeStream, add_calls,
                                             adding_plan, fake_cuda, fake_pool_routing, full,
                                             mapping_plan)


def _pair(monkeypatch):
    """A forward (x -> act, logits) and its backward (act -> grad) sharing one pool: the
    forward captured on its 2nd call and replaying from the 3rd, the backward captured on its
    4th, reading the forward's replayed activation in place (as compiler.py times them)."""
    from cherenkov.runtime import cuda_graphs
    fake_cuda(monkeypatch)
    monkeypatch.setattr(FakeGraph, "replays", 0)
    group = cuda_graphs.PoolGroup()
    fwd = cuda_graphs.GraphedPlan(mapping_plan(lambda x: (x * 2, x + 10), 2), "forward",
                                  warmup=1, group=group)
    bwd = cuda_graphs.GraphedPlan(mapping_plan(lambda a: (a + 1,)), "backward", warmup=3,
                                  group=group)
    for _ in range(4):
        act, logits = fwd([full(1)])
        del logits                            # not held while the backward runs
        grad, = bwd([act])
        torch.testing.assert_close(grad, full(3))
        del act, grad
    assert fwd.graph is not None and bwd.graph is not None
    assert group.live() == [fwd, bwd] and bwd.static_slots == [True]
    return fwd, bwd


def test_a_forward_does_not_replay_over_its_backwards_held_outputs(monkeypatch):
    """The backward's capture may place its gradients on blocks the forward's replay writes:
    while a gradient is held (accumulation), the forward runs without its graph; once it is
    let go, the forward replays again."""
    fwd, bwd = _pair(monkeypatch)
    act, logits = fwd([full(3)])
    del logits
    grad, = bwd([act])
    del act
    replays = FakeGraph.replays
    act2, logits2 = fwd([full(5)])                 # grad still held
    assert FakeGraph.replays == replays
    torch.testing.assert_close(act2, full(10))
    torch.testing.assert_close(grad, full(7))
    del grad, act2, logits2
    out = fwd([full(3)])
    assert FakeGraph.replays == replays + 1
    torch.testing.assert_close(out[0], full(6))


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
        act, logits = fwd([full(1)])
        del logits
        assert group.live() == after_fwd
        grad, = bwd([act])
        assert group.live() == after_bwd
        torch.testing.assert_close(grad, full(3))
        del act, grad
    replays = FakeGraph.replays
    act, logits = fwd([full(1)])
    del logits
    grad, = bwd([act])
    assert FakeGraph.replays == replays + 2


def test_a_tiny_output_is_copied_out_and_a_graph_bypassed_on_every_call_is_given_up(
        monkeypatch):
    """A loss (tiny) kept from one step into the next call does not stop the replays: it is
    returned as a copy. A big output kept across calls makes each call run without the graph;
    after MAX_FALLBACKS such calls in a row the graph (and its pool) is given up."""
    from cherenkov.runtime import cuda_graphs
    fake_cuda(monkeypatch)
    monkeypatch.setattr(FakeGraph, "replays", 0)

    def run_plan(inputs):
        x, = inputs
        inputs.clear()
        loss, big = torch.empty(()), torch.empty(N)

        def apply():
            loss.copy_(x.sum())
            big.copy_(x * 2)
        if FakeGraph.capturing is not None:
            FakeGraph.capturing.recorded.append(apply)
        else:
            apply()
        return [loss, big]
    plan = cuda_graphs.GraphedPlan(run_plan, "forward", warmup=1)
    losses = []
    for i in range(5):
        loss, big = plan([full(i)])
        losses.append(loss)                         # every loss kept
        del big
    assert FakeGraph.replays == 3 and plan.copied_out == {0}
    assert [v.item() for v in losses] == [N * i for i in range(5)]
    kept = []
    for i in range(cuda_graphs.MAX_FALLBACKS + 1):
        _, big = plan([full(i)])
        kept.append(big)
        torch.testing.assert_close(big, full(2 * i))
    assert plan.disabled and plan.graph is None
    assert all(torch.equal(b, full(2 * i)) for i, b in enumerate(kept))


def test_a_plan_giving_up_its_graph_stays_watched_while_its_outputs_are_held(monkeypatch):
    """A backward bypassed on three calls in a row (its gradient kept) gives its graph up;
    its outputs may sit on blocks the forward's replay writes, so the forward keeps running
    without its graph until they are let go -- then it replays and the backward is
    forgotten."""
    from cherenkov.runtime import cuda_graphs
    fwd, bwd = _pair(monkeypatch)
    act, logits = fwd([full(1)])
    del logits
    grad, = bwd([act])                                   # replayed: the graph's buffer
    for _ in range(cuda_graphs.MAX_FALLBACKS):
        torch.testing.assert_close(bwd([act])[0], full(3))
    del act
    assert bwd.disabled and bwd.graph is None and bwd in fwd.group.live()
    replays = FakeGraph.replays
    out = fwd([full(4)])
    del out
    assert FakeGraph.replays == replays                 # grad still held
    torch.testing.assert_close(grad, full(3))
    del grad
    fwd([full(4)])
    assert FakeGraph.replays == replays + 1 and fwd.group.live() == [fwd]


def test_the_first_plan_in_its_pool_giving_up_keeps_nothing(monkeypatch):
    """A forward that gives its graph up (its loss-sized outputs kept by the caller each
    call) has no earlier member whose replay could overwrite them: its buffers are let go."""
    from cherenkov.runtime import cuda_graphs
    fwd, bwd = _pair(monkeypatch)
    kept = [fwd([full(1)]) for _ in range(cuda_graphs.MAX_FALLBACKS + 1)]
    assert fwd.disabled and fwd.graph is None and fwd not in fwd.group.live()
    assert fwd.owned == [] and fwd.static_outputs == []
    for i, (act, logits) in enumerate(kept):
        torch.testing.assert_close(act, full(2))


def _pooled_adding_plan(monkeypatch, calls: int):
    """(the fake pools, the group, an adding plan warmed up twice in it) after `calls` calls."""
    from cherenkov.runtime import cuda_graphs
    fake_cuda(monkeypatch)
    monkeypatch.setattr(FakeGraph, "replays", 0)
    pools = fake_pool_routing(monkeypatch)
    group = cuda_graphs.PoolGroup(pooled=True)
    state = torch.zeros(3)
    plan = cuda_graphs.GraphedPlan(adding_plan(state), "fwd", warmup=2, group=group)
    add_calls(plan, state, calls)
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
    assert pools.streams[1:] == [side, side] and Capture.streams == [side]
    assert side.waits and FakeStream.current is not side
    assert FakeGraph.replays == 3          # the capturing call (the 3rd) replayed too
    assert plan.captures == 1 and group.live() == [plan]


def test_a_pooled_training_pair_matches_the_plain_one(monkeypatch):
    from cherenkov.runtime import cuda_graphs
    fake_cuda(monkeypatch)
    monkeypatch.setattr(FakeGraph, "replays", 0)
    fake_pool_routing(monkeypatch)
    group = cuda_graphs.PoolGroup(pooled=True)
    fwd = cuda_graphs.GraphedPlan(mapping_plan(lambda x: (x * 2, x + 10), 2), "forward",
                                  warmup=2, group=group)
    bwd = cuda_graphs.GraphedPlan(mapping_plan(lambda a: (a + 1,)), "backward", warmup=4,
                                  group=group)
    for i in range(7):
        act, logits = fwd([full(i)])
        torch.testing.assert_close(logits, full(i + 10))
        del logits
        grad, = bwd([act])
        torch.testing.assert_close(grad, full(2 * i + 1))
        del act, grad
    assert fwd.graph is not None and bwd.graph is not None and bwd.static_slots == [True]
    assert group.live() == [fwd, bwd]


def test_pooled_warm_ups_after_the_first_capture_stay_out_of_the_pool(monkeypatch):
    """A backward still warming up after its forward captured allocates outside the pool:
    there its gradients could take the forward's transient blocks, which the forward's
    replays overwrite with nothing watching. The backward captures one call after it first
    sees the forward's replay buffers (the forward's capturing call is its first replay)."""
    from cherenkov.runtime import cuda_graphs
    fake_cuda(monkeypatch)
    pools = fake_pool_routing(monkeypatch)
    group = cuda_graphs.PoolGroup(pooled=True)
    fwd = cuda_graphs.GraphedPlan(mapping_plan(lambda x: (x * 2, x + 10), 2), "forward",
                                  warmup=2, group=group)
    bwd = cuda_graphs.GraphedPlan(mapping_plan(lambda a: (a + 1,)), "backward", warmup=3,
                                  group=group)
    routed_by_call = []
    for i in range(5):
        before = len(pools.routed)
        act, logits = fwd([full(i)])
        del logits
        grad, = bwd([act])
        torch.testing.assert_close(grad, full(2 * i + 1))
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
    fake_cuda(monkeypatch)
    pools = fake_pool_routing(monkeypatch)
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
