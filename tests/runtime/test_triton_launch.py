"""The launcher's one-time check of its direct path runs a kernel twice; a kernel that updates
an input in place (an optimizer step) must still take effect once. A stand-in for Triton's
JIT function records the launches, so this runs without a GPU."""
import torch

from cherenkov.runtime.triton_launch import TritonLaunch


class _Compiled:
    """What `fn.run` returns: a compiled kernel whose `run` is the direct launcher."""
    function = packed_metadata = None

    def __init__(self, body):
        self.body = body

    def run(self, *launch_args):
        self.body(*launch_args[9:])           # grid x3, stream, function, metadata, 3 hooks


class _JitFn:
    def __init__(self, body):
        self.body, self.launches = body, 0

    def run(self, *args, grid, warmup, **meta):
        self.launches += 1
        self.body(*args, *meta.values())
        return _Compiled(self.body)


def _bump(step, out, xblock):
    out.copy_(step + 1)


def test_in_place_update_applies_once_per_call_through_the_direct_path_check():
    TritonLaunch.stream = 0
    try:
        fn = _JitFn(_bump)
        launch = TritonLaunch(fn, grid=1, constexprs=(128,), options={}, n_outputs=1,
                              accumulates=False)
        step = torch.zeros(())
        for _ in range(4):
            launch(step, step)                 # reads the counter, writes it in place
        assert step.item() == 4.0
        assert launch.direct is True           # the direct path agreed with the regular one
    finally:
        TritonLaunch.stream = None


def test_out_of_place_kernel_check_keeps_results():
    TritonLaunch.stream = 0
    try:
        launch = TritonLaunch(_JitFn(_bump), 1, (128,), {}, 1, False)
        x, out = torch.full((3,), 2.0), torch.empty(3)
        for _ in range(3):
            launch(x, out)
        assert torch.equal(out, torch.full((3,), 3.0)) and torch.equal(x, torch.full((3,), 2.0))
    finally:
        TritonLaunch.stream = None


def test_large_outputs_are_not_copied_and_wait_for_a_verified_direct_path(monkeypatch):
    monkeypatch.setattr(TritonLaunch, "stream", 0)
    monkeypatch.setattr(TritonLaunch, "verified", False)
    monkeypatch.setattr(TritonLaunch, "CHECK_BYTES", 64)
    big_fn, small_fn = _JitFn(_bump), _JitFn(_bump)
    big = TritonLaunch(big_fn, 1, (128,), {}, 1, False)
    small = TritonLaunch(small_fn, 1, (128,), {}, 1, False)
    x, out = torch.zeros(100), torch.empty(100)          # 400 bytes of output: no copy
    for _ in range(3):
        big(x, out)
    assert big.direct is None and big_fn.launches == 3    # regular path, once per call
    s_in, s_out = torch.zeros(4), torch.empty(4)
    small(s_in, s_out)
    small(s_in, s_out)                                    # checked: direct == regular
    assert small.direct is True and TritonLaunch.verified
    big(x, out)
    assert big.direct is True and big_fn.launches == 3    # now direct, never run twice
    assert torch.equal(out, torch.ones(100))


def test_first_launches_are_counted_once_per_kernel(monkeypatch):
    """The first launch (loading the kernel, or compiling it) is what the backend reports as
    "first kernel launches" beside a graph's first run; later calls add nothing. A fake clock
    that ticks one second per reading stands in for the wall clock."""
    import types
    from cherenkov.runtime import triton_launch
    ticks = iter(range(1000))
    monkeypatch.setattr(triton_launch, "time",
                        types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    monkeypatch.setattr(TritonLaunch, "first_launch_s", 0.0)
    TritonLaunch.stream = 0
    try:
        launch = TritonLaunch(_JitFn(_bump), 1, (128,), {}, 1, False)
        x, out = torch.ones(2), torch.empty(2)
        for _ in range(4):
            launch(x, out)
        assert TritonLaunch.first_launch_s == 1.0      # one first launch, two clock readings
        assert torch.equal(out, x + 1)
    finally:
        TritonLaunch.stream = None


def test_same_bits_is_an_exact_comparison():
    """The direct-launch checks compare bytes: NaN matches only NaN, -0.0 is not 0.0, and
    scalars and bools compare too."""
    from cherenkov.runtime.triton_launch import same_bits
    nan = torch.tensor([1.0, float("nan")])
    assert same_bits(nan, nan.clone())
    assert not same_bits(nan, torch.tensor([1.0, 0.0]))
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert same_bits(torch.tensor(2.5), torch.tensor(2.5))
    assert same_bits(torch.tensor([True, False]), torch.tensor([True, False]))
    assert not same_bits(torch.zeros(2, 3), torch.zeros(3, 2))


def test_direct_launch_probe_runs_once_and_not_while_capturing(monkeypatch):
    """verify_direct_launch: a kernel's own passed check is enough; else the probe kernel runs
    once per process (not during a CUDA-graph capture, and not without CUDA)."""
    import sys
    import types
    from cherenkov.runtime import triton_launch as tlm
    monkeypatch.setattr(TritonLaunch, "verified", False)
    monkeypatch.setattr(TritonLaunch, "probed", False)
    probes = []
    fake = types.ModuleType("cherenkov.runtime.launch_probe")
    fake.direct_launch_matches = lambda device: probes.append(device) or True
    monkeypatch.setitem(sys.modules, "cherenkov.runtime.launch_probe", fake)
    monkeypatch.setattr(tlm.torch.cuda, "is_available", lambda: False)
    assert tlm.verify_direct_launch() is False and not probes
    monkeypatch.setattr(tlm.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tlm.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(tlm.torch.cuda, "is_current_stream_capturing", lambda: True)
    assert tlm.verify_direct_launch() is False and not probes
    monkeypatch.setattr(tlm.torch.cuda, "is_current_stream_capturing", lambda: False)
    assert tlm.verify_direct_launch() is True and probes == [0]
    assert tlm.verify_direct_launch() is True and probes == [0]


def test_a_failing_probe_keeps_the_regular_path(monkeypatch):
    import sys
    import types
    from cherenkov.runtime import triton_launch as tlm
    monkeypatch.setattr(TritonLaunch, "verified", False)
    monkeypatch.setattr(TritonLaunch, "probed", False)
    fake = types.ModuleType("cherenkov.runtime.launch_probe")

    def broken(device):
        raise TypeError("launcher takes other arguments")
    fake.direct_launch_matches = broken
    monkeypatch.setitem(sys.modules, "cherenkov.runtime.launch_probe", fake)
    monkeypatch.setattr(tlm.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tlm.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(tlm.torch.cuda, "is_current_stream_capturing", lambda: False)
    assert tlm.verify_direct_launch() is False
    assert tlm.verify_direct_launch() is False and TritonLaunch.probed


def test_probe_kernel_source_launches_in_the_interpreter():
    """The probe kernel itself is valid Triton (run here through the interpreter's regular
    path; the direct call needs a GPU)."""
    from cherenkov.runtime import launch_probe
    x = torch.arange(64, dtype=torch.float32) * 0.37
    y = torch.zeros_like(x)
    launch_probe._probe[(1,)](x, y, 37, 0.5, BLOCK=64)
    expected = torch.where(torch.arange(64) < 37, x * 0.5 + 37, torch.zeros(()))
    assert torch.equal(y, expected)
