"""The attention kernels' direct launcher (kernel_launch.py), with a fake Triton kernel:
which calls compile, when the direct path is checked and trusted, and what it keys on."""
import pytest
import torch

from cherenkov.attention import kernel_launch as kl


class FakeCompiled:
    """What `fn[grid](...)` returns: a kernel whose launcher `run` takes Triton's 9 leading args."""
    function = "fn-handle"
    packed_metadata = "meta"

    def __init__(self, owner, wrong=False):
        self.owner, self.wrong = owner, wrong

    def run(self, g0, g1, g2, stream, function, meta, launch_meta, enter, exit_, *args):
        assert (function, meta, launch_meta, enter, exit_) == ("fn-handle", "meta", None, None,
                                                               None)
        self.owner.direct_calls.append(((g0, g1, g2), args))
        x, out, scale, n, block = args
        out.copy_(x * scale + (1 if self.wrong else 0))


class FakeFn:
    """A @triton.jit stand-in: out = x * scale (n and BLOCK unused)."""

    def __init__(self, wrong=False):
        self.slow_calls, self.direct_calls, self.wrong = [], [], wrong

    def __getitem__(self, grid):
        def call(x, out, scale, n, BLOCK, num_warps, enable_fp_fusion=True):
            self.slow_calls.append(grid)
            out.copy_(x * scale)
            return FakeCompiled(self, self.wrong)
        return call


@pytest.fixture
def fake_gpu(monkeypatch):
    """CPU tensors treated as CUDA ones; the direct-path verdict reset around each test."""
    monkeypatch.setattr(kl, "_on_gpu", lambda t: True)
    monkeypatch.setattr(kl, "_raw_stream", lambda: 7)
    monkeypatch.setattr(kl.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(kl.torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(kl, "_hooked", lambda: False)
    monkeypatch.setitem(kl._state, "direct", None)
    monkeypatch.setattr(kl.TritonLaunch, "verified", False)


def _launch(la, x, out, n=64, scale=2.0):
    la((3, 1), (x, out, scale, n), {"BLOCK": 16}, (out,), num_warps=4)


def test_compiles_then_checks_once_then_launches_directly(fake_gpu):
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    _launch(la, x, out)                         # compiles through fn[grid]
    assert len(fn.slow_calls) == 1 and not fn.direct_calls
    _launch(la, x, out)                         # the check: both paths, outputs compared
    assert len(fn.slow_calls) == 2 and len(fn.direct_calls) == 1
    assert kl._state["direct"] is True
    _launch(la, x + 1, out, scale=3.0)          # trusted: the direct path only
    assert len(fn.slow_calls) == 2 and len(fn.direct_calls) == 2
    assert torch.equal(out, (x + 1) * 3.0)
    grid, args = fn.direct_calls[-1]
    assert grid == (3, 1, 1) and args[-1] == 16    # constexprs follow the runtime arguments


def test_mismatch_keeps_the_regular_path(fake_gpu):
    fn, x, out = FakeFn(wrong=True), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    _launch(la, x, out)
    _launch(la, x, out)
    assert kl._state["direct"] is False
    assert torch.equal(out, x * 2.0)            # the regular launch wrote last
    _launch(la, x, out)
    assert len(fn.direct_calls) == 1 and len(fn.slow_calls) == 3


@pytest.mark.parametrize("change", ["int_one", "int_div16", "int_wide", "misaligned", "dtype",
                                    "constexpr"])
def test_a_new_specialization_compiles_again(fake_gpu, change):
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    kl._state["direct"] = True
    _launch(la, x, out, n=24)
    _launch(la, x, out, n=40)                   # 24 and 40: same kind (not 1, not 16k, int32)
    assert len(fn.slow_calls) == 1 and len(fn.direct_calls) == 1
    if change == "int_one":
        _launch(la, x, out, n=1)
    elif change == "int_div16":
        _launch(la, x, out, n=32)
    elif change == "int_wide":
        _launch(la, x, out, n=2 ** 31 + 3)
    elif change == "misaligned":
        _launch(la, torch.arange(9.0)[1:], out, n=24)
    elif change == "dtype":
        _launch(la, x.double(), out.double(), n=24)
    else:
        la((3, 1), (x, out, 2.0, 24), {"BLOCK": 32}, (out,), num_warps=4)
    assert len(fn.slow_calls) == 2 and len(fn.direct_calls) == 1


def test_accumulating_kernels_wait_for_a_verdict(fake_gpu):
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    for _ in range(3):                          # no outputs to compare: regular launches
        la((1,), (x, out, 2.0, 8), {"BLOCK": 16}, (), num_warps=4)
    assert len(fn.slow_calls) == 3 and not fn.direct_calls
    kl.TritonLaunch.verified = True             # the compiler's launcher passed its check
    la((1,), (x, out, 2.0, 8), {"BLOCK": 16}, (), num_warps=4)
    assert len(fn.direct_calls) == 1


def test_cpu_tensors_take_the_regular_path():
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    for _ in range(3):
        _launch(la, x, out)
    assert len(fn.slow_calls) == 3 and not fn.direct_calls
    assert kl.launcher(fn) is kl.launcher(fn)


def test_no_check_while_a_cuda_graph_is_captured(fake_gpu, monkeypatch):
    """The check compares outputs on the host (a sync), which would break a capture."""
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    monkeypatch.setattr(kl.torch.cuda, "is_current_stream_capturing", lambda: True)
    for _ in range(3):
        _launch(la, x, out)
    assert len(fn.slow_calls) == 3 and not fn.direct_calls and kl._state["direct"] is None


def test_repeated_values_skip_classifying_arguments(fake_gpu, monkeypatch):
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    kl._state["direct"] = True
    calls = []
    real = kl._kind
    monkeypatch.setattr(kl, "_kind", lambda a: calls.append(a) or real(a))
    _launch(la, x, out, n=24)
    n_first = len(calls)
    assert n_first == 4                       # x, out, scale, n: classified once
    for _ in range(3):
        _launch(la, x, out, n=24)
    assert len(calls) == n_first and len(fn.direct_calls) == 3
    _launch(la, x, out, n=40)                 # new value, same kind: classified, no compile
    assert len(calls) == 2 * n_first and len(fn.slow_calls) == 1


def test_another_current_device_compiles_for_itself(fake_gpu, monkeypatch):
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    kl._state["direct"] = True
    _launch(la, x, out)
    _launch(la, x, out)
    assert (len(fn.slow_calls), len(fn.direct_calls)) == (1, 1)
    monkeypatch.setattr(kl.torch.cuda, "current_device", lambda: 1)
    _launch(la, x, out)                       # same values, other device: Triton's own path
    assert (len(fn.slow_calls), len(fn.direct_calls)) == (2, 1)


def test_nan_outputs_must_match_bit_for_bit(fake_gpu):
    """A direct launch writing 0 where the regular one writes NaN fails the check."""
    class NanFn(FakeFn):
        def __getitem__(self, grid):
            def call(x, out, scale, n, BLOCK, num_warps, enable_fp_fusion=True):
                self.slow_calls.append(grid)
                out.copy_(x * scale)
                out[0] = float("nan")
                return FakeCompiled(self)
            return call
    fn, x, out = NanFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    _launch(la, x, out)
    _launch(la, x, out)              # direct writes x * 2 (0 at [0]), regular NaN at [0]
    assert kl._state["direct"] is False


def test_launch_hooks_take_the_regular_path(fake_gpu, monkeypatch):
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    kl._state["direct"] = True
    _launch(la, x, out)
    monkeypatch.setattr(kl, "_hooked", lambda: True)
    _launch(la, x, out)
    assert len(fn.slow_calls) == 2 and not fn.direct_calls


def test_hook_detection_reads_tritons_knobs():
    assert kl._hooked() is False                  # no hook set in this process


def test_large_outputs_go_direct_once_the_process_probe_agrees(fake_gpu, monkeypatch):
    """Outputs too large to copy for the check (the suite's B=4 H=16 S=4096 calls) ask the
    process-wide probe (triton_launch.verify_direct_launch) instead of staying on fn[grid]."""
    fn, x, out = FakeFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    monkeypatch.setattr(kl, "CHECK_BYTES", 4)
    verdicts = []
    monkeypatch.setattr(kl, "verify_direct_launch", lambda: verdicts.append(False) or False)
    for _ in range(3):
        _launch(la, x, out)
    assert len(fn.slow_calls) == 3 and not fn.direct_calls and len(verdicts) == 2
    monkeypatch.setattr(kl, "verify_direct_launch", lambda: True)
    _launch(la, x + 1, out, scale=3.0)
    assert len(fn.slow_calls) == 3 and len(fn.direct_calls) == 1
    assert torch.equal(out, (x + 1) * 3.0)


def test_a_direct_launch_that_raises_falls_back_for_good(fake_gpu):
    class Refusing(FakeCompiled):
        def run(self, *args):
            raise TypeError("unsupported argument")

    class RefusingFn(FakeFn):
        def __getitem__(self, grid):
            def call(x, out, scale, n, BLOCK, num_warps, enable_fp_fusion=True):
                self.slow_calls.append(grid)
                out.copy_(x * scale)
                return Refusing(self)
            return call
    fn, x, out = RefusingFn(), torch.arange(8.0), torch.empty(8)
    la = kl.Launcher(fn)
    kl._state["direct"] = True
    _launch(la, x, out)
    _launch(la, x + 1, out)                  # direct raises: the regular launch runs instead
    assert kl._state["direct"] is False and len(fn.slow_calls) == 2
    assert torch.equal(out, (x + 1) * 2.0)


class DescFn(FakeFn):
    """A kernel taking a host TensorDescriptor first: out = desc.base * scale."""

    def __getitem__(self, grid):
        owner = self

        class Compiled(FakeCompiled):
            def run(self, g0, g1, g2, stream, function, meta, launch_meta, enter, exit_, *args):
                owner.direct_calls.append(((g0, g1, g2), args))
                desc, out, scale, n, block = args
                out.copy_(desc.base.reshape(-1) * scale)

        def call(desc, out, scale, n, BLOCK, num_warps, enable_fp_fusion=True):
            self.slow_calls.append(grid)
            out.copy_(desc.base.reshape(-1) * scale)
            return Compiled(self)
        return call


def test_descriptor_arguments_key_on_dtype_block_and_rank(fake_gpu):
    Desc = kl.descriptor_class()
    if Desc is None:
        pytest.skip("this Triton has no host TensorDescriptor")
    fn, out = DescFn(), torch.empty(64)
    la = kl.Launcher(fn)
    kl._state["direct"] = True

    def launch(base, block):
        la((1,), (Desc.from_tensor(base, block), out, 2.0, 24), {"BLOCK": 16}, (out,),
           num_warps=4)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    launch(a, [4, 8])                         # compiles
    launch(b, [4, 8])                         # another base, same kind: the direct path
    assert (len(fn.slow_calls), len(fn.direct_calls)) == (1, 1)
    assert torch.equal(out, b.reshape(-1) * 2.0)
    assert kl._kind(Desc.from_tensor(a, [4, 8])) == kl._kind(Desc.from_tensor(b, [4, 8]))
    launch(b, [8, 8])                         # another block shape: compiled again
    launch(b.double(), [4, 8])                # another element type: compiled again
    launch(b.reshape(64), [16])               # another rank: compiled again
    assert (len(fn.slow_calls), len(fn.direct_calls)) == (4, 1)


def test_gluon_descriptors_key_on_their_layout_too(fake_gpu):
    Desc = kl.gluon_descriptor_class()
    if Desc is None:
        pytest.skip("this Triton has no Gluon Hopper TensorDescriptor")
    from triton.experimental.gluon import language as gl
    fn, out = DescFn(), torch.empty(64)
    la = kl.Launcher(fn)
    kl._state["direct"] = True

    def desc(base, swizzle):
        layout = gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=32, rank=2)
        return Desc(base, list(base.shape), list(base.stride()), [4, 8], layout)

    def launch(base, swizzle):
        la((1,), (desc(base, swizzle), out, 2.0, 24), {"BLOCK": 16}, (out,), num_warps=4)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    launch(a, 32)                             # compiles
    launch(b, 32)                             # another base, same kind: the direct path
    assert (len(fn.slow_calls), len(fn.direct_calls)) == (1, 1)
    assert torch.equal(out, b.reshape(-1) * 2.0)
    launch(b, 0)                              # another shared-memory layout: compiled again
    assert (len(fn.slow_calls), len(fn.direct_calls)) == (2, 1)


def test_a_descriptor_is_on_the_device_of_its_base():
    Desc = kl.descriptor_class()
    if Desc is None:
        pytest.skip("this Triton has no host TensorDescriptor")
    base = torch.randn(8, 8)
    assert not kl._on_gpu(Desc.from_tensor(base, [4, 8]))


def test_descriptors_are_validated_once_per_kind():
    Desc = kl.descriptor_class()
    if Desc is None:
        pytest.skip("this Triton has no host TensorDescriptor")
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    first = kl.descriptor(Desc, a, a.shape, a.stride(), (4, 8))
    again = kl.descriptor(Desc, b, b.shape, b.stride(), (4, 8))
    assert again.base is b and first.base is a
    assert vars(again) == {**vars(first), "base": b}
    assert vars(again) == vars(Desc(b, [8, 8], [8, 1], [4, 8]))
    with pytest.raises(AssertionError, match="aligned"):     # the constructor's own check
        kl.descriptor(Desc, torch.randn(65)[1:].view(8, 8), (8, 8), (8, 1), (4, 8))
    with pytest.raises((AssertionError, ValueError)):        # a bad kind gets no template
        kl.descriptor(Desc, a, a.shape, a.stride(), (4, 7))
