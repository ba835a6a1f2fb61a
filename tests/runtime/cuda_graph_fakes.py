"""Stand-ins for CUDA on the CPU, for the CUDA-graph wrapper's tests: a graph that records what
runs while capturing and applies it on each replay, streams, events, the allocator's pool
bookkeeping, and small plans (an in-place adder, a mapping into fresh outputs)."""
import torch


class FakeGraph:
    """Stands in for torch.cuda.CUDAGraph on the CPU: what runs while capturing is recorded,
    not applied, and applied on each replay (as a real capture and replay would)."""
    capturing = None

    def __init__(self):
        self.recorded = []

    replays = 0

    def replay(self):
        FakeGraph.replays += 1
        for fn in self.recorded:
            fn()


class FakeStream:
    """Stands in for torch.cuda.Stream: `current` is the stream work is issued on."""
    current = None

    def __init__(self, device=None):
        self.waits = []

    def wait_stream(self, other):
        self.waits.append(other)


class OnStream:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        self.before, FakeStream.current = FakeStream.current, self.stream

    def __exit__(self, *exc):
        FakeStream.current = self.before


class Capture:
    def __init__(self, graph, pool=None, stream=None):
        self.graph = graph
        self.pool = pool
        self.stream = stream
        Capture.streams.append(stream)

    streams: list = []          # the stream each capture was asked to run on

    pools = None                # the FakePools a capture into a pool counts in, if any

    def __enter__(self):
        if self.pool is not None and Capture.pools is not None:
            Capture.pools.begin(0, self.pool)
        FakeGraph.capturing = self.graph

    def __exit__(self, *exc):
        FakeGraph.capturing = None


class FakeEvent:
    gpu_ms = 1.0            # what every timed run "took" on the GPU

    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return FakeEvent.gpu_ms


def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", Capture)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(Capture, "pools", None)
    monkeypatch.setattr(Capture, "streams", [])
    default = FakeStream()
    monkeypatch.setattr(FakeStream, "current", default)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", OnStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: FakeStream.current)
    fake_pool_routing(monkeypatch)


def adding_plan(state):
    """A plan adding its input into `state` in place (applied on replay when captured)."""
    def run_plan(inputs):
        x, s = inputs
        out = torch.empty(3)

        def apply():
            s.add_(x)
            out.copy_(s)
        if FakeGraph.capturing is not None:
            FakeGraph.capturing.recorded.append(apply)
        else:
            apply()
        inputs.clear()
        return [out]
    return run_plan


def add_calls(plan, state, calls: int) -> None:
    """Call an `adding_plan` `calls` times: after each, the state holds every addition once."""
    total = torch.zeros(3)
    for i in range(calls):
        x = torch.full((3,), float(i + 1))
        total += x
        out, = plan([x, state])
        torch.testing.assert_close(state, total)
        torch.testing.assert_close(out, total)
        del out


N = 32          # elements: over cuda_graphs.COPY_OUT_ELEMENTS (tinier outputs are copied out)


def by_address(t):
    """t's memory as a tensor that holds no reference to t's storage (a captured graph reads
    its inputs by address: it must not count as their holder)."""
    import ctypes
    return torch.frombuffer((ctypes.c_float * t.numel()).from_address(t.data_ptr()),
                            dtype=torch.float32)


def mapping_plan(fn, n_out=1):
    """A plan computing fn(inputs) into fresh outputs (written on replay when captured)."""
    def run_plan(inputs):
        args = list(inputs)
        inputs.clear()
        outs = [torch.empty(N) for _ in range(n_out)]
        if FakeGraph.capturing is not None:
            args = [by_address(a) for a in args]

        def apply():
            for o, v in zip(outs, fn(*args)):
                o.copy_(v)
        if FakeGraph.capturing is not None:
            FakeGraph.capturing.recorded.append(apply)
        else:
            apply()
        return outs
    return run_plan


def full(v):
    return torch.full((N,), float(v))


class FakePools:
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
        self.streams.append(FakeStream.current)

    def release(self, device, pool):
        self.uses[pool] -= 1
        assert self.uses[pool] >= 0


def fake_pool_routing(monkeypatch) -> FakePools:
    pools = FakePools()
    monkeypatch.setattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool", pools.route,
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", lambda device, pool: None,
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", pools.release, raising=False)
    Capture.pools = pools
    return pools
